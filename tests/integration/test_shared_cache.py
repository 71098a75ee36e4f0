"""Upstream caches live in the user cache, shared by every project, safe for two processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglforge import cache, pypi
from sglforge.queue.series import load_pin
from sglforge.queue.upstream import open_upstream


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
        "import sys; from pathlib import Path; from sglforge.queue.series import load_pin; "
        "from sglforge.queue.upstream import open_upstream; r = Path(sys.argv[1]); "
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


def test_linux_x86_64_wheels_whatever_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglforge import index

    names = [
        "sglang-1.0-cp311-cp311-macosx_14_0_arm64.whl",
        "sglang-1.0-cp311-cp311-manylinux_2_34_aarch64.whl",
        "sglang-1.0-cp311-cp311-win_amd64.whl",
        "sglang-1.0-cp312-cp312-manylinux_2_34_x86_64.whl",
        "sglang-1.0-cp311-cp311-manylinux_2_34_x86_64.whl",
        "sglang-1.0.tar.gz",
        "sglang-2.0-cp311-cp311-manylinux_2_34_x86_64.whl",
        "sglang-2.0-py3-none-any.whl",
        "sglang-3.0-cp311-cp311-win_amd64.whl",
    ]
    folder = tmp_path / "links"
    folder.mkdir()
    for name in names:
        (folder / name).write_bytes(b"x")
    monkeypatch.delenv(index.INDEX_ENV, raising=False)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", folder.as_uri())
    index.forget()
    chosen = {str(v): r.file.filename for v, r in pypi.releases("sglang").items()}
    index.forget()
    assert chosen == {
        "1.0": "sglang-1.0-cp311-cp311-manylinux_2_34_x86_64.whl",  # by name among x86_64
        "2.0": "sglang-2.0-py3-none-any.whl",  # a pure wheel first
    }  # 3.0: no Linux x86_64 wheel, left out


def test_wheels_of_an_old_checkout_cache_are_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglforge import index

    old = tmp_path / "proj" / "build" / "pypi" / "pypi-demo" / "wheels"
    old.mkdir(parents=True)
    (old / "demo-0.1.0-py3-none-any.whl").write_bytes(b"wheel bytes")
    (seed,) = cache.legacy_wheels(tmp_path / "proj", "demo")
    # the index lists the same bytes: the seeded wheel is checked against it, not fetched
    links = tmp_path / "links"
    links.mkdir()
    (links / "demo-0.1.0-py3-none-any.whl").write_bytes(b"wheel bytes")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.delenv(index.INDEX_ENV, raising=False)
    index.forget()
    got = pypi._wheel(tmp_path / "new", "demo", pypi.Version("0.1.0"), (seed,))
    index.forget()
    assert got == tmp_path / "new" / "demo-0.1.0-py3-none-any.whl"
    assert got.read_bytes() == b"wheel bytes"
    assert (got.parent / (got.name + ".sha256")).is_file()


@pytest.mark.pypi
def test_pypi_json_api_lists_releases_and_picks_linux_wheels() -> None:
    versions = pypi.available_versions("sglang", ">=0.5.14,<=0.5.14")
    assert versions == [pypi.Version("0.5.14")]
    chosen = pypi.releases("sglang")[pypi.Version("0.5.14")].file
    assert chosen.filename.endswith("x86_64.whl") or chosen.filename.endswith("-any.whl")
    assert len(chosen.sha256) == 64
