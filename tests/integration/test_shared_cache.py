"""Upstream caches live in the user cache, shared by every project, safe for two processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglforge import cache, pypi
from sglforge.patches.series import load_pin
from sglforge.patches.upstream import open_upstream


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def upstream_repo(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q")
    (path / "python").mkdir()
    (path / "python" / "x.py").write_text("x = 1\n")
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "release")
    git(path, "tag", "v0.1.0")
    return path


def project(path: Path, upstream: Path) -> Path:
    (path / "patches").mkdir(parents=True)
    (path / "patches" / "series").write_text("")
    (path / "patches" / "upstream.toml").write_text(f'url = "{upstream}"\nref = "v0.1.0"\n')
    return path


def test_cache_location(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SGLFORGE_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert cache.cache_root() == tmp_path / "home" / ".cache" / "sglforge"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    assert cache.cache_root() == tmp_path / "home" / ".cache" / "sglforge"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_root() == tmp_path / "xdg" / "sglforge"
    monkeypatch.setenv("SGLFORGE_CACHE", str(tmp_path / "mine"))
    assert cache.cache_root() == tmp_path / "mine"
    assert cache.upstream_mirrors() == tmp_path / "mine" / "upstream"


def test_two_projects_share_one_mirror(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SGLFORGE_CACHE", str(tmp_path / "cache"))
    up = upstream_repo(tmp_path / "sglang")
    a = project(tmp_path / "a", up)
    b = project(tmp_path / "b", up)
    ua = open_upstream(a, load_pin(a))
    ub = open_upstream(b, load_pin(b))
    assert ua.cache == ub.cache
    assert ua.cache.parent == tmp_path / "cache" / "upstream"
    assert ua.resolve("v0.1.0") == git(up, "rev-parse", "v0.1.0")
    assert not (a / "build" / "upstream").exists() or not any(
        (a / "build" / "upstream").glob("*.git")
    )


def test_two_processes_fill_one_cache(tmp_path: Path) -> None:
    up = upstream_repo(tmp_path / "sglang")
    roots = [project(tmp_path / name, up) for name in ("a", "b", "c")]
    env = dict(os.environ, SGLFORGE_CACHE=str(tmp_path / "cache"))
    code = (
        "import sys; from pathlib import Path; from sglforge.patches.series import load_pin; "
        "from sglforge.patches.upstream import open_upstream; r = Path(sys.argv[1]); "
        "print(open_upstream(r, load_pin(r)).resolve('v0.1.0'))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(r)], env=env, stdout=subprocess.PIPE, text=True
        )
        for r in roots
    ]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert set(outs) == {git(up, "rev-parse", "v0.1.0")}
    (mirror,) = (tmp_path / "cache" / "upstream").glob("*.git")
    git(mirror, "fsck", "--no-progress")


def test_linux_x86_64_wheels_whatever_the_host() -> None:
    def f(name: str, **kw: object) -> dict[str, object]:
        return {"filename": name, "packagetype": "bdist_wheel", "url": "u/" + name, **kw}

    files = [
        f("sglang-1.0-cp311-cp311-macosx_14_0_arm64.whl"),
        f("sglang-1.0-cp311-cp311-manylinux_2_34_aarch64.whl"),
        f("sglang-1.0-cp311-cp311-win_amd64.whl"),
        f("sglang-1.0-cp312-cp312-manylinux_2_34_x86_64.whl", digests={"sha256": "ab"}),
        f("sglang-1.0-cp311-cp311-manylinux_2_34_x86_64.whl", digests={"sha256": "cd"}),
        {"filename": "sglang-1.0.tar.gz", "packagetype": "sdist", "url": "u"},
    ]
    chosen = pypi._linux_wheel(files)
    assert chosen == {
        "filename": "sglang-1.0-cp311-cp311-manylinux_2_34_x86_64.whl",
        "url": "u/sglang-1.0-cp311-cp311-manylinux_2_34_x86_64.whl",
        "sha256": "cd",
    }
    pure = f("sglang-1.0-py3-none-any.whl")
    assert pypi._linux_wheel([*files, pure])["filename"] == "sglang-1.0-py3-none-any.whl"
    yanked = f("sglang-1.0-py3-none-any.whl", yanked=True)
    assert pypi._linux_wheel([files[0], yanked]) is None


def test_wheels_of_an_old_checkout_cache_are_reused(tmp_path: Path) -> None:
    old = tmp_path / "proj" / "build" / "pypi" / "pypi-demo" / "wheels"
    old.mkdir(parents=True)
    (old / "demo-0.1.0-py3-none-any.whl").write_bytes(b"wheel bytes")
    (seed,) = cache.legacy_wheels(tmp_path / "proj", "demo")
    got = pypi._wheel(tmp_path / "new", "demo", pypi.Version("0.1.0"), (), (seed,))
    assert got == tmp_path / "new" / "demo-0.1.0-py3-none-any.whl"
    assert got.read_bytes() == b"wheel bytes"


@pytest.mark.pypi
def test_pypi_json_api_lists_releases_and_picks_linux_wheels() -> None:
    versions = pypi.available_versions("sglang", ">=0.5.14,<=0.5.14")
    assert versions == [pypi.Version("0.5.14")]
    chosen = pypi._index_wheels("sglang")[pypi.Version("0.5.14")]
    assert chosen["filename"].endswith("x86_64.whl") or chosen["filename"].endswith("-any.whl")
    assert len(chosen["sha256"]) == 64
