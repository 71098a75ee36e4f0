"""Smoke and bench without Docker (issue 40): the stand-in server (src/sglforge/data/standin/
server.py) run as a local process through the process runtime, and as a server sglforge did
not start (--server-url); a crash during boot and mid-run, a hang, and the teardown of the
whole process group after success, crash, hang and Ctrl-C. The bench's client is the
stand-in bench_serving (tests/standin/bench_serving.py), both installed as the ``sglang``
package of a folder on the child's PYTHONPATH, as an unpacked site folder is on a GPU node.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sglforge.bench.runner import run_bench
from sglforge.engine.profile import Mount, Profile
from sglforge.errors import BenchError, ConfigError
from sglforge.project import Project
from sglforge.requests import SmokeRequest
from sglforge.scenario.file import load_scenario
from sglforge.smoke.runner import run_smoke
from sglforge.smoke.runtime import (
    ContainerRuntime,
    ProcessRuntime,
    child_env,
    group_alive,
    map_path,
    parse_server_url,
)

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "src" / "sglforge" / "data" / "standin" / "server.py"
CLIENT = ROOT / "tests" / "standin" / "bench_serving.py"
MODEL = ROOT / "tests" / "standin" / "model"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose ``sglang`` package is the stand-in server and bench client."""
    folder = tmp_path_factory.mktemp("site")
    (folder / "sglang").mkdir()
    (folder / "sglang" / "__init__.py").write_text("")
    (folder / "sglang" / "launch_server.py").write_bytes(SERVER.read_bytes())
    (folder / "sglang" / "bench_serving.py").write_bytes(CLIENT.read_bytes())
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scenario_file(folder: Path, load_timeout: float = 20, priming: bool = False) -> Path:
    """The shipped stand-in scenario as a process-runtime one: no in-image tokenizer, a
    small bench workload (64 requests a knee probe: 59+ bound a TTFT p95), no single stream
    (its prompt program needs transformers)."""
    text = (ROOT / "smoke" / "standin-cpu.toml").read_text()
    swaps = [
        ('path = "../tests/standin/model"', f'path = "{MODEL}"'),
        ('    "--tokenizer-path", "/opt/sglforge-standin/tokenizer",\n', ""),
        ('tokenizer = "/opt/sglforge-standin/tokenizer"', "# no tokenizer: the model's"),
        ('name = "standin-cpu"', 'name = "standin-process"\nruntime = "process"'),
        ("load_timeout = 60", f"load_timeout = {load_timeout}"),
        ("request_rates = [3, 6, 9, 18]", "request_rates = [40]"),
        ("output_len = 64\nprefix", "output_len = 16\nprefix"),
        ("concurrency = 2\nnum_prompts = 64", "concurrency = 2\nnum_prompts = 16"),
        ('STANDIN_LOAD_SECONDS = "0.5"', 'STANDIN_LOAD_SECONDS = "0.2"'),
        # 16 prompts at concurrency 2: the stand-in inserts a prefix only after its prefill (as
        # 0.5.14 does), so a group's second request can miss too; 0.48 was read under CI's load
        # (the H200 read 0.484 on a first probe). This test holds the runtime, not the hit.
        ("hit_rate_tolerance = 0.1", "hit_rate_tolerance = 0.2"),
        ("priming_boot = false", f"priming_boot = {str(priming).lower()}"),
    ]
    for old, new in swaps:
        assert old in text, old
        text = text.replace(old, new)
    start = text.index("[bench.single_stream]")
    text = text[:start] + text[text.index("[bench.gate]") :]
    path = folder / "process.toml"
    path.write_text(text)
    return path


def marked(mark: str) -> list[int]:
    """Pids of live processes whose environment carries ``mark`` (a /proc scan, no psutil):
    the server, its children and grandchildren alike."""
    found = []
    needle = f"STANDIN_TEST_MARK={mark}".encode()
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in env.read_bytes().split(b"\0"):
                stat = (env.parent / "stat").read_text().rpartition(")")[2].split()
                if stat[0] != "Z":
                    found.append(int(env.parent.name))
        except OSError:
            continue
    return found


def members(pgid: int) -> list[int]:
    """Live (not zombie) processes of group ``pgid``, from /proc: a zombie waits only for its
    reaper (PID 1 here), it runs nothing."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[2] == str(pgid) and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


@pytest.fixture
def mark() -> Iterator[str]:
    """A fresh mark for the server's environment; nothing may carry it at the end."""
    value = uuid.uuid4().hex
    yield value
    assert marked(value) == [], "a process of the run is still running"


