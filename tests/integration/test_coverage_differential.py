"""`sglforge configs coverage` answers what real sglang 0.5.14 (with the queue) and 0.5.16 build.

Differential test over released code (issue 21). For GLM-5.2 (TP8 as the README launches it,
TP4 x DP2, shared-experts fusion on and off) and DeepSeek V3 (TP8), the command's ``--json``
lookups are compared with the fused-MoE layers each release's own construction holds
(``sglforge.construct``, called here directly with the scenario's flags): every layer appears
in exactly one shape, whose expert count, top-k, model_dim and per-rank inter_dim are the
layer's ``num_local_experts``, ``top_k``, ``hidden_size`` and
``intermediate_size_per_partition``. Then the facts the project's notes state are pinned: on
ROCm the main model fuses the shared expert (257/9) unless fusion is disabled; with the queue's
0002 (and in 0.5.16) GLM-5.2's MTP draft does not (256/8), DeepSeek V3's does; inter_dim is
moe_intermediate_size / TP.

The base's tables are ROCm/aiter's fused-MoE tables at 9127c94a18e4, read from a clone when
present, else from the copies shipped under tests/data/aiter with their blob ids: no GLM-5 fp4
row, so every hit is the queue's item. The models are the config.json
folders tests/standin/model-mxfp4 (GLM-5.2) and model-deepseek-v3-mxfp4 (TEST DOUBLES: no weights).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import aiter_data
from sglforge import construct, coverage
from sglforge.scenario.file import load_scenario
from sglforge.targets import load_targets

pytestmark = pytest.mark.pypi

REPO = Path(__file__).resolve().parents[2]
GLM = REPO / "tests" / "standin" / "model-mxfp4"
DEEPSEEK = REPO / "tests" / "standin" / "model-deepseek-v3-mxfp4"
TP8 = REPO / "smoke" / "glm5-mxfp4-mtp-mi355x.toml"
TP4DP2 = REPO / "smoke" / "glm5-mxfp4-mtp-tp4dp2-mi355x.toml"
AITER_COMMIT = "9127c94a18e4398e1eba91f6639e910f0994ad02"
ITEM = "patches/configs/glm52-mxfp4-moe-gfx950.csv"


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from sglang_release import release_tree

    base = tmp_path_factory.mktemp("coverage")
    return {
        "0.5.14+queue": release_tree(base / "patched", "0.5.14", patched=True) / "python",
        "0.5.16": release_tree(base / "v0.5.16", "0.5.16", patched=False) / "python",
    }


@pytest.fixture(scope="module")
def aiter_configs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """AITER_COMMIT's fused-MoE tables (tuned_fmoe.csv and model_configs/*fmoe*.csv), verbatim:
    from a clone when present, else the copies shipped with their blob ids (tests/aiter_data.py).
    """
    out = tmp_path_factory.mktemp("aiter") / "configs"
    (out / "model_configs").mkdir(parents=True)
    names = aiter_data.shipped_under(AITER_COMMIT, "aiter/configs")
    assert "aiter/configs/tuned_fmoe.csv" in names
    for name in names:
        dest = out / name.removeprefix("aiter/configs/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(aiter_data.blob(AITER_COMMIT, name))
    # Its lookup code next to them, as in a checkout: coverage reads the rule from it.
    (out.parent / "fused_moe.py").write_bytes(aiter_data.blob(AITER_COMMIT, "aiter/fused_moe.py"))
    return out


def no_fusion(tmp: Path) -> Path:
    text = TP8.read_text().replace(
        '    "--enable-aiter-allreduce-fusion",',
        '    "--enable-aiter-allreduce-fusion",\n    "--disable-shared-experts-fusion",',
    )
    assert "--disable-shared-experts-fusion" in text
    path = tmp / "no-fusion.toml"
    path.write_text(text)
    return path


def run_coverage(tree: Path, model: Path, scenario: Path, configs: Path) -> dict[str, Any]:
    """The command itself, as a user runs it (a subprocess on this checkout's code)."""
    proc = subprocess.run(
        [sys.executable, "-m", "sglforge", "--root", str(REPO), "configs", "coverage"]
        + ["--model", str(model), "--scenario", str(scenario)]
        + ["--aiter-configs", str(configs), "--aiter-commit", AITER_COMMIT]
        + ["--sglang", str(tree), "--json"],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO / "src")),
        timeout=900,
    )
    assert proc.returncode in (0, 1), proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    assert doc["schema"] == 1 and doc["ok"] == (proc.returncode == 0)
    # The rule applied is the one read from that commit's fused_moe.py, and the report says so.
    assert doc["aiter"]["commit"] == AITER_COMMIT and doc["aiter"]["key"][0] == "gfx"
    assert "rule read from" in doc["aiter"]["source"]
    return doc


