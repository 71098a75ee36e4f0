"""The user cache shared by every project and CI run: upstream git mirrors, PyPI wheels and
the histories built from them, and scan results (``sglforge.scan.cache``).

``$SGLFORGE_CACHE``, else ``$XDG_CACHE_HOME/sglforge``, else ``~/.cache/sglforge``. Two
processes may use it at once: each cache has its own lock (``git.cache_lock`` for a mirror,
``pypi``'s per-project lock for wheels and histories). A project's ``build/`` keeps only what
is its own (worktrees, contexts, logs, reports, ``build/upstream/observed.json``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sglforge.util import folder_size

CACHE_ENV = "SGLFORGE_CACHE"


def cache_root() -> Path:
    """The shared cache folder (not created here)."""
    given = os.environ.get(CACHE_ENV)
    if given:
        return Path(given).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    # The XDG spec: a relative value is invalid and must be ignored.
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "sglforge"


def upstream_mirrors() -> Path:
    """Bare git mirrors of upstreams, one per URL or path."""
    return cache_root() / "upstream"


def pypi_cache() -> Path:
    """Wheels and the histories built from them, one folder per project."""
    return cache_root() / "pypi"


def scan_cache() -> Path:
    """Scan results keyed by content: ``units/`` (JIT kernel preprocessing) and ``reports/``."""
    return cache_root() / "scan"


def legacy_wheels(root: Path, project: str) -> list[Path]:
    """Wheel folders an older sglforge kept in a checkout (``build/pypi``): reused, not
    downloaded again."""
    from packaging.utils import canonicalize_name

    folder = Path(root) / "build" / "pypi" / f"pypi-{canonicalize_name(project)}" / "wheels"
    return [folder] if folder.is_dir() else []


@dataclass(frozen=True)
class Entry:
    """One thing the cache holds: an upstream mirror, a PyPI history, a project's wheels or
    scan results."""

    kind: str  # "mirror", "history", "wheels", "scan"
    path: Path
    size: int  # bytes
    used: float  # newest modification time inside (a fetch or an import touches it)


def _newest(path: Path, depth: int = 2) -> float:
    newest = path.lstat().st_mtime
    if depth and path.is_dir() and not path.is_symlink():
        for child in path.iterdir():
            try:
                newest = max(newest, _newest(child, depth - 1))
            except OSError:
                pass
    return newest


def entries() -> list[Entry]:
    """What the cache holds, largest first; a symlinked folder is listed by nobody (it belongs
    to another cache) and never followed."""
    found: list[Entry] = []
    mirrors = upstream_mirrors()
    if mirrors.is_dir() and not mirrors.is_symlink():
        for path in sorted(mirrors.glob("*.git")):
            if path.is_dir() and not path.is_symlink():
                found.append(Entry("mirror", path, folder_size(path), _newest(path)))
    pypi = pypi_cache()
    if pypi.is_dir() and not pypi.is_symlink():
        for project in sorted(pypi.glob("pypi-*")):
            if not project.is_dir() or project.is_symlink():
                continue
            for path in sorted(project.iterdir()):
                if path.is_symlink() or not path.is_dir():
                    continue
                kind = "wheels" if path.name == "wheels" else "history"
                found.append(Entry(kind, path, folder_size(path), _newest(path)))
    scan = scan_cache()
    if scan.is_dir() and not scan.is_symlink():
        for path in sorted(scan.iterdir()):
            if path.is_dir() and not path.is_symlink():
                found.append(Entry("scan", path, folder_size(path), _newest(path)))
    return sorted(found, key=lambda e: -e.size)


def _alternates(repo: Path) -> list[Path]:
    try:
        text = (repo / "objects" / "info" / "alternates").read_text()
    except OSError:
        return []
    return [Path(line).resolve().parent for line in text.splitlines() if line.strip()]


def _lock_for(entry: Entry) -> tuple[Path, str]:
    if entry.kind == "mirror":
        return entry.path.with_name(entry.path.name + ".lock"), f"upstream cache {entry.path}"
    if entry.kind == "scan":
        # no writer holds it (each entry is one atomic rename); it keeps two prunes apart
        return entry.path.parent / ".lock", f"scan cache {entry.path}"
    # pypi.py's per-project lock: held while wheels are fetched or histories imported
    return entry.path.parent / ".lock", f"PyPI cache {entry.path.parent}"


def prune(older_than_days: float, wheels: bool = False, dry_run: bool = False) -> list[Entry]:
    """Remove mirrors and histories (and with ``wheels`` the wheels) unused for
    ``older_than_days``; each under the lock its writers take. Returns what went (or would)."""
    import shutil
    import time

    from sglforge.util import LOCK_WAIT_ENV, flock, lock_wait

    cutoff = time.time() - older_than_days * 86400
    found = entries()
    gone = [e for e in found if e.used <= cutoff and (e.kind != "wheels" or wheels)]
    # a mirror of a PyPI history borrows its objects (git alternates): it goes with it
    going = {e.path for e in gone}
    for e in found:
        if (
            e.kind == "mirror"
            and e not in gone
            and any(a == g or a.is_relative_to(g) for a in _alternates(e.path) for g in going)
        ):
            gone.append(e)
    # as long as a project lock waits when $SGLFORGE_LOCK_WAIT says, else 30 s (a download)
    wait = lock_wait() if os.environ.get(LOCK_WAIT_ENV) else 30.0
    for entry in gone:
        if dry_run:
            continue
        lock, what = _lock_for(entry)
        with flock(lock, what, wait):
            shutil.rmtree(entry.path, ignore_errors=True)
    return gone