def request(site: Path, mark: str, port: int, **env: str) -> dict[str, object]:
    """SmokeRequest keywords: the process runtime on ``port``, the site on PYTHONPATH, the mark
    (the mark is no SGLFORGE_ variable of sglforge's own: it is passed as --env passes it)."""
    extra = {"PYTHONPATH": str(site), "STANDIN_TEST_MARK": mark, **env}
    return {"port": port, "env": extra, "runtime": "process", "python": (sys.executable,)}


# --------------------------------------------------------------------------- units


def test_paths_under_a_mount_become_the_hosts() -> None:
    mounts = [Mount("/data/m1", "/model"), Mount("/tmp/rep/", "/sglforge-bench")]
    assert map_path("/model", mounts) == "/data/m1"
    assert map_path("/model/../tok", mounts) == "/data/m1/../tok"
    assert map_path("--tokenizer=/model/t", mounts) == "--tokenizer=/data/m1/t"
    assert map_path("/sglforge-bench/x.jsonl", mounts) == "/tmp/rep/x.jsonl"
    assert map_path("/modelx", mounts) == "/modelx"
    assert map_path("a=/model", mounts) == "a=/model"  # not a flag: left alone


def test_the_interpreter_replaces_python3_and_prefixes_other_programs() -> None:
    rt = ProcessRuntime(("apptainer", "exec", "s.sif", "python3"))
    assert rt.argv(["python3", "-m", "x"], []) == [
        "apptainer",
        "exec",
        "s.sif",
        "python3",
        "-m",
        "x",
    ]
    assert rt.argv(["sglang", "serve"], []) == ["apptainer", "exec", "s.sif", "sglang", "serve"]
    assert ProcessRuntime(("/v/bin/python3",)).argv(["python", "-c", "1"], []) == [
        "/v/bin/python3",
        "-c",
        "1",
    ]


def test_the_child_gets_a_minimal_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLFORGE_REGISTRY_PASSWORD", "hunter2")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t")
    monkeypatch.setenv("PYTHONPATH", "/sglforge/src")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.setenv("LANG", "C.UTF-8")
    env = child_env({"A": "/model/x", "SGLFORGE_X": "1"}, [Mount("/m", "/model")])
    assert env["A"] == "/m/x" and env["CUDA_VISIBLE_DEVICES"] == "3" and env["LANG"] == "C.UTF-8"
    assert set(env) <= {"PATH", "HOME", "LANG", "CUDA_VISIBLE_DEVICES", "A"}
    assert "PYTHONPATH" not in env  # only when the scenario or --env passes it
    assert child_env({"PYTHONPATH": "/site"}, [])["PYTHONPATH"] == "/site"


@pytest.mark.parametrize(
    ("url", "want"),
    [
        ("http://10.0.0.5:30000", ("10.0.0.5", 30000, "http://10.0.0.5:30000")),
        ("http://host/", ("host", 80, "http://host:80")),
        ("http://[::1]:8", ("::1", 8, "http://[::1]:8")),
        ("ftp://h:1", None),
        ("http://h:1/v1", None),
        ("http://u:p@h:1", None),
        ("h:1", None),
    ],
)
def test_a_server_url_is_host_and_port(url: str, want: tuple[str, int, str] | None) -> None:
    if want is None:
        with pytest.raises(ConfigError, match="--server-url"):
            parse_server_url(url)
    else:
        assert parse_server_url(url) == want


def test_a_request_naming_no_runtime_runs_docker_whatever_the_scenario_says(
    tmp_path: Path,
) -> None:
    """publish and upgrade build requests with no runtime: they test the image itself, in a
    container, even with a scenario of ``runtime = "process"`` (only the smoke and bench
    commands read it)."""
    from sglforge.bench import runner as bench_runner
    from sglforge.smoke import runner as smoke_runner

    sc = load_scenario(scenario_file(tmp_path))
    assert sc.runtime == "process"
    for runtime, kind in ((None, "docker"), ("process", "process")):
        req = SmokeRequest(scenario=sc, log_dir=tmp_path / str(runtime), runtime=runtime)
        run = smoke_runner._prepare(ROOT, "img", req, None)
        ctx = bench_runner._prepare(ROOT, req, 1.0)
        assert run.rt is not None and run.rt.kind == ctx.rt.kind == kind


# --------------------------------------------------------------------------- teardown


GROUP = """
import os, signal, subprocess, sys, time
# only SIGKILL ends this group; its leader's last words go to the teardown log
signal.signal(signal.SIGTERM, lambda *_: print("terminated", flush=True))
subprocess.Popen([sys.executable, "-c", "import signal, time; "
                  "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
print("up", flush=True)
time.sleep(60)
"""


