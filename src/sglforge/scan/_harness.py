"""The child process of ``sglforge.scan.construction``: real sglang builds a launch's models.

Run as ``python -m sglforge.scan._harness TREE`` with a JSON request on stdin; prints one JSON
line. TEST DOUBLES here: a fake torch/triton and stub GPU packages
(``sglforge.construct.fakes``, documented there), so that sglang's own constructors run without
a GPU. Everything that decides is sglang's: its argument parser reads the launch flags,
``ModelConfig._config_draft_model`` names the draft class, the registry resolves it,
``loader._get_quantization_config`` builds the real ``QuarkConfig``, ``loader._initialize_model``
builds the modules, ``QuarkConfig.get_quant_method`` (through ``should_ignore_layer`` and its
``fnmatch`` over ``layer_quant_config``) decides each module's scheme, and
``is_deepseek_dsa`` says whether the DSA attention backend serves the launch.

What is recorded, per model (main, draft): every module prefix built, every prefix QuarkConfig
was asked about, each quantizable module's decision, which (mapped) exclude entries and
``layer_quant_config`` keys QuarkConfig's matching matched, and how each original entry is
renamed by the model class's own mapping (``hf_to_sglang_mapper`` and, where the release has
it, ``_resolve_nextn_quant_config``), asked one entry at a time.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import logging
import sys
import types
from typing import Any

UNQUANTIZED = {
    None,
    "UnquantizedLinearMethod",
    "UnquantizedFusedMoEMethod",
    "UnquantizedEmbeddingMethod",
}


def _fakes() -> types.ModuleType:
    """The torch-less doubles sglforge's construction uses (``sglforge.construct.fakes``)."""
    from sglforge.construct import fakes

    return fakes


def _later_release_doubles() -> None:
    """What releases after 0.5.16 read from the stubbed transformers at import time (TEST
    DOUBLES): sglang/srt/utils/hf_transformers_patches.py walks
    ``PretrainedConfig.__class_validators__`` (a list on the real class)."""
    import transformers  # the stub package

    cfg = transformers.PretrainedConfig
    type.__setattr__(cfg, "__class_validators__", [])


def _server_args(argv: list[str]) -> Any:
    """ServerArgs from the launch flags, parsed by sglang's own parser; ``__post_init__`` is
    not run (it needs the checkpoint and a GPU)."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    ns, _unknown = parser.parse_known_args(argv)
    args = object.__new__(ServerArgs)
    for f in dataclasses.fields(ServerArgs):
        if hasattr(ns, f.name):
            value = getattr(ns, f.name)
        elif f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            continue
        object.__setattr__(args, f.name, value)
    return args


def _topology(tp: int) -> Any:
    from sglang.srt.distributed import parallel_state
    from sglang.srt.runtime_context import get_parallel

    from sglforge.construct.child import _group as group  # rank 0 of a group of ``size``

    sizes = dict(
        _WORLD=tp, _TP=tp, _ATTN_TP=tp, _ATTN_CP=1, _MOE_DP=1, _MOE_EP=1, _MOE_TP=tp, _PP=1
    )
    for name, size in sizes.items():
        setattr(parallel_state, name, group(size))
    return get_parallel().override(
        tp_size=tp,
        tp_rank=0,
        pp_size=1,
        pp_rank=0,
        moe_ep_size=1,
        moe_ep_rank=0,
        moe_tp_size=tp,
        moe_tp_rank=0,
        attn_tp_size=tp,
        attn_tp_rank=0,
        attn_cp_size=1,
        attn_cp_rank=0,
        attn_dp_size=1,
        attn_dp_rank=0,
        pp_group=group(1),
    )


class _Recorder:
    """Wraps QuarkConfig's matching (should_ignore_layer, fnmatch) to see what matched."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.asked: list[str] = []
        self.excludes: set[str] = set()
        self.keys: set[str] = set()

    def install(self) -> None:
        import fnmatch as real_fnmatch

        from sglang.srt.layers.quantization.quark import quark, utils

        original = utils.should_ignore_layer

        def should_ignore_layer(layer_name, ignore, *a, **k):  # type: ignore[no-untyped-def]
            ignore = list(ignore)
            if layer_name is not None:
                self.asked.append(layer_name)
                for target in ignore:
                    try:
                        hit = original(layer_name, [target], *a, **k)
                    except ValueError:  # one shard of a fused layer matched, another not
                        hit = True
                    if hit:
                        self.excludes.add(target)
            return original(layer_name, ignore, *a, **k)

        utils.should_ignore_layer = should_ignore_layer
        quark.should_ignore_layer = should_ignore_layer

        def fnmatch(name: str, pattern: str) -> bool:
            hit = real_fnmatch.fnmatch(name, pattern)
            if hit:
                self.keys.add(pattern)
            return hit

        quark.fnmatch = types.SimpleNamespace(fnmatch=fnmatch, fnmatchcase=real_fnmatch.fnmatchcase)


