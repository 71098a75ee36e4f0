"""The smoke's log patterns and HTTP readers against real sglang 0.5.14 output.

The logs, ``/server_info`` and ``/metrics`` in ``tests/data/h200-run/logs/`` come from ten boots
of real sglang 0.5.14 on an NVIDIA H200 (``tests/data/h200-run/logs/README.md`` says how, and
which failing logs are composed from upstream's own handler lines). Every scenario's forbidden
patterns must stay quiet on the healthy logs and fail the crashed ones; a traceback sglang
survives is a warning, not a failure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from sglforge import smoke
from sglforge.bench import stats
from sglforge.smoke import checks

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "data" / "h200-run" / "logs"
HEALTHY = sorted(LOGS.glob("boot*-server.log"))
SCENARIOS = sorted((ROOT / "smoke").glob("*.toml"))
CRASHES = ["crash-load-weights.log", "crash-while-serving.log", "crash-subprocess-killed.log"]


def _logs_check(scenario: Path, log: Path):
    s = smoke.load_scenario(scenario).checks
    matches = checks.scan_log(log, s.forbidden)
    return matches, checks.logs_check(
        matches, len(s.forbidden), checks.scan_required(log, s.required)
    )


def test_ten_healthy_boots_are_there() -> None:
    assert len(HEALTHY) == 10
    for log in HEALTHY:
        assert "The server is fired up and ready to roll!" in log.read_text()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.stem)
def test_healthy_real_logs_match_no_forbidden_pattern(scenario: Path) -> None:
    for log in HEALTHY:
        matches, check = _logs_check(scenario, log)
        assert matches == [], (log.name, [m.describe() for m in matches])
        # The required lines are aiter's (ROCm only): an NVIDIA log has none, and nothing else.
        missing = [
            r.name
            for r in checks.scan_required(log, smoke.load_scenario(scenario).checks.required)
            if r.missing
        ]
        assert all(n.startswith("aiter-") for n in missing), missing


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.stem)
@pytest.mark.parametrize("name", CRASHES)
def test_crashed_logs_fail_on_sglangs_own_crash_lines(scenario: Path, name: str) -> None:
    matches, check = _logs_check(scenario, LOGS / name)
    fails = {m.name for m in matches if m.severity == "fail"}
    assert "process-crash" in fails and not check.passed, (name, fails)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.stem)
def test_a_survived_traceback_is_a_warning(scenario: Path) -> None:
    matches, check = _logs_check(scenario, LOGS / "benign-traceback.log")
    assert [(m.name, m.severity, m.count) for m in matches] == [("python-traceback", "warn", 1)]
    assert "python-traceback x1" in check.detail
    # passes unless a required (aiter) line is missing, which the NVIDIA log cannot have
    smoke_required = smoke.load_scenario(scenario).checks.required
    assert check.passed == (not smoke_required)


def test_the_load_crash_also_names_the_bare_assert() -> None:
    glm = ROOT / "smoke" / "glm5-mxfp4-mtp-mi355x.toml"
    matches, _ = _logs_check(glm, LOGS / "crash-load-weights.log")
    assert {m.name for m in matches} == {
        "process-crash",
        "bare-assertion-error",
        "python-traceback",
    }


# ---------------------------------------------------------------- captured through sglforge

# Captured on the H200 through sglforge itself (bench/data/h200-2026-12-03 runs 4-6): five healthy
# boots of `bench --calibrate`, a launch sglang's scheduler crashed in (--tp-size 2 on one GPU) and
# one its argument parser refused (exit 2 before any server line: `ready` fails it, not a pattern).
CAPTURED_HEALTHY = sorted(LOGS.glob("real-sglforge-boot-*.log"))


def test_the_captured_logs_are_there() -> None:
    assert len(CAPTURED_HEALTHY) == 5
    assert "invalid choice: 'nosuch'" in (LOGS / "real-refused-flag.log").read_text()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.stem)
def test_captured_healthy_boots_match_no_failing_pattern(scenario: Path) -> None:
    for log in CAPTURED_HEALTHY:
        matches, _ = _logs_check(scenario, log)
        assert [m.describe() for m in matches if m.severity == "fail"] == [], log.name


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.stem)
def test_a_captured_scheduler_crash_fails_the_smoke(scenario: Path) -> None:
    matches, check = _logs_check(scenario, LOGS / "real-crash-tp2-invalid-device.log")
    fails = {m.name for m in matches if m.severity == "fail"}
    assert "process-crash" in fails and not check.passed, fails


# --------------------------------------------------------------------------- the release's text

# (file, line, the f-string's text): each crash handler of 0.5.14 whose line "process-crash" names.
HANDLERS = [
    ("srt/managers/scheduler.py", 4231, "Scheduler hit an exception: {traceback}"),
    (
        "srt/managers/detokenizer_manager.py",
        500,
        "DetokenizerManager hit an exception: {traceback}",
    ),
    ("srt/managers/tokenizer_manager.py", 3036, "TokenizerManager hit an exception: {traceback}"),
    ("srt/managers/data_parallel_controller.py", 706, "DataParallelController hit an exception"),
    ("srt/managers/multi_tokenizer_mixin.py", 569, "MultiDetokenizerRouter hit an exception"),
    ("srt/managers/multi_tokenizer_mixin.py", 677, "MultiTokenizerRouter hit an exception"),
    ("srt/entrypoints/engine.py", 1303, "Received sigquit from a child process. It usually"),
    (
        "srt/managers/tokenizer_manager.py",
        3096,
        "SIGQUIT received. {signum=}, {frame=}. It usually",
    ),
    ("srt/utils/watchdog.py", 217, "Subprocess {name} (pid={proc.pid}) crashed "),
    (
        "srt/managers/data_parallel_controller.py",
        702,
        "Scheduler or DataParallelController {proc.pid}",
    ),
    ("srt/utils/watchdog.py", 154, "{self.debug_name} watchdog timeout "),
]


@pytest.fixture(scope="module")
def real() -> Callable[[str], list[str]]:
    """``real(path)``: the lines of a file of the released 0.5.14 wheel (from PyPI, cached)."""
    import zipfile

    from sglforge.standin.base import release_wheel

    archive = zipfile.ZipFile(release_wheel("0.5.14"))
    return lambda path: archive.read(f"sglang/{path}").decode().splitlines()


def _render(lines: list[str], line: int) -> str:
    """The message logged at ``line`` (its f-string parts joined), placeholders filled."""
    text = "".join(re.findall(r'f?"((?:[^"\\]|\\.)*)"', " ".join(lines[line - 1 : line + 3])))
    values = {
        "traceback": "Traceback (most recent call last):",
        "signum=": "signum=None",
        "frame=": "frame=None",
        "name": "scheduler_0",
        "proc.pid": "3412",
        "proc.exitcode": "-9",
        "self.debug_name": "Scheduler",
        "self.watchdog_timeout=": "self.watchdog_timeout=300",
        "self.soft=": "self.soft=False",
    }
    return re.sub(r"\{([^}]*)\}", lambda m: values.get(m.group(1), "1"), text)


@pytest.mark.pypi
@pytest.mark.parametrize(("path", "line", "needle"), HANDLERS, ids=lambda v: str(v)[:48])
def test_process_crash_catches_each_crash_handler_of_the_release(real, path, line, needle) -> None:
    lines = real(path)
    assert needle in " ".join(lines[line - 1 : line + 3]), f"sglang 0.5.14 {path}:{line} changed"
    rendered = f"[2026-12-03 12:31:40 TP0] {_render(lines, line)}"
    for scenario in SCENARIOS:
        crash = {p.name: p for p in smoke.load_scenario(scenario).checks.forbidden}["process-crash"]
        assert crash.severity == "fail" and re.search(crash.pattern, rendered), rendered


@pytest.mark.pypi
def test_every_hit_an_exception_handler_of_the_release_is_named(real) -> None:
    """A new "X hit an exception" handler upstream must be added to the pattern."""
    import zipfile

    from sglforge.standin.base import release_wheel

    archive = zipfile.ZipFile(release_wheel("0.5.14"))
    found = set()
    for name in archive.namelist():
        if name.startswith("sglang/srt/") and name.endswith(".py"):
            found |= set(
                re.findall(r'f"(\w+) hit an exception: \{traceback\}"', archive.read(name).decode())
            )
    named = {h[2].split(" hit")[0] for h in HANDLERS if " hit an exception" in h[2]}
    assert found == named, found ^ named


# --------------------------------------------------------------------------- the HTTP readers


def test_server_info_reader_on_the_real_endpoints() -> None:
    for name in ("boot01-server_info.json", "boot01-get_server_info.json"):
        info = json.loads((LOGS / name).read_text())
        assert info["version"] == "0.5.14"
        assert len(info["internal_states"]) == 1  # one DP rank
        # the tiny model's random draft accepts nothing: 1.0 (the bonus token only)
        assert checks.accept_length_from_server_info(info) == 1.0


def test_metrics_reader_on_the_real_scrapes() -> None:
    before = stats.metric_sums((LOGS / "boot01-metrics-before.txt").read_text())
    after = stats.metric_sums((LOGS / "boot01-metrics-after.txt").read_text())
    for key in (
        "sglang:prompt_tokens_total",
        "sglang:cached_tokens_total",
        "sglang:generation_tokens_total",
        "sglang:num_requests_total",
    ):
        assert after[key] > before[key] > 0, key
    assert after["sglang:num_requests_total"] - before["sglang:num_requests_total"] == 65
    rate = stats.hit_rate(before, after)
    assert rate is not None and round(rate, 3) == 0.535  # the shared-prefix run: 144,091 / 269,343


def test_chat_stream_decode_speed_counts_after_the_first_token() -> None:
    """sglang's chat stream: a role chunk, content (or a reasoning parser's reasoning_content)
    deltas, a finish chunk, then the usage chunk (``stream_options.include_usage``)."""

    def delta(**d: object) -> dict:
        return {"choices": [{"index": 0, "delta": {"reasoning_content": None, **d}}]}

    chunks = [
        (0.0, delta(role="assistant", content="")),
        (1.0, delta(content="The")),  # the prefill's token, after the prompt's prefill
        (1.5, delta(reasoning_content="hmm ok")),
        (2.0, delta(content=" answer is 42")),
        (2.0, {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}),
        (2.0, {"choices": [], "usage": {"completion_tokens": 11}}),
    ]
    assert checks.decode_speed_chat(chunks) == (10.0, 11)  # 10 tokens in the 1 s after the first
    assert checks.decode_speed_chat(chunks[:2]) == (0.0, 0)
