"""``cuda-only-jit`` findings: the preprocessor's active CUDA-only includes (``scan.jit``), a
fail where the launch makes sglang compile the source (``scan.reach``), a warning elsewhere.
Each unit's preprocessing is served from the scan cache (``scan.cache``) while the files it
read are unchanged."""

from __future__ import annotations

from pathlib import Path

from sglforge.construct.built import Construction
from sglforge.progress import Progress, resolve
from sglforge.scan.findings import FAIL, WARN, Finding
from sglforge.scan.jit import DEFAULT_PASSES, CudaInclude, Files, JitTree, UnitScan, jit_trees
from sglforge.scan.jit import unit_scan as preprocess
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


def unit_scan(tree: Path, jit: JitTree, unit: str, files: Files) -> tuple[UnitScan, bool]:
    """``scan.jit.unit_scan`` of ``unit`` with the default passes, from the scan cache when
    every file it read is unchanged (then True), else computed and stored."""
    from sglforge.scan import cache

    tree = tree.resolve()
    blob = files.blob(str(tree / unit))
    key = cache.unit_key(jit, unit, blob or "", DEFAULT_PASSES)
    got = cache.load_unit(tree, key, files)
    if got is not None:
        return got, True
    got = preprocess(tree, jit, unit, DEFAULT_PASSES, files)
    cache.store_unit(key, got)
    return got, False


Includes = dict[tuple[str, int, str], list[CudaInclude]]


def includes(tree: Path, progress: Progress | None = None) -> Includes:
    """The active CUDA-only includes of every JIT kernel source, by directive (file, line,
    header): what ``findings`` judges; it needs no construction."""
    say = resolve(progress)
    seen: Includes = {}
    # headers under include/ are judged where a kernel includes them
    units = [
        (jt, u)
        for jt in jit_trees(tree)
        for u in jt.sources(tree)
        if u.startswith(f"{jt.rel}/csrc/")
    ]
    files = Files()
    cached = 0
    with say.task("scan: JIT kernel sources", total=len(units), unit="files") as task:
        for jt, unit in units:
            got, hit = unit_scan(tree, jt, unit, files)
            cached += hit
            for inc in got.found:
                seen.setdefault((inc.file, inc.line, inc.header), []).append(inc)
            task.advance(note=unit.rsplit("/", 1)[-1])
    say.detail(f"scan: {cached} of {len(units)} JIT kernel sources from the scan cache")
    return seen


def findings(tree: Path, built: Construction, seen: Includes | None = None) -> list[Finding]:
    """Every active CUDA-only include of the release's JIT kernel sources, one finding per
    directive (the sources reaching it merged); ``seen``: ``includes(tree)`` if computed."""
    jits = jit_trees(tree)
    loaders = kernel_loaders(tree, jits)
    loaded: dict[str, list[Loader]] = {}
    for ld in loaders:
        loaded.setdefault(ld.unit, []).append(ld)
    reached = _reached(step_gates(tree, loaders), built)
    if seen is None:
        seen = includes(tree)
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
