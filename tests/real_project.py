"""A throwaway copy of this project's real queue, images and smoke scenarios.

Used by tests and benchmarks that run against released sglang: the copy has its own
CHANGELOG.md and build/, sharing only the PyPI wheel cache with the checkout (downloads are
the slow part).
"""

from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def copy_real_project(dest: Path) -> Path:
    """``dest`` made into a project holding copies of patches/, images/ and smoke/."""
    dest.mkdir(parents=True)
    for name in ("patches", "images", "smoke"):
        shutil.copytree(REPO / name, dest / name)
    (dest / "CHANGELOG.md").write_text("# Changelog\n\n## [Unreleased]\n")
    (REPO / "build" / "pypi").mkdir(parents=True, exist_ok=True)
    (dest / "build").mkdir()
    (dest / "build" / "pypi").symlink_to(REPO / "build" / "pypi", target_is_directory=True)
    return dest
