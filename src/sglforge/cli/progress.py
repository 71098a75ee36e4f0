"""How progress looks: a bar redrawn in place on a terminal, plain lines otherwise.

Everything goes to stderr, so stdout stays the command's result (pure JSON under ``--json``).
Under ``--json`` progress is plain lines even on a terminal (a CI job's log); ``-q`` shows
nothing here (errors are printed by the error handler, not by this module); ``-v`` adds
``detail`` lines. Off a terminal a step that prints nothing for a while gets a heartbeat line
(``... still``), so a log never looks hung; on a terminal the bar shows the time it has run.
The bar is our own few lines rather than ``click.progressbar``: one line has to carry a
task that other threads advance, info lines printed above it, and a label that changes (a
fetch's phases), which click's bar (one iterable, one fixed label, one thread) does not do.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from sglforge.cli.colour import paint
from sglforge.progress import Progress, Task
from sglforge.util import printable

QUIET, NORMAL, VERBOSE = -1, 0, 1
# Redraws per second at most (a 1 MiB chunk of a fast download would otherwise redraw
# hundreds of times a second).
_REDRAWS = 10
# Off a terminal (a CI log), a long download or push prints a line this often (seconds), so
# the log never looks hung: $SGLFORGE_PROGRESS_INTERVAL changes it.
INTERVAL_ENV = "SGLFORGE_PROGRESS_INTERVAL"
DEFAULT_INTERVAL = 5.0
# Off a terminal, a step that printed nothing for this long (seconds) prints "... still" (a
# bench, a build step, a checkout): $SGLFORGE_HEARTBEAT changes it.
HEARTBEAT_ENV = "SGLFORGE_HEARTBEAT"
DEFAULT_HEARTBEAT = 30.0


# Tasks shown only once they report work: a git fetch (its counters appear only when there
# are objects to receive), so "fetch ... 0 objects in 0.0 s" never fills a log.
_SHOWN_ONCE_BUSY = ("objects",)


def _interval() -> float:
    try:
        return max(0.0, float(os.environ.get(INTERVAL_ENV, DEFAULT_INTERVAL)))
    except ValueError:
        return DEFAULT_INTERVAL


def _heartbeat() -> float:
    try:
        return max(0.05, float(os.environ.get(HEARTBEAT_ENV, DEFAULT_HEARTBEAT)))
    except ValueError:
        return DEFAULT_HEARTBEAT


def human_seconds(s: float) -> str:
    """``45 s``, ``3 m 05 s``, ``1 h 02 m``."""
    s = max(0, int(s))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} m {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} m"


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


def _progress_text(t: Task, now: float) -> str:
    """``120.0 MB/291.0 MB (41%), 7.1 MB/s, layer 3/9`` for a plain progress line."""
    text = _amount(t)
    if t.total:
        text += f" ({min(100, int(100 * t.done / t.total))}%)"
    if t.unit == "bytes" and t.done:
        text += f", {human_bytes(t.done / max(1e-3, now - t.started))}/s"
    if t.note:
        text += f", {t.note}"
    return text


class Renderer(Progress):
    """The command line's reporter; ``level`` is read on every call (``--json`` is known only
    once the subcommand's options are parsed, after this is installed)."""

    def __init__(
        self,
        level: Callable[[], int],
        stream: TextIO | None = None,
        tty: bool | None = None,
        plain: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__()
        self._level = level
        self._plain = plain or (lambda: False)  # --json: plain lines even on a terminal
        self.stream = stream or sys.stderr
        self._terminal = (
            tty if tty is not None else (self.stream.isatty() and os.environ.get("TERM") != "dumb")
        )
        self._drawn: Task | None = None  # the task whose bar is on the current line
        self._last = 0.0
        self._interval = _interval()
        self._said: dict[int, float] = {}  # task id -> when its last plain line was printed
        self._idle: set[int] = set()  # tasks shown only once they report work
        self._busy: set[int] = set()
        self._open: list[Task] = []  # started, not finished (the newest last)
        self._wrote = time.monotonic()  # when the last line was written
        self._said_last = ("", 0.0)  # the last info line, and when
        self._beat = _heartbeat()
        self._stop = threading.Event()
        self._heart: threading.Thread | None = None

    @property
    def tty(self) -> bool:
        """Whether bars are drawn in place: a terminal, and not under --json."""
        return self._terminal and not self._plain()

    @property
    def verbose(self) -> bool:
        return self._level() >= VERBOSE

    def _write(self, text: str) -> None:
        self._wrote = time.monotonic()
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
            self._said_last = (message, time.monotonic())
            self._line(message)
            self._watch()

    def detail(self, message: str) -> None:
        if self._level() >= VERBOSE:
            self._line(message)

    def warn(self, message: str) -> None:
        from sglforge.urls import scrub_text

        with self.lock:
            self._clear()
            said = printable(f"warning: {scrub_text(message)}")
            self._write(paint("warning:", "warn", err=True) + said.removeprefix("warning:") + "\n")
            if self._drawn is not None:
                self._draw(self._drawn)

    # --- tasks --------------------------------------------------------------------------

    def on_start(self, t: Task) -> None:
        if self._level() < NORMAL:
            return
        if t not in self._open:
            self._open.append(t)
            self._watch()
        if (t.unit in _SHOWN_ONCE_BUSY or t.total == 0) and id(t) not in self._busy:
            # a fetch with nothing to fetch says nothing (git prints no counters then), nor
            # does work of 0 steps (an empty queue's apply)
            self._idle.add(id(t))
            return
        if self.tty:
            if self._drawn is not None:
                self._clear()
            self._drawn = t
            self._draw(t)
        elif t.unit != "step" or t.total is None:
            # a download, a push, or a step of unknown length (a checkout): its start line
            size = f" ({human_bytes(t.total)})" if t.total and t.unit == "bytes" else ""
            self._write(printable(f"{t.label}{size} ...") + "\n")

    def on_update(self, t: Task) -> None:
        if self._level() < NORMAL:
            return
        if id(t) in self._idle:
            if t.total == 0 and t.unit not in _SHOWN_ONCE_BUSY:
                return
            self._idle.discard(id(t))
            self._busy.add(id(t))
            self.on_start(t)
        if self.tty:
            now = time.monotonic()
            if t is self._drawn and (now - self._last >= 1 / _REDRAWS or t.done == t.total):
                self._draw(t)
        elif t.unit == "step":
            # one line per step: "history 3/12 v0.5.14"
            note = f" {t.note}" if t.note else ""
            self._write(printable(f"{t.label} {_amount(t)}{note}") + "\n")
        else:
            # a long download or push: a line every few seconds (bytes, percent, rate, and
            # the note: a push's layers)
            now = time.monotonic()
            last = self._said.get(id(t), t.started)
            if now - last >= self._interval and t.done != t.total:
                self._said[id(t)] = now
                self._write(printable(f"{t.label}: {_progress_text(t, now)}") + "\n")

    def on_finish(self, t: Task, ok: bool) -> None:
        if self._level() < NORMAL:
            return
        self._busy.discard(id(t))
        if t in self._open:
            self._open.remove(t)
        if id(t) in self._idle:
            self._idle.discard(id(t))
            return
        took = time.monotonic() - t.started
        if self.tty:
            if t is self._drawn:
                self._draw(t)
                self._write("\n")
                self._drawn = None
        elif t.unit != "step" and ok:
            self._said.pop(id(t), None)
            amount = human_bytes(t.done) if t.unit == "bytes" else _amount(t)
            self._write(printable(f"{t.label}: {amount} in {took:.1f} s") + "\n")
        elif t.total is None and ok:
            self._write(printable(f"{t.label}: done in {took:.1f} s") + "\n")

    def close(self) -> None:
        self._stop.set()
        heart = self._heart
        if heart is not None and heart is not threading.current_thread():
            heart.join(timeout=5)
        with self.lock:
            if self._drawn is not None and self._level() >= NORMAL:
                self._write("\n")
            self._drawn = None

    # --- the heartbeat ------------------------------------------------------------------

    def _watch(self) -> None:
        """Start the heartbeat (once): plain "... still" lines off a terminal, the bar's
        running time on one."""
        if self._heart is None and not self._stop.is_set():
            self._heart = threading.Thread(target=self._beating, name="progress", daemon=True)
            self._heart.start()

    def _beating(self) -> None:
        while not self._stop.wait(min(1.0, self._beat)):
            with self.lock:
                if self._stop.is_set() or self._level() < NORMAL:
                    continue
                now = time.monotonic()
                if self.tty:
                    if self._drawn is not None and now - self._last >= 1.0:
                        self._draw(self._drawn)
                elif now - self._wrote >= self._beat:
                    line = self._still(now)
                    if line:
                        self._write(printable(line) + "\n")

    def _still(self, now: float) -> str:
        """The heartbeat line: the newest open task, else the last info line."""
        shown = [t for t in self._open if id(t) not in self._idle]
        if shown:
            t = shown[-1]
            done = f", {_progress_text(t, now)}" if t.done else ""
            return f"... still: {t.label} ({human_seconds(now - t.started)}{done})"
        said, when = self._said_last
        if said:
            return f"... still working ({human_seconds(now - when)} since: {said})"
        return ""

    # --- the bar ------------------------------------------------------------------------

    def _clear(self) -> None:
        if self.tty and self._drawn is not None:
            self._write("\r\x1b[K")

    def _draw(self, t: Task) -> None:
        self._last = time.monotonic()
        width = shutil.get_terminal_size((80, 24)).columns or 80
        self._write("\r" + bar_line(t, width - 1, self._last) + "\x1b[K")


_WHEEL = re.compile(r"\b([A-Za-z0-9_.]+?)-(\d[^-\s]*)-[^\s]*\.whl\b")


def bar_line(t: Task, width: int, now: float) -> str:
    """One bar line of at most ``width`` columns. What it drops first when narrow: the bar,
    then a wheel file's tags (``sglang 0.5.14``), then the note, the rate, the label's tail;
    the amount, the percentage and the ETA stay."""
    amount = _amount(t)
    pct = ""
    eta = ""
    rate = ""
    elapsed = now - t.started
    if t.total:
        pct = f"{min(100, int(100 * t.done / t.total)):3d}%"
        if 0 < t.done < t.total and elapsed >= 1:
            eta = f"ETA {human_seconds(elapsed * (t.total - t.done) / t.done)}"
    if t.unit == "bytes" and t.done:
        rate = f"{human_bytes(t.done / max(1e-3, elapsed))}/s"
    if not t.total and not t.done:
        amount = human_seconds(elapsed)  # no size known yet: how long it has run
    must = "  ".join(x for x in (pct, amount, eta) if x)
    optional = [x for x in (rate, printable(t.note)) if x]
    label = printable(t.label)
    short = _WHEEL.sub(lambda m: f"{m[1]} {m[2]}", label)
    for name in (label, short):
        for extra in (optional, optional[:1], []):
            right = "  ".join([must, *extra])
            room = width - len(name) - len(right) - 2
            if room >= 0:
                bar = ""
                if t.total and room >= 12:
                    cells = min(30, room - 2)
                    full = min(cells, cells * t.done // t.total)
                    bar = "[" + "#" * full + "-" * (cells - full) + "] "
                return f"{name} {bar}{right}"
    # still too narrow: the label's tail goes, then the amount's tail
    room = width - len(must) - 1
    if room >= 8:
        return f"{short[: room - 3]}... {must}"
    line = f"{short} {must}"
    return line if len(line) <= width else line[: max(0, width - 3)] + "..."


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
