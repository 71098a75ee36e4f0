"""``run_bench``: launch the server the way smoke does, then run the image's own
``python3 -m sglang.bench_serving`` in a second container of the same image (host network, the
report folder mounted), one run per sweep point, and read its JSONL.

With a baseline image the repeats are paired: each repeat boots the baseline, measures it,
then boots the candidate and measures it, so the node's drift falls on both alike.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sglforge.bench.report import BenchReport, ImageRun, SingleStream, write_outputs
from sglforge.bench.spec import (
    Bench,
    choose_dataset,
    point_args,
    single_stream_args,
)
from sglforge.bench.stats import (
    HIT_GAUGE,
    Point,
    aggregate,
    hit_rate,
    knee,
    metric_sums,
    paired_change,
    point_from_result,
)
from sglforge.errors import BenchError, ConfigError
from sglforge.requests import SmokeRequest
from sglforge.smoke.checks import HttpError, _request
from sglforge.smoke.preflight import port_in_use, refuse_simulated_acceptance
from sglforge.smoke.scenario import Scenario, load_scenario
from sglforge.util import check_output_dir, confined, work_dir

BENCH_COMMAND = ("python3", "-m", "sglang.bench_serving")
STANDIN_HARDWARE = "standin-cpu"
CLIENT_MOUNT = "/sglforge-bench"
_CHOICES = re.compile(r"--dataset-name\s+\{([^}]*)\}")


@dataclass
class _Ctx:
    """One bench as its steps build it up."""

    root: Path
    scenario: Scenario
    bench: Bench
    port: int
    model_path: Path | None
    report_dir: Path
    env: dict[str, str]
    labels: dict[str, str]
    say: Callable[[str], None]
    timeout: float
    dataset: str = ""
    client_runs: int = 0
    notes: list[str] = field(default_factory=list)


def run_bench(
    root: Path,
    image: str,
    req: SmokeRequest,
    *,
    against: str | None = None,
    point_timeout: float = 3600.0,
    progress: Callable[[str], None] | None = None,
) -> BenchReport:
    """Benchmark ``image`` with ``req``'s scenario's ``[bench]`` workload (paired with
    ``against``); ``req.log_dir`` is the report folder (default: a new one under build/bench/).

    Raises ConfigError for a scenario without ``[bench]`` or simulated acceptance in the
    environment, BenchError when the server or bench_serving cannot run. A regression is a
    report (``ok`` False), not an exception.
    """
    ctx = _prepare(root, req, point_timeout)
    ctx.say = progress or (lambda _m: None)
    started = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    t0 = time.monotonic()
    _reap()
    ctx.dataset = choose_dataset(_dataset_choices(ctx, image))
    ctx.say(f"dataset {ctx.dataset} (from {image}'s own bench_serving)")
    candidate: list[_Measured] = []
    baseline: list[_Measured] = []
    for repeat in range(ctx.bench.repeats):
        if against:
            baseline.append(_measure(ctx, against, repeat, "baseline"))
        candidate.append(_measure(ctx, image, repeat, "candidate"))
    report = _report(ctx, image, against, candidate, baseline, started, time.monotonic() - t0)
    write_outputs(report)
    return report


def _prepare(root: Path, req: SmokeRequest, point_timeout: float) -> _Ctx:
    scenario = load_scenario(req.scenario)
    model, port, report_dir, env, labels = req.model, req.port, req.log_dir, req.env, req.labels
    if scenario.bench is None:
        raise ConfigError(
            f"{scenario.path}: the scenario has no [bench] table",
            "add one (see docs/bench.md), or pick a scenario that has it",
        )
    merged = {**scenario.container.env, **dict(env or {})}
    refuse_simulated_acceptance(merged, scenario.path)
    if report_dir is not None:
        folder = check_output_dir(report_dir, "--report-dir")
    else:
        stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        parent = work_dir(root, "bench")
        run_id = uuid.uuid4().hex[:8]
        folder = confined(parent, f"{scenario.name}-{stamp}-{run_id}", "report folder", "")
        folder.mkdir(parents=True)
    return _Ctx(
        root=root,
        scenario=scenario,
        bench=scenario.bench,
        port=port or scenario.port,
        model_path=Path(model).resolve() if model else scenario.model_path,
        report_dir=folder,
        env=merged,
        labels=dict(labels or {}),
        say=lambda _m: None,
        timeout=point_timeout,
    )


def _reap() -> None:
    from sglforge.engine import containers

    for role in ("bench", "bench-client"):
        containers.reap_orphans(role)


@dataclass(frozen=True)
class _Measured:
    """One boot of one image: its sweep points and its single-stream run."""

    points: tuple[Point, ...]
    single: SingleStream | None


def _profile(ctx: _Ctx, extra_mounts: tuple[Any, ...] = ()) -> Any:
    from sglforge.engine import containers

    mounts = list(extra_mounts)
    if ctx.model_path is not None:
        mounts.append(
            containers.Mount(str(ctx.model_path), ctx.scenario.model_mount, read_only=True)
        )
    return replace(ctx.scenario.container, mounts=tuple(mounts), env=dict(ctx.env))


def _server_command(ctx: _Ctx) -> list[str]:
    command = ctx.scenario.container_command(ctx.port)
    # The hit rate is read on the server: sglang serves /metrics only with --enable-metrics
    # (0.5.14 srt/entrypoints/http_server.py:270-272).
    return command if "--enable-metrics" in command else [*command, "--enable-metrics"]


def _dataset_choices(ctx: _Ctx, image: str) -> list[str]:
    """The ``--dataset-name`` choices of the image's own bench_serving (its ``--help``)."""
    text = _client(ctx, image, ["--help"], "help", expect_file=False)
    m = _CHOICES.search(re.sub(r"\s+", " ", text))
    if not m:
        raise BenchError(
            f"{image}: sglang.bench_serving --help lists no --dataset-name choices",
            f"run: docker run --rm {image} python3 -m sglang.bench_serving --help",
        )
    return [c.strip() for c in m.group(1).split(",")]


