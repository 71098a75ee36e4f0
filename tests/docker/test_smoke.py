"""``sglforge smoke`` through a real engine against the stand-in server (TEST DOUBLE) image.

Every verdict goes through the real runner and a real container: pass, pass with warnings,
each failure kind, a crash reported within 2 s, a load timeout, "cannot run here", Ctrl-C and
SIGTERM during loading (no container left behind), and an orphan of a SIGKILLed runner reaped
by the next run. The server is started as ``python3 -m sglang.launch_server ARGS`` as the
container's command, on an image with no ENTRYPOINT (``CMD ["/bin/bash"]``) as upstream's.
"""

from __future__ import annotations

import io
import json
import signal
import socket
import subprocess
import sys
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import docker
import pytest

from junit_schema import assert_valid_junit
from pipelines import smoke_at
from sglforge import smoke
from sglforge.engine import containers

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
CPU = ROOT / "smoke" / "standin-cpu.toml"
CASE = "io.sglforge.test.case"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def case_labels(docker_labels: dict[str, str]) -> dict[str, str]:
    """The session's labels plus one unique to this test, to find its containers."""
    return {**docker_labels, CASE: uuid.uuid4().hex[:12]}


def containers_of(client: docker.DockerClient, labels: dict[str, str]) -> list[dict]:
    """This test's containers (id, state, labels), in one call: no per-container inspect that
    could race with a removal."""
    found = client.api.containers(all=True, filters={"label": f"{CASE}={labels[CASE]}"})
    return [{"id": c["Id"], "state": c["State"], "labels": c["Labels"]} for c in found]


Run = Callable[..., smoke.SmokeReport]


@pytest.fixture
def run(
    standin_sglang_base: str,
    docker_labels: dict[str, str],
    docker_client: docker.DockerClient,
    tmp_path: Path,
) -> Run:
    """``run(fault=None, **kw)``: one smoke run of the CPU scenario; asserts nothing is left."""

    def _run(fault: str | None = None, env: dict[str, str] | None = None, **kw: object):
        labels = case_labels(docker_labels)
        all_env = {**({"STANDIN_FAULT": fault} if fault else {}), **(env or {})}
        args: dict[str, object] = dict(
            port=free_port(), log_dir=tmp_path / f"run-{labels[CASE]}", env=all_env, labels=labels
        )
        args.update(kw)
        image = str(args.pop("image", standin_sglang_base))
        report = smoke_at(ROOT, image, CPU, **args)  # type: ignore[arg-type]
        assert containers_of(docker_client, labels) == [], "a smoke container was left behind"
        return report

    return _run


def failed(report: smoke.SmokeReport) -> set[str]:
    return {c.name for c in report.failed_checks}


# --------------------------------------------------------------------------- verdicts


def test_passing_run_with_the_full_container_profile(
    standin_sglang_base: str,
    docker_labels: dict[str, str],
    docker_client: docker.DockerClient,
    tmp_path: Path,
) -> None:
    labels = case_labels(docker_labels)
    seen: dict[str, dict] = {}

    def progress(message: str) -> None:
        # While the server runs, look at the container the runner started.
        if message.startswith("ready after"):
            (c,) = containers_of(docker_client, labels)
            seen["attrs"] = docker_client.api.inspect_container(c["id"])

    report = smoke_at(
        ROOT,
        standin_sglang_base,
        CPU,
        port=free_port(),
        log_dir=tmp_path,
        labels=labels,
        progress=progress,
    )
    assert report.verdict == "passed" and report.passed, smoke.table_rows(report)
    assert all(c.passed for c in report.checks)
    names = [c.name for c in report.checks]
    assert names[-8:] == list(smoke.CHECK_ORDER)
    assert report.figures["decode_tok_s"] >= 50  # type: ignore[operator]
    assert report.figures["spec_accept_length_server"] >= 2.5  # type: ignore[operator]
    assert report.figures["sglang_version"] == "0.5.14"
    assert report.image_id and report.image_digest
    assert report.log_path and "TEST DOUBLE" in report.log_path.read_text()
    assert json.loads((tmp_path / "report.json").read_text())["passed"] is True
    assert containers_of(docker_client, labels) == []

    host = seen["attrs"]["HostConfig"]
    assert host["NetworkMode"] == "host" and host["IpcMode"] == "host"
    assert "seccomp=unconfined" in host["SecurityOpt"] and host["CapAdd"] == ["SYS_PTRACE"]
    assert host["GroupAdd"] == ["video"] and host["ShmSize"] == 256 * 1024 * 1024
    assert {"Name": "nofile", "Soft": 16384, "Hard": 16384} in host["Ulimits"]
    (mount,) = seen["attrs"]["Mounts"]
    assert mount["Destination"] == "/models/standin" and mount["RW"] is False
    config = seen["attrs"]["Config"]
    assert config["Labels"]["io.sglforge.managed"] == "1"
    assert config["Labels"]["io.sglforge.test"] == "1"
    # `docker run IMAGE python3 -m sglang.launch_server ARGS`: the command, no entrypoint.
    assert not config["Entrypoint"]
    assert config["Cmd"][:3] == ["python3", "-m", "sglang.launch_server"]
    assert "--speculative-num-draft-tokens" in config["Cmd"]
    assert report.warnings == () and "log_warnings" not in report.figures


