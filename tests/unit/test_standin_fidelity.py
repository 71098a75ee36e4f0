"""The stand-in sglang server (TEST DOUBLE) is no kinder than sglang 0.5.14: each behaviour
here is read from the released wheel (``sglang==0.5.14`` from PyPI, cached) and then run
against the double (issue 41 item 3; FIDELITY-5 M2, M4, M6, M11).
"""

from __future__ import annotations

import ast
import json
import threading
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from standin import server

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "tests" / "standin" / "model"
MTP = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "5"]
MTP += ["--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "6"]

Start = Callable[..., str]

pytestmark = pytest.mark.pypi


@pytest.fixture(scope="module")
def real() -> Callable[[str], str]:
    """``real(path)``: a file of the released 0.5.14 wheel (``sglang/...``)."""
    from sglforge.standin.base import release_wheel

    archive = zipfile.ZipFile(release_wheel("0.5.14"))
    return lambda path: archive.read(f"sglang/{path}").decode()


def post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            return resp.status, _json(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, _json(exc.read())


def _json(data: bytes) -> dict:
    try:
        return json.loads(data or b"{}")
    except ValueError:
        return {"text": data.decode()}  # /flush_cache answers text


def generate(base: str, text: str, n: int) -> dict:
    body = {"text": text, "sampling_params": {"max_new_tokens": n, "ignore_eos": True}}
    return post(f"{base}/generate", body)[1]["meta_info"]


def states(base: str) -> list[dict]:
    with urllib.request.urlopen(f"{base}/server_info", timeout=10) as resp:
        return json.loads(resp.read())["internal_states"]


def _method(source: str, name: str) -> str:
    tree = ast.parse(source)
    (fn,) = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name
    ]
    return ast.get_source_segment(source, fn) or ""


def _strings_near(source: str, needle: str) -> list[str]:
    """The adjacent string literals (one implicit concatenation) starting at ``needle``."""
    lines = source[source.index(needle) - 1 :].splitlines()
    out = []
    for line in lines:
        line = line.strip()
        if not line.startswith('"'):
            break
        out.append(line)
    return out


# --------------------------------------------------------------------------- prefix cache


def test_a_prefix_still_prefilling_gives_no_hit(real, start: Start) -> None:
    # 0.5.14 schedules first come first served (the default policy, no reordering)...
    assert '] = "fcfs"' in real("srt/server_args.py").split("schedule_policy:", 1)[1][:900]
    policy = _method(real("srt/managers/schedule_policy.py"), "calc_priority")
    assert "if self.policy == CacheAgnosticPolicy.FCFS:" in policy
    # ...matches the radix tree when a request is taken into a prefill batch...
    sched = real("srt/managers/scheduler.py")
    assert "req.init_next_round_input(self.tree_cache)" in _method(
        sched, "_get_new_batch_prefill_raw"
    )
    assert "tree_cache.match_prefix(" in _method(
        real("srt/managers/schedule_batch.py"), "init_next_round_input"
    )
    # ...and inserts a prompt only when its prefill's result is processed, which the overlap
    # loop does after the next batch was formed and launched.
    prefill = _method(
        real("srt/managers/scheduler_components/batch_result_processor.py"),
        "process_batch_result_prefill",
    )
    assert "maybe_cache_unfinished_req(req, self.tree_cache)" in prefill
    loop = _method(sched, "event_loop_overlap")
    assert loop.index("self.get_next_batch_to_run()") < loop.rindex("pop_and_process()")

    base = start(STANDIN_PREFILL_US_PER_TOKEN="100")  # 4,000 uncached tokens: 0.4 s
    prefix = " ".join(f"sys{i}" for i in range(4000))
    out: dict[str, tuple[dict, float]] = {}

    def send(key: str) -> None:
        began = time.monotonic()
        meta = generate(base, f"{prefix} question {key}", 4)
        out[key] = (meta, time.monotonic() - began)

    first = threading.Thread(target=send, args=("A",))
    first.start()
    time.sleep(0.1)
    send("B")  # arrives while A's prefill runs
    first.join()
    (a, _), (b, b_s) = out["A"], out["B"]
    assert a["cached_tokens"] == 0 and b["cached_tokens"] == 0
    assert b_s > 0.6  # waited for A's prefill (one at a time), then ran its own
    send("C")  # after A's prefill ran: A's blocks are in the tree
    assert out["C"][0]["cached_tokens"] >= 4000 - 16


# --------------------------------------------------------------------------- flush


def _assigned(source: str) -> set[str]:
    return {
        t.attr
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Attribute)
    }


