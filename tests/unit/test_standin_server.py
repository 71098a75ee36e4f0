"""The stand-in sglang server (TEST DOUBLE), run in-process on 127.0.0.1: flags, shapes, faults.

Also runs the smoke runner's HTTP checks against it, so the check logic is covered without an
engine (the Docker tests cover the same through a real container).
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sglforge import smoke
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


@pytest.fixture
def start() -> Iterator[Start]:
    """Factory: ``start(*flags, fault="", **env)`` serves a stand-in; returns its base URL."""
    running = []

    def _start(*flags: str, fault: str = "", **env: str) -> str:
        args = server.build_parser().parse_args(
            ["--model-path", str(MODEL), "--host", "127.0.0.1", "--port", "0", *flags]
        )
        httpd = server.make_server(args, server.parse_faults(fault), env)
        thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
        thread.start()
        running.append((httpd, thread))
        return f"http://127.0.0.1:{httpd.server_address[1]}"

    yield _start
    for httpd, thread in running:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


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


def test_health_endpoints_and_models(start: Start) -> None:
    base = start(*MTP)
    assert get(f"{base}/health")[0] == 200
    assert get(f"{base}/health_generate")[0] == 200
    status, raw = get(f"{base}/v1/models")
    assert status == 200
    assert json.loads(raw)["data"][0]["id"] == str(MODEL)
    assert get(f"{base}/nope")[0] == 404


def test_generate_meta_info_carries_speculative_statistics(start: Start) -> None:
    base = start(*MTP)
    out = generate(base, "Tell me about GPUs", 64, ignore_eos=True)
    meta = out["meta_info"]
    assert len(out["text"].split()) == 64 == meta["completion_tokens"]
    assert meta["finish_reason"] == {"type": "length", "length": 64}
    assert meta["spec_verify_ct"] > 0
    assert 2.5 < meta["spec_accept_length"] <= 6
    assert meta["e2e_latency"] > 0
    info = json.loads(get(f"{base}/server_info")[1])
    assert 2.5 < info["internal_states"][0]["avg_spec_accept_length"] <= 6
    assert info["speculative_num_draft_tokens"] == 6
    assert json.loads(get(f"{base}/get_server_info")[1])["internal_states"]


def test_without_speculative_flags_there_are_no_spec_statistics(start: Start) -> None:
    base = start()
    meta = generate(base, "hello", 16, ignore_eos=True)["meta_info"]
    assert "spec_verify_ct" not in meta
    info = json.loads(get(f"{base}/server_info")[1])
    assert "avg_spec_accept_length" not in info["internal_states"][0]


def test_streaming_generate_sends_growing_chunks_then_done(start: Start) -> None:
    base = start(*MTP)
    body = {
        "text": "x",
        "stream": True,
        "sampling_params": {"max_new_tokens": 20, "ignore_eos": True},
    }
    chunks = smoke._stream(f"{base}/generate", body, 10)
    counts = [c["meta_info"]["completion_tokens"] for _, c in chunks]
    assert counts[0] == 1 and counts[-1] == 20
    assert counts == sorted(counts)
    tok_s, tokens = smoke.decode_speed(chunks)
    assert tokens == 20 and tok_s > 50


def test_arithmetic_is_answered_right_in_generate_and_chat(start: Start) -> None:
    base = start(*MTP)
    assert "42" in generate(base, "What is 17 + 25?")["text"]
    chat = post(
        f"{base}/v1/chat/completions",
        {"model": "m", "messages": [{"role": "user", "content": "What is 12 * 13?"}]},
    )
    assert chat["object"] == "chat.completion"
    assert smoke.answer_matches(chat["choices"][0]["message"]["content"], "156")
    assert chat["usage"]["completion_tokens"] == 4


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
    tok_s, _ = smoke.decode_speed(smoke._stream(f"{base}/generate", body, 10))
    assert 60 < tok_s < 120


# --------------------------------------------------------------------------- runner checks


def _session(base: str, **overrides: object) -> smoke._Session:
    scenario = smoke.load_scenario(ROOT / "smoke" / "standin-cpu.toml")
    if overrides:
        from dataclasses import replace

        scenario = replace(scenario, checks=replace(scenario.checks, **overrides))
    return smoke._Session(scenario, int(base.rsplit(":", 1)[1]))


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