def built_by_release(tree: Path, model: Path, scenario: Path) -> dict[str, construct.Model]:
    config = json.loads((model / "config.json").read_text())
    argv = coverage.launch_args(load_scenario(scenario).args, model)
    request = construct.Request("launch", config, argv, models=("main", "draft"))
    mi355x = load_targets(REPO).resolve("mi355x").device
    return dict(construct.build_many(tree, [request], mi355x)["launch"].models)


def shapes_of(doc: dict[str, Any]) -> dict[str, set[tuple[int, int, int, int]]]:
    out: dict[str, set[tuple[int, int, int, int]]] = {}
    for x in doc["lookups"]:
        out.setdefault(x["model"], set()).add(
            (x["model_dim"], x["inter_dim"], x["expert"], x["topk"])
        )
    return out


def assert_same_as_built(doc: dict[str, Any], built: dict[str, construct.Model]) -> None:
    for model, b in built.items():
        want: dict[str, tuple[int, int, int, int]] = {
            m["module"]: (
                m["hidden_size"],
                m["intermediate_size_per_partition"],
                m["num_local_experts"],
                m["top_k"],
            )
            for m in b.moe
        }
        got: dict[str, tuple[int, int, int, int]] = {}
        for x in doc["lookups"]:
            if x["model"] != model:
                continue
            for layer in x["layers"]:
                shape = (x["model_dim"], x["inter_dim"], x["expert"], x["topk"])
                assert got.setdefault(layer, shape) == shape, f"{layer}: two shapes"
        assert got == want, f"{model}: the command's shapes are not what sglang built"


CASES = {
    # case: (model, scenario, {model: (model_dim, inter_dim, expert, topk)} per release)
    "glm52-tp8": (GLM, TP8, {"main": (6144, 256, 257, 9), "draft": (6144, 256, 256, 8)}),
    "glm52-tp4dp2": (GLM, TP4DP2, {"main": (6144, 512, 257, 9), "draft": (6144, 512, 256, 8)}),
    "glm52-tp8-no-fusion": (
        GLM,
        None,
        {"main": (6144, 256, 256, 8), "draft": (6144, 256, 256, 8)},
    ),
    # DeepSeek V3's draft fuses its shared expert in both releases (0002 touches GLM's only).
    "deepseek-v3-tp8": (
        DEEPSEEK,
        TP8,
        {"main": (7168, 256, 257, 9), "draft": (7168, 256, 257, 9)},
    ),
}


@pytest.mark.parametrize("release", ["0.5.14+queue", "0.5.16"])
@pytest.mark.parametrize("case", CASES)
def test_coverage_answers_what_the_release_builds(
    trees: dict[str, Path], aiter_configs: Path, tmp_path: Path, release: str, case: str
) -> None:
    model, scenario, expected = CASES[case]
    scenario = scenario or no_fusion(tmp_path)
    doc = run_coverage(trees[release], model, scenario, aiter_configs)
    assert_same_as_built(doc, built_by_release(trees[release], model, scenario))
    assert shapes_of(doc) == {m: {s} for m, s in expected.items()}, repr(shapes_of(doc))
    main = [x for x in doc["lookups"] if x["model"] == "main"]
    assert sum(len(x["layers"]) for x in main) // len({tuple(x["tokens"]) for x in main}) in (
        75,
        58,
    )  # GLM-5.2's 78 layers less 3 dense; DeepSeek V3's 61 less 3
    for x in doc["lookups"]:
        assert x["q_type"] == "QuantType.per_1x32" and x["q_dtype_w"] == "torch.float4_e2m1fn_x2"
        assert x["status"] in ("tuned-item", "miss", "tuned-base")
        assert x["status"] != "tuned-base" or "glm" not in (x["file"] or "")
    if model == GLM:
        # The queue's item (ROCm/aiter#4344's rows) answers every GLM-5.2 lookup at TP8/TP4.
        assert doc["misses"] == 0 and doc["ok"], [
            x for x in doc["lookups"] if x["status"] == "miss"
        ]
        assert {x["file"] for x in doc["lookups"]} == {ITEM}
    elif (aiter_configs / "model_configs" / "dsv3_fp4_tuned_fmoe.csv").is_file():
        # aiter's own DeepSeek V3 fp4 table (9127c94a18e4) answers DeepSeek V3 at TP8.
        assert {(x["status"], x["file"]) for x in doc["lookups"]} == {
            ("tuned-base", "aiter/configs/model_configs/dsv3_fp4_tuned_fmoe.csv")
        }
    else:  # the empty base: nothing answers model_dim 7168 (the item is GLM-5.2's)
        assert doc["misses"] > 0 and not doc["ok"]


