"""A throwaway copy of this project's real queue, images and smoke scenarios.

Used by tests and benchmarks that run against released sglang: the copy has its own
CHANGELOG.md and build/; upstream caches (PyPI wheels, histories, mirrors) are in the user
cache every project shares (sglforge.cache), so downloads, the slow part, happen once.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sglang_release import adopt_checkout_wheels

REPO = Path(__file__).resolve().parents[1]


def copy_real_project(dest: Path) -> Path:
    """``dest`` made into a project holding copies of patches/, images/ and smoke/."""
    dest.mkdir(parents=True)
    for name in ("patches", "images", "smoke"):
        shutil.copytree(REPO / name, dest / name)
    (dest / "CHANGELOG.md").write_text("# Changelog\n\n## [Unreleased]\n")
    (dest / "build").mkdir()
    adopt_checkout_wheels()
    return dest
