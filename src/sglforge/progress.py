"""Progress for people, the core side: what long work reports, never how it is shown.

A ``Progress`` is the ``say`` callable core functions already take (``util.Progress``: one line
per call) with two more things: ``task`` for work with a size (steps or bytes) and ``detail``
for lines only ``-v`` shows. Core functions take ``progress: Progress | None``; None means the
reporter the command line installed with ``using`` (so code deep under the upstream, the
cache or the push reports without every caller passing it down), or a silent one.

The renderers (bars on a terminal, plain lines otherwise, nothing under ``--json``/``-q``)
live in ``sglforge.cli.progress``; this module has no click and no terminal code.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator


class Task:
    """One piece of long work: ``total`` steps or bytes (None while unknown)."""

    def __init__(self, owner: Progress, label: str, total: int | None, unit: str) -> None:
        self.owner = owner
        self.label = label
        self.total = total
        self.unit = unit  # "step", "bytes", or a noun ("objects", "layers")
        self.done = 0
        self.note = ""
        self.started = time.monotonic()

    def advance(self, n: int = 1, note: str = "") -> None:
        """``n`` more steps or bytes done; ``note`` says which (a release, a file)."""
        self.update(self.done + n, note=note)

    def update(self, done: int, total: int | None = None, note: str | None = None) -> None:
        """Set how much is done (and the total, when it became known or changed)."""
        with self.owner.lock:
            self.done = done
            if total is not None:
                self.total = total
            if note is not None:
                self.note = note
            self.owner.on_update(self)


class Progress:
    """Reports nothing: the base every renderer overrides, and what runs without a CLI."""

    def __init__(self) -> None:
        # Tasks are advanced from worker threads (patches check runs refs in parallel).
        self.lock = threading.RLock()

    def __call__(self, message: str) -> None:
        self.info(message)

    def info(self, message: str) -> None:
        """One line about what is happening (hidden by ``-q`` and ``--json``)."""

    def detail(self, message: str) -> None:
        """One line only ``-v`` shows (each git or docker command, say)."""

    def warn(self, message: str) -> None:
        """A warning the user must see: on stderr at every verbosity, ``-q`` and ``--json``
        included (a wheel taken without a checksum, a damaged cache rebuilt)."""
        import sys

        from sglforge.urls import scrub_text
        from sglforge.util import printable

        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(f"warning: {printable(scrub_text(message))}\n")
            sys.stderr.flush()

    @property
    def verbose(self) -> bool:
        return False

    @contextlib.contextmanager
    def task(self, label: str, total: int | None = None, unit: str = "step") -> Iterator[Task]:
        """Work of ``total`` steps (or bytes: ``unit="bytes"``); finished on leaving."""
        t = self.start(label, total, unit)
        ok = False
        try:
            yield t
            ok = True
        finally:
            self.finish(t, ok)

    def start(self, label: str, total: int | None = None, unit: str = "step") -> Task:
        """A task whose end is not a block (``finish`` it, or ``close`` finishes it)."""
        t = Task(self, label, total, unit)
        with self.lock:
            self.on_start(t)
        return t

    def finish(self, t: Task, ok: bool = True) -> None:
        with self.lock:
            self.on_finish(t, ok)

    def close(self) -> None:
        """The command is over: end whatever is still drawn."""

    # Renderer hooks, called under ``lock``.
    def on_start(self, t: Task) -> None:
        pass

    def on_update(self, t: Task) -> None:
        pass

    def on_finish(self, t: Task, ok: bool) -> None:
        pass


_SILENT = Progress()
_current: Progress = _SILENT


def current() -> Progress:
    """The reporter the command line installed, else a silent one."""
    return _current


def resolve(progress: Progress | None) -> Progress:
    """``progress`` if given, else ``current()``."""
    return progress if progress is not None else _current


@contextlib.contextmanager
def using(progress: Progress) -> Iterator[Progress]:
    """Make ``progress`` the reporter of everything run inside (one per process: a global,
    not a context variable, so worker threads see it too)."""
    global _current
    before, _current = _current, progress
    try:
        yield progress
    finally:
        progress.close()
        _current = before


def layer_bar(
    t: Task,
) -> Callable[[str, str, int | None, int | None], None]:
    """A callback for per-layer push events (layer id, status, bytes sent, layer size) that
    keeps ``t`` at the sum over layers, with "layers pushed/known" as its note."""
    sizes: dict[str, int] = {}
    sent: dict[str, int] = {}
    finished: set[str] = set()
    seen: set[str] = set()

    def on_layer(layer: str, status: str, current: int | None, total: int | None) -> None:
        seen.add(layer)
        if total:
            sizes[layer] = total
        if current is not None:
            sent[layer] = current
        if status in ("Pushed", "Layer already exists") or status.startswith("Mounted from"):
            finished.add(layer)
            if layer in sizes:
                sent[layer] = sizes[layer]
        t.update(
            sum(sent.values()),
            total=sum(sizes.values()) or None,
            note=f"layers {len(finished)}/{len(seen)}",
        )

    return on_layer


__all__ = ["Progress", "Task", "current", "layer_bar", "resolve", "using"]
