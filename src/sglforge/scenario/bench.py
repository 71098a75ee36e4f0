"""The ``[bench]`` table of a scenario: the serving workload, said the way upstream's
``python3 -m sglang.bench_serving`` says it, and the flags that run one point of it.

The dataset is decided by the image's own ``bench_serving`` (its ``--dataset-name`` choices):
``random-ids-shared-prefix`` where the release has it, otherwise ``generated-shared-prefix``
with the system-prompt and question lengths that give the declared prefix-cache hit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglforge.config import Table
from sglforge.errors import ConfigError

# sglang's exact token-level shared-prefix dataset (newer trees: benchmark/datasets/
# random_shared_prefix.py); every row reuses row 0's first random_shared_prefix_len ids.
RANDOM_IDS_SHARED_PREFIX = "random-ids-shared-prefix"
# In every release: groups of prompts sharing one generated system prompt (0.5.14
# benchmark/datasets/generated_shared_prefix.py:150-300).
GENERATED_SHARED_PREFIX = "generated-shared-prefix"
BACKENDS = ("sglang", "sglang-oai", "sglang-oai-chat")


@dataclass(frozen=True)
class Knee:
    """The knee rule: the largest rate whose TTFT p95 stays within ``ttft_p95_max_s`` while
    at least ``min_success`` of the requests succeed."""

    ttft_p95_max_s: float = 5.0
    min_success: float = 1.0


@dataclass(frozen=True)
class Search:
    """An automatic rate search: doubling from ``start`` until the knee rule breaks (at most
    ``max_rate``), then ``steps`` bisections between the last good and the first bad rate."""

    start: float
    max_rate: float
    steps: int = 3


@dataclass(frozen=True)
class SingleStream:
    """One request at a time (the Artificial Analysis shape): decode tok/s and accept length."""

    input_len: int = 10000
    output_len: int = 1500
    num_prompts: int = 3
    chat_template: bool = True


@dataclass(frozen=True)
class Gate:
    """When a drop against the last release fails a publish (sglforge.bench.stats.compare).

    The candidate regresses when the one-sided ``confidence`` upper bound of its change is
    below ``-tolerance``. ``boot_sd`` is the node's declared per-boot noise: the standard
    deviation of one boot's log speed (+-2 % uniform is 0.0115), which the data then check.
    ``max_mde``: the drop a pass must rule out; a comparison whose minimum detectable effect
    (90 % power) is larger says inconclusive instead of passing. ``max_repeats``: with the
    node's measured noise profile (``bench --calibrate``), the most boots a side the plan may
    take to see ``max_mde`` (more is refused before any boot); without one, ``repeats``.
    ``priming_boot``: one boot (with its warm-up probe) before the first measured boot of a
    comparison or a calibration, discarded: on an H200 the first boot of each machine lease
    stood 13-23 % from the others, which then spread 1.4 % (docs/bench.md, issue 40).
    """

    tolerance: float = 0.0
    confidence: float = 0.95
    boot_sd: float = 0.0115
    max_mde: float = 0.05
    max_repeats: int = 8
    priming_boot: bool = True


@dataclass(frozen=True)
class Speed:
    """The compared speed probe of every boot: ``num_prompts`` shared-prefix requests at a
    fixed ``concurrency``, closed loop (``--max-concurrency``, ``--request-rate inf``), so the
    server is loaded whatever its speed; each request's decode tok/s is one sample."""

    concurrency: int = 16
    # 8 waves at concurrency 16: on an H200 a boot's 128 requests spread 1.4 % from boot to
    # boot, their first 64 6.9 % (the waves' requests correlate at 0.97: a wave is one sample)
    num_prompts: int = 128
    # a discarded probe of the same shape first, in every boot: the first probe after a boot
    # carries first-use compilation (on an H200: TTFT p95 601 ms against 96 ms, issue 40)
    warmup_probe: bool = True


@dataclass(frozen=True)
class Cost:
    """Planning figures for the gate's node-minutes (measure them once on the node):
    ``boot_minutes`` from start to ready, ``output_tok_s`` the node's output tok/s at the
    speed probe's concurrency, ``single_stream_tok_s`` one stream's decode speed."""

    boot_minutes: float = 2.0
    output_tok_s: float = 1000.0
    single_stream_tok_s: float = 100.0


