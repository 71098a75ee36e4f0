"""Small helpers shared by every module: atomic writes, hashing, the project root."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from sglforge.errors import ConfigError

ROOT_ENV = "SGLFORGE_ROOT"


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename (never half-written)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_many(files: dict[Path, str | bytes | None]) -> None:
    """Replace several files as close to all-or-nothing as a file system allows.

    Every new content is written to a temporary file first; only when all are on disk are
    they renamed into place (a value of None deletes the file). A crash before the renames
    leaves every file as it was.
    """
    staged: list[tuple[str, Path]] = []
    try:
        for path, data in files.items():
            if data is None:
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            raw = data.encode() if isinstance(data, str) else data
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                fh.write(raw)
                fh.flush()
                os.fsync(fh.fileno())
            staged.append((tmp, path))
    except BaseException:
        for tmp, _ in staged:
            Path(tmp).unlink(missing_ok=True)
        raise
    for tmp, path in staged:
        os.replace(tmp, path)
    for path, data in files.items():
        if data is None:
            path.unlink(missing_ok=True)


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


def unique(items: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        seen.setdefault(item, None)
    return list(seen)
