"""Benchmark: a new machine's first construction of a release, against downloading its wheels.

What ``scan``, ``configs coverage`` and publish's scan do first on a new machine: sglang's own
model construction of the README launch (GLM-5.2, the stand-in checkpoint config
tests/standin/model-mxfp4, smoke/glm5-mxfp4-mtp-mi355x.toml, on an MI355X), with an empty
``$SGLFORGE_CACHE``: the release's requirements read from its wheel, the packages the
construction installs for real and transformers' closure chosen from the index, downloaded,
checked and unpacked, then the construction child. The release tree itself is made once,
untimed (a clone of the PyPI history from the user cache).

- first: the construction with an empty cache (a new one each run);
- again: the same construction with that cache (nothing fetched: the construction's own cost);
- floor: ``pip download --no-deps --no-cache-dir`` of the same files, by URL, into an empty
  folder (the bytes alone: no choice, no unpacking). The files are the ones the first run
  fetched, listed from its cache (sglang's own wheel, for another Python, in a second
  ``pip download`` given its tags).

Runs are interleaved (first, again, floor) ``--runs`` times; the figures are medians of wall
and CPU (user + system of the child processes). Until 2026-12-02 the first construction took
274 s here (this interpreter's wheel tags computed again for each of the index's files).

    python bench/bench_first_construct.py [--runs 3] [--src DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_first_apply import pip_tags  # noqa: E402

from timing import run_timed, src_option  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
VERSION = "0.5.14"
CHILD = """
import json, sys
from pathlib import Path
from sglforge import construct, coverage
from sglforge.scenario.file import load_scenario
from sglforge.targets import load_targets
tree, root = Path(sys.argv[1]), Path(sys.argv[2])
model = root / "tests" / "standin" / "model-mxfp4"
config = json.loads((model / "config.json").read_text())
scenario = load_scenario(root / "smoke" / "glm5-mxfp4-mtp-mi355x.toml")
args = coverage.launch_args(scenario.args, model)
built = construct.build(tree, config, args, load_targets(root).resolve("mi355x").device)
assert len(built.models["main"].moe) > 0 and "draft" in built.models
"""
LIST_URLS = """
import sys
from pathlib import Path
from sglforge import index
for path in sorted(Path(sys.argv[1]).glob("pypi-*/wheels/*.whl")):
    project = path.parent.parent.name.removeprefix("pypi-")
    # the first index listing it: the one sglforge's choice took it from (max keeps the first)
    print(next(f.url for f in index.files(project) if f.filename == path.name))
"""


def user_cache() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    return Path(xdg if xdg.startswith("/") else Path.home() / ".cache") / "sglforge"


def release_tree(dest: Path, env: dict[str, str]) -> Path:
    """sglang VERSION's python/ folder, cloned from the user cache's PyPI history (untimed)."""
    code = (
        "import sys; from pathlib import Path; from sglforge import cache, pypi; "
        f"print(pypi.history(cache.pypi_cache(), 'sglang', '=={VERSION}'))"
    )
    history = subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
    ).stdout.strip()
    subprocess.run(
        [
            "git",
            "-c",
            "advice.detachedHead=false",
            "clone",
            "-q",
            "--branch",
            f"v{VERSION}",
            history,
            str(dest),
        ],
        check=True,
        env=env,
    )
    return dest / "python"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    src_option(ap)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="sglforge-bench-construct-"))
    env = dict(os.environ, PYTHONPATH=str(args.src))
    try:
        tree = release_tree(base / "sglang", dict(env, SGLFORGE_CACHE=str(user_cache())))
        py = sys.executable
        rows: dict[str, list[tuple[float, float]]] = {"first": [], "again": [], "floor": []}
        for run in range(args.runs):
            cache = base / f"cache-{run}"
            cache.mkdir()
            run_env = dict(env, SGLFORGE_CACHE=str(cache))
            child = [py, "-c", CHILD, str(tree), str(ROOT)]
            rows["first"].append(run_timed(child, env=run_env))
            rows["again"].append(run_timed(child, env=run_env))
            urls = subprocess.run(
                [py, "-c", LIST_URLS, str(cache / "pypi")],
                env=run_env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout.split()
            dl = base / f"floor-{run}"
            pip = [py, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "-q", "-d", str(dl)]
            # sglang's wheel is for another Python (its tree is read, never imported here):
            # pip is told its tags, in a second command timed with the first
            ours = [u for u in urls if not u.rsplit("/", 1)[-1].startswith("sglang-")]
            parts = [run_timed(pip + ours, env=env)]
            for url in sorted(set(urls) - set(ours)):
                parts.append(run_timed(pip + pip_tags(url.rsplit("/", 1)[-1]) + [url], env=env))
            rows["floor"].append((sum(w for w, _ in parts), sum(c for _, c in parts)))
            fetched = sorted(p.name for p in (cache / "pypi").glob("pypi-*/wheels/*.whl"))
            got = sorted(p.name for p in dl.glob("*.whl"))
            if got != fetched:
                print(f"FAIL: pip fetched {got}, the construction {fetched}")
                return 1
            shutil.rmtree(cache)
        print(f"first construction of sglang {VERSION} (README launch, GLM-5.2, MI355X)")
        print(f"  {len(fetched)} wheels fetched: {', '.join(fetched)}")
        floor = statistics.median(w for w, _ in rows["floor"])
        for name, label in (
            ("first", "first (empty cache)"),
            ("again", "again (same cache)"),
            ("floor", "pip download (floor)"),
        ):
            walls = [w for w, _ in rows[name]]
            wall, cpu = statistics.median(walls), statistics.median(c for _, c in rows[name])
            each = ", ".join(f"{w:.2f}" for w in walls)
            print(f"  {label:<22} {wall:7.2f} s wall  {cpu:7.2f} s CPU  [{each}]")
        first = statistics.median(w for w, _ in rows["first"])
        print(f"  ratio first / floor    {first / floor:7.2f}x")
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
