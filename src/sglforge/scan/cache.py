"""The scan cache: results kept in the user cache (``sglforge.cache.scan_cache``), keyed by
content, so a scan of a tree already seen costs a look-up.

Two kinds of entry, each one JSON file written atomically (temp file + rename: a reader sees
a whole entry or none, so concurrent scans need no lock; a damaged entry is a miss):

- ``units/``: one JIT translation unit's preprocessing (``scan.jit.unit_scan``), keyed by the
  unit's path and git blob id, the include folder, the defines of each pass and the scanner's
  code; the entry lists every file the preprocessor opened or probed with its blob id (None:
  absent) and is served only while each still has that id. A changed kernel or header, a
  header added where the preprocessor looked, or another define is a miss, and only the units
  that read it are preprocessed again.
- ``reports/``: a whole scan's findings, keyed by the upstream commit, the bytes of each
  queue patch applied, the model's config, the launch, the device and sglforge's own code.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from sglforge.scan.findings import Finding
from sglforge.scan.jit import CudaInclude, Files, JitTree, UnitScan

VERSION = 1  # of the entries' layout


def _digest(doc: Any) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


@cache
def code_id(*modules: str) -> str:
    """A digest of sglforge's own source (every module of the package, or ``modules``, paths
    under the package) and pcpp's version: what computed an entry."""
    from importlib.metadata import PackageNotFoundError, version

    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256(str(VERSION).encode())
    try:
        h.update(version("pcpp").encode())
    except PackageNotFoundError:
        pass
    paths = [root / m for m in modules] if modules else sorted(root.rglob("*.py"))
    for path in paths:
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


def _folder(kind: str) -> Path:
    from sglforge.cache import scan_cache

    return scan_cache() / kind


def _entry(kind: str, key: str) -> Path:
    return _folder(kind) / key[:2] / f"{key}.json"


def _load(kind: str, key: str) -> dict[str, Any] | None:
    """The entry ``key`` of ``kind`` when it reads sealed (``sglforge.cachekey.read_sealed``)
    and of this layout; anything else a miss, rewritten by this run."""
    from sglforge.cachekey import read_sealed

    doc = read_sealed(_entry(kind, key), f"scan/{kind}", key)
    return doc if doc is not None and doc.get("version") == VERSION else None


def _store(kind: str, key: str, doc: dict[str, Any]) -> None:
    """Write an entry sealed (``sglforge.cachekey.write_sealed``: not fsynced, as a cold scan
    writes one per kernel source; a failed write or no key: nothing written)."""
    from sglforge.cachekey import write_sealed

    if write_sealed(_entry(kind, key), f"scan/{kind}", key, {"version": VERSION, **doc}):
        _touch(_folder(kind))


def _touch(folder: Path) -> None:
    # ``cache info`` reads a kind's use from its folder's time
    try:
        os.utime(folder)
    except OSError:
        pass


def unit_key(jit: JitTree, unit: str, blob: str, passes: Sequence[Mapping[str, str]]) -> str:
    return _digest(
        {
            "code": code_id("scan/jit.py"),
            "include": f"{jit.rel}/include",
            "unit": unit,
            "blob": blob,
            "passes": [sorted(m.items()) for m in passes],
        }
    )


def load_unit(tree: Path, key: str, files: Files) -> UnitScan | None:
    """The cached preprocessing under ``key`` if every file it read is unchanged in ``tree``."""
    doc = _load("units", key)
    if doc is None:
        return None
    try:
        reads = tuple((str(p), b) for p, b in doc["reads"])
        for rel, blob in reads:
            path = rel if os.path.isabs(rel) else str(tree / rel)
            if files.blob(path) != blob:
                return None
        found = tuple(CudaInclude(str(f), int(n), str(h), str(u)) for f, n, h, u in doc["found"])
        errors = tuple(str(e) for e in doc["errors"])
    except (KeyError, TypeError, ValueError):
        return None
    return UnitScan(found, errors, reads)


def store_unit(key: str, got: UnitScan) -> None:
    _store(
        "units",
        key,
        {
            "reads": [list(r) for r in got.reads],
            "found": [[c.file, c.line, c.header, c.unit] for c in got.found],
            "errors": list(got.errors),
        },
    )


def report_key(
    commit: str,
    patches: Iterable[tuple[str, str]],
    config: Mapping[str, Any],
    launch: Sequence[str],
    device: Any,
    config_file: str,
    env: Mapping[str, str] | None = None,
) -> str:
    """The key of a whole scan: ``patches`` (name, sha256 of its bytes as the queue read them,
    ``Patch.sha256``) applied in order on ``commit``;
    ``env``: the node's variables the construction ran with (they decide shapes)."""
    from dataclasses import asdict

    return _digest(
        {
            "code": code_id(),
            "commit": commit,
            "patches": [list(p) for p in patches],
            "config": config,
            "launch": list(launch),
            "device": asdict(device),
            "config_file": config_file,
            "env": dict(env or {}),
        }
    )


def load_report(key: str) -> list[Finding] | None:
    doc = _load("reports", key)
    if doc is None:
        return None
    try:
        return [Finding(**f) for f in doc["findings"]]
    except (KeyError, TypeError, ValueError):
        return None


def store_report(key: str, findings: Sequence[Finding]) -> None:
    from dataclasses import asdict

    _store("reports", key, {"findings": [asdict(f) for f in findings]})
