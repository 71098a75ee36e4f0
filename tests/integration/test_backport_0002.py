"""Patch 0002 makes 0.5.14's GLM draft quantize exactly like 0.5.16's, module by module.

Differential test over released code. For each config form below, the MTP draft model of a
GLM-5.2-shaped checkpoint (``GlmMoeDsaForCausalLM``, 78 layers, MTP layer ``model.layers.78``)
is built by two real sglang releases from their PyPI wheels: 0.5.14 with the queue applied
(``git apply``, as ``sglang_release.release_tree`` does) and 0.5.16 unpatched. Each build
follows sglang's own path: ``ModelConfig._config_draft_model`` renames the architecture, the
model registry resolves the class, ``model_loader.loader._get_quantization_config`` builds the
real ``QuarkConfig`` (and applies the class's ``hf_to_sglang_mapper``), and
``loader._initialize_model`` constructs the model. Every layer then holds the quant method it
got from ``QuarkConfig.get_quant_method`` (or none, when the draft was built without a quant
config); the test records that per module name (class, method, scheme, fused shared experts)
and compares the two releases. Nothing reads the patch's own helpers, so a rewrite of the
patch is judged by what the model ends up with. One more test builds DeepSeek V3 (61 layers)
with stock and patched 0.5.14 and requires identical decisions.

How sglang is run without torch: through ``sglforge.construct`` (its docstring and
``sglforge/construct/shims.py`` list the stand-ins: a ``torch`` describing the target's GPU, here
mi355x's gfx950 from images/targets.toml, a minimal ``triton``, stubs for every other missing
module, all in a child process per release). The launch is the README's (TP8, quark, EAGLE
5/1/6, fp8 KV cache, aiter all-reduce fusion), parsed by each release's own ``ServerArgs``
parser and ``__post_init__``; the topology is rank 0's; the checkpoint's weights are never
loaded (a bf16-vs-MXFP4 decision is what decides the load's shape mismatch, and that is what
is compared).
``test_stock_0_5_14_is_seen_to_differ`` keeps the harness honest: it must see the bug.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from sglforge import construct
from sglforge.targets import load_targets

pytestmark = pytest.mark.pypi

REPO = Path(__file__).resolve().parents[2]

README = "readme"  # the README launch: shared-experts fusion left on
NO_FUSION = "--disable-shared-experts-fusion"
LAUNCHES = (README, NO_FUSION)

MXFP4 = {
    "weight": {
        "dtype": "fp4",
        "qscheme": "per_group",
        "group_size": 32,
        "is_dynamic": False,
        "scale_format": "e8m0",
    },
    "input_tensors": {
        "dtype": "fp4",
        "qscheme": "per_group",
        "group_size": 32,
        "is_dynamic": True,
        "scale_format": "e8m0",
    },
    "output_tensors": None,
    "bias": None,
}
FP8 = {
    "weight": {"dtype": "fp8_e4m3", "qscheme": "per_channel", "is_dynamic": False},
    "input_tensors": {"dtype": "fp8_e4m3", "qscheme": "per_token", "is_dynamic": True},
    "output_tensors": None,
    "bias": None,
}
PROJ = ("gate_proj", "up_proj", "down_proj")
ATTN = (
    "q_a_proj",
    "q_b_proj",
    "kv_a_proj_with_mqa",
    "kv_b_proj",
    "o_proj",
    "indexer.wq_b",
    "indexer.wk",
    "indexer.weights_proj",
)

# GLM-5.2's shape (glm_moe_dsa): what the draft's constructors read.
GLM = dict(
    architectures=["GlmMoeDsaForCausalLM"],
    model_type="glm_moe_dsa",
    num_hidden_layers=78,
    hidden_size=6144,
    num_attention_heads=64,
    num_key_value_heads=64,
    q_lora_rank=2048,
    kv_lora_rank=512,
    qk_nope_head_dim=192,
    qk_rope_head_dim=64,
    v_head_dim=256,
    index_topk=2048,
    index_n_heads=32,
    index_head_dim=128,
    n_routed_experts=256,
    n_shared_experts=1,
    num_experts_per_tok=8,
    moe_intermediate_size=2048,
    intermediate_size=12288,
    first_k_dense_replace=3,
    moe_layer_freq=1,
    n_group=1,
    topk_group=1,
    routed_scaling_factor=2.5,
    norm_topk_prob=True,
    hidden_act="silu",
    rms_norm_eps=1e-5,
    vocab_size=154880,
    max_position_embeddings=202752,
    rope_theta=1000000,
    rope_scaling=None,
    num_nextn_predict_layers=1,
    scoring_func="sigmoid",
    topk_method="noaux_tc",
    tie_word_embeddings=False,
    attention_bias=False,
    torch_dtype="bfloat16",
)
# DeepSeek V3/R1's shape: 61 layers, no DSA indexer.
DEEPSEEK = dict(
    GLM,
    architectures=["DeepseekV3ForCausalLM"],
    model_type="deepseek_v3",
    num_hidden_layers=61,
    hidden_size=7168,
    num_attention_heads=128,
    num_key_value_heads=128,
    q_lora_rank=1536,
    qk_nope_head_dim=128,
    v_head_dim=128,
    index_topk=None,
    n_group=8,
    topk_group=4,
    intermediate_size=18432,
    vocab_size=129280,
    max_position_embeddings=163840,
    rope_theta=10000,
    routed_scaling_factor=2.5,
)
for _k in ("index_n_heads", "index_head_dim", "index_topk"):
    DEEPSEEK.pop(_k)


def quark(exclude: list[str], layer_quant_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Quark MXFP4 quantization_config block (the keys sglang reads), with these entries."""
    return {
        "quant_method": "quark",
        "export": {"kv_cache_group": [], "pack_method": "reorder"},
        "global_quant_config": MXFP4,
        "layer_quant_config": layer_quant_config or {},
        "layer_type_quant_config": {},
        "exclude": ["lm_head", "re:model\\.layers\\.\\d+\\.mlp\\.gate$", *exclude],
    }


