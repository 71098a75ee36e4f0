"""What ``sglforge scan`` prints without ``--json``: a row per fail, a row per file for the
warnings of one kind (each with what the include is, where it is reached from and loaded by),
the next steps, and a footer counting the rows shown (the findings behind them said too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sglforge.scan.findings import FAIL, Finding


@dataclass(frozen=True)
class ScanText:
    rows: tuple[tuple[str, str, str, str], ...]  # severity, kind, where, detail
    hints: tuple[str, ...]  # "next: ..." lines, the fails' first
    footer: str


def _where(f: Finding) -> str:
    return f"{f.file}:{f.line}" if f.line is not None else f.entry


def scan_text(findings: Sequence[Finding], each: bool = False) -> ScanText:
    """Rows of the findings: every fail, and the warnings one row per (kind, file) unless
    ``each`` (``-v``), when every finding is a row. A grouped row names its lines and shows
    the first one's detail in full; the footer counts rows, and says how many findings the
    grouped rows stand for."""
    rows: list[tuple[str, str, str, str]] = []
    warns: dict[tuple[str, str], list[Finding]] = {}
    for f in findings:
        if f.severity == FAIL or each:
            rows.append((f.severity, f.kind, _where(f), f.detail))
        else:
            group = f.file if f.line is not None else f.entry
            warns.setdefault((f.kind, group), []).append(f)
    for (kind, group), found in sorted(warns.items()):
        first = found[0]
        if first.line is None:
            rows.append((first.severity, kind, group, first.detail))
            continue
        numbers = ", ".join(str(f.line) for f in found)
        more = f" (and {len(found) - 1} more like it; -v lists each)" if len(found) > 1 else ""
        label = "lines" if len(found) > 1 else "line"
        rows.append((first.severity, kind, group, f"{label} {numbers}: {first.detail}{more}"))
    fail_hints = dict.fromkeys(f.hint for f in findings if f.severity == FAIL and f.hint)
    warn_hints = dict.fromkeys(f.hint for f in findings if f.severity != FAIL and f.hint)
    hints = (*fail_hints, *(f"{h} (the warnings)" for h in warn_hints if h not in fail_hints))
    fails = sum(r[0] == FAIL for r in rows)
    shown = len(rows) - fails
    behind = len(findings) - sum(f.severity == FAIL for f in findings)
    footer = f"{fails} fail, {shown} warn"
    if behind != shown:
        footer += f" ({behind} warning findings in {shown} rows)"
    if not fails:
        footer += ": nothing blocks this launch"
    return ScanText(tuple(rows), hints, footer)