def test_the_whole_group_goes_even_when_it_ignores_sigterm(tmp_path: Path) -> None:
    """A server and a child that ignore SIGTERM: SIGKILL after the grace, the group empty."""
    os.environ["SGLFORGE_STOP_GRACE"] = "0.3"
    try:
        rt = ProcessRuntime((sys.executable,))
        with rt.running("", entrypoint=None, command=["python3", "-c", GROUP],
                        profile=Profile(), log_path=tmp_path / "server.log") as box:  # fmt: skip
            deadline = time.monotonic() + 10
            while "up" not in box.log_path.read_text() and time.monotonic() < deadline:
                time.sleep(0.05)
            pgid = box.pgid
            assert os.getpgid(pgid) == pgid != os.getpgid(0)  # its own session
            assert len(members(pgid)) == 2 and group_alive(pgid)
        assert members(pgid) == [] and not group_alive(pgid)
        assert box.exit_code == 128 + signal.SIGKILL
        assert box.log_path.read_text() == "up\n"
        assert (tmp_path / "server.teardown.log").read_text() == "terminated\n"
    finally:
        del os.environ["SGLFORGE_STOP_GRACE"]


def test_a_missing_interpreter_is_one_error_naming_it(tmp_path: Path) -> None:
    from sglforge.errors import SmokeError

    rt = ProcessRuntime((str(tmp_path / "no-python"),))
    with (
        pytest.raises(SmokeError, match="no-python: could not start it"),
        rt.running(
            "", entrypoint=None, command=["python3"], profile=Profile(), log_path=tmp_path / "l"
        ),
    ):
        pass


# --------------------------------------------------------------------------- smoke


def test_smoke_crash_during_boot_and_mid_run_are_failures_naming_the_exit(
    site: Path, mark: str, tmp_path: Path
) -> None:
    project = Project(ROOT)
    sc = load_scenario(scenario_file(tmp_path))
    for fault, where in (("crash", "ready"), ("crash-later", "stays-up")):
        req = SmokeRequest(
            scenario=sc,
            log_dir=tmp_path / fault,
            **request(site, mark, free_port(), STANDIN_FAULT=fault),  # type: ignore[arg-type]
        )
        report = run_smoke(project, "", req)
        assert report.verdict == "failed" and report.exit_code == 1, report.reason
        assert report.reason == "the server exited with code 1"
        failed = {c.name: c for c in report.checks if not c.passed and not c.skipped}
        assert where in failed, failed
        assert report.log_tail and report.image == f"process: {sys.executable}"
        assert marked(mark) == []


def test_smoke_hang_is_a_timeout_and_leaves_nothing(site: Path, mark: str, tmp_path: Path) -> None:
    sc = load_scenario(scenario_file(tmp_path))
    req = SmokeRequest(
        scenario=sc,
        log_dir=tmp_path / "hang",
        load_timeout=1.0,
        **request(site, mark, free_port(), STANDIN_FAULT="hang"),  # type: ignore[arg-type]
    )
    report = run_smoke(Project(ROOT), "", req)
    assert report.verdict == "failed"
    assert report.reason == "not ready after 1 s (the scenario's load timeout)"
    assert report.exit_code is None  # it was stopped, it did not exit by itself


def test_ctrl_c_mid_run_stops_the_group(site: Path, mark: str, tmp_path: Path) -> None:
    sc = load_scenario(scenario_file(tmp_path))
    req = SmokeRequest(
        scenario=sc,
        log_dir=tmp_path / "int",
        **request(site, mark, free_port()),  # type: ignore[arg-type]
    )

    def progress(message: str) -> None:
        if message.startswith("check arithmetic"):
            assert marked(mark), "the server runs while the checks do"
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_smoke(Project(ROOT), "", req, progress=progress)


