#!/usr/bin/env python3
# ruff: noqa: E501  (table rows read best on one line each)
"""Recompute docs/bench.md's H200 table from the four archives in this folder (standard library only).

    python3 bench/data/h200-2026-12-03/analyze.py            # the Markdown tables
    python3 bench/data/h200-2026-12-03/analyze.py --json     # the same figures as JSON

NVIDIA H200, real sglang 0.5.14, a 2-layer DeepSeek-V3-shaped model with random weights: NOT an MI355X,
NOT GLM-5.2. Every figure is per request decode tok/s ((output tokens - 1) / sum of inter-token
latencies) unless named otherwise; a probe is bench_serving's random-ids 400/256, 64 requests at
concurrency 16 (the gate's compared shape); a wave is one closed-loop group of 16 requests in send order.
"""

from __future__ import annotations

import io
import json
import math
import re
import statistics as st
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
WAVE = 16


def _members(archive: str) -> dict[str, bytes]:
    with tarfile.open(HERE / archive) as tar:
        out = {}
        for m in tar.getmembers():
            if m.isfile():
                f = tar.extractfile(m)
                assert f is not None
                out[m.name.lstrip("./")] = f.read()
        return out


def probe(raw: bytes) -> dict[str, object]:
    """One bench_serving --output-details line: the figures the gate could compare."""
    d = json.loads(io.BytesIO(raw).readline())
    speeds = [
        (n - 1) / sum(itl)
        for n, itl in zip(d["output_lens"], d["itls"], strict=True)
        if n > 1 and sum(itl) > 0
    ]
    logs = [math.log(x) for x in speeds]
    waves = [st.fmean(logs[i : i + WAVE]) for i in range(0, len(logs) - WAVE + 1, WAVE)]
    return {
        "decode": math.exp(st.fmean(logs)),
        "waves": [math.exp(w) for w in waves],
        "icc": icc(logs),
        "output_tok_s": d["output_throughput"],
        "median_itl_ms": d["median_itl_ms"],
        "p95_ttft_ms": d["p95_ttft_ms"],
        "logs": logs,
    }


def icc(logs: list[float], size: int = WAVE) -> float:
    groups = [logs[i : i + size] for i in range(0, len(logs) - size + 1, size)]
    k, grand = len(groups), st.fmean(logs)
    msb = size * sum((st.fmean(g) - grand) ** 2 for g in groups) / (k - 1)
    msw = sum(sum((x - st.fmean(g)) ** 2 for x in g) for g in groups) / (k * (size - 1))
    return (msb - msw) / (msb + (size - 1) * msw)


def boots() -> list[dict[str, object]]:
    """Every boot of every run: its ready seconds, its probes in order (the first after the boot first)."""
    out: list[dict[str, object]] = []
    run0 = _members("run0-ceo-10-boots.tgz")
    times = run0["raw/boot-times.txt"].decode()
    ready0 = [float(x) for x in re.findall(r"seconds=([0-9.]+)", times)]
    for b in range(1, 11):
        probes = [
            probe(run0[f"raw/boot{b:02d}-probe{p}.jsonl"])
            for p in (1, 2)
            if f"raw/boot{b:02d}-probe{p}.jsonl" in run0
        ]
        out.append(
            {
                "run": "run0",
                "boot": b,
                "ready_s": ready0[b - 1],
                "fresh_machine": b == 1,
                "affinity": False,
                "probes": probes,
            }
        )
    for run in ("run1", "run2"):
        files = _members(f"{run}-mitigations.tgz")
        lines = files["times.txt"].decode()
        for m in re.finditer(r"boot (\d+) aff=(\d) ready=1 s=([0-9.]+)", lines):
            b = int(m.group(1))
            names = [f"b{b}-{p}.jsonl" for p in "w1234" if f"b{b}-{p}.jsonl" in files]
            out.append(
                {
                    "run": run,
                    "boot": b,
                    "ready_s": float(m.group(3)),
                    "fresh_machine": b == 1,
                    "affinity": m.group(2) == "1",
                    "probes": [probe(files[n]) for n in names],
                }
            )
    return out


