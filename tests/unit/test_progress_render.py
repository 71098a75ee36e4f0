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


def test_a_long_push_prints_a_line_every_few_seconds_in_ci_logs(monkeypatch) -> None:
    """Off a terminal, a download or push says how far it got every interval (bytes, percent,
    rate, layers), so a CI log never looks hung; at the default interval a quick one stays
    two lines (start and end)."""
    import time

    monkeypatch.setenv("SGLFORGE_PROGRESS_INTERVAL", "0.05")
    out = io.StringIO()
    r = Renderer(lambda: 0, out, tty=False)
    with r.task("push reg/x:v1", None, unit="bytes") as task:
        on_layer = layer_bar(task)
        for event in PUSH_EVENTS[:4]:
            on_layer(*event)
            time.sleep(0.06)
        for event in PUSH_EVENTS[4:]:
            on_layer(*event)
    lines = out.getvalue().splitlines()
    assert lines[0] == "push reg/x:v1 ..." and lines[-1].startswith("push reg/x:v1: 2.0 MB in ")
    middle = [ln for ln in lines[1:-1] if ln.startswith("push reg/x:v1: ")]
    assert middle, lines
    assert any("500.0 kB/2.0 MB (25%)" in ln and "layers 1/2" in ln for ln in middle), middle
    assert all("/s" in ln for ln in middle if "kB/" in ln)
    # the default interval: a push shorter than it prints its start and end only
    monkeypatch.delenv("SGLFORGE_PROGRESS_INTERVAL")
    out = io.StringIO()
    r = Renderer(lambda: 0, out, tty=False)
    with r.task("push reg/x:v2", None, unit="bytes") as task:
        on_layer = layer_bar(task)
        for event in PUSH_EVENTS:
            on_layer(*event)
    assert len(out.getvalue().splitlines()) == 2
    # -q and --json: nothing
    out = io.StringIO()
    r = Renderer(lambda: -1, out, tty=False)
    monkeypatch.setenv("SGLFORGE_PROGRESS_INTERVAL", "0")
    with r.task("wheel x", 10, unit="bytes") as task:
        task.update(5)
    assert out.getvalue() == ""


def test_colour_on_a_terminal_only_and_never_under_no_color(monkeypatch) -> None:
    """Verdicts and errors are coloured on a terminal; NO_COLOR, TERM=dumb, a pipe and
    --color never turn it off, --color always on; JSON is never coloured."""
    import json
    import sys

    from click.testing import CliRunner

    from sglforge.cli import colour, main

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdout", Tty())
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    colour.set_mode("auto")
    try:
        assert colour.verdict("PASSED", True) == "\x1b[32mPASSED\x1b[0m"
        assert "\x1b[31m" in colour.verdict("FAILED", False)
        for var, value in (("NO_COLOR", "1"), ("TERM", "dumb")):
            monkeypatch.setenv(var, value)
            assert colour.verdict("PASSED", True) == "PASSED", var
        monkeypatch.delenv("NO_COLOR")
        monkeypatch.setenv("TERM", "xterm")
        colour.set_mode("never")
        assert colour.paint("x", "bad") == "x"
        monkeypatch.setattr(sys, "stdout", io.StringIO())  # a pipe
        colour.set_mode("auto")
        assert colour.paint("x", "good") == "x"
        colour.set_mode("always")
        assert colour.paint("x", "good") != "x"
    finally:
        colour.set_mode("auto")
    res = CliRunner().invoke(main, ["--color", "always", "biuld", "--json"])
    assert json.loads(res.stdout)["ok"] is False and "\x1b[" not in res.stdout
    res = CliRunner().invoke(
        main, ["--color", "always", "--root", "/nonexistent", "patches", "list"]
    )
    assert res.exit_code == 2 and "\x1b[31m" in res.stderr and "error:" in res.stderr
    colour.set_mode("auto")


