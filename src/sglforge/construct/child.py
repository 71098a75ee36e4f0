"""The construction child: ``python -m sglforge.construct.child TREE`` (one program for all).

Reads ``{"device": ..., "requests": [...]}`` (JSON) on stdin, installs the shims
(:mod:`sglforge.construct.shims`: torch and the GPU stack stand-ins, describing the target's
device), imports the release's own sglang from ``TREE`` (a release's ``python/`` folder) and,
per request:

1. parses the launch flags with sglang's own parser (``ServerArgs.add_cli_args``) and runs the
   real ``ServerArgs.__post_init__`` on them. Two things a launch reads from the machine are
   handed in: the checkpoint's ``config.json`` (``get_config`` answers with it, as transformers
   5.x presents it: :mod:`sglforge.construct.hfconfig`) and the GPU memory
   (``get_device_memory_capacity``: the target's);
2. sets the topology sglang's own parallel state would hold for rank 0 (tp, attention tp/dp
   from ``compute_dp_attention_world_info``, moe tp/ep);
3. builds the main model and, with speculative decoding and NextN layers in the config, the
   draft, through sglang's own ``ModelConfig.from_server_args`` and ``model_loader.loader`` (the
   real ``QuarkConfig`` and the model class from the registry), and records every module's
   quant decision, every fused-MoE layer (experts, top-k, hidden size, per-partition
   intermediate size, fused shared experts, weight shapes) and, for a Quark checkpoint, how
   QuarkConfig's own matching matched its excludes (:mod:`sglforge.construct.quark`);
4. records the batch sizes the CUDA-graph runners capture (``get_batch_sizes_to_capture``, with
   the token count per batch of the target-verify and draft runners as sglang computes it), the
   chunked-prefill size, and whether the DSA attention backend serves the launch
   (``is_deepseek_dsa``).

Prints one JSON object on its last stdout line: ``{request id: record}``, the shapes of
:mod:`sglforge.construct.built`. A failing request records ``{"error": "..."}`` (the
traceback's last lines) and the others still run.
"""

# mypy: ignore-errors

from __future__ import annotations

import argparse
import json
import logging
import sys
import traceback
import types

from sglforge.construct import quark
from sglforge.construct.hfconfig import HFConfig
from sglforge.construct.quark import RECORDER

UNQUANTIZED = {
    None,
    "UnquantizedLinearMethod",
    "UnquantizedFusedMoEMethod",
    "UnquantizedEmbeddingMethod",
}


def _hand_in(config: dict, gpu: dict) -> None:
    import sglang.srt.configs.model_config as model_config
    import sglang.srt.server_args as server_args

    model_config.get_config = lambda *a, **k: HFConfig(**config)
    model_config.get_hf_text_config = lambda c: c
    model_config.get_generation_config = lambda *a, **k: None
    memory_mib = float(int(gpu["memory_gib"]) * 1024)
    server_args.get_device_memory_capacity = lambda *a, **k: memory_mib


class _Parser(argparse.ArgumentParser):
    """sglang's launch parser, raising instead of exiting: a flag the release does not know
    fails that request only, with argparse's own message."""

    def error(self, message):
        raise ValueError(f"sglang's launch parser: {message}")


def _server_args(argv: list[str]):
    from sglang.srt.server_args import ServerArgs

    parser = _Parser()
    ServerArgs.add_cli_args(parser)
    return ServerArgs.from_cli_args(parser.parse_args(argv))


