"""README's walk-through, "A first patch to a published image", run line for line as written.

Its settings block (registry, scenario, model) is the one thing a reader changes, so the test
sets those three itself: a local registry on 127.0.0.1, the CPU stand-in scenario and its
model folder (TEST DOUBLES: no GPU here). The base image is the replica of the 0.5.14 release
image, given the way a user with a mirror would (``$SGLFORGE_BASE_IMAGE``). Every command
line of the walk-through block then runs unchanged, in one bash, from an empty folder.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import docker
import pytest

from standin.registry import Registry, free_port

REPO = Path(__file__).resolve().parents[2]
SECTION = "## A first patch to a published image"

pytestmark = [pytest.mark.docker, pytest.mark.pypi, pytest.mark.registry]


def walkthrough() -> tuple[list[str], str]:
    """(the settings' variable names, the commands block) of README's walk-through."""
    text = (REPO / "README.md").read_text()
    section = text.split(f"\n{SECTION}\n", 1)[1].split("\n## ", 1)[0]
    settings, commands = re.findall(r"```sh\n(.*?)```", section, re.S)[:2]
    names = [m.group(1) for m in re.finditer(r"^([A-Z_]+)=", settings, re.M)]
    return names, commands


def test_the_walkthrough_has_settings_then_commands() -> None:
    names, commands = walkthrough()
    assert names == ["REGISTRY", "SCENARIO", "MODEL"]
    lines = [ln for ln in commands.splitlines() if ln.strip()]
    assert 8 <= len(lines) <= 15 and lines[0].startswith("sglforge init ")
    assert any(ln.startswith("sglforge publish ") and "--dry-run" not in ln for ln in lines)


def test_the_walkthrough_runs_as_written(
    tmp_path: Path,
    docker_client: docker.DockerClient,
    standin_sglang_base: str,
    registry: Callable[..., Registry],
) -> None:
    _, commands = walkthrough()
    reg = registry()
    # the stand-in scenario on a port free now (the machine is shared), outside the project
    # like a user's own scenario file; its model folder given as MODEL
    scenario = tmp_path / "scenario" / "standin-cpu.toml"
    scenario.parent.mkdir()
    text = (REPO / "smoke" / "standin-cpu.toml").read_text()
    # its [bench] tables left out: the plain replica has no bench_serving dependencies, and
    # tests/docker/test_bench.py covers that step on the bench replica
    start = text.index("\n[bench]\n")
    text = text[:start] + text[text.index("\n# The same log patterns", start) :]
    scenario.write_text(re.sub(r"^port = \d+", f"port = {free_port()}", text, count=1, flags=re.M))
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO / "src"),  # this checkout's sglforge behind the console script
        "REGISTRY": reg.address,
        "SCENARIO": str(scenario),  # TEST DOUBLE: the CPU stand-in server
        # ...which a GPU target publishes only when told, and then records as a stand-in
        "SGLFORGE_ALLOW_STANDIN": "1",
        "MODEL": str(REPO / "tests" / "standin" / "model"),  # TEST DOUBLE: its model folder
        "SGLFORGE_BASE_IMAGE": standin_sglang_base.replace("v0.5.14", "v{version}"),
    }
    for var in ("SGLFORGE_ROOT", "SGLFORGE_UPSTREAM", "SGLFORGE_REGISTRY", "SGLFORGE_TARGET"):
        env.pop(var, None)
    work = tmp_path / "user"
    work.mkdir()
    res = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", commands],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    project = work / "my-sglang"
    try:
        assert res.returncode == 0, (
            f"exit {res.returncode}\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
        )
        assert "READY" not in res.stderr
        # what the walk-through promised: the fix in the queue, the image pushed and tagged
        series = (project / "patches" / "series").read_text()
        assert "0001-my-first-fix.patch" in series
        assert "sglforge/sglang:latest-mi355x" in res.stdout
        # inspect names a commit, and the released wheel the tree came from (pypi:sglang)
        assert re.search(r"\(v0\.5\.14 = [0-9a-f]{12}\)", res.stdout), res.stdout[-3000:]
        assert re.search(r"^wheel +sglang-0\.5\.14-.*\.whl sha256:[0-9a-f]{64}$", res.stdout, re.M)
        status, _, body = reg.get("/v2/sglforge/sglang/tags/list")
        tags = json.loads(body)["tags"] if status == 200 else []
        assert "latest-mi355x" in tags and any(f"-q{h}" in t for h in _hash(project) for t in tags)
        log = subprocess.run(
            ["git", "-C", str(project), "log", "--format=%s"], capture_output=True, text=True
        ).stdout
        assert "queue: my first fix" in log
    finally:
        _remove_images(docker_client, project)


def _hash(project: Path) -> list[str]:
    out = subprocess.run(
        ["python3", "-m", "sglforge", "--root", str(project), "patches", "hash", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    ).stdout
    return [json.loads(out)["short"]] if out else ["-no-hash-"]


def _remove_images(client: docker.DockerClient, project: Path) -> None:
    """The images this walk-through built (their tags carry its queue hash) and pushed."""
    if not (project / "patches").is_dir():
        return
    short = _hash(project)[0]
    for image in client.images.list():
        for tag in image.tags:
            if f"-q{short}" in tag or tag.endswith(":latest-mi355x") and "127.0.0.1:" in tag:
                try:
                    client.images.remove(tag, force=True)
                except docker.errors.APIError:
                    pass
