"""``pip install sglforge`` is enough: a wheel built from this checkout, installed in a fresh
venv and run OUTSIDE any checkout, lays out a project, plans a build and smoke-tests an image.

Marked ``pypi``: building the wheel fetches hatchling, the venv fetches sglforge's
dependencies, the dry run fetches the sglang 0.5.14 wheel (all from PyPI, pip's cache
helps). The image test is also marked ``docker``: it needs the engine and the release-image
replica (tests/standin/base.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UPSTREAM = "pypi:sglang>=0.5.14,<=0.5.14"
SHIPPED = (
    "images/*",
    "smoke/*.toml",
    "tests/standin/model/*",
    "patches/upstream.toml",
    "patches/series",
    "patches/*.patch",
    "patches/configs/*",
)

pytestmark = pytest.mark.pypi


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the wheel, the venv's bin folder) with the wheel installed."""
    work = tmp_path_factory.mktemp("package")
    dist = work / "dist"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)])
    (wheel,) = dist.glob("sglforge-*.whl")
    run([sys.executable, "-m", "venv", str(work / "venv")])
    bin_dir = work / "venv" / "bin"
    run([str(bin_dir / "python"), "-m", "pip", "install", "-q", str(wheel)])
    return wheel, bin_dir


def clean_env(**extra: str) -> dict[str, str]:
    # Not this checkout's code (conftest puts src/ on PYTHONPATH) nor its root.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SGLFORGE_ROOT")}
    return {**env, **extra}


def run(cmd: list[str], cwd: Path | None = None, **kw: object) -> subprocess.CompletedProcess:
    res = subprocess.run(
        cmd, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=900, **kw
    )
    assert res.returncode == 0, f"{cmd}: {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res


def test_the_wheel_ships_the_top_level_files_byte_for_byte(venv: tuple[Path, Path]) -> None:
    wheel, _ = venv
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for pattern in SHIPPED:
            for path in REPO.glob(pattern):
                rel = path.relative_to(REPO).as_posix()
                assert zf.read(f"sglforge/data/project/{rel}") == path.read_bytes(), rel
        assert any(n.endswith("/licenses/LICENSE") for n in names)
        meta = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "Requires-Dist: requests" in meta and "Project-URL: Source" in meta


def test_init_then_dry_run_outside_any_checkout(venv: tuple[Path, Path], tmp_path: Path) -> None:
    _, bin_dir = venv
    sglforge = str(bin_dir / "sglforge")
    out = run([sglforge, "init", "fork"], cwd=tmp_path).stdout
    assert "patches/series" in out
    project = tmp_path / "fork"
    res = run(
        [sglforge, "build", "--target", "mi355x", "--dry-run", "--upstream", UPSTREAM, "--json"],
        cwd=project,
    )
    plan = json.loads(res.stdout)
    assert plan["dry_run"] and plan["base"] == "lmsysorg/sglang:v0.5.14-rocm700-mi35x"
    assert plan["labels"]["io.sglforge.upstream.revision"]
    # the installed code ran, not this checkout's
    where = run([str(bin_dir / "python"), "-c", "import sglforge; print(sglforge.__file__)"])
    assert str(REPO) not in where.stdout


@pytest.mark.docker
def test_build_and_standin_smoke_from_the_installed_wheel(
    venv: tuple[Path, Path], tmp_path: Path, docker_client, docker_labels: dict[str, str]
) -> None:
    from standin.base import ensure_sglang_base
    from standin.registry import free_port

    base = ensure_sglang_base("0.5.14", client=docker_client)
    _, bin_dir = venv
    sglforge = str(bin_dir / "sglforge")
    run([sglforge, "init", "fork"], cwd=tmp_path)
    project = tmp_path / "fork"
    labels = [a for k, v in docker_labels.items() for a in ("--label", f"{k}={v}")]
    built = run(
        [sglforge, "build", "--target", "mi355x", "--base-image", base, "--upstream", UPSTREAM]
        + labels
        + ["--json"],
        cwd=project,
    )
    image = json.loads(built.stdout)["image"]
    smoke = run(
        [sglforge, "smoke", "--image", image, "--scenario", "smoke/standin-cpu.toml", "--json"]
        + ["--port", str(free_port())]  # not the scenario's: tests smoke side by side (xdist)
        + labels,
        cwd=project,
    )
    assert json.loads(smoke.stdout)["passed"] is True


def test_installed_from_git_the_workflow_installs_that(
    venv: tuple[Path, Path], tmp_path: Path
) -> None:
    """sglforge is on no index: installed from a git URL (pip records it, PEP 610), `init`
    writes a workflow that pip-installs exactly that, and that requirement installs."""
    src = tmp_path / "sglforge-src"
    files = run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    ).stdout.split("\0")
    for rel in filter(None, files):
        if (REPO / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_bytes((REPO / rel).read_bytes())
    run(["git", "init", "-q", str(src)])
    run(["git", "-C", str(src), "add", "-A"])
    run(
        [
            "git",
            "-C",
            str(src),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t.invalid",
            "commit",
            "-qm",
            "sglforge",
        ]
    )
    sha = run(["git", "-C", str(src), "rev-parse", "HEAD"]).stdout.strip()
    # file://localhost/: pip's older requirement parser refuses a URL with no host
    requirement = f"sglforge @ git+file://localhost{src}@{sha}"
    for name in ("from-git", "ci"):
        run([sys.executable, "-m", "venv", "--system-site-packages", str(tmp_path / name)])
    pip = [str(tmp_path / "from-git" / "bin" / "python"), "-m", "pip", "install", "-q"]
    run([*pip, "--no-deps", requirement])
    run([str(tmp_path / "from-git" / "bin" / "sglforge"), "init", "fork"], cwd=tmp_path)
    workflow = (tmp_path / "fork" / ".github" / "workflows" / "sglforge.yml").read_text()
    written = re.search(r'^  SGLFORGE_INSTALL: "(.*)"$', workflow, re.M)
    assert written and written.group(1).startswith("sglforge @ git+file://"), workflow
    assert written.group(1).endswith(f"{src}@{sha}")  # the commit installed, not a branch
    requirement = written.group(1)
    # what the CI job would run installs (in a venv of its own)
    ci = [str(tmp_path / "ci" / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps"]
    run([*ci, requirement])
    version = run([str(tmp_path / "ci" / "bin" / "sglforge"), "--version"]).stdout
    assert "0.1.0" in version
    # a local wheel is no place CI can reach: the release tag, and --install-from wins
    _, bin_dir = venv
    run([str(bin_dir / "sglforge"), "init", "fork2"], cwd=tmp_path)
    text = (tmp_path / "fork2" / ".github" / "workflows" / "sglforge.yml").read_text()
    assert "git+https://github.com/sglforge/sglforge@v0.1.0" in text and "sglforge==" not in text