def shared_expert(layer: int) -> list[str]:
    return [f"model.layers.{layer}.mlp.shared_experts.{p}" for p in PROJ]


def whole_layer_leaves(layer: int, n_experts: int) -> list[str]:
    """The MTP layer excluded as every leaf module it has, routed experts included."""
    m = f"model.layers.{layer}"
    return [
        *(f"{m}.self_attn.{a}" for a in ATTN),
        *(f"{m}.mlp.experts.{i}.{p}" for i in range(n_experts) for p in PROJ),
        *shared_expert(layer),
        f"{m}.mlp.gate",
        f"{m}.eh_proj",
        f"{m}.shared_head.head",
    ]


# The forms of issue 14 (MTP layer 78).
GLM_FORMS: dict[str, dict[str, Any]] = {
    "A-exact-shared-expert": quark(shared_expert(78)),
    "B-whole-layer-leaves": quark(whole_layer_leaves(78, 256)),
    "C-regex-shared-expert": quark(["re:model\\.layers\\.78\\.mlp\\.shared_experts\\..*"]),
    "D-regex-whole-layer": quark(["re:model\\.layers\\.78\\..*"]),
    "E-glob-literal": quark(["model.layers.78.*"]),
    "F-plus-real-layer-61": quark([*shared_expert(78), "model.layers.61.self_attn.o_proj"]),
    "G-layer-quant-config": quark(
        shared_expert(78),
        {"model.layers.78.self_attn.*": FP8, "model.layers.78.eh_proj": FP8},
    ),
}
DEEPSEEK_FORMS: dict[str, dict[str, Any]] = {
    "A-exact-shared-expert": quark(shared_expert(61)),
    "B-whole-layer-leaves": quark(whole_layer_leaves(61, 256)),
    "whole-layer": quark(["model.layers.61"]),
    "G-layer-quant-config": quark(
        shared_expert(61), {"model.layers.61.self_attn.*": FP8, "model.layers.61.eh_proj": FP8}
    ),
}

Decisions = dict[str, str]  # module name -> "Class: method/scheme"


def _cases(
    model: dict[str, Any], forms: dict[str, dict[str, Any]], prefix: str = ""
) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{prefix}{form}/{launch}",
            "config": model,
            "quant": quant,
            "disable_fusion": launch == NO_FUSION,
        }
        for form, quant in forms.items()
        for launch in LAUNCHES
    ]


