"""The construction's real packages: which release a tree holds, which cached wheel fits.

No index is asked here: the cache root is a temporary folder holding an unpacked wheel named
for this interpreter, so ``install`` finds it the way a second run finds the first one's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.tags import sys_tags

from sglforge import cache
from sglforge.construct import packages


def test_the_release_version_comes_from_its_own_version_file(tmp_path: Path) -> None:
    (tmp_path / "sglang").mkdir()
    assert packages.release_version(tmp_path) is None
    # As the 0.5.23 wheel writes it (setuptools-scm's template).
    (tmp_path / "sglang" / "_version.py").write_text(
        "__version__ = version = '0.5.23'\n__version_tuple__ = version_tuple = (0, 5, 23)\n"
    )
    assert packages.release_version(tmp_path) == "0.5.23"


def test_a_cached_wheel_is_used_only_when_it_fits_the_requirement_and_this_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    tag = next(iter(sys_tags()))
    site = tmp_path / "pypi" / "construct-site"
    fits = site / f"msgspec-0.23.0-{tag.interpreter}-{tag.abi}-{tag.platform}"
    other = site / "msgspec-0.24.0-cp27-cp27m-win32"
    fits.mkdir(parents=True)
    other.mkdir()
    assert packages._cached("msgspec", Requirement("msgspec")) == fits
    assert packages._cached("msgspec", Requirement("msgspec>=0.24")) is None
    assert packages._cached("msgspec", Requirement("msgspec==0.23.0")) == fits


def test_thousands_of_index_files_ask_the_interpreter_s_tags_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """numpy's index page lists 4,400 wheels; asking ``sys_tags()`` per file (milliseconds each)
    made a new machine's first construction take minutes of CPU."""
    calls = []

    def counted():  # type: ignore[no-untyped-def]
        calls.append(1)
        return sys_tags()

    monkeypatch.setattr(packages, "sys_tags", counted)
    packages._supported.cache_clear()
    tag = next(iter(sys_tags()))
    names = [f"numpy-2.{i}.0-cp27-cp27m-win32.whl" for i in range(2000)]
    names += [f"numpy-2.{i}.0-{tag.interpreter}-{tag.abi}-{tag.platform}.whl" for i in range(2000)]
    names += ["numpy-2.0.0.tar.gz", "scipy-1.0.0-py3-none-any.whl"]
    found = [packages._compatible(name, "numpy") for name in names]
    assert found[:2000] == [None] * 2000 and found[-2:] == [None, None]
    assert [str(v) for v in found[2000:4000]] == [f"2.{i}.0" for i in range(2000)]
    assert len(calls) == 1
    packages._supported.cache_clear()
