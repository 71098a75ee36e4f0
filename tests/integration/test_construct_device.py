"""The construction runs on the target's device and reads config.json as sglang 0.5.14 does.

Differential over released code (issue 30, items 1 and 2): the same launch (the README's TP8
MTP launch of tests/standin/model-mxfp4, GLM-5.2's shape) is built by sglang 0.5.14 with the
queue for the mi355x and mi300x targets of images/targets.toml, each presented as that target's
GPU (gfx, CU count, memory, GPUs per node). Where sglang's own code decides from the device,
the two builds follow it (0.5.14 lines):

- shared-experts fusion holds on both: ``determine_num_fused_shared_experts`` disables it only
  below capability (9, 4) on ROCm (``srt/models/deepseek_v2.py:2686-2698``); gfx942 is (9, 4),
  gfx950 (9, 5). A gfx90a device (MI250X, capability (9, 0); no target of ours) is built too,
  and there sglang turns fusion off: the main model is 256/8 instead of 257/9;
- ``mem_fraction_static`` differs: ``ServerArgs`` computes it from the GPU's memory,
  ``round((gpu_mem - reserved_mem) / gpu_mem, 3)`` (``srt/server_args.py:3308-3314``), with
  a ``reserved_mem`` that does not depend on the memory at these sizes;
- the memory tier (``_handle_gpu_memory_settings``, ``:3187-3203``: 160 GiB and up) is the same:
  chunked prefill 16384 and capture sizes up to 512 on both.

Then the checkpoint forms: GLM-5.2's config.json as it ships (``rope_parameters``, no
``rope_scaling``/``rope_theta``) and the legacy ``rope_theta``-only form build the same model as
the project's test model (main 257/9 on 75 layers, draft 256/8; per-rank intermediate size 256
at TP8, 512 at TP4xDP2), with the same per-module decisions and the same scan findings. Both are
read by transformers 5.8.1 itself (0.5.14's pin, in the config-only child) and then by sglang's
own ``get_config``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglforge import construct, coverage
from sglforge.scan import quant
from sglforge.scenario.file import load_scenario
from sglforge.targets import Device, load_targets

pytestmark = pytest.mark.pypi

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "tests" / "standin"
TP8 = REPO / "smoke" / "glm5-mxfp4-mtp-mi355x.toml"
TP4DP2 = REPO / "smoke" / "glm5-mxfp4-mtp-tp4dp2-mi355x.toml"
TARGETS = load_targets(REPO)
# MI250X, one GCD as ROCm shows it: a device below sglang's (9, 4) fusion threshold.
GFX90A = Device(gfx="gfx90a", name="AMD Instinct MI250X", cu_num=110, memory_gib=64, count=8)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from sglang_release import release_tree

    return release_tree(tmp_path_factory.mktemp("device") / "patched", "0.5.14", True) / "python"


def launch(model: Path, scenario: Path = TP8) -> list[str]:
    return coverage.launch_args(load_scenario(scenario).args, model)


def experts(built: construct.Construction) -> dict[str, tuple[int, int, int]]:
    """Per model: (MoE layers, experts, top-k), every layer alike."""
    out = {}
    for name, model in built.models.items():
        shapes = {(m["num_experts"], m["top_k"]) for m in model.moe}
        assert len(shapes) == 1, (name, shapes)
        out[name] = (len(model.moe), *shapes.pop())
    return out


@pytest.fixture(scope="module")
def by_device(tree: Path) -> dict[str, construct.Construction]:
    model = STANDIN / "model-mxfp4"
    config = json.loads((model / "config.json").read_text())
    devices = {n: TARGETS.resolve(n).device for n in ("mi355x", "mi300x")} | {"gfx90a": GFX90A}
    return {n: construct.build(tree, config, launch(model), d) for n, d in devices.items()}


def test_the_targets_record_their_device() -> None:
    mi300x, mi355x = TARGETS.resolve("mi300x").device, TARGETS.resolve("mi355x").device
    assert (mi300x.gfx, mi300x.cu_num, mi300x.memory_gib, mi300x.capability) == (
        "gfx942",
        304,
        192,
        (9, 4),
    )
    assert (mi355x.gfx, mi355x.cu_num, mi355x.memory_gib, mi355x.capability) == (
        "gfx950",
        256,
        288,
        (9, 5),
    )


def test_fusion_holds_from_gfx942_and_goes_below(by_device: dict[str, construct.Construction]):
    fused = {"main": (75, 257, 9), "draft": (1, 256, 8)}
    assert experts(by_device["mi355x"]) == fused
    assert experts(by_device["mi300x"]) == fused
    assert experts(by_device["gfx90a"])["main"] == (75, 256, 8)


def test_memory_decides_mem_fraction_static(by_device: dict[str, construct.Construction]):
    f355 = by_device["mi355x"].launch["mem_fraction_static"]
    f300 = by_device["mi300x"].launch["mem_fraction_static"]
    assert f300 < f355 < 1
    reserved = 288 * 1024 * (1 - f355)  # MiB, the same reserve on both (up to rounding)
    assert abs(f300 - (192 * 1024 - reserved) / (192 * 1024)) < 0.002
    for name in ("mi355x", "mi300x"):
        tokens = by_device[name].main.tokens
        assert tokens["chunked_prefill_size"] == 16384 and max(tokens["capture_bs"]) == 512


@pytest.mark.parametrize("form", ["model-mxfp4-rope-parameters", "model-mxfp4-rope-theta"])
def test_the_shipped_and_legacy_rope_forms_build(
    tree: Path, by_device: dict[str, construct.Construction], form: str
) -> None:
    model = STANDIN / form
    config = json.loads((model / "config.json").read_text())
    assert ("rope_scaling" in config, "rope_parameters" in config) == (
        False,
        form.endswith("parameters"),
    )
    requests = [
        construct.Request(name, config, launch(model, scenario))
        for name, scenario in (("tp8", TP8), ("tp4dp2", TP4DP2))
    ]
    both = construct.build_many(tree, requests, TARGETS.resolve("mi355x").device)
    built = both["tp8"]
    # TP4xDP2: the same experts, each rank's intermediate size twice TP8's (2048 / 4)
    assert experts(both["tp4dp2"]) == experts(built)
    assert {m["intermediate_size_per_partition"] for m in both["tp4dp2"].main.moe} == {512}
    assert {m["intermediate_size_per_partition"] for m in built.main.moe} == {256}
    # read by transformers 5.8.1 (0.5.14's Requires-Dist) itself, in the config-only child
    assert built.config_source == "transformers 5.8.1 (GlmMoeDsaConfig)"
    # sglang's own get_config ran on it: its rope compatibility adds "type" to transformers'
    # rope_parameters (0.5.14 srt/utils/hf_transformers_patches.py:79-92, called from
    # hf_transformers/common.py get_hf_text_config), read as the rope_scaling property
    rope = {"rope_theta": 8000000 if form.endswith("parameters") else 1000000}
    want = rope | {"rope_type": "default", "type": "default"}
    assert {m.config_class for m in built.models.values()} == {"GlmMoeDsaConfig"}
    assert [m.rope_scaling for m in built.models.values()] == [want, want]
    assert experts(built) == {"main": (75, 257, 9), "draft": (1, 256, 8)}
    # the scan's quant kinds judge it as they judge the project's test model
    same = by_device["mi355x"]
    assert quant.findings(built, config, "c") == quant.findings(same, config, "c")
    assert [m.labels() for m in built.models.values()] == [m.labels() for m in same.models.values()]
