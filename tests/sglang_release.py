"""Real sglang release trees for tests: PyPI wheels -> sglforge.pypi history -> a checkout.

Wheels and histories are cached in ``$SGLFORGE_TEST_PYPI_CACHE``, else in this checkout's
``build/pypi`` (the cache ``--upstream pypi:sglang`` itself uses), so a test run downloads
each wheel at most once. Tests using this module need PyPI: mark them ``pypi``.
"""

from __future__ import annotations

import os
from pathlib import Path

from sglforge import git, pypi
from sglforge.patches.series import read_series

REPO_ROOT = Path(__file__).resolve().parents[1]
CACHE_ENV = "SGLFORGE_TEST_PYPI_CACHE"


def pypi_cache() -> Path:
    """Where PyPI-backed tests keep wheels and histories."""
    return Path(os.environ.get(CACHE_ENV) or REPO_ROOT / "build" / "pypi")


def release_history(spec: str) -> Path:
    """The sglforge.pypi history of the sglang releases matching ``spec``."""
    return pypi.history(pypi_cache(), "sglang", spec)


def release_tree(dest: Path, version: str, patched: bool) -> Path:
    """A checkout of sglang ``version``'s python/ tree, with the real queue applied if asked.

    The patches are applied with plain ``git apply`` (no fuzz, no 3-way), in series order.
    """
    repo = release_history(f"=={version}")
    git.run(dest.parent, "clone", "--quiet", "--branch", f"v{version}", str(repo), str(dest))
    if patched:
        for entry in read_series(REPO_ROOT):
            git.run(dest, "apply", str(REPO_ROOT / "patches" / entry.name))
    return dest