def _client(ctx: _Ctx, image: str, args: list[str], name: str, *, expect_file: bool = True) -> str:
    """Run bench_serving in a container of ``image``; its output (or the JSONL's last line)."""
    from sglforge.engine import containers

    ctx.client_runs += 1
    log = ctx.report_dir / f"{name}.log"
    mount = containers.Mount(str(ctx.report_dir), CLIENT_MOUNT, read_only=False)
    profile = _profile(ctx, (mount,))
    # No hub: the tokenizer is a local folder (the model's own, or the scenario's).
    profile = replace(profile, env={**profile.env, "HF_HUB_OFFLINE": "1"})
    with containers.running(
        image,
        entrypoint=(),
        command=[*BENCH_COMMAND, *args],
        profile=profile,
        log_path=log,
        role="bench-client",
        labels={"io.sglforge.bench": ctx.scenario.name, **ctx.labels},
    ) as box:
        if not box.wait_exit(ctx.timeout):
            raise BenchError(
                f"{image}: bench_serving {name} did not finish in {ctx.timeout:g} s",
                f"read {log}",
            )
        box.drain_logs()
        code = box.exit_code
    text = log.read_text(errors="replace")
    if code != 0:
        tail = " | ".join(text.strip().splitlines()[-3:])
        raise BenchError(
            f"{image}: python3 -m sglang.bench_serving {name} exited {code}: {tail}",
            f"read {log}",
        )
    if not expect_file:
        return text
    out = ctx.report_dir / f"{name}.jsonl"
    lines = out.read_text().splitlines() if out.is_file() else []
    if not lines:
        raise BenchError(
            f"{image}: bench_serving {name} wrote no result to {out.name}",
            f"read {log}",
        )
    return lines[-1]


