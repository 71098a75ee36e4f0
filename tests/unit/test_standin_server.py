"""The stand-in sglang server (TEST DOUBLE), run in-process on 127.0.0.1: flags, shapes, faults.

The shapes are checked against what sglang 0.5.14 does (cited in ``tests/standin/server.py``);
the tests marked ``pypi`` read the released wheel itself and fail if the double drifts from it.
Also runs the smoke runner's HTTP checks against it, so the check logic is covered without an
engine (the Docker tests cover the same through a real container).
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from sglforge import smoke
from sglforge.smoke import checks
from standin import server

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "tests" / "standin" / "model"
MTP = [
    "--speculative-algorithm",
    "EAGLE",
    "--speculative-num-steps",
    "5",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "6",
]

Start = Callable[..., str]


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def generate(base: str, text: str, n: int = 32, **params: object) -> dict:
    body = {"text": text, "sampling_params": {"temperature": 0, "max_new_tokens": n, **params}}
    return post(f"{base}/generate", body)


def sse(url: str, body: dict) -> list[str]:
    """Every ``data:`` payload of a streamed response, ``[DONE]`` included."""
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return [line[5:].strip().decode() for line in resp if line.startswith(b"data:")]


# --------------------------------------------------------------------------- flags


@pytest.mark.parametrize("name", ["glm5-mxfp4-mtp-mi355x", "standin-cpu"])
def test_accepts_every_flag_the_shipped_scenarios_pass(name: str) -> None:
    scenario = smoke.load_scenario(ROOT / "smoke" / f"{name}.toml")
    args = server.build_parser().parse_args(scenario.launch_args(31000))
    assert args.port == 31000
    assert args.tp_size == 8
    assert args.speculative_algorithm == "EAGLE"
    assert (args.speculative_num_steps, args.speculative_eagle_topk) == (5, 1)
    assert args.speculative_num_draft_tokens == 6
    assert args.kv_cache_dtype == "fp8_e4m3"
    assert args.enable_aiter_allreduce_fusion and args.trust_remote_code


def test_rejects_unknown_flags_like_sglang(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        server.build_parser().parse_args(["--model-path", "m", "--speculative-num-stepz", "5"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --speculative-num-stepz" in capsys.readouterr().err


def test_unknown_fault_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_FAULT", "explode")
    assert server.main(["--model-path", str(MODEL)]) == 2


def test_missing_model_folder_fails_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("STANDIN_FAULT", raising=False)
    assert server.main(["--model-path", str(tmp_path / "nothing")]) == 1
    out = capsys.readouterr().out
    assert "TEST DOUBLE" in out and "[STAND-IN]" in out


# --------------------------------------------------------------------------- shapes

SPEC_KEYS = {
    "spec_accept_rate",
    "spec_accept_length",
    "spec_num_correct_drafts",
    "spec_num_proposed_drafts",
    "spec_verify_ct",
    "spec_accepted_drafts",
    "spec_proposed_drafts",
    "spec_correct_drafts_histogram",
    "spec_accept_histogram",
}


def test_health_is_503_until_the_warmup_request_went_through(start: Start) -> None:
    base = start(*MTP, ready=False)
    assert get(f"{base}/health")[0] == 503
    assert get(f"{base}/health_generate")[0] == 503
    assert get(f"{base}/v1/models")[0] == 200  # the port is open, the server is "Starting"


def test_port_stays_closed_while_the_model_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STANDIN_FAULT", raising=False)
    monkeypatch.setenv("STANDIN_LOAD_SECONDS", "1.0")
    monkeypatch.setenv("STANDIN_WARMUP_SECONDS", "0.3")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    listening: list = []
    thread = threading.Thread(
        target=server.main,
        args=(["--model-path", str(MODEL), "--port", str(port), *MTP], listening.append),
    )
    thread.start()
    try:
        time.sleep(0.4)
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0, "listening while loading"
        deadline = time.monotonic() + 10
        codes = []
        while time.monotonic() < deadline:
            try:
                codes.append(get(f"http://127.0.0.1:{port}/health")[0])
            except urllib.error.URLError:
                codes.append(None)
            if codes[-1] == 200:
                break
            time.sleep(0.05)
        assert codes[-1] == 200 and 503 in codes, codes
    finally:
        for httpd in listening:
            httpd.shutdown()
        thread.join(10)


def test_health_endpoints_and_models(start: Start) -> None:
    base = start(*MTP)
    assert get(f"{base}/health")[0] == 200
    assert get(f"{base}/health_generate")[0] == 200
    status, raw = get(f"{base}/v1/models")
    assert status == 200
    card = json.loads(raw)["data"][0]
    assert card["id"] == card["root"] == str(MODEL) and card["owned_by"] == "sglang"
    assert card["max_model_len"] > 0
    info = json.loads(get(f"{base}/model_info")[1])
    assert info["is_generation"] is True and info["weight_version"] == "default"
    assert get(f"{base}/nope")[0] == 404


def test_generate_meta_info_is_0_5_14s(start: Start) -> None:
    base = start(*MTP)
    out = generate(base, "Tell me about GPUs", 64, ignore_eos=True)
    assert set(out) == {"text", "output_ids", "meta_info"}
    meta = out["meta_info"]
    assert len(out["text"].split()) == 64 == meta["completion_tokens"] == len(out["output_ids"])
    assert meta["finish_reason"] == {"type": "length", "length": 64}
    assert meta["weight_version"] == "default" and meta["num_retractions"] == 0
    assert SPEC_KEYS <= set(meta)
    # tokenizer_manager.py:2329-2331: completion tokens (prefill's included) per verify step.
    assert meta["spec_accept_length"] == meta["completion_tokens"] / meta["spec_verify_ct"]
    assert meta["spec_num_proposed_drafts"] == meta["spec_verify_ct"] * (6 - 1)
    assert meta["spec_accept_rate"] == (
        meta["spec_num_correct_drafts"] / meta["spec_num_proposed_drafts"]
    )
    assert meta["spec_accepted_drafts"] == meta["spec_num_correct_drafts"]
    assert meta["spec_proposed_drafts"] == meta["spec_num_proposed_drafts"]
    hist = meta["spec_correct_drafts_histogram"]
    assert hist == meta["spec_accept_histogram"] and sum(hist) == meta["spec_verify_ct"]
    assert sum(i * c for i, c in enumerate(hist)) == meta["spec_num_correct_drafts"]
    assert 2.0 < meta["spec_accept_length"] <= 6  # a raw prompt: STANDIN_RAW_ACCEPT_LENGTH 2.4
    assert meta["e2e_latency"] > 0


def test_spec_fields_are_absent_without_a_verify_step(start: Start) -> None:
    base = start(*MTP)
    meta = generate(base, "hi", 1, ignore_eos=True)["meta_info"]
    assert meta["completion_tokens"] == 1
    assert not SPEC_KEYS & set(meta)


def test_server_info_is_shaped_like_http_server_builds_it(start: Start) -> None:
    base = start(*MTP)
    info = json.loads(get(f"{base}/server_info")[1])
    assert info["speculative_num_draft_tokens"] == 6 and info["tp_size"] == 1
    assert {"status", "max_total_num_tokens", "max_req_input_len"} <= set(info)
    assert {"internal_states", "version", "kv_events"} <= set(info)
    (state,) = info["internal_states"]
    assert {"last_gen_throughput", "memory_usage", "effective_max_running_requests_per_dp"} <= set(
        state
    )
    # Nothing decoded yet: no decode-stats interval has rolled up, so no average.
    assert "avg_spec_accept_length" not in state
    assert json.loads(get(f"{base}/get_server_info")[1])["internal_states"]


def test_server_accept_length_appears_after_a_decode_log_interval(start: Start) -> None:
    base = start(*MTP, "--decode-log-interval", "20")  # the warmup's steps count too
    meta = generate(base, "go", 20, ignore_eos=True)["meta_info"]
    assert meta["spec_verify_ct"] < 15
    state = json.loads(get(f"{base}/server_info")[1])["internal_states"][0]
    assert "avg_spec_accept_length" not in state
    generate(base, "more", 200, ignore_eos=True)
    state = json.loads(get(f"{base}/server_info")[1])["internal_states"][0]
    assert 2.0 < state["avg_spec_accept_length"] <= 6


def test_without_speculative_flags_there_are_no_spec_statistics(start: Start) -> None:
    base = start("--decode-log-interval", "5")
    meta = generate(base, "hello", 16, ignore_eos=True)["meta_info"]
    assert not SPEC_KEYS & set(meta)
    info = json.loads(get(f"{base}/server_info")[1])
    assert "avg_spec_accept_length" not in info["internal_states"][0]


def test_streaming_generate_sends_cumulative_chunks_then_done(start: Start) -> None:
    base = start(*MTP)
    body = {
        "text": "x",
        "stream": True,
        "sampling_params": {"max_new_tokens": 20, "ignore_eos": True},
    }
    payloads = sse(f"{base}/generate", body)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    metas = [c["meta_info"] for c in chunks]
    counts = [m["completion_tokens"] for m in metas]
    assert counts[0] == 1 and counts[-1] == 20 and counts == sorted(counts)
    assert all(
        len(c["text"].split()) == m["completion_tokens"] for c, m in zip(chunks, metas, strict=True)
    )
    # Only the finished chunk carries finish_reason, e2e_latency and the spec statistics.
    assert all(m["finish_reason"] is None and "e2e_latency" not in m for m in metas[:-1])
    assert all(not SPEC_KEYS & set(m) for m in metas[:-1])
    assert metas[-1]["finish_reason"]["type"] == "length" and SPEC_KEYS <= set(metas[-1])
    tok_s, tokens = smoke.decode_speed(checks._stream(f"{base}/generate", body, 10))
    assert tokens == 20 and tok_s > 50


def test_arithmetic_is_answered_right_in_generate_and_chat(start: Start) -> None:
    base = start(*MTP)
    assert "42" in generate(base, "What is 17 + 25?")["text"]
    chat = post(
        f"{base}/v1/chat/completions",
        {"model": "m", "messages": [{"role": "user", "content": "What is 12 * 13?"}]},
    )
    assert chat["object"] == "chat.completion" and chat["model"] == "m"
    (choice,) = chat["choices"]
    assert choice["message"]["role"] == "assistant" and choice["finish_reason"] == "stop"
    assert smoke.answer_matches(choice["message"]["content"], "156")
    assert chat["usage"]["completion_tokens"] == 4
    assert chat["usage"]["total_tokens"] == chat["usage"]["prompt_tokens"] + 4
    assert chat["metadata"] == {"weight_version": "default"}


def test_chat_streaming_role_then_deltas_then_finish_and_usage(start: Start) -> None:
    base = start(*MTP)
    body = {
        "model": "m",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "What is 17 + 25?"}],
    }
    payloads = sse(f"{base}/v1/chat/completions", body)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    first, *middle, finish, usage = chunks
    assert first["choices"][0]["delta"] == {
        "reasoning_content": None,
        "role": "assistant",
        "content": "",
    }
    text = "".join(c["choices"][0]["delta"]["content"] for c in middle)
    assert smoke.answer_matches(text, "42")
    assert finish["choices"][0]["finish_reason"] == "stop"
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 4


def test_generate_refuses_what_the_double_lacks(
    start: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The double takes one string ``text``; the runner must send nothing else."""
    base = start(*MTP)
    with pytest.raises(urllib.error.HTTPError) as exc:
        post(f"{base}/generate", {"input_ids": [1, 2, 3]})
    assert exc.value.code == 400
    exc.value.close()
    sent: list[dict] = []
    original = checks._json

    def spy(url: str, body=None, timeout: float = 30.0):
        if body is not None and url.endswith("/generate"):
            sent.append(dict(body))
        return original(url, body, timeout)

    monkeypatch.setattr(checks, "_json", spy)
    _session(base).serves()
    assert sent and all(isinstance(b["text"], str) and "input_ids" not in b for b in sent)


