"""Journalled multi-file changes of a project's folder: all of them or none, across a crash.

A refresh rewrites several patch files, the series, the pin and CHANGELOG.md. Renames are
atomic one file at a time only, so the set of renames is journalled first: a crash before
the journal is written leaves everything old; a crash after it is rolled forward by the
next command that reads the queue (``recover_transactions``), giving everything new.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from sglforge.errors import ConfigError
from sglforge.util import (
    TMP_SUFFIX,
    atomic_write,
    confined,
    encode_exact,
    file_mode,
    flock,
    lock_file,
    sha256_bytes,
    sha256_file,
)

JOURNAL = ".sglforge-txn.json"


@contextlib.contextmanager
def queue_lock(journal_dir: Path) -> Iterator[None]:
    """Exclusive lock over a journalled folder: writers and recovery never overlap."""
    with flock(lock_file(journal_dir.parent, "queue", journal_dir), str(journal_dir), None):
        yield


def _journal_target(journal_dir: Path, path: Path) -> str:
    """How the journal names ``path``: relative to the project (the journal folder's parent)."""
    base = Path(os.path.abspath(journal_dir.parent))
    target = Path(os.path.abspath(path))
    if not target.is_relative_to(base):
        raise ConfigError(
            f"{path}: outside the project {base}; a queue change only writes inside it",
            "this is a bug in sglforge: please report it",
        )
    return str(target.relative_to(base))


def commit_files(journal_dir: Path, files: dict[Path, str | bytes | None]) -> None:
    """Replace (or delete, for None) all ``files`` as one all-or-nothing change."""
    import json

    with queue_lock(journal_dir):
        ops: list[dict[str, str | None]] = []
        try:
            for path, data in files.items():
                rel = _journal_target(journal_dir, Path(path))
                path = confined(journal_dir.parent, rel, "file", "a queue change")
                if data is None:
                    ops.append({"tmp": None, "target": rel, "sha256": None})
                    continue
                path.parent.mkdir(parents=True, exist_ok=True)
                raw = encode_exact(data) if isinstance(data, str) else data
                fd, tmp = tempfile.mkstemp(
                    dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX
                )
                os.fchmod(fd, file_mode(path))
                with os.fdopen(fd, "wb") as fh:
                    fh.write(raw)
                    fh.flush()
                    os.fsync(fh.fileno())
                tmp_rel = _journal_target(journal_dir, Path(tmp))
                ops.append({"tmp": tmp_rel, "target": rel, "sha256": sha256_bytes(raw)})
            atomic_write(journal_dir / JOURNAL, json.dumps(ops, indent=1))
        except BaseException:
            for op in ops:
                if op["tmp"]:
                    (journal_dir.parent / str(op["tmp"])).unlink(missing_ok=True)
            raise
        _roll_forward(journal_dir, ops)


def _journal_ops(journal_dir: Path, ops: object) -> list[tuple[Path | None, Path, str | None]]:
    """The journal's (temp, target, sha256) entries, each confined to the project first.

    A journal is data: one naming ``$HOME/notes.txt`` (or ``../x``) is refused as a whole,
    before any entry is carried out.
    """
    where = str(journal_dir / JOURNAL)
    base = journal_dir.parent
    if not isinstance(ops, list) or not all(isinstance(op, dict) for op in ops):
        raise ConfigError(f"{where}: not a list of entries", f"delete {where}")
    out: list[tuple[Path | None, Path, str | None]] = []
    for op in ops:
        target, tmp, sha = op.get("target"), op.get("tmp"), op.get("sha256")
        if not isinstance(target, str) or not (tmp is None or isinstance(tmp, str)):
            raise ConfigError(f"{where}: malformed entry {op!r}", f"delete {where}")
        out.append(
            (
                confined(base, tmp, "temporary file", where) if tmp is not None else None,
                confined(base, target, "target", where),
                sha if isinstance(sha, str) else None,
            )
        )
    return out


def _roll_forward(journal_dir: Path, raw_ops: object) -> None:
    ops = _journal_ops(journal_dir, raw_ops)
    for tmp_path, target, sha in ops:
        tmp = str(tmp_path) if tmp_path else None
        if tmp is None:
            target.unlink(missing_ok=True)
        elif Path(tmp).exists():
            os.replace(tmp, target)
        elif not (target.exists() and sha256_file(target) == sha):
            raise ConfigError(
                f"{target}: an interrupted change to the queue cannot be completed (its new "
                f"content {Path(tmp).name} is gone)",
                f"restore the queue from git (`git checkout -- {journal_dir}`), then delete "
                f"{journal_dir / JOURNAL}",
            )
    (journal_dir / JOURNAL).unlink(missing_ok=True)


def _needs_recovery(journal_dir: Path) -> bool:
    if (journal_dir / JOURNAL).exists():
        return True
    return any(
        any(folder.glob(f".*{TMP_SUFFIX}"))
        for folder in (journal_dir, journal_dir.parent, journal_dir / "retired")
        if folder.is_dir()
    )


def recover_transactions(journal_dir: Path) -> bool:
    """Finish a journalled change interrupted by a crash; drop stray temp files. True if any."""
    import json

    if not journal_dir.is_dir():
        return False
    if not _needs_recovery(journal_dir):
        # Nothing to finish: a reading command takes no lock, so it works on a read-only
        # checkout or without a writable build/ (a writer arriving later recovers itself).
        return False
    with queue_lock(journal_dir):
        journal = journal_dir / JOURNAL
        recovered = False
        if journal.exists():
            try:
                ops = json.loads(journal.read_bytes())
            except ValueError:
                ops = None
            if ops is not None:
                _roll_forward(journal_dir, ops)  # refuses a journal naming paths outside
                recovered = True
            else:  # a torn journal cannot exist (atomic_write); be safe and drop it
                journal.unlink(missing_ok=True)
        # Under the lock no writer is between its temp files and its journal: strays are
        # leftovers of a crash before the journal, i.e. of a change that never happened.
        for folder in (journal_dir, journal_dir.parent, journal_dir / "retired"):
            if folder.is_dir():
                for stray in folder.glob(f".*{TMP_SUFFIX}"):
                    stray.unlink(missing_ok=True)
        return recovered
