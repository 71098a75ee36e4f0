"""The report formats CI reads: one JUnit XML writer and one Markdown table helper.

``smoke`` and ``publish`` describe their runs as :class:`Suite` data; :func:`junit_xml` is
the only code that writes JUnit. The output validates against the schema Jenkins' xUnit
plugin uses (``junit-10.xsd``): properties sit on the test suite (a test case holds only
its outcome and output), suite times are plain seconds, and every text is XML 1.0 (control
characters shown escaped). Case names are stable identifiers (``push``,
``smoke.decode-speed``): outcomes, digests, paths and error text go into the outcome's
message, never into a name, so CI can follow one test across runs.
"""

from __future__ import annotations

import re
import socket
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from sglforge.util import printable

PASSED = "passed"
FAILED = "failed"
SKIPPED = "skipped"
ERROR = "error"
_OUTCOMES = (PASSED, FAILED, SKIPPED, ERROR)


@dataclass(frozen=True)
class Case:
    """One test case: a stable ``name``, its ``outcome`` and the message saying why."""

    name: str
    outcome: str = PASSED
    message: str = ""  # failures: the value and the threshold; skips: why it did not run
    text: str = ""  # the failure's body (longer detail)
    seconds: float = 0.0
    output: str = ""  # system-out of the case (log lines worth reading)

    def __post_init__(self) -> None:
        if self.outcome not in _OUTCOMES:
            raise ValueError(f"unknown outcome {self.outcome!r}")


@dataclass(frozen=True)
class Suite:
    """One test suite: its cases, and the facts of the run as properties."""

    name: str
    classname: str
    cases: tuple[Case, ...]
    properties: Mapping[str, object] = field(default_factory=dict)
    seconds: float = 0.0
    timestamp: str = ""
    output: str = ""  # system-out of the suite (the server log tail)


def _text(value: object) -> str:
    # XML 1.0 cannot hold most C0 characters: escape them (newlines and tabs stay).
    return printable(str(value), keep="\n\t")


def junit_xml(suites: Iterable[Suite], name: str) -> str:
    """The JUnit XML document for ``suites`` (one ``testsuites`` root)."""
    root = ET.Element("testsuites", name=_text(name))
    totals = dict.fromkeys(("tests", "failures", "errors"), 0)
    for suite in suites:
        counts = {o: sum(1 for c in suite.cases if c.outcome == o) for o in _OUTCOMES}
        el = ET.SubElement(
            root,
            "testsuite",
            name=_text(suite.name),
            tests=str(len(suite.cases)),
            failures=str(counts[FAILED]),
            errors=str(counts[ERROR]),
            skipped=str(counts[SKIPPED]),
            time=f"{max(suite.seconds, 0.0):.3f}",
            hostname=_text(socket.gethostname()),
        )
        if suite.timestamp:
            el.set("timestamp", _text(suite.timestamp))
        totals["tests"] += len(suite.cases)
        totals["failures"] += counts[FAILED]
        totals["errors"] += counts[ERROR]
        props = [(k, v) for k, v in suite.properties.items() if v is not None]
        if props:
            pel = ET.SubElement(el, "properties")
            for key, value in props:
                ET.SubElement(pel, "property", name=_text(key), value=_text(value))
        for case in suite.cases:
            cel = ET.SubElement(
                el,
                "testcase",
                classname=_text(suite.classname),
                name=_text(case.name),
                time=f"{max(case.seconds, 0.0):.3f}",
            )
            if case.outcome == SKIPPED:
                ET.SubElement(cel, "skipped", message=_text(case.message or "not run"))
            elif case.outcome in (FAILED, ERROR):
                tag = "failure" if case.outcome == FAILED else "error"
                bad = ET.SubElement(cel, tag, message=_text(case.message[:500]), type=tag)
                bad.text = _text(case.text or case.message)
            if case.output:
                ET.SubElement(cel, "system-out").text = _text(case.output)
        if suite.output:
            ET.SubElement(el, "system-out").text = _text(suite.output)
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


# Free text in Markdown (a scenario path, a --no-baseline reason, an error) goes through
# these, the one place it is escaped (issue 42, F16): no raw line break (a forged heading,
# list item or fence), no HTML (``</details>`` closing a section, ``<img onerror>``), no
# terminal control character; inline, a backtick cannot open a code span that swallows the
# rest of the line. A table cell also escapes its pipes (``md_cell``).
_MD_SPECIAL = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "`": "\\`"})
_HTML = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})
_CODE_SPAN = re.compile(r"((`+)(?!`).*?(?<!`)\2(?!`))")


def md_text(value: object) -> str:
    """``value`` as inline Markdown text that renders as itself: line breaks folded,
    controls shown escaped, HTML and backticks escaped."""
    return printable(" ".join(str(value).splitlines())).translate(_MD_SPECIAL)


def md_code(value: object) -> str:
    """``value`` as an inline code span (a digest, an image reference) that no backtick in
    it can close early; controls shown escaped, line breaks folded."""
    text = printable(" ".join(str(value).splitlines()))
    fence = "`" * (_longest_run(text, "`") + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_block(text: object) -> list[str]:
    """``text`` (an error, a log tail) as the lines of a fenced code block that no fence in
    it can close; controls other than newlines and tabs shown escaped."""
    body = printable(str(text), keep="\n\t")
    fence = "`" * max(3, _longest_run(body, "`") + 1)
    return [fence, *body.split("\n"), fence]


def _longest_run(text: str, ch: str) -> int:
    longest = run = 0
    for c in text:
        run = run + 1 if c == ch else 0
        longest = max(longest, run)
    return longest


def md_cell(value: object) -> str:
    """One Markdown table cell: pipes and HTML escaped, line breaks folded, controls shown
    escaped."""
    text = printable(" ".join(str(value).splitlines()))
    # a cell may hold a code span on purpose (a log line): HTML is inert inside one
    parts = _CODE_SPAN.split(text)
    out = [p if i % 3 else p.translate(_HTML) for i, p in enumerate(parts) if i % 3 != 2]
    return "".join(out).replace("|", "\\|")


def md_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """The lines of a Markdown table."""
    lines = [
        "| " + " | ".join(md_cell(h) for h in headers) + " |",
        "|" + "---|" * len(headers),
    ]
    lines += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]
    return lines


__all__ = [
    "ERROR",
    "FAILED",
    "PASSED",
    "SKIPPED",
    "Case",
    "Suite",
    "junit_xml",
    "md_block",
    "md_cell",
    "md_code",
    "md_table",
    "md_text",
]