# --------------------------------------------------------------------------- faults


def test_fault_wrong_answers_off_by_one(start: Start) -> None:
    base = start(*MTP, fault="wrong")
    text = generate(base, "What is 17 + 25?")["text"]
    assert "43" in text and not smoke.answer_matches(text, "42")


def test_fault_low_accept(start: Start) -> None:
    base = start(*MTP, fault="low-accept")
    meta = generate(base, "go", 60, ignore_eos=True)["meta_info"]
    assert meta["spec_accept_length"] < 1.5


def test_fault_old_api_has_only_get_server_info(start: Start) -> None:
    base = start(*MTP, fault="old-api")
    assert get(f"{base}/server_info")[0] == 404
    assert get(f"{base}/get_server_info")[0] == 200


def test_decode_speed_follows_the_environment(start: Start) -> None:
    base = start(*MTP, fault="slow", STANDIN_DECODE_TOK_S="100")
    body = {
        "text": "x",
        "stream": True,
        "sampling_params": {"max_new_tokens": 30, "ignore_eos": True},
    }
    tok_s, _ = smoke.decode_speed(checks._stream(f"{base}/generate", body, 10))
    assert 60 < tok_s < 120


def test_fault_crash_dies_on_the_bare_weight_loader_assert(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("STANDIN_FAULT", "crash")
    monkeypatch.setenv("STANDIN_CRASH_AFTER", "0")
    with pytest.raises(SystemExit) as exc:
        server.main(["--model-path", str(MODEL), *MTP])
    assert exc.value.code == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2] == "[STAND-IN] AssertionError"
    # then the main process's launch-phase SIGQUIT handler (entrypoints/engine.py:1301-1305)
    assert lines[-1].endswith(
        "Received sigquit from a child process. It usually means the child failed."
    )
    assert any("Scheduler hit an exception: Traceback (most recent call last):" in x for x in lines)
    assert any('linear.py", line 724, in weight_loader' in x for x in lines)


