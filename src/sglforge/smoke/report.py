"""What a smoke run found (``Check``, ``SmokeReport``) and how it is shown: table rows, JSON,
JUnit (through :mod:`sglforge.formats`), markdown and the CI step summary.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglforge import formats
from sglforge.util import atomic_write

if TYPE_CHECKING:
    pass
from sglforge.scenario.constants import Value
from sglforge.scenario.file import LogMatch


@dataclass(frozen=True)
class Check:
    """One check's outcome: measured ``value`` against ``threshold``."""

    name: str
    passed: bool
    value: Value = None
    threshold: Value = None
    detail: str = ""
    skipped: bool = False
    seconds: float = 0.0

    @property
    def outcome(self) -> bool | None:
        """True passed, False failed, None skipped (as reports and JUnit count it)."""
        return None if self.skipped else self.passed


@dataclass(frozen=True)
class SmokeReport:
    """What a smoke run found. ``verdict`` is ``passed``, ``failed`` or ``cannot-run``.

    ``image_digest`` is the registry digest when the image has one, else its image ID (both
    ``sha256:...``); ``figures`` holds the measured numbers (``ready_s``, ``decode_tok_s``,
    ``spec_accept_length_server``/``_requests``, ``exit_to_verdict_s`` after a crash...).
    """

    passed: bool
    verdict: str
    checks: tuple[Check, ...]
    image: str
    image_digest: str | None
    image_id: str | None
    scenario: str
    scenario_path: Path
    figures: Mapping[str, Value]
    log_path: Path | None
    report_dir: Path | None
    exit_code: int | None = None
    log_tail: tuple[str, ...] = ()
    reason: str = ""
    started_at: str = ""
    duration_s: float = 0.0
    warnings: tuple[LogMatch, ...] = ()
    run_id: str = ""
    required: tuple[LogMatch, ...] = ()  # one per required pattern, found or missing
    not_run: tuple[str, ...] = ()  # skipped, neither passed nor failed: --server-url's gaps
    server_url: str | None = None  # the server sglforge did not start (None: it started one)

    @property
    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if not c.passed and not c.skipped]

    @property
    def warning_count(self) -> int:
        """Log lines that matched a ``warn`` pattern, plus one per missing ``warn`` line."""
        return sum(1 if w.missing else w.count for w in self.warnings)


# --------------------------------------------------------------------------- preflight


def report_dict(report: SmokeReport) -> dict[str, Any]:
    """The report as JSON-ready data (``passed``, ``verdict``, ``checks`` first)."""
    data = asdict(report)
    out: dict[str, Any] = {"passed": report.passed, "verdict": report.verdict}
    out["checks"] = [dict(c) for c in data.pop("checks")]
    for k, v in data.items():
        if k in out:
            continue
        out[k] = str(v) if isinstance(v, Path) else (list(v) if isinstance(v, tuple) else v)
    out["figures"] = dict(report.figures)
    out["warning_count"] = report.warning_count
    return out


def _fmt(v: Value) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def table_rows(report: SmokeReport) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the human table (one row per check)."""
    rows = []
    for c in report.checks:
        result = "skip" if c.skipped else ("ok" if c.passed else "FAIL")
        rows.append([c.name, result, _fmt(c.value), _fmt(c.threshold), c.detail[:100]])
    return ["check", "result", "value", "threshold", "detail"], rows


def junit_suite(report: SmokeReport) -> formats.Suite:
    """The run as one JUnit suite: a case ``smoke.<check>`` per check, facts as properties."""
    props: dict[str, object] = {
        "image": report.image,
        "image_digest": report.image_digest,
        "image_id": report.image_id,
        "scenario": report.scenario,
        "verdict": report.verdict,
        "exit_code": report.exit_code,
        "run_id": report.run_id or None,
        "warnings": report.warning_count,
    }
    props.update({f"figure.{k}": v for k, v in report.figures.items()})
    cases = []
    for c in report.checks:
        props[f"check.{c.name}.value"] = _fmt(c.value)
        props[f"check.{c.name}.threshold"] = _fmt(c.threshold)
        output = ""
        if c.name == "logs" and (report.warnings or report.required):
            # JUnit has no warning outcome: a passing case with the lines, counts as properties.
            if report.warnings:
                props["logs.warnings"] = report.warning_count
            for r in report.required:
                props[f"logs.required.{r.name}"] = f"{r.count}/{r.need}"
            output = "\n".join([*_warning_lines(report), *_required_lines(report)])
        cases.append(replace(check_case(c), output=output))
    return formats.Suite(
        name=f"sglforge smoke {report.scenario}",
        classname=f"sglforge.smoke.{report.scenario}",
        cases=tuple(cases),
        properties=props,
        seconds=report.duration_s,
        timestamp=report.started_at,
        output="\n".join(report.log_tail),
    )


def check_case(c: Check) -> formats.Case:
    """A smoke check as its JUnit case ``smoke.<check>``, in ``sglforge smoke``'s suite and a
    publish's alike: skipped with why, failed with the value and the threshold, or passed."""
    name = f"smoke.{c.name}"
    if c.skipped:
        return formats.Case(name, formats.SKIPPED, c.detail or "not run", seconds=c.seconds)
    if c.passed:
        return formats.Case(name, seconds=c.seconds)
    message = f"{c.name}: value {_fmt(c.value)}, threshold {_fmt(c.threshold)}"
    failed = message + (f": {c.detail}" if c.detail else "")
    return formats.Case(name, formats.FAILED, failed, f"{message}\n{c.detail}", c.seconds)


