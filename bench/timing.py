"""What the benchmarks share: one child process timed (wall and CPU), and the ``--src`` option
that times another checkout's sources against this one's."""

from __future__ import annotations

import argparse
import resource
import subprocess
import time
from collections.abc import Collection, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_timed(
    cmd: list[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    ok: Collection[int] = (0,),
    stdout: int | None = None,
) -> tuple[float, float]:
    """(wall s, CPU s: user + system) of running ``cmd`` to its end; exits with its stderr when
    its exit code is not in ``ok``. Its stdout goes to ``stdout`` (a file descriptor), else
    is read and dropped."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(
        cmd,
        cwd=cwd,
        env=None if env is None else dict(env),
        stdout=stdout if stdout is not None else subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode not in ok:
        err = res.stderr.decode(errors="replace")[-2000:]
        raise SystemExit(f"{' '.join(cmd)}: exit {res.returncode}\n{err}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def src_option(ap: argparse.ArgumentParser) -> None:
    """``--src DIR``: the sglforge sources to time (default: this checkout's ``src/``)."""
    ap.add_argument(
        "--src",
        type=lambda given: Path(given).resolve(),  # the runs change folder: never relative
        default=ROOT / "src",
        help="sglforge sources to time (another checkout's src/ to compare)",
    )
