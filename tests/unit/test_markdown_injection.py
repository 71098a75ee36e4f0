"""Free text in the step summary is escaped at one place (issue 42, F16): a scenario path, a
--no-baseline or --accept-regression reason, an error, an image reference or a gate's why
cannot forge a heading or list item, close a ``<details>``, add HTML, or carry a terminal
control character; the reasons are refused at the option when they hold one."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from test_bench_outputs import _report
from test_publish_helpers import result

from sglforge.cli.options import _reason
from sglforge.formats import md_block, md_code, md_text
from sglforge.gates.result import GateResult
from sglforge.reports import bench as bench_view
from sglforge.reports.publish import markdown

HOSTILE = [
    "$TMP/sc-`x`<b>inj<img src=x onerror=alert(1)>|col|.toml",
    "first\x1b[2J\r\n## INJECTED </details><img src=x>",
    "ok\n## sglforge bench: passed",
    "a\u2028## forged\u2029- item",
    "x\x85</details>\x0b<details>",
]


def _outside_fences(md: str) -> list[str]:
    """The lines Markdown renders as markup (a fenced block's are shown as they are)."""
    out: list[str] = []
    fence = ""
    for line in md.split("\n"):
        if fence:
            fence = "" if set(line) == {"`"} and len(line) >= len(fence) else fence
        elif line.startswith("```"):
            fence = line[: len(line) - len(line.lstrip("`"))]
        else:
            out.append(line)
    assert not fence, "a fence was left open"
    return out


def _lines_ok(md: str) -> None:
    """No line but sglforge's own starts a heading; no raw HTML tag, no ESC, anywhere
    Markdown renders markup."""
    assert "\x1b" not in md and "\u2028" not in md and "\x85" not in md
    # code spans are literal too (a backtick run closes only on a run of the same length)
    shown = re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", "\n".join(_outside_fences(md)))
    assert "</details>" not in shown and "<img" not in shown and "<b>" not in shown
    heads = [line for line in shown.split("\n") if line.lstrip().startswith("#")]
    assert len(heads) == 1, heads  # sglforge's own; the text folded into it, if at all
    assert heads[0].startswith(("## sglforge publish ", "## sglforge bench "))


@pytest.mark.parametrize("text", HOSTILE)
def test_the_publish_summary_escapes_every_free_text(text: str) -> None:
    gate = GateResult("scan", False, None, "", why=text)
    md = markdown(
        result(scenario=text, error=text + "\n```\n" + text, image=text, gates=(gate,)),
        text,
    )
    _lines_ok(md)
    _lines_ok(markdown(None, text, error=text + "\n```\n" + text))


@pytest.mark.parametrize("text", HOSTILE)
def test_the_bench_summary_escapes_the_reasons(tmp_path: Path, text: str) -> None:
    md = bench_view.markdown(
        _report(
            tmp_path,
            scenario=text,
            baseline=None,
            changes=(),
            no_baseline=text,
            accepted_regression=text,
        )
    )
    _lines_ok(md)


def test_the_escapers_keep_plain_text_as_it_is() -> None:
    plain = "v0.5.14-rocm700 [bench] repeats = 4 in smoke/x.toml (first release)"
    assert md_text(plain) == plain
    assert md_code("img:v1") == "`img:v1`" and md_code("a``b") == "```a``b```"
    assert md_block("x\n```\ny") == ["````", "x", "```", "y", "````"]


@pytest.mark.parametrize("value", [*HOSTILE[1:], "tab\there", "  ", "bidi\u202eevil"])
def test_a_reason_with_a_control_character_is_refused(value: str) -> None:
    param = click.Option(["--no-baseline"])
    with pytest.raises(click.BadParameter):
        _reason(click.Context(click.Command("x")), param, value)
    ok = "the first release of this target"
    assert _reason(click.Context(click.Command("x")), param, f" {ok} ") == ok