@dataclass(frozen=True)
class Bench:
    """The ``[bench]`` table. ``repeats`` is the boots per side of a comparison (ABBA)."""

    input_len: int
    output_len: int
    prefix_hit: float
    num_prompts: int
    prompts_per_group: int
    request_rates: tuple[float, ...]
    search: Search | None
    warmup_requests: int
    flush_cache: bool
    seed: int
    repeats: int
    hit_tolerance: float
    backend: str
    knee: Knee
    single_stream: SingleStream | None
    gate: Gate
    tokenizer: str | None  # a path in the container; None: the model's own
    speed: Speed = Speed()
    cost: Cost = Cost()
    probe_prompts: int = 0  # requests per knee-search probe (0: num_prompts)
    # generated-shared-prefix lengths are text targets (random ids decoded, then re-encoded by
    # the server): the bench measures the server's count once and scales the requested lengths
    # by declared / counted, for every later point of both images (sglforge.bench.runner).
    length_scale: float = 1.0

    def gsp_lengths(self) -> tuple[int, int]:
        """(system prompt, question) lengths whose expected hit is ``prefix_hit``.

        With ``P`` prompts per group and the prompts shuffled, the first request of each group
        misses: expected hit = system / input x (P - 1) / P.
        """
        p = self.prompts_per_group
        system = round(self.prefix_hit * self.input_len * p / (p - 1))
        return system, self.input_len - system

    def expected_hit(self, dataset: str) -> float:
        """The hit rate the dataset's lengths give (what the server must confirm)."""
        if dataset == RANDOM_IDS_SHARED_PREFIX:
            shared = round(self.prefix_hit * self.input_len)
            return shared / self.input_len * (self.num_prompts - 1) / self.num_prompts
        system, _ = self.gsp_lengths()
        p = self.prompts_per_group
        return system / self.input_len * (p - 1) / p

    def groups(self, num_prompts: int = 0) -> int:
        """Prompt groups for ``num_prompts`` requests (default: the table's ``num_prompts``)."""
        return max(1, math.ceil((num_prompts or self.num_prompts) / self.prompts_per_group))

    def prompts(self, num_prompts: int = 0) -> int:
        """The request count bench_serving really sends: whole groups of prompts."""
        return self.groups(num_prompts) * self.prompts_per_group


def choose_dataset(choices: Sequence[str]) -> str:
    """The shared-prefix dataset this release's ``bench_serving`` offers (its own choices)."""
    if RANDOM_IDS_SHARED_PREFIX in choices:
        return RANDOM_IDS_SHARED_PREFIX
    if GENERATED_SHARED_PREFIX in choices:
        return GENERATED_SHARED_PREFIX
    raise ConfigError(
        "the image's sglang.bench_serving offers neither random-ids-shared-prefix nor "
        f"generated-shared-prefix (it has: {', '.join(choices) or 'nothing'})",
        "run: docker run --rm IMAGE python3 -m sglang.bench_serving --help",
    )


def point_args(
    bench: Bench,
    dataset: str,
    rate: float,
    *,
    port: int,
    tokenizer: str,
    output_file: str,
    num_prompts: int = 0,
    concurrency: int = 0,
) -> list[str]:
    """``python3 -m sglang.bench_serving`` flags for one point at ``rate`` (``inf`` with a
    ``concurrency``: the closed-loop speed probe), ``num_prompts`` requests (default the
    table's). With the table's ``--seed`` and the same lengths every boot sends the same
    prompts, and 0.5.14 caches a generated-shared-prefix dataset under
    ``~/.cache/sglang/benchmark`` keyed by them
    (benchmark/datasets/generated_shared_prefix.py:123-151, :197-202, :322-324),
    so a mounted cache folder generates it once per bench, not once per point."""
    n = num_prompts or bench.num_prompts
    args = [
        "--backend",
        bench.backend,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--tokenizer",
        tokenizer,
        "--dataset-name",
        dataset,
        "--request-rate",
        _num(rate),
        "--seed",
        str(bench.seed),
        "--warmup-requests",
        str(bench.warmup_requests),
        "--output-file",
        output_file,
        "--output-details",
    ]
    if dataset == RANDOM_IDS_SHARED_PREFIX:
        args += [
            "--tokenize-prompt",
            "--random-input-len",
            str(bench.input_len),
            "--random-output-len",
            str(bench.output_len),
            "--random-range-ratio",
            "1.0",
            "--random-shared-prefix-len",
            str(round(bench.prefix_hit * bench.input_len)),
            "--num-prompts",
            str(n),
        ]
    else:
        system, question = (round(x * bench.length_scale) for x in bench.gsp_lengths())
        groups = bench.groups(n)
        args += [
            "--gsp-system-prompt-len",
            str(system),
            "--gsp-question-len",
            str(question),
            "--gsp-output-len",
            str(bench.output_len),
            "--gsp-prompts-per-group",
            str(bench.prompts_per_group),
            "--gsp-num-groups",
            str(groups),
            "--gsp-range-ratio",
            "1.0",
            "--num-prompts",
            str(groups * bench.prompts_per_group),
        ]
    if concurrency:
        args += ["--max-concurrency", str(concurrency)]
    if bench.flush_cache:
        args.append("--flush-cache")
    return args