@pytest.mark.parametrize(
    ("fault", "needle"),
    [
        ("aiter-untuned", "using heuristic FlyDSL fallback"),
        ("forbidden-log", "fused metadata copy kernel not available, falling back to loop"),
    ],
)
def test_log_faults_print_their_lines_and_still_serve(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], fault: str, needle: str
) -> None:
    monkeypatch.setenv("STANDIN_FAULT", fault)
    monkeypatch.setenv("STANDIN_LOAD_SECONDS", "0")
    monkeypatch.setenv("STANDIN_LOG_LINES", "first given line\nsecond given line")
    listening: list = []
    thread = threading.Thread(
        target=server.main,
        args=(["--model-path", str(MODEL), "--port", "0"], listening.append),
    )
    thread.start()
    deadline = time.monotonic() + 10
    while not listening and time.monotonic() < deadline:
        time.sleep(0.02)
    listening[0].shutdown()
    thread.join(10)
    out = capsys.readouterr().out
    assert needle in out and "Uvicorn running" in out
    assert "[STAND-IN] first given line\n[STAND-IN] second given line\n" in out


# --------------------------------------------------------------------------- runner checks


def _session(base: str, **overrides: object) -> checks._Session:
    scenario = smoke.load_scenario(ROOT / "smoke" / "standin-cpu.toml")
    if overrides:
        from dataclasses import replace

        scenario = replace(scenario, checks=replace(scenario.checks, **overrides))
    return checks._Session(scenario, int(base.rsplit(":", 1)[1]))