def test_flush_cache_resets_the_speculative_counters(real, start: Start) -> None:
    reporter = real("srt/managers/scheduler_components/metrics_reporter.py")
    released = _assigned(_method(reporter, "reset_metrics"))
    assert "self.metrics_reporter.reset_metrics()" in _method(
        real("srt/managers/scheduler.py"), "flush_cache"
    )
    ours = _assigned(_method(Path(server.__file__).read_text(), "reset_metrics"))
    assert ours == released, ours ^ released

    base = start(*MTP, "--decode-log-interval", "5")
    generate(base, "Write a long answer", 64)
    before = states(base)[0]["avg_spec_accept_length"]
    assert before > 1
    assert post(f"{base}/flush_cache", {})[0] == 200
    assert "avg_spec_accept_length" not in states(base)[0]  # until 5 more decode batches
    generate(base, "Write a long answer", 64)
    assert states(base)[0]["avg_spec_accept_length"] > 1


# --------------------------------------------------------------------------- DP ranks


def test_one_internal_state_and_one_radix_cache_per_dp_rank(real, start: Start) -> None:
    control = real("srt/managers/tokenizer_control_mixin.py")
    assert "FanOutCommunicator(self.send_to_scheduler, server_args.dp_size, mode)" in control
    assert "return [res.internal_state for res in responses]" in _method(
        control, "get_internal_state"
    )
    dp = real("srt/managers/data_parallel_controller.py")
    assert "self.round_robin_counter = (self.round_robin_counter + 1) % len(" in dp

    base = start(*MTP, "--dp", "2", "--decode-log-interval", "5")
    assert len(states(base)) == 2
    prompt = " ".join(f"w{i}" for i in range(64))
    first = generate(base, prompt, 40)  # rank 0
    second = generate(base, prompt, 40)  # rank 1: its own tree, empty
    third = generate(base, prompt, 40)  # rank 0 again: a hit
    assert (first["cached_tokens"], second["cached_tokens"]) == (0, 0)
    assert third["cached_tokens"] >= 48
    assert all(s["avg_spec_accept_length"] > 1 for s in states(base))
    assert len(states(start(*MTP))) == 1


# --------------------------------------------------------------------------- prompt form


def test_acceptance_drops_on_raw_prompts_and_chat_reports_it(real, start: Start) -> None:
    chat = real("srt/entrypoints/openai/serving_chat.py")
    protocol = real("srt/entrypoints/openai/protocol.py")
    # the smoke's chat requests: templated by the server, meta_info when asked, not streamed
    assert "return_meta_info: bool = False" in protocol
    assert 'ret_item["meta_info"] if request.return_meta_info else None' in chat
    message = (
        "return_meta_info is not supported with streaming. "
        "Please set stream=false when using return_meta_info=true."
    )
    convert = _method(chat, "_convert_to_internal_request")  # serving_chat.py:512-516
    near = _strings_near(convert, "return_meta_info is not")
    assert "".join(ast.literal_eval(s) for s in near) == message

    base = start(*MTP)
    raw = generate(base, "Explain speculative decoding in detail", 200)
    glm = "[gMASK]<sop><|user|>\nExplain speculative decoding in detail<|assistant|>"
    templated = generate(base, glm, 200)
    body = {"messages": [{"role": "user", "content": "Explain it"}], "max_tokens": 200}
    status, answer = post(
        f"{base}/v1/chat/completions", {**body, "ignore_eos": True, "return_meta_info": True}
    )
    assert status == 200
    via_chat = answer["choices"][0]["meta_info"]
    assert raw["spec_accept_length"] < 2.5 < templated["spec_accept_length"]
    assert abs(via_chat["spec_accept_length"] - templated["spec_accept_length"]) < 0.1
    status, error = post(
        f"{base}/v1/chat/completions", {**body, "stream": True, "return_meta_info": True}
    )
    assert (status, error["message"], error["type"]) == (400, message, "BadRequest")


