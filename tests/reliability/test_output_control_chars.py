"""Issue 10: terminal control characters from patch subjects or server logs are shown
escaped, never raw, in every place they are rendered (tables, errors, the smoke report, its
JUnit file and step summary, log tails); ordinary UTF-8 such as "é" is kept as it is."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from junit_schema import assert_valid_junit
from sglforge import smoke
from sglforge.engine.containers import tail_lines
from sglforge.util import printable

HOSTILE = [
    ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),  # clear the screen, cursor home
    ("\x1b]0;owned\x07", "\\x1b]0;owned\\x07"),  # retitle the terminal window
    ("ok\rFAILED", "ok\\rFAILED"),  # carriage return: overwrite what was shown
    ("bell\x07", "bell\\x07"),
    ("nul\x00byte", "nul\\x00byte"),
    ("c1\x9b31m", "c1\\x9b31m"),  # C1 CSI: the one-byte escape sequence
    ("del\x7f", "del\\x7f"),
    ("rtl\u202eevil", "rtl\\u202eevil"),  # bidi override (trojan source)
    ("back\x08space", "back\\x08space"),
]
RAW = set(chr(c) for c in range(0x20)) | set(chr(c) for c in range(0x7F, 0xA0)) | {"\u202e"}


def raw_controls(text: str, allowed: str = "\n") -> set[str]:
    return {ch for ch in text if ch in RAW and ch not in allowed}


@pytest.mark.parametrize(("text", "shown"), HOSTILE)
def test_printable_escapes_controls(text: str, shown: str) -> None:
    assert printable(text) == shown


@pytest.mark.parametrize("text", ["café", "模型", "naïve – “quoted” ✓", "emoji 🚀", "tab-free"])
def test_printable_keeps_ordinary_text(text: str) -> None:
    assert printable(text) == text


def test_undecodable_bytes_and_kept_newlines() -> None:
    assert printable(b"caf\xe9".decode("utf-8", "surrogateescape")) == "caf\\xe9"
    assert printable("a\nb\tc", keep="\n") == "a\nb\\tc"


@pytest.fixture
def hostile_log(tmp_path: Path) -> Path:
    lines = [f"INFO line {n} {text} é" for n, (text, _) in enumerate(HOSTILE)]
    lines.append("AssertionError \x1b[31mred\x1b[0m caf\u00e9")
    path = tmp_path / "server.log"
    path.write_bytes(("\n".join(lines) + "\n").encode())
    return path


def report_for(log: Path, tmp_path: Path) -> smoke.SmokeReport:
    patterns = [
        smoke.ForbiddenPattern("bare-assert", r"AssertionError", "crash"),
        smoke.ForbiddenPattern("noise", r"INFO line", "noise", "warn"),
    ]
    matches = smoke.scan_log(log, patterns)
    tail = tuple(tail_lines(log, 50))
    return smoke.SmokeReport(
        passed=False,
        verdict="failed",
        checks=(smoke.logs_check(matches, len(patterns)),),
        image="x:1",
        image_digest=None,
        image_id=None,
        scenario="s",
        scenario_path=tmp_path / "s.toml",
        figures={},
        log_path=log,
        report_dir=tmp_path,
        log_tail=tail,
        reason="failed: logs",
        warnings=tuple(m for m in matches if m.severity == "warn"),
    )


def test_forbidden_log_hits_and_tails_are_escaped(hostile_log: Path, tmp_path: Path) -> None:
    report = report_for(hostile_log, tmp_path)
    hits = [c.detail for c in report.checks] + [w.describe() for w in report.warnings]
    for text in [*hits, *report.log_tail]:
        assert not raw_controls(text, allowed=""), text
    assert any("\\x1b[31mred" in h for h in hits) and "é" in report.log_tail[0]
    assert any("ok\\rFAILED" in line for line in report.log_tail)  # \r did not split the line


def test_report_junit_markdown_and_json_hold_no_raw_controls(
    hostile_log: Path, tmp_path: Path
) -> None:
    report = report_for(hostile_log, tmp_path)
    xml = smoke.junit_xml(report)
    ET.fromstring(xml.split("\n", 1)[1])  # well-formed: XML 1.0 forbids most C0 characters
    assert_valid_junit(xml)
    md = smoke.markdown(report)
    doc = json.dumps(smoke.report_dict(report), ensure_ascii=False)
    for text in (xml, md, doc):
        assert not raw_controls(text), sorted(raw_controls(text))
    assert "é" in md and "é" in doc


def test_cli_table_and_error_messages_escape(tmp_path: Path) -> None:
    from sglforge.cli.common import table

    shown = table(["patch", "subject"], [[n, t] for n, (t, _) in enumerate(HOSTILE)])
    assert not raw_controls(shown), sorted(raw_controls(shown))
    for _, escaped in HOSTILE:
        assert escaped in shown


PATCH = """From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: A <a@example.com>
Date: Mon, 1 Jan 2024 00:00:00 +0000
Subject: [PATCH] {subject}

Why: test.

Upstream-Status: Pending
---
 python/x.py | 1 +
 1 file changed, 1 insertion(+)

diff --git a/python/x.py b/python/x.py
--- a/python/x.py
+++ b/python/x.py
@@ -1 +1,2 @@
 a = 1
+b = 2
--
2.40.0
"""


@pytest.mark.parametrize(("text", "shown"), HOSTILE[:7])
def test_patches_list_and_lint_show_subjects_escaped(tmp_path: Path, text: str, shown: str) -> None:
    from reliability_helpers import cli

    root = tmp_path / "proj"
    (root / "patches").mkdir(parents=True)
    (root / "patches" / "upstream.toml").write_text(
        'url = "https://github.com/sgl-project/sglang.git"\nref = "v0.5.14"\n'
    )
    subject = f"fix café {text}"
    (root / "patches" / "0001-x.patch").write_bytes(PATCH.format(subject=subject).encode())
    (root / "patches" / "series").write_text("0001-x.patch\n")
    for command in (["patches", "list"], ["patches", "lint"]):
        code, out, err = cli(root, *command)
        assert not raw_controls(out + err), (command, out, err)
    code, out, err = cli(root, "patches", "list")
    assert code == 0, err
    if "\r" not in text:  # a bare CR ends an e-mail header line: the subject stops there
        assert f"fix café {shown}" in out