@pytest.mark.parametrize(
    ("fault", "env", "expected"),
    [
        ("wrong", {}, {"arithmetic"}),
        (
            "empty",
            {},
            {"serves", "arithmetic", "decode-speed", "spec-accept.requests", "spec-accept.server"},
        ),
        ("low-accept", {}, {"spec-accept.requests", "spec-accept.server"}),
        ("slow", {"STANDIN_DECODE_TOK_S": "20"}, {"decode-speed"}),
        ("forbidden-log", {}, {"logs"}),
        ("aiter-untuned,wrong", {}, {"arithmetic"}),
        ("crash-later", {}, {"serves", "stays-up", "logs"}),
    ],
)
def test_each_failure_kind_fails_exactly_its_checks(
    run: Run, fault: str, env: dict[str, str], expected: set[str]
) -> None:
    report = run(fault, env)
    assert report.verdict == "failed" and not report.passed
    assert failed(report) == expected, smoke.table_rows(report)
    if fault == "crash-later":
        assert report.exit_code == 1
        assert any("illegal memory access" in line for line in report.log_tail)
    if fault == "forbidden-log":
        (logs,) = [c for c in report.checks if c.name == "logs"]
        assert logs.detail.startswith("fused-metadata-copy-fallback: line ")
    if fault.startswith("aiter-untuned"):
        assert {w.name for w in report.warnings} == {
            "aiter-moe-default",
            "flydsl-heuristic-fallback",
        }


def test_a_correct_image_printing_aiters_untuned_moe_lines_passes_with_warnings(
    run: Run, tmp_path: Path
) -> None:
    report = run("aiter-untuned")
    assert report.verdict == "passed" and report.passed, smoke.table_rows(report)
    assert [(w.name, w.severity, w.count) for w in report.warnings] == [
        ("aiter-moe-default", "warn", 1),
        ("flydsl-heuristic-fallback", "warn", 1),
    ]
    assert report.warning_count == 2 and report.figures["log_warnings"] == 2
    (logs,) = [c for c in report.checks if c.name == "logs"]
    assert logs.passed and "2 warning line(s)" in logs.detail
    assert "[fused_moe] no tuned FlyDSL config for" in report.warnings[1].text
    assert "PASSED with 2 warning line(s)" in smoke.markdown(report)
    assert 'name="warnings" value="2"' in smoke.junit_xml(report)
    saved = json.loads((report.report_dir / "report.json").read_text())  # type: ignore[operator]
    assert saved["passed"] is True and saved["warning_count"] == 2


def test_given_real_lines_are_judged_by_their_severity(run: Run) -> None:
    moe = "[aiter] [fused_moe] using 1stage default for (256, 16, 6144, 256, 256, 8) "
    bad = "torch.AcceleratorError: HIP error: invalid device function"
    warned = run(env={"STANDIN_LOG_LINES": f"{moe}\n{moe}"})
    assert warned.passed and warned.warning_count == 2
    failed_run = run(env={"STANDIN_LOG_LINES": f"{moe}\n{bad}"})
    assert failed(failed_run) == {"logs"} and failed_run.warning_count == 1
    (logs,) = [c for c in failed_run.checks if c.name == "logs"]
    assert logs.detail.startswith("hip-invalid-device-function: line ")


def test_old_servers_are_read_through_get_server_info(run: Run) -> None:
    report = run("old-api")
    assert report.passed
    (spec,) = [c for c in report.checks if c.name == "spec-accept.server"]
    assert "/get_server_info" in spec.detail