# --------------------------------------------------------------------------- /metrics


def _labelled(text: str) -> dict[str, set[frozenset[str]]]:
    """Per sample name, the sets of label names it carries."""
    import re

    out: dict[str, set[frozenset[str]]] = {}
    for m in re.finditer(r"^(sglang:\w+)\{([^}]*)\} ", text, re.M):
        keys = frozenset(re.findall(r'(\w+)="', m.group(2)))
        out.setdefault(m.group(1), set()).add(keys)
    return out


def test_metrics_are_labelled_as_a_real_server_labels_them(start: Start) -> None:
    """Against ``/metrics`` of a real 0.5.14 server (H200, tests/data/h200-run/logs/)."""
    real = _labelled((ROOT / "tests/data/h200-run/logs/boot01-metrics-after.txt").read_text())
    base = start(*MTP, "--enable-metrics")
    generate(base, "count me", 8)
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as resp:
        ours = _labelled(resp.read().decode())
    assert len(ours) == 7
    for name, labels in ours.items():
        assert labels == real[name], name
    with urllib.request.urlopen(f"{start('--dp', '2', '--enable-metrics')}/metrics") as resp:
        text = resp.read().decode()
    assert text.count('sglang:num_running_reqs{dp_rank="') == 2  # one scheduler per rank


def test_a_tokenizer_s_own_template_marks_templated_text() -> None:
    """The model's chat template (as transformers renders it) is what marks a templated
    ``/generate`` prompt, beyond the known role markers."""

    class Tokenizer:
        chat_template = "{{ '<s><|turn|>user\\n' + messages[0]['content'] + '<|turn|>bot\\n' }}"
        bos_token = "<s>"

        def apply_chat_template(self, messages, add_generation_prompt, tokenize):
            assert add_generation_prompt and not tokenize
            return f"<s><|turn|>user\n{messages[0]['content']}<|turn|>bot\n"

        def encode(self, text: str) -> list[int]:
            return [ord(c) for c in text]

    argv = ["--model-path", str(MODEL), *MTP]
    engine = server.Engine(server.build_parser().parse_args(argv), frozenset(), {})
    assert not engine.templated("<|turn|>user\nhello")
    engine.set_tokenizer(Tokenizer())
    assert engine.templated("<|turn|>user\nhello<|turn|>bot\n")
    assert not engine.templated("hello")
    assert engine.templated("[gMASK]<sop><|user|>\nhello<|assistant|>")  # GLM's, as before


# --------------------------------------------------------------------------- prefill vs decode


def _one_running(
    env: dict[str, str], prompt: str, tokens: int
) -> tuple[server.Engine, threading.Thread, list[float]]:
    """An MTP engine with ``env`` and one request of ``tokens`` outputs decoding on a thread
    (started); the list gets each of its streamed chunks' times."""
    argv = ["--model-path", str(MODEL), *MTP]
    engine = server.Engine(server.build_parser().parse_args(argv), frozenset(), env)
    times: list[float] = []
    params = {"max_new_tokens": tokens, "ignore_eos": True}
    running = threading.Thread(
        target=engine.generate, args=(prompt, params, lambda _c: times.append(time.monotonic()))
    )
    running.start()
    return engine, running, times


def test_a_prefill_stalls_every_running_decode_on_its_rank(real) -> None:
    # 0.5.14 runs a new prefill batch instead of the running decode batch...
    sched = real("srt/managers/scheduler.py")
    pick = _method(sched, "get_next_batch_to_run")
    run_prefill = pick.index("if new_batch is not None:")
    assert pick.index("ret = new_batch", run_prefill) < pick.index("else:", run_prefill)
    assert pick.index("else:", run_prefill) < pick.index("update_running_batch(", run_prefill)
    # ...and mixes the two only with --enable-mixed-chunk, off by default
    field = real("srt/server_args.py").split("enable_mixed_chunk: A[", 1)[1]
    assert field[: field.index("\n\n")].rstrip().endswith("] = False")

    env = {"STANDIN_DECODE_TOK_S": "100", "STANDIN_PREFILL_US_PER_TOKEN": "100"}
    engine, running, arrivals = _one_running(env, "a short one", 120)
    time.sleep(0.15)  # decoding, at 10 ms per step
    began = time.monotonic()
    engine.generate(" ".join(f"p{i}" for i in range(4000)), {"max_new_tokens": 1})  # 0.4 s
    prefilled = time.monotonic() - began
    running.join()
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    # the running request got no step while the 4,000-token prompt prefilled
    assert prefilled >= 0.4 and max(gaps) >= 0.35, (prefilled, max(gaps))


