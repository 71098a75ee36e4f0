"""The PyPI history builder with real pip and git, against a local folder of tiny wheels.

pip is pointed at the folder with ``--no-index --find-links`` (no network): the wheels are
hand-made stand-ins for a project ``fakeglang`` (TEST DOUBLES), two files each.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from sglforge import git, pypi
from sglforge.errors import ConfigError, UpstreamError

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
def index(tmp_path: Path) -> Path:
    folder = tmp_path / "index"
    for v in ("0.1.0", "0.2.0", "0.3.0rc1"):
        make_wheel(folder, v)
    return folder


def pip_args(index: Path) -> tuple[str, ...]:
    return ("--no-index", "--find-links", str(index))


def build(cache: Path, index: Path, spec: str = ">=0.1", seed: bool = False) -> Path:
    """The history of ``index``'s releases; ``seed`` pre-fills the wheel cache (saves pip runs)."""
    if seed:
        wheels = cache / f"pypi-{PROJECT}" / "wheels"
        wheels.mkdir(parents=True, exist_ok=True)
        for wheel in index.glob("*.whl"):
            shutil.copy2(wheel, wheels / wheel.name)
    return pypi.history(cache, PROJECT, spec, pip_args=pip_args(index))


def tag_shas(repo: Path) -> dict[str, str]:
    return {t: git.out(repo, "rev-parse", f"{t}^{{commit}}") for t in git.tags(repo)}


def test_one_commit_per_release_in_version_order(tmp_path: Path, index: Path) -> None:
    repo = build(tmp_path / "cache", index, ">=0.1")
    assert pypi.tagged_versions(repo) == ["0.1.0", "0.2.0"]  # 0.3.0rc1: a pre-release
    log = git.out(repo, "log", "--format=%s", "main").splitlines()
    assert log == [
        "fakeglang 0.2.0: python/ tree of the released wheel",
        "fakeglang 0.1.0: python/ tree of the released wheel",
    ]
    assert git.out(repo, "rev-parse", "v0.2.0^") == git.out(repo, "rev-parse", "v0.1.0")
    files = git.out(repo, "ls-tree", "-r", "--format=%(objectmode) %(path)", "v0.2.0")
    # The package folder only, under python/: no dist-info, no compiled module.
    assert files.splitlines() == [
        "100644 python/fakeglang/__init__.py",
        "100755 python/fakeglang/run.sh",
    ]
    assert git.out(repo, "show", "v0.1.0:python/fakeglang/__init__.py") == "__version__ = '0.1.0'"
    assert "holds python/ only" in git.out(repo, "log", "-1", "--format=%B", "v0.1.0")
    assert (tmp_path / "cache" / "pypi-fakeglang" / "wheels").is_dir()


def test_same_versions_give_the_same_shas_anywhere(tmp_path: Path, index: Path) -> None:
    a = tag_shas(build(tmp_path / "a", index))
    b = tag_shas(build(tmp_path / "b", index, ">=0.0.1", seed=True))
    assert a == b
    # Pinned: only a change of content or of the builder's format may change these.
    assert a == {
        "v0.1.0": GOLDEN["v0.1.0"],
        "v0.2.0": GOLDEN["v0.2.0"],
    }


GOLDEN = {
    "v0.1.0": "aecd373d6e66eec813b3d56b9ea6bdfe43e9456b",
    "v0.2.0": "d675f9256d757d0d81ea5e3e25f0a4d79f8d7e60",
}


def test_new_releases_are_appended_and_wheels_never_downloaded_twice(
    tmp_path: Path, index: Path
) -> None:
    cache = tmp_path / "cache"
    repo = build(cache, index)
    before = tag_shas(repo)
    # Same file name, other bytes: if the cached wheel were downloaded again, v0.1.0 would change.
    make_wheel(index, "0.1.0", body="replaced = True\n")
    make_wheel(index, "0.4.0")
    again = build(cache, index)
    assert again == repo
    after = tag_shas(repo)
    assert {t: after[t] for t in before} == before
    assert pypi.tagged_versions(repo) == ["0.1.0", "0.2.0", "0.4.0"]
    assert git.out(repo, "rev-parse", "v0.4.0^") == before["v0.2.0"]
    assert git.out(repo, "rev-parse", "main") == after["v0.4.0"]


