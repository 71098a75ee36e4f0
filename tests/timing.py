"""Time per test folder, for CI's phase table (issue 33).

Each test's setup, call and teardown are added to its top folder (tests/unit, tests/docker...):
a folder's figure is its tests' SUMMED seconds, which under pytest-xdist (tests/parallel.py) run
side by side, so the folders add up to more than the run took. The run's own wall time is
printed under them, and, with workers, each worker's summed test seconds and count. The
controller aggregates: workers forward every report to it, and only it prints and writes.
With $SGLFORGE_CI_PHASES set, the figures are also written there as JSON so `.ci/run` can
print one table with its own phases (setup, lint).

Each test's CPU seconds are counted too (the worker's own and its reaped children's: git,
subprocesses of ``python -m sglforge``, the construction's child; not the engine's containers
or dockerd, which no test process owns), and the 20 tests using the most are listed: on a
2-core machine the suite's wall time follows its CPU work, not its waits.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections import defaultdict
from pathlib import Path

import pytest

from parallel import own_id

_seconds: defaultdict[str, float] = defaultdict(float)
_tests: defaultdict[str, set[str]] = defaultdict(set)
_worker_seconds: defaultdict[str, float] = defaultdict(float)
_worker_tests: defaultdict[str, set[str]] = defaultdict(set)
_cpu: defaultdict[str, float] = defaultdict(float)
_started = time.monotonic()
_phase_cpu = [0.0]
CPU_KEY = "sglforge_cpu_seconds"


def _cpu_now() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _phase_cpu[0] = _cpu_now()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    report = yield
    # the phase's CPU (since the test started or its last phase ended), carried to the
    # controller with the report (xdist sends user_properties)
    now = _cpu_now()
    report.user_properties.append((CPU_KEY, round(now - _phase_cpu[0], 3)))
    _phase_cpu[0] = now
    return report


def _folder(nodeid: str) -> str:
    parts = nodeid.split("::", 1)[0].split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    nodeid = own_id(report.nodeid)
    folder = _folder(nodeid)
    _seconds[folder] += report.duration
    _tests[folder].add(nodeid)
    for key, value in report.user_properties:
        if key == CPU_KEY:
            _cpu[nodeid] += float(value)
    node = getattr(report, "node", None)  # set on the controller: the worker that ran it
    gateway = getattr(node, "gateway", None)
    if gateway is not None:
        _worker_seconds[gateway.id] += report.duration
        _worker_tests[gateway.id].add(nodeid)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _seconds or hasattr(terminalreporter.config, "workerinput"):
        return
    rows = sorted(_seconds.items(), key=lambda item: -item[1])
    workers = len(_worker_seconds)
    terminalreporter.section("time per test folder")
    how = f"side by side on {workers} workers" if workers else "one after another"
    terminalreporter.write_line(f"summed test seconds (setup + call + teardown), {how}:")
    for folder, seconds in rows:
        terminalreporter.write_line(
            f"{folder:<24} {len(_tests[folder]):>5} tests {seconds:>8.1f} s"
        )
    for worker in sorted(_worker_seconds, key=lambda w: int(w.lstrip("gw") or 0)):
        seconds, count = _worker_seconds[worker], len(_worker_tests[worker])
        terminalreporter.write_line(f"{'worker ' + worker:<24} {count:>5} tests {seconds:>8.1f} s")
    wall = time.monotonic() - _started
    terminalreporter.write_line(f"{'(whole run, wall)':<24} {'':>11} {wall:>8.1f} s")
    if _cpu:
        terminalreporter.section("most CPU: 20 tests")
        terminalreporter.write_line(
            f"{sum(_cpu.values()):.0f} CPU seconds in all (test processes and their children; "
            "not the engine or its containers)"
        )
        for nodeid, seconds in sorted(_cpu.items(), key=lambda item: -item[1])[:20]:
            terminalreporter.write_line(f"{seconds:>8.1f} s  {nodeid}")
    out = os.environ.get("SGLFORGE_CI_PHASES")
    if out:
        path = Path(out)
        tmp = path.with_name(path.name + ".tmp")
        figures = {f: {"tests": len(_tests[f]), "seconds": round(s, 1)} for f, s in rows}
        by_worker = {
            w: {"tests": len(_worker_tests[w]), "seconds": round(s, 1)}
            for w, s in sorted(_worker_seconds.items())
        }
        doc = {
            "folders": figures,
            "workers": by_worker,
            "wall": round(wall, 1),
            "cpu": round(sum(_cpu.values()), 1),
        }
        tmp.write_text(json.dumps(doc))
        tmp.replace(path)