def test_the_item_s_absence_is_seen_as_hot_misses(
    trees: dict[str, Path], aiter_configs: Path, tmp_path: Path
) -> None:
    # Without the queue's item the 9127c94a18e4 base answers nothing for GLM-5.2's MXFP4 MoE.
    import shutil

    root = tmp_path / "project"
    for part in ("patches", "images", "smoke"):
        shutil.copytree(REPO / part, root / part)
    for f in (root / "patches" / "configs").iterdir():
        f.unlink()
    proc = subprocess.run(
        [sys.executable, "-m", "sglforge", "--root", str(root), "configs", "coverage"]
        + ["--model", str(GLM), "--scenario", str(TP8), "--aiter-configs", str(aiter_configs)]
        + ["--sglang", str(trees["0.5.14+queue"]), "--json"]
        + ["--untuned", str(tmp_path / "untuned_fmoe.csv")],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO / "src")),
        timeout=900,
    )
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert not doc["ok"] and doc["hot_misses"] > 0
    assert all(x["status"] == "miss" for x in doc["lookups"])
    # The tuner's input: aiter's untuned CSV with exactly the missing keys.
    lines = (tmp_path / "untuned_fmoe.csv").read_text().splitlines()
    assert lines[0] == coverage.UNTUNED_HEADER
    keys = {tuple(ln.split(",")[:5]) for ln in lines[1:]}
    assert len(lines) - 1 == len(keys) == doc["misses"] == 2 * 15  # main and draft, 1..16384
    tail = "ActivationType.Silu,torch.bfloat16,torch.float4_e2m1fn_x2,torch.float4_e2m1fn_x2,"
    assert lines[1] == f"1,6144,256,257,9,{tail}QuantType.per_1x32,1,0"
    header = aiter_data.blob(AITER_COMMIT, "aiter/configs/untuned_fmoe.csv")
    assert header.decode().splitlines()[0] == lines[0]


def test_the_standin_is_handed_exactly_the_command_s_shapes(
    trees: dict[str, Path], aiter_configs: Path
) -> None:
    # smoke/standin-cpu-aiter.toml hands the stand-in server its MoE shapes; they must be the
    # ones the command derives from sglang 0.5.14+queue for the launch it mirrors (TP4 x DP2).
    sys.path.insert(0, str(REPO / "tests"))
    from standin.server import MOE_LOOKUPS_ENV, handed_shapes

    doc = run_coverage(trees["0.5.14+queue"], GLM, TP4DP2, aiter_configs)
    env = load_scenario(REPO / "smoke" / "standin-cpu-aiter.toml").container.env
    handed = json.loads(env[MOE_LOOKUPS_ENV])
    assert {
        (x["model"], x["model_dim"], x["inter_dim"], x["expert"], x["topk"]) for x in handed
    } == {
        (x["model"], x["model_dim"], x["inter_dim"], x["expert"], x["topk"]) for x in doc["lookups"]
    }
    assert handed_shapes(env) == [(6144, 512, 257, 9), (6144, 512, 256, 8)]
    assert handed_shapes({}) == []  # nothing handed: the stand-in decides no shape itself


