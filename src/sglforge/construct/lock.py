"""The construction's packages, pinned by sglforge: a lock of wheel and sha256 per sglang release.

The construction installs real wheels from the package index (transformers and the closure of
its requirements, the packages of :data:`sglforge.construct.packages.REAL`) and runs them on
this host. The index may be a proxy or mirror the user does not control, and its sha256 only
says the bytes are the ones it lists (REDTEAM-5 F1). So each release's wheels are locked by
sglforge: per sglang version, the wheel files (name, version and tags in the file name) and
their sha256.

- Shipped with sglforge (``sglforge/data/construct-lock/sglang-VERSION.json``) for the releases
  its suite constructs: never changed by a run;
- otherwise locked on first use in the user cache (``construct-lock/sglang-VERSION.json``),
  and shown: the first construction of a release says each wheel it locked and its sha256.

Every fetch is checked, a wheel already in the cache included: when the lock names a wheel of
a project, that wheel is the one used; a wheel whose sha256 differs from its entry is refused
(:class:`LockMismatch`, exit 3, naming the wheel and both digests) and removed from the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from functools import cache
from pathlib import Path

from sglforge.errors import UpstreamError

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "construct-lock"


class LockMismatch(UpstreamError):
    """A wheel's sha256 is not the one locked for this release."""


def _name(release: str) -> str:
    return f"sglang-{release}.json"


def user_root() -> Path:
    from sglforge.cache import cache_root

    return cache_root() / "construct-lock"


def _read(path: Path) -> dict[str, str]:
    try:
        doc = json.loads(path.read_text()) if path.stat().st_size < (1 << 20) else {}
    except (OSError, ValueError):
        return {}
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict):
        return {}
    return {str(k): str(v) for k, v in files.items() if isinstance(v, str) and len(v) == 64}


def shipped(release: str) -> dict[str, str]:
    """The lock sglforge ships for ``release`` (empty when it ships none)."""
    return _read(SHIPPED / _name(release))


def locked(release: str) -> dict[str, str]:
    """Wheel file name -> sha256 for ``release``: the shipped lock over the user's."""
    return {**_read(user_root() / _name(release)), **shipped(release)}


@cache
def _digest(path: str, size: int, mtime: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def sha256(wheel: Path) -> str:
    st = wheel.stat()
    return _digest(str(wheel), st.st_size, st.st_mtime_ns)


def check(release: str, wheel: Path) -> None:
    """``wheel`` (in the cache) against ``release``'s lock: LockMismatch and the wheel removed
    when its sha256 differs; locked on first use (and said) when the lock has no entry."""
    got = sha256(wheel)
    want = locked(release).get(wheel.name)
    if want is None:
        _add(release, wheel.name, got)
        return
    if got != want:
        wheel.unlink(missing_ok=True)
        raise LockMismatch(
            f"{wheel.name}: sha256 {got[:16]}... is not the {want[:16]}... locked for sglang "
            f"{release}'s construction; the wheel was removed from the cache",
            "the index serves other bytes than before: check it (sglforge doctor), or, if the "
            f"change is expected, delete {user_root() / _name(release)} to lock anew",
        )


def _add(release: str, filename: str, digest: str) -> None:
    from sglforge.progress import current

    path = user_root() / _name(release)
    files = {**_read(path), filename: digest}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".lock-", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump({"sglang": release, "files": dict(sorted(files.items()))}, f, indent=1)
    os.replace(tmp, path)
    current().info(f"construct: locked {filename} sha256 {digest} for sglang {release} ({path})")
