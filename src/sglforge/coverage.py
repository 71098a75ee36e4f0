"""Which tuned fused-MoE rows a launch will use, known before a GPU runs (issue 21).

The shapes come from running the pinned sglang's own construction (:mod:`sglforge.construct`):
every fused-MoE layer of the main model and of the MTP draft as built for the scenario's flags,
and the token counts its CUDA-graph runners and chunked prefill run. They are resolved with
the lookup rule of the base's own aiter (:mod:`sglforge.aiter_rules` reads it from the base's
``aiter/fused_moe.py``: key columns, token bucket, fallbacks; the base's tables carry it as
``BaseTables.aiter``). Without one, the rule of ROCm/aiter 9127c94a18e4 applies, and the report
says so. Which aiter sglang 0.5.14's image builds is not established (docs/aiter-tuned-configs.md,
"The image's aiter"). That commit's rule, lines of that commit:

- the key (``aiter/fused_moe.py:1176-1191``, index columns ``:1065-1080``): ``gfx, cu_num,
  token, model_dim, inter_dim, expert, topk, act_type, dtype, q_dtype_a, q_dtype_w, q_type,
  use_g1u1, doweight_stage1`` (7d604afe5fa7's index, ``:981-995``, has no ``gfx``);
  ``topk -= 1`` with expert parallelism (``:1175``); a row with a non-empty ``_tag`` is not a
  tuned row (``:1101-1102``); a row without ``gfx`` gets it from ``cu_num`` (``:1082-1094``); an
  ``act_type`` mismatch still hits the act-disabled fallback dict (``:1113-1126``,
  ``:1234-1236``);
- the shape: ``E, model_dim, inter_dim = get_inter_dim(w1.shape, w2.shape)`` (``:251-257``,
  called at ``:389``): ``E = w2.shape[0]``, ``inter_dim = w2.shape[2] * (model_dim //
  w1.shape[-1])``; ``topk = topk_ids.shape[1]`` (``:388``); ``use_g1u1 = inter_dim !=
  w1.shape[1]`` (``:395``); ``q_dtype_w = q_dtype_a = w1.dtype`` for MXFP4 with SiLU
  (``:407-408``, ``:418-425``);
- the bucket: ``get_padded_M`` (``:858-864``): below 32768 the next power of two, from 131072
  the tier 131072, else 32768; a tier with no row falls back to the smaller tiers
  (``:1238-1250``);
- the merge (``aiter/jit/core.py:345-368``): without ``AITER_CONFIG_FMOE``, ``tuned_fmoe.csv``
  plus every ``model_configs/*tuned_fmoe*.csv`` not named ``untuned`` (the queue's items are
  installed there); with it, only the files it names (one path replaces the defaults).

The MoE's side of the key is sglang's (0.5.14 lines): the Quark MXFP4 scheme passes
``QuantType.per_1x32`` and views its weights as ``torch.float4_e2m1fn_x2``
(``srt/layers/quantization/quark/schemes/quark_w4a4_mxfp4_moe.py:276-291``), the aiter runner
maps the activation (``srt/layers/moe/moe_runner/aiter.py:97-100``) and leaves
``doweight_stage1`` False (``:58``); the output dtype is the model's (bf16).
tests/unit/test_coverage.py keeps these citations honest against the aiter commit when a clone
is present, and the integration test compares the shapes with what 0.5.14 and 0.5.16 build.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglforge import construct
from sglforge.aiter_rules import AiterRule, Buckets, default_rule
from sglforge.errors import ConfigError
from sglforge.queue.configs import BaseTables, ConfigItem, render, unfit_rows
from sglforge.targets import Device, device_of_gfx

if TYPE_CHECKING:
    from sglforge.project import Project
    from sglforge.scenario.file import AcceptedMiss, Scenario
    from sglforge.targets import BuildTarget

TUNED_BASE, TUNED_ITEM, MISS = "tuned-base", "tuned-item", "miss"
# aiter/jit/utils/chip_info.py gfx_from_cu_num: 256 -> gfx950 (MI355X), 304/80 -> gfx942.
CU_NUM = {"gfx950": 256, "gfx942": 304}
# What an sglang MoE scheme hands aiter: (q_type, weight dtype as aiter sees it).
SCHEMES = {"QuarkW4A4MXFp4MoE": ("QuantType.per_1x32", "torch.float4_e2m1fn_x2")}
ACTIVATIONS = {"silu": "ActivationType.Silu", "gelu": "ActivationType.Gelu"}


@dataclass(frozen=True)
class Shape:
    """One fused-MoE problem as aiter keys it (everything but gfx, cu_num and the token)."""

    model_dim: int
    inter_dim: int
    expert: int
    topk: int
    act_type: str
    dtype: str
    q_dtype_a: str
    q_dtype_w: str
    q_type: str
    use_g1u1: int
    doweight_stage1: int


@dataclass(frozen=True)
class Lookup:
    """Tokens of one shape that resolve the same way (the JSON contract's ``lookups`` entry)."""

    model: str  # "main" or "draft"
    layers: tuple[str, ...]  # module prefixes of the fused-MoE layers with this shape
    shape: Shape
    tokens: tuple[int, ...]  # aiter buckets
    status: str  # tuned-base | tuned-item | miss
    file: str | None  # the table that answers (None for a miss)
    hot: bool  # the main model's layers at decode and prefill buckets

    def to_dict(self) -> dict[str, Any]:
        s = self.shape
        return {
            "model": self.model,
            "layers": list(self.layers),
            "model_dim": s.model_dim,
            "inter_dim": s.inter_dim,
            "expert": s.expert,
            "topk": s.topk,
            "tokens": list(self.tokens),
            "dtype": s.dtype,
            "q_dtype_a": s.q_dtype_a,
            "q_dtype_w": s.q_dtype_w,
            "q_type": s.q_type,
            "act_type": s.act_type,
            "use_g1u1": s.use_g1u1,
            "doweight_stage1": s.doweight_stage1,
            "status": self.status,
            "file": self.file,
            "hot": self.hot,
        }


@dataclass(frozen=True)
class Coverage:
    """Every fused-MoE lookup of one launch, resolved against the image's tables."""

    gfx: str
    cu_num: int
    sglang: str  # the release tree the shapes came from
    tables: tuple[str, ...]  # the files aiter merges, in order
    lookups: tuple[Lookup, ...]
    notes: tuple[str, ...] = field(default=())
    aiter: AiterRule = field(default_factory=default_rule)  # whose lookup rule was applied
    environment: construct.TargetEnv | None = None  # the node's variables of the construction

    @property
    def misses(self) -> int:
        return sum(len(x.tokens) for x in self.lookups if x.status == MISS)

    def hot_misses(self) -> list[Lookup]:
        return [x for x in self.lookups if x.hot and x.status == MISS]

    def to_dict(self) -> dict[str, Any]:
        return {
            "gfx": self.gfx,
            "cu_num": self.cu_num,
            "sglang": self.sglang,
            "aiter_rules": f"ROCm/aiter {self.aiter.commit}" if self.aiter.commit else None,
            "aiter": self.aiter.to_dict(),
            "tables": list(self.tables),
            "lookups": [x.to_dict() for x in self.lookups],
            "misses": self.misses,
            "hot_misses": sum(len(x.tokens) for x in self.hot_misses()),
            "notes": list(self.notes),
            "environment": self.environment.to_dict() if self.environment else None,
        }


@dataclass(frozen=True)
class Layer:
    """One fused-MoE layer as sglang built it, in aiter's terms."""

    model: str
    module: str
    shape: Shape | None  # None: a scheme whose aiter key tail sglforge does not know
    scheme: str | None
    ep: bool


def layers_of(model: str, built: construct.Model, dtype: str) -> list[Layer]:
    """aiter's view of every fused-MoE layer ``built`` holds (the module docstring's rules)."""
    out = []
    for moe in built.moe:
        w1, w2 = moe.get("w13_shape"), moe.get("w2_shape")
        scheme = moe.get("scheme")
        known = SCHEMES.get(scheme or "")
        act = ACTIVATIONS.get(str(moe.get("activation") or "silu"))
        ep = int(moe.get("moe_ep_size") or 1) > 1
        if not (w1 and w2 and known and act):
            out.append(Layer(model, moe["module"], None, scheme, ep))
            continue
        expert, model_dim, inter = int(w2[0]), int(w2[1]), int(w2[2])
        inter *= model_dim // int(w1[-1])
        q_type, q_dtype = known
        shape = Shape(
            model_dim=model_dim,
            inter_dim=inter,
            expert=expert,
            # topk_ids carries the fake EP slot that aiter strips again (fused_moe.py:1175).
            topk=int(moe["top_k"]),
            act_type=act,
            dtype=dtype,
            q_dtype_a=q_dtype,
            q_dtype_w=q_dtype,
            q_type=q_type,
            use_g1u1=int(inter != int(w1[1])),
            doweight_stage1=0,
        )
        out.append(Layer(model, moe["module"], shape, scheme, ep))
    return out


def token_buckets(
    tokens: Mapping[str, Any], buckets: Buckets | None = None
) -> tuple[list[int], list[int]]:
    """(decode buckets, prefill buckets) aiter is asked for, from sglang's token counts:
    decode at every CUDA-graph size, prefill at any count up to the chunk (``buckets``: the
    base's aiter's ``get_padded_M``)."""
    pad = buckets or default_rule().buckets
    per_bs = [int(v) for v in (tokens.get("tokens_per_bs") or {"decode": 1}).values()]
    capture = [int(b) for b in tokens.get("capture_bs") or [1]]
    decode = sorted({pad(b * n) for b in capture for n in per_bs})
    chunk = int(tokens.get("chunked_prefill_size") or 0)
    top = chunk if chunk > 0 else max(capture) * max(per_bs)
    # The bucket is a step function that changes only after 1, a power of two, a tier or the
    # cap, so these counts reach every bucket 1..top reaches.
    counts = {1, top, *pad.tiers, *([pad.cap] if pad.cap else [])}
    counts |= {1 << e for e in range(top.bit_length() + 1)}
    prefill = sorted({pad(m) for m in counts if 1 <= m <= top})
    return decode, prefill


@dataclass(frozen=True)
class Table:
    """One file aiter merges: where it came from and its tuned rows by key."""

    name: str  # shown: model_configs/<file> or patches/configs/<item>.csv
    status: str  # tuned-base | tuned-item
    rows: Mapping[tuple[Any, ...], Mapping[str, str]]


def _norm_int(value: str) -> int | str:
    low = (value or "").strip().lower()
    if low in ("true", "false"):
        return int(low == "true")
    try:
        return int(float(low))
    except ValueError:
        return (value or "").strip()


_INT_COLUMNS = frozenset(
    ("cu_num", "token", "model_dim", "inter_dim", "expert", "topk", "use_g1u1", "doweight_stage1")
)
# aiter/jit/utils/chip_info.py gfx_from_cu_num (9127c94a18e4): 256 -> gfx950, 304/80 -> gfx942.
_GFX_OF_CU = {256: "gfx950", 304: "gfx942", 80: "gfx942"}


def _key(record: Mapping[str, str], rule: AiterRule) -> tuple[Any, ...]:
    """A table row's key in ``rule``'s columns, normalised as pandas reads them."""
    out: list[Any] = []
    for column in rule.key:
        value = record.get(column, "")
        if column in _INT_COLUMNS:
            out.append(_norm_int(value))
        elif column == "gfx":
            gfx = (value or "").strip()
            if gfx in ("", "0", "nan", "None") and rule.gfx_from_cu:
                cu = _norm_int(record.get("cu_num", ""))
                gfx = _GFX_OF_CU.get(cu if isinstance(cu, int) else -1, "")
            out.append(gfx)
        else:
            out.append((value or "").strip())
    return tuple(out)


def _table(
    name: str, status: str, records: Iterable[Mapping[str, str]], rule: AiterRule | None = None
) -> Table:
    rule = rule or default_rule()
    rows: dict[tuple[Any, ...], Mapping[str, str]] = {}
    for record in records:
        if rule.skips_tagged and (record.get("_tag") or "").strip():
            continue  # tagged rows (e.g. flydsl_fallback) are not tuned rows
        rows.setdefault(_key(record, rule), record)
    return Table(name, status, rows)


def merged_tables(
    base: BaseTables, items: Sequence[ConfigItem], env: Mapping[str, str] | None = None
) -> tuple[list[Table], list[str]]:
    """The files the image's aiter merges for tuned_fmoe (base's and items'), and notes."""
    import csv
    import io

    rule = base.aiter or default_rule()
    by_source: dict[str, list[Mapping[str, str]]] = {}
    for record, source in zip(base.rows, base.sources, strict=True):
        by_source.setdefault(source, []).append(record)
    default = f"{base.table}.csv"
    tables = [_table(f"aiter/configs/{default}", TUNED_BASE, by_source.pop(default, []), rule)]
    models = [
        _table(f"aiter/configs/{s}", TUNED_BASE, r, rule) for s, r in sorted(by_source.items())
    ]
    notes = []
    for item in items:
        records = list(csv.DictReader(io.StringIO(render(item, base).decode())))
        left = unfit_rows(item, base)
        if left:
            notes.append(
                f"{item.name}: {len(left)} row(s) left out, the base's aiter has no column for "
                f"them ({left[0][1]}=...)"
            )
        models.append(_table(item.csv_file, TUNED_ITEM, records, rule))
    chosen = (env or {}).get("AITER_CONFIG_FMOE", "").strip()
    if not chosen:
        return tables + models, notes
    names = [p.strip() for p in chosen.split(":") if p.strip()]
    keep = []
    for table in tables + models:
        installed = Path(table.name).name
        if any(Path(n).name in (installed, Path(table.name).name) for n in names):
            keep.append(table)
    notes.append(
        "AITER_CONFIG_FMOE is set: aiter merges only the files it names (core.py:345-368), "
        "so model_configs/ and the queue's items are not read unless named there"
    )
    return keep, notes


def resolve(
    layers: Sequence[Layer],
    buckets: Mapping[str, tuple[list[int], list[int]]],
    tables: Sequence[Table],
    gfx: str,
    cu_num: int,
    rule: AiterRule | None = None,
) -> list[Lookup]:
    """Every (shape, token) lookup against ``tables``, grouped by shape and answer."""
    grouped: dict[tuple[str, Shape], list[str]] = {}
    unknown: dict[str, list[str]] = {}
    for layer in layers:
        if layer.shape is None:
            unknown.setdefault(layer.model, []).append(layer.module)
            continue
        grouped.setdefault((layer.model, layer.shape), []).append(layer.module)
    out = []
    for (model, shape), modules in grouped.items():
        decode, prefill = buckets[model]
        answers: dict[tuple[str, str | None], list[int]] = {}
        for token in sorted(set(decode) | set(prefill)):
            status, file = _answer(shape, token, tables, gfx, cu_num, rule)
            answers.setdefault((status, file), []).append(token)
        for (status, file), tokens in answers.items():
            out.append(
                Lookup(model, tuple(modules), shape, tuple(tokens), status, file, model == "main")
            )
    return out


def _answer(
    shape: Shape,
    token: int,
    tables: Sequence[Table],
    gfx: str,
    cu_num: int,
    rule: AiterRule | None = None,
) -> tuple[str, str | None]:
    """The table that answers one lookup the way ``rule``'s aiter does: the exact key, then
    the act-disabled key, then (from the first tier on) the smaller tiers, largest first."""
    rule = rule or default_rule()
    tiers = [token]
    pad = rule.buckets.tiers
    if rule.tier_fallback and pad and token > pad[0]:
        at = pad.index(token) if token in pad else -1
        tiers += list(reversed(pad[:at]))
    values: dict[str, Any] = {"gfx": gfx, "cu_num": cu_num, **vars(shape)}
    act = rule.key.index("act_type") if "act_type" in rule.key else None
    for t in tiers:
        values["token"] = t
        exact = tuple(values[c] for c in rule.key)
        for table in tables:
            if exact in table.rows:
                return table.status, table.name
        if not rule.act_fallback or act is None:
            continue
        for table in tables:  # the act_type-disabled fallback dict
            for k in table.rows:
                if k[:act] == exact[:act] and k[act + 1 :] == exact[act + 1 :]:
                    return table.status, table.name
    return MISS, None


def launch_args(args: Sequence[str], model_dir: Path) -> list[str]:
    """A scenario's launch flags for sglang's parser: ``<model>`` is the model folder."""
    return [str(model_dir) if a == "<model>" else "30000" if a == "<port>" else a for a in args]


def read_model(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "config.json"
    try:
        from sglforge.util import read_json

        data = read_json(path)  # bounded: size and nesting (issue 31, E7)
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot read ({exc.strerror})", "--model DIR names the checkpoint folder"
        ) from exc
    except ValueError as exc:
        raise ConfigError(f"{path}: not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a JSON object")
    from sglforge.construct import bounds

    bounds.check(data, str(path))  # sizes that would run the construction away (F7)
    return data


def shapes_of(
    built: construct.Construction, config: Mapping[str, Any], pad: Buckets | None = None
) -> tuple[list[Layer], dict[str, tuple[list[int], list[int]]]]:
    """aiter's view of one construction of ``config``: its layers and token buckets."""
    dtype = {"bfloat16": "torch.bfloat16", "float16": "torch.float16"}.get(
        str(config.get("torch_dtype") or config.get("dtype") or "bfloat16"), "torch.bfloat16"
    )
    layers: list[Layer] = []
    buckets = {}
    for name, model in built.models.items():
        layers += layers_of(name, model, dtype)
        buckets[name] = token_buckets(model.tokens, pad)
    return layers, buckets


def coverage(
    tree: Path,
    model_dir: Path,
    args: Sequence[str],
    base: BaseTables,
    items: Sequence[ConfigItem],
    gfx: str = "gfx950",
    environment: construct.TargetEnv | None = None,
    *,
    device: Device | None = None,
) -> Coverage:
    """Every fused-MoE lookup of the launch, resolved against ``base`` plus ``items``: the
    model folder's ``config.json`` read and the launch constructed here (``configs coverage``,
    ``configs tune``; a publish's candidate has both: :func:`of_construction`).

    ``environment``: the node's variables (``construct.environment.target_env``; default: the
    release image's for ``gfx``): the construction runs with them and aiter's
    ``AITER_CONFIG_FMOE`` is read from them. ``device``: the target's GPU to construct the
    launch for (default: the shipped target of ``gfx``)."""
    environment = _environment(gfx, environment)
    config = read_model(model_dir)
    launch = launch_args(args, model_dir)
    built = construct.build(tree, config, launch, device or device_of_gfx(gfx), environment)
    return of_construction(built, config, tree, base, items, gfx, environment)


def _environment(gfx: str, environment: construct.TargetEnv | None) -> construct.TargetEnv:
    """``environment``, or the release image's for ``gfx``; ConfigError for an unknown gfx
    (checked before any construction runs)."""
    if gfx not in CU_NUM:
        raise ConfigError(f"gfx {gfx!r}: no known CU count (known: {', '.join(sorted(CU_NUM))})")
    if environment is not None:
        return environment
    from sglforge.construct.environment import default_env

    return default_env(gfx)


def of_construction(
    built: construct.Construction,
    config: Mapping[str, Any],
    tree: Path,
    base: BaseTables,
    items: Sequence[ConfigItem],
    gfx: str = "gfx950",
    environment: construct.TargetEnv | None = None,
) -> Coverage:
    """The lookups of a construction already run (``Candidate.construction``) of the model
    ``config`` it was run on (``Candidate.model_config``; the model folder is not read
    again), on ``tree`` in ``environment`` (the construction's), resolved against ``base``
    plus ``items``."""
    environment = _environment(gfx, environment)
    rule = base.aiter or default_rule()
    layers, buckets = shapes_of(built, config, rule.buckets)
    tables, notes = merged_tables(base, items, environment.as_dict())
    if built.config_source:  # transformers' own class, or the fallback and why (never silent)
        notes.append(f"config.json read by {built.config_source}")
    lookups = resolve(layers, buckets, tables, gfx, CU_NUM[gfx], rule)
    for layer in layers:
        if layer.shape is None:
            notes.append(
                f"{layer.model} {layer.module}: quant scheme {layer.scheme}: its aiter key is "
                "not known to sglforge, not resolved"
            )
    if any(layer.ep for layer in layers):
        notes.append("expert parallelism: expert counts are per rank (w2.shape[0])")
        if not rule.strips_ep_slot:
            notes.append(
                "this aiter does not strip the fake expert-parallel slot from topk: its lookups "
                "may ask topk + 1, which sglforge does not model"
            )
    return Coverage(
        gfx=gfx,
        cu_num=CU_NUM[gfx],
        sglang=str(tree),
        tables=tuple(t.name for t in tables),
        lookups=tuple(lookups),
        notes=tuple(notes),
        aiter=rule,
        environment=environment,
    )


def items_for(
    items: Sequence[ConfigItem], target: str | None, version: str | None
) -> list[ConfigItem]:
    """The queue's items a build of ``target`` at sglang ``version`` installs: the build's own
    rule (``overlay_configs.stage``: the target's name, ``item_applies``); None: any."""
    from sglforge.overlay_configs import item_applies

    return [
        item
        for item in items
        if (target is None or item.target == target)
        and (version is None or item_applies(item, version))
    ]


def default_tree(project: Project) -> Path:
    """The patched tree of the pin, as ``sglforge patches apply`` leaves it."""
    from sglforge.patches.apply import worktree_path

    ref = project.queue.pin.ref
    tree = worktree_path(project.root, ref) / "python"
    if not (tree / "sglang" / "srt").is_dir():
        raise ConfigError(
            f"{tree}: no patched sglang tree of the pin {ref}",
            "run `sglforge patches apply` first, or pass --sglang DIR (a release's python/)",
        )
    return tree


def items_of(project: Project, target: BuildTarget | None) -> list[ConfigItem]:
    """The queue's items a build of ``target`` at the pin installs (the build's own choice:
    the target's name; None: every target's)."""
    queue = project.queue
    version = str(queue.pin.version) if queue.pin.version else None
    return items_for(queue.configs, target.name if target else None, version)


def for_scenario(
    project: Project,
    target: BuildTarget | None,
    model_dir: Path,
    scenario: Scenario,
    base: BaseTables,
    tree: Path | None = None,
    gfx: str | None = None,
    base_env: construct.environment.Image | None = None,
) -> Coverage:
    """The coverage of one smoke scenario's launch for ``target`` (resolved by the caller;
    None: the scenario names none) on a base, with the queue's items, in the node's
    environment: the release image's (``base_env``: its ``Env`` and packages, when sglforge
    has the image, else the replica's list), the target's defaults, the scenario's
    ``[container.env]`` (``construct.environment.target_env``, as ``Candidate.environment``).
    The launch is constructed here (``configs coverage``); a publish's gate takes the
    candidate's construction instead (:func:`of_construction`)."""
    from sglforge.construct.environment import target_env

    if gfx is None:
        gfx = target.gpu_arch if target else "gfx950"
    return coverage(
        tree or default_tree(project),
        model_dir,
        scenario.args,
        base,
        items_of(project, target),
        gfx=gfx,
        environment=target_env(gfx, target, scenario, base_env),
        device=target.target.device if target else None,
    )


@dataclass(frozen=True)
class Gate:
    """The publish gate over one coverage: hot misses fail unless the scenario accepts them."""

    coverage: Coverage
    failing: tuple[Lookup, ...]  # hot misses nobody accepted
    accepted: tuple[tuple[Lookup, str], ...]  # (hot miss, the scenario's reason)

    @property
    def passed(self) -> bool:
        return not self.failing

    def summary(self) -> str:
        """One line per failing shape, for the error and the report."""
        return "; ".join(describe(x) for x in self.failing)

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "failing": [x.to_dict() for x in self.failing],
            "accepted": [dict(x.to_dict(), reason=why) for x, why in self.accepted],
            "misses": self.coverage.misses,
            "lookups": len(self.coverage.lookups),
            # whose lookup rule the gate applied: the aiter commit and where it came from
            "aiter": self.coverage.aiter.to_dict(),
        }