def launch(disable_fusion: bool) -> list[str]:
    """The README launch's flags (sglang's own parser reads them)."""
    args = [
        "--model-path", "/models/glm",
        "--tp", "8",
        "--quantization", "quark",
        "--trust-remote-code",
        "--speculative-algorithm", "EAGLE",
        "--speculative-num-steps", "5",
        "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "6",
        "--kv-cache-dtype", "fp8_e4m3",
        "--enable-aiter-allreduce-fusion",
    ]  # fmt: skip
    return args + ([NO_FUSION] if disable_fusion else [])


def build_drafts(tree: Path, cases: list[dict[str, Any]]) -> dict[str, Decisions]:
    """The draft model of every case, built by the release at ``tree`` (its python/ folder)."""
    built = construct.build_many(
        tree,
        [
            construct.Request(
                c["id"],
                dict(copy.deepcopy(c["config"]), quantization_config=copy.deepcopy(c["quant"])),
                launch(c["disable_fusion"]),
                models=("draft",),
            )
            for c in cases
        ],
        load_targets(REPO).resolve("mi355x").device,
    )
    return {case_id: b.models["draft"].labels() for case_id, b in built.items()}


def table(left_name: str, left: Decisions, right_name: str, right: Decisions) -> str:
    names = sorted(set(left) | set(right))
    width = max(len(n) for n in names)
    lw = max([len(left_name)] + [len(v) for v in left.values()])
    rows = [f"  {'module':<{width}}  {left_name:<{lw}}  {right_name}"]
    for n in names:
        a, b = left.get(n, "(not built)"), right.get(n, "(not built)")
        mark = "  " if a == b else "!="
        rows.append(f"{mark}{n:<{width}}  {a:<{lw}}  {b}")
    return "\n".join(rows)


@pytest.fixture(scope="module")
def drafts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Decisions]]:
    from sglang_release import release_tree

    base = tmp_path_factory.mktemp("backport-0002")
    trees = {
        "0.5.14+queue": release_tree(base / "patched", "0.5.14", patched=True),
        "0.5.14": release_tree(base / "stock", "0.5.14", patched=False),
        "0.5.16": release_tree(base / "v0.5.16", "0.5.16", patched=False),
    }
    glm, deepseek = _cases(GLM, GLM_FORMS), _cases(DEEPSEEK, DEEPSEEK_FORMS, "deepseek:")
    return {name: build_drafts(tree / "python", glm + deepseek) for name, tree in trees.items()}


@pytest.mark.parametrize("launch", LAUNCHES)
@pytest.mark.parametrize("form", GLM_FORMS)
def test_glm_draft_decides_like_0_5_16(
    drafts: dict[str, dict[str, Decisions]], form: str, launch: str
) -> None:
    case = f"{form}/{launch}"
    patched, upstream = drafts["0.5.14+queue"][case], drafts["0.5.16"][case]
    assert patched == upstream, f"GLM draft, {case}: patched 0.5.14 and 0.5.16 disagree\n" + table(
        "0.5.14+queue", patched, "0.5.16", upstream
    )


@pytest.mark.parametrize("launch", LAUNCHES)
@pytest.mark.parametrize("form", DEEPSEEK_FORMS)
def test_deepseek_v3_draft_is_unchanged_by_the_queue(
    drafts: dict[str, dict[str, Decisions]], form: str, launch: str
) -> None:
    case = f"deepseek:{form}/{launch}"
    patched, stock = drafts["0.5.14+queue"][case], drafts["0.5.14"][case]
    assert patched == stock, (
        f"DeepSeek V3 draft, {case}: the queue changed 0.5.14's decisions\n"
        + table("0.5.14+queue", patched, "0.5.14", stock)
    )


def test_stock_0_5_14_is_seen_to_differ(drafts: dict[str, dict[str, Decisions]]) -> None:
    # The harness must see the bug the patch fixes, or the comparisons above prove nothing.
    for launch in LAUNCHES:
        case = f"A-exact-shared-expert/{launch}"
        assert drafts["0.5.14"][case] != drafts["0.5.16"][case], case
    no_fusion = drafts["0.5.16"][f"A-exact-shared-expert/{NO_FUSION}"]
    assert no_fusion["model.decoder.mlp.shared_experts.down_proj"].endswith("bf16")
    assert drafts["0.5.14"][f"A-exact-shared-expert/{NO_FUSION}"][
        "model.decoder.mlp.shared_experts.down_proj"
    ].endswith("QuarkW4A4MXFP4")
