"""What one construction built: the types that cross from the child to scan and coverage.

The child (``sglforge.construct.child``) prints JSON; these types name its shapes (TypedDicts
for the raw records, frozen dataclasses for a model and a whole launch), so the MoE shapes
coverage keys aiter with and the quant decisions the scan judges come from one construction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypedDict

from sglforge.targets import Device

# A module's record: its class, its quant method and scheme as sglang chose them.
ModuleRecord = TypedDict(
    "ModuleRecord",
    {
        "class": str,
        "method": str | None,  # the quant method's class (UnquantizedLinearMethod, ...)
        "scheme": str | None,  # the quantized scheme's class, None when unquantized
        "quantized": bool,
        "fused_shared": int,  # shared experts fused into this FusedMoE
        "experts": int,  # num_experts (0 for a module without experts)
    },
)

# A fused-MoE layer as built (what aiter is asked for).
MoeLayer = TypedDict(
    "MoeLayer",
    {
        "module": str,
        "class": str,
        "scheme": str | None,
        "method": str | None,
        "num_experts": int,  # a fused shared expert included
        "num_local_experts": int,
        "num_fused_shared_experts": int,
        "top_k": int,
        "hidden_size": int,
        "intermediate_size_per_partition": int,
        "activation": str | None,
        "w13_shape": list[int] | None,
        "w2_shape": list[int] | None,
        "moe_ep_size": int,
    },
)


class Tokens(TypedDict):
    """The CUDA-graph capture batch sizes and the tokens per batch each runner runs."""

    capture_bs: list[int]
    chunked_prefill_size: int
    speculative: bool
    cuda_graph_disabled: bool
    tokens_per_bs: dict[str, int]  # target_verify | draft_decode, draft_extend | decode


class Launch(TypedDict, total=False):
    """The launch as sglang's ``ServerArgs`` resolved it (only the flags' two speculative keys
    when the construction did not run, ``literal_launch``)."""

    tp_size: int
    dp_size: int
    ep_size: int
    enable_dp_attention: bool
    disable_shared_experts_fusion: bool
    speculative_algorithm: str | None
    speculative_num_steps: int | None
    speculative_eagle_topk: int | None
    speculative_num_draft_tokens: int | None
    kv_cache_dtype: str
    quantization: str | None
    attention_backend: str | None
    mem_fraction_static: float  # from the GPU's memory (server_args.py:3308-3314 at 0.5.14)


class Parallel(TypedDict):
    """Rank 0's parallel state (``compute_dp_attention_world_info``, moe tp/ep)."""

    tp: int
    attn_tp: int
    attn_dp: int
    moe_tp: int
    moe_ep: int


class Excluded(TypedDict):
    """A module built quantized whose checkpoint tensors the exclude list marks unquantized."""

    module: str
    scheme: str | None
    checkpoint: str
    entries: list[str]


class FusedShared(TypedDict):
    """A shared expert fused into routed experts of another scheme (or excluded)."""

    module: str
    scheme: str | None
    quantized: bool
    checkpoint: list[str]
    excluded_by: list[str]
    scheme_differs: str  # "" when the schemes agree


class QuarkMatching(TypedDict):
    """How QuarkConfig's own matching matched the checkpoint's quantization_config."""

    matched: dict[str, list[str]]  # exclude entry -> up to 3 module prefixes it matched
    keys: dict[str, list[str]]  # layer_quant_config key -> the mapped keys sglang asked for
    quantized_but_excluded: list[Excluded]
    fused_shared: list[FusedShared]


@dataclass(frozen=True)
class Model:
    """One model (the main model or the MTP draft) as the release built it."""

    architecture: str
    cls: str  # the model class the registry resolved
    modules: Mapping[str, ModuleRecord]
    moe: tuple[MoeLayer, ...]
    tokens: Tokens
    prefixes: tuple[str, ...]  # every module prefix built
    quark: QuarkMatching | None  # None: the checkpoint is not Quark-quantized
    # the config object sglang's get_config returned: its class, and rope_scaling as read
    config_class: str = ""
    rope_scaling: Mapping[str, object] | None = None

    def labels(self) -> dict[str, str]:
        """``{module: "Class: scheme"}``: each module's decision in one string."""
        out = {}
        for name, m in self.modules.items():
            what = (m["scheme"] or m["method"]) if m["quantized"] else "bf16"
            fused = f" (+{m['fused_shared']} fused shared)" if m["fused_shared"] else ""
            out[name] = f"{m['class']}: {what}{fused}"
        return out


@dataclass(frozen=True)
class Construction:
    """One launch of one model on one release and device: what sglang built."""

    device: Device
    launch: Launch
    dsa: bool | None  # whether the DSA attention backend serves it; None: not known
    parallel: Parallel | None = None
    models: Mapping[str, Model] = field(default_factory=dict)  # "main", "draft"
    # how config.json was read: "transformers 5.8.1 (GlmMoeDsaConfig)", or sglforge's own
    # reading and why transformers' own class could not be used (construct.hfresolve)
    config_source: str = ""

    @property
    def main(self) -> Model:
        return self.models["main"]

    @property
    def draft(self) -> Model | None:
        return self.models.get("draft")