def single_stream_args(
    bench: Bench, *, port: int, tokenizer: str, output_file: str, dataset_path: str
) -> list[str]:
    """Flags for the single-stream run: one request in flight, text prompts from the JSONL
    at ``dataset_path`` (``custom`` dataset; see sglforge.bench.prompts), chat-templated."""
    ss = bench.single_stream
    assert ss is not None
    args = [
        "--backend",
        bench.backend,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--tokenizer",
        tokenizer,
        "--dataset-name",
        "custom",
        "--dataset-path",
        dataset_path,
        "--sharegpt-output-len",
        str(ss.output_len),
        "--num-prompts",
        str(ss.num_prompts),
        "--max-concurrency",
        "1",
        "--request-rate",
        "inf",
        "--seed",
        str(bench.seed),
        "--warmup-requests",
        str(bench.warmup_requests),
        "--output-file",
        output_file,
        "--output-details",
    ]
    if ss.chat_template:
        # MTP acceptance drops on raw prompts: custom wraps each one in the chat template.
        args.append("--apply-chat-template")
    if bench.flush_cache:
        args.append("--flush-cache")
    return args


def _num(x: float) -> str:
    return f"{x:g}"


@dataclass(frozen=True)
class _Workload:
    """The workload part of ``[bench]``: the lengths, the prefix-cache hit, the prompts and
    the rates to run (a sweep, a search or both)."""

    input_len: int
    output_len: int
    prefix_hit: float
    prompts_per_group: int
    num_prompts: int
    request_rates: tuple[float, ...]
    search: Search | None


def parse_bench(bt: Table, path: Path) -> Bench | None:
    """Validate a scenario's ``[bench]`` table (None when the scenario has none)."""
    if not bt.data:
        return None
    load = _workload(bt, path)
    warmup = bt.number("warmup_requests", "int", 1, strict=False)
    flush = bt.get("flush_cache", "bool", True)
    seed = bt.get("seed", "int", 1)
    repeats = bt.number("repeats", "int", 4)
    hit_tol = bt.number("hit_rate_tolerance", "float", 0.1)
    backend = bt.get("backend", "str", "sglang")
    if backend not in BACKENDS:
        raise bt._bad("backend", " or ".join(repr(b) for b in BACKENDS))
    tokenizer = bt.get("tokenizer", "str", None)
    knee = _knee(bt.table("knee"), path)
    single = _single_stream(bt.table("single_stream"))
    gate = _gate(bt.table("gate"), path)
    speed = _speed(bt.table("speed"))
    cost = _cost(bt.table("cost"))
    probe_prompts = bt.number("probe_prompts", "int", 0, strict=False)
    bt.done()
    return Bench(
        input_len=load.input_len,
        output_len=load.output_len,
        prefix_hit=load.prefix_hit,
        num_prompts=load.num_prompts,
        prompts_per_group=load.prompts_per_group,
        request_rates=load.request_rates,
        search=load.search,
        warmup_requests=warmup,
        flush_cache=flush,
        seed=seed,
        repeats=repeats,
        hit_tolerance=hit_tol,
        backend=backend,
        knee=knee,
        single_stream=single,
        gate=gate,
        tokenizer=tokenizer,
        speed=speed,
        cost=cost,
        probe_prompts=probe_prompts,
    )


def _workload(bt: Table, path: Path) -> _Workload:
    """The lengths, prefix-cache hit, prompts and rates of ``[bench]``, read in this order (an
    error names the first bad key); a sweep or a ``[bench.search]`` is required."""
    input_len = bt.number("input_len", "int")
    output_len = bt.number("output_len", "int")
    prefix_hit = bt.number("prefix_cache_hit", "float", 0.0, strict=False)
    if prefix_hit >= 1:
        raise bt._bad("prefix_cache_hit", "a fraction below 1 (0.6 for 60 %)")
    ppg = bt.number("prompts_per_group", "int", 16)
    if ppg < 2:
        raise bt._bad("prompts_per_group", "at least 2 (the first of each group misses)")
    num_prompts = bt.number("num_prompts", "int", 4 * ppg)
    rates = _rates(bt, "request_rates")
    search = _search(bt.table("search"))
    if not rates and search is None:
        raise ConfigError(
            f"{path}: [bench] needs 'request_rates' (a sweep) or a [bench.search] table",
            f"add request_rates = [1.0, 2.0] to [bench] in {path}",
        )
    return _Workload(input_len, output_len, prefix_hit, ppg, num_prompts, rates, search)


