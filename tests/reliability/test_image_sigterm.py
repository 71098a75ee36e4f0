"""Issue 10: SIGTERM is handled like Ctrl-C by build and smoke: containers they started are
removed (the build's base-image probe included), a message is printed and the exit code is
143. Real processes; the signal is sent once the state it must interrupt is observed (a
container exists), never after a fixed sleep alone."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import docker
import pytest

from helpers_build import STANDIN_OWNED, STANDIN_REPO, make_build_project, upstream_files
from standin.base import ensure_sglang_base

REPO = Path(__file__).resolve().parents[2]
BASE_TAG = f"{STANDIN_REPO}:v0.5.14-rocm700-mi35x"

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def build_base(docker_client: docker.DockerClient) -> str:
    files = {k: v.encode() for k, v in upstream_files().items() if k not in STANDIN_OWNED}
    return ensure_sglang_base("0.5.14", tag=BASE_TAG, files=files, client=docker_client)


def spawn(root: Path, args: list[str], labels: dict[str, str]) -> subprocess.Popen[str]:
    label_args = [x for k, v in labels.items() for x in ("--label", f"{k}={v}")]
    return subprocess.Popen(
        [sys.executable, "-m", "sglforge", "--root", str(root), *args, *label_args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SGLFORGE_OFFLINE": "1"},
    )


def ours(client: docker.DockerClient, run: str, role: str | None = None) -> list[dict]:
    filters = [f"io.sglforge.test-run={run}", "io.sglforge.managed=1"]
    if role:
        filters.append(f"io.sglforge.role={role}")
    return client.api.containers(all=True, filters={"label": filters})


def wait_for(proc: subprocess.Popen[str], seen: callable, limit: float = 180) -> bool:
    """Poll until ``seen()`` (True) or the process ends (False); bounded by ``limit``."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if seen():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.01)
    return False


def terminate(proc: subprocess.Popen[str], delay: float) -> tuple[int, str]:
    time.sleep(delay)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.2])
def test_build_probe_container_never_leaks_on_sigterm(
    tmp_path: Path, build_base: str, docker_client, docker_labels, delay: float
) -> None:
    run = uuid.uuid4().hex[:10]
    labels = {**docker_labels, "io.sglforge.test-run": run}
    project = make_build_project(tmp_path, repository=f"sglforge-test/sig-{run}")
    proc = spawn(project.root, ["build", "--upstream", str(project.upstream)], labels)
    try:
        seen = wait_for(proc, lambda: bool(ours(docker_client, run, "probe")))
        if not seen:
            pytest.fail(f"the probe container was never seen (exit {proc.returncode})")
        code, err = terminate(proc, delay)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 143, err
    assert "terminated" in err or "interrupted" in err, err
    assert "Traceback" not in err, err
    assert ours(docker_client, run) == [], "a container labelled io.sglforge.* was left"
    for img in docker_client.images.list(filters={"label": f"io.sglforge.test-run={run}"}):
        docker_client.images.remove(img.id, force=True)


@pytest.fixture(scope="module")
def standin_image(docker_client: docker.DockerClient) -> str:
    return ensure_sglang_base(client=docker_client)


@pytest.mark.parametrize("when", ["created", "loading", "ready"])
def test_smoke_container_never_leaks_on_sigterm(
    tmp_path: Path, standin_image: str, docker_client, docker_labels, when: str
) -> None:
    run = uuid.uuid4().hex[:10]
    labels = {**docker_labels, "io.sglforge.test-run": run}
    root = tmp_path / "proj"
    (root / "patches").mkdir(parents=True)
    (root / "patches" / "series").write_text("")
    (root / "smoke").mkdir()
    shutil.copytree(REPO / "tests" / "standin" / "model", root / "model")
    load = "3" if when != "ready" else "0.2"
    text = (REPO / "smoke" / "standin-cpu.toml").read_text()
    text = text.replace("../tests/standin/model", "../model").replace(
        'STANDIN_LOAD_SECONDS = "0.5"', f'STANDIN_LOAD_SECONDS = "{load}"'
    )
    port = 30400 + int(run[:4], 16) % 500
    scenario = root / "smoke" / "s.toml"
    scenario.write_text(text)
    args = ["smoke", "--image", standin_image, "--scenario", str(scenario), "--port", str(port)]
    proc = spawn(root, args, labels)
    try:

        def state() -> bool:
            found = ours(docker_client, run, "smoke")
            return bool(found) and (when == "created" or found[0].get("State") == "running")

        seen = wait_for(proc, state)
        if seen and when == "ready":
            seen = wait_for(proc, lambda: any("ready after" in x for x in _stderr_so_far(proc)), 60)
        if not seen:
            pytest.fail(f"the smoke state {when!r} was never seen (exit {proc.returncode})")
        code, err = terminate(proc, 0.0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 143, err
    assert "Traceback" not in err, err
    assert ours(docker_client, run) == [], "a smoke container was left"


_BUFFERS: dict[int, list[str]] = {}


def _stderr_so_far(proc: subprocess.Popen[str]) -> list[str]:
    """Lines the process has written to stderr so far (read without blocking)."""
    import select

    lines = _BUFFERS.setdefault(proc.pid, [])
    assert proc.stderr is not None
    while select.select([proc.stderr], [], [], 0)[0]:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
    return lines