RECORDER = _Recorder()

# What transformers' PretrainedConfig.__init__ sets when config.json leaves a key out (a TEST
# DOUBLE for the config object: sglang reads these attributes unconditionally).
PRETRAINED_DEFAULTS: dict[str, Any] = {
    "pad_token_id": None,
    "bos_token_id": None,
    "eos_token_id": None,
    "sep_token_id": None,
    "decoder_start_token_id": None,
    "tie_word_embeddings": True,
    "is_encoder_decoder": False,
    "is_decoder": False,
    "output_hidden_states": False,
    "output_attentions": False,
    "return_dict": True,
    "torchscript": False,
    "use_bfloat16": False,
    "add_cross_attention": False,
    "tie_encoder_decoder": False,
    "task_specific_params": None,
    "problem_type": None,
    "tokenizer_class": None,
    "prefix": None,
    "finetuning_task": None,
    "chunk_size_feed_forward": 0,
}


def _hf_config(config: dict[str, Any]) -> types.SimpleNamespace:
    return types.SimpleNamespace(**{**PRETRAINED_DEFAULTS, **copy.deepcopy(config)})


def _label(module: Any) -> dict[str, Any]:
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


def _renames(
    cls: Any, quant_config: Any, config: Any, entries: list[str], keys: list[str]
) -> dict[str, Any]:
    """How the model class renames each exclude entry and layer_quant_config key, asked one
    at a time of the class's own mapping code."""
    out: dict[str, Any] = {"excludes": {}, "keys": {}}
    mapper = getattr(cls, "hf_to_sglang_mapper", None)
    resolve = getattr(cls, "_resolve_nextn_quant_config", None)
    for entry in entries:
        names = [entry]
        if mapper is not None and hasattr(quant_config, "apply_weight_name_mapper"):
            one = copy.copy(quant_config)
            one.exclude_layers = [entry]
            one.apply_weight_name_mapper(mapper)
            names = list(one.exclude_layers)
        if resolve is not None:
            one = copy.copy(quant_config)
            one.quant_config = copy.deepcopy(quant_config.quant_config)
            one.quant_config["layer_quant_config"] = {}
            one.exclude_layers = list(names)
            got = resolve(object.__new__(cls), config, one)
            if got is not None:
                names = list(dict.fromkeys([*names, *got.exclude_layers]))
        out["excludes"][entry] = names
    for key in keys:
        mapped = [key]
        if resolve is not None:
            one = copy.copy(quant_config)
            one.quant_config = copy.deepcopy(quant_config.quant_config)
            one.quant_config["layer_quant_config"] = {key: {}}
            one.exclude_layers = []
            got = resolve(object.__new__(cls), config, one)
            if got is not None:
                mapped = list(got.quant_config["layer_quant_config"])
        out["keys"][key] = mapped
    return out


class _Matcher:
    """Which of ``entries`` mark a (checkpoint-named) module excluded, decided one entry at a
    time by sglang's ``should_ignore_layer``; exact entries are looked up first so that
    thousands of per-expert names stay cheap (the lookup only picks which entries to ask)."""

    def __init__(self, entries: list[str], fused: dict[str, list[str]]) -> None:
        from sglang.srt.layers.quantization.quark import utils

        self.ask = utils.should_ignore_layer
        self.fused = dict(fused)
        self.exact = {e for e in entries if not e.startswith("re:")}
        self.regex = [e for e in entries if e.startswith("re:")]

    def _candidates(self, name: str) -> list[str]:
        proj = name.split(".")[-1]
        names = [name, *(name.replace(proj, s) for s in self.fused.get(proj, ()))]
        return [e for e in dict.fromkeys(names) if e in self.exact] + self.regex

    def hits(self, name: str) -> list[str]:
        out = []
        for entry in self._candidates(name):
            try:
                hit = self.ask(name, [entry], fused_mapping=self.fused)
            except ValueError:  # a fused layer with one shard listed: the entry names it
                hit = True
            if hit:
                out.append(entry)
        return out


PROJ = ("gate_proj", "up_proj", "down_proj")  # FusedMoE's checkpoint expert names (gate/up/down)