def sd(values: list[float]) -> float:
    return st.stdev([math.log(v) for v in values]) if len(values) > 1 else float("nan")


def pooled_within(groups: list[list[float]]) -> tuple[float, int]:
    """Pooled sd (log) of probes within a boot, and its degrees of freedom."""
    ss, df = 0.0, 0
    for g in groups:
        if len(g) > 1:
            logs = [math.log(v) for v in g]
            mean = st.fmean(logs)
            ss += sum((x - mean) ** 2 for x in logs)
            df += len(g) - 1
    return (math.sqrt(ss / df) if df else float("nan")), df


def figures() -> dict[str, object]:
    bs = boots()
    first = [
        b["probes"][0]["decode"] for b in bs
    ]  # the old protocol: the first probe after the boot
    warmed = [
        b["probes"][1]["decode"] for b in bs if len(b["probes"]) > 1
    ]  # one discarded warm-up probe
    merged = [
        math.exp(st.fmean([x for p in b["probes"][1:] for x in p["logs"]]))
        for b in bs
        if len(b["probes"]) > 2
    ]
    within, within_df = pooled_within([[p["decode"] for p in b["probes"][1:]] for b in bs])
    waves_after = [w for b in bs for p in b["probes"][1:] for w in p["waves"]]
    wave_within, wave_df = pooled_within([p["waves"] for b in bs for p in b["probes"][1:]])
    slow_first = [
        b["probes"][1]["decode"] / b["probes"][0]["decode"] - 1 for b in bs if len(b["probes"]) > 1
    ]
    figs = {}
    for name in ("decode", "output_tok_s", "median_itl_ms"):
        vals = [b["probes"][1][name] for b in bs if len(b["probes"]) > 1]
        figs[name] = sd(vals)
    ready = [b["ready_s"] for b in bs]
    fresh = [b["ready_s"] for b in bs if b["fresh_machine"]]
    later = [b["ready_s"] for b in bs if not b["fresh_machine"]]
    return {
        "boots": len(bs),
        "ready_s": {
            "fresh_machine": fresh,
            "later_median": st.median(later),
            "later_range": [min(later), max(later)],
            "all": ready,
        },
        "boot_sd": {
            "first_probe": sd(first),
            "after_warmup": sd(warmed),
            "after_warmup_128_requests": sd(merged),
        },
        "boots_counted": {
            "first_probe": len(first),
            "after_warmup": len(warmed),
            "after_warmup_128_requests": len(merged),
        },
        "probe_sd_within_boot": within,
        "probe_sd_within_boot_df": within_df,
        "wave_sd_within_probe": wave_within,
        "wave_sd_within_probe_df": wave_df,
        "waves_after_warmup": len(waves_after),
        "icc_mean": st.fmean([p["icc"] for b in bs for p in b["probes"]]),
        "icc_range": [
            min(p["icc"] for b in bs for p in b["probes"]),
            max(p["icc"] for b in bs for p in b["probes"]),
        ],
        "warmup_gain": {
            "median": st.median(slow_first),
            "range": [min(slow_first), max(slow_first)],
            "boots": len(slow_first),
        },
        "first_probe_p95_ttft_ms": [b["probes"][0]["p95_ttft_ms"] for b in bs],
        "later_probe_p95_ttft_ms": [p["p95_ttft_ms"] for b in bs for p in b["probes"][1:]],
        "figure_sd_after_warmup": figs,
        "by_machine_first_probe": {
            m: sorted(round(b["probes"][0]["decode"], 1) for b in bs if f"{b['run']}" == m)
            for m in ("run0", "run1", "run2")
        },
        "by_machine_after_warmup": {
            m: sorted(
                round(b["probes"][1]["decode"], 1)
                for b in bs
                if b["run"] == m and len(b["probes"]) > 1
            )
            for m in ("run0", "run1", "run2")
        },
        "affinity_boots": {
            "on": [b["probes"][1]["decode"] for b in bs if b["affinity"]],
            "off": [
                b["probes"][1]["decode"] for b in bs if not b["affinity"] and len(b["probes"]) > 1
            ],
        },
    }


