"""The construction child: ``python -m sglforge.construct.child TREE`` (one program for all).

Reads ``{"device": ..., "requests": [...]}`` (JSON) on stdin, installs the shims
(:mod:`sglforge.construct.shims`: torch and the GPU stack stand-ins, describing the target's
device), imports the release's own sglang from ``TREE`` (a release's ``python/`` folder) and,
per request:

1. parses the launch flags with sglang's own parser (``ServerArgs.add_cli_args``) and runs the
   real ``ServerArgs.__post_init__`` on them. Two things a launch reads from the machine are
   handed in: the checkpoint's config (sglang's own ``get_config`` and config parser run, with
   ``transformers.AutoConfig.from_pretrained`` answering with transformers' own reading of
   config.json from the config-only child, ``request["hf"]``: :func:`hfconfig.resolved`; without
   one, ``get_config`` answers with :class:`hfconfig.HFConfig`) and the GPU memory
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
import copy
import importlib
import inspect
import json
import logging
import sys
import traceback
import types
from pathlib import Path, PurePosixPath

from sglforge.construct import quark
from sglforge.construct.hfconfig import HFConfig, Resolved, resolved
from sglforge.construct.quark import RECORDER

UNQUANTIZED = {
    None,
    "UnquantizedLinearMethod",
    "UnquantizedFusedMoEMethod",
    "UnquantizedEmbeddingMethod",
}


def _config(request: dict, model_path: str = ""):
    """The checkpoint's config object: transformers' own resolution (the config child's
    record, ``request["hf"]``), else sglforge's reading of config.json (``HFConfig``)."""
    record = request.get("hf")
    if record:
        return resolved(record, model_path)
    return HFConfig(**request["config"])


_SGLANG = {}  # sglang's own get_config and the stub AutoConfig, as first found
_SERVING = {}  # the request whose config transformers' stand-in answers with


class _AutoConfig:
    """``transformers.AutoConfig`` in the sglang child: answers ``from_pretrained`` with
    transformers' own reading of the request's config.json (the config child's record)."""

    @staticmethod
    def from_pretrained(model, *a, **k):
        return resolved(_SERVING["request"]["hf"], str(model))


def _raw_config_dict(cls, model, *a, **k):
    """``PretrainedConfig.get_config_dict``: the checkpoint's config.json as written."""
    return copy.deepcopy(_SERVING["request"]["config"]), {}


def _hand_in(request: dict, gpu: dict) -> None:
    import sglang.srt.configs.model_config as model_config
    import sglang.srt.server_args as server_args

    # 0.5.23 also reads the config while resolving the arguments, through its own import of
    # get_config (srt/arg_groups/muse_spark_hook.py:10, called from pipeline.py:122): every
    # loaded sglang module holding that function gets the answer.
    try:
        importlib.import_module("sglang.srt.arg_groups.pipeline")
    except ImportError:
        pass  # older releases: no argument pipeline
    original = model_config.get_config
    real = _SGLANG.setdefault("get_config", original)
    _SERVING["request"] = request
    if request.get("hf"):
        # sglang's own get_config and config parser run (its per-model fix-ups, the text
        # config, rope_scaling's compatibility "type"), on transformers' own reading
        import transformers  # the stub package: its AutoConfig and PretrainedConfig serve

        stub = _SGLANG.setdefault("AutoConfig", transformers.AutoConfig)
        _everywhere("AutoConfig", stub, _AutoConfig)
        type.__setattr__(
            transformers.PretrainedConfig, "get_config_dict", classmethod(_raw_config_dict)
        )

        def answer(*a, **k):
            getattr(real, "cache_clear", lambda: None)()  # another request, the same path
            return real(*a, **k)

    else:

        def answer(model="", *a, **k):
            return HFConfig(**request["config"])

    model_config.get_config = answer
    _everywhere("get_config", (original, real), answer)
    model_config.get_hf_text_config = lambda c: c
    model_config.get_generation_config = lambda *a, **k: None
    memory_mib = float(int(gpu["memory_gib"]) * 1024)
    # 0.5.23 reads it in arg_groups/memory_hook.py:78 (its own import) as well.
    _config_as_mapping()
    name = "get_device_memory_capacity"
    common = sys.modules.get("sglang.srt.utils.common")
    found = (getattr(server_args, name, None), getattr(common, name, None))
    if found[0] is not None:  # server_args imported it (0.5.14): its own name, as before
        setattr(server_args, name, lambda *a, **k: memory_mib)
    _everywhere(name, found, lambda *a, **k: memory_mib)


