"""TEST DOUBLE -- NOT SGLANG. A stand-in for sglang 0.5.14's ``python3 -m sglang.bench_serving``
client, for the process-runtime tests (no Docker, no torch or transformers here): installed as
``sglang/bench_serving.py`` beside the stand-in server (``sglang/launch_server.py``), it is what
``<python> -m sglang.bench_serving`` reaches.

What it keeps of the real client (0.5.14 ``sglang/bench_serving.py``): the flags sglforge
passes (unknown flags are refused, as argparse does there), ``--help`` listing the
``--dataset-name`` choices, the ``sglang`` backend's streamed ``POST /generate`` with
``ignore_eos`` and ``max_new_tokens`` (the time to the first chunk is the TTFT, the gaps
between chunks the ITLs), ``--flush-cache`` and ``--warmup-requests`` before the timed run,
Poisson arrivals at ``--request-rate`` (``inf``: all at once) under ``--max-concurrency``, and
one JSON line appended to ``--output-file`` with the fields sglforge reads (``completed``,
``duration``, throughputs, TTFT percentiles in ms, ``mean_tpot_ms``; with
``--output-details`` ``output_lens``, ``ttfts``, ``itls`` and ``errors``).

Where it differs, on purpose: one dataset, ``generated-shared-prefix``, its prompts made of
distinct words (the stand-in server counts a word as a token when no tokenizer is installed,
so the lengths asked are the lengths counted); ``--tokenizer`` is accepted and not loaded.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import random
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sglang.bench_serving (stand-in)")
    p.add_argument("--backend", default="sglang", choices=["sglang"])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tokenizer")
    p.add_argument("--dataset-name", choices=["generated-shared-prefix"], default=None)
    p.add_argument("--request-rate", type=float, default=math.inf)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--warmup-requests", type=int, default=1)
    p.add_argument("--output-file")
    p.add_argument("--output-details", action="store_true")
    p.add_argument("--gsp-system-prompt-len", type=int, default=2048)
    p.add_argument("--gsp-question-len", type=int, default=128)
    p.add_argument("--gsp-output-len", type=int, default=256)
    p.add_argument("--gsp-prompts-per-group", type=int, default=16)
    p.add_argument("--gsp-num-groups", type=int, default=64)
    p.add_argument("--gsp-range-ratio", type=float, default=1.0)
    p.add_argument("--num-prompts", type=int, default=1000)
    p.add_argument("--max-concurrency", type=int, default=None)
    p.add_argument("--flush-cache", action="store_true")
    return p


def _prompts(a: argparse.Namespace) -> list[str]:
    out = []
    for g in range(a.gsp_num_groups):
        system = " ".join(f"s{g}w{i}" for i in range(a.gsp_system_prompt_len))
        for j in range(a.gsp_prompts_per_group):
            question = " ".join(f"q{g}x{j}w{i}" for i in range(a.gsp_question_len))
            out.append(f"{system} {question}")
    random.Random(a.seed).shuffle(out)
    return out[: a.num_prompts]


def _request(a: argparse.Namespace, prompt: str) -> dict:
    """One streamed /generate: (output tokens, TTFT, ITLs, error), times in seconds."""
    body = {
        "text": prompt,
        "sampling_params": {
            "temperature": 0.0,
            "max_new_tokens": a.gsp_output_len,
            "ignore_eos": True,
        },
        "stream": True,
    }
    start = time.perf_counter()
    out = {"output_len": 0, "ttft": 0.0, "itl": [], "error": ""}
    try:
        conn = http.client.HTTPConnection(a.host, a.port, timeout=600)
        conn.request("POST", "/generate", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            out["error"] = f"HTTP {resp.status}"
            return out
        last = start
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            now = time.perf_counter()
            data = json.loads(line[6:])
            if out["ttft"] == 0.0:
                out["ttft"] = now - start
            else:
                out["itl"].append(now - last)
            last = now
            out["output_len"] = int(data.get("meta_info", {}).get("completion_tokens", 0))
        conn.close()
    except (OSError, http.client.HTTPException, ValueError) as exc:
        out["error"] = repr(exc)
        out["output_len"] = 0
    return out


def _post(a: argparse.Namespace, path: str) -> None:
    conn = http.client.HTTPConnection(a.host, a.port, timeout=60)
    conn.request("POST", path, "{}", {"Content-Type": "application/json"})
    conn.getresponse().read()
    conn.close()


def _run(a: argparse.Namespace) -> dict:
    prompts = _prompts(a)
    for i in range(a.warmup_requests):
        _request(a, prompts[i % len(prompts)])
    if a.flush_cache:
        _post(a, "/flush_cache")
    rng = random.Random(a.seed)
    gate = threading.Semaphore(a.max_concurrency or len(prompts))
    results: list[dict] = [{} for _ in prompts]

    def one(i: int, at: float) -> None:
        time.sleep(max(0.0, at - time.perf_counter()))
        with gate:
            results[i] = _request(a, prompts[i])

    start = time.perf_counter()
    at = start
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        for i in range(len(prompts)):
            pool.submit(one, i, at)
            if math.isfinite(a.request_rate):
                at += rng.expovariate(a.request_rate)
    duration = time.perf_counter() - start
    ok = [r for r in results if not r["error"]]
    ttfts = sorted(r["ttft"] for r in ok)
    tpots = [sum(r["itl"]) / (r["output_len"] - 1) for r in ok if r["output_len"] > 1]
    out_tokens = sum(r["output_len"] for r in ok)
    in_tokens = sum(len(p.split()) for p, r in zip(prompts, results, strict=True) if not r["error"])
    result = {
        "backend": a.backend,
        "dataset_name": a.dataset_name,
        "request_rate": a.request_rate,
        "max_concurrency": a.max_concurrency,
        "completed": len(ok),
        "duration": duration,
        "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens,
        "request_throughput": len(ok) / duration,
        "output_throughput": out_tokens / duration,
        "total_throughput": (in_tokens + out_tokens) / duration,
        "median_ttft_ms": statistics.median(ttfts) * 1000 if ttfts else 0.0,
        "p95_ttft_ms": _p95(ttfts) * 1000,
        "mean_tpot_ms": statistics.fmean(tpots) * 1000 if tpots else 0.0,
    }
    if a.output_details:
        result["output_lens"] = [r["output_len"] for r in results]
        result["ttfts"] = [r["ttft"] for r in results]
        result["itls"] = [r["itl"] for r in results]
        result["errors"] = [r["error"] for r in results]
    return result


def _p95(ordered: list[float]) -> float:
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)] if ordered else 0.0


def main(argv: list[str]) -> int:
    a = _parser().parse_args(argv)
    result = _run(a)
    print(f"Successful requests: {result['completed']}")
    if a.output_file:
        with open(a.output_file, "a") as fh:
            fh.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
