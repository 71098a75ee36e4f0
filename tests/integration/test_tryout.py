"""``sglforge tryout``'s parts that need no Docker build: the registry it starts and stops
(Debian's real ``docker-registry`` on 127.0.0.1), the scenario and settings it writes, and the
wheel carrying the stand-ins it builds from. The whole path, base included, runs in
tests/docker/test_walkthrough.py (README's box, from the installed wheel).
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sglforge import progress, tryout
from sglforge.scenario.file import load_scenario
from sglforge.standin.registry import answers

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.registry
def test_the_registry_runs_until_stop_and_is_reused_meanwhile(tmp_path: Path) -> None:
    said: list[str] = []

    class Lines(progress.Progress):
        def info(self, message: str) -> None:
            said.append(message)

    folder = tmp_path / "tryout"
    folder.mkdir()
    try:
        address, started = tryout.start_registry(folder, Lines())
        assert started and address.startswith("127.0.0.1:") and answers(address)
        # a second try-out in the same folder takes the running one
        again, started_again = tryout.start_registry(folder, Lines())
        assert (again, started_again) == (address, False)
        assert any("reused" in line for line in said), said
        pid, running_at = tryout.running_registry(folder) or (0, "")
        assert running_at == address
    finally:
        stopped = tryout.stop(folder)
    assert stopped == pid and not answers(address)
    assert tryout.running_registry(folder) is None and tryout.stop(folder) is None
    # a stale pid file naming another process is never signalled
    (folder / "registry" / "pid").write_text(f"{os.getpid()} {address}\n")
    assert tryout.stop(folder) is None


def test_the_scenario_is_the_stand_in_one_and_loads(tmp_path: Path) -> None:
    scenario_path, model = tryout.write_scenario(tmp_path, bench=False)
    sc = load_scenario(scenario_path)
    assert sc.name == "standin-cpu" and sc.accelerator == "none"
    assert sc.model_path == model and (model / "config.json").is_file()
    with_bench = load_scenario(tryout.write_scenario(tmp_path / "bench", bench=True)[0])
    assert with_bench.bench is not None and sc.bench is None


def test_the_settings_are_shell_lines_that_round_trip(tmp_path: Path) -> None:
    env = {
        "REGISTRY": "127.0.0.1:5000",
        "SCENARIO": str(tmp_path / "a folder" / "standin-cpu.toml"),
        "SGLFORGE_BASE_IMAGE": "sglforge-standin/sglang:v{version}-rocm700-mi35x",
    }
    (tmp_path / "env.sh").write_text(tryout.shell_lines(env))
    out = subprocess.run(
        [
            "bash",
            "-c",
            '. ./env.sh && printf "%s\\n" "$REGISTRY" "$SCENARIO" "$SGLFORGE_BASE_IMAGE"',
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert out == list(env.values())


def test_the_plan_says_the_cost_and_the_label_before_anything_runs() -> None:
    text = "\n".join(tryout.plan_text("0.5.14", bench=False))
    assert "5 to 10 minutes" in text and "standin-cpu" in text and "TEST DOUBLES" in text
    assert "sglforge-standin/sglang:v0.5.14-rocm700-mi35x" in text
    bench = "\n".join(tryout.plan_text("0.5.14", bench=True))
    assert "a bench adds about 5 minutes per publish" in bench and "3.3 GB" in bench
    assert tryout.pinned_version() == "0.5.14"
    assert [tryout.release_version(v) for v in (None, "v0.5.16", "0.5.15")] == [
        "0.5.14",
        "0.5.16",
        "0.5.15",
    ]
    with pytest.raises(tryout.TryoutError, match="not a release version"):
        tryout.release_version("../x")


@pytest.mark.pypi
def test_the_wheel_ships_the_stand_ins(tmp_path: Path) -> None:
    """What tryout builds from is in the wheel: the builder, the registry helper, the server
    (as data), the scenario and its model file."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
        env=env,
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = tmp_path.glob("sglforge-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in (
        "sglforge/tryout.py",
        "sglforge/cli/tryout.py",
        "sglforge/standin/base.py",
        "sglforge/standin/registry.py",
        "sglforge/data/standin/server.py",
        "sglforge/data/project/smoke/standin-cpu.toml",
        "sglforge/data/project/tests/standin/model/config.json",
        "sglforge/data/project/patches/upstream.toml",
    ):
        assert shipped in names, shipped
    server = zipfile.ZipFile(wheel).read("sglforge/data/standin/server.py")
    assert server == (REPO / "src" / "sglforge" / "data" / "standin" / "server.py").read_bytes()
