"""TEST DOUBLE -- NOT SGLANG. A stand-in for sglang's HTTP server, for sglforge's smoke tests.

There is no GPU where sglforge's tests run, so the smoke runner is tested against this small
stdlib-only (``http.server``) program instead of a real model. It is copied into the stand-in
image as ``sglang/launch_server.py`` so that ``python3 -m sglang.launch_server ...`` starts it,
exactly as the real image would start sglang. Nothing here loads a model or decodes anything:
the "tokens" are words, the "speculative decoding" figures are arithmetic, and every log line
it prints starts with ``[STAND-IN]`` so nobody mistakes its log for a real server's.

What it imitates (the shapes sglforge reads):

- sglang's launch flags used by ``smoke/*.toml``, parsed with argparse; unknown flags are
  rejected (exit 2) as sglang's own parser does.
- ``--model-path`` must be a folder holding ``config.json`` (the server fails to start
  otherwise, as sglang does).
- ``GET /health``, ``GET /health_generate``, ``GET /server_info`` (``internal_states[*]``
  with ``avg_spec_accept_length``), ``GET /get_server_info`` (older servers),
  ``GET /v1/models``, ``POST /generate`` (``meta_info`` with ``completion_tokens``,
  ``spec_accept_length``, ``spec_verify_ct``, ``e2e_latency``; ``"stream": true`` gives
  ``data: {...}`` server-sent events ending with ``data: [DONE]``), and
  ``POST /v1/chat/completions``.
- Simple arithmetic questions ("What is 17 + 25?") are answered correctly.

Fault injection through the environment (comma-separated faults in ``STANDIN_FAULT``):

- ``crash``: dies while "loading weights" with a traceback (the MXFP4 MTP shape mismatch).
- ``crash-later``: becomes ready, then dies on the first ``/generate`` or chat request.
- ``hang``: never finishes loading (never listens).
- ``wrong``: answers arithmetic off by one.
- ``empty``: generates empty text.
- ``low-accept``: reports a speculative accept length of 1.3.
- ``slow``: decodes at 4 tokens/s (``STANDIN_DECODE_TOK_S`` sets any speed).
- ``forbidden-log``: prints aiter's MoE "default"/heuristic FlyDSL fallback lines.
- ``old-api``: answers ``/get_server_info`` only (``/server_info`` is a 404), like old sglang.

Other knobs: ``STANDIN_LOAD_SECONDS`` (default 0.5) before listening, ``STANDIN_CRASH_AFTER``
(seconds into loading before ``crash``, default 0.3), ``STANDIN_ACCEPT_LENGTH`` (default 3.4).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BANNER = "sglforge STAND-IN sglang server (TEST DOUBLE, not sglang; no model is loaded)"
FAULTS = frozenset(
    {
        "crash",
        "crash-later",
        "hang",
        "wrong",
        "empty",
        "low-accept",
        "slow",
        "forbidden-log",
        "old-api",
    }
)
WORDS = (
    "the quick model serves tokens on eight accelerators while the draft head proposes "
    "several guesses and the target verifies them in one pass"
).split()


def log(message: str) -> None:
    """One log line, stamped and loudly labelled as coming from the test double."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[STAND-IN] [{stamp}] {message}", flush=True)


def sglang_version() -> str:
    """The version of the (stand-in) sglang package this runs from, if any."""
    try:
        from sglang.version import __version__  # type: ignore[import-not-found]

        return str(__version__)
    except Exception:  # noqa: BLE001 - run straight from tests/standin/ there is no package
        return "0.0.0+standin"