def test_the_publish_gate_fails_on_an_uncovered_hot_shape_and_passes_once_an_item_covers_it(
    trees: dict[str, Path], aiter_configs: Path, tmp_path: Path
) -> None:
    # What `publish` runs before the smoke (the coverage gate over a Candidate), on the
    # 9127c94a18e4 base's tables; the full publish (build, push) is not run here.
    import shutil

    from sglforge.candidate import Candidate, Checkout
    from sglforge.gates import coverage as coverage_gate
    from sglforge.project import Project
    from sglforge.queue.configs import base_tables_from_dir

    base = base_tables_from_dir(aiter_configs)
    root = tmp_path / "project"
    for part in ("patches", "images", "smoke"):
        shutil.copytree(REPO / part, root / part)
    scenario = root / "smoke" / "glm5-mxfp4-mtp-mi355x.toml"
    item = [root / "patches" / "configs" / f"glm52-mxfp4-moe-gfx950.{x}" for x in ("toml", "csv")]
    kept = [p.read_bytes() for p in item]
    for p in item:
        p.unlink()
    tree = trees["0.5.14+queue"]

    def check(model: Path = GLM) -> Any:
        # each check opens the project anew (the queue and the scenario change between them)
        project = Project(root)
        bt = project.target("mi355x")
        cand = Candidate(project, bt, project.scenario_file(scenario), model)
        # the facts a publish would compute, given: the patched release tree and the tables
        # the base image's probe would read
        cand.checkout = Checkout(tree.parent, "v0.5.14", "", ())
        cand.base_tables = base
        return coverage_gate.check(cand)

    result = check()
    gate = result.record
    assert result.ran and result.ok is False and gate is not None, result
    assert "main model_dim 6144 inter_dim 256 expert 257 topk 9 tokens 1,2,4" in gate.summary()
    assert "nothing was pushed" in result.error
    # The item back in the queue: every hot shape is answered, the gate passes.
    for p, data in zip(item, kept, strict=True):
        p.write_bytes(data)
    gate = check().record
    assert gate is not None and gate.passed and not gate.accepted
    # A target may accept a named miss with a reason instead.
    for p in item:
        p.unlink()
    scenario.write_text(
        scenario.read_text()
        + '\n[[coverage.accept]]\nmodel = "main"\nexpert = 257\ntopk = 9\ninter_dim = 256\n'
        'reason = "measured: the heuristic kernels are within 2% here"\n'
    )
    result = check()
    assert result.ok and len(result.record.accepted) == 1
    # No routed experts (the CPU stand-in model): the gate cannot run and says why.
    result = check(REPO / "tests" / "standin" / "model")
    assert not result.ran and "no routed experts" in result.why


def test_coverage_answers_for_the_nodes_environment_not_the_hosts(
    trees: dict[str, Path], aiter_configs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 41 item 1 (FIDELITY-5 D1), differential on 0.5.14 with the queue: a per-rank MLP
    size that is no multiple of 128 (1536 / TP8 = 192) is padded by aiter only under
    ``SGLANG_USE_AITER`` (``srt/layers/quantization/quark/quark_w4a4_mxfp4_moe.py:34``,
    ``srt/layers/moe/utils.py:543-572``: inter_dim 256 with it, 192 without). The host says 1;
    the scenario's ``[container.env]`` says 0: the command answers for the node (192) and its
    report names the environment it used."""
    model = tmp_path / "m1536"
    model.mkdir()
    config = json.loads((GLM / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "moe_intermediate_size": 1536}))
    scenario = tmp_path / "glm5-no-aiter.toml"
    text = TP8.read_text()
    assert text.count('SGLANG_USE_AITER = "1"') == 1
    scenario.write_text(text.replace('SGLANG_USE_AITER = "1"', 'SGLANG_USE_AITER = "0"'))
    monkeypatch.setenv("SGLANG_USE_AITER", "1")
    doc = run_coverage(trees["0.5.14+queue"], model, scenario, aiter_configs)
    assert {x["inter_dim"] for x in doc["lookups"] if x["model"] == "main"} == {192}
    env = doc["environment"]
    assert env["variables"]["SGLANG_USE_AITER"] == "0"
    assert env["sources"][-1] == f"{scenario} [container.env]"
    assert env["sources"][0].startswith("the release image's ENV")
