"""Benchmark: the bytes an overlay publish moves, against the size of the base it stands on.

Issue 43: the overlay is written as an OCI image (``sglforge.images.oci``) and pushed by blobs
(``sglforge.images.registry``) with the base's layers mounted by digest, so a publish moves
the overlay's layer, config and manifest, plus the base's manifest and config it reads, and
never a base layer. This bench measures that on Debian's ``docker-registry`` on 127.0.0.1:

- the files: this project's real queue applied to the released sglang 0.5.14 code
  (``--upstream pypi:sglang``, the wheel from PyPI or the cache), placed as
  ``sglforge build --dry-run`` places them (``--synthetic``: the test queue of
  tests/helpers_build.py instead);
- the base: a STAND-IN of ``--base-mib`` MiB of incompressible layers pushed to the registry
  (the real ROCm release images are tens of GB and Docker Hub is not reachable here); the
  bytes moved do not depend on it, only the ratio does;
- the publish: read the base (manifest, config), write the overlay, push it into another
  repository of the same registry (mounts), then again from a second empty cache (the same
  digest, nothing pushed).

Prints the bytes sent and received, the base's size and their ratio, and both digests.

    python bench/bench_oci_publish.py [--base-mib 256] [--layers 4] [--synthetic]
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from pipelines import build_at  # noqa: E402
from sglforge.build import _config_change, _layer_files  # noqa: E402
from sglforge.engine import distribution as dist  # noqa: E402
from sglforge.images import oci  # noqa: E402
from sglforge.images import registry as oreg  # noqa: E402
from sglforge.standin.registry import answers, free_port, registry_binary, write_config  # noqa: E402
from standin.host_base import push_layers  # noqa: E402

MIB = 1 << 20


def start_registry(folder: Path) -> tuple[str, subprocess.Popen[bytes]]:
    binary = registry_binary()
    if binary is None:
        raise SystemExit("docker-registry is not installed: apt-get install docker-registry")
    address = f"127.0.0.1:{free_port()}"
    folder.mkdir(parents=True, exist_ok=True)
    config = write_config(folder, address)
    proc = subprocess.Popen(
        [binary, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 20
    while not answers(address):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise SystemExit(f"{binary} did not answer on {address}")
        time.sleep(0.1)
    return address, proc


def stored_layer(data: bytes, name: str) -> oci.Layer:
    """A layer of one file, gzip level 0: random bytes do not compress, and this is fast."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    tar_bytes = buf.getvalue()
    blob = oci.gzip_bytes(tar_bytes, level=0)
    return oci.Layer(blob, oci.digest_of(blob), oci.digest_of(tar_bytes), len(tar_bytes))


def push_standin_base(ref: str, mib: int, n: int) -> None:
    layers = [stored_layer(os.urandom(mib * MIB // n), f"opt/standin/part{i}") for i in range(n)]
    config = {"Env": ["PATH=/usr/bin"], "WorkingDir": "/sgl-workspace", "Cmd": ["/bin/bash"]}
    push_layers(ref, layers, config, [f"stand-in part {i}" for i in range(n)])


def queue_plan(tmp: Path, synthetic: bool) -> tuple[object, Path]:
    """The dry-run plan of the queue (files, deletions, labels) and its worktree."""
    if synthetic:
        from helpers_build import make_build_project

        project = make_build_project(tmp / "p")
        root, upstream = project.root, str(project.upstream)
    else:
        from real_project import copy_real_project

        root, upstream = copy_real_project(tmp / "project"), "pypi:sglang>=0.5.14,<=0.5.14"
    result = build_at(root, upstream=upstream, dry_run=True, offline=True)
    return result.plan, root / "build" / "worktrees" / "v0.5.14"


def publish_once(
    base_ref: str, target: str, cache: Path, plan: object, worktree: Path
) -> tuple[oreg.Published, dist.Transfer, oci.OverlayImage, oci.BaseImage]:
    read = dist.Transfer()
    base = oreg.read_base(base_ref, cache=cache, transfer=read)
    from dataclasses import replace

    plan = replace(plan, base=replace(plan.base, digest=base.digest))  # type: ignore[type-var]
    image = oci.overlay_image(
        base,
        _layer_files(plan, worktree),
        plan.deleted,  # type: ignore[attr-defined]
        _config_change(plan, 0),
        0,
    )
    return oreg.publish(image, base, target), read, image, base


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-mib", type=int, default=256, help="the stand-in base's size")
    ap.add_argument("--layers", type=int, default=4, help="the stand-in base's layers")
    ap.add_argument("--synthetic", action="store_true", help="the test queue, not the real one")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-oci-") as tmp_name:
        tmp = Path(tmp_name)
        os.environ["SGLFORGE_CACHE"] = os.environ.get("SGLFORGE_CACHE") or str(tmp / "cache")
        plan, worktree = queue_plan(tmp, args.synthetic)
        address, proc = start_registry(tmp / "registry")
        try:
            base_ref = f"{address}/lmsysorg/sglang:v0.5.14-rocm700-mi35x"
            push_standin_base(base_ref, args.base_mib, args.layers)
            target = f"{address}/sglforge/sglang:v0.5.14-rocm700-mi355x-bench"
            t0 = time.monotonic()
            first, read, image, base = publish_once(base_ref, target, tmp / "c1", plan, worktree)
            seconds = time.monotonic() - t0
            again, read2, _, _ = publish_once(base_ref, target, tmp / "c2", plan, worktree)
        finally:
            proc.kill()
            proc.wait()
    t = first.transfer
    moved = read.received + t.sent + t.received
    changed = sum(f.size for f in plan.files)  # type: ignore[attr-defined]
    print(
        f"queue: {len(plan.files)} changed files, {changed} B "  # type: ignore[attr-defined]
        f"(+{len(plan.deleted)} deleted); layer {image.layer.size} B gzip "  # type: ignore[attr-defined]
        f"({image.layer.tar_size} B tar), config {len(image.config)} B, "
        f"manifest {len(image.manifest)} B"
    )
    print(f"base (stand-in): {base.size} B in {len(base.layers)} layers")
    print(
        f"publish: read {read.received} B (base manifest + config); sent {t.sent} B, "
        f"received {t.received} B; {len(t.mounted)} base layers mounted, {len(t.copied)} "
        f"copied, {len(t.uploaded)} blobs uploaded; {seconds:.2f} s"
    )
    print(
        f"bytes moved / base size: {moved} / {base.size} = {moved / base.size:.2e} "
        f"(the moved bytes do not grow with the base: its layers are mounted)"
    )
    print(f"digest: {first.digest} (config {image.config_digest}, layer {image.layer.digest})")
    print(
        f"again from an empty cache: {again.digest} "
        f"({'same' if again.digest == first.digest else 'DIFFERENT'}; "
        f"{'already there, nothing pushed' if again.already else 'pushed'}; "
        f"read {read2.received} B); zlib {zlib.ZLIB_RUNTIME_VERSION}"
    )
    return 0 if again.digest == first.digest and not t.copied else 1


if __name__ == "__main__":
    raise SystemExit(main())