def build_parser() -> argparse.ArgumentParser:
    """sglang's launch flags that sglforge's scenarios use (and a few common neighbours)."""
    p = argparse.ArgumentParser(prog="launch_server.py", description=BANNER)
    p.add_argument("--model-path", "--model", dest="model_path", required=True)
    p.add_argument("--tokenizer-path")
    p.add_argument("--served-model-name")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tp-size", "--tp", dest="tp_size", type=int, default=1)
    p.add_argument("--dp-size", "--dp", dest="dp_size", type=int, default=1)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--quantization")
    p.add_argument(
        "--kv-cache-dtype",
        default="auto",
        choices=["auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1"],
    )
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--context-length", type=int)
    p.add_argument("--chunked-prefill-size", type=int)
    p.add_argument("--max-running-requests", type=int)
    p.add_argument("--cuda-graph-max-bs", type=int)
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--disable-radix-cache", action="store_true")
    p.add_argument("--attention-backend")
    p.add_argument("--random-seed", type=int)
    p.add_argument("--watchdog-timeout", type=float, default=300.0)
    p.add_argument("--log-level", default="info")
    p.add_argument("--enable-aiter-allreduce-fusion", action="store_true")
    p.add_argument(
        "--speculative-algorithm", choices=["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]
    )
    p.add_argument("--speculative-draft-model-path")
    p.add_argument("--speculative-num-steps", type=int)
    p.add_argument("--speculative-eagle-topk", type=int)
    p.add_argument("--speculative-num-draft-tokens", type=int)
    return p


class Engine:
    """The fake model: deterministic words, arithmetic, timing and speculative statistics."""

    def __init__(
        self, args: argparse.Namespace, faults: frozenset[str], env: dict | None = None
    ) -> None:
        env = dict(os.environ if env is None else env)
        self.args = args
        self.faults = faults
        self.spec = args.speculative_algorithm is not None
        default_speed = 4.0 if "slow" in faults else 400.0
        self.tok_s = float(env.get("STANDIN_DECODE_TOK_S", default_speed))
        accept = 1.3 if "low-accept" in faults else float(env.get("STANDIN_ACCEPT_LENGTH", "3.4"))
        # With top-k 1 a verify step can accept at most num_steps + 1 tokens.
        if args.speculative_num_steps:
            accept = min(accept, args.speculative_num_steps + 1)
        self.accept = accept if self.spec else 1.0
        self.lock = threading.Lock()
        self.total_tokens = 0
        self.total_verify = 0
        self.last_throughput = 0.0
        self.requests = 0

    def answer(self, prompt: str) -> str | None:
        """The answer to the last simple arithmetic question in ``prompt``, if there is one."""
        found = re.findall(r"(-?\d+)\s*([-+*/x\u00d7])\s*(-?\d+)", prompt)
        if not found:
            return None
        a, op, b = found[-1]
        x, y = int(a), int(b)
        if op == "+":
            value = x + y
        elif op == "-":
            value = x - y
        elif op in ("*", "x", "\u00d7"):
            value = x * y
        else:
            value = x // y if y else 0
        if "wrong" in self.faults:
            value += 1
        return str(value)

    def words(self, prompt: str, n: int, ignore_eos: bool) -> tuple[list[str], str]:
        """The output words for ``prompt`` and the finish reason type."""
        if "empty" in self.faults:
            return [], "stop"
        answer = self.answer(prompt)
        seed = int(hashlib.sha256(prompt.encode()).hexdigest()[:8], 16)
        filler = [WORDS[(seed + i) % len(WORDS)] for i in range(n + 8)]
        out = ["The", "answer", "is", f"{answer}."] if answer is not None else []
        natural = len(out) if answer is not None else 16
        if ignore_eos or natural >= n:
            out = (out + filler)[:n]
            return out, "length"
        return (out + filler)[:natural], "stop"

    def generate(self, prompt: str, params: dict, emit=None, internal: bool = False) -> dict:
        """Produce one completion, sleeping like a decoder would; ``emit`` gets stream chunks."""
        if "crash-later" in self.faults and not internal:
            log("Scheduler hit an exception: Traceback (most recent call last):")
            log('  File "scheduler.py", line 1, in event_loop_overlap')
            log("RuntimeError: HIP error: an illegal memory access was encountered")
            os._exit(1)
        started = time.monotonic()
        n = int(params.get("max_new_tokens", 128))
        words, finish = self.words(prompt, max(n, 0), bool(params.get("ignore_eos")))
        prompt_tokens = max(1, len(prompt.split()))
        time.sleep(0.005)  # "prefill"
        # The first token comes from prefill; after that each verify step yields ~accept tokens.
        done, verify = 0, 0
        carry = 0.0
        while done < len(words):
            if done == 0:
                step = 1
            else:
                carry += self.accept
                step = max(1, int(carry))
                carry -= step
                verify += 1
            step = min(step, len(words) - done)
            time.sleep(step / self.tok_s)
            done += step
            if emit is not None:
                emit(words[:done], self._meta(prompt_tokens, done, verify, started, None))
        meta = self._meta(prompt_tokens, len(words), verify, started, finish)
        with self.lock:
            self.requests += 1
            if self.spec and verify:
                self.total_tokens += len(words) - 1
                self.total_verify += verify
            elapsed = time.monotonic() - started
            self.last_throughput = len(words) / elapsed if elapsed > 0 else 0.0
        return {"text": " ".join(words), "meta_info": meta}

    def _meta(
        self, prompt_tokens: int, done: int, verify: int, started: float, finish: str | None
    ) -> dict:
        meta: dict = {
            "id": hashlib.sha1(f"{started}".encode()).hexdigest()[:16],
            "finish_reason": None
            if finish is None
            else (
                {"type": "length", "length": done}
                if finish == "length"
                else {"type": "stop", "matched": None}
            ),
            "prompt_tokens": prompt_tokens,
            "completion_tokens": done,
            "cached_tokens": 0,
            "e2e_latency": time.monotonic() - started,
        }
        if self.spec:
            meta["spec_verify_ct"] = verify
            # Tokens per verify step, counting the bonus token (the first token is prefill's).
            meta["spec_accept_length"] = (done - 1) / verify if verify else 0.0
        return meta

    def internal_state(self) -> dict:
        state: dict = {
            "last_gen_throughput": self.last_throughput,
            "memory_usage": {"weight": 0.0, "kvcache": 0.0, "token_capacity": 0},
        }
        if self.spec:
            with self.lock:
                avg = self.total_tokens / self.total_verify if self.total_verify else 0.0
            state["avg_spec_accept_length"] = avg
        return state


def make_handler(engine: Engine, server_info: dict):
    """The request handler class bound to one engine."""
    model_name = engine.args.served_model_name or engine.args.model_path

    class Handler(BaseHTTPRequestHandler):
        server_version = "standin-sglang"

        def log_message(self, format: str, *args) -> None:  # noqa: A002 - stdlib's name
            log(f'{self.client_address[0]} "{self.requestline}" {args[1] if len(args) > 1 else ""}')

        def _json(self, code: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> dict:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b"{}"
            return json.loads(raw or b"{}")

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.split("?", 1)[0]
            if path == "/health":
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif path == "/health_generate":
                engine.generate("health", {"max_new_tokens": 1}, internal=True)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif path in ("/server_info", "/get_server_info"):
                if path == "/server_info" and "old-api" in engine.faults:
                    self._json(404, {"detail": "Not Found"})
                    return
                self._json(
                    200,
                    {
                        **server_info,
                        "internal_states": [engine.internal_state()],
                        "version": sglang_version(),
                    },
                )
            elif path == "/v1/models":
                self._json(
                    200,
                    {
                        "object": "list",
                        "data": [
                            {
                                "id": model_name,
                                "object": "model",
                                "created": int(time.time()),
                                "owned_by": "sglang",
                                "root": model_name,
                                "max_model_len": 8192,
                            }
                        ],
                    },
                )
            else:
                self._json(404, {"detail": "Not Found"})

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.split("?", 1)[0]
            try:
                body = self._body()
            except (ValueError, UnicodeDecodeError) as exc:
                self._json(400, {"error": {"message": f"invalid JSON: {exc}"}})
                return
            if path == "/generate":
                self._generate(body)
            elif path == "/v1/chat/completions":
                self._chat(body)
            else:
                self._json(404, {"detail": "Not Found"})

        def _generate(self, body: dict) -> None:
            text = body.get("text")
            params = body.get("sampling_params") or {}
            if not isinstance(text, str):
                self._json(400, {"error": {"message": "the stand-in takes one string 'text'"}})
                return
            if not body.get("stream"):
                self._json(200, engine.generate(text, params))
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()

            def emit(words: list[str], meta: dict) -> None:
                chunk = {"text": " ".join(words), "meta_info": meta}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()

            final = engine.generate(text, params, emit)
            emit(final["text"].split(), final["meta_info"])
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

        def _chat(self, body: dict) -> None:
            messages = body.get("messages") or []
            if not messages or body.get("stream"):
                self._json(400, {"error": {"message": "messages required; no chat streaming"}})
                return
            prompt = "\n".join(str(m.get("content", "")) for m in messages)
            params = {
                "max_new_tokens": body.get("max_completion_tokens") or body.get("max_tokens") or 128
            }
            result = engine.generate(prompt, params)
            meta = result["meta_info"]
            finish = (meta["finish_reason"] or {}).get("type", "stop")
            self._json(
                200,
                {
                    "id": meta["id"],
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model_name,
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": finish,
                            "message": {
                                "role": "assistant",
                                "content": result["text"],
                                "reasoning_content": None,
                            },
                        }
                    ],
                    "usage": {
                        "prompt_tokens": meta["prompt_tokens"],
                        "completion_tokens": meta["completion_tokens"],
                        "total_tokens": meta["prompt_tokens"] + meta["completion_tokens"],
                    },
                },
            )

    return Handler


