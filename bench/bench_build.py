"""Benchmark: the size of the overlay layer `sglforge build` adds, and a no-op rebuild's time.

On the replica of the sglang 0.5.14 ROCm release image (a TEST DOUBLE built from the released
wheel with upstream's install, tests/standin/base.py), with this project's real queue applied
to the released code (``--upstream pypi:sglang``); ``--synthetic`` uses the synthetic upstream
and queue of tests/helpers_build.py instead (a python fix, a new file, a JIT-kernel header
fix, a deleted file) on the replica plus that tree:

- bytes added by the overlay (history sizes above the base) over the bytes of the changed
  files. Goal: at most 1.05x + 64 KiB.
- the same for a naive overlay built in the same run: COPY of the whole patched
  ``python/`` tree over the base's checkout.
- seconds for a rebuild with the same inputs (in-process ``build_image`` and the whole
  ``sglforge build`` command). Goal: under 2 s.

    python bench/bench_build.py [--synthetic [--models 400]] [--runs 5]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from helpers_build import STANDIN_OWNED, make_build_project  # noqa: E402
from pipelines import build_at as build_image  # noqa: E402
from real_project import copy_real_project  # noqa: E402
from sglforge.engine import client  # noqa: E402
from sglforge.engine import images as eng  # noqa: E402
from standin.base import ensure_sglang_base  # noqa: E402

BENCH_REPO = "sglforge-standin/sglang-bench"
LABELS = {"io.sglforge.managed": "1", "io.sglforge.bench": "1"}
KIB = 1024


def layer_bytes(image: str, base: str) -> tuple[int, list[tuple[int, str]]]:
    """Bytes the image's own layers add over ``base``, and those layers."""
    mine = eng.history(image)
    theirs = eng.history(base)
    added = mine[len(theirs) :]
    return sum(x.size for x in added), [(x.size, x.created_by[:70]) for x in added if x.size]


def layer_tar_bytes(image: str, base: str) -> int:
    """Bytes of the uncompressed layer tarballs the image adds over ``base`` (what a push
    sends before compression), read from ``docker save``."""
    n_base = len(eng.inspect(base).layers)  # type: ignore[union-attr]
    sizes: dict[str, int] = {}
    order: list[str] = []
    stream = client().api.get_image(image)
    with tempfile.TemporaryFile() as fh:
        for chunk in stream:
            fh.write(chunk)
        fh.seek(0)
        with tarfile.open(fileobj=fh, mode="r|") as tar:
            for m in tar:
                if m.name.endswith("layer.tar"):
                    sizes[m.name] = m.size
                elif m.name == "manifest.json":
                    order = __import__("json").load(tar.extractfile(m))[0]["Layers"]
    return sum(sizes.get(name, 0) for name in order[n_base:])