def main() -> None:
    f = figures()
    if "--json" in sys.argv:
        print(json.dumps(f, indent=1, default=float))
        return
    r = f["ready_s"]
    n = f["boots_counted"]
    print("| measure (NVIDIA H200, tiny DeepSeek-V3-shaped model, dummy weights) | value |")
    print("|---|---|")
    print(
        f"| boots | {f['boots']} (10 in run0, 3 in run1-2; run3's 2 boots through sglforge are in its report.json) |"
    )
    print(
        f"| boot to ready | fresh machine {', '.join(f'{x:.0f}' for x in r['fresh_machine'])} s; later median {r['later_median']:.0f} s ({r['later_range'][0]:.0f}-{r['later_range'][1]:.0f}) |"
    )
    print(
        f"| boot-to-boot sd, first probe after the boot (the old protocol) | {f['boot_sd']['first_probe']:.1%} ({n['first_probe']} boots) |"
    )
    print(
        f"| boot-to-boot sd, one discarded warm-up probe, then one probe | {f['boot_sd']['after_warmup']:.1%} ({n['after_warmup']} boots) |"
    )
    print(
        f"| boot-to-boot sd, warm-up, then 2 probes (128 requests) | {f['boot_sd']['after_warmup_128_requests']:.1%} ({n['after_warmup_128_requests']} boots) |"
    )
    print(
        f"| probe-to-probe sd within one boot, after the warm-up | {f['probe_sd_within_boot']:.1%} (df {f['probe_sd_within_boot_df']}) |"
    )
    print(
        f"| wave-to-wave sd within one probe (16 requests a wave) | {f['wave_sd_within_probe']:.1%} (df {f['wave_sd_within_probe_df']}) |"
    )
    print(
        f"| intra-batch correlation (16 in send order) | mean {f['icc_mean']:.2f} ({f['icc_range'][0]:.2f}-{f['icc_range'][1]:.2f}) |"
    )
    w = f["warmup_gain"]
    print(
        f"| second probe against the first (the warm-up's effect) | median {w['median']:+.1%} ({w['range'][0]:+.1%} to {w['range'][1]:+.1%}, {w['boots']} boots) |"
    )
    t1, t2 = f["first_probe_p95_ttft_ms"], f["later_probe_p95_ttft_ms"]
    print(
        f"| TTFT p95, first probe / later probes | {st.median(t1):.0f} ms median (max {max(t1):.0f}) / {st.median(t2):.0f} ms (max {max(t2):.0f}) |"
    )
    s = f["figure_sd_after_warmup"]
    print(
        f"| boot-to-boot sd after the warm-up, by figure | per-request decode {s['decode']:.1%}; output tok/s {s['output_tok_s']:.1%}; median ITL {s['median_itl_ms']:.1%} |"
    )
    m = f["by_machine_after_warmup"]
    print(
        f"| after the warm-up, by machine lease (run0 / run1 / run2) | {m['run0']} / {m['run1']} / {m['run2']} tok/s |"
    )
    m = f["by_machine_first_probe"]
    print(f"| first probe, by machine lease: sd within run0's 10 boots | {sd(m['run0']):.1%} |")
    a = f["affinity_boots"]
    print(
        f"| server pinned to CPUs 0-11, client to 12-15 (after warm-up) | on: {', '.join(f'{x:.0f}' for x in a['on'])}; off: {', '.join(f'{x:.0f}' for x in a['off'])} tok/s (too few boots to conclude) |"
    )


if __name__ == "__main__":
    main()