def crash_while_loading(args: argparse.Namespace) -> None:
    """Die the way the unpatched image does when building the MTP head (then exit 1)."""
    time.sleep(float(os.environ.get("STANDIN_CRASH_AFTER", "0.3")))
    log("Load weight begin. (draft model: MTP head)")
    log("Traceback (most recent call last):")
    log('  File "sglang/srt/model_loader/loader.py", line 1, in load_weights_and_postprocess')
    log(
        "RuntimeError: The size of tensor a (6144) must match the size of tensor b (3072) at "
        "non-singleton dimension 1 (shape mismatch loading "
        "model.decoder.mlp.shared_experts.gate_up_proj)"
    )
    sys.exit(1)


def parse_faults(value: str) -> frozenset[str]:
    """The faults named in a ``STANDIN_FAULT`` value (comma-separated)."""
    return frozenset(f.strip() for f in value.split(",") if f.strip())


def make_server(
    args: argparse.Namespace, faults: frozenset[str], env: dict | None = None
) -> ThreadingHTTPServer:
    """A listening (not yet serving) stand-in HTTP server; ``.engine`` is its fake model."""
    engine = Engine(args, faults, env)
    httpd = ThreadingHTTPServer((args.host, args.port), make_handler(engine, dict(vars(args))))
    httpd.daemon_threads = True
    httpd.engine = engine  # type: ignore[attr-defined]
    return httpd


