"""The child side of :mod:`sglforge.construct`: ``python -m sglforge.construct.child TREE``.

Reads the cases (JSON) on stdin, installs the test doubles (:mod:`sglforge.construct.fakes`),
imports the release's own sglang from ``TREE`` (a release's ``python/`` folder) and, per case:

1. parses the launch flags with sglang's own parser (``ServerArgs.add_cli_args``) and runs the
   real ``ServerArgs.__post_init__`` on them. Two things a launch reads from the machine are
   handed in: the checkpoint's ``config.json`` (``get_config`` answers with the case's config
   instead of asking transformers) and the GPU memory (``get_device_memory_capacity``: one
   MI355X, 288 GiB);
2. sets the topology sglang's own parallel state would hold for rank 0 (tp, attention tp/dp
   from ``compute_dp_attention_world_info``, moe tp/ep);
3. builds the main model and, with speculative decoding, the draft model, through sglang's
   own ``ModelConfig.from_server_args`` and ``model_loader.loader`` (the real ``QuarkConfig``
   and the model class from the registry), and records every module's quant decision and every
   fused-MoE layer (experts, top-k, hidden size, per-partition intermediate size, fused shared
   experts, weight shapes and dtypes);
4. records the batch sizes the CUDA-graph runners capture (``get_batch_sizes_to_capture``, with
   the token count per batch of the target-verify and draft runners as sglang computes it) and
   the chunked-prefill size.

Prints one JSON object on its last stdout line: ``{case id: record}``. A failing case records
``{"error": "..."}`` (the traceback's last lines) and the others still run.
"""

# mypy: ignore-errors

from __future__ import annotations

import argparse
import copy
import json
import logging
import sys
import traceback
import types

MI355X_MEMORY_MIB = 288 * 1024

UNQUANTIZED = {
    None,
    "UnquantizedLinearMethod",
    "UnquantizedFusedMoEMethod",
    "UnquantizedEmbeddingMethod",
}


class _HFConfig(types.SimpleNamespace):
    """The checkpoint's config.json as sglang reads it through transformers' PretrainedConfig.

    A key config.json lacks takes PretrainedConfig's own default for it (the common keys its
    ``__init__`` sets, below); any other missing key is an AttributeError, as there.
    """

    DEFAULTS = dict(
        pad_token_id=None,
        bos_token_id=None,
        eos_token_id=None,
        sep_token_id=None,
        decoder_start_token_id=None,
        tie_word_embeddings=True,
        is_encoder_decoder=False,
        is_decoder=False,
        add_cross_attention=False,
        output_hidden_states=False,
        output_attentions=False,
        return_dict=True,
        use_return_dict=True,
        torch_dtype=None,
        tokenizer_class=None,
        prefix=None,
        task_specific_params=None,
        problem_type=None,
        chunk_size_feed_forward=0,
        num_labels=2,
    )

    def __init__(self, **config):
        super().__init__(**{**self.DEFAULTS, **config})

    def to_dict(self):
        return copy.deepcopy(vars(self))

    def get_text_config(self, *a, **k):
        return self

    def __getitem__(self, key):
        return getattr(self, key)


def _hand_in(config: dict) -> None:
    import sglang.srt.configs.model_config as model_config
    import sglang.srt.server_args as server_args

    model_config.get_config = lambda *a, **k: _HFConfig(**copy.deepcopy(config))
    model_config.get_hf_text_config = lambda c: c
    model_config.get_generation_config = lambda *a, **k: None
    server_args.get_device_memory_capacity = lambda *a, **k: float(MI355X_MEMORY_MIB)


def _server_args(argv: list[str]):
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
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


def _label(module) -> str:
    method = getattr(module, "quant_method", None)
    method_name = None if method is None else type(method).__name__
    scheme = getattr(module, "scheme", None)
    what = (
        "bf16" if method_name in UNQUANTIZED else type(scheme).__name__ if scheme else method_name
    )
    fused = getattr(module, "num_fused_shared_experts", 0) or 0
    return f"{type(module).__name__}: {what}" + (f" (+{fused} fused shared)" if fused else "")


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


def _record(model) -> dict:
    modules, moes = {}, []
    for name, module in model.named_modules():
        if hasattr(module, "quant_method") or type(module).__name__ == "Linear":
            modules[name] = _label(module)
        if hasattr(module, "intermediate_size_per_partition") and hasattr(module, "top_k"):
            moes.append(_moe(name, module))
    return {"modules": modules, "moe": moes}


def _build(sa, draft: bool) -> dict:
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader import loader
    from sglang.srt.server_args import set_global_server_args_for_scheduler

    set_global_server_args_for_scheduler(sa)
    if draft:
        model_config = ModelConfig.from_server_args(
            sa, model_path=sa.speculative_draft_model_path or sa.model_path, is_draft_model=True
        )
    else:
        model_config = ModelConfig.from_server_args(sa)
    load_config = LoadConfig()
    quant_config = loader._get_quantization_config(model_config, load_config)
    model = loader._initialize_model(model_config, load_config, quant_config)
    return {"architecture": model_config.hf_config.architectures[0], **_record(model)}


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


def run_case(case: dict) -> dict:
    _hand_in(case["config"])
    sa = _server_args(case["args"])
    facts, topology = _topology(sa)
    with topology:
        built = _build(sa, case.get("draft", False))
    return {
        "server_args": {
            "tp_size": sa.tp_size,
            "dp_size": sa.dp_size,
            "ep_size": sa.ep_size,
            "enable_dp_attention": bool(sa.enable_dp_attention),
            "disable_shared_experts_fusion": bool(sa.disable_shared_experts_fusion),
            "speculative_algorithm": sa.speculative_algorithm,
            "speculative_num_steps": sa.speculative_num_steps,
            "speculative_eagle_topk": sa.speculative_eagle_topk,
            "speculative_num_draft_tokens": sa.speculative_num_draft_tokens,
            "kv_cache_dtype": sa.kv_cache_dtype,
            "quantization": sa.quantization,
        },
        "parallel": facts,
        "tokens": _token_counts(sa, case.get("draft", False)),
        **built,
    }


def main(tree: str) -> None:
    cases = json.loads(sys.stdin.read())
    from sglforge.construct import fakes

    fakes.install_fakes()
    sys.path.insert(0, tree)
    logging.disable(logging.WARNING)
    out = {}
    for case in cases:
        try:
            out[case["id"]] = run_case(case)
        except Exception:  # one broken case must not hide the others' answers
            out[case["id"]] = {"error": "".join(traceback.format_exc().splitlines(True)[-12:])}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