def test_a_prefill_waits_for_the_decode_step_in_flight(real) -> None:
    # 0.5.14's scheduler loop takes new requests only between forward passes: receive, pick
    # the next batch, run it (event_loop_normal; the overlap loop in the same order)
    sched = real("srt/managers/scheduler.py")
    for loop in ("event_loop_normal", "event_loop_overlap"):
        body = _method(sched, loop)
        recv = body.index("self.request_receiver.recv_requests()")
        assert recv < body.index("self.get_next_batch_to_run()", recv), loop
    normal = _method(sched, "event_loop_normal")
    assert normal.index("get_next_batch_to_run()") < normal.index("self.run_batch(batch)")

    # decode steps of 1 s (MTP accepts several tokens a step; 5 tok/s); a 10-token prompt's
    # prefill costs 1 ms: what its first token waits for is the step already running
    env = {"STANDIN_DECODE_TOK_S": "5", "STANDIN_RAW_ACCEPT_LENGTH": "5"}
    engine, running, steps = _one_running(env, "a long one", 40)
    while len(steps) < 2:  # the prefill's token, then the first verify step
        time.sleep(0.01)
    time.sleep(0.1)  # inside the second step (about 1 s long)
    began = time.monotonic()
    first: list[float] = []
    engine.generate(
        " ".join(f"q{i}" for i in range(10)),
        {"max_new_tokens": 1},
        lambda _c: first.append(time.monotonic()),
    )
    running.join()
    (step_end,) = [t for t in steps if t > began][:1]
    # the short prompt's token came after the step in flight ended, not ~0.2 s after arrival
    assert first[0] >= step_end - 0.05, (first[0] - began, step_end - began)
    assert first[0] - began >= 0.6, first[0] - began


# --------------------------------------------------------------------------- health


def _get(url: str) -> tuple[int, float]:
    began = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, time.monotonic() - began
    except urllib.error.HTTPError as exc:
        return exc.code, time.monotonic() - began


def test_health_generate_waits_for_a_real_generate_through_the_scheduler(
    real, start: Start
) -> None:
    http = real("srt/entrypoints/http_server.py")
    assert 'HEALTH_CHECK_TIMEOUT = int(os.getenv("SGLANG_HEALTH_CHECK_TIMEOUT", 20))' in http
    health = _method(http, "health_generate")
    assert '@app.get("/health")\n@app.get("/health_generate")' in http
    assert '{"max_new_tokens": 1, "temperature": 0.0}' in health and "log_metrics=False" in health
    loop = health[health.index("while time.time() < tic + HEALTH_CHECK_TIMEOUT:") :]
    assert loop.index("await asyncio.sleep(1)") < loop.index("last_receive_tstamp > tic")
    assert loop.index("return Response(status_code=200)") < loop.index("ServerStatus.UnHealthy")
    assert loop.rstrip().endswith("return Response(status_code=503)")

    base = start(STANDIN_PREFILL_US_PER_TOKEN="1000", SGLANG_HEALTH_CHECK_TIMEOUT="2")
    code, took = _get(f"{base}/health_generate")
    assert code == 200 and took >= 1.0  # idle: its own token came back, seen after 1 s
    # the scheduler busy with a 3,000-token prefill (3 s) that sends nothing meanwhile: the
    # check's own request waits behind it, so nothing comes back within the 2 s
    busy = threading.Thread(target=generate, args=(base, " ".join(["w"] * 3000), 2))
    busy.start()
    time.sleep(0.2)
    code, took = _get(f"{base}/health")
    busy.join()
    assert code == 503 and took >= 2.0
    assert _get(f"{base}/health_generate")[0] == 200  # answered again once it answers