def test_a_fetch_with_nothing_to_fetch_says_nothing() -> None:
    """git prints no counters when there is nothing to fetch: then no "fetch ... 0 objects"
    lines; a fetch that receives objects is shown as before, on a terminal or not."""
    for tty in (False, True):
        out = io.StringIO()
        r = Renderer(lambda: 0, out, tty=tty)
        with r.task("fetch /cache/x.git", None, unit="objects"):
            pass
        assert out.getvalue() == "", tty
        with r.task("fetch /cache/y.git", None, unit="objects") as task:
            task.update(5, 10, note="receiving objects")
            task.update(10, 10, note="receiving objects")
        text = out.getvalue()
        assert "fetch /cache/y.git" in text and "x.git" not in text, (tty, text)
        if not tty:
            assert text.splitlines()[0] == "fetch /cache/y.git ..."
            assert text.splitlines()[-1].startswith("fetch /cache/y.git: 10/10 objects in ")


def test_json_draws_plain_lines_even_on_a_terminal() -> None:
    """--json (``plain``): one line per step, no bar redrawn in place, on a terminal too."""
    out = io.StringIO()
    r = Renderer(lambda: 0, out, tty=True, plain=lambda: True)
    with r.task("check", 2) as t:
        t.advance(note="v1")
        t.advance(note="v2")
    assert out.getvalue().splitlines() == ["check 1/2 v1", "check 2/2 v2"]
    assert "\r" not in out.getvalue()


def test_a_quiet_step_gets_a_heartbeat_off_a_terminal(monkeypatch) -> None:
    """A step that prints nothing for $SGLFORGE_HEARTBEAT seconds (a bench, a checkout)
    prints "... still" lines naming it (or the last line said), never a bar."""
    import time

    monkeypatch.setenv("SGLFORGE_HEARTBEAT", "0.1")
    out = io.StringIO()
    r = Renderer(lambda: 0, out, tty=True, plain=lambda: True)
    with using(r):
        with r.task("bench standin-cpu"):
            time.sleep(0.5)
        r.info("push 127.0.0.1:5000/x:v1")
        time.sleep(0.35)
    lines = out.getvalue().splitlines()
    still = [ln for ln in lines if ln.startswith("... still: bench standin-cpu (")]
    assert still and still[0].endswith(" s)"), lines
    assert any(ln.startswith("... still working (") and "push 127.0.0.1" in ln for ln in lines)
    assert "\r" not in out.getvalue()
    # stopped with the command: nothing more is written after close
    after = out.getvalue()
    time.sleep(0.3)
    assert out.getvalue() == after
    # -q: no heartbeat either
    quiet = io.StringIO()
    q = Renderer(lambda: -1, quiet, tty=False)
    with using(q), q.task("bench"):
        time.sleep(0.3)
    assert quiet.getvalue() == ""


def test_the_bar_keeps_amount_and_eta_on_a_narrow_terminal() -> None:
    """At 80 columns a wheel's bar drops the bar and the file name's tags before the total,
    the percentage, the rate or the ETA (N19)."""
    from sglforge.cli.progress import bar_line
    from sglforge.progress import Task

    name = "wheel 1/1 sglang-0.5.14-cp310-cp310-manylinux_2_34_x86_64.whl"
    t = Task(Progress(), name, 12_200_000, "bytes")
    t.started -= 10
    t.done = 6_100_000
    for width in (79, 60, 50):
        line = bar_line(t, width, t.started + 10)
        assert len(line) <= width, (width, line)
        assert " 50%  6.1 MB/12.2 MB  ETA 10 s" in line, (width, line)
    assert bar_line(t, 79, t.started + 10).startswith("wheel 1/1 sglang 0.5.14 ")
    assert "610.0 kB/s" in bar_line(t, 79, t.started + 10)
    wide = bar_line(t, 200, t.started + 10)
    assert wide.startswith(name + " [###") and "ETA" in wide
    # nothing known yet: the time it has run, not "0"
    idle = Task(Progress(), "stand-in base x", None, "step")
    assert bar_line(idle, 79, idle.started + 65) == "stand-in base x 1 m 05 s"


def test_no_bar_for_zero_steps() -> None:
    """An empty queue's apply draws nothing (not "apply at v0.5.14 0")."""
    out = io.StringIO()
    r = Renderer(lambda: 0, out, tty=True)
    with r.task("apply at v0.5.14", 0):
        pass
    r.close()
    assert out.getvalue() == ""
