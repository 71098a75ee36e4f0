"""The progress reporter without a terminal: the push's per-layer sum, and how the command
line's renderer draws (a bar redrawn in place on a terminal, lines otherwise, nothing at -q)."""

from __future__ import annotations

import io

from sglforge.cli.progress import Renderer, human_bytes
from sglforge.progress import Progress, current, layer_bar, using

# The shape of the engine's push stream (docker/daemon's JSON messages, as the SDK decodes
# them with decode=True): per-layer events carry "id", and "progressDetail" while pushing.
PUSH_EVENTS = [
    ("aaa", "Preparing", None, None),
    ("bbb", "Preparing", None, None),
    ("aaa", "Layer already exists", None, None),
    ("bbb", "Pushing", 500_000, 2_000_000),
    ("bbb", "Pushing", 2_000_000, 2_000_000),
    ("bbb", "Pushed", None, None),
]


def test_layer_bar_sums_bytes_over_layers() -> None:
    with Progress().task("push x", unit="bytes") as task:
        on_layer = layer_bar(task)
        on_layer(*PUSH_EVENTS[0])
        on_layer(*PUSH_EVENTS[1])
        on_layer(*PUSH_EVENTS[2])
        assert task.note == "layers 1/2" and task.total is None
        on_layer(*PUSH_EVENTS[3])
        assert (task.done, task.total) == (500_000, 2_000_000)
        for event in PUSH_EVENTS[4:]:
            on_layer(*event)
        assert (task.done, task.total, task.note) == (2_000_000, 2_000_000, "layers 2/2")


def test_renderer_draws_in_place_on_a_terminal() -> None:
    out = io.StringIO()
    r = Renderer(lambda: 0, out, tty=True)
    with r.task("wheel 1/1 x.whl", 1_000_000, unit="bytes") as t:
        r.info("a line above the bar")
        t.advance(1_000_000)
    text = out.getvalue()
    assert text.count("\r") >= 3 and "\x1b[K" in text
    assert "a line above the bar\n" in text
    assert "100%  1.0 MB/1.0 MB" in text and text.endswith("\n")


def test_renderer_plain_lines_and_quiet() -> None:
    out = io.StringIO()
    r = Renderer(lambda: 0, out, tty=False)
    with r.task("history", 2) as t:
        t.advance(note="v1")
        t.advance(note="v2")
    r.detail("git status")  # -v only
    assert out.getvalue().splitlines() == ["history 1/2 v1", "history 2/2 v2"]
    quiet = io.StringIO()
    q = Renderer(lambda: -1, quiet, tty=True)
    with q.task("history", 2) as t:
        q.info("hidden")
        t.advance()
    assert quiet.getvalue() == ""


def test_using_installs_and_restores_the_reporter() -> None:
    before = current()
    r = Renderer(lambda: 1, io.StringIO(), tty=False)
    with using(r):
        assert current() is r
    assert current() is before


def test_human_bytes() -> None:
    assert [human_bytes(n) for n in (999, 1500, 395_000_000)] == ["999 B", "1.5 kB", "395.0 MB"]
