"""``quant-exclude-unmatched`` and ``fused-shared-expert-dtype`` findings, from what sglang's
own construction built (``sglforge.construct``) and how QuarkConfig's own matching matched."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sglforge.construct.built import Construction, FusedShared, QuarkMatching
from sglforge.scan.findings import FAIL, WARN, Finding

UNMATCHED = "quant-exclude-unmatched"
FUSED = "fused-shared-expert-dtype"


def _quark(config: Mapping[str, Any]) -> dict[str, Any] | None:
    q = config.get("quantization_config")
    return q if isinstance(q, dict) and q.get("quant_method") == "quark" else None


@dataclass(frozen=True)
class _Context:
    """What every finding of one scan says: where, which models, how severe a miss is."""

    config_file: str
    matching: Mapping[str, QuarkMatching]  # by model: main, draft
    built_as: str  # "main: GlmMoeDsaForCausalLM, draft: ..."
    severity: str  # FAIL with an MTP draft built, else WARN
    why: str  # "" or why a miss matters less

    def finding(self, kind: str, severity: str, entry: str, detail: str, hint: str) -> Finding:
        return Finding(kind, severity, self.config_file, None, entry, detail, hint)


def _context(built: Construction, config_file: str) -> _Context:
    has_draft = built.draft is not None
    why = (
        ""
        if has_draft
        else "; the launch builds no MTP draft, so checkpoint MTP weights are not loaded"
    )
    return _Context(
        config_file=config_file,
        matching={k: m.quark for k, m in built.models.items() if m.quark is not None},
        built_as=", ".join(f"{k}: {m.cls}" for k, m in built.models.items()),
        severity=FAIL if has_draft else WARN,
        why=why,
    )


def _excludes(ctx: _Context, quant: dict[str, Any]) -> list[Finding]:
    """An exclude entry that matches no built module."""
    # Entries whose weights land in a module built quantized (see the two lists below).
    harmful = {
        e for a in ctx.matching.values() for w in a["quantized_but_excluded"] for e in w["entries"]
    }
    harmful |= {
        e for a in ctx.matching.values() for s in a["fused_shared"] for e in s["excluded_by"]
    }
    out = []
    for entry in quant.get("exclude") or []:
        if any(a["matched"].get(entry) for a in ctx.matching.values()):
            continue
        if entry in harmful:
            sev, what = ctx.severity, "the weights it names load into a module built quantized"
        else:
            sev, what = WARN, "no module built quantized receives the weights it names"
        out.append(
            ctx.finding(
                UNMATCHED,
                sev,
                entry,
                f"exclude entry matches no module sglang builds ({ctx.built_as}); {what}{ctx.why}",
                "add a queue patch that maps the checkpoint name to sglang's module prefix "
                "(the MTP layer is model.decoder.* in sglang), or fix the export",
            )
        )
    return out


def _keys(ctx: _Context, quant: dict[str, Any]) -> list[Finding]:
    """A layer_quant_config key that no module sglang asks a scheme for matches."""
    return [
        ctx.finding(
            UNMATCHED,
            ctx.severity,
            key,
            f"layer_quant_config key matches no module sglang asks a scheme for "
            f"({ctx.built_as}); those modules get the global scheme instead{ctx.why}",
            "add a queue patch that remaps the key to sglang's module prefix",
        )
        for key in quant.get("layer_quant_config") or {}
        if not any(a["keys"].get(key) for a in ctx.matching.values())
    ]


def _fused_detail(name: str, s: FusedShared) -> tuple[str, str]:
    """(what is wrong, what to do) for a shared expert fused into routed experts of another
    scheme: exported with another scheme, or excluded (unquantized)."""
    head = f"{name} model fuses the shared expert into {s['module']} ({s['scheme']}) but "
    if not s["excluded_by"]:
        return (
            head + f"the checkpoint quantizes it differently ({s['scheme_differs']})",
            "launch with --disable-shared-experts-fusion, or export the shared expert with "
            "the routed experts' scheme",
        )
    return (
        head + f"its checkpoint tensors are unquantized (exclude: {', '.join(s['excluded_by'])}); "
        "the bf16 weights load into a quantized slot",
        "launch with --disable-shared-experts-fusion, or add a queue patch that keeps this "
        "shared expert unfused",
    )


def _misplaced(ctx: _Context) -> list[Finding]:
    """Modules built quantized over unquantized weights, and mis-fused shared experts."""
    out = []
    for name, a in ctx.matching.items():
        for w in a["quantized_but_excluded"]:
            detail = (
                f"{name} model builds {w['module']} as {w['scheme']} but the checkpoint's "
                f"{w['checkpoint']} is unquantized (exclude: {', '.join(w['entries'])}); "
                "loading fails on a shape mismatch"
            )
            hint = "add a queue patch so the exclude lookup sees sglang's name for it"
            out.append(ctx.finding(UNMATCHED, FAIL, w["module"], detail, hint))
        for s in a["fused_shared"]:
            detail, hint = _fused_detail(name, s)
            out.append(ctx.finding(FUSED, FAIL, s["module"], detail, hint))
    return out


def findings(built: Construction, config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """The quant findings of one construction of ``config`` (its config.json)."""
    quant = _quark(config)
    if quant is None:
        return []
    ctx = _context(built, config_file)
    return [*_excludes(ctx, quant), *_keys(ctx, quant), *_misplaced(ctx)]
