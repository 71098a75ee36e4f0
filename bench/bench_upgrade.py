"""Benchmark: `sglforge upgrade` from v0.5.14 to the newest sglang release, by stage.

Real parts: released sglang from PyPI wheels (the python/-only history), the queue check and
3-way refresh, the overlay build on a real Docker engine, the smoke runner. Stand-ins: the
base image and the server it runs (no GPU here). Baseline measured in the same run: the same
upgrade with --no-build (queue work only), so the image and smoke share is visible.

    python bench/bench_upgrade.py        # needs the engine: bash .ci/setup
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def project(base: Path) -> Path:
    from real_project import copy_real_project

    return copy_real_project(base / "project")


def main() -> int:
    from pipelines import open_project
    from pipelines import upgrade_at as upgrade
    from sglforge.patches.check import select_tags
    from sglforge.queue.series import ref_version
    from standin.base import ensure_sglang_base

    upstream = "pypi:sglang>=0.5.10"
    base = Path(tempfile.mkdtemp(prefix="sglforge-bench-upgrade-"))
    try:
        root = project(base / "a")
        t = time.perf_counter()
        newest = select_tags(open_project(root, upstream).upstream, ">=0")[-1]  # as --to latest
        print(f"newest release: {newest} (history ready in {time.perf_counter() - t:.1f} s)")
        ensure_sglang_base(str(ref_version(newest)))
        labels = {"io.sglforge.managed": "1", "io.sglforge.test": "1"}
        start = time.perf_counter()
        r = upgrade(
            root,
            "latest",
            upstream=upstream,
            targets=("mi355x",),
            base_image="sglforge-standin/sglang:v{version}-rocm700-mi35x",
            scenario=REPO / "smoke" / "standin-cpu.toml",
            labels=labels,
            offline=True,
        )
        total = time.perf_counter() - start
        queue_only_root = project(base / "b")
        start = time.perf_counter()
        upgrade(queue_only_root, "latest", upstream=upstream, build=False)
        queue_only = time.perf_counter() - start
        print(f"upgrade v0.5.14 -> {r.new_ref}: {'READY' if r.ready else 'NOT READY'} ({r.reason})")
        print(f"{'stage':28} seconds")
        for stage, seconds in r.stages.items():
            print(f"{stage:28} {seconds:7.2f}")
        print(f"{'wall time':28} {total:7.2f}")
        print(
            f"baseline: queue-only upgrade (--no-build) {queue_only:.2f} s; full upgrade is "
            f"{total / queue_only:.1f}x that"
        )
        return 0 if r.ready else 1
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
