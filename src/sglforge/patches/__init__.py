"""The patch queue: ``patches/series``, the patch files and the upstream pin.

Submodules: ``series`` (reading the queue), ``lint``, ``upstream`` (where upstream comes
from), ``apply`` (worktrees), ``check`` (the per-ref matrix), ``refresh`` and ``export``.
"""
