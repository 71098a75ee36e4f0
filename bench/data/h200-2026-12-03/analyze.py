#!/usr/bin/env python3
# ruff: noqa: E501  (table rows read best on one line each)
"""Recompute docs/bench.md's H200 tables from the archives in this folder (standard library only).

    python3 bench/data/h200-2026-12-03/analyze.py            # the Markdown tables
    python3 bench/data/h200-2026-12-03/analyze.py --json     # the same figures as JSON

NVIDIA H200, real sglang 0.5.14, a 2-layer DeepSeek-V3-shaped model with random weights: NOT an MI355X,
NOT GLM-5.2. Every figure is per request decode tok/s ((output tokens - 1) / sum of inter-token
latencies) unless named otherwise; a probe is bench_serving's random-ids 400/256, 64 requests at
concurrency 16 (the gate's compared shape); a wave is one closed-loop group of 16 requests in send order.

Runs 4-6 went through sglforge's own ``bench --calibrate`` (process runtime): each boot a discarded
warm-up probe of 32 requests, then the compared speed probe of 128 requests (generated-shared-prefix,
the scenario's workload). Their table compares, on the same boots, what the protocol would have
compared without each mitigation.
"""

from __future__ import annotations

import functools
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


@functools.cache
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


SGLFORGE_RUNS = (  # archive, machine lease, affinity arm
    ("run4-sglforge-calibrate-2.tgz", "A", False),
    ("run5-sglforge-calibrate-4.tgz", "B", False),
    ("run6-sglforge-calibrate-3-affinity.tgz", "B", True),
)


def _gate_figure(logs: list[float]) -> float:
    return math.exp(st.fmean(logs))


def sglforge_boots() -> list[dict[str, object]]:
    """Every boot of runs 4-6, as sglforge's calibration measured it."""
    out: list[dict[str, object]] = []
    for archive, lease, affinity in SGLFORGE_RUNS:
        files = _members(archive)
        profile = json.loads(files["cal/noise-profile.json"])
        for i, ready in enumerate(profile["boot_seconds"]):
            speed = probe(files[f"cal/calibrate-{i}-speed.jsonl"])
            warm = probe(files[f"cal/calibrate-{i}-warmup.jsonl"])
            logs = speed["logs"]
            out.append(
                {
                    "run": archive.split("-")[0],
                    "lease": lease,
                    "boot": i + 1,
                    "first_of_lease": not out or out[-1]["lease"] != lease,
                    "affinity": affinity,
                    "ready_s": ready,
                    "gate_figure": profile["boot_means"][i],
                    "all_128": _gate_figure(logs),
                    "first_64": _gate_figure(logs[:64]),
                    "first_32": _gate_figure(logs[:32]),
                    "no_warmup_32": _gate_figure(warm["logs"]),
                    "output_tok_s": speed["output_tok_s"],
                    "median_itl_ms": speed["median_itl_ms"],
                    "p95_ttft_ms": speed["p95_ttft_ms"],
                    "warmup_p95_ttft_ms": warm["p95_ttft_ms"],
                    "icc": speed["icc"],
                    "waves": speed["waves"],
                }
            )
    return out


def _pooled_boot_sd(bs: list[dict[str, object]], key: str) -> tuple[float, int]:
    """The boot-to-boot sd (log) pooled within each run (one lease, one arm): machines differ."""
    groups: dict[str, list[float]] = {}
    for b in bs:
        groups.setdefault(str(b["run"]), []).append(float(b[key]))  # type: ignore[arg-type]
    return pooled_within(list(groups.values()))