def test_runner_checks_pass_against_a_healthy_standin(start: Start) -> None:
    s = _session(start(*MTP))
    results = [s.serves(), s.arithmetic(), s.speed(), s.spec_requests(), s.spec_server()]
    assert [c.name for c in results if not c.passed] == []
    assert s.figures["decode_tok_s"] >= 50
    assert s.figures["spec_accept_length_server"] >= 2.5


def test_runner_checks_fail_on_each_fault(start: Start) -> None:
    assert not _session(start(*MTP, fault="wrong")).arithmetic().passed
    assert not _session(start(*MTP, fault="empty")).serves().passed
    low = _session(start(*MTP, fault="low-accept"))
    low.speed()
    assert not low.spec_requests().passed and not low.spec_server().passed
    slow = _session(start(*MTP, STANDIN_DECODE_TOK_S="20"), speed_max_new_tokens=16)
    check = slow.speed()
    assert not check.passed and check.value is not None and float(check.value) < 50


def test_runner_falls_back_to_get_server_info(start: Start) -> None:
    s = _session(start(*MTP, fault="old-api"))
    s.speed()
    check = s.spec_server()
    assert check.passed and "/get_server_info" in check.detail


def test_runner_sees_speculative_decoding_off(start: Start) -> None:
    s = _session(start())
    s.speed()
    check = s.spec_requests()
    assert not check.passed and "speculative decoding is off" in check.detail
    assert not s.spec_server().passed


# --------------------------------------------------------------------------- the real release

VERSION = "0.5.14"


@pytest.fixture(scope="module")
def real() -> Callable[[str], str]:
    """``real(path)``: a file of the released sglang wheel (``sglang/...``), from PyPI."""
    from sglang_release import pypi_cache, release_history

    release_history(f"=={VERSION}")  # downloads the wheel into the cache once
    (wheel,) = (pypi_cache() / "pypi-sglang" / "wheels").glob(f"sglang-{VERSION}-*.whl")
    archive = zipfile.ZipFile(wheel)

    def read(path: str) -> str:
        return archive.read(f"sglang/{path}").decode()

    return read


