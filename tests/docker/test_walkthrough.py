"""README's walk-through, "A first patch to a published image", run line for line as written,
inside its "Try it without a GPU" box, from the installed wheel.

Its settings block (registry, scenario, model) is the one thing a reader changes; on this
machine (no GPU) the try-it box sets them: ``sglforge tryout`` gives the stand-in base (the
replica of the 0.5.14 release image, as ``$SGLFORGE_BASE_IMAGE``), a registry on 127.0.0.1 and
the CPU stand-in scenario with its model folder (TEST DOUBLES). The wheel is built from this
checkout and installed in a fresh venv; the box's lines, with the walk-through's command lines
where the box says, then run unchanged in one bash from an empty folder. Cost over running
the walk-through alone: the wheel and the venv (10 to 30 s); the base is the session's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from sglforge import tryout

REPO = Path(__file__).resolve().parents[2]
SECTION = "## A first patch to a published image"
PLACEHOLDER = "# ... the walk-through's lines above, as written ..."

pytestmark = [pytest.mark.docker, pytest.mark.pypi, pytest.mark.registry]


def walkthrough() -> tuple[list[str], str, str]:
    """(the settings' variable names, the commands block, the try-it box) of README's
    walk-through."""
    text = (REPO / "README.md").read_text()
    section = text.split(f"\n{SECTION}\n", 1)[1].split("\n## ", 1)[0]
    settings, commands, box = re.findall(r"```sh\n(.*?)```", section, re.S)[:3]
    names = [m.group(1) for m in re.finditer(r"^([A-Z_]+)=", settings, re.M)]
    return names, commands, box


def test_the_walkthrough_has_settings_then_commands() -> None:
    names, commands, box = walkthrough()
    assert names == ["REGISTRY", "SCENARIO", "MODEL"]
    lines = [ln for ln in commands.splitlines() if ln.strip()]
    assert 8 <= len(lines) <= 15 and lines[0].startswith("sglforge init ")
    assert any(ln.startswith("sglforge publish ") and "--dry-run" not in ln for ln in lines)
    # the try-it box: tryout's settings, the walk-through in its place, then the stop
    assert box.count(PLACEHOLDER) == 1
    before, after = box.split(PLACEHOLDER)
    assert before.lstrip().startswith("sglforge tryout && . sglforge-tryout/env.sh")
    assert after.strip().splitlines()[-1].startswith("sglforge tryout --stop")


def test_tryout_sets_the_walkthrough_s_settings_to_stand_ins(tmp_path: Path) -> None:
    """The names tryout prints are the settings block's, plus the two the tool reads; its
    scenario is the stand-in one, on a port of its own, without [bench] unless asked."""
    names, _, _ = walkthrough()
    scenario, model = tryout.write_scenario(tmp_path, bench=False)
    text = scenario.read_text()
    assert 'name = "standin-cpu"' in text and 'accelerator = "none"' in text
    assert "\n[bench]\n" not in text and (model / "config.json").is_file()
    assert "\n[bench]\n" in tryout.write_scenario(tmp_path / "b", bench=True)[0].read_text()
    env = {"REGISTRY": "r", "SCENARIO": "s", "MODEL": "m", "SGLFORGE_BASE_IMAGE": "b"}
    lines = tryout.shell_lines({**env, "SGLFORGE_ALLOW_STANDIN": "1"}).splitlines()
    exported = [ln.split()[1].split("=")[0] for ln in lines if ln.startswith("export ")]
    assert exported[:3] == names


def test_the_walkthrough_runs_as_written(
    tmp_path: Path,
    docker_client: docker.DockerClient,
    standin_sglang_base: str,
) -> None:
    _, commands, box = walkthrough()
    bin_dir = _installed_wheel(tmp_path / "package")
    before, after = box.split(PLACEHOLDER)
    script = before + commands + after
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the wheel's code only
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    for var in ("SGLFORGE_ROOT", "SGLFORGE_UPSTREAM", "SGLFORGE_REGISTRY", "SGLFORGE_TARGET"):
        env.pop(var, None)
    for var in (*tryout.SETTINGS, "SGLFORGE_TRYOUT_DIR"):
        env.pop(var, None)  # set by the box, nowhere else
    work = tmp_path / "user"
    work.mkdir()
    try:
        res = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=1500,
        )
        _check(res, work / "my-sglang", work / "sglforge-tryout")
    finally:
        tryout.stop(work / "sglforge-tryout")
        _remove_images(docker_client, work / "my-sglang", work / "sglforge-tryout")


def _check(res: subprocess.CompletedProcess[str], project: Path, folder: Path) -> None:
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
    assert "READY" not in res.stderr
    # the try-out said what it builds and what that costs, before anything ran
    assert "5 to 10 minutes" in res.stderr and "standin-cpu" in res.stderr
    # what the walk-through promised: the fix in the queue, the image pushed and tagged
    series = (project / "patches" / "series").read_text()
    assert "0001-my-first-fix.patch" in series
    assert "sglforge/sglang:latest-mi355x" in res.stdout
    # ...on a stand-in, and said so
    assert "STAND-IN" in res.stdout + res.stderr
    # inspect names a commit, and the released wheel the tree came from (pypi:sglang)
    assert re.search(r"\(v0\.5\.14 = [0-9a-f]{12}\)", res.stdout), res.stdout[-3000:]
    assert re.search(r"^wheel +sglang-0\.5\.14-.*\.whl sha256:[0-9a-f]{64}$", res.stdout, re.M)
    # pushed to the try-out's registry (stopped by the box's last line; its storage stays)
    address = re.search(
        r"^export REGISTRY=(127\.0\.0\.1:\d+)$", (folder / "env.sh").read_text(), re.M
    )
    assert address and f"{address[1]}/sglforge/sglang:latest-mi355x" in res.stdout
    assert "registry (pid" in res.stderr and "stopped" in res.stderr
    stored = folder / "registry" / "storage" / "docker" / "registry" / "v2" / "repositories"
    tags = [p.name for p in (stored / "sglforge" / "sglang" / "_manifests" / "tags").iterdir()]
    log = subprocess.run(
        ["git", "-C", str(project), "log", "--format=%s"], capture_output=True, text=True
    ).stdout
    assert "queue: my first fix" in log
    assert "latest-mi355x" in tags and any(f"-q{h}" in t for h in _hash(project) for t in tags)


def _installed_wheel(work: Path) -> Path:
    """A wheel of this checkout installed in a fresh venv; the venv's bin folder."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    dist = work / "dist"
    for cmd in (
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)],
        [sys.executable, "-m", "venv", str(work / "venv")],
    ):
        subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=600)
    (wheel,) = dist.glob("sglforge-*.whl")
    pip = [str(work / "venv" / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)]
    subprocess.run(pip, env=env, check=True, capture_output=True, timeout=600)
    return work / "venv" / "bin"


def _hash(project: Path) -> list[str]:
    out = subprocess.run(
        ["python3", "-m", "sglforge", "--root", str(project), "patches", "hash", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    ).stdout
    return [json.loads(out)["short"]] if out else ["-no-hash-"]


def _remove_images(client: docker.DockerClient, project: Path, folder: Path) -> None:
    """The images this walk-through built (their tags carry its queue hash) and pushed to the
    try-out's own registry; never another test's (xdist workers share the engine)."""
    if not (project / "patches").is_dir():
        return
    short = _hash(project)[0]
    env = folder / "env.sh"
    found = (
        re.search(r"^export REGISTRY=(127\.0\.0\.1:\d+)$", env.read_text(), re.M)
        if (env.is_file())
        else None
    )
    ours = f"{found[1]}/" if found else None
    for image in client.api.images():  # the engine's list as it is (no inspect per image)
        for tag in image.get("RepoTags") or ():
            if f"-q{short}" in tag or (ours and tag.startswith(ours)):
                try:
                    client.images.remove(tag, force=True)
                except docker.errors.APIError:
                    pass
