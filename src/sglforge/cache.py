"""The user cache shared by every project and CI run: upstream git mirrors, PyPI wheels and
the histories built from them.

``$SGLFORGE_CACHE``, else ``$XDG_CACHE_HOME/sglforge``, else ``~/.cache/sglforge``. Two
processes may use it at once: each cache has its own lock (``git.cache_lock`` for a mirror,
``pypi``'s per-project lock for wheels and histories). A project's ``build/`` keeps only what
is its own (worktrees, contexts, logs, reports, ``build/upstream/observed.json``).
"""

from __future__ import annotations

import os
from pathlib import Path

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


def legacy_wheels(root: Path, project: str) -> list[Path]:
    """Wheel folders an older sglforge kept in a checkout (``build/pypi``): reused, not
    downloaded again."""
    from packaging.utils import canonicalize_name

    folder = Path(root) / "build" / "pypi" / f"pypi-{canonicalize_name(project)}" / "wheels"
    return [folder] if folder.is_dir() else []