def _checkpoint_names(
    module: str, label: dict[str, Any], nextn: dict[str, Any] | None, n_routed: int | None
) -> dict[str, list[str]]:
    """The checkpoint module names whose weights sglang's loader puts into ``module``, by part
    (``body``, ``routed``, ``shared``). The loader's renames, at v0.5.14
    python/sglang/srt/models/deepseek_common/deepseek_weight_loader.py: 170-174 (a fused shared
    expert's ``mlp.shared_experts`` -> ``mlp.experts.<n_routed_experts>``) and 178-194 (the
    draft's ``model.layers.<N>`` -> ``model`` for the NextN-specific weights, ``model.decoder``
    for the rest), read backwards; <N> and the NextN names come from the model's own
    ``_initialize_nextn_conf``."""

    def ckpt(name: str) -> str:
        if nextn is None:
            return name
        prefix = str(nextn["layer_prefix"])
        if name.startswith("model.decoder"):
            return prefix + name[len("model.decoder") :]
        if name.startswith("model.") and any(s in name for s in nextn["spec_weight_names"]):
            return prefix + name[len("model") :]
        return name

    base = ckpt(module)
    if label["class"] not in ("FusedMoE",) and not label["class"].endswith("FusedMoE"):
        return {"body": [base]}
    routed = int(n_routed or 0)
    parent = base.rsplit(".", 1)[0]  # ...mlp
    out = {"routed": [f"{base}.{i}.{p}" for i in range(routed) for p in PROJ]}
    if label["fused_shared"]:
        out["shared"] = [f"{parent}.shared_experts.{p}" for p in PROJ]
    return out


def _scheme_differs(quant_config: Any, quant: dict[str, Any], parts: dict[str, list[str]]) -> str:
    """Whether the checkpoint's own Quark config gives the shared expert another scheme than
    the routed experts it is fused with: QuarkConfig's ``_find_matched_config`` and
    ``deep_compare``, asked with the checkpoint's names and its unrenamed config."""
    import torch
    from sglang.srt.layers.quantization.quark import utils

    if not hasattr(quant_config, "_find_matched_config"):
        return ""
    one = copy.copy(quant_config)
    one.quant_config = copy.deepcopy(quant)
    stub = torch.nn.Module()
    try:
        routed = one._find_matched_config(parts["routed"][0], stub)
        for name in parts["shared"]:
            mine = one._find_matched_config(name, stub)
            if not utils.deep_compare(mine, routed):
                theirs, ours = json.dumps(mine, sort_keys=True), json.dumps(routed, sort_keys=True)
                return f"{name}: {theirs} vs the routed experts' {ours}"
    except ValueError as exc:  # a fused shard pair with two schemes
        return str(exc)
    return ""


def _findings_of(
    model: Any,
    modules: dict[str, dict[str, Any]],
    quant: dict[str, Any] | None,
    quant_config: Any,
    nextn: dict[str, Any] | None,
    n_routed: int | None,
    renames: dict[str, Any] | None,
) -> dict[str, Any]:
    """Per model: which original entries match a built module (after the class's renames),
    and which quantized modules hold checkpoint tensors the original excludes mark bf16."""
    if quant_config is None or not quant or quant.get("quant_method") != "quark":
        return {}
    fused = dict(getattr(quant_config, "packed_modules_mapping", {}) or {})
    entries = list(quant.get("exclude") or [])
    # Built prefixes, with each FusedMoE's experts spelled the way the checkpoint names them.
    # (and every prefix QuarkConfig was asked about: a layer's prefix argument is not always
    # its attribute path, e.g. the draft's lm_head is built as model.shared_head.head)
    built: list[str] = [n for n, _ in model.named_modules() if n]
    named = set(built)
    built += [p for p in dict.fromkeys(RECORDER.asked) if p not in named]
    for name, label in modules.items():
        if label["class"].endswith("FusedMoE"):
            built += [f"{name}.{i}.{p}" for i in range(label["experts"]) for p in PROJ]
    matched: dict[str, list[str]] = {}
    renamed = (renames or {}).get("excludes", {})
    by_target: dict[str, str] = {}
    for entry in entries:
        for target in renamed.get(entry, [entry]):
            by_target.setdefault(target, entry)
    matcher = _Matcher(list(by_target), fused)
    for prefix in built:
        for target in matcher.hits(prefix):
            hits = matched.setdefault(by_target[target], [])
            if len(hits) < 3:
                hits.append(prefix)
    original = _Matcher(entries, fused)
    wrong: list[dict[str, Any]] = []
    shared: list[dict[str, Any]] = []
    for name, label in modules.items():
        parts = _checkpoint_names(name, label, nextn, n_routed)
        if label["quantized"] and parts.get("body"):
            for ck in parts["body"]:
                hits = original.hits(ck)
                if hits:
                    wrong.append(
                        {
                            "module": name,
                            "scheme": label["scheme"] or label["method"],
                            "checkpoint": ck,
                            "entries": hits,
                        }
                    )
        if label["quantized"] and parts.get("routed"):
            excluded = sorted({e for ck in parts["routed"] for e in original.hits(ck)})
            if excluded:
                wrong.append(
                    {
                        "module": name,
                        "scheme": label["scheme"] or label["method"],
                        "checkpoint": parts["routed"][0].rsplit(".", 2)[0] + ".*",
                        "entries": excluded,
                    }
                )
        if parts.get("shared"):
            excluded = sorted({e for ck in parts["shared"] for e in original.hits(ck)})
            routed_scheme = label["scheme"] or label["method"]
            differs = _scheme_differs(quant_config, quant, parts)
            if (excluded and label["quantized"]) or differs:
                shared.append(
                    {
                        "module": name,
                        "scheme": routed_scheme,
                        "quantized": label["quantized"],
                        "checkpoint": parts["shared"],
                        "excluded_by": excluded,
                        "scheme_differs": differs,
                    }
                )
    keys = {}
    for key, mapped in (renames or {}).get("keys", {}).items():
        keys[key] = [m for m in mapped if m in RECORDER.keys]
    return {
        "matched": matched,
        "keys": keys,
        "quantized_but_excluded": wrong,
        "fused_shared": shared,
    }


