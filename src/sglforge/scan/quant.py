"""``quant-exclude-unmatched`` and ``fused-shared-expert-dtype`` findings, from what sglang's
own construction built (``scan.construction``) and how QuarkConfig's own matching matched."""

from __future__ import annotations

from typing import Any

from sglforge.scan.construction import Built
from sglforge.scan.findings import FAIL, WARN, Finding

UNMATCHED = "quant-exclude-unmatched"
FUSED = "fused-shared-expert-dtype"


def _quark(config: dict[str, Any]) -> dict[str, Any] | None:
    q = config.get("quantization_config")
    return q if isinstance(q, dict) and q.get("quant_method") == "quark" else None


def findings(built: Built, config: dict[str, Any], config_file: str) -> list[Finding]:
    quant = _quark(config)
    if quant is None:
        return []
    models = {k: v.get("analysis") or {} for k, v in built.models.items()}
    has_draft = "draft" in models
    where = {k: built.models[k].get("class", k) for k in built.models}
    built_as = ", ".join(f"{k}: {where[k]}" for k in where)
    out: list[Finding] = []
    severity = FAIL if has_draft else WARN
    why = (
        ""
        if has_draft
        else "; the launch builds no MTP draft, so checkpoint MTP weights are not loaded"
    )
    # Entries whose weights land in a module built quantized (see the two lists below).
    harmful = {
        e
        for a in models.values()
        for w in [*a.get("quantized_but_excluded", []), *a.get("fused_shared", [])]
        for e in [*w.get("entries", []), *w.get("excluded_by", [])]
    }
    for entry in quant.get("exclude") or []:
        hits = [p for a in models.values() for p in a.get("matched", {}).get(entry, [])]
        if hits:
            continue
        if entry in harmful:
            sev, what = severity, "the weights it names load into a module built quantized"
        else:
            sev, what = WARN, "no module built quantized receives the weights it names"
        out.append(
            Finding(
                UNMATCHED,
                sev,
                config_file,
                None,
                entry,
                f"exclude entry matches no module sglang builds ({built_as}); {what}{why}",
                "add a queue patch that maps the checkpoint name to sglang's module prefix "
                "(the MTP layer is model.decoder.* in sglang), or fix the export",
            )
        )
    for key in quant.get("layer_quant_config") or {}:
        hits = [m for a in models.values() for m in a.get("keys", {}).get(key, [])]
        if not hits:
            out.append(
                Finding(
                    UNMATCHED,
                    severity,
                    config_file,
                    None,
                    key,
                    f"layer_quant_config key matches no module sglang asks a scheme for "
                    f"({built_as}); those modules get the global scheme instead{why}",
                    "add a queue patch that remaps the key to sglang's module prefix",
                )
            )
    for name, a in models.items():
        for w in a.get("quantized_but_excluded", []):
            out.append(
                Finding(
                    UNMATCHED,
                    FAIL,
                    config_file,
                    None,
                    w["module"],
                    f"{name} model builds {w['module']} as {w['scheme']} but the checkpoint's "
                    f"{w['checkpoint']} is unquantized (exclude: {', '.join(w['entries'])}); "
                    "loading fails on a shape mismatch",
                    "add a queue patch so the exclude lookup sees sglang's name for it",
                )
            )
        for s in a.get("fused_shared", []):
            if not s["excluded_by"]:
                out.append(
                    Finding(
                        FUSED,
                        FAIL,
                        config_file,
                        None,
                        s["module"],
                        f"{name} model fuses the shared expert into {s['module']} "
                        f"({s['scheme']}) but the checkpoint quantizes it differently "
                        f"({s['scheme_differs']})",
                        "launch with --disable-shared-experts-fusion, or export the shared "
                        "expert with the routed experts' scheme",
                    )
                )
                continue
            out.append(
                Finding(
                    FUSED,
                    FAIL,
                    config_file,
                    None,
                    s["module"],
                    f"{name} model fuses the shared expert into {s['module']} ({s['scheme']}) "
                    f"but its checkpoint tensors are unquantized (exclude: "
                    f"{', '.join(s['excluded_by'])}); the bf16 weights load into a quantized slot",
                    "launch with --disable-shared-experts-fusion, or add a queue patch that "
                    "keeps this shared expert unfused",
                )
            )
    return out
