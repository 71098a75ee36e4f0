"""Signals for the command line: Ctrl-C and SIGTERM end every command the same way.

While Python imports sglforge (the first few hundred milliseconds) there is nothing to clean
up, so a signal then ends the process at once with a one-line message and no traceback.
Once a command runs, SIGTERM and SIGHUP raise :class:`sglforge.errors.Terminated` (a
KeyboardInterrupt) in the main thread, so every ``finally`` and context manager that cleans up
after Ctrl-C cleans up after them too; the CLI's error handler then exits 130 or 143.
"""

from __future__ import annotations

# Only what the interpreter has loaded already, until the startup handler is in place: `signal`
# itself builds its enums on import (milliseconds, under load tens of them), and a Ctrl-C in
# that window would print a traceback. `_signal` is the built-in module under it.
import _signal
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import FrameType

_EXIT: dict[int, int] = {_signal.SIGINT: 130, _signal.SIGTERM: 143, _signal.SIGHUP: 129}


def _starting(signum: int, _frame: FrameType | None) -> None:
    os.write(2, f"{'interrupted' if signum == _signal.SIGINT else 'terminated'}\n".encode())
    os._exit(_EXIT.get(signum, 128 + signum))


def install_startup() -> None:
    """Until the command runs: any of the signals ends the process quietly."""
    try:
        for s in _EXIT:
            _signal.signal(s, _starting)
    except ValueError:
        pass  # not the main thread (sglforge run as a library from a thread): leave them


def _terminate(signum: int, _frame: FrameType | None) -> None:
    import signal

    from sglforge.errors import Terminated

    raise Terminated(f"received {signal.Signals(signum).name}")


def install_running() -> None:
    """While a command runs: Ctrl-C raises KeyboardInterrupt, SIGTERM/SIGHUP Terminated."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _terminate)
        signal.signal(signal.SIGHUP, _terminate)


def exit_code(exc: BaseException) -> int:
    """130 for Ctrl-C, 143 for SIGTERM (also when the engine's own handler raised it)."""
    text = str(exc)
    if "SIGTERM" in text:
        return 143
    if "SIGHUP" in text:
        return 129
    return 130


__all__ = ["exit_code", "install_running", "install_startup"]
