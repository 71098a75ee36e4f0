"""The PyPI release store with real git, against local indexes of tiny wheels.

The index is a test server on 127.0.0.1 (``tests/index_server.py``) named by
``$SGLFORGE_PYPI_URL``; the wheels are hand-made stand-ins for a project ``fakeglang`` (TEST
DOUBLES), two files each.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from index_server import IndexServer, serve
from sglforge import git, index, pypi
from sglforge.errors import ConfigError, UpstreamError
from synthetic import git as run_git

PROJECT = "fakeglang"


def make_wheel(index: Path, version: str, body: str | None = None) -> Path:
    """A minimal valid wheel of fakeglang ``version`` (fixed timestamps and modes)."""
    index.mkdir(parents=True, exist_ok=True)
    path = index / f"{PROJECT}-{version}-py3-none-any.whl"
    dist = f"{PROJECT}-{version}.dist-info"
    entries = {
        f"{PROJECT}/__init__.py": (body or f"__version__ = {version!r}\n", 0o644),
        f"{PROJECT}/run.sh": ("#!/bin/sh\necho run\n", 0o755),
        f"{PROJECT}/_core.cpython-311-x86_64-linux-gnu.so": ("\x7fELF binary\n", 0o755),
        f"{dist}/METADATA": (
            f"Metadata-Version: 2.1\nName: {PROJECT}\nVersion: {version}\n",
            0o644,
        ),
        f"{dist}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
            0o644,
        ),
        f"{dist}/RECORD": ("", 0o644),
    }
    with zipfile.ZipFile(path, "w") as zf:
        for name, (data, mode) in entries.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o100000 | mode) << 16
            zf.writestr(info, data)
    return path


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    folder = tmp_path / "wheels-on-index"
    for v in ("0.1.0", "0.2.0", "0.3.0rc1"):
        make_wheel(folder, v)
    return folder


@pytest.fixture
def served(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[IndexServer]:
    with serve(IndexServer(folder)) as server:
        monkeypatch.setenv(index.INDEX_ENV, server.url())
        index.forget()
        yield server
    index.forget()


def build(cache: Path, spec: str = ">=0.1") -> Path:
    index.forget()  # the index may have changed since the last call
    return pypi.history(cache, PROJECT, spec)


def tag_shas(repo: Path) -> dict[str, str]:
    return {t: git.commit_id(repo, t) for t in git.tags(repo)}


def test_one_parentless_commit_per_release(tmp_path: Path, served: IndexServer) -> None:
    repo = build(tmp_path / "cache", ">=0.1")
    assert pypi.tagged_versions(repo) == ["0.1.0", "0.2.0"]  # 0.3.0rc1: a pre-release
    for tag in ("v0.1.0", "v0.2.0"):
        with pytest.raises(git.GitFailed, match=f"{tag}\\^"):
            git.commit_id(repo, f"{tag}^")  # parentless
    assert git.subject(repo, "main") == ("fakeglang 0.2.0: python/ tree of the released wheel")
    files = run_git(repo, "ls-tree", "-r", "--format=%(objectmode) %(path)", "v0.2.0")
    # The package folder only, under python/: no dist-info, no compiled module.
    assert files.splitlines() == [
        "100644 python/fakeglang/__init__.py",
        "100755 python/fakeglang/run.sh",
    ]
    assert run_git(repo, "show", "v0.1.0:python/fakeglang/__init__.py") == "__version__ = '0.1.0'"
    assert "holds python/ only" in run_git(repo, "log", "-1", "--format=%B", "v0.1.0")
    wheels = tmp_path / "cache" / "pypi-fakeglang" / "wheels"
    # the sha256 computed at download is recorded beside each wheel
    assert sorted(p.name for p in wheels.glob("*.sha256")) == [
        "fakeglang-0.1.0-py3-none-any.whl.sha256",
        "fakeglang-0.2.0-py3-none-any.whl.sha256",
    ]


def test_same_release_same_sha_whatever_else_was_imported(
    tmp_path: Path, served: IndexServer
) -> None:
    a = tag_shas(build(tmp_path / "a", ">=0.1"))
    # imported in another order, one at a time, on another "machine"
    for v in ("0.2.0", "0.1.0"):
        pypi.ensure(tmp_path / "b", PROJECT, [v])
    b = tag_shas(pypi.store(tmp_path / "b", PROJECT))
    c = tag_shas(pypi.ensure(tmp_path / "c", PROJECT, ["0.1.0"]))
    assert a == b
    assert c == {"v0.1.0": a["v0.1.0"]}
    # Pinned: only a change of content or of the store's format may change these.
    assert a == GOLDEN


def test_zlib_alone_imports_the_same_commits(
    tmp_path: Path, served: IndexServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ISA-L (pyproject's isal) is only faster: with zlib in its place, the same commits."""
    import zlib

    from sglforge.git import pack

    assert pack.fast_zlib is not zlib  # the dependency is installed here
    monkeypatch.setattr(pack, "fast_zlib", zlib)
    monkeypatch.setattr(pypi, "fast_zlib", zlib)
    assert tag_shas(build(tmp_path / "z", ">=0.1")) == GOLDEN