def test_a_release_inserted_before_the_end_rebuilds_from_there(tmp_path: Path, index: Path) -> None:
    cache = tmp_path / "cache"
    repo = build(cache, index, seed=True)
    before = tag_shas(repo)
    make_wheel(index, "0.1.5")
    after = tag_shas(build(cache, index))
    assert after["v0.1.0"] == before["v0.1.0"]
    assert after["v0.2.0"] != before["v0.2.0"]  # its parent is now v0.1.5
    assert pypi.tagged_versions(repo) == ["0.1.0", "0.1.5", "0.2.0"]


def test_a_rebuild_from_the_start_keeps_every_old_object(tmp_path: Path, index: Path) -> None:
    cache = tmp_path / "cache"
    repo = build(cache, index, ">=0.0.1", seed=True)
    before = tag_shas(repo)
    make_wheel(index, "0.0.5")  # before the first release: nothing can be kept
    after = tag_shas(build(cache, index, ">=0.0.1"))
    assert pypi.tagged_versions(repo) == ["0.0.5", "0.1.0", "0.2.0"]
    assert after["v0.1.0"] != before["v0.1.0"]
    assert git.run(repo, "rev-parse", "--verify", "v0.0.5^", check=False).status != 0  # a root
    for sha in before.values():  # still there for caches that borrow objects
        assert git.run(repo, "cat-file", "-e", f"{sha}^{{commit}}", check=False).status == 0


def test_pre_releases_only_when_the_specifier_names_one(tmp_path: Path, index: Path) -> None:
    assert pypi.available_versions(PROJECT, ">=0.1", pip_args=pip_args(index)) == [
        pypi.Version("0.1.0"),
        pypi.Version("0.2.0"),
    ]
    repo = build(tmp_path / "cache", index, ">=0.2,<=0.3.0rc1", seed=True)
    assert pypi.tagged_versions(repo) == ["0.2.0", "0.3.0rc1"]


def test_no_matching_release_is_an_upstream_error(tmp_path: Path, index: Path) -> None:
    with pytest.raises(UpstreamError) as err:
        build(tmp_path / "cache", index, ">=9")
    assert "no release matches '>=9'" in err.value.message
    assert "newest on the index: 0.2.0" in err.value.message
    assert err.value.hint and "pypi:fakeglang>=0.2.0" in err.value.hint


def test_unknown_project_is_an_upstream_error(tmp_path: Path, index: Path) -> None:
    with pytest.raises(UpstreamError) as err:
        pypi.history(tmp_path / "cache", "nosuchproject-sglforge", pip_args=pip_args(index))
    assert "no release found" in err.value.message
    assert err.value.hint and "pip index versions nosuchproject-sglforge" in err.value.hint


def test_unreachable_index_is_an_upstream_error_with_a_hint(tmp_path: Path) -> None:
    # Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
    args = ("--index-url", "http://127.0.0.1:9/simple", "--retries", "1", "--timeout", "2")
    with pytest.raises(UpstreamError) as err:
        pypi.history(tmp_path / "cache", PROJECT, ">=0.1", pip_args=args)
    assert "unreachable" in err.value.message
    assert err.value.hint and "--upstream PATH" in err.value.hint


def test_invalid_specifier_is_a_config_error(tmp_path: Path, index: Path) -> None:
    with pytest.raises(ConfigError):
        build(tmp_path / "cache", index, "=>1")


def test_leftovers_of_a_killed_build_are_recovered(tmp_path: Path, index: Path) -> None:
    cache = tmp_path / "cache"
    repo = build(cache, index, seed=True)
    shas = tag_shas(repo)
    # Killed between the two renames: only the old history exists, under its .old name.
    os.replace(repo, repo.with_name(repo.name + ".old"))
    stale = repo.with_name(repo.name + ".tmp-99999")
    stale.mkdir()
    (stale / "junk").write_text("half-built")
    assert build(cache, index) == repo
    assert tag_shas(repo) == shas
    assert not stale.exists()
    assert not repo.with_name(repo.name + ".old").exists()


def test_two_processes_building_at_once_agree(tmp_path: Path, index: Path) -> None:
    cache = tmp_path / "cache"
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from sglforge import git, pypi
        repo = pypi.history(Path({str(cache)!r}), {PROJECT!r}, ">=0.1",
                            pip_args=("--no-index", "--find-links", {str(index)!r}))
        print(git.out(repo, "rev-parse", "main"))
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs[0] == outs[1] == tag_shas(build(cache, index))["v0.2.0"]
