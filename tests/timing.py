"""Time per test folder, for CI's phase table (issue 33).

Each test's setup, call and teardown are added to its top folder (tests/unit, tests/docker...).
The table is printed at the end of the run; with $SGLFORGE_CI_PHASES set, the figures are also
written there as JSON so `.ci/run` can print one table with its own phases (setup, lint).
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from pathlib import Path

import pytest

_seconds: defaultdict[str, float] = defaultdict(float)
_tests: defaultdict[str, set[str]] = defaultdict(set)
_started = time.monotonic()


def _folder(nodeid: str) -> str:
    parts = nodeid.split("::", 1)[0].split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    folder = _folder(report.nodeid)
    _seconds[folder] += report.duration
    _tests[folder].add(report.nodeid)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _seconds:
        return
    rows = sorted(_seconds.items(), key=lambda item: -item[1])
    terminalreporter.section("time per test folder")
    for folder, seconds in rows:
        terminalreporter.write_line(
            f"{folder:<24} {len(_tests[folder]):>5} tests {seconds:>8.1f} s"
        )
    wall = time.monotonic() - _started
    terminalreporter.write_line(f"{'(whole run, wall)':<24} {'':>11} {wall:>8.1f} s")
    out = os.environ.get("SGLFORGE_CI_PHASES")
    if out:
        path = Path(out)
        tmp = path.with_name(path.name + ".tmp")
        figures = {f: {"tests": len(_tests[f]), "seconds": round(s, 1)} for f, s in rows}
        tmp.write_text(json.dumps({"folders": figures, "wall": round(wall, 1)}))
        tmp.replace(path)
