"""The single stream's prompts: text, generated once per bench inside the image with the
model's own tokenizer, written as a JSONL for bench_serving's ``custom`` dataset.

sglang 0.5.14's ``random-ids`` dataset never reads ``--apply-chat-template`` (only sharegpt and
custom do: ``benchmark/datasets/custom.py:28-38`` passes ``args.apply_chat_template`` on, and
``sample_custom_requests`` wraps each prompt with ``tokenizer.apply_chat_template(...,
add_generation_prompt=True, tokenize=False)``, drops the BOS text and counts the encoded
length, ``custom.py:111-123``). So the case study's "10k in with the chat template" needs text
prompts through ``custom``. The program below measures each prompt the way ``custom.py`` will,
so the templated prompt is ``input_len`` tokens (at most; the server's count confirms it).
"""

from __future__ import annotations

# Run as `python3 -c PROGRAM TOKENIZER OUT INPUT_LEN NUM_PROMPTS CHAT(0|1)` in the image.
PROGRAM = r"""
import json, sys
from transformers import AutoTokenizer

path, out = sys.argv[1], sys.argv[2]
n_in, n, chat = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
tok = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
words = (
    "a patient engineer measures how quickly a serving node decodes long answers while the "
    "queue of requests grows and the cache keeps the shared context warm for the next one"
).split()


def measured(text):
    if chat:
        text = tok.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
        )
        if tok.bos_token:
            text = text.replace(tok.bos_token, "")
    return len(tok.encode(text))


def prompt(i, k):
    head = f"Request {i}. Continue this text at length:\n"
    return head + " ".join(words[j % len(words)] for j in range(k))


with open(out, "w", encoding="utf-8") as f:
    for i in range(n):
        lo, hi = 1, 2 * n_in
        while lo < hi:  # the most words whose prompt is at most n_in tokens
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if measured(prompt(i, mid)) <= n_in else (lo, mid - 1)
        row = {"conversations": [{"content": prompt(i, lo)}, {"content": "ok ok ok"}]}
        f.write(json.dumps(row) + "\n")
print(f"wrote {n} prompts of at most {n_in} tokens to {out}")
"""


def program_args(
    tokenizer: str, out: str, input_len: int, num_prompts: int, chat: bool
) -> list[str]:
    """``python3 -c`` and its arguments: write ``num_prompts`` prompts to ``out``."""
    return [
        "python3",
        "-c",
        PROGRAM,
        tokenizer,
        out,
        str(input_len),
        str(num_prompts),
        "1" if chat else "0",
    ]