def _config_as_mapping() -> None:
    """0.5.23 reads the quantization metadata from ``PretrainedConfig.to_dict()``
    (srt/model_loader/checkpoint_quantization.py:42-50); transformers is a stub here, so the
    config handed in (either form) is given as the mapping of its fields."""
    try:
        cq = importlib.import_module("sglang.srt.model_loader.checkpoint_quantization")
    except ImportError:
        return  # older releases read the attribute directly
    original = getattr(cq, "_as_config_mapping", None)
    if original is None:
        return  # 0.5.19's module reads each field with getattr (_get_field): nothing to give

    def as_mapping(value, source):
        return (
            dict(vars(value))
            if isinstance(value, (HFConfig, Resolved))
            else original(value, source)
        )

    cq._as_config_mapping = as_mapping


def _everywhere(name: str, originals, new) -> None:
    """``new`` for ``name`` in every loaded sglang module that holds one of ``originals``."""
    if not isinstance(originals, tuple):
        originals = (originals,)
    originals = tuple(o for o in originals if o is not None)
    for mod_name, module in list(sys.modules.items()):
        if mod_name.startswith("sglang") and any(
            getattr(module, name, None) is o for o in originals
        ):
            setattr(module, name, new)


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
    params = list(inspect.signature(compute_dp_attention_world_info).parameters)
    if params[0] == "enable_dp_attention":  # 0.5.14 (srt/layers/dp_attention.py:245)
        _, attn_tp, _, attn_dp = compute_dp_attention_world_info(
            sa.enable_dp_attention, 0, tp, sa.dp_size
        )
    else:  # 0.5.22, 0.5.23 (:401): (tp_rank, tp_size, attn_dp_size); the caller applies DP
        attn_dp_size = sa.dp_size if sa.enable_dp_attention else 1
        _, attn_tp, _, attn_dp = compute_dp_attention_world_info(0, tp, attn_dp_size)
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
    values = dict(
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
    # 0.5.23 reads the groups through the same context (moe_tp_group, tp_group, ...;
    # srt/runtime_context.py _parallel_fields): each known *_group, as wide as its *_size.
    import sglang.srt.runtime_context as context

    fields = getattr(context, "_parallel_fields", None)
    for field in sorted(fields() if fields is not None else ()):
        if field.endswith("_group") and field not in values:
            values[field] = _group(int(values.get(field.removesuffix("_group") + "_size", 1)))
    return facts, get_parallel().override(**values)


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


def _check_registered(registry, architectures: list) -> None:
    """Say why none of ``architectures`` is registered, before sglang falls back to its
    transformers backend: the registry hides a model module's import error (0.5.23
    ``srt/models/registry.py:127-132`` logs "Ignore import error" and skips it; this child
    silences warnings), and then ``model_loader/utils.py:226-231`` routes the checkpoint to
    ``TransformersForCausalLM``. Either the release has no class of that name (upstream does
    not serve the model natively) or the module defining it failed to import here."""
    import importlib
    import pkgutil

    supported = registry.get_supported_archs()  # 0.5.14 and 0.5.23 alike
    if not architectures or any(a in supported for a in architectures):
        return
    import sglang.srt.models as package

    for info in pkgutil.iter_modules(package.__path__, "sglang.srt.models."):
        path = getattr(info.module_finder, "path", "")
        source = f"{path}/{info.name.rsplit('.', 1)[-1]}.py"
        try:
            with open(source) as f:
                text = f.read()
        except OSError:
            continue
        for arch in architectures:
            if f"class {arch}(" in text:
                try:
                    importlib.import_module(info.name)
                except Exception as exc:
                    where = traceback.extract_tb(exc.__traceback__)[-1]
                    raise RuntimeError(
                        f"{arch} is defined in {info.name}, which failed to import under the "
                        f"construction's stand-ins ({type(exc).__name__}: {exc}, at "
                        f"{where.filename}:{where.lineno}); sglang would fall back to its "
                        "transformers backend"
                    ) from exc
    raise RuntimeError(
        f"this sglang release defines no model class {', '.join(architectures)}: it does not "
        "serve the model natively (it falls back to its transformers backend, "
        "srt/model_loader/utils.py get_model_architecture)"
    )


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
    # before the quantization config: 0.5.19 resolves the model class there already
    # (model_loader/loader.py:171 -> utils.py:230), and falls back the same silent way
    _check_registered(ModelRegistry, list(hf_config.architectures or ()))
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
    rope = getattr(hf_config, "rope_scaling", None)
    return {
        "architecture": hf_config.architectures[0],
        "class": type(model).__name__,
        "config_class": type(hf_config).__name__,
        "rope_scaling": dict(rope) if isinstance(rope, dict) else None,
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

    raw, sa = sa, _resolved(sa)
    spec = SpeculativeAlgorithm.from_string(sa.speculative_algorithm)
    decode_bs = list(sa.cuda_graph_config.decode.bs)
    # req_to_token_pool.size comes from memory profiling at start-up (unknown here): taken as
    # the largest configured capture size, so nothing is clamped away.
    runner = types.SimpleNamespace(
        server_args=raw, req_to_token_pool=types.SimpleNamespace(size=max(decode_bs))
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
        # 0.5.14 spec_info.py:183 ..._per_bs_...; 0.5.23 renamed it ..._per_req_...
        # (called from speculative/spec_utils.py:105-107).
        per = getattr(spec, "get_num_tokens_per_req_for_target_verify", None)
        per = per or spec.get_num_tokens_per_bs_for_target_verify
        verify = per(sa.speculative_num_draft_tokens, draft)
        out["tokens_per_bs"] = (
            {"draft_decode": int(sa.speculative_eagle_topk or 1)}
            | {"draft_extend": int(sa.speculative_num_draft_tokens)}
            if draft
            else {"target_verify": int(verify)}
        )
    else:
        out["tokens_per_bs"] = {"decode": 1}
    return out


def _resolved(sa):
    """What the arguments resolved to: 0.5.23 keeps what its resolution pipeline decided in a
    declaration overlay read through ``resolved_view`` (srt/arg_groups/model_override_base.py:
    133-135), not on the record; older releases set the record itself."""
    try:
        from sglang.srt.arg_groups.model_override_base import resolved_view
    except ImportError:
        return sa
    return resolved_view(sa)


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


def _local_checkpoint(request: dict) -> dict:
    """The request with its ``--model-path`` a local folder holding its config.json, under this
    child's empty working folder and ending in the launch's own path (a name sglang may read).
    On the node the scenario mounts the checkpoint there, so sglang finds it local; a path that
    does not exist here sends it to the Hub instead (0.5.23 ``srt/configs/model_config.py:1751``
    ``_parse_quant_hf_config`` for a config without ``quantization_config``), where the stubbed
    ``huggingface_hub`` fails (``except huggingface_hub.errors...``: a TypeError)."""
    launch = list(request["launch"])
    for i, arg in enumerate(launch):
        name, eq, value = arg.partition("=")
        if name != "--model-path" or (not eq and i + 1 >= len(launch)):
            continue
        value = value if eq else launch[i + 1]
        parts = [p for p in PurePosixPath(value).parts if p not in ("/", ".", "..")]
        folder = Path.cwd().joinpath("checkpoint", *parts)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(request["config"]))
        if eq:
            launch[i] = f"--model-path={folder}"
        else:
            launch[i + 1] = str(folder)
    return {**request, "launch": launch}


def run_request(request: dict, gpu: dict) -> dict:
    from sglang.srt.configs.model_config import is_deepseek_dsa

    request = _local_checkpoint(request)
    config = request["config"]
    _hand_in(request, gpu)
    sa = _server_args(request["launch"])
    launch = _launch(sa)  # as the parser and __post_init__ left it, before a model decides
    facts, topology = _topology(sa)
    with topology:
        models = {m: _build(sa, config, m == "draft") for m in _models(sa, request)}
    return {
        "launch": launch,
        "dsa": bool(is_deepseek_dsa(_config(request, sa.model_path))),
        "parallel": facts,
        "models": models,
    }


def main(tree: str) -> None:
    doc = json.loads(sys.stdin.read())
    from sglforge.construct import shims

    shims.install(doc["device"], doc.get("packages") or {})
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
