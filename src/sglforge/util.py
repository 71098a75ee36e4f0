"""Small helpers shared by every module: atomic writes, hashing, the project root."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from sglforge.errors import ConfigError

ROOT_ENV = "SGLFORGE_ROOT"


def file_mode(path: Path) -> int:
    """The mode a rewritten ``path`` should keep: its own, or the umask's default for new files."""
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename (never half-written)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, file_mode(path))  # mkstemp's 0600 would otherwise replace the file's mode
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def find_root(explicit: str | os.PathLike[str] | None = None, start: Path | None = None) -> Path:
    """The folder holding ``patches/``: ``--root``, then ``$SGLFORGE_ROOT``, then walk up."""
    given = explicit or os.environ.get(ROOT_ENV)
    if given:
        root = Path(given).resolve()
        if not (root / "patches").is_dir():
            raise ConfigError(
                f"{root}: no patches/ folder here (from --root or ${ROOT_ENV})",
                "pass --root pointing at a sglforge checkout",
            )
        return root
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "patches" / "series").is_file() or (
            candidate / "patches" / "upstream.toml"
        ).is_file():
            return candidate
    raise ConfigError(
        f"{here}: no patches/series or patches/upstream.toml here or in any parent folder",
        "cd into a sglforge checkout or pass --root DIR",
    )


def work_dir(root: Path, *parts: str) -> Path:
    """A folder under ``build/`` (the tool's work area), created on demand."""
    path = root.joinpath("build", *parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


# --- multi-file transactions ----------------------------------------------------------------
#
# A refresh rewrites several patch files, the series, the pin and CHANGELOG.md. Renames are
# atomic one file at a time only, so the set of renames is journalled first: a crash before
# the journal is written leaves everything old; a crash after it is rolled forward by the
# next command that reads the queue (``recover_transactions``), giving everything new.

JOURNAL = ".sglforge-txn.json"
LOCK = ".sglforge.lock"
TMP_SUFFIX = ".sglforge-tmp"
# Test hook: exit abruptly after this many renames, to prove recovery (see tests).
CRASH_ENV = "SGLFORGE_TEST_CRASH_AFTER_RENAMES"


@contextlib.contextmanager
def queue_lock(journal_dir: Path) -> Iterator[None]:
    """Exclusive lock over a journalled folder: writers and recovery never overlap."""
    import fcntl

    journal_dir.mkdir(parents=True, exist_ok=True)
    with open(journal_dir / LOCK, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def commit_files(journal_dir: Path, files: dict[Path, str | bytes | None]) -> None:
    """Replace (or delete, for None) all ``files`` as one all-or-nothing change."""
    import json

    with queue_lock(journal_dir):
        ops: list[dict[str, str | None]] = []
        try:
            for path, data in files.items():
                path = Path(path).resolve()
                if data is None:
                    ops.append({"tmp": None, "target": str(path), "sha256": None})
                    continue
                path.parent.mkdir(parents=True, exist_ok=True)
                raw = data.encode() if isinstance(data, str) else data
                fd, tmp = tempfile.mkstemp(
                    dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX
                )
                os.fchmod(fd, file_mode(path))
                with os.fdopen(fd, "wb") as fh:
                    fh.write(raw)
                    fh.flush()
                    os.fsync(fh.fileno())
                ops.append({"tmp": tmp, "target": str(path), "sha256": sha256_bytes(raw)})
            atomic_write(journal_dir / JOURNAL, json.dumps(ops, indent=1))
        except BaseException:
            for op in ops:
                if op["tmp"]:
                    Path(op["tmp"]).unlink(missing_ok=True)
            raise
        _roll_forward(journal_dir, ops)


def _roll_forward(journal_dir: Path, ops: list[dict[str, str | None]]) -> None:
    crash_after = int(os.environ.get(CRASH_ENV, "0") or 0)
    done = 0
    for op in ops:
        target = Path(str(op["target"]))
        tmp = op["tmp"]
        if tmp is None:
            target.unlink(missing_ok=True)
        elif Path(tmp).exists():
            os.replace(tmp, target)
        elif not (target.exists() and sha256_file(target) == op.get("sha256")):
            raise ConfigError(
                f"{target}: an interrupted change to the queue cannot be completed (its new "
                f"content {Path(tmp).name} is gone)",
                f"restore the queue from git (`git checkout -- {journal_dir}`), then delete "
                f"{journal_dir / JOURNAL}",
            )
        done += 1
        if crash_after and done >= crash_after:
            os._exit(99)
    (journal_dir / JOURNAL).unlink(missing_ok=True)


def recover_transactions(journal_dir: Path) -> bool:
    """Finish a journalled change interrupted by a crash; drop stray temp files. True if any."""
    import json

    if not journal_dir.is_dir():
        return False
    with queue_lock(journal_dir):
        journal = journal_dir / JOURNAL
        recovered = False
        if journal.exists():
            try:
                ops = json.loads(journal.read_text())
            except ValueError:
                ops = None
            if isinstance(ops, list):
                _roll_forward(journal_dir, ops)
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
