"""How QuarkConfig's own matching matched a checkpoint's excludes (construction child side).

Everything that decides is sglang's: ``QuarkConfig.get_quant_method`` (through
``should_ignore_layer`` and its ``fnmatch`` over ``layer_quant_config``) decides each module's
scheme; :class:`Recorder` wraps those two to see what matched. Per model this records which
original exclude entries match a built module (after the model class's own renames,
``hf_to_sglang_mapper`` and, where the release has it, ``_resolve_nextn_quant_config``, asked
one entry at a time), which modules built quantized hold checkpoint tensors the excludes mark
unquantized, and which fused shared experts have another scheme than their routed experts.
The record's shape is ``sglforge.construct.built.QuarkMatching``.
"""

# mypy: ignore-errors

from __future__ import annotations

import copy
import json
import types


class Recorder:
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

        def should_ignore_layer(layer_name, ignore, *a, **k):
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


RECORDER = Recorder()


def _renamed_excludes(cls, quant_config, config, entries: list[str]) -> dict[str, list[str]]:
    mapper = getattr(cls, "hf_to_sglang_mapper", None)
    resolve = getattr(cls, "_resolve_nextn_quant_config", None)
    out = {}
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
        out[entry] = names
    return out


def _renamed_keys(cls, quant_config, config, keys: list[str]) -> dict[str, list[str]]:
    resolve = getattr(cls, "_resolve_nextn_quant_config", None)
    out = {}
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
        out[key] = mapped
    return out


def renames(cls, quant_config, config, quant: dict) -> dict | None:
    """How the model class renames each exclude entry and layer_quant_config key, asked one
    at a time of the class's own mapping code (None: not a Quark checkpoint)."""
    if quant_config is None or quant_config.get_name() != "quark":
        return None
    entries = list(quant.get("exclude") or [])
    fresh = copy.copy(quant_config)
    fresh.exclude_layers = list(entries)
    keys = list(quant.get("layer_quant_config") or {})
    return {
        "excludes": _renamed_excludes(cls, fresh, config, entries),
        "keys": _renamed_keys(cls, fresh, config, keys),
    }


class Matcher:
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


def _is_moe(label: dict) -> bool:
    return label["class"].endswith("FusedMoE")


def checkpoint_names(module: str, label: dict, nextn: dict | None, n_routed) -> dict:
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
    if not _is_moe(label):
        return {"body": [base]}
    parent = base.rsplit(".", 1)[0]  # ...mlp
    out = {"routed": [f"{base}.{i}.{p}" for i in range(int(n_routed or 0)) for p in PROJ]}
    if label["fused_shared"]:
        out["shared"] = [f"{parent}.shared_experts.{p}" for p in PROJ]
    return out


def _scheme_differs(quant_config, quant: dict, parts: dict) -> str:
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


def _matched(model, modules: dict, entries: list[str], fused: dict, renamed: dict) -> dict:
    """Exclude entry -> (up to 3) built prefixes it matches after the class's renames."""
    # Built prefixes, with each FusedMoE's experts spelled the way the checkpoint names them
    # (and every prefix QuarkConfig was asked about: a layer's prefix argument is not always
    # its attribute path, e.g. the draft's lm_head is built as model.shared_head.head).
    built = [n for n, _ in model.named_modules() if n]
    named = set(built)
    built += [p for p in dict.fromkeys(RECORDER.asked) if p not in named]
    for name, label in modules.items():
        if _is_moe(label):
            built += [f"{name}.{i}.{p}" for i in range(label["experts"]) for p in PROJ]
    by_target: dict[str, str] = {}
    for entry in entries:
        for target in renamed.get(entry, [entry]):
            by_target.setdefault(target, entry)
    matcher = Matcher(list(by_target), fused)
    matched: dict[str, list[str]] = {}
    for prefix in built:
        for target in matcher.hits(prefix):
            hits = matched.setdefault(by_target[target], [])
            if len(hits) < 3:
                hits.append(prefix)
    return matched


def _excluded(name: str, label: dict, parts: dict, original: Matcher) -> list[dict]:
    """The quantized module's checkpoint tensors that the original excludes mark bf16."""
    if not label["quantized"]:
        return []
    scheme = label["scheme"] or label["method"]
    out = []
    for ck in parts.get("body", []):
        hits = original.hits(ck)
        if hits:
            out.append({"module": name, "scheme": scheme, "checkpoint": ck, "entries": hits})
    if parts.get("routed"):
        excluded = sorted({e for ck in parts["routed"] for e in original.hits(ck)})
        if excluded:
            where = parts["routed"][0].rsplit(".", 2)[0] + ".*"
            out.append({"module": name, "scheme": scheme, "checkpoint": where, "entries": excluded})
    return out


def _fused_shared(name, label, parts, original, quant_config, quant) -> dict | None:
    if not parts.get("shared"):
        return None
    excluded = sorted({e for ck in parts["shared"] for e in original.hits(ck)})
    differs = _scheme_differs(quant_config, quant, parts)
    if not ((excluded and label["quantized"]) or differs):
        return None
    return {
        "module": name,
        "scheme": label["scheme"] or label["method"],
        "quantized": label["quantized"],
        "checkpoint": parts["shared"],
        "excluded_by": excluded,
        "scheme_differs": differs,
    }


def matching(model, modules: dict, quant: dict | None, quant_config, facts: dict) -> dict | None:
    """Per model (``facts``: ``nextn``, ``n_routed``, ``renames``): which original entries
    match a built module, and which quantized modules hold checkpoint tensors the original
    excludes mark bf16 (a ``QuarkMatching``; None when the checkpoint is not Quark's)."""
    if quant_config is None or not quant or quant.get("quant_method") != "quark":
        return None
    fused = dict(getattr(quant_config, "packed_modules_mapping", {}) or {})
    entries = list(quant.get("exclude") or [])
    renamed = facts["renames"] or {}
    matched = _matched(model, modules, entries, fused, renamed.get("excludes", {}))
    original = Matcher(entries, fused)
    wrong, shared = [], []
    for name, label in modules.items():
        parts = checkpoint_names(name, label, facts["nextn"], facts["n_routed"])
        wrong += _excluded(name, label, parts, original)
        one = _fused_shared(name, label, parts, original, quant_config, quant)
        if one is not None:
            shared.append(one)
    keys = {
        key: [m for m in mapped if m in RECORDER.keys]
        for key, mapped in renamed.get("keys", {}).items()
    }
    return {
        "matched": matched,
        "keys": keys,
        "quantized_but_excluded": wrong,
        "fused_shared": shared,
    }
