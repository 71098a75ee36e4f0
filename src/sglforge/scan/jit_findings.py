"""``cuda-only-jit`` findings: the preprocessor's active CUDA-only includes (``scan.jit``), a
fail where the launch makes sglang compile the source (``scan.reach``), a warning elsewhere."""

from __future__ import annotations

from pathlib import Path

from sglforge.construct.built import Construction
from sglforge.scan.findings import FAIL, WARN, Finding
from sglforge.scan.jit import CudaInclude, cuda_includes, jit_trees
from sglforge.scan.reach import Loader, StepGate, kernel_loaders, step_gates

KIND = "cuda-only-jit"
HINT = (
    "guard it for ROCm (#ifndef USE_ROCM ... #else <hip/...> #endif) in a queue patch, "
    "or keep the launch off this kernel"
)


def _reached(gates: list[StepGate], built: Construction) -> dict[str, StepGate]:
    """Sources the launch makes sglang compile, with the gate that says so."""
    steps = built.launch.get("speculative_num_steps")
    if not built.launch.get("speculative_algorithm") or not isinstance(steps, int):
        return {}
    out: dict[str, StepGate] = {}
    for g in gates:
        if g.backend == "dsa" and built.dsa is False:
            continue
        if g.backend is None or steps < g.min_steps:
            continue
        for unit in g.units:
            out.setdefault(unit, g)
    return out


def findings(tree: Path, built: Construction) -> list[Finding]:
    """Every active CUDA-only include of the release's JIT kernel sources, one finding per
    directive (the sources reaching it merged)."""
    jits = jit_trees(tree)
    loaders = kernel_loaders(tree, jits)
    loaded: dict[str, list[Loader]] = {}
    for ld in loaders:
        loaded.setdefault(ld.unit, []).append(ld)
    reached = _reached(step_gates(tree, loaders), built)
    seen: dict[tuple[str, int, str], list[CudaInclude]] = {}
    for jt in jits:
        for unit in jt.sources(tree):
            if not unit.startswith(f"{jt.rel}/csrc/"):
                continue  # headers under include/ are judged where a kernel includes them
            found, _errors = cuda_includes(tree, jt, unit)
            for inc in found:
                seen.setdefault((inc.file, inc.line, inc.header), []).append(inc)
    out = []
    for (file, line, header), incs in sorted(seen.items()):
        units = sorted({i.unit for i in incs})
        gate = next((reached[u] for u in units if u in reached), None)
        unit = next((u for u in units if u in reached), units[0])
        loads = loaded.get(unit, [])
        via = (
            f"loaded by {loads[0].file}:{loads[0].line}"
            if loads
            else "no literal load_jit names it"
        )
        more = f" (+{len(units) - 1} more sources)" if len(units) > 1 else ""
        if gate is not None:
            detail = (
                f"#include <{header}> is active when built for ROCm; {unit}{more} is compiled "
                f"at run time with --speculative-num-steps >= {gate.min_steps} "
                f"({gate.cite()}), {via}"
            )
            out.append(Finding(KIND, FAIL, file, line, unit, detail, HINT))
        else:
            detail = (
                f"#include <{header}> is active when built for ROCm; reached from {unit}{more}, "
                f"{via}; this launch does not make sglforge see it compiled"
            )
            out.append(Finding(KIND, WARN, file, line, unit, detail, HINT))
    return out
