"""Test doubles for the Docker tests: stand-in base images and the stand-in sglang server
(both ship in the package, ``sglforge.standin`` and ``sglforge/data/standin/server.py``).

Nothing here is ever published; every image carries the label ``io.sglforge.standin=1``.
"""

from .base import (
    DEBIAN_TAG,
    cleanup,
    ensure_debian_base,
    ensure_sglang_base,
    object_labels,
)

__all__ = ["DEBIAN_TAG", "cleanup", "ensure_debian_base", "ensure_sglang_base", "object_labels"]