def sglforge_figures() -> dict[str, object]:
    bs = sglforge_boots()
    later = [b for b in bs if not b["first_of_lease"]]
    keys = ("all_128", "first_64", "first_32", "no_warmup_32", "output_tok_s", "median_itl_ms")
    return {
        "boots": len(bs),
        "gate_figure_reproduced": max(abs(b["all_128"] / b["gate_figure"] - 1) for b in bs),
        "ready_s": {
            "fresh_machine": [b["ready_s"] for b in bs if b["first_of_lease"]],
            "later_median": st.median(b["ready_s"] for b in later),
            "later_range": [min(b["ready_s"] for b in later), max(b["ready_s"] for b in later)],
        },
        "boot_sd": {k: _pooled_boot_sd(bs, k) for k in keys},
        "boot_sd_without_first_boot": {k: _pooled_boot_sd(later, k) for k in keys},
        "warmup_gain": [b["first_32"] / b["no_warmup_32"] - 1 for b in bs],
        "p95_ttft_ms": {
            "warmup_probe": [b["warmup_p95_ttft_ms"] for b in bs],
            "speed_probe": [b["p95_ttft_ms"] for b in bs],
        },
        "icc": [b["icc"] for b in bs],
        "wave_sd_within_probe": pooled_within([b["waves"] for b in bs]),
        "by_run": {
            run: [round(float(b["all_128"]), 1) for b in bs if b["run"] == run]
            for run in ("run4", "run5", "run6")
        },
    }


def _sd_row(f: dict[str, object], key: str, label: str) -> str:
    sd_all, df_all = f["boot_sd"][key]  # type: ignore[index]
    sd_later, df_later = f["boot_sd_without_first_boot"][key]  # type: ignore[index]
    return f"| {label} | {sd_all:.1%} (df {df_all}) | {sd_later:.1%} (df {df_later}) |"


def print_sglforge_table(f: dict[str, object]) -> None:
    r = f["ready_s"]  # type: ignore[assignment]
    print(
        "| through sglforge's `bench --calibrate` (NVIDIA H200, tiny model, dummy weights) | all boots | without each lease's first boot |"
    )
    print("|---|---|---|")
    print(
        f"| boots | {f['boots']} (run4 2 on lease A; run5 4 + run6 3 on lease B) | {f['boots'] - len(r['fresh_machine'])} |"
    )
    print(
        f"| boot to ready | fresh machine {', '.join(f'{x:.0f}' for x in r['fresh_machine'])} s | median {r['later_median']:.0f} s ({r['later_range'][0]:.0f}-{r['later_range'][1]:.0f}) |"
    )
    print(_sd_row(f, "all_128", "boot-to-boot sd, the gate's figure: warm-up, then 128 requests"))
    print(_sd_row(f, "first_64", "same boots, the first 64 of those requests"))
    print(_sd_row(f, "first_32", "same boots, the first 32 of those requests"))
    print(
        _sd_row(f, "no_warmup_32", "same boots, no warm-up: the first 32 requests after the boot")
    )
    print(_sd_row(f, "output_tok_s", "same boots, output tok/s of the 128 (another figure)"))
    print(_sd_row(f, "median_itl_ms", "same boots, median ITL of the 128 (another figure)"))
    g = f["warmup_gain"]  # type: ignore[assignment]
    print(
        f"| the 32 requests after the warm-up against the 32 before it | median {st.median(g):+.1%} ({min(g):+.1%} to {max(g):+.1%}) | |"
    )
    t = f["p95_ttft_ms"]  # type: ignore[assignment]
    print(
        f"| TTFT p95, warm-up probe / compared probe | median {st.median(t['warmup_probe']):.0f} ms (max {max(t['warmup_probe']):.0f}) / {st.median(t['speed_probe']):.0f} ms (max {max(t['speed_probe']):.0f}) | |"
    )
    icc_values = f["icc"]  # type: ignore[assignment]
    wsd, wdf = f["wave_sd_within_probe"]  # type: ignore[misc]
    print(
        f"| intra-batch correlation; wave-to-wave sd within a probe | mean {st.fmean(icc_values):.2f} ({min(icc_values):.2f}-{max(icc_values):.2f}); {wsd:.1%} (df {wdf}) | |"
    )
    b = f["by_run"]  # type: ignore[assignment]
    print(
        f"| the gate's figure by run: A off / B off / B affinity on | {b['run4']} / {b['run5']} / {b['run6']} tok/s | |"
    )


def main() -> None:
    f = figures()
    g = sglforge_figures()
    if "--json" in sys.argv:
        print(json.dumps({"runs_0_2": f, "runs_4_6_sglforge": g}, indent=1, default=float))
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

    print()
    print_sglforge_table(g)


if __name__ == "__main__":
    main()