def main(argv: list[str] | None = None) -> int:
    """Parse sglang's flags, pretend to load, then serve until killed."""
    args = build_parser().parse_args(argv)
    faults = parse_faults(os.environ.get("STANDIN_FAULT", ""))
    unknown = faults - FAULTS
    if unknown:
        log(f"unknown STANDIN_FAULT {sorted(unknown)}; known: {sorted(FAULTS)}")
        return 2
    print("=" * 78, flush=True)
    log(BANNER)
    log(f"faults: {sorted(faults) or 'none'}")
    print("=" * 78, flush=True)
    log(f"server_args={json.dumps(vars(args), sort_keys=True)}")
    config = os.path.join(args.model_path, "config.json")
    if not os.path.isfile(config):
        log(f"OSError: {args.model_path} is not a local folder with a config.json")
        return 1
    with open(config) as fh:
        arch = (json.load(fh).get("architectures") or ["?"])[0]
    log(f"model architecture {arch}; tp={args.tp_size}; speculative={args.speculative_algorithm}")
    # PID 1 in a container ignores SIGTERM unless a handler is set; exit like a server would.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))
    if "crash" in faults:
        crash_while_loading(args)
    log("Load weight begin.")
    if "forbidden-log" in faults:
        key = "('gfx950', 256, 1, 6144, 2048, 256, 8, 'ActivationType.Silu', 'torch.bfloat16')"
        log(f"[aiter] [fused_moe] using 2stage default for {key}")
        log(
            f"[aiter] [fused_moe] no tuned FlyDSL config for {key}, using heuristic FlyDSL fallback"
        )
    if "hang" in faults:
        while True:
            time.sleep(3600)
    time.sleep(float(os.environ.get("STANDIN_LOAD_SECONDS", "0.5")))
    log("Load weight end.")
    httpd = make_server(args, faults)
    log(f"Uvicorn running on http://{args.host}:{args.port} (stand-in: http.server)")
    httpd.engine.generate("warmup", {"max_new_tokens": 1}, internal=True)  # type: ignore[attr-defined]
    log("The server is fired up and ready to roll! (stand-in)")
    try:
        httpd.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