def test_smoke_against_a_server_it_did_not_start_says_what_did_not_run(
    site: Path, mark: str, tmp_path: Path
) -> None:
    """--server-url: the checks run; boot time, logs and stays-up are skipped and named in
    every output; nothing is stopped (the server still answers afterwards)."""
    from sglforge.smoke.checks import http_request
    from sglforge.smoke.report import junit_xml, report_dict

    sc = load_scenario(scenario_file(tmp_path))
    port = free_port()
    rt = ProcessRuntime((sys.executable,))
    env = {**sc.container.env, "PYTHONPATH": str(site), "STANDIN_TEST_MARK": mark}
    profile = Profile(mounts=(Mount(str(MODEL), sc.model_mount),), env=env)
    with rt.running("", entrypoint=None, command=sc.container_command(port), profile=profile,
                    log_path=tmp_path / "outside.log"):  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        req = SmokeRequest(scenario=sc, log_dir=tmp_path / "url", server_url=url)
        report = run_smoke(Project(ROOT), "", req)
        assert http_request(f"{url}/health", None, timeout=5)[0] == 200
    assert report.verdict == "passed", report.reason
    assert report.not_run == ("boot time", "logs", "stays-up")
    assert "ready_s" not in report.figures and report.log_path is None
    assert report.reason.startswith("not run: boot time, logs, stays-up (a server sglforge did")
    skipped = {c.name: c.detail for c in report.checks if c.skipped}
    assert set(skipped) == {"logs", "stays-up"}
    assert all("not run" in d and "--server-url" in d for d in skipped.values())
    saved = json.loads((tmp_path / "url" / "report.json").read_text())
    assert saved == report_dict(report) and saved["server_url"] == url
    assert 'name="smoke.logs"' in junit_xml(report) and "<skipped" in junit_xml(report)


# --------------------------------------------------------------------------- bench


def test_bench_crash_mid_run_and_hang_are_errors_naming_them(
    site: Path, mark: str, tmp_path: Path
) -> None:
    root = tmp_path / "crash"
    sc = load_scenario(scenario_file(tmp_path))
    req = SmokeRequest(
        scenario=sc,
        log_dir=root,
        **request(site, mark, free_port(), STANDIN_FAULT="crash-later"),  # type: ignore[arg-type]
    )
    with pytest.raises(BenchError, match=r"the server exited with code 1 during the bench"):
        run_bench(Project(ROOT), "", req)
    assert marked(mark) == []
    (tmp_path / "h").mkdir()
    hung = load_scenario(scenario_file(tmp_path / "h", load_timeout=1))
    req = SmokeRequest(
        scenario=hung,
        log_dir=tmp_path / "hang",
        **request(site, mark, free_port(), STANDIN_FAULT="hang"),  # type: ignore[arg-type]
    )
    with pytest.raises(BenchError, match=r"not ready after 1 s"):
        run_bench(Project(ROOT), "", req)


@pytest.mark.parametrize("priming", [True, False], ids=["primed", "--no-priming-boot"])
def test_a_calibration_discards_a_priming_boot_and_says_so(
    site: Path, mark: str, tmp_path: Path, priming: bool
) -> None:
    """The first boot of a machine is not like the later ones (H200: 13-23 % apart, the later
    ones 1.4 %): a calibration boots once more first and discards it, and records that."""
    from sglforge.bench.runner import BenchProtocol, run_calibration

    sc = load_scenario(scenario_file(tmp_path, priming=True))
    req = SmokeRequest(scenario=sc, log_dir=tmp_path / "cal", **request(site, mark, free_port()))  # type: ignore[arg-type]
    protocol = BenchProtocol(priming=priming, noise_profile=tmp_path / "profile.json")
    profile, path = run_calibration(Project(ROOT), "", req, boots=2, protocol=protocol)
    logs = sorted(p.name for p in (tmp_path / "cal").glob("*.server.log"))
    primed = ["priming.server.log"] if priming else []
    assert logs == ["calibrate-0.server.log", "calibrate-1.server.log", *primed]
    assert len(profile.boot_means) == 2 and len(profile.boot_seconds) == 2
    assert json.loads(path.read_text())["priming_boot"] is priming
    assert marked(mark) == []


def test_bench_against_a_server_it_did_not_start_says_no_boot_and_no_comparison(
    site: Path, mark: str, tmp_path: Path
) -> None:
    from sglforge.bench.report import report_dict
    from sglforge.reports.bench import text

    sc = load_scenario(scenario_file(tmp_path))
    port = free_port()
    rt = ProcessRuntime((sys.executable,))
    env = {**sc.container.env, "PYTHONPATH": str(site), "STANDIN_TEST_MARK": mark}
    profile = Profile(mounts=(Mount(str(MODEL), sc.model_mount),), env=env)
    command = [*sc.container_command(port), "--enable-metrics"]
    with rt.running("", entrypoint=None, command=command, profile=profile,
                    log_path=tmp_path / "outside.log"):  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        base = request(site, mark, 0)
        req = SmokeRequest(scenario=sc, log_dir=tmp_path / "b", server_url=url,
                           env=base["env"], runtime="process", python=(sys.executable,))  # type: ignore[arg-type]  # fmt: skip
        with pytest.raises(ConfigError, match="--against"):
            run_bench(Project(ROOT), "", req, against="old")
        report = run_bench(Project(ROOT), "", req)
    assert report.ok, report
    assert report.boot_seconds == () and report.baseline is None
    assert "a server sglforge did not start" in report.no_baseline
    shown = "\n".join(text(report))
    assert "comparison: NOT RUN (a server sglforge did not start" in shown
    saved = json.loads((tmp_path / "b" / "report.json").read_text())
    assert saved == json.loads(json.dumps(report_dict(report)))
    assert any("no boot time" in n for n in saved["notes"])


