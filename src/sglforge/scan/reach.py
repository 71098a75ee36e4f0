"""Which JIT kernel sources a launch makes sglang compile, read from the tree's own Python.

Two facts, both taken from upstream's code with ``ast`` (file and line kept for the finding):

- **loaders**: every ``load_jit(..., cuda_files=[...], cpp_files=[...])`` call names the
  sources (relative to the JIT tree's ``csrc/``) its Python module compiles;
- **step gates**: an ``if`` whose test compares ``<obj>.speculative_num_steps`` with a
  constant (``> N`` or ``>= N``) and whose body imports from a kernel module makes that
  module's sources reachable when the launch's draft depth passes the test. At v0.5.14 this is
  python/sglang/srt/layers/attention/dsa_backend.py:2604 (``if self.speculative_num_steps >
  3:`` then ``from sglang.jit_kernel.fused_metadata_copy import
  fused_metadata_copy_multi_cuda``), the fused multi-step metadata kernel the case study hit.

A gate lives in an attention backend file; it applies only when the launch uses that backend.
``BACKEND_OF_FILE`` maps the backend files whose selection sglforge can decide (the DSA
backend: sglang picks it for ``is_deepseek_dsa`` models, python/sglang/srt/server_args.py
:3528-3544 at v0.5.14; the construction child runs that function on the model's config).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from sglforge.scan.jit import JitTree

PY_ROOT = "python/sglang"
# Backend file -> the launch fact that says the backend is used (see the module docstring).
BACKEND_OF_FILE = {
    "python/sglang/srt/layers/attention/dsa_backend.py": "dsa",
    "python/sglang/srt/layers/attention/nsa_backend.py": "dsa",
}


@dataclass(frozen=True)
class Loader:
    """A ``load_jit`` call: the Python file and line, and one source it compiles."""

    file: str
    line: int
    unit: str  # relative to the tree


@dataclass(frozen=True)
class StepGate:
    """A draft-depth test guarding the import of a kernel module."""

    file: str
    line: int
    min_steps: int  # reachable when --speculative-num-steps >= min_steps
    module: str  # the kernel module imported under the test
    units: tuple[str, ...]  # what that module compiles (relative to the tree)
    backend: str | None  # BACKEND_OF_FILE[file], when known

    def cite(self) -> str:
        return f"{self.file}:{self.line}"


def _call_name(node: ast.Call) -> str:
    f = node.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    return ""


def _strings(node: ast.expr | None) -> list[str]:
    if isinstance(node, (ast.List, ast.Tuple)):
        return [
            e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
        ]
    return []


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8", errors="replace"), str(path))
    except SyntaxError:
        return None


def _loaders_in(tree: Path, rel: str, jits: list[JitTree]) -> list[Loader]:
    mod = _parse(tree / rel)
    if mod is None:
        return []
    out = []
    for node in ast.walk(mod):
        if not isinstance(node, ast.Call) or _call_name(node) != "load_jit":
            continue
        for kw in node.keywords:
            if kw.arg not in ("cuda_files", "cpp_files"):
                continue
            for name in _strings(kw.value):
                for jt in jits:
                    unit = f"{jt.rel}/csrc/{name}"
                    if (tree / unit).is_file():
                        out.append(Loader(rel, node.lineno, unit))
                        break
    return out


def kernel_loaders(tree: Path, jits: list[JitTree]) -> list[Loader]:
    """Every ``load_jit`` call of the release with literal source names, by file and line."""
    out: list[Loader] = []
    for path in sorted((tree / PY_ROOT).rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "load_jit" in text and ("cuda_files" in text or "cpp_files" in text):
            out.extend(_loaders_in(tree, path.relative_to(tree).as_posix(), jits))
    return out


def _min_steps(test: ast.expr) -> int | None:
    """``x.speculative_num_steps > N`` (or ``>= N``), alone or in an ``and``: the least depth."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        found = [m for v in test.values if (m := _min_steps(v)) is not None]
        return max(found) if found else None
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if not (
        isinstance(left, ast.Attribute)
        and left.attr == "speculative_num_steps"
        and isinstance(right, ast.Constant)
        and isinstance(right.value, int)
    ):
        return None
    if isinstance(op, ast.Gt):
        return right.value + 1
    if isinstance(op, ast.GtE):
        return right.value
    return None


def _module_file(tree: Path, module: str) -> str | None:
    base = Path(*module.split("."))
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        rel = f"python/{cand.as_posix()}"
        if (tree / rel).is_file():
            return rel
    return None


_DEPTH_TEST = re.compile(r"speculative_num_steps(?:\s|\\\n)*>")


def step_gates(tree: Path, loaders: list[Loader]) -> list[StepGate]:
    """Every draft-depth test in srt/ that guards the import of a kernel module."""
    by_file: dict[str, list[str]] = {}
    for ld in loaders:
        by_file.setdefault(ld.file, [])
        if ld.unit not in by_file[ld.file]:
            by_file[ld.file].append(ld.unit)
    out = []
    for path in sorted((tree / PY_ROOT / "srt").rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        # _min_steps reads only ``X.speculative_num_steps >[=] N``: a file without that text
        # has no gate (parsing sglang's 50 files naming the attribute costs seconds)
        if "import" not in text or not _DEPTH_TEST.search(text):
            continue
        mod = _parse(path)
        if mod is None:
            continue
        rel = path.relative_to(tree).as_posix()
        for node in ast.walk(mod):
            if not isinstance(node, ast.If):
                continue
            least = _min_steps(node.test)
            if least is None:
                continue
            for inner in (n for stmt in node.body for n in ast.walk(stmt)):
                if not isinstance(inner, ast.ImportFrom) or not inner.module:
                    continue
                kernel = _module_file(tree, inner.module)
                if kernel and kernel in by_file:
                    out.append(
                        StepGate(
                            rel,
                            node.lineno,
                            least,
                            inner.module,
                            tuple(by_file[kernel]),
                            BACKEND_OF_FILE.get(rel),
                        )
                    )
    return out
