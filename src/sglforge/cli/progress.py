"""How progress looks: a bar redrawn in place on a terminal, plain lines otherwise.

Everything goes to stderr, so stdout stays the command's result (pure JSON under ``--json``).
``--json`` and ``-q`` show nothing here (errors are printed by the error handler, not by this
module); ``-v`` adds ``detail`` lines. The bar is our own few lines rather than
``click.progressbar``: one line has to carry a task that other threads advance, info lines
printed above it, and a label that changes (a fetch's phases), which click's bar (one
iterable, one fixed label, one thread) does not do.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from sglforge.progress import Progress, Task
from sglforge.util import printable

QUIET, NORMAL, VERBOSE = -1, 0, 1
# Redraws per second at most (a 1 MiB chunk of a fast download would otherwise redraw
# hundreds of times a second).
_REDRAWS = 10


def human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"  # pragma: no cover


def _amount(t: Task) -> str:
    if t.unit == "bytes":
        done = human_bytes(t.done)
        return f"{done}/{human_bytes(t.total)}" if t.total else done
    noun = "" if t.unit == "step" else f" {t.unit}"
    return f"{t.done}/{t.total}{noun}" if t.total else f"{t.done}{noun}"


class Renderer(Progress):
    """The command line's reporter; ``level`` is read on every call (``--json`` is known only
    once the subcommand's options are parsed, after this is installed)."""

    def __init__(
        self, level: Callable[[], int], stream: TextIO | None = None, tty: bool | None = None
    ) -> None:
        super().__init__()
        self._level = level
        self.stream = stream or sys.stderr
        self.tty = (
            tty if tty is not None else (self.stream.isatty() and os.environ.get("TERM") != "dumb")
        )
        self._drawn: Task | None = None  # the task whose bar is on the current line
        self._last = 0.0

    @property
    def verbose(self) -> bool:
        return self._level() >= VERBOSE

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # stderr closed (a pipe reader went away)
            pass

    def _line(self, text: str) -> None:
        with self.lock:
            self._clear()
            self._write(printable(text) + "\n")
            if self._drawn is not None:
                self._draw(self._drawn)

    def info(self, message: str) -> None:
        if self._level() >= NORMAL:
            self._line(message)

    def detail(self, message: str) -> None:
        if self._level() >= VERBOSE:
            self._line(message)

    def warn(self, message: str) -> None:
        from sglforge.urls import scrub_text

        with self.lock:
            self._clear()
            self._write(printable(f"warning: {scrub_text(message)}") + "\n")
            if self._drawn is not None:
                self._draw(self._drawn)

    # --- tasks --------------------------------------------------------------------------

    def on_start(self, t: Task) -> None:
        if self._level() < NORMAL:
            return
        if self.tty:
            if self._drawn is not None:
                self._clear()
            self._drawn = t
            self._draw(t)
        elif t.unit != "step":
            size = f" ({human_bytes(t.total)})" if t.total and t.unit == "bytes" else ""
            self._write(printable(f"{t.label}{size} ...") + "\n")

    def on_update(self, t: Task) -> None:
        if self._level() < NORMAL:
            return
        if self.tty:
            now = time.monotonic()
            if t is self._drawn and (now - self._last >= 1 / _REDRAWS or t.done == t.total):
                self._draw(t)
        elif t.unit == "step":
            # one line per step: "history 3/12 v0.5.14"
            note = f" {t.note}" if t.note else ""
            self._write(printable(f"{t.label} {_amount(t)}{note}") + "\n")

    def on_finish(self, t: Task, ok: bool) -> None:
        if self._level() < NORMAL:
            return
        took = time.monotonic() - t.started
        if self.tty:
            if t is self._drawn:
                self._draw(t)
                self._write("\n")
                self._drawn = None
        elif t.unit != "step" and ok:
            amount = human_bytes(t.done) if t.unit == "bytes" else _amount(t)
            self._write(printable(f"{t.label}: {amount} in {took:.1f} s") + "\n")

    def close(self) -> None:
        with self.lock:
            if self._drawn is not None and self._level() >= NORMAL:
                self._write("\n")
            self._drawn = None

    # --- the bar ------------------------------------------------------------------------

    def _clear(self) -> None:
        if self.tty and self._drawn is not None:
            self._write("\r\x1b[K")

    def _draw(self, t: Task) -> None:
        self._last = time.monotonic()
        width = shutil.get_terminal_size((80, 24)).columns or 80
        right = _amount(t)
        if t.total:
            pct = min(100, int(100 * t.done / t.total)) if t.total else 0
            right = f"{pct:3d}%  {right}"
        if t.unit == "bytes" and t.done:
            rate = t.done / max(1e-3, self._last - t.started)
            right += f"  {human_bytes(rate)}/s"
        if t.note:
            right += f"  {t.note}"
        label = t.label
        bar = ""
        room = width - len(label) - len(right) - 6
        if t.total and room >= 10:
            cells = min(30, room)
            full = min(cells, cells * t.done // t.total)
            bar = "[" + "#" * full + "-" * (cells - full) + "] "
        line = printable(f"{label} {bar}{right}")
        if len(line) > width - 1:
            line = line[: max(0, width - 4)] + "..."
        self._write("\r" + line + "\x1b[K")


def build_events(progress: Progress) -> Callable[[Any], None]:
    """The ``progress`` callable ``build.build_image`` takes: its ``Status`` phases become info
    lines and its ``BuildStep`` events one task of ``total`` steps."""
    from sglforge.build import Status

    open_task: list[Task] = []

    def show(event: Any) -> None:
        if isinstance(event, Status):
            progress.info(f"... {event.message}")
            return
        # LABEL steps are one long line; the full text is in the log.
        text = " ".join(str(event.instruction).split())
        text = text if len(text) <= 120 else text[:117] + "..."
        if open_task and open_task[0].total != event.total:
            progress.finish(open_task.pop())
        if not open_task:
            open_task.append(progress.start("build step", event.total))
        open_task[0].update(event.n, note=text)
        if event.n >= event.total:
            progress.finish(open_task.pop())

    return show