@contextmanager
def _server(ctx: _Ctx, image: str, name: str) -> Iterator[None]:
    from sglforge.engine import containers
    from sglforge.smoke.runner import _wait_ready

    log = ctx.report_dir / f"{name}.server.log"
    if port_in_use(ctx.port):
        # Something else would answer the readiness and metrics requests.
        raise BenchError(
            f"127.0.0.1:{ctx.port} is already in use: {image}'s server could not be told apart",
            "free the port or pass --port N",
        )
    ctx.say(f"starting {image} for {name}; log: {log}")
    with containers.running(
        image,
        entrypoint=(),
        command=_server_command(ctx),
        profile=_profile(ctx),
        log_path=log,
        role="bench",
        labels={"io.sglforge.bench": ctx.scenario.name, **ctx.labels},
    ) as box:
        ready = _wait_ready(box, ctx.port, ctx.scenario.load_timeout, ctx.say)
        if not ready.passed:
            raise BenchError(f"{image}: {ready.detail}", f"read {log}")
        yield
        if box.exited.is_set():
            raise BenchError(
                f"{image}: the server exited with code {box.exit_code} during the bench",
                f"read {log}",
            )


def _scrape(ctx: _Ctx) -> dict[str, float]:
    url = f"http://127.0.0.1:{ctx.port}/metrics"
    try:
        status, body = _request(url, None, timeout=30)
    except HttpError as exc:
        raise BenchError(f"{url}: {exc}", "the server must run with --enable-metrics") from None
    if status != 200:
        raise BenchError(
            f"{url}: HTTP {status}: no Prometheus metrics",
            "the server must serve /metrics (--enable-metrics)",
        )
    return metric_sums(body.decode(errors="replace"))


def _rates(ctx: _Ctx, measure: Callable[[float], Point]) -> list[Point]:
    """The sweep, or the automatic search: double until the knee rule breaks, then bisect."""
    b = ctx.bench
    if b.search is None:
        return [measure(rate) for rate in b.request_rates]
    points: list[Point] = []
    rate, good, bad = b.search.start, 0.0, math.inf
    while rate <= b.search.max_rate:
        p = measure(rate)
        points.append(p)
        if not p.within(b.knee):
            bad = rate
            break
        good, rate = rate, rate * 2
    for _ in range(b.search.steps if math.isfinite(bad) and good > 0 else 0):
        mid = round((good + bad) / 2, 3)
        p = measure(mid)
        points.append(p)
        good, bad = (mid, bad) if p.within(b.knee) else (good, mid)
    return points


def _measure(ctx: _Ctx, image: str, repeat: int, side: str) -> _Measured:
    b = ctx.bench
    tokenizer = b.tokenizer or ctx.scenario.model_mount
    expected = b.expected_hit(ctx.dataset)
    with _server(ctx, image, f"{side}-{repeat}"):

        def measure(rate: float) -> Point:
            name = f"{side}-{repeat}-rate-{rate:g}"
            ctx.say(f"{side} repeat {repeat + 1}/{b.repeats}: request rate {rate:g}/s")
            before = _scrape(ctx)
            args = point_args(
                b,
                ctx.dataset,
                rate,
                port=ctx.port,
                tokenizer=tokenizer,
                output_file=f"{CLIENT_MOUNT}/{name}.jsonl",
                seed=b.seed,
            )
            result = json.loads(_client(ctx, image, args, name))
            after = _scrape(ctx)
            hit = hit_rate(before, after)
            point = point_from_result(rate, result, hit)
            gauge = after.get(HIT_GAUGE)
            if hit is None or abs(hit - expected) > b.hit_tolerance:
                shown = "none" if hit is None else f"{hit:.3f}"
                point = replace(
                    point,
                    refused=f"prefix-cache hit {shown} on the server (sglang:cached_tokens_total"
                    f" / sglang:prompt_tokens_total; gauge {gauge}), declared {expected:.3f}"
                    f" +- {b.hit_tolerance:g}",
                )
            return point

        points = _rates(ctx, measure)
        single = _single_stream(ctx, image, repeat, side, tokenizer) if b.single_stream else None
    return _Measured(tuple(points), single)