def naive_overlay(worktree: Path, base: str, workspace: str, tag: str, log: Path) -> float:
    """Build FROM base + COPY of the whole patched python/ tree; the seconds it took."""
    buf = io.BytesIO()
    dockerfile = (
        f"FROM {base}\nLABEL "
        + " ".join(f'"{k}"="{v}"' for k, v in LABELS.items())
        + f"\nCOPY python/ {workspace}/python/\n"
    ).encode()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
        tar.add(worktree / "python", arcname="python")
    started = time.monotonic()
    eng.build(buf.getvalue(), tag, log)
    return time.monotonic() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=400, help="synthetic modules in python/")
    ap.add_argument("--runs", type=int, default=5, help="no-op rebuilds to time")
    ap.add_argument("--synthetic", action="store_true", help="synthetic upstream and queue")
    args = ap.parse_args()
    os.environ["SGLFORGE_OFFLINE"] = "1"  # stand-in names would resolve to Docker Hub
    c = client()
    built: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
        repo = f"sglforge-bench/sglang-{os.getpid()}"
        t0 = time.monotonic()
        if args.synthetic:
            project = make_build_project(
                Path(tmp),
                base_template=f"{BENCH_REPO}:v{{version}}-{{rocm}}-mi35x",
                n_models=args.models,
                repository=repo,
            )
            files = {k: v.encode() for k, v in project.files.items() if k not in STANDIN_OWNED}
            base = ensure_sglang_base(
                "0.5.14", tag=f"{BENCH_REPO}:v0.5.14-rocm700-mi35x", files=files, client=c
            )
            root, upstream, base_image = project.root, str(project.upstream), None
        else:
            root = copy_real_project(Path(tmp) / "project")
            targets = root / "images" / "targets.toml"
            targets.write_text(
                targets.read_text().replace(
                    'repository = "sglforge/sglang"', f'repository = "{repo}"'
                )
            )
            base = base_image = ensure_sglang_base("0.5.14", client=c)
            upstream = "pypi:sglang>=0.5.14,<=0.5.14"
        base_s = time.monotonic() - t0
        kw = {"upstream": upstream, "labels": LABELS, "base_image": base_image}
        try:
            t0 = time.monotonic()
            first = build_image(root, **kw)
            first_s = time.monotonic() - t0
            built.append(first.image)
            changed = sum(f.size for f in first.plan.files)
            manifest = len(
                (
                    __import__("json").dumps(first.plan.manifest, indent=2, sort_keys=True) + "\n"
                ).encode()
            )
            added, layers = layer_bytes(first.image, base)
            added_tar = layer_tar_bytes(first.image, base)

            worktree = root / "build" / "worktrees" / "v0.5.14"
            tree = [p for p in (worktree / "python").rglob("*") if p.is_file()]
            python_bytes = sum(p.stat().st_size for p in tree)
            naive_tag = f"{repo}:naive"
            naive_s = naive_overlay(
                worktree,
                base,
                first.plan.workspace,
                naive_tag,
                root / "build" / "logs" / "naive.log",
            )
            built.append(naive_tag)
            naive_added, _ = layer_bytes(naive_tag, base)
            naive_tar = layer_tar_bytes(naive_tag, base)

            noop: list[float] = []
            for _ in range(args.runs):
                t0 = time.monotonic()
                again = build_image(root, **kw)
                noop.append(time.monotonic() - t0)
                assert again.up_to_date and again.id == first.id, "rebuild was not a no-op"
            cli: list[float] = []
            cmd = [
                sys.executable,
                "-m",
                "sglforge",
                "--root",
                str(root),
                "build",
                "--upstream",
                upstream,
                "--json",
            ]
            if base_image:
                cmd += ["--base-image", base_image]
            cmd += [a for k, v in LABELS.items() for a in ("--label", f"{k}={v}")]
            for _ in range(args.runs):
                t0 = time.monotonic()
                res = subprocess.run(cmd, capture_output=True, text=True)
                cli.append(time.monotonic() - t0)
                assert res.returncode == 0 and '"up_to_date": true' in res.stdout, res.stderr
        finally:
            for ref in built:
                eng.remove(ref)

    goal = 1.05 * changed + 64 * KIB
    print(
        f"replica base {base} ready in {base_s:.1f}s; upstream python/ tree "
        f"{python_bytes / KIB:.0f} KiB in {len(tree)} files"
    )
    print(
        f"changed files: {len(first.plan.files)} files, {changed} B "
        f"(+{len(first.plan.deleted)} deleted); manifest {manifest} B"
    )
    print(
        f"overlay layer(s): {added} B = {added / changed:.3f}x the changed bytes "
        f"({'PASS' if added <= goal else 'FAIL'}: goal <= 1.05x + 64 KiB = {goal:.0f} B); "
        f"without the manifest {(added - manifest) / changed:.3f}x"
    )
    for size, what in layers:
        print(f"  {size:>10} B  {what}")
    print(
        f"  as layer tarballs (tar headers included, before compression): {added_tar} B "
        f"({'PASS' if added_tar <= goal else 'FAIL'})"
    )
    print(f"  first overlay build: {first_s:.2f}s")
    print(
        f"naive overlay (COPY whole python/): {naive_added} B = "
        f"{naive_added / changed:.1f}x the changed bytes, "
        f"{naive_added / max(added, 1):.0f}x the sglforge overlay; built in {naive_s:.2f}s; "
        f"as layer tarballs {naive_tar} B"
    )
    print(
        f"no-op rebuild, build_image(): median {statistics.median(noop):.3f}s "
        f"max {max(noop):.3f}s over {len(noop)} runs "
        f"({'PASS' if max(noop) < 2 else 'FAIL'}: goal < 2 s)"
    )
    print(
        f"no-op rebuild, `sglforge build` command: median {statistics.median(cli):.3f}s "
        f"max {max(cli):.3f}s ({'PASS' if max(cli) < 2 else 'FAIL'}: goal < 2 s)"
    )
    return 0 if added <= goal and added_tar <= goal and max(noop) < 2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