def _function(source: str, name: str) -> str:
    start = source.index(f"def {name}(")
    end = re.search(r"\n    (async )?def |\n(async )?def |\n@", source[start + 1 :])
    return source[start : start + 1 + (end.start() if end else len(source))]


@pytest.mark.pypi
def test_spec_fields_are_the_ones_the_release_sets(real, start: Start) -> None:
    body = _function(real("srt/managers/tokenizer_manager.py"), "_calculate_spec_decoding_metrics")
    released = set(re.findall(r'meta_info\["(\w+)"\]', body))
    assert released and released <= SPEC_KEYS | {"spec_accept_rate"}, released
    assert "recv_obj.completion_tokens[i] / recv_obj.spec_verify_ct[i]" in body
    assert "recv_obj.spec_verify_ct[i] > 0" in body
    meta = generate(start(*MTP), "x", 40, ignore_eos=True)["meta_info"]
    assert {k for k in meta if k.startswith("spec_")} == released


@pytest.mark.pypi
def test_base_meta_info_keys_are_the_releases(real, start: Start) -> None:
    source = real("srt/managers/tokenizer_manager.py")
    body = _function(source, "_handle_batch_output")
    base = re.search(r"meta_info = \{(.*?)\n            \}", body, re.S)
    assert base is not None
    keys = set(re.findall(r'"(\w+)":', base.group(1)))
    keys |= {"reasoning_tokens", "completion_tokens", "cached_tokens", "e2e_latency"}
    for key in ("reasoning_tokens", "completion_tokens", "cached_tokens"):
        assert f'"{key}": recv_obj.{key}[i]' in body
    assert 'meta_info["e2e_latency"]' in body
    meta = generate(start(), "x", 4, ignore_eos=True)["meta_info"]
    assert set(meta) == keys


@pytest.mark.pypi
def test_server_info_keys_are_the_releases(real, start: Start) -> None:
    http = real("srt/entrypoints/http_server.py")
    body = _function(http, "server_info")
    top = set(re.findall(r'^\s+"(\w+)":', body, re.M))
    assert top == {"internal_states", "version", "kv_events"}, top
    init = _function(real("srt/managers/scheduler.py"), "get_init_info")
    init_keys = set(re.findall(r'"(\w+)":', init))
    state_src = _function(real("srt/managers/scheduler.py"), "get_internal_state")
    state_keys = set(re.findall(r'ret\["(\w+)"\] =', state_src)) - {"step_time_dict"}
    base = start(*MTP, "--decode-log-interval", "5")
    generate(base, "x", 64, ignore_eos=True)
    info = json.loads(get(f"{base}/server_info")[1])
    assert top | init_keys <= set(info)
    assert state_keys <= set(info["internal_states"][0]), state_keys
    # The port opens only after the scheduler reported ready: launch_server starts the
    # subprocesses, then the HTTP server.
    launch = _function(http, "launch_server")
    assert launch.index("_launch_subprocesses") < launch.index("_setup_and_run_http_server")
    health = _function(http, "health_generate")
    assert "ServerStatus.Starting" in health and "status_code=503" in health


def test_decode_time_is_the_cost_model_s_whatever_the_work_between_steps() -> None:
    """The costs are a schedule: slow work between steps (a loaded CPU, a slow client) does not
    add to them, so an unchanged image reads the same speed on a busy machine (issue 29)."""
    args = server.build_parser().parse_args(
        ["--model-path", str(MODEL), "--host", "127.0.0.1", "--port", "0"]
    )
    engine = server.Engine(args, frozenset(), {"STANDIN_DECODE_TOK_S": "100"})
    params = {"max_new_tokens": 40, "ignore_eos": True}

    def timed(emit: Callable[[dict], None]) -> float:
        started = time.monotonic()
        engine.generate("x", params, emit)
        return time.monotonic() - started

    quick = timed(lambda _chunk: None)
    busy = timed(lambda _chunk: time.sleep(0.004))  # 4 ms of work after each 10 ms step
    assert 0.38 < quick < 0.8
    # the old pauses added all of the work (40 x 4 ms = 0.16 s); the schedule absorbs it
    assert busy - quick < 0.08
