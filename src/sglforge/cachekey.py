"""Cache entries are hints, never verdicts: each one a verdict is read from (a scan report, a
kernel unit's preprocessing, the config child's reading) carries an HMAC under a key of this
machine and user, and one whose HMAC does not check reads as a miss (issue 42, F6).

The shared cache (``$SGLFORGE_CACHE``) is restored from CI's cache by the shipped workflow,
so whatever wrote that cache could otherwise write the gate's verdict. The key is kept
apart from it: ``$SGLFORGE_KEYS``, else ``sglforge-keys`` under ``$XDG_CACHE_HOME`` (else
``~/.cache``), a folder no workflow restores. It is 32 random bytes, 0600 in a 0700 folder
of this user, created on first use; a key file that is a link, another user's, readable by
others, or of another size is not used (every entry then reads as a miss, and nothing is
signed). The key is mixed with ``/etc/machine-id`` where there is one, so a key file copied
to another machine signs nothing that machine trusts.

:func:`read_sealed` and :func:`write_sealed` are every cache's one way to an entry on disk: a
bounded read whose every failure is a miss, and a write through a temporary file and a rename
whose failure only costs time.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from sglforge.util import JSON_CAP, loads_bounded

KEYS_ENV = "SGLFORGE_KEYS"
_KEY_BYTES = 32
MAC = "mac"  # the field an entry's HMAC is kept in


def keys_folder() -> Path:
    """Where the keys live (never inside ``$SGLFORGE_CACHE``, which CI restores)."""
    given = os.environ.get(KEYS_ENV, "")
    if given and Path(given).is_absolute():
        return Path(given)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "sglforge-keys"


@cache
def _key(folder: Path) -> bytes | None:
    raw = _read_key(folder / "cache.key")
    if raw is None:
        raw = _make_key(folder)
    if raw is None:
        return None
    try:
        machine = Path("/etc/machine-id").read_bytes().strip()
    except OSError:
        machine = b""
    return hmac.new(raw, b"sglforge-cache\0" + machine, hashlib.sha256).digest()


def _read_key(path: Path) -> bytes | None:
    raw = _read_file(path, _KEY_BYTES, private=True)
    return raw if raw is not None and len(raw) == _KEY_BYTES else None


def _read_file(path: Path, limit: int, *, private: bool = False) -> bytes | None:
    """The bytes of the regular file ``path`` when it holds at most ``limit`` (refused by its
    size, unread; a FIFO does not block the open); with ``private``, only a file of this user
    that no one else can read, not behind a link. None for anything else."""
    flags = os.O_RDONLY | os.O_NONBLOCK | (os.O_NOFOLLOW if private else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        if private and (st.st_uid != os.getuid() or st.st_mode & 0o077):
            return None
        raw = os.read(fd, limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return raw if len(raw) <= limit else None


def _make_key(folder: Path) -> bytes | None:
    """A new key, written whole before it appears (a hard link of a finished temp file, so a
    second process either finds none and makes its own attempt, or finds this one whole)."""
    from sglforge.util import write_private

    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = write_private(folder, f".cache.key.{os.getpid()}", os.urandom(_KEY_BYTES))
        try:
            os.link(tmp, folder / "cache.key")
        except FileExistsError:
            pass  # another process made it first: its key is the one
        finally:
            tmp.unlink(missing_ok=True)
    except OSError:
        return None
    return _read_key(folder / "cache.key")


def _mac(key: bytes, kind: str, name: str, doc: dict[str, Any]) -> str:
    body = json.dumps({"kind": kind, "name": name, "doc": doc}, sort_keys=True, default=str)
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


def seal(kind: str, name: str, doc: dict[str, Any]) -> dict[str, Any] | None:
    """``doc`` with its HMAC (``kind``, ``name``: the cache and the entry's key, so an entry
    moved under another key does not check); None when there is no key (store nothing)."""
    key = _key(keys_folder())
    if key is None:
        return None
    doc = json.loads(json.dumps(doc, default=str))  # as a reader will see it (lists, not tuples)
    return {**doc, MAC: _mac(key, kind, name, doc)}


def opened(kind: str, name: str, doc: object) -> dict[str, Any] | None:
    """``doc`` without its HMAC when it is an object whose HMAC checks; else None (a miss)."""
    if not isinstance(doc, dict):
        return None
    key = _key(keys_folder())
    given = doc.get(MAC)
    if key is None or not isinstance(given, str):
        return None
    body = {k: v for k, v in doc.items() if k != MAC}
    return body if hmac.compare_digest(given, _mac(key, kind, name, body)) else None


def read_sealed(
    path: Path, kind: str, name: str, *, limit: int = JSON_CAP
) -> dict[str, Any] | None:
    """The entry at ``path`` without its HMAC, when it is a JSON object of at most ``limit``
    bytes sealed here as ``kind``/``name``; anything else a miss (None): absent, not a regular
    file (a planted FIFO does not block), larger than ``limit`` (refused by its size, unread),
    damaged, nested too deep, planted or moved (issue 42, F6, F11)."""
    raw = _read_file(path, limit)
    if raw is None:
        return None
    try:
        return opened(kind, name, loads_bounded(raw, cap=limit))
    except (ValueError, RecursionError):  # JsonRefused is a ValueError
        return None


def write_sealed(path: Path, kind: str, name: str, doc: dict[str, Any]) -> bool:
    """Write ``doc`` sealed as ``kind``/``name`` to ``path`` through a temporary file in its
    folder and a rename (a reader sees a whole entry or none; a crash's torn one fails its
    seal), 0600, not fsynced. True when written; False, never an error, when there is no key
    or the disk refused (a cache that cannot be written only costs time)."""
    sealed = seal(kind, name, doc)
    if sealed is None:
        return False
    raw = json.dumps(sealed, sort_keys=True).encode()
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
        os.replace(tmp, path)
        tmp = None
    except OSError:
        return False
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    return True


__all__ = ["KEYS_ENV", "keys_folder", "opened", "read_sealed", "seal", "write_sealed"]