def test_crash_while_loading_is_reported_within_two_seconds(run: Run) -> None:
    started = time.monotonic()
    report = run("crash", load_timeout=120)
    assert report.verdict == "failed"
    assert failed(report) == {"ready", "logs"}
    assert report.exit_code == 1
    assert "exited with code 1" in report.reason
    # The real failure: the weight loader's bare assert (linear.py:724 in 0.5.14), then the
    # launcher's SIGQUIT handler, as a real crashed child ends the log.
    assert any(line.endswith("AssertionError") for line in report.log_tail)
    assert "Received sigquit from a child process" in report.log_tail[-1]
    (logs,) = [c for c in report.checks if c.name == "logs"]
    assert "bare-assertion-error" in logs.detail and "process-crash" in logs.detail
    assert 0 < len(report.log_tail) <= smoke.LOG_TAIL_LINES
    assert report.figures["exit_to_verdict_s"] < 2.0  # type: ignore[operator]
    # Nowhere near the 120 s load timeout.
    assert time.monotonic() - started < 15


def test_load_timeout(run: Run) -> None:
    started = time.monotonic()
    report = run("hang", load_timeout=2)
    took = time.monotonic() - started
    (ready,) = [c for c in report.checks if c.name == "ready"]
    assert not ready.passed and "not ready after 2 s" in ready.detail
    assert report.verdict == "failed" and report.exit_code is None
    assert any("Load weight begin" in line for line in report.log_tail)
    assert 2 <= took < 10


def test_cannot_run_here(run: Run, tmp_path: Path) -> None:
    no_model = run(model=tmp_path / "absent")
    assert no_model.verdict == "cannot-run" and no_model.log_path is None
    assert failed(no_model) == {"preflight.model"}
    no_image = run(image="sglforge-standin/none:missing")
    assert no_image.verdict == "cannot-run" and failed(no_image) == {"preflight.image"}
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = run(port=busy.getsockname()[1])
    assert taken.verdict == "cannot-run" and failed(taken) == {"preflight.port"}


# --------------------------------------------------------------------------- the command


def sglforge(*args: str) -> list[str]:
    return [sys.executable, "-m", "sglforge", "--root", str(ROOT), "smoke", *args]


def label_args(labels: dict[str, str]) -> list[str]:
    return [a for k, v in labels.items() for a in ("--label", f"{k}={v}")]


