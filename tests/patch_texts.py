"""Hand-written ``git format-patch`` texts for the queue's unit tests (no git, no subprocess):
one patch guarding an include in ``python/x.cuh``, given its trailers, and a project folder
whose queue holds such patches."""

from __future__ import annotations

from pathlib import Path

_HEAD = """\
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: Dev <dev@example.invalid>
Date: Mon, 1 Jan 2024 00:00:00 +0000
Subject: [PATCH] Guard the include

Fails to compile on ROCm.

"""
_DIFF = """\
---
 python/x.cuh | 1 +
 1 file changed, 1 insertion(+)

diff --git a/python/x.cuh b/python/x.cuh
index 1111111..2222222 100644
--- a/python/x.cuh
+++ b/python/x.cuh
@@ -1,2 +1,3 @@
 a
+b
 c
"""
# format-patch's signature: "-- " (with its space) and git's version
_SIGNATURE = "-- \n2.39.5\n"


def guard_patch(trailers: str, *, signature: bool = False) -> str:
    """The patch with ``trailers`` (whole lines) closing its message."""
    return _HEAD + trailers + _DIFF + (_SIGNATURE if signature else "")


def queue_project(tmp: Path, patches: dict[str, str], series: str | None = None) -> Path:
    """A project at ``tmp/p`` pinned at v0.5.14 whose queue holds ``patches`` (name: text),
    listed in ``series`` (default: all of them, in order)."""
    root = tmp / "p"
    (root / "patches").mkdir(parents=True)
    (root / "patches" / "upstream.toml").write_text('url = "x"\nref = "v0.5.14"\n')
    for name, text in patches.items():
        (root / "patches" / name).write_bytes(text.encode())
    if series is None:
        series = "".join(f"{n}\n" for n in patches)
    (root / "patches" / "series").write_text(series)
    return root
