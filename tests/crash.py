"""Crash a sglforge process at a chosen point, from the outside (no hook in production code).

``crash_command(n, ...)`` is a command line that runs sglforge (or a snippet of Python) with
``os.replace`` wrapped so that the process dies with ``os._exit(99)`` right after the ``n``-th
rename a journalled multi-file change makes (``sglforge.transactions._roll_forward``): the moment a
power cut would leave the queue half written if the journal did not exist.
"""

from __future__ import annotations

import sys

CRASH_EXIT = 99

_PRELUDE = """
import os, sys
_limit = int(sys.argv.pop(1))
_mode = sys.argv.pop(1)
_real, _done = os.replace, [0]
def _replace(src, dst, *args, **kwargs):
    _real(src, dst, *args, **kwargs)
    if sys._getframe(1).f_code.co_name == "_roll_forward":
        _done[0] += 1
        if _done[0] >= _limit:
            os._exit(99)
os.replace = _replace
if _mode == "code":
    exec(sys.argv.pop(1))
else:
    import runpy
    sys.argv[0] = "sglforge"
    runpy.run_module("sglforge", run_name="__main__", alter_sys=True)
"""


def crash_command(after_renames: int, *sglforge_args: str) -> list[str]:
    """``python -c ... sglforge ARGS`` dying after ``after_renames`` journalled renames."""
    return [sys.executable, "-c", _PRELUDE, str(after_renames), "module", *sglforge_args]


def crash_code(after_renames: int, code: str) -> list[str]:
    """``python -c CODE`` dying after ``after_renames`` journalled renames."""
    return [sys.executable, "-c", _PRELUDE, str(after_renames), "code", code]
