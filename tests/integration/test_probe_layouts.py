"""The base-image probe on every way sglang can be installed, each built for real with pip.

Each case is a temporary venv in which a checkout laid out like the release images'
(``WORKSPACE/sglang/python/sglang``, a git repository tagged ``v0.5.14``, upstream's
setuptools-scm settings, the released ``version.py`` and ``tools/get_version_tag.py`` from the
PyPI wheel) is installed with pip: editable through setuptools' finder (what
``pip install -e python`` does in the release images), editable through a path ``.pth``
(``editable_mode=compat``, how the images install aiter), and a plain site-packages install.
The probe runs with the workspace as its working directory, where the repository folder
``sglang`` is a namespace package that shadows the real one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sglforge.bases import _SGLANG_PROBE
from standin.base import TRIMMED_INIT, _pyproject, build_tool_wheels, release_wheel

pytestmark = pytest.mark.pypi

VERSION = "0.5.14"


def _checkout(workspace: Path, git_metadata: bool = True) -> Path:
    """``workspace/sglang``: a small sglang checkout at tag v0.5.14 (released files, trimmed)."""
    repo = workspace / "sglang"
    pkg = repo / "python" / "sglang"
    (pkg / "srt").mkdir(parents=True)
    (repo / "python" / "tools").mkdir()
    with zipfile.ZipFile(release_wheel(VERSION)) as zf:
        (pkg / "version.py").write_bytes(zf.read("sglang/version.py"))
        (pkg / "srt" / "server_args.py").write_bytes(zf.read("sglang/srt/server_args.py"))
        tool = zf.read("tools/get_version_tag.py")
    (repo / "python" / "tools" / "get_version_tag.py").write_bytes(tool)
    (pkg / "__init__.py").write_text(TRIMMED_INIT)
    (repo / "python" / "pyproject.toml").write_text(_pyproject(describe=True))
    (repo / ".gitignore").write_text("python/sglang/_version.py\n*.egg-info/\nbuild/\n")
    if git_metadata:
        for args in (
            ["init", "-q"],
            ["add", "-A"],
            ["commit", "-q", "-m", "v0.5.14"],
            ["tag", f"v{VERSION}"],
        ):
            subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    return repo


def _venv(where: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    return where / "bin" / "python"


def _pip(python: Path, *args: str, cwd: Path) -> None:
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    cmd = [str(python), "-m", "pip", "install", "-q", "--no-index"]
    cmd += ["--find-links", str(build_tool_wheels()), *args]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _probe(python: Path, cwd: Path) -> dict:
    proc = subprocess.run(
        [str(python), "-c", _SGLANG_PROBE], cwd=cwd, capture_output=True, text=True, check=True
    )
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("SGLFORGE-PROBE "))
    return json.loads(line.removeprefix("SGLFORGE-PROBE "))


@pytest.mark.parametrize(
    ("install", "args", "where"),
    [
        ("editable-finder", ["-e", "python[all_hip]"], "checkout"),
        (
            "editable-pth",
            ["--config-settings", "editable_mode=compat", "-e", "python"],
            "checkout",
        ),
        ("site-packages", ["./python"], "site-packages"),
    ],
)
def test_probe_finds_the_real_package_and_release(
    tmp_path: Path, install: str, args: list[str], where: str
) -> None:
    workspace = tmp_path / "sgl-workspace"
    repo = _checkout(workspace)
    python = _venv(tmp_path / "venv")
    _pip(python, *args, cwd=repo)
    # From the workspace the repository folder is what a naive lookup finds.
    naive = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('sglang').origin)"],
        cwd=workspace,
        capture_output=True,
        text=True,
        check=True,
    )
    if install == "editable-finder":
        # The finder comes after the path entries: a namespace package (no __init__.py) wins.
        assert naive.stdout.strip() == "None"
    got = _probe(python, cwd=workspace)
    if where == "checkout":
        assert got["path"] == str((repo / "python" / "sglang").resolve())
    else:
        site = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert got["path"] == str(Path(site, "sglang").resolve())
    assert got["install"] == install
    assert (got["version"], got["version_source"]) == (VERSION, "_version.py")
    assert got["dist_version"] == VERSION and not got["fallback_only"]


def test_probe_never_takes_the_fallback_version_for_a_release(tmp_path: Path) -> None:
    # No git metadata: setuptools-scm writes its fallback, the metadata says the same, and the
    # released version.py ends in the same literal. None of it names a release.
    workspace = tmp_path / "sgl-workspace"
    repo = _checkout(workspace, git_metadata=False)
    python = _venv(tmp_path / "venv")
    _pip(python, "-e", "python", cwd=repo)
    got = _probe(python, cwd=workspace)
    assert got["path"] == str((repo / "python" / "sglang").resolve())
    assert got["dist_version"] == "0.0.0.dev0"
    assert got["version"] is None and got["fallback_only"] is True


def test_probe_without_sglang(tmp_path: Path) -> None:
    python = _venv(tmp_path / "venv")
    (tmp_path / "sglang").mkdir()  # a stray folder of that name is not an installation
    got = _probe(python, cwd=tmp_path)
    assert got["install"] is None and got["version"] is None
    shutil.rmtree(tmp_path / "venv")
