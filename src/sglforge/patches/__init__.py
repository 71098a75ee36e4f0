"""The queue's verbs: what takes a ``Project`` and works on ``patches/``.

Submodules: ``apply`` (worktrees), ``check`` (the per-ref matrix), ``edit`` (new, import,
drop, rename), ``export``, ``lint`` and ``refresh``. The queue's data (series, config items,
the upstream pin) is read by ``sglforge.queue``, below ``project.py``.
"""