def _knee(kt: Table, path: Path) -> Knee:
    """``[bench.knee]``: the TTFT p95 limit and the least success (a fraction)."""
    knee = Knee(
        ttft_p95_max_s=kt.number("ttft_p95_max_s", "float", 5.0),
        min_success=kt.number("min_success", "float", 1.0),
    )
    kt.done()
    if knee.min_success > 1:
        raise ConfigError(
            f"{path}: 'bench.knee.min_success' is a fraction (1.0 = 100 %)", f"fix {path}"
        )
    return knee


def _single_stream(st: Table) -> SingleStream | None:
    """``[bench.single_stream]`` (None when absent: no single-stream run)."""
    single = (
        SingleStream(
            input_len=st.number("input_len", "int", 10000),
            output_len=st.number("output_len", "int", 1500),
            num_prompts=st.number("num_prompts", "int", 3),
            chat_template=st.get("chat_template", "bool", True),
        )
        if st.data
        else None
    )
    st.done()
    return single


def _gate(gt: Table, path: Path) -> Gate:
    """``[bench.gate]``: the tolerance, the one-sided confidence (between 0.5 and 1), the
    declared per-boot noise and the drop a pass must rule out (between 0 and 1)."""
    gate = Gate(
        tolerance=gt.number("tolerance", "float", 0.0, strict=False),
        confidence=gt.number("confidence", "float", 0.95),
        boot_sd=gt.number("boot_sd", "float", 0.0115, strict=False),
        max_mde=gt.number("max_mde", "float", 0.05),
        max_repeats=gt.number("max_repeats", "int", 8),
        priming_boot=gt.get("priming_boot", "bool", True),
    )
    gt.done()
    if not 0.5 < gate.confidence < 1:
        raise ConfigError(
            f"{path}: 'bench.gate.confidence' must be between 0.5 and 1", f"fix {path}"
        )
    if gate.max_repeats < 2:
        raise ConfigError(
            f"{path}: 'bench.gate.max_repeats' must be 2 or more (one ABBA block), not "
            f"{gate.max_repeats!r}",
            f"fix {path}",
        )
    if not 0 < gate.max_mde < 1:
        raise ConfigError(
            f"{path}: 'bench.gate.max_mde' must be a drop between 0 and 1 (0.05: 5 %), not "
            f"{gate.max_mde!r}",
            f"fix {path}",
        )
    return gate


def _speed(spt: Table) -> Speed:
    """``[bench.speed]``: the speed probe's concurrency and request count, and whether a
    discarded warm-up probe of that shape runs first."""
    speed = Speed(
        concurrency=spt.number("concurrency", "int", 16),
        num_prompts=spt.number("num_prompts", "int", 128),
        warmup_probe=spt.get("warmup_probe", "bool", True),
    )
    spt.done()
    return speed


def _cost(ct: Table) -> Cost:
    """``[bench.cost]``: the planning figures for the gate's node-minutes."""
    cost = Cost(
        boot_minutes=ct.number("boot_minutes", "float", 2.0),
        output_tok_s=ct.number("output_tok_s", "float", 1000.0),
        single_stream_tok_s=ct.number("single_stream_tok_s", "float", 100.0),
    )
    ct.done()
    return cost


def _rates(bt: Table, key: str) -> tuple[float, ...]:
    raw: Any = bt.data.get(key)
    bt.seen.add(key)
    if raw is None:
        return ()
    good = isinstance(raw, list) and all(
        isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0
        for x in raw
    )
    if not good or not raw:
        raise bt._bad(key, "a list of request rates above 0 (requests per second)")
    return tuple(sorted(float(x) for x in raw))


def _search(st: Table) -> Search | None:
    if not st.data:
        return None
    search = Search(
        start=st.number("start", "float"),
        max_rate=st.number("max_rate", "float"),
        steps=st.number("steps", "int", 3, strict=False),
    )
    st.done()
    if search.max_rate < search.start:
        raise st._bad("max_rate", f"at least start ({search.start:g})")
    return search
