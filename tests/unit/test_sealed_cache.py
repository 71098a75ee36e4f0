"""Every sealed cache reads and writes its entries one way (``sglforge.cachekey.read_sealed`` /
``write_sealed``), so each holds the same promises, checked here on each through its own
reader and writer: an entry written here reads back; a planted, moved, damaged, hostile or
oversized one is a miss (issue 42, F6, F11); a write is whole or absent, leaves no temporary
file, and a disk that refuses it only costs time. Real files, no subprocess."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from sglforge.bench import runner
from sglforge.construct import hfresolve
from sglforge.scan import cache as scan_cache
from sglforge.scan.findings import FAIL, Finding
from sglforge.util import JSON_CAP


@dataclass(frozen=True)
class Cache:
    """One sealed cache, through its caller's own functions; ``c`` names an entry."""

    path: Callable[[str], Path]
    write: Callable[[str], None]
    read: Callable[[str], object]
    value: object  # what ``read`` gives back after ``write``


HELP = "usage: bench_serving.py [--dataset-name {sharegpt,random}]"
LIVE = Finding("cuda-only-jit", FAIL, "python/x.cuh", 38, "u", "d")
RECORD = {"class": "GlmMoeDsaConfig", "fields": {"n_routed_experts": 256}}


def _image(c: str) -> str:
    return "sha256:" + c * 64


def _config(c: str) -> Path:
    return hfresolve._cache_root() / "transformers-5.0.0" / f"{c * 64}.json"


CACHES = {
    "bench-help": Cache(
        path=lambda c: runner._help_entry(_image(c)),
        write=lambda c: runner._store_help(_image(c), HELP),
        read=lambda c: runner._cached_help(_image(c)),
        value=HELP,
    ),
    "scan-report": Cache(
        path=lambda c: scan_cache._entry("reports", c * 64),
        write=lambda c: scan_cache.store_report(c * 64, [LIVE]),
        read=lambda c: scan_cache.load_report(c * 64),
        value=[LIVE],
    ),
    "config-child": Cache(
        path=_config,
        write=lambda c: hfresolve._write(_config(c), RECORD),
        read=lambda c: hfresolve._cached(_config(c)),
        value=RECORD,
    ),
}


@pytest.fixture(params=CACHES)
def sealed(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Cache:
    monkeypatch.setenv("SGLFORGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SGLFORGE_KEYS", str(tmp_path / "keys"))
    return CACHES[request.param]


def test_an_entry_written_here_reads_back_and_no_temp_file_stays(sealed: Cache) -> None:
    assert sealed.read("a") is None  # nothing yet
    sealed.write("a")
    sealed.write("a")  # a second write replaces the entry
    assert sealed.read("a") == sealed.value
    assert [p.name for p in sealed.path("a").parent.iterdir()] == [sealed.path("a").name]
    assert sealed.read("b") is None  # another entry's key


def test_a_planted_or_moved_entry_is_a_miss(
    sealed: Cache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sealed.write("a")
    path = sealed.path("a")
    good = json.loads(path.read_text())
    plants = {
        "payload-changed": {k: (v if k == "mac" else "planted") for k, v in good.items()},
        "field-added": {**good, "planted": True},
        "mac-removed": {k: v for k, v in good.items() if k != "mac"},
        "mac-forged": {**good, "mac": "0" * 64},
    }
    for name, bad in plants.items():
        path.write_text(json.dumps(bad))
        assert sealed.read("a") is None, name
    # a good entry moved under another key, and one read with another machine's key
    path.write_text(json.dumps(good))
    sealed.path("b").parent.mkdir(parents=True, exist_ok=True)
    sealed.path("b").write_text(json.dumps(good))
    assert sealed.read("b") is None
    assert sealed.read("a") == sealed.value
    monkeypatch.setenv("SGLFORGE_KEYS", str(tmp_path / "other-keys"))
    assert sealed.read("a") is None


def test_a_damaged_or_hostile_entry_is_a_miss(sealed: Cache) -> None:
    sealed.write("a")
    path = sealed.path("a")
    raw = path.read_bytes()
    for bad in (raw[: len(raw) // 2], b"", b"\xff\xfe{}", b"[" * 100000 + b"]" * 100000, b"[]"):
        path.write_bytes(bad)
        assert sealed.read("a") is None, bad[:20]
    path.unlink()
    os.mkfifo(path)  # a planted FIFO no one writes: a blocking open would wait forever
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(sealed.read("a")), daemon=True)
    reader.start()
    reader.join(60)  # only catches a hang: the read does not wait at all
    hung = reader.is_alive()
    if hung:  # release it (a writer end opens at once when a reader waits)
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    assert not hung and got == [None]


def test_an_oversized_entry_is_a_miss_unread(sealed: Cache) -> None:
    sealed.write("a")
    path = sealed.path("a")
    raw = path.read_bytes()
    # the good entry padded past the bound: valid JSON that an unbounded reader would serve
    path.write_bytes(raw + b" " * (JSON_CAP + 1 - len(raw)))
    assert sealed.read("a") is None
    # 1 TiB (sparse): a reader that read it all would fail to allocate it, not answer a miss
    path.write_bytes(raw)
    os.truncate(path, 1 << 40)
    assert sealed.read("a") is None


def test_a_refused_write_leaves_nothing_and_raises_nothing(sealed: Cache) -> None:
    path = sealed.path("a")
    path.parent.parent.mkdir(parents=True, exist_ok=True)
    path.parent.write_text("in the way")  # its folder cannot be made
    sealed.write("a")
    assert sealed.read("a") is None
    path.parent.unlink()
    (path / "child").mkdir(parents=True)  # the rename onto a non-empty folder fails
    sealed.write("a")
    assert sealed.read("a") is None
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temp file