GOLDEN = {
    "v0.1.0": "28c77b0976b17655ddf4c8d00db2b59f12729342",
    "v0.2.0": "591e7cc738aff7c899ea291afdb2225d563d4907",
}


def test_growing_the_store_never_changes_a_sha(tmp_path: Path, served: IndexServer) -> None:
    """The lazy history: the pin first, then older and newer releases as check asks."""
    cache = tmp_path / "cache"
    repo = pypi.ensure(cache, PROJECT, ["0.2.0"], exact=True)
    assert pypi.tagged_versions(repo) == ["0.2.0"]
    assert [r for r in served.requests if r.startswith("/files/")] == [
        "/files/fakeglang-0.2.0-py3-none-any.whl"
    ]
    first = tag_shas(repo)
    make_wheel(served.folder, "0.0.5")  # an older release appears, and a newer one
    make_wheel(served.folder, "0.4.0")
    grown = tag_shas(build(cache, ">=0.0.1"))
    assert set(grown) == {"v0.0.5", "v0.1.0", "v0.2.0", "v0.4.0"}
    assert grown["v0.2.0"] == first["v0.2.0"]
    assert git.commit_id(repo, "main") == grown["v0.4.0"]


def test_wheels_are_never_downloaded_twice(tmp_path: Path, served: IndexServer) -> None:
    cache = tmp_path / "cache"
    build(cache)
    shutil_rmtree_store(cache)
    served.requests.clear()
    build(cache)  # the store is rebuilt from the cached wheels
    assert not [r for r in served.requests if r.startswith("/files/")]


def shutil_rmtree_store(cache: Path) -> None:
    import shutil

    shutil.rmtree(pypi.store(cache, PROJECT))


def test_pre_releases_only_when_the_specifier_names_one(
    tmp_path: Path, served: IndexServer
) -> None:
    assert pypi.available_versions(PROJECT, ">=0.1") == [
        pypi.Version("0.1.0"),
        pypi.Version("0.2.0"),
    ]
    repo = build(tmp_path / "cache", ">=0.2,<=0.3.0rc1")
    assert pypi.tagged_versions(repo) == ["0.2.0", "0.3.0rc1"]


def test_no_matching_release_is_an_upstream_error(tmp_path: Path, served: IndexServer) -> None:
    with pytest.raises(UpstreamError) as err:
        build(tmp_path / "cache", ">=9")
    assert "no release matches '>=9'" in err.value.message
    assert "newest on the index: 0.2.0" in err.value.message
    assert err.value.hint and "pypi:fakeglang>=0.2.0" in err.value.hint


def test_unknown_project_is_an_upstream_error(tmp_path: Path, served: IndexServer) -> None:
    with pytest.raises(UpstreamError) as err:
        pypi.history(tmp_path / "cache", "nosuchproject-sglforge")
    assert "no release with a Linux x86_64 wheel" in err.value.message
    assert served.url() in err.value.message
    assert err.value.hint and "pip config list" in err.value.hint


