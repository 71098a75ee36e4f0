"""Benchmark: how fast `sglforge smoke` turns a dead server into a verdict, and its own overhead.

Runs the CPU scenario (smoke/standin-cpu.toml) against the stand-in server image (a TEST
DOUBLE of sglang, built by tests/standin/base.py) on the local engine:

- crash: the stand-in dies while "loading weights"; measured from the engine's record of the
  process exit (the container's State.FinishedAt) to the finished report. Goal: under 2 s.
  A runner that only polled readiness would wait out the load timeout instead.
- pass: a healthy run; the runner's own overhead is the wall time minus the time the server
  spent loading (container start to ready) and answering the checks' requests: scenario
  loading, preflight, container create/start/remove, log scanning and the reports.

    python bench/bench_smoke.py [--runs 5]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from pipelines import smoke_at  # noqa: E402
from sglforge import smoke  # noqa: E402
from sglforge.engine import containers  # noqa: E402
from standin.base import ensure_sglang_base  # noqa: E402

SCENARIO = ROOT / "smoke" / "standin-cpu.toml"
LABELS = {"io.sglforge.test": "1", "io.sglforge.bench": "smoke"}
GOAL_S = 2.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(image: str, work: Path, n: int, **env: str) -> tuple[smoke.SmokeReport, float, float]:
    """One smoke run; (report, wall seconds, seconds until the container was started)."""
    marks: dict[str, float] = {}
    t0 = time.monotonic()

    def progress(message: str) -> None:
        if message.startswith("starting"):
            marks["starting"] = time.monotonic()

    report = smoke_at(
        ROOT,
        image,
        SCENARIO,
        port=free_port(),
        log_dir=work / f"run-{n}",
        env=env,
        labels=LABELS,
        progress=progress,
    )
    return report, time.monotonic() - t0, marks.get("starting", t0) - t0


def engine_floor(image: str, work: Path) -> float:
    """Seconds the engine alone needs to create, start and remove one container of ``image``."""
    t0 = time.monotonic()
    with containers.running(
        image,
        entrypoint=["python3", "-c", "import time; time.sleep(60)"],
        command=[],
        profile=containers.Profile(),
        log_path=work / "floor.log",
        role="bench",
        labels=LABELS,
    ):
        started = time.monotonic()
    return (started - t0) + (time.monotonic() - started)


def summary(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):.3f} s, min {min(values):.3f} s, "
        f"max {max(values):.3f} s"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    opts = parser.parse_args()
    image = ensure_sglang_base()
    timeout = smoke.load_scenario(SCENARIO).load_timeout
    print(f"image {image} (stand-in server, TEST DOUBLE); scenario {SCENARIO.name}")

    with tempfile.TemporaryDirectory(prefix="bench-smoke-") as tmp:
        work = Path(tmp)
        crash: list[float] = []
        crash_wall: list[float] = []
        for i in range(opts.runs):
            report, wall, _ = run(image, work, i, STANDIN_FAULT="crash")
            assert report.verdict == "failed" and report.exit_code == 1, report.reason
            crash.append(float(report.figures["exit_to_verdict_s"]))  # type: ignore[arg-type]
            crash_wall.append(wall)

        overhead: list[float] = []
        walls: list[float] = []
        readies: list[float] = []
        checks: list[float] = []
        before: list[float] = []
        for i in range(opts.runs):
            report, wall, until_start = run(image, work, 100 + i)
            assert report.passed, smoke.table_rows(report)
            ready = float(report.figures["ready_s"])  # type: ignore[arg-type]
            served = sum(
                c.seconds for c in report.checks if not c.name.startswith("preflight.")
            ) - sum(c.seconds for c in report.checks if c.name == "ready")
            walls.append(wall)
            readies.append(ready)
            checks.append(served)
            before.append(until_start)
            overhead.append(wall - ready - served)
        floor = [engine_floor(image, work) for _ in range(opts.runs)]

    ok = max(crash) < GOAL_S
    print()
    print(f"crash while loading ({opts.runs} runs):")
    print(
        f"  exit -> verdict:           {summary(crash)}  (goal < {GOAL_S:g} s: "
        f"{'met' if ok else 'MISSED'})"
    )
    print(f"  whole run (start..report): {summary(crash_wall)}")
    print(f"  a readiness-only poller would answer after the load timeout: {timeout:g} s")
    print()
    print(f"passing stand-in run ({opts.runs} runs):")
    print(f"  wall:                      {summary(walls)}")
    print(f"  server loading (ready_s):  {summary(readies)}")
    print(f"  server answering checks:   {summary(checks)}")
    print(f"  runner overhead:           {summary(overhead)}")
    print(f"    of which before start:   {summary(before)}  (scenario, preflight, inspect)")
    print(f"  engine floor:              {summary(floor)}  (create + start + remove alone)")
    print(
        f"  runner's code beyond the engine floor: "
        f"{statistics.median(overhead) - statistics.median(floor):.3f} s (median)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