def describe(x: Lookup) -> str:
    s = x.shape
    tokens = ",".join(map(str, x.tokens))
    return (
        f"{x.model} model_dim {s.model_dim} inter_dim {s.inter_dim} expert {s.expert} "
        f"topk {s.topk} tokens {tokens}"
    )


def gate(cov: Coverage, accepted: Sequence[AcceptedMiss] = ()) -> Gate:
    """Hot misses (the main model's lookups) fail, except those a ``[[coverage.accept]]`` names
    (model, expert, topk, inter_dim, optional tokens)."""
    failing, allowed = [], []
    for x in cov.hot_misses():
        s = x.shape
        why = None
        for a in accepted:
            same = (a.model, a.expert, a.topk, a.inter_dim) == (
                x.model,
                s.expert,
                s.topk,
                s.inter_dim,
            )
            if same and (not a.tokens or set(x.tokens) <= set(a.tokens)):
                why = a.reason
                break
        if why is None:
            failing.append(x)
        else:
            allowed.append((x, why))
    return Gate(cov, tuple(failing), tuple(allowed))


# aiter's untuned table header (A0 aiter/configs/untuned_fmoe.csv:1): the tuner's input.
UNTUNED_HEADER = (
    "token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type,"
    "use_g1u1,doweight_stage1"
)


def untuned_csv(cov: Coverage, hot_only: bool = False) -> bytes:
    """aiter's untuned CSV with exactly the keys that miss (the input of ``gemm_moe_tune.py
    -i``), one row per (shape, token), in the form of aiter's own untuned tables."""
    lines = [UNTUNED_HEADER]
    seen = set()
    for x in cov.lookups:
        if x.status != MISS or (hot_only and not x.hot):
            continue
        s = x.shape
        for token in x.tokens:
            row = (
                f"{token},{s.model_dim},{s.inter_dim},{s.expert},{s.topk},{s.act_type},{s.dtype},"
                f"{s.q_dtype_a},{s.q_dtype_w},{s.q_type},{s.use_g1u1},{s.doweight_stage1}"
            )
            if row not in seen:
                seen.add(row)
                lines.append(row)
    return ("\n".join(lines) + "\n").encode()
