"""Real sglang release trees for tests: PyPI wheels -> sglforge.pypi history -> a checkout.

Wheels and histories live in the user cache every project shares (``sglforge.cache``:
``$SGLFORGE_CACHE``, which tests/conftest.py pins to the real user cache), the cache
``--upstream pypi:sglang`` itself uses, so a machine downloads each wheel at most once.
``$SGLFORGE_TEST_PYPI_CACHE`` still names another folder. Wheels a checkout kept in its
``build/pypi`` before the cache moved are linked in, not downloaded again. Tests using this
module need PyPI: mark them ``pypi``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from sglforge import cache, pypi
from sglforge.queue.series import read_series
from synthetic import git as run_git

REPO_ROOT = Path(__file__).resolve().parents[1]
CACHE_ENV = "SGLFORGE_TEST_PYPI_CACHE"


def pypi_cache() -> Path:
    """Where PyPI-backed tests keep wheels and histories."""
    return Path(os.environ.get(CACHE_ENV) or cache.pypi_cache())


def release_history(spec: str) -> Path:
    """The sglforge.pypi history of the sglang releases matching ``spec``."""
    return pypi.history(pypi_cache(), "sglang", spec, seed=cache.legacy_wheels(REPO_ROOT, "sglang"))


def adopt_checkout_wheels() -> None:
    """Link the wheels this checkout kept in ``build/pypi`` (before the cache was shared) into
    the shared cache, so nothing is downloaded again."""
    dest = pypi_cache() / "pypi-sglang" / "wheels"
    for folder in cache.legacy_wheels(REPO_ROOT, "sglang"):
        dest.mkdir(parents=True, exist_ok=True)
        for wheel in folder.glob("*.whl"):
            if (dest / wheel.name).exists():
                continue
            tmp = dest / f".adopt-{os.getpid()}-{wheel.name}"
            try:
                os.link(wheel, tmp)
            except OSError:
                shutil.copyfile(wheel, tmp)
            os.replace(tmp, dest / wheel.name)


def release_tree(dest: Path, version: str, patched: bool) -> Path:
    """A checkout of sglang ``version``'s python/ tree, with the real queue applied if asked.

    The patches are applied with plain ``git apply`` (no fuzz, no 3-way), in series order.
    """
    repo = release_history(f"=={version}")
    run_git(dest.parent, "clone", "--quiet", "--branch", f"v{version}", str(repo), str(dest))
    if patched:
        for entry in read_series(REPO_ROOT):
            run_git(dest, "apply", str(REPO_ROOT / "patches" / entry.name))
    return dest


def wheel_tree(version: str) -> Path:
    """The released wheel's ``sglang/`` package, unpacked once into the shared cache (keyed by
    the wheel's file name) and reused: the folder holding ``sglang/``."""
    import tempfile
    import zipfile

    from sglforge.standin.base import release_wheel

    wheel = release_wheel(version)
    dest = cache.cache_root() / "wheel-trees" / wheel.name.removesuffix(".whl")
    if (dest / "sglang" / "version.py").is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=dest.parent))
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tmp, [n for n in archive.namelist() if n.startswith("sglang/")])
    try:
        os.replace(tmp, dest)  # whole or not at all; a concurrent unpack may have won
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