def test_unreachable_index_is_an_upstream_error_with_a_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
    monkeypatch.setenv(index.INDEX_ENV, "http://127.0.0.1:9/simple")
    index.forget()
    with pytest.raises(UpstreamError) as err:
        build(tmp_path / "cache")
    assert "unreachable" in err.value.message and "127.0.0.1:9" in err.value.message
    assert err.value.hint and "pip config" in err.value.hint


def test_invalid_specifier_is_a_config_error(tmp_path: Path, served: IndexServer) -> None:
    with pytest.raises(ConfigError):
        build(tmp_path / "cache", "=>1")


def test_a_damaged_store_is_rebuilt_from_the_wheels(
    tmp_path: Path, served: IndexServer, capfd: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    repo = build(cache)
    shas = tag_shas(repo)
    pack = next((repo / "objects" / "pack").glob("pack-*.pack"))
    data = pack.read_bytes()
    pack.chmod(0o644)
    pack.write_bytes(data[: len(data) // 2])  # truncated, as a full disk or a kill leaves it
    served.requests.clear()
    assert build(cache) == repo
    assert "is damaged" in capfd.readouterr().err
    assert tag_shas(repo) == shas
    assert git.fsck(repo) == ""
    assert not [r for r in served.requests if r.startswith("/files/")]


def test_leftovers_of_a_killed_rebuild_are_swept(tmp_path: Path, served: IndexServer) -> None:
    cache = tmp_path / "cache"
    repo = build(cache)
    shas = tag_shas(repo)
    stale = repo.with_name(repo.name + ".tmp-99999")
    stale.mkdir()
    (stale / "junk").write_text("half-built")
    assert build(cache) == repo
    assert tag_shas(repo) == shas
    assert not stale.exists()


def test_two_processes_importing_at_once_agree(tmp_path: Path, served: IndexServer) -> None:
    cache = tmp_path / "cache"
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from sglforge import git, pypi
        repo = pypi.history(Path({str(cache)!r}), {PROJECT!r}, ">=0.1")
        print(git.commit_id(repo, "v0.2.0"))
        """
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"))
    procs = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs[0] == outs[1] == tag_shas(build(cache))["v0.2.0"]


def deflated_wheel(folder: Path, version: str) -> Path:
    """A fakeglang wheel as real wheels are made: deflated members (of several sizes, an empty
    one, bytes that are not text), one stored member and an executable (TEST DOUBLE)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{PROJECT}-{version}-py3-none-any.whl"
    rng = __import__("random").Random(7)
    members = {
        f"{PROJECT}/__init__.py": (f"__version__ = {version!r}\n".encode(), 0o644, True),
        f"{PROJECT}/big.py": (b"x = 1  # a line\n" * 40_000, 0o644, True),
        f"{PROJECT}/noise.bin": (bytes(rng.randrange(256) for _ in range(70_000)), 0o644, True),
        f"{PROJECT}/empty.py": (b"", 0o644, True),
        f"{PROJECT}/kernels/a.cuh": (b"#pragma once\n", 0o644, True),
        f"{PROJECT}/kernels.py": (b"# sorts before kernels/ in a git tree\n", 0o644, True),
        f"{PROJECT}/kernels/a_b.cuh": (b"#pragma twice\n", 0o644, True),
        f"{PROJECT}/run.sh": (b"#!/bin/sh\necho run\n", 0o755, True),
        f"{PROJECT}/stored.txt": (b"kept as it is\n", 0o644, False),
        f"{PROJECT}-{version}.dist-info/METADATA": (b"Name: fakeglang\n", 0o644, True),
    }
    with zipfile.ZipFile(path, "w") as zf:
        for name, (data, mode, deflate) in members.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
            zf.writestr(info, data)
    return path


def fast_import_commit(tmp_path: Path, wheel: Path, message: bytes) -> str:
    """The commit ``git fast-import`` makes of the wheel's package files with sglforge's
    identity, date and ``message``: what the store's own pack writer must agree with."""
    repo = tmp_path / "by-fast-import.git"
    run_git(tmp_path, "init", "-q", "--bare", str(repo))
    who = f"{git.IDENTITY['GIT_COMMITTER_NAME']} <{git.IDENTITY['GIT_COMMITTER_EMAIL']}>".encode()
    stream = [b"commit refs/tags/v1\n", b"author %s 946684800 +0000\n" % who]
    stream += [b"committer %s 946684800 +0000\n" % who, b"data %d\n%s\n" % (len(message), message)]
    with zipfile.ZipFile(wheel) as zf:
        for info in sorted(zf.infolist(), key=lambda i: i.filename):
            if not info.filename.startswith(f"{PROJECT}/"):
                continue
            data = zf.read(info)
            mode = b"100755" if (info.external_attr >> 16) & 0o111 else b"100644"
            stream.append(b"M %s inline python/%s\n" % (mode, info.filename.encode()))
            stream.append(b"data %d\n%s\n" % (len(data), data))
    subprocess.run(
        ["git", "-C", str(repo), "fast-import", "--quiet"], input=b"".join(stream), check=True
    )
    return run_git(repo, "rev-parse", "v1")


def test_the_store_writes_the_commit_git_fast_import_makes(
    tmp_path: Path, served: IndexServer
) -> None:
    """The pack is written from the wheel's own deflate streams; git reads it as its own:
    fsck and verify-pack find nothing, and the commit is the one fast-import makes."""
    wheel = deflated_wheel(served.folder, "0.5.0")
    repo = build(tmp_path / "cache", "==0.5.0")
    assert run_git(repo, "fsck", "--full", "--strict", "--no-dangling") == ""
    for idx in (repo / "objects" / "pack").glob("pack-*.idx"):
        run_git(repo, "verify-pack", str(idx))
    message = subprocess.run(
        ["git", "-C", str(repo), "log", "-1", "--format=%B", "v0.5.0"],
        capture_output=True,
        check=True,
    ).stdout[:-1]  # %B adds a newline of its own
    assert git.commit_id(repo, "v0.5.0") == fast_import_commit(tmp_path, wheel, message)
    assert run_git(repo, "show", "v0.5.0:python/fakeglang/big.py").count("\n") == 39_999
    assert "tmp_" not in " ".join(p.name for p in (repo / "objects" / "pack").iterdir())


def test_a_member_whose_bytes_do_not_unpack_is_refused(tmp_path: Path, served: IndexServer) -> None:
    wheel = deflated_wheel(served.folder, "0.6.0")
    data = bytearray(wheel.read_bytes())
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo(f"{PROJECT}/big.py")
    at = info.header_offset + 30 + len(info.filename) + len(info.extra) + info.compress_size // 2
    data[at : at + 8] = b"\xff" * 8  # the CRC-32 the central directory records no longer holds
    wheel.write_bytes(bytes(data))
    (wheel.parent / (wheel.name + ".sha256")).unlink(missing_ok=True)
    cache = tmp_path / "cache"
    with pytest.raises(UpstreamError) as err:
        pypi.ensure(cache, PROJECT, ["0.6.0"], exact=True)
    assert "not a readable wheel" in err.value.message and "big.py" in err.value.message
    repo = pypi.store(cache, PROJECT)
    assert pypi.tagged_versions(repo) == []
    assert list((repo / "objects" / "pack").iterdir()) == []  # no pack, not even a temporary one


def test_the_mirror_takes_the_stores_refs_as_a_fetch_would(
    tmp_path: Path, served: IndexServer
) -> None:
    cache = tmp_path / "cache"
    store = pypi.ensure(cache, PROJECT, ["0.1.0"])
    mirrors = tmp_path / "mirrors"
    mirror = git.ensure_cache(mirrors, str(store), share_objects=True)
    assert git.tags(mirror) == ["v0.1.0"]
    pypi.ensure(cache, PROJECT, ["0.2.0"])
    assert git.ensure_cache(mirrors, str(store), share_objects=True) == mirror
    assert sorted(git.tags(mirror)) == ["v0.1.0", "v0.2.0"]
    assert git.commit_id(mirror, "refs/remotes/origin/main") == git.commit_id(store, "v0.2.0")
    run_git(store, "tag", "-d", "v0.1.0")  # a tag gone from the source goes (fetch --prune)
    git.ensure_cache(mirrors, str(store), share_objects=True)
    assert git.tags(mirror) == ["v0.2.0"]
    assert git.commit_id(mirror, "v0.2.0") == git.commit_id(store, "v0.2.0")