def _build(req: dict[str, Any], draft: bool) -> dict[str, Any]:
    import torch
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig, ModelImpl
    from sglang.srt.model_loader import loader
    from sglang.srt.models.registry import ModelRegistry

    quant = req["config"].get("quantization_config")
    hf_config = _hf_config(req["config"])
    model_config = object.__new__(ModelConfig)
    model_config.__dict__.update(
        hf_config=hf_config,
        hf_text_config=hf_config,
        is_draft_model=draft,
        quantization=(quant or {}).get("quant_method"),
        model_path=req["model_path"],
        revision=None,
        dtype=torch.bfloat16,
        model_impl=ModelImpl.AUTO,
        is_fp4_experts=False,
        nvfp4_moe_meta=None,
    )
    if draft:
        model_config._config_draft_model()
    recorder = RECORDER
    recorder.reset()
    load_config = LoadConfig()
    quant_config = loader._get_quantization_config(model_config, load_config)
    cls, _ = ModelRegistry.resolve_model_cls(hf_config.architectures)
    renames = None
    if quant_config is not None and quant_config.get_name() == "quark":
        entries = list((quant or {}).get("exclude") or [])
        keys = list((quant or {}).get("layer_quant_config") or {})
        fresh = copy.copy(quant_config)
        fresh.exclude_layers = list(entries)
        renames = _renames(cls, fresh, hf_config, entries, keys)
    model = loader._initialize_model(model_config, load_config, quant_config)
    modules = {}
    for name, module in model.named_modules():
        if hasattr(module, "quant_method") or type(module).__name__ in ("Linear",):
            modules[name] = _label(module)
    nextn = None
    if draft and hasattr(model, "_initialize_nextn_conf"):
        conf = model._initialize_nextn_conf(True)
        nextn = {
            "layer_prefix": conf.nextn_layer_prefix,
            "spec_weight_names": list(conf.nextn_spec_weight_names),
        }
    n_routed = getattr(hf_config, "n_routed_experts", None)
    analysis = _findings_of(model, modules, quant, quant_config, nextn, n_routed, renames)
    return {
        "analysis": analysis,
        "architecture": hf_config.architectures[0],
        "class": type(model).__name__,
        "prefixes": sorted(n for n, _ in model.named_modules() if n),
        "asked": sorted(set(recorder.asked)),
        "modules": modules,
        "matched_excludes": sorted(recorder.excludes),
        "matched_keys": sorted(recorder.keys),
        "renames": renames,
        "nextn": nextn,
        "n_routed_experts": getattr(hf_config, "n_routed_experts", None),
    }


def main(tree: str) -> None:
    req = json.loads(sys.stdin.read())
    fakes = _fakes()
    fakes.install_fakes()
    _later_release_doubles()
    sys.path.insert(0, tree)
    logging.disable(logging.WARNING)
    from sglang.srt.configs.model_config import is_deepseek_dsa
    from sglang.srt.server_args import set_global_server_args_for_scheduler

    RECORDER.install()
    args = _server_args(req["launch"])
    set_global_server_args_for_scheduler(args)
    hf = _hf_config(req["config"])
    out: dict[str, Any] = {
        "launch": {
            "tp_size": args.tp_size,
            "speculative_algorithm": args.speculative_algorithm,
            "speculative_num_steps": args.speculative_num_steps,
            "disable_shared_experts_fusion": args.disable_shared_experts_fusion,
            "attention_backend": args.attention_backend,
        },
        "dsa": bool(is_deepseek_dsa(hf)),
        "models": {},
    }
    with _topology(int(args.tp_size or 1)):
        out["models"]["main"] = _build(req, draft=False)
        if args.speculative_algorithm and req["config"].get("num_nextn_predict_layers"):
            out["models"]["draft"] = _build(req, draft=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
