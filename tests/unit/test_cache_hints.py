"""Caches are hints, never verdicts (issue 42, F6, F11): a scan entry is served only when its
HMAC under this machine's key (kept apart from ``$SGLFORGE_CACHE``, which CI restores) checks,
and every entry goes through the bounded reader: planted, damaged, wrong-shaped or hostile
entries read as a miss. Real files, no subprocess. What every sealed cache promises (planted,
moved, damaged, oversized entries; whole writes) is held once for all of them in
test_sealed_cache.py; here, the key and the scan cache's own entries."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sglforge import cachekey
from sglforge.scan import cache
from sglforge.scan.findings import FAIL, Finding

LIVE = Finding("cuda-only-jit", FAIL, "python/x.cuh", 38, "u", "d")


@pytest.fixture
def keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SGLFORGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SGLFORGE_KEYS", str(tmp_path / "keys"))
    return tmp_path / "keys"


def _entry(key: str) -> Path:
    return cache._entry("reports", key)


def test_an_entry_written_here_is_served_and_the_key_is_private(keys: Path) -> None:
    cache.store_report("k" * 64, [LIVE])
    assert cache.load_report("k" * 64) == [LIVE]
    key = keys / "cache.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and key.stat().st_size == 32
    assert not list(keys.glob(".cache.key.*"))  # the temp file is gone
    # the key is nowhere in the shared cache (CI restores that one)
    assert not [p for p in (keys.parent / "cache").rglob("*") if p.name.endswith(".key")]


@pytest.mark.parametrize("how", ["link", "open-mode", "short"])
def test_a_key_file_that_is_not_private_is_not_used(keys: Path, tmp_path: Path, how: str) -> None:
    keys.mkdir(mode=0o700)
    planted = tmp_path / "planted.key"
    planted.write_bytes(b"k" * 32)
    if how == "link":
        (keys / "cache.key").symlink_to(planted)
    elif how == "open-mode":
        (keys / "cache.key").write_bytes(b"k" * 32)
        os.chmod(keys / "cache.key", 0o644)
    else:
        (keys / "cache.key").write_bytes(b"k" * 8)
        os.chmod(keys / "cache.key", 0o600)
    cache.store_report("c" * 64, [])
    assert not _entry("c" * 64).exists()  # nothing sealed with a key anyone could know
    assert cachekey.opened("scan/reports", "c" * 64, {"version": 1, "mac": "0" * 64}) is None


def test_a_damaged_unit_entry_is_a_miss(keys: Path) -> None:
    from sglforge.scan.jit import Files, UnitScan

    cache.store_unit("u" * 64, UnitScan((), (), ()))
    assert cache.load_unit(keys, "u" * 64, Files()) == UnitScan((), (), ())
    path = cache._entry("units", "u" * 64)
    for bad in ("[" * 100000, '{"version": 1, "reads": 5}', "[]"):
        path.write_text(bad)
        assert cache.load_unit(keys, "u" * 64, Files()) is None
