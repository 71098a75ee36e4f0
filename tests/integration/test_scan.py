"""``sglforge scan`` on real sglang release trees (PyPI wheels), with and without the queue.

The done-when of issue 24: at v0.5.14 without the queue, GLM-5.2's config (exact layer-78
excludes) and the README launch show both case-study blockers (the unguarded
``<cuda_runtime.h>`` of the fused metadata kernel, reached with --speculative-num-steps >= 4,
and the layer-78 excludes sglang never matches); with the queue neither; at v0.5.16 without
the queue neither; a DeepSeek V3 config whose MTP layer is excluded whole reports no exclude
finding. Two more tests keep the kernel scan's inputs honest against upstream's code: the
ROCm compile flags (sglang's own ``_get_default_target_flags``, run) and the draft-depth gate
(sglang's own ``DeepseekSparseAttnMultiStepBackend.init_forward_metadata_out_graph``, run:
which sources it asks ``load_jit`` to compile at each depth).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from sglforge import construct
from sglforge.construct.built import Construction
from sglforge.scan import CACHE_HIT, jit, scan_tree
from sglforge.scan.findings import FAIL, Finding
from sglforge.scan.jit_findings import findings as jit_findings
from sglforge.scan.quant import findings as quant_findings
from sglforge.scan.reach import kernel_loaders, step_gates
from sglforge.targets import load_targets

pytestmark = pytest.mark.pypi

REPO = Path(__file__).resolve().parents[2]
MI355X = load_targets(REPO).resolve("mi355x").device
README_LAUNCH = [
    "--model-path", "/models/GLM-5.2-MXFP4", "--tp", "8", "--trust-remote-code",
    "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "5",
    "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "6",
    "--kv-cache-dtype", "fp8_e4m3", "--enable-aiter-allreduce-fusion",
]  # fmt: skip
FUSED_METADATA = "csrc/elementwise/fused_metadata_copy.cuh"
LAYER78 = [f"model.layers.78.mlp.shared_experts.{p}" for p in ("gate_proj", "up_proj", "down_proj")]


def glm_config() -> dict[str, Any]:
    from test_backport_0002 import GLM, quark, shared_expert

    return dict(GLM, quantization_config=quark(shared_expert(78)))


def deepseek_config(exclude: list[str]) -> dict[str, Any]:
    from test_backport_0002 import DEEPSEEK, quark

    return dict(DEEPSEEK, quantization_config=quark(exclude))


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from sglang_release import release_tree

    base = tmp_path_factory.mktemp("scan")
    return {
        "0.5.14": release_tree(base / "stock", "0.5.14", patched=False),
        "0.5.14+queue": release_tree(base / "patched", "0.5.14", patched=True),
        "0.5.16": release_tree(base / "v0.5.16", "0.5.16", patched=False),
        "0.5.23": release_tree(base / "v0.5.23", "0.5.23", patched=False),
    }


@pytest.fixture(scope="module")
def glm_readme(trees: dict[str, Path]) -> dict[str, list[Finding]]:
    return {
        name: scan_tree(trees[name], glm_config(), README_LAUNCH, MI355X)
        for name in ("0.5.14", "0.5.14+queue", "0.5.16")
    }


def build(tree: Path, config: dict[str, Any], launch: list[str]) -> Construction:
    """One construction of ``config`` on the release checkout ``tree``, on an MI355X."""
    return construct.build(tree / "python", config, launch, MI355X)


def fails(found: list[Finding]) -> list[tuple[str, str]]:
    return [
        (f.kind, f.entry if f.line is None else f"{f.file}:{f.line}")
        for f in found
        if f.severity == FAIL
    ]


def test_stock_0_5_14_shows_both_case_study_blockers(glm_readme: dict[str, list[Finding]]) -> None:
    found = glm_readme["0.5.14"]
    kernel = [f for f in found if f.kind == "cuda-only-jit" and f.severity == FAIL]
    assert [(f.file, f.line) for f in kernel] == [
        (f"python/sglang/jit_kernel/{FUSED_METADATA}", 38)
    ], fails(found)
    assert "--speculative-num-steps >= 4" in kernel[0].detail
    assert "python/sglang/srt/layers/attention/dsa_backend.py:2604" in kernel[0].detail
    unmatched = [
        f.entry for f in found if f.kind == "quant-exclude-unmatched" and f.severity == FAIL
    ]
    assert unmatched == LAYER78, fails(found)
    fused = [f.entry for f in found if f.kind == "fused-shared-expert-dtype"]
    assert fused == ["model.decoder.mlp.experts"], fails(found)


def test_the_queue_clears_both(glm_readme: dict[str, list[Finding]]) -> None:
    found = glm_readme["0.5.14+queue"]
    assert fails(found) == []
    assert not [f for f in found if f.file.endswith(FUSED_METADATA)]
    assert not [f for f in found if f.kind != "cuda-only-jit"], "exclude findings left"


def test_0_5_16_without_the_queue_has_neither(glm_readme: dict[str, list[Finding]]) -> None:
    assert fails(glm_readme["0.5.16"]) == []


def test_without_the_mtp_fusion_the_quantized_shared_expert_is_named(
    trees: dict[str, Path],
) -> None:
    built = build(
        trees["0.5.14"], glm_config(), [*README_LAUNCH, "--disable-shared-experts-fusion"]
    )
    found = quant_findings(built, glm_config(), "config.json")
    wrong = sorted(
        f.entry for f in found if f.severity == FAIL and f.entry.startswith("model.decoder")
    )
    assert wrong == [
        "model.decoder.mlp.shared_experts.down_proj",
        "model.decoder.mlp.shared_experts.gate_up_proj",
    ], [(f.entry, f.detail) for f in found]
    assert not [f for f in found if f.kind == "fused-shared-expert-dtype"]


def test_a_shallow_draft_only_warns(trees: dict[str, Path]) -> None:
    # Three steps: sglang does not compile the multi-backend kernel (see the gate test).
    built = Construction(
        MI355X, {"speculative_algorithm": "EAGLE", "speculative_num_steps": 3}, dsa=True
    )
    found = [f for f in jit_findings(trees["0.5.14"], built) if f.file.endswith(FUSED_METADATA)]
    assert [(f.line, f.severity) for f in found] == [(38, "warn")]


@pytest.mark.parametrize("queue", ["0.5.14", "0.5.14+queue"])
def test_deepseek_v3_reports_no_exclude_finding(trees: dict[str, Path], queue: str) -> None:
    for exclude, launch in (
        (["model.layers.61"], README_LAUNCH),
        ([f"model.layers.61.mlp.shared_experts.{p}" for p in ("gate_proj", "up_proj", "down_proj")],
         [*README_LAUNCH, "--disable-shared-experts-fusion"]),
    ):  # fmt: skip
        config = deepseek_config(exclude)
        found = quant_findings(build(trees[queue], config, launch), config, "config.json")
        assert found == [], (exclude, [(f.kind, f.entry, f.detail) for f in found])


# --- The kernel scan's inputs, checked against upstream's code run on each release. --------

CHILD = textwrap.dedent(
    """
    import importlib, json, logging, sys
    from sglforge.construct import shims
    what = json.loads(sys.argv[2])
    shims.install(what["device"])
    sys.path.insert(0, sys.argv[1])
    logging.disable(logging.CRITICAL)
    if what["ask"] == "flags":
        mod = importlib.import_module(what["module"])
        fn = getattr(mod, "_get_default_target_flags", None) or mod.get_default_target_flags
        print(json.dumps(fn()))
        raise SystemExit
    # The draft-depth gate: run the multi-step backend's metadata step at a depth and record
    # what it asks load_jit to compile (load_jit then fails, as on ROCm without the guard).
    compiled = []
    kmod = importlib.import_module(what["kernel"])
    def load_jit(*args, cuda_files=None, cpp_files=None, **kw):
        compiled.extend([*(cuda_files or []), *(cpp_files or [])])
        raise RuntimeError("compile recorded")
    kmod.load_jit = load_jit
    bmod = importlib.import_module(what["backend"])
    cls = getattr(bmod, "DeepseekSparseAttnMultiStepBackend")
    backend = object.__new__(cls)
    backend.topk = 1
    backend.speculative_num_steps = what["steps"]
    backend.attn_backends = [shims._Any() for _ in range(what["steps"] - 1)]
    batch = shims._Any()
    batch.batch_size = 1
    backend.init_forward_metadata_out_graph(batch)
    print(json.dumps(compiled))
    """
)


def run_child(tree: Path, what: dict[str, Any], cwd: Path) -> Any:
    what = dict(what, device=construct.device_json(MI355X))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(REPO / "src")
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tree / "python"), json.dumps(what)],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "release, module",
    [
        ("0.5.14", "sglang.jit_kernel.utils"),
        ("0.5.16", "sglang.jit_kernel.utils.arch"),
        ("0.5.23", "sglang.kernels.jit.utils.arch"),
    ],
)
def test_rocm_macros_are_sglangs_own_flags(
    trees: dict[str, Path], tmp_path: Path, release: str, module: str
) -> None:
    flags = run_child(trees[release], {"ask": "flags", "module": module}, tmp_path)
    defined = {}
    for flag in flags:
        if flag.startswith("-D"):
            name, _, value = flag[2:].partition("=")
            defined[name] = value or "1"
    assert defined == jit.SGLANG_ROCM_FLAGS


@pytest.mark.parametrize("release", ["0.5.14", "0.5.16"])
def test_the_draft_depth_gate_is_what_sglang_runs(
    trees: dict[str, Path], tmp_path: Path, release: str
) -> None:
    tree = trees[release]
    gates = step_gates(tree, kernel_loaders(tree, jit.jit_trees(tree)))
    assert [(g.file, g.min_steps, g.backend) for g in gates] == [
        ("python/sglang/srt/layers/attention/dsa_backend.py", 4, "dsa")
    ]
    gate = gates[0]
    units = [u.removeprefix("python/sglang/jit_kernel/csrc/") for u in gate.units]
    backend = gate.file.removeprefix("python/").removesuffix(".py").replace("/", ".")
    for steps in (2, 3, 4, 5, 6):
        compiled = run_child(
            tree,
            {"ask": "gate", "kernel": gate.module, "backend": backend, "steps": steps},
            tmp_path,
        )
        assert compiled == (units if steps >= gate.min_steps else []), steps


# --- The command, on a project holding this repository's queue. ----------------------------


def test_scan_command_json(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(REPO / "patches", project / "patches")
    model = tmp_path / "GLM-5.2-MXFP4"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(glm_config()))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(REPO / "src")

    def scan(*extra: str) -> tuple[int, dict[str, Any]]:
        proc = subprocess.run(
            [sys.executable, "-m", "sglforge", "--root", str(project), "scan", "--model",
             str(model), "--scenario", str(REPO / "smoke" / "glm5-mxfp4-mtp-mi355x.toml"),
             "--upstream", "pypi:sglang==0.5.14", "--json", *extra],
            capture_output=True, text=True, env=env, timeout=900,
        )  # fmt: skip
        assert proc.stdout, proc.stderr[-2000:]
        return proc.returncode, json.loads(proc.stdout)

    code, doc = scan("--no-queue")
    assert code == 1 and doc["schema"] == 1 and doc["ok"] is False
    assert doc["queue"] == []
    keys = {"kind", "severity", "file", "line", "entry", "detail"}
    assert all(keys <= set(f) for f in doc["findings"])
    failing = {(f["kind"], f["line"] is None) for f in doc["findings"] if f["severity"] == "fail"}
    assert failing == {
        ("cuda-only-jit", False),
        ("quant-exclude-unmatched", True),
        ("fused-shared-expert-dtype", True),
    }
    code, doc = scan()
    assert (code, doc["ok"]) == (0, True), [f for f in doc["findings"] if f["severity"] == "fail"]
    assert doc["queue"] == [
        "0001-jit_kernel-guard-cuda_runtime-include-for-ROCm.patch",
        "0002-glm_moe_dsa-MTP-draft-class-for-Quark-excludes.patch",
    ]
    # the same scan again is served from the scan cache: the same report, no entry rewritten
    reports = sorted((Path(os.environ["SGLFORGE_CACHE"]) / "scan" / "reports").rglob("*.json"))
    assert len(reports) == 2
    before = [r.stat().st_mtime_ns for r in reports]
    assert scan() == (code, doc)
    assert [r.stat().st_mtime_ns for r in reports] == before


# --- The gate publish runs before a build. --------------------------------------------------


def test_gate_blocks_unless_a_patch_names_the_finding(tmp_path: Path) -> None:
    from sglforge.candidate import Candidate
    from sglforge.errors import ScanBlocked
    from sglforge.gates import scan as scan_gate
    from sglforge.project import Project

    project = tmp_path / "project"
    shutil.copytree(REPO / "patches", project / "patches")
    model = tmp_path / "GLM-5.2-MXFP4"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(glm_config()))
    scenario = REPO / "smoke" / "glm5-mxfp4-mtp-mi355x.toml"
    said: list[str] = []

    def gate(scenario: Path, upstream: str | None = None) -> Any:
        # each call opens the project anew (the queue changes between them)
        opened = Project(project, upstream)
        bt = opened.target("mi355x")
        with Candidate(opened, bt, opened.scenario_file(scenario), model, say=said.append) as c:
            return scan_gate.check(c)

    # a CPU scenario is not scanned (the scan models a ROCm build)
    skipped = gate(REPO / "smoke" / "standin-cpu.toml")
    assert not skipped.ran and "not a ROCm scenario" in skipped.why
    first = gate(scenario, "pypi:sglang==0.5.14")
    assert first.ok  # the queue fixes both
    assert CACHE_HIT not in said
    # The same gate again (publish after `sglforge scan`, or a second publish) is served
    # from the scan cache, says so, and the verdict is the same; a changed queue below is a
    # miss (each blocked verdict is computed anew).
    again = gate(scenario, "pypi:sglang==0.5.14")
    assert again.ok and said.count(CACHE_HIT) == 1
    assert again.record.report.findings == first.record.report.findings
    # The key is of the patch bytes the queue read, as the scan applies them: a file changed
    # on disk after the project read its queue does not change what this run scans (5.2, 4).
    opened = Project(project, "pypi:sglang==0.5.14")
    assert opened.queue.patches
    p1 = next((project / "patches").glob("0001-*.patch"))
    as_read = p1.read_bytes()
    p1.write_bytes(as_read + b"\n")
    with Candidate(opened, opened.target("mi355x"), opened.scenario_file(scenario), model,
                   say=said.append) as c:  # fmt: skip
        assert scan_gate.check(c).ok and said.count(CACHE_HIT) == 2
    p1.write_bytes(as_read)
    # Without 0001 the fused metadata kernel blocks ...
    series = project / "patches" / "series"
    series.write_text(
        series.read_text().replace(
            "0001-jit_kernel-guard-cuda_runtime-include-for-ROCm.patch\n", ""
        )
    )
    blocked = gate(scenario, "pypi:sglang==0.5.14")
    assert blocked.ok is False and isinstance(blocked.raised, ScanBlocked)
    assert re.search("cuda-only-jit .*fused_metadata_copy.cuh:38", blocked.error), blocked.error
    # ... and a Fixes-Scan: trailer on a patch that does not touch that file waives nothing
    # (issue 31, E4: only a patch touching the named file may; tests/unit/test_scan_waivers).
    p2 = next((project / "patches").glob("0002-*.patch"))
    text = p2.read_text()
    marker = "Upstream-Status: Backport [0.5.16]\n"
    waiver = f"Fixes-Scan: cuda-only-jit python/sglang/jit_kernel/{FUSED_METADATA}\n"
    p2.write_text(text.replace(marker, marker + waiver, 1))
    still = gate(scenario, "pypi:sglang==0.5.14")
    assert still.ok is False and isinstance(still.raised, ScanBlocked)
    assert re.search("cuda-only-jit .*fused_metadata_copy.cuh:38", still.error), still.error
    # the refused trailer is said, with its patch and why, and nothing is waived
    assert "1 Fixes-Scan trailer(s) refused: cuda-only-jit python/sglang/jit_kernel/" in (
        still.detail
    )
    assert f"({p2.name}: the patch does not touch python/sglang/jit_kernel/" in still.detail
    assert still.record.waived == () and [r.patch for r in still.record.refused] == [p2.name]


def test_a_regex_mtp_exclude_is_not_honoured_even_at_0_5_16(trees: dict[str, Path]) -> None:
    """A finding beyond the case study (docs/scan.md): both the queue and 0.5.16 build the
    draft's projections MXFP4 under a regex exclude of the whole MTP layer; a glob-looking
    literal names nothing and only warns."""
    from test_backport_0002 import GLM_FORMS

    for name in ("0.5.14+queue", "0.5.16"):
        config = dict(glm_config(), quantization_config=GLM_FORMS["D-regex-whole-layer"])
        found = quant_findings(build(trees[name], config, README_LAUNCH), config, "c")
        assert (FAIL, "re:model\\.layers\\.78\\..*") in {(f.severity, f.entry) for f in found}
        assert "model.decoder.self_attn.o_proj" in {f.entry for f in found if f.severity == FAIL}
        config = dict(glm_config(), quantization_config=GLM_FORMS["E-glob-literal"])
        found = quant_findings(build(trees[name], config, README_LAUNCH), config, "c")
        assert [(f.severity, f.entry) for f in found] == [("warn", "model.layers.78.*")]


def test_a_shared_expert_of_another_scheme_fused_is_named(trees: dict[str, Path]) -> None:
    """fused-shared-expert-dtype's second instance: not excluded, but exported with another
    scheme (FP8) than the MXFP4 routed experts it is fused with; every fused layer is named."""
    from test_backport_0002 import FP8, GLM, quark

    config = dict(GLM, quantization_config=quark([], {"model.layers.*.mlp.shared_experts.*": FP8}))
    built = build(trees["0.5.14+queue"], config, README_LAUNCH)
    found = quant_findings(built, config, "c")
    fused = [f for f in found if f.kind == "fused-shared-expert-dtype"]
    fused_layers = [
        n for n, m in built.main.modules.items() if m["fused_shared"] and m["quantized"]
    ]
    assert fused_layers and sorted(f.entry for f in fused) == sorted(fused_layers)
    assert all("quantizes it differently" in f.detail and "fp8_e4m3" in f.detail for f in fused)
