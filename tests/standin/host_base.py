"""A tiny base image made of this host's own programs, pushed to a registry by blobs (TEST DOUBLE).

For the OCI overlay tests (issue 43): the overlay writer needs a base that a registry holds
and an engine can run, without building one through the engine (a fresh engine has none, and
the stand-in bases take minutes). Its first layer holds ``/bin/sh`` (dash), ``cat``, and the
shared libraries they load, copied from this host (``ldd``), optionally ``python3`` with its
standard library; its second layer holds ``files`` (an sglang-like tree). It differs from a
release image in everything but the shape of its manifest and config, which is all the
writer reads.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from sglforge.engine import distribution as dist
from sglforge.images import oci

WORKDIR = "/sgl-workspace"


def _with_libraries(programs: list[str]) -> dict[str, Path]:
    """Image path -> host file of ``programs`` and every library they load."""
    out: dict[str, Path] = {}
    for program in programs:
        real = Path(program).resolve()
        out[program] = real
        listed = subprocess.run(["ldd", str(real)], capture_output=True, text=True).stdout
        for line in listed.splitlines():
            parts = line.split()
            path = next((p for p in parts if p.startswith("/")), None)
            if path:
                out[path] = Path(path).resolve()
    return out


# Left out of the copied standard library: big, and nothing a probe or self-check imports.
_SKIP = {
    "test",
    "__pycache__",
    "idlelib",
    "tkinter",
    "lib2to3",
    "ensurepip",
    "distutils",
    "pydoc_data",
    "turtledemo",
    "unittest",
    "asyncio",
    "multiprocessing",
    "site-packages",
    "dist-packages",
    "venv",
    "sqlite3",
    "curses",
    "dbm",
    "wsgiref",
    "xmlrpc",
}


def _python_tree(python: str) -> dict[str, Path]:
    """``python``'s own standard library (not this interpreter's: they may differ)."""
    asked = "import sysconfig; print(sysconfig.get_paths()['stdlib'])"
    stdlib = Path(
        subprocess.run([python, "-c", asked], capture_output=True, text=True).stdout.strip()
    )
    out: dict[str, Path] = {}
    for dirpath, dirs, names in os.walk(stdlib):
        dirs[:] = [d for d in dirs if d not in _SKIP and not d.startswith("config-")]
        for name in names:
            host = Path(dirpath) / name
            if host.is_file() and not host.is_symlink():
                out[str(host)] = host
    return out


def push_host_base(
    ref: str,
    files: Mapping[str, bytes],
    labels: Mapping[str, str],
    python: bool = False,
    env: Mapping[str, str] | None = None,
) -> str:
    """Push the base as ``ref`` (``registry/repository:tag``); its manifest digest."""
    programs = ["/bin/sh", "/bin/cat"] + (["/usr/bin/python3"] if python else [])
    host = _with_libraries(programs)
    if python:
        host.update(_python_tree("/usr/bin/python3"))
    system = [oci.LayerFile(path, src.read_bytes(), 0o755) for path, src in sorted(host.items())]
    tree = [oci.LayerFile(path, data) for path, data in sorted(files.items())]
    layers = [oci.make_layer(system, (), 0), oci.make_layer(tree, (), 0)]
    config = {
        "Env": [f"{k}={v}" for k, v in {"PATH": "/usr/bin:/bin", **(env or {})}.items()],
        "WorkingDir": WORKDIR,
        "Cmd": ["/bin/sh"],
        "Labels": dict(labels),
    }
    return push_layers(ref, layers, config, ["host programs", "sglang tree"])


def push_layers(
    ref: str, layers: Sequence[oci.Layer], config: Mapping[str, object], history: Sequence[str]
) -> str:
    """Push an amd64 Linux image of ``layers`` (one ``history`` line each) whose run config is
    ``config`` (``Env``, ``Cmd``...) as ``ref``, blob by blob; its manifest digest."""
    image_config = oci.canonical_json(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": dict(config),
            "rootfs": {"type": "layers", "diff_ids": [x.diff_id for x in layers]},
            "history": [{"created_by": line} for line in history],
        }
    )
    manifest = oci.canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": oci.DOCKER_MANIFEST,
            "config": {
                "mediaType": oci.DOCKER_CONFIG,
                "size": len(image_config),
                "digest": oci.digest_of(image_config),
            },
            "layers": [
                {"mediaType": oci.DOCKER_LAYER, "size": x.size, "digest": x.digest} for x in layers
            ],
        }
    )
    blobs = [dist.Blob(x.blob) for x in layers] + [dist.Blob(image_config)]
    return dist.push_image(ref, manifest, oci.DOCKER_MANIFEST, blobs, None)
