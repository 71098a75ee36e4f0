"""What a stand-in bench base installs for sglang's bench client, read from the release itself.

``python3 -m sglang.bench_serving`` imports a different set of packages in every release
(0.5.23 added ``msgspec``; issue 45, U19). The list is therefore derived from the release
wheel, not written down once: the modules it reaches from ``sglang.bench_serving`` through
module-level imports, and of those the ones outside sglang and the standard library, each
spelled as the release's own ``Requires-Dist`` spells it. An import inside a function or a
``try`` (optional) is not followed; one under a module-level ``if`` (a platform switch such as
``if _is_cuda:``) is, but what it reaches is installed only when the release requires it
(``Requires-Dist``): a CUDA-only or NPU-only package is left out, one every platform needs
(``apache-tvm-ffi`` in 0.5.23) is not. Where the release pins a version (``==``) that
version is installed; where it gives a range or nothing, the version this replica was benched
with (:data:`PINS`, when it satisfies the range), else pip's choice within the range.

What the CPU replica substitutes, on purpose (see :mod:`sglforge.standin.base`): torch is the
machine's CPU build (:data:`CPU_TORCH`), torchvision is a stub and is not installed.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import sys
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

ENTRY = "sglang.bench_serving"
CPU_TORCH = "torch==2.13.0+cpu"  # the machine's CPU wheel; the release pins a ROCm build
STUBBED = frozenset({"torchvision"})  # the replica's stub (base.TORCHVISION_STUB)
# Versions the replica of 0.5.14 was benched with (tests/docker/test_bench.py): used where a
# release leaves a distribution unpinned, so the double stays reproducible. A lock, not the
# list of what to install: that comes from the release.
PINS = {
    "aiohttp": "3.14.5",
    "datasets": "5.2.0",
    "ipython": "9.18.1",
    "numpy": "2.4.6",
    "orjson": "3.13.0",
    "partial-json-parser": "0.2.1.1.post7",
    "pillow": "13.0.0",
    "psutil": "7.2.2",
    "pybase64": "1.5.1",
    "pyzmq": "27.3.0",
    "requests": "2.34.2",
    "sentencepiece": "0.2.3",
    "starlette": "1.10.0",
    "tqdm": "4.70.1",
    "transformers": "5.8.1",
    "triton": "3.8.0",
}
# Import names whose distribution is named otherwise (the rest are their own distribution).
DISTRIBUTIONS = {
    "PIL": "pillow",
    "zmq": "pyzmq",
    "IPython": "ipython",
    "yaml": "pyyaml",
    "cv2": "opencv-python-headless",
    "sklearn": "scikit-learn",
    "attr": "attrs",
    "dateutil": "python-dateutil",
    "google": "protobuf",
    "tvm_ffi": "apache-tvm-ffi",
}


def bench_requirements(wheel: Path, entry: str = ENTRY) -> tuple[str, ...]:
    """The requirements a replica of the release in ``wheel`` installs so that ``entry``
    imports (sorted; the release's own specifiers, see the module docstring)."""
    return bench_client(wheel, entry)[0]


def bench_client(wheel: Path, entry: str = ENTRY) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(:func:`bench_requirements`, :func:`import_sites` of aiter) for the release in
    ``wheel``, from one walk of its modules (a second parse of 0.5.23's 500 costs seconds)."""
    with zipfile.ZipFile(wheel) as zf:
        reached = _walk(zf, entry)
        imported = _outside(reached.external)
        requires = requires_dist(zf)
        sites = import_sites(zf, entry, "aiter", reached)
    out: dict[str, str] = {}
    for name, always in imported.items():
        dist = DISTRIBUTIONS.get(name, name)
        key = canonicalize_name(dist)
        if key in STUBBED or not (always or key in requires):
            continue
        out[key] = CPU_TORCH if key == "torch" else _spec(dist, key, requires.get(key))
    return tuple(out[k] for k in sorted(out)), sites


def _spec(dist: str, key: str, req: Requirement | None) -> str:
    known = PINS.get(key)
    if req is None:
        return f"{dist}=={known}" if known else dist
    pinned = [s for s in req.specifier if s.operator in ("==", "===")]
    if pinned or not known or not req.specifier.contains(known, prereleases=True):
        return f"{req.name}{req.specifier}"
    return f"{req.name}=={known}"


def requires_dist(zf: zipfile.ZipFile) -> Mapping[str, Requirement]:
    """The wheel's ``Requires-Dist`` that apply without extras on this platform, by name."""
    meta = next(n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
    found: dict[str, Requirement] = {}
    for line in zf.read(meta).decode("utf-8", "replace").splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        try:
            req = Requirement(line.partition(":")[2].strip())
        except InvalidRequirement:
            continue
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            found.setdefault(canonicalize_name(req.name), req)
    return found


def external_imports(zf: zipfile.ZipFile, entry: str) -> dict[str, bool]:
    """Top-level names outside sglang and the standard library that the modules reached from
    ``entry`` import at import time, each True when reached with no module-level ``if`` on
    the way (sorted by name)."""
    return _outside(_walk(zf, entry).external)


def _outside(external: Mapping[str, bool]) -> dict[str, bool]:
    return {
        n: external[n]
        for n in sorted(external)
        if n not in sys.stdlib_module_names and n != "__future__"
    }


def import_sites(
    zf: zipfile.ZipFile, entry: str, top: str, reached: _Reached | None = None
) -> tuple[str, ...]:
    """``path:line`` of each import of package ``top`` that runs at import time on any
    platform: in a module reached from ``entry`` with no module-level ``if`` on the way, at its
    top level or in a module-level ``try`` (sorted). ``external_imports`` follows no ``try``;
    this finds the guarded ones too (0.5.23: ``try: from aiter... except ImportError:``,
    ``sglang/srt/layers/quantization/quark/utils.py:19-28``)."""
    reached = reached or _walk(zf, entry)
    sites = []
    for module in (m for m, always in reached.modules.items() if always):
        tree = reached.trees.get(module)
        if tree is None:
            continue
        path = reached.paths[module]
        todo: list[ast.stmt] = list(tree.body)
        while todo:
            node = todo.pop()
            if isinstance(node, ast.Try):
                todo += [*node.body, *node.orelse, *node.finalbody]
                todo += [s for h in node.handlers for s in h.body]
            elif isinstance(node, ast.Import):
                if any(a.name.partition(".")[0] == top for a in node.names):
                    sites.append(f"{path}:{node.lineno}")
            elif isinstance(node, ast.ImportFrom) and not node.level:
                if (node.module or "").partition(".")[0] == top:
                    sites.append(f"{path}:{node.lineno}")
    return tuple(sorted(sites))


@dataclasses.dataclass(frozen=True)
class _Reached:
    """The modules of a package reached from an entry by import-time imports and the top-level
    names outside it they import, each True when reached with no module-level ``if`` on the
    way; each module's path and parsed source (None: not Python 3 syntax)."""

    modules: dict[str, bool]
    external: dict[str, bool]
    paths: dict[str, str]
    trees: dict[str, ast.Module | None]


def _walk(zf: zipfile.ZipFile, entry: str) -> _Reached:
    names = set(zf.namelist())
    top = entry.partition(".")[0]
    seen: dict[str, bool] = {}
    external: dict[str, bool] = {}
    paths: dict[str, str] = {}
    trees: dict[str, ast.Module | None] = {}
    todo = [(entry, True)]
    while todo:
        module, always = todo.pop()
        path = _path_of(module, names)
        if path is None or seen.get(module) is True or (module in seen and not always):
            continue
        seen[module] = always
        parts = module.split(".")
        # importing a.b.c runs a.b's __init__ (the package root's own is trimmed in the
        # replica, and never followed)
        todo += [(".".join(parts[:i]), always) for i in range(2, len(parts))]
        package = module if path.endswith("/__init__.py") else module.rpartition(".")[0]
        if module not in trees:
            paths[module] = path
            try:
                trees[module] = ast.parse(zf.read(path))
            except SyntaxError:
                trees[module] = None
        for name, members, plain in _module_imports(trees[module], package):
            reached = always and plain
            if name.partition(".")[0] == top:
                todo += [(m, reached) for m in (name, *(f"{name}.{m}" for m in members))]
            else:
                first = name.partition(".")[0]
                external[first] = external.get(first, False) or reached
    return _Reached(seen, external, paths, trees)


def _path_of(module: str, names: set[str]) -> str | None:
    base = module.replace(".", "/")
    return next((p for p in (f"{base}.py", f"{base}/__init__.py") if p in names), None)


def _module_imports(
    tree: ast.Module | None, package: str
) -> Iterable[tuple[str, tuple[str, ...], bool]]:
    """(module, names taken from it, outside any ``if``) for each import statement a module
    runs at import time: its top level and its module-level ``if``/``else`` bodies (not
    ``if TYPE_CHECKING:``, a ``try`` or a function)."""
    if tree is None:
        return
    todo: list[tuple[list[ast.stmt], bool]] = [(tree.body, True)]
    while todo:
        body, plain = todo.pop()
        for node in body:
            if isinstance(node, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    todo += [(node.body, False), (node.orelse, False)]
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    yield alias.name, (), plain
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - (node.level - 1)]
                    name = ".".join([*parts, *([node.module] if node.module else [])])
                else:
                    name = node.module or ""
                yield name, tuple(a.name for a in node.names if a.name != "*"), plain