def _single_stream(ctx: _Ctx, image: str, repeat: int, side: str, tokenizer: str) -> SingleStream:
    name = f"{side}-{repeat}-single-stream"
    ctx.say(f"{side} repeat {repeat + 1}: single stream")
    args = single_stream_args(
        ctx.bench,
        port=ctx.port,
        tokenizer=tokenizer,
        output_file=f"{CLIENT_MOUNT}/{name}.jsonl",
        seed=ctx.bench.seed,
    )
    result = json.loads(_client(ctx, image, args, name))
    tpot = result.get("mean_tpot_ms")
    decode = 1000.0 / tpot if isinstance(tpot, int | float) and tpot > 0 else 0.0
    accept = result.get("accept_length")
    return SingleStream(
        decode_tok_s=decode,
        accept_length=float(accept) if isinstance(accept, int | float) else None,
        ttft_s=float(result.get("median_ttft_ms") or 0.0) / 1000,
        output_tok_s=float(result.get("output_throughput") or 0.0),
    )


def _knee_tok_s(ctx: _Ctx, m: _Measured) -> float:
    found = knee(aggregate(m.points), ctx.bench.knee)
    return found.total_tok_s if found else 0.0


def _report(
    ctx: _Ctx,
    image: str,
    against: str | None,
    candidate: list[_Measured],
    baseline: list[_Measured],
    started: str,
    seconds: float,
) -> BenchReport:
    from sglforge.engine import images as engine_images

    b = ctx.bench
    rows = aggregate([p for m in candidate for p in m.points])
    found = knee(rows, b.knee)
    singles = [m.single for m in candidate if m.single is not None]
    run = ImageRun.of(image, _digest(engine_images, image), rows, found, singles)
    base_run = None
    changes = []
    if against and baseline:
        base_rows = aggregate([p for m in baseline for p in m.points])
        base_singles = [m.single for m in baseline if m.single is not None]
        base_run = ImageRun.of(
            against,
            _digest(engine_images, against),
            base_rows,
            knee(base_rows, b.knee),
            base_singles,
        )
        g = b.gate
        for figure, base_values, cand_values in (
            (
                "knee_total_tok_s",
                [_knee_tok_s(ctx, m) for m in baseline],
                [_knee_tok_s(ctx, m) for m in candidate],
            ),
            (
                "single_stream_decode_tok_s",
                [m.single.decode_tok_s for m in baseline if m.single],
                [m.single.decode_tok_s for m in candidate if m.single],
            ),
        ):
            changes.append(
                paired_change(
                    figure,
                    base_values,
                    cand_values,
                    confidence=g.confidence,
                    tolerance=g.tolerance,
                    resamples=g.resamples,
                )
            )
    refused = [r for r in rows if r.refused]
    return BenchReport(
        scenario=ctx.scenario.name,
        scenario_path=ctx.scenario.path,
        hardware=STANDIN_HARDWARE if ctx.scenario.standin else "gpu",
        dataset=ctx.dataset,
        expected_hit=b.expected_hit(ctx.dataset),
        knee_rule=b.knee,
        run=run,
        baseline=base_run,
        changes=tuple(c for c in changes if c is not None),
        refused=tuple(r.refused for r in refused),
        report_dir=ctx.report_dir,
        started_at=started,
        duration_s=round(seconds, 3),
        repeats=b.repeats,
    )


def _digest(engine_images: Any, image: str) -> str | None:
    info = engine_images.inspect(image)
    return (info.digest or info.id) if info else None


def ensure_local(
    ref: str, say: Callable[[str], None] | None = None, creds: Any = None
) -> str:
    """``ref`` present on the engine, pulled (with its registry's login, or ``creds``) when it
    is not; the name to run it by: ``REPO@sha256:...`` for a digest reference (the engine
    keeps no tag for an image pulled by digest), else ``ref`` itself."""
    from sglforge.engine import images as engine_images
    from sglforge.engine.reference import parse

    r = parse(ref, allow_digest=True)
    name = f"{r.name}@{r.digest}" if r.digest else ref
    if engine_images.inspect(name) is None:
        if say:
            say(f"pulling {name}")
        engine_images.pull(name, creds)
    return name