def junit_xml(report: SmokeReport) -> str:
    """JUnit XML (the schema Jenkins' xUnit plugin validates) of one smoke run."""
    return formats.junit_xml([junit_suite(report)], "sglforge smoke")


def _warning_lines(report: SmokeReport) -> list[str]:
    return [f"WARNING {w.describe()}" + (f" -- {w.why}" if w.why else "") for w in report.warnings]


def _required_lines(report: SmokeReport) -> list[str]:
    out = []
    for r in report.required:
        state = ("MISSING" if r.severity == "fail" else "MISSING (warn)") if r.missing else "FOUND"
        out.append(f"REQUIRED {state} {r.describe()}" + (f" -- {r.why}" if r.why else ""))
    return out


def markdown(report: SmokeReport) -> str:
    """A markdown summary (for ``$GITHUB_STEP_SUMMARY``)."""
    icon = {"passed": "PASSED", "failed": "FAILED", "cannot-run": "CANNOT RUN"}[report.verdict]
    if report.warnings:
        icon += f" with {report.warning_count} warning line(s)"
    lines = [
        f"### sglforge smoke `{report.scenario}`: {icon}",
        "",
        f"Image `{report.image}`" + (f" (`{report.image_digest}`)" if report.image_digest else ""),
        "",
    ]
    if report.reason:
        lines += [f"> {report.reason}", ""]
    headers, rows = table_rows(report)
    lines += formats.md_table(headers, rows)
    if report.warnings:
        rows = []
        for w in report.warnings:
            first = f"line {w.first_line}: `{w.text[:120]}`" if w.first_line else w.describe()
            rows.append([w.name, str(w.count), first, w.why])
        lines += ["", *formats.md_table(["warning", "lines", "first", "why"], rows)]
    if report.required:
        rows = []
        for req in report.required:
            result = ("FAIL" if req.severity == "fail" else "warn") if req.missing else "ok"
            first = f"line {req.first_line}: `{req.text[:120]}`" if req.first_line else "-"
            rows.append([req.name, result, f"{req.count} (need {req.need})", first, req.why])
        headers = ["required line", "result", "lines", "first", "why"]
        lines += ["", *formats.md_table(headers, rows)]
    if report.figures:
        figures = [[k, _fmt(v)] for k, v in report.figures.items()]
        lines += ["", *formats.md_table(["figure", "value"], figures)]
    if report.log_tail:
        lines += ["", "<details><summary>last server log lines</summary>", "", "```"]
        lines += list(report.log_tail)
        lines += ["```", "", "</details>"]
    return "\n".join(lines) + "\n"


def append_step_summary(
    report: SmokeReport, environ: Mapping[str, str] = os.environ
) -> Path | None:
    """Append the markdown summary to ``$GITHUB_STEP_SUMMARY`` when set; the file or None."""
    target = environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    path = Path(target)
    # The runner's summary file collects every step's output: append to it, never replace it.
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(markdown(report) + "\n")
    return path


def write_junit(report: SmokeReport, path: Path) -> None:
    """Write the JUnit XML report to ``path``."""
    atomic_write(Path(path), junit_xml(report))