# --------------------------------------------------------------------------- no Docker SDK


NO_DOCKER = textwrap.dedent(
    """
    import json, sys

    class NoDocker:
        def find_spec(self, name, path=None, target=None):
            if name == "docker" or name.startswith("docker."):
                raise ImportError(f"{name}: the Docker SDK is not here")
            return None

    sys.meta_path.insert(0, NoDocker())
    for m in [m for m in sys.modules if m == "docker" or m.startswith("docker.")]:
        del sys.modules[m]
    from sglforge.cli import main

    codes = []
    for args in json.loads(sys.argv[1]):
        try:
            main(args, prog_name="sglforge")
        except SystemExit as exc:
            codes.append(exc.code)
    docker = sorted(m for m in sys.modules if m == "docker" or m.startswith("docker."))
    print("RESULT " + json.dumps({"codes": codes, "docker": docker}))
    """
)


def test_smoke_and_bench_run_where_the_docker_sdk_cannot_be_imported(
    site: Path, mark: str, tmp_path: Path
) -> None:
    """The CLI commands, the scenario, both runners and the process runtime, in a Python where
    ``import docker`` raises: both run to completion and pass."""
    path = scenario_file(tmp_path)
    common = ["--scenario", str(path), "--runtime", "process", "--python", sys.executable,
              "--env", f"PYTHONPATH={site}", "--env", f"STANDIN_TEST_MARK={mark}"]  # fmt: skip
    runs = [
        ["smoke", *common, "--port", str(free_port()), "--log-dir", str(tmp_path / "s")],
        ["bench", *common, "--port", str(free_port()), "--report-dir", str(tmp_path / "b")],
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-c", NO_DOCKER, json.dumps(runs)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(line[-1][len("RESULT ") :])
    assert result == {"codes": [0, 0], "docker": []}, done.stdout[-3000:] + done.stderr[-3000:]
    smoke = json.loads((tmp_path / "s" / "report.json").read_text())
    assert smoke["verdict"] == "passed" and smoke["figures"]["ready_s"] > 0
    assert smoke["image"] == f"process: {sys.executable}"
    bench = json.loads((tmp_path / "b" / "report.json").read_text())
    assert bench["ok"] and len(bench["cost"]["boot_seconds"]) == 1
    assert (tmp_path / "b" / "candidate-0.server.log").stat().st_size > 0


def test_sglforge_killed_outright_takes_its_server_with_it(
    site: Path, mark: str, tmp_path: Path
) -> None:
    """SIGKILL runs no ``finally``: the server still goes, by the parent-death signal set in
    the child before exec (a stray server would hold the port and the GPU)."""
    path = scenario_file(tmp_path, load_timeout=60)
    argv = [sys.executable, "-m", "sglforge", "smoke", "--scenario", str(path),
            "--runtime", "process", "--python", sys.executable, "--port", str(free_port()),
            "--env", f"PYTHONPATH={site}", "--env", f"STANDIN_TEST_MARK={mark}",
            "--env", "STANDIN_FAULT=hang", "--log-dir", str(tmp_path / "k")]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while not marked(mark) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marked(mark), "the server never started"
    finally:
        proc.kill()
        proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while marked(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marked(mark) == [], "the server outlived sglforge's SIGKILL"


@pytest.mark.parametrize(
    ("runtime", "want"),
    [
        (ContainerRuntime(), "docker run --rm img:1 python3 -m sglang.bench_serving --help"),
        (ProcessRuntime(("python3",)), "python3 -m sglang.bench_serving --help"),
        (ProcessRuntime(("/v/bin/python3",)), "/v/bin/python3 -m sglang.bench_serving --help"),
        (
            ProcessRuntime(("apptainer", "exec", "x.sif", "python3")),
            "apptainer exec x.sif python3 -m sglang.bench_serving --help",
        ),
    ],
)
def test_a_hint_names_the_command_where_the_runtime_runs_it(runtime: object, want: str) -> None:
    """The bench's hints say what to type under that runtime, not ``docker run`` everywhere."""
    assert runtime.shell("img:1", ["python3", "-m", "sglang.bench_serving", "--help"]) == want  # type: ignore[attr-defined]