def test_cli_json_junit_and_exit_codes(
    standin_sglang_base: str, docker_labels: dict[str, str], tmp_path: Path
) -> None:
    common = ["--image", standin_sglang_base, "--scenario", str(CPU), "--json"]
    junit = tmp_path / "junit.xml"
    summary = tmp_path / "summary.md"
    ok = subprocess.run(
        sglforge(
            *common,
            "--port",
            str(free_port()),
            "--junit",
            str(junit),
            "--env",
            "STANDIN_FAULT=aiter-untuned",
            "--log-dir",
            str(tmp_path / "ok"),
            *label_args(docker_labels),
        ),
        capture_output=True,
        text=True,
        timeout=120,
        env={**_env(), "GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert ok.returncode == 0, ok.stderr
    data = json.loads(ok.stdout)
    assert data["passed"] is True and data["warning_count"] == 2
    assert all({"name", "passed", "value", "threshold"} <= set(c) for c in data["checks"])
    assert_valid_junit(junit)
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "0"
    cases = suite.findall("testcase")
    assert len(cases) == len(data["checks"])
    props = {p.get("name"): p.get("value") for p in suite.find("properties") or []}
    assert props["warnings"] == "2"
    text = summary.read_text()
    assert "PASSED with 2 warning line(s)" in text and "| flydsl-heuristic-fallback | 1 |" in text

    bad = subprocess.run(
        sglforge(
            *common,
            "--port",
            str(free_port()),
            "--env",
            "STANDIN_FAULT=wrong",
            "--log-dir",
            str(tmp_path / "bad"),
            *label_args(docker_labels),
        ),
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
    )
    assert bad.returncode == 1, bad.stderr
    assert json.loads(bad.stdout)["verdict"] == "failed"

    cannot = subprocess.run(
        sglforge(*common, "--model", str(tmp_path / "absent"), "--log-dir", str(tmp_path / "c")),
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
    )
    assert cannot.returncode == 7, cannot.stderr
    assert json.loads(cannot.stdout)["verdict"] == "cannot-run"


def _env() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    env["PYTHONPATH"] = str(ROOT / "src")
    return env


def _start_hanging(standin: str, labels: dict[str, str], tmp_path: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        sglforge(
            "--image",
            standin,
            "--scenario",
            str(CPU),
            "--port",
            str(free_port()),
            "--env",
            "STANDIN_FAULT=hang",
            "--log-dir",
            str(tmp_path / "hang"),
            *label_args(labels),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        # A test run in the background inherits an ignored SIGINT; a terminal's Ctrl-C does not.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    return proc


def _wait_for_container(client: docker.DockerClient, labels: dict[str, str], proc) -> dict:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        running = [c for c in containers_of(client, labels) if c["state"] == "running"]
        if running:
            time.sleep(0.5)  # well into "loading"
            return running[0]
        if proc.poll() is not None:
            pytest.fail(f"sglforge smoke exited early: {proc.communicate()}")
        time.sleep(0.1)
    proc.kill()
    proc.communicate()
    pytest.fail("the smoke container never started")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_during_loading_leaves_no_container(
    standin_sglang_base: str,
    docker_labels: dict[str, str],
    docker_client: docker.DockerClient,
    tmp_path: Path,
    sig: signal.Signals,
) -> None:
    labels = case_labels(docker_labels)
    proc = _start_hanging(standin_sglang_base, labels, tmp_path)
    _wait_for_container(docker_client, labels, proc)
    proc.send_signal(sig)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == (143 if sig == signal.SIGTERM else 130), err  # 128 + signal
    assert "interrupted" in err
    assert containers_of(docker_client, labels) == []


def test_orphan_of_a_killed_runner_is_reaped_by_the_next_run(
    run: Run,
    standin_sglang_base: str,
    docker_labels: dict[str, str],
    docker_client: docker.DockerClient,
    tmp_path: Path,
) -> None:
    labels = case_labels(docker_labels)
    proc = _start_hanging(standin_sglang_base, labels, tmp_path)
    box = _wait_for_container(docker_client, labels, proc)
    assert box["labels"][containers.OWNER_PID_LABEL] == str(proc.pid)
    proc.kill()  # SIGKILL: no cleanup can run
    proc.communicate(timeout=30)
    # The orphan outlives its runner (unless a concurrent test session's run already reaped
    # it: reaping is engine-wide by design, so only "gone after a run" is asserted).
    run(model=tmp_path / "absent")  # any run reaps orphans first
    assert containers_of(docker_client, labels) == []


def test_reports_default_to_build_smoke_under_the_root(
    standin_sglang_base: str, tmp_path: Path
) -> None:
    report = smoke_at(tmp_path, standin_sglang_base, CPU, model=tmp_path / "absent")
    assert report.verdict == "cannot-run"
    assert report.report_dir is not None
    assert report.report_dir.parent == tmp_path / "build" / "smoke"
    assert report.report_dir.name.startswith("standin-cpu-")
    assert report.report_dir.name.endswith(f"-{report.run_id}")
    assert json.loads((report.report_dir / "report.json").read_text())["verdict"] == "cannot-run"
    # A second run in the same second gets its own folder: nothing is shared or overwritten.
    again = smoke_at(tmp_path, standin_sglang_base, CPU, model=tmp_path / "absent")
    assert again.report_dir != report.report_dir and again.run_id != report.run_id
    assert (report.report_dir / "report.json").is_file()
    assert (again.report_dir / "report.json").is_file()  # type: ignore[operator]


def test_smoke_runs_an_image_under_its_own_entrypoint_as_users_do(
    run: Run,
    standin_sglang_base: str,
    docker_labels: dict[str, str],
    docker_client: docker.DockerClient,
) -> None:
    base = docker_client.api.inspect_image(standin_sglang_base)["Config"]
    # The replica keeps upstream's run contract: no entrypoint, a shell as the command.
    assert not base["Entrypoint"] and base["Cmd"] == ["/bin/bash"]
    tag = f"sglforge-test/entrypoint:{uuid.uuid4().hex[:8]}"
    dockerfile = f'FROM {standin_sglang_base}\nENTRYPOINT ["/bin/false"]\n'
    docker_client.images.build(
        fileobj=io.BytesIO(dockerfile.encode()), tag=tag, labels=docker_labels, rm=True
    )
    try:
        # `docker run IMAGE python3 -m sglang.launch_server ...` runs /bin/false here: smoke
        # says so instead of clearing the ENTRYPOINT (sglforge's overlays reset it).
        report = run(image=tag)
        assert not report.passed and report.verdict == "failed", smoke.table_rows(report)
    finally:
        docker_client.images.remove(tag, force=True)