def _group(size: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(
        world_size=size,
        rank_in_group=0,
        rank=0,
        local_rank=0,
        ranks=list(range(size)),
        is_first_rank=True,
        is_last_rank=True,
        device_group=None,
        cpu_group=None,
    )


def _topology(sa):
    """Rank 0's parallel state for ``sa`` (the override sglang's tests use)."""
    from sglang.srt.distributed import parallel_state
    from sglang.srt.layers.dp_attention import compute_dp_attention_world_info
    from sglang.srt.runtime_context import get_parallel

    tp, ep = sa.tp_size, max(sa.ep_size, 1)
    _, attn_tp, _, attn_dp = compute_dp_attention_world_info(
        sa.enable_dp_attention, 0, tp, sa.dp_size
    )
    moe_tp = tp // ep
    sizes = dict(
        _WORLD=tp,
        _TP=tp,
        _ATTN_TP=attn_tp,
        _ATTN_CP=1,
        _MOE_DP=1,
        _MOE_EP=ep,
        _MOE_TP=moe_tp,
        _PP=1,
    )
    for name, size in sizes.items():
        setattr(parallel_state, name, _group(size))
    facts = dict(tp=tp, attn_tp=attn_tp, attn_dp=attn_dp, moe_tp=moe_tp, moe_ep=ep)
    return facts, get_parallel().override(
        tp_size=tp,
        tp_rank=0,
        pp_size=1,
        pp_rank=0,
        moe_ep_size=ep,
        moe_ep_rank=0,
        moe_tp_size=moe_tp,
        moe_tp_rank=0,
        attn_tp_size=attn_tp,
        attn_tp_rank=0,
        attn_cp_size=1,
        attn_cp_rank=0,
        attn_dp_size=attn_dp,
        attn_dp_rank=0,
        pp_group=_group(1),
    )


def _label(module) -> dict:
    """A ``ModuleRecord``: the module's quant method and scheme as sglang chose them."""
    method = getattr(module, "quant_method", None)
    name = None if method is None else type(method).__name__
    scheme = getattr(module, "scheme", None)
    quantized = name not in UNQUANTIZED
    return {
        "class": type(module).__name__,
        "method": name,
        "scheme": type(scheme).__name__ if scheme is not None and quantized else None,
        "quantized": quantized,
        "fused_shared": int(getattr(module, "num_fused_shared_experts", 0) or 0),
        "experts": int(getattr(module, "num_experts", 0) or 0),
    }


def _shape(param) -> list[int] | None:
    shape = getattr(param, "shape", None)
    return None if shape is None else [int(s) for s in shape]


def _moe(name: str, module) -> dict:
    params = getattr(module, "_parameters", {})
    w13, w2 = params.get("w13_weight"), params.get("w2_weight")
    scheme = getattr(module, "scheme", None)
    method = getattr(module, "quant_method", None)
    runner = getattr(module, "moe_runner_config", None)
    return {
        "module": name,
        "class": type(module).__name__,
        "scheme": type(scheme).__name__ if scheme is not None else None,
        "method": type(method).__name__ if method is not None else None,
        "num_experts": int(module.num_experts),
        "num_local_experts": int(getattr(module, "num_local_experts", module.num_experts)),
        "num_fused_shared_experts": int(getattr(module, "num_fused_shared_experts", 0) or 0),
        "top_k": int(module.top_k),
        "hidden_size": int(module.hidden_size),
        "intermediate_size_per_partition": int(module.intermediate_size_per_partition),
        "activation": getattr(runner, "activation", None),
        "w13_shape": _shape(w13),
        "w2_shape": _shape(w2),
        "moe_ep_size": int(getattr(module, "moe_ep_size", 1) or 1),
    }


def _record(model) -> tuple[dict, list]:
    modules, moes = {}, []
    for name, module in model.named_modules():
        if hasattr(module, "quant_method") or type(module).__name__ == "Linear":
            modules[name] = _label(module)
        if hasattr(module, "intermediate_size_per_partition") and hasattr(module, "top_k"):
            moes.append(_moe(name, module))
    return modules, moes


def _nextn(model, draft: bool) -> dict | None:
    """The draft's NextN layer prefix and weight names, from the model's own conf."""
    if not draft or not hasattr(model, "_initialize_nextn_conf"):
        return None
    conf = model._initialize_nextn_conf(True)
    return {
        "layer_prefix": conf.nextn_layer_prefix,
        "spec_weight_names": list(conf.nextn_spec_weight_names),
    }


def _build(sa, config: dict, draft: bool) -> dict:
    """One model (a ``Model`` record), built by sglang's own config, registry and loader."""
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader import loader
    from sglang.srt.models.registry import ModelRegistry
    from sglang.srt.server_args import set_global_server_args_for_scheduler

    set_global_server_args_for_scheduler(sa)
    path = (sa.speculative_draft_model_path or sa.model_path) if draft else sa.model_path
    model_config = ModelConfig.from_server_args(sa, model_path=path, is_draft_model=draft)
    hf_config = model_config.hf_config
    quant = config.get("quantization_config")
    RECORDER.reset()
    load_config = LoadConfig()
    quant_config = loader._get_quantization_config(model_config, load_config)
    cls, _ = ModelRegistry.resolve_model_cls(hf_config.architectures)
    renames = quark.renames(cls, quant_config, hf_config, quant or {})
    model = loader._initialize_model(model_config, load_config, quant_config)
    modules, moes = _record(model)
    facts = dict(
        nextn=_nextn(model, draft),
        n_routed=getattr(hf_config, "n_routed_experts", None),
        renames=renames,
    )
    return {
        "architecture": hf_config.architectures[0],
        "class": type(model).__name__,
        "modules": modules,
        "moe": moes,
        "prefixes": sorted(n for n, _ in model.named_modules() if n),
        "quark": quark.matching(model, modules, quant, quant_config, facts),
        "tokens": _token_counts(sa, draft),
    }


def _token_counts(sa, draft: bool) -> dict:
    """Batch sizes the CUDA-graph runners capture and the tokens per batch each runs."""
    from sglang.srt.model_executor.runner.base_cuda_graph_runner import (
        get_batch_sizes_to_capture,
    )
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    spec = SpeculativeAlgorithm.from_string(sa.speculative_algorithm)
    decode_bs = list(sa.cuda_graph_config.decode.bs)
    # req_to_token_pool.size comes from memory profiling at start-up (unknown here): taken as
    # the largest configured capture size, so nothing is clamped away.
    runner = types.SimpleNamespace(
        server_args=sa, req_to_token_pool=types.SimpleNamespace(size=max(decode_bs))
    )
    capture_bs, _ = get_batch_sizes_to_capture(runner)
    out = {
        "capture_bs": [int(b) for b in capture_bs],
        "chunked_prefill_size": int(sa.chunked_prefill_size or 0),
        "speculative": spec.is_speculative(),
        "cuda_graph_disabled": bool(sa.disable_cuda_graph),
    }
    if spec.is_speculative():
        # decode_cuda_graph_runner: target verify runs num_draft_tokens per request;
        # eagle_draft_cuda_graph_runner.py: the draft's steps run topk tokens per request;
        # eagle_draft_extend_cuda_graph_runner.py: the draft's extend after a verify runs
        # speculative_num_draft_tokens per request.
        verify = spec.get_num_tokens_per_bs_for_target_verify(
            sa.speculative_num_draft_tokens, draft
        )
        out["tokens_per_bs"] = (
            {"draft_decode": int(sa.speculative_eagle_topk or 1)}
            | {"draft_extend": int(sa.speculative_num_draft_tokens)}
            if draft
            else {"target_verify": int(verify)}
        )
    else:
        out["tokens_per_bs"] = {"decode": 1}
    return out


def _launch(sa) -> dict:
    """The launch as ``ServerArgs`` resolved it (a ``Launch`` record)."""
    names = (
        "tp_size dp_size ep_size speculative_algorithm speculative_num_steps "
        "speculative_eagle_topk speculative_num_draft_tokens kv_cache_dtype quantization "
        "attention_backend mem_fraction_static"
    ).split()
    out = {n: getattr(sa, n, None) for n in names}
    out["enable_dp_attention"] = bool(sa.enable_dp_attention)
    out["disable_shared_experts_fusion"] = bool(sa.disable_shared_experts_fusion)
    return out


def _models(sa, request: dict) -> list[str]:
    """The models to build: the request's, else main and, with MTP, the draft."""
    if request.get("models"):
        return list(request["models"])
    nextn = request["config"].get("num_nextn_predict_layers")
    return ["main", "draft"] if sa.speculative_algorithm and nextn else ["main"]


def run_request(request: dict, gpu: dict) -> dict:
    from sglang.srt.configs.model_config import is_deepseek_dsa

    config = request["config"]
    _hand_in(config, gpu)
    sa = _server_args(request["launch"])
    launch = _launch(sa)  # as the parser and __post_init__ left it, before a model decides
    facts, topology = _topology(sa)
    with topology:
        models = {m: _build(sa, config, m == "draft") for m in _models(sa, request)}
    return {
        "launch": launch,
        "dsa": bool(is_deepseek_dsa(HFConfig(**config))),
        "parallel": facts,
        "models": models,
    }


def main(tree: str) -> None:
    doc = json.loads(sys.stdin.read())
    from sglforge.construct import shims

    shims.install(doc["device"])
    sys.path.insert(0, tree)
    logging.disable(logging.WARNING)
    RECORDER.install()
    out = {}
    for request in doc["requests"]:
        try:
            out[request["id"]] = run_request(request, doc["device"])
        except Exception:  # one broken request must not hide the others' answers
            tail = traceback.format_exc().splitlines(True)[-12:]
            out[request["id"]] = {"error": "".join(tail)}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
