"""How a patch fares at a ref: the statuses `patches check` gives and the worktree record
keeps. A module of its own, so that reading a record (`patches list`, push, pop) does not
load the checker."""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """How a patch fares at a ref (compares and serialises as its string)."""

    CLEAN = "clean"  # applies exactly
    OFFSET = "offset"  # applies with line offsets or fuzz
    THREE_WAY = "three-way"  # applies only with a 3-way merge
    CONFLICT = "conflict"
    UPSTREAMED = "upstreamed"  # the ref already holds it
    SKIPPED = "skipped"  # its Applies-To excludes the ref, or a patch it depends on failed


CLEAN, OFFSET, THREE_WAY, CONFLICT, UPSTREAMED, SKIPPED = Status
APPLIED = (CLEAN, OFFSET, THREE_WAY)
