"""``run_bench``: launch the server the way smoke does, then run the image's own
``python3 -m sglang.bench_serving`` in a second container of the same image (host network, the
report folder mounted), one run per sweep point, and read its JSONL.

With a baseline image the boots alternate in ABBA blocks (``repeats`` boots per side): every
boot runs the compared speed probe (fixed concurrency, closed loop) and the single stream; the
first candidate boot then also searches the knee (after them, so that every boot's compared
figures come from the same point of a boot's life). The comparison is ``stats.compare`` over the
per-request samples of each boot.
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
from typing import TYPE_CHECKING, Any

from sglforge.bench.cost import (
    PlannedCost,
    boots_a_side,
    planned_cost,
    require_passable,
    warmup_prompts,
)
from sglforge.bench.prompts import program_args
from sglforge.bench.report import BenchReport, ImageRun, SingleStream, write_json
from sglforge.bench.stats import (
    HIT_GAUGE,
    PASSED,
    PROMPT_TOKENS,
    REGRESSED,
    Block,
    Change,
    Looks,
    Point,
    abba,
    capacity,
    compare,
    hit_rate,
    metric_sums,
    point_from_result,
    require_finite,
)
from sglforge.errors import BaselineUnusable, BenchError, ConfigError
from sglforge.requests import SmokeRequest
from sglforge.scenario.bench import (
    RANDOM_IDS_SHARED_PREFIX,
    Bench,
    choose_dataset,
    point_args,
    single_stream_args,
)
from sglforge.scenario.constants import EXIT_GRACE_S
from sglforge.scenario.file import Scenario
from sglforge.smoke.checks import HttpError, http_request
from sglforge.smoke.preflight import port_in_use, refuse_simulated_acceptance
from sglforge.smoke.runtime import (
    SERVER_URL_NOTE,
    ContainerRuntime,
    Runtime,
    parse_server_url,
    runtime_for,
)
from sglforge.util import check_output_dir, confined, work_dir

if TYPE_CHECKING:
    from sglforge.project import Project

BENCH_COMMAND = ("python3", "-m", "sglang.bench_serving")
STANDIN_HARDWARE = "standin-cpu"
CLIENT_MOUNT = "/sglforge-bench"
# HOME of the client: bench_serving caches generated datasets under ~/.cache/sglang/benchmark
# (0.5.14 benchmark/datasets/generated_shared_prefix.py:140), kept in the report folder so a
# dataset is generated once per bench, not once per point.
CLIENT_HOME = f"{CLIENT_MOUNT}/home"
# Counters the server bumps per finished request (0.5.14 srt/observability/
# metrics_collector.py:1428-1431, :1645-1673): what it counted, not what the client meant.
REQUESTS = "sglang:num_requests_total"
GENERATED = "sglang:generation_tokens_total"
INPUT_TOLERANCE = 0.02  # a point whose mean input is further off its declared length is refused
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
    refused: list[str] = field(default_factory=list)
    calibrated: bool = False
    notes: list[str] = field(default_factory=list)
    knee_prior: tuple[float, float | None] | None = None
    profile: Any = None  # the node's noise profile (sglforge.bench.noise.Profile) or None
    warmup: bool = True  # a discarded warm-up probe of the compared shape in every boot
    priming: bool = True  # a discarded boot before the first measured one (compare, calibrate)
    per_side: int = 0  # the boots a side the comparison plans
    rt: Runtime = field(default_factory=ContainerRuntime)  # where server and client run
    host: str = "127.0.0.1"  # the server's host and URL (--server-url's, else 127.0.0.1)
    base: str = ""
    server_url: str | None = None  # a server sglforge did not start: no boot, no ABBA


@dataclass(frozen=True)
class BenchProtocol:
    """How a bench measures: ``warmup``, a discarded warm-up probe of the compared shape
    before the compared one in every boot (``[bench.speed] warmup_probe`` can turn it off for
    a scenario); ``priming``, one discarded boot before the first measured one of a
    comparison or a calibration (``[bench.gate] priming_boot`` can turn it off for a scenario);
    ``noise_profile``, the node's noise profile file (``bench --calibrate``'s,
    from any node; None: the cache's for this scenario and hardware, if any); and each
    point's time limit in seconds."""

    warmup: bool = True
    noise_profile: Path | None = None
    point_timeout: float = 3600.0
    priming: bool = True  # the scenario's [bench.gate] priming_boot, unless --no-priming-boot


def run_bench(
    project: Project,
    image: str,
    req: SmokeRequest,
    *,
    against: str | None = None,
    no_baseline: str = "",
    progress: Callable[[str], None] | None = None,
    knee_prior: tuple[float, float | None] | None = None,
    protocol: BenchProtocol | None = None,
) -> BenchReport:
    """Benchmark ``image`` with ``req``'s scenario's ``[bench]`` workload, compared with
    ``against`` (a local image, or ``REPO@sha256:...`` made local by :func:`ensure_local`);
    ``req.log_dir`` is the report folder (default: a new one under build/bench/).

    ``knee_prior``: the last release's knee bracket (its knee, the rate that failed above
    it) on the same scenario and hardware; the search probes it first (:func:`_search`).

    ``protocol``: the measurement protocol (:class:`BenchProtocol`): the warm-up probe, the
    node's noise profile (the boots a side are planned from it, a comparison that could not
    see ``max_mde`` is refused before any boot, the comparison pools it with its own boots'
    spread and may stop after the first ABBA block) and each point's time limit.

    Without ``against``, ``no_baseline`` says why (the report carries it: a gate that did
    not compare is never silent). Raises ConfigError for a scenario without ``[bench]`` or
    simulated acceptance in the environment, BenchError when the server or bench_serving
    cannot run or a figure is not finite. A regression, an inconclusive comparison or a
    refused point is a report (``ok`` False), not an exception.
    """
    protocol = protocol or BenchProtocol()
    ctx = _prepare(project, req, protocol.point_timeout)
    if against and ctx.server_url:
        raise ConfigError(
            f"--against {against} with --server-url {ctx.server_url}: the comparison boots "
            "both images in turn, and sglforge did not start that server",
            "drop --against (the report says no comparison ran), or drop --server-url",
        )
    if against and ctx.rt.kind != "docker":
        raise ConfigError(
            f"--against {against} with the process runtime: both sides would run the same "
            "--python; the comparison boots two images",
            "drop --against (the report says no comparison ran), or use --runtime docker",
        )
    ctx.say = progress or (lambda _m: None)
    ctx.warmup = protocol.warmup and ctx.bench.speed.warmup_probe
    ctx.priming = protocol.priming and ctx.bench.gate.priming_boot
    if against:
        ctx.profile = _node_profile(ctx, protocol.noise_profile)
        noise = ctx.profile.noise() if ctx.profile else None
        require_passable(ctx.bench, ctx.scenario.path, noise)
        ctx.per_side = boots_a_side(ctx.bench, noise)
    ctx.notes.append(_protocol(ctx))
    ctx.knee_prior = _usable_prior(knee_prior, ctx.bench)
    started = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    t0 = time.monotonic()
    image = image if ctx.rt.kind == "docker" else ctx.rt.describe(image)
    if ctx.server_url:
        no_baseline = f"{SERVER_URL_NOTE}: {ctx.server_url}; the comparison needs boots"
        ctx.notes.append(f"measured {ctx.server_url}, {SERVER_URL_NOTE}: no boot time")
    _reap(ctx)
    ctx.dataset = choose_dataset(_dataset_choices(ctx, image))
    ctx.say(f"dataset {ctx.dataset} (from {image}'s own bench_serving)")
    if against:
        _baseline_usable(ctx, against)
    order = abba(ctx.per_side) if against else ("candidate",)
    if against:
        _prime(ctx, against if order[0] == "baseline" else image, protocol.priming)
    boots: list[_Measured] = []
    searched = False
    for i, side in enumerate(order):
        ref = against if side == "baseline" and against else image
        search = side == "candidate" and not searched
        searched = searched or search
        boots.append(_measure(ctx, ref, i, side, len(order), search=search))
        if against and _stops_early(ctx, boots):
            break
    report = _report(ctx, image, against, no_baseline, boots, started, time.monotonic() - t0)
    write_json(report)
    return report


def plan(sc: Scenario, *, compared: bool = True) -> PlannedCost:
    """The node-minutes a bench of the scenario plans (``publish --dry-run`` states it): with
    this node's noise profile from the cache when there is one (its boots a side and boot
    time), else the declared figures."""
    from sglforge.bench import noise as node_noise

    if sc.bench is None:
        raise ConfigError(
            f"{sc.path}: the scenario has no [bench] table", "add one (see docs/bench.md)"
        )
    prof = node_noise.find(sc.name, node_noise.node_hardware(sc.standin))
    if prof is not None and prof.figure != speed_figure(sc.bench):
        prof = None
    return _plan_with(sc.bench, prof, compared=compared, warmup=True)


def _prepare(project: Project, req: SmokeRequest, point_timeout: float) -> _Ctx:
    scenario = req.scenario
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
        parent = work_dir(project.root, "bench")
        run_id = uuid.uuid4().hex[:8]
        folder = confined(parent, f"{scenario.name}-{stamp}-{run_id}", "report folder", "")
        folder.mkdir(parents=True)
    port = port or scenario.port
    host, base = "127.0.0.1", f"http://127.0.0.1:{port}"
    if req.server_url:
        host, port, base = parse_server_url(req.server_url)
    return _Ctx(
        root=project.root,
        scenario=scenario,
        bench=scenario.bench,
        port=port,
        model_path=Path(model).resolve() if model else scenario.model_path,
        report_dir=folder,
        env=merged,
        labels=dict(labels or {}),
        say=lambda _m: None,
        timeout=point_timeout,
        rt=runtime_for(req.runtime, req.python or scenario.python),
        host=host,
        base=base,
        server_url=req.server_url,
    )


def _reap(ctx: _Ctx) -> None:
    for role in ("bench", "bench-client"):
        ctx.rt.reap(role)


@dataclass(frozen=True)
class _Measured:
    """One boot of one image: the knee search (first candidate boot), the speed probe and
    the single-stream run, and the seconds it took."""

    side: str
    order: int
    points: tuple[Point, ...]
    speed: Point
    single: SingleStream | None
    single_samples: tuple[float, ...]
    seconds: float
    ready_seconds: float = 0.0  # start to ready


def _profile(ctx: _Ctx, extra_mounts: tuple[Any, ...] = ()) -> Any:
    from sglforge.engine.profile import Mount

    mounts = list(extra_mounts)
    if ctx.model_path is not None:
        mounts.append(Mount(str(ctx.model_path), ctx.scenario.model_mount, read_only=True))
    return replace(ctx.scenario.container, mounts=tuple(mounts), env=dict(ctx.env))


def _server_command(ctx: _Ctx) -> list[str]:
    command = ctx.scenario.container_command(ctx.port)
    # The hit rate is read on the server: sglang serves /metrics only with --enable-metrics
    # (0.5.14 srt/entrypoints/http_server.py:270-272).
    return command if "--enable-metrics" in command else [*command, "--enable-metrics"]


def _dataset_choices(ctx: _Ctx, image: str) -> list[str]:
    """The ``--dataset-name`` choices of the image's own bench_serving (its ``--help``)."""
    text = _help(ctx, image, "help")
    m = _CHOICES.search(re.sub(r"\s+", " ", text))
    if not m:
        raise BenchError(
            f"{image}: sglang.bench_serving --help lists no --dataset-name choices",
            "run: " + ctx.rt.shell(image, ["python3", "-m", "sglang.bench_serving", "--help"]),
        )
    return [c.strip() for c in m.group(1).split(",")]


HELP_CACHE = "bench-help"  # under the user cache: bench_serving --help of an image, by its ID


def _help(ctx: _Ctx, image: str, name: str) -> str:
    """``python3 -m sglang.bench_serving --help`` in ``image``, written to ``name``.log.

    A Docker image is content-addressed: the same ID runs the same client, so its help text
    is kept in the user cache under the ID, sealed with this machine's key (a hint, never a
    verdict: an entry whose HMAC does not check is a miss, and the client runs). A bench
    against a baseline reads it twice per image and each run costs a container (25-45 s on a
    loaded CI machine). The process runtime's environment has no such ID: it always runs."""
    image_id = _image_id(ctx, image)
    cached = _cached_help(image_id) if image_id else None
    if cached is not None:
        log = ctx.report_dir / f"{name}.log"
        log.write_text(cached, encoding="utf-8")
        return cached
    text = _client(ctx, image, ["--help"], name, expect_file=False)
    if image_id:
        _store_help(image_id, text)
    return text


def _image_id(ctx: _Ctx, image: str) -> str | None:
    if ctx.rt.kind != "docker" or ctx.server_url:
        return None
    from sglforge.engine import images as engine_images
    from sglforge.engine.errors import EngineError

    try:
        info = engine_images.inspect(image)
    except EngineError:  # no ID, no cache: the client runs and says what is wrong
        return None
    return info.id if info is not None and re.fullmatch(r"sha256:[0-9a-f]{64}", info.id) else None


def _help_entry(image_id: str) -> Path:
    from sglforge.cache import cache_root

    return cache_root() / HELP_CACHE / f"{image_id.removeprefix('sha256:')}.json"


def _cached_help(image_id: str) -> str | None:
    from sglforge.cachekey import read_sealed

    doc = read_sealed(_help_entry(image_id), HELP_CACHE, image_id)
    text = doc.get("help") if doc else None
    return text if isinstance(text, str) and text else None


def _store_help(image_id: str, text: str) -> None:
    from sglforge.cachekey import write_sealed

    write_sealed(_help_entry(image_id), HELP_CACHE, image_id, {"help": text})


def _client(
    ctx: _Ctx,
    image: str,
    args: list[str],
    name: str,
    *,
    expect_file: bool = True,
    command: tuple[str, ...] = BENCH_COMMAND,
) -> str:
    """Run bench_serving (or ``command``) in a container of ``image`` (or a process of the
    process runtime's python); its output (or the JSONL's last line)."""
    from sglforge.engine.profile import Mount

    ctx.client_runs += 1
    log = ctx.report_dir / f"{name}.log"
    mount = Mount(str(ctx.report_dir), CLIENT_MOUNT, read_only=False)
    if ctx.host != "127.0.0.1":  # --server-url's host, wherever the flags name the server
        args = [ctx.host if i and args[i - 1] == "--host" else a for i, a in enumerate(args)]
    profile = _profile(ctx, (mount,))
    # No hub: the tokenizer is a local folder (the model's own, or the scenario's).
    profile = replace(profile, env={**profile.env, "HF_HUB_OFFLINE": "1", "HOME": CLIENT_HOME})
    (ctx.report_dir / "home").mkdir(exist_ok=True)
    with ctx.rt.running(
        image,
        entrypoint=(),
        command=[*command, *args],
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
            f"{image}: {' '.join(command[:3]) or args[0]} {name} exited {code}: {tail}",
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
    from sglforge.smoke.runner import wait_ready
    from sglforge.smoke.runtime import RemoteBox

    log = ctx.report_dir / f"{name}.server.log"
    if ctx.server_url:
        ready = wait_ready(RemoteBox(), ctx.port, ctx.scenario.load_timeout, ctx.say, ctx.base)
        if not ready.passed:
            raise BenchError(f"{ctx.server_url}: {ready.detail}", "is the server up there?")
        ctx.say(f"{name}: {ctx.server_url} answers ({SERVER_URL_NOTE}: nothing started)")
        yield
        return
    if port_in_use(ctx.port):
        # Something else would answer the readiness and metrics requests.
        raise BenchError(
            f"127.0.0.1:{ctx.port} is already in use: {image}'s server could not be told apart",
            "free the port or pass --port N",
        )
    ctx.say(f"starting {image} for {name}; log: {log}")
    with ctx.rt.running(
        image,
        entrypoint=(),
        command=_server_command(ctx),
        profile=_profile(ctx),
        log_path=log,
        role="bench",
        labels={"io.sglforge.bench": ctx.scenario.name, **ctx.labels},
    ) as box:
        ready = wait_ready(box, ctx.port, ctx.scenario.load_timeout, ctx.say, ctx.base)
        if not ready.passed:
            raise BenchError(f"{image}: {ready.detail}", f"read {log}")
        died = f"{image}: the server exited with code {{}} during the bench"
        try:
            yield
        except BenchError as exc:
            # A refused /metrics or a failed client usually means the server just died: the
            # exit is the cause to report (the runtime sees it a moment later).
            if not box.wait_exit(EXIT_GRACE_S):
                raise
            what = f"{died.format(box.exit_code)} ({exc.message})"
            raise BenchError(what, f"read {log}") from None
        if box.exited.is_set():
            raise BenchError(died.format(box.exit_code), f"read {log}")


def _scrape(ctx: _Ctx) -> dict[str, float]:
    url = f"{ctx.base}/metrics"
    try:
        status, body = http_request(url, None, timeout=30)
    except HttpError as exc:
        raise BenchError(f"{url}: {exc}", "the server must run with --enable-metrics") from None
    if status != 200:
        raise BenchError(
            f"{url}: HTTP {status}: no Prometheus metrics",
            "the server must serve /metrics (--enable-metrics)",
        )
    return metric_sums(body.decode(errors="replace"))


def _usable_prior(
    prior: tuple[float, float | None] | None, bench: Any = None
) -> tuple[float, float | None] | None:
    """The last release's bracket when it is one (a finite knee, a higher failure) inside the
    band this scenario's schedule searches: from an eighth of its lowest rate to its highest
    (``[bench.search]`` start and max_rate, or ``request_rates``). A record's knee of 1e-300
    RPS would make the first probe wait for ever (F18); one outside the band is not used."""
    if prior is None:
        return None
    knee, above = prior
    if not (isinstance(knee, int | float) and math.isfinite(knee) and knee > 0):
        return None
    low, high = _prior_band(bench)
    if not low <= knee <= high:
        return None
    if above is not None and not (isinstance(above, int | float) and math.isfinite(above)):
        above = None
    if above is not None and not knee < above <= high:
        above = None
    return float(knee), (float(above) if above is not None else None)


def _prior_band(bench: Any) -> tuple[float, float]:
    """(lowest, highest) rate a prior knee may have for ``bench``'s schedule."""
    search = getattr(bench, "search", None)
    if search is not None:
        return search.start / 8, search.max_rate
    rates = [r for r in getattr(bench, "request_rates", ()) or () if r > 0]
    return (min(rates) / 8, max(rates)) if rates else (0.0, math.inf)


def _search(ctx: _Ctx, measure: Callable[[float], Point]) -> list[Point]:
    """The knee search. With ``[bench.search]``: double from ``start`` until the rule breaks
    (the last probe at ``max_rate``); with ``request_rates``: up the list until it breaks.
    Then ``steps`` bisections (2 for a list) between the last pass and the first failure;
    when the first probe already fails, between 0 and it (a start near the expected knee
    costs fewer probes, and a slower candidate still gets a knee below it).

    With the last release's bracket (``ctx.knee_prior``: its knee K and the rate F that
    failed above it), the search reuses what that release learned: it probes K, then F.
    K passing and F failing confirms the bracket (2 probes, no bisection: it is as narrow as
    the last release's). K failing bisects between 0 and K; F passing climbs on from F
    through the schedule's higher rates, then bisects."""
    b = ctx.bench
    points: list[Point] = []
    good, bad = 0.0, math.inf
    if b.search is None:
        rates, steps = list(b.request_rates), 2
    else:
        rates, r, steps = [], b.search.start, b.search.steps
        while r < b.search.max_rate:
            rates.append(r)
            r *= 2
        rates.append(b.search.max_rate)
    prior = ctx.knee_prior
    if prior is not None:
        knee, above = prior
        first = [knee] if above is None else [knee, above]
        rates = first + [r for r in rates if r > first[-1]]
        shown = f"[{knee:g}, {above:g})" if above is not None else f"at least {knee:g}"
        ctx.notes.append(f"knee search: from the last release's bracket {shown}")
    for rate in rates:
        p = measure(rate)
        points.append(p)
        if not p.within(b.knee):
            bad = rate
            break
        good = rate
    confirmed = prior is not None and (good, bad) == (prior[0], prior[1])
    for _ in range(steps if math.isfinite(bad) and not confirmed else 0):
        mid = round((good + bad) / 2, 3)
        if mid in (good, bad):
            break
        p = measure(mid)
        points.append(p)
        good, bad = (mid, bad) if p.within(b.knee) else (good, mid)
    return sorted(points, key=lambda p: p.request_rate)


def _point(
    ctx: _Ctx,
    image: str,
    name: str,
    rate: float,
    *,
    num_prompts: int = 0,
    concurrency: int = 0,
    discard: bool = False,
) -> Point:
    """One bench_serving run, with the server's own counts: the hit rate and the mean input
    and output tokens; refused when either is off what the scenario declares. ``discard``: a
    warm-up whose figures nobody reads (a text-length calibration it triggers is not
    measured again)."""
    b = ctx.bench
    tokenizer = b.tokenizer or ctx.scenario.model_mount
    before = _scrape(ctx)
    args = point_args(
        b,
        ctx.dataset,
        rate,
        port=ctx.port,
        tokenizer=tokenizer,
        output_file=f"{CLIENT_MOUNT}/{name}.jsonl",
        num_prompts=num_prompts,
        concurrency=concurrency,
    )
    result = json.loads(_client(ctx, image, args, name))
    after = _scrape(ctx)
    hit = hit_rate(before, after)
    served = after.get(REQUESTS, 0.0) - before.get(REQUESTS, 0.0)
    counted = (
        (
            after.get("sglang:prompt_tokens_total", 0.0)
            - before.get("sglang:prompt_tokens_total", 0.0)
        )
        / served
        if served > 0
        else None,
        (after.get(GENERATED, 0.0) - before.get(GENERATED, 0.0)) / served if served > 0 else None,
    )
    point = point_from_result(rate, result, hit, counted, b.gate.confidence)
    require_finite(f"{name} output tok/s", [point.output_tok_s])
    expected = b.expected_hit(ctx.dataset)
    why = []
    if hit is None or abs(hit - expected) > b.hit_tolerance:
        shown = "none" if hit is None else f"{hit:.3f}"
        gauge = after.get(HIT_GAUGE)
        why.append(
            f"prefix-cache hit {shown} on the server (sglang:cached_tokens_total"
            f" / sglang:prompt_tokens_total; gauge {gauge}), declared {expected:.3f}"
            f" +- {b.hit_tolerance:g}"
        )
    mean_in = counted[0]
    off = mean_in is None or abs(mean_in / b.input_len - 1) > INPUT_TOLERANCE
    if off and mean_in and not ctx.calibrated and ctx.dataset != RANDOM_IDS_SHARED_PREFIX:
        # Text lengths: scale what is asked by what the server counted, once, and measure
        # this point again; every later point of either image uses the same prompts.
        ctx.calibrated = True
        scale = b.length_scale * b.input_len / mean_in
        ctx.bench = replace(b, length_scale=scale)
        ctx.notes.append(
            f"calibrated generated-shared-prefix lengths x{scale:.4f}: the server counted "
            f"{mean_in:.0f} input tokens for {b.input_len} declared"
        )
        ctx.say(ctx.notes[-1])
        if discard:
            return point
        return _point(ctx, image, f"{name}-calibrated", rate, num_prompts=num_prompts,
                      concurrency=concurrency)  # fmt: skip
    ctx.calibrated = True
    if off:
        shown = "none" if mean_in is None else f"{mean_in:.0f}"
        why.append(
            f"mean input {shown} tokens counted by the server (sglang:prompt_tokens_total /"
            f" {REQUESTS}), declared {b.input_len} +- {INPUT_TOLERANCE:.0%}"
        )
    return replace(point, refused="; ".join(why)) if why else point


def _measure(
    ctx: _Ctx, image: str, order: int, side: str, total: int, *, search: bool
) -> _Measured:
    b = ctx.bench
    t0 = time.monotonic()
    with _server(ctx, image, f"{side}-{order}"):
        ready = time.monotonic() - t0
        where = f"{side} boot {order + 1}/{total}"

        def measure(rate: float) -> Point:
            ctx.say(f"{where}: knee probe at {rate:g} requests/s")
            return _point(
                ctx, image, f"{side}-{order}-rate-{rate:g}", rate, num_prompts=b.probe_prompts
            )

        # The compared probes first, the knee search after them: every boot's compared
        # figures are then taken at the same point of its life (the first candidate boot's
        # would otherwise follow minutes of overload: a warmer GPU, a longer-running server).
        c = b.speed.concurrency
        if ctx.warmup:
            ctx.say(f"{where}: warm-up probe (discarded), {warmup_prompts(b)} requests at {c}")
            _point(ctx, image, f"{side}-{order}-warmup", math.inf, concurrency=c,
                   num_prompts=warmup_prompts(b), discard=True)  # fmt: skip
            b = ctx.bench  # a text-length calibration may have scaled the prompts
        ctx.say(
            f"{where}: speed probe, {b.prompts(b.speed.num_prompts)} requests at concurrency {c}"
        )
        speed = _point(
            ctx, image, f"{side}-{order}-speed", math.inf,
            num_prompts=b.speed.num_prompts, concurrency=c,
        )  # fmt: skip
        single, samples = _single_stream(ctx, image, order, side) if b.single_stream else (None, ())
        points = _search(ctx, measure) if search else []
    took = time.monotonic() - t0
    return _Measured(side, order, tuple(points), speed, single, samples, took, ready)


def _prime(ctx: _Ctx, image: str, wanted: bool) -> bool:
    """The priming boot: ``image`` booted once, with its warm-up probe, and discarded before
    the first measured boot (on an H200 the first boot of each machine lease stood 13-23 %
    from the others, in either direction; the later ones spread 1.4 %: docs/bench.md). Said
    in the notes either way; whether it ran."""
    if not (wanted and ctx.bench.gate.priming_boot):
        why = "--no-priming-boot" if ctx.bench.gate.priming_boot else (
            "[bench.gate] priming_boot = false")  # fmt: skip
        ctx.notes.append(f"priming boot: off ({why}): the first measured boot is the node's first")
        return False
    t0 = time.monotonic()
    with _server(ctx, image, "priming"):
        ready = time.monotonic() - t0
        if ctx.warmup:
            c = ctx.bench.speed.concurrency
            ctx.say(f"priming boot: warm-up probe (discarded), {warmup_prompts(ctx.bench)} at {c}")
            _point(ctx, image, "priming-warmup", math.inf, concurrency=c,
                   num_prompts=warmup_prompts(ctx.bench), discard=True)  # fmt: skip
    ctx.notes.append(
        f"priming boot: {image} booted once ({ready:.0f} s to ready) and discarded before the "
        "first measured boot (the first boot of a machine is not like the later ones)"
    )
    return True


PROMPTS = "single-stream-prompts.jsonl"


def _single_stream(
    ctx: _Ctx, image: str, order: int, side: str
) -> tuple[SingleStream, tuple[float, ...]]:
    """The single stream: text prompts through the chat template (``custom``), generated once
    per bench with the image's tokenizer; the server's count confirms their length."""
    b = ctx.bench
    ss = b.single_stream
    assert ss is not None
    name = f"{side}-{order}-single-stream"
    tokenizer = b.tokenizer or ctx.scenario.model_mount
    if not (ctx.report_dir / PROMPTS).is_file():
        ctx.say(f"writing {ss.num_prompts} single-stream prompts of {ss.input_len} tokens")
        args = program_args(
            tokenizer, f"{CLIENT_MOUNT}/{PROMPTS}", ss.input_len, ss.num_prompts, ss.chat_template
        )
        _client(ctx, image, args, "single-stream-prompts", expect_file=False, command=())
    ctx.say(f"{side} boot {order + 1}: single stream")
    args = single_stream_args(
        b,
        port=ctx.port,
        tokenizer=tokenizer,
        output_file=f"{CLIENT_MOUNT}/{name}.jsonl",
        dataset_path=f"{CLIENT_MOUNT}/{PROMPTS}",
    )
    before = _scrape(ctx)
    result = json.loads(_client(ctx, image, args, name))
    after = _scrape(ctx)
    served = after.get(REQUESTS, 0.0) - before.get(REQUESTS, 0.0)
    prompt = after.get(PROMPT_TOKENS, 0.0) - before.get(PROMPT_TOKENS, 0.0)
    mean_in = prompt / served if served > 0 else None
    point = point_from_result(math.inf, result, None)
    tpot = result.get("mean_tpot_ms")
    decode = 1000.0 / tpot if isinstance(tpot, int | float) and tpot > 0 else 0.0
    require_finite(f"{name} decode tok/s", [decode])
    accept = result.get("accept_length")
    single = SingleStream(
        decode_tok_s=decode,
        accept_length=float(accept) if isinstance(accept, int | float) else None,
        ttft_s=float(result.get("median_ttft_ms") or 0.0) / 1000,
        output_tok_s=float(result.get("output_throughput") or 0.0),
        input_tokens=mean_in,
    )
    if mean_in is None or abs(mean_in / ss.input_len - 1) > INPUT_TOLERANCE:
        shown = "none" if mean_in is None else f"{mean_in:.0f}"
        ctx.refused.append(
            f"single stream: mean input {shown} tokens counted by the server, declared "
            f"{ss.input_len} +- {INPUT_TOLERANCE:.0%}"
        )
    return single, point.decode_tok_s


SINGLE_FIGURE = "single_stream_decode_tok_s"


def speed_figure(bench: Bench) -> str:
    """The compared figure's name: per-request decode tok/s at the probe's concurrency."""
    return f"decode_tok_s_per_request_at_concurrency_{bench.speed.concurrency}"


def _report(
    ctx: _Ctx,
    image: str,
    against: str | None,
    no_baseline: str,
    boots: list[_Measured],
    started: str,
    seconds: float,
) -> BenchReport:
    engine_images = _images(ctx)

    b = ctx.bench
    cand = [m for m in boots if m.side == "candidate"]
    base = [m for m in boots if m.side == "baseline"]
    rows = [p for m in cand for p in m.points]
    found = capacity(rows, b.knee)
    singles = [m.single for m in cand if m.single is not None]
    run = ImageRun.of(
        image, _digest(engine_images, image), rows, found.point if found else None, singles,
        speed=tuple(m.speed for m in cand), knee_above=found.above if found else None,
    )  # fmt: skip
    base_run = None
    changes: list[Change] = []
    if against:
        base_run = ImageRun.of(
            against,
            _digest(engine_images, against),
            (),
            None,
            [m.single for m in base if m.single is not None],
            speed=tuple(m.speed for m in base),
        )
        changes = _changes(ctx, boots)
    refused = [p.refused for m in boots for p in (*m.points, m.speed) if p.refused]
    refused += ctx.refused
    spent = _planned(ctx, compared=bool(against))
    return BenchReport(
        scenario=ctx.scenario.name,
        scenario_path=ctx.scenario.path,
        hardware=STANDIN_HARDWARE if ctx.scenario.standin else "gpu",
        dataset=ctx.dataset,
        expected_hit=b.expected_hit(ctx.dataset),
        knee_rule=b.knee,
        run=run,
        baseline=base_run,
        changes=tuple(changes),
        refused=tuple(dict.fromkeys(refused)),
        report_dir=ctx.report_dir,
        started_at=started,
        duration_s=round(seconds, 3),
        repeats=b.repeats,
        no_baseline="" if against else (no_baseline or "no --against image was given"),
        planned=spent,
        notes=tuple(ctx.notes),
        boot_seconds=() if ctx.server_url else tuple(round(m.seconds, 1) for m in boots),
        input_len=b.input_len,
    )


def _images(ctx: _Ctx) -> Any:
    """The engine's images module (None for the process runtime: no image, no Docker SDK)."""
    if ctx.rt.kind != "docker":
        return None
    from sglforge.engine import images

    return images


def _digest(engine_images: Any, image: str) -> str | None:
    info = engine_images.inspect(image) if engine_images is not None else None
    return (info.digest or info.id) if info else None


def ensure_local(ref: str, say: Callable[[str], None] | None = None, creds: Any = None) -> str:
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


_MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")


def _baseline_usable(ctx: _Ctx, against: str) -> None:
    """The baseline's own bench client starts (its ``--help``), checked before any boot: a
    release built without bench_serving's dependencies (on the stand-in base without
    ``--bench``, say) cannot be benched. BaselineUnusable (exit 10) names the missing module,
    instead of a failure after the candidate's boots that reads like a smoke preflight's."""
    try:
        _help(ctx, against, "baseline-help")
    except BenchError as exc:
        log = ctx.report_dir / "baseline-help.log"
        text = log.read_text(errors="replace") if log.is_file() else exc.message
        missing = _MISSING_MODULE.findall(text)
        cause = (
            f"its bench client lacks the module {missing[-1]!r}"
            if missing
            else f"its bench client does not start ({exc.message})"
        )
        raise BaselineUnusable(
            f"the last release {against} cannot be the bench baseline: {cause}, so it was "
            "built on a base without bench_serving's dependencies (the stand-in base without "
            "--bench, say)",
            "publish with --no-baseline REASON, or republish the last release on a base that "
            f"has them; read {log}",
        ) from None


# The gate's plan, early stop and calibration (issue 40): the node's measured noise, never a
# declared constant alone (sglforge.bench.stats.compare, sglforge.bench.noise).


def _protocol(ctx: _Ctx) -> str:
    """The measurement protocol, for the report's notes."""
    b = ctx.bench
    if not ctx.warmup:
        why = "--no-warmup" if b.speed.warmup_probe else "[bench.speed] warmup_probe = false"
        return f"warm-up probe: off ({why}): the compared probe is each boot's first"
    return (
        f"warm-up probe: {warmup_prompts(b)} requests at concurrency {b.speed.concurrency}, "
        "discarded, before the compared probe in every boot (first-use compilation lands in it)"
    )


def _node_profile(ctx: _Ctx, given: Path | None) -> Any:
    """The node's noise profile: ``given``, else the cache's for this scenario and hardware;
    None (noted) when there is none or it measured another figure."""
    from sglforge.bench import noise as node_noise

    hardware = node_noise.node_hardware(ctx.scenario.standin)
    prof = node_noise.load(given) if given else node_noise.find(ctx.scenario.name, hardware)
    figure = speed_figure(ctx.bench)
    if prof is None or prof.figure != figure:
        what = "no node profile" if prof is None else f"{prof.path} measured {prof.figure}"
        ctx.notes.append(
            f"{what}: {ctx.bench.repeats} boots a side against the declared noise; the interval "
            "uses the boots' own spread (run sglforge bench --calibrate K on this node)"
        )
        return None
    other = (
        f"; measured on {prof.hardware}, this node is {hardware}"
        if prof.hardware != hardware
        else ""
    )
    ctx.notes.append(
        f"node profile {prof.path}: boot-to-boot sd {prof.boot_sd:.2%} over "
        f"{len(prof.boot_means)} boots ({prof.measured_at}){other}"
    )
    return prof


def _looks(ctx: _Ctx) -> Looks | None:
    """Two looks (after the first ABBA block, at the end) when more than one block is
    planned and a node profile gives the first look degrees of freedom to stop on."""
    return Looks(2, ctx.per_side) if ctx.profile is not None and ctx.per_side > 2 else None


def _changes(ctx: _Ctx, boots: list[_Measured]) -> list[Change]:
    """The compared figures over ``boots``: the speed probe's requests in waves of its
    concurrency, the single stream's one at a time."""
    b, g = ctx.bench, ctx.bench.gate
    kw: dict[str, Any] = {
        "boot_sd": g.boot_sd,
        "confidence": g.confidence,
        "tolerance": g.tolerance,
        "max_mde": g.max_mde,
        "looks": _looks(ctx),
    }
    c = b.speed.concurrency
    speed = [Block(m.side, m.order, m.speed.decode_tok_s, c) for m in boots]
    noise = ctx.profile.noise() if ctx.profile else None
    out = [compare(speed_figure(b), speed, noise=noise, **kw)]
    if b.single_stream:
        single = [Block(m.side, m.order, m.single_samples) for m in boots]
        its = ctx.profile.noise_of(SINGLE_FIGURE) if ctx.profile else None
        out.append(compare(SINGLE_FIGURE, single, noise=its, **kw))
    return out


def _stops_early(ctx: _Ctx, boots: list[_Measured]) -> bool:
    """At the first look (the first ABBA block done): stop when a figure dropped, or when
    every figure passed; noted in the report."""
    looks = _looks(ctx)
    if looks is None or len(boots) != 2 * looks.first:
        return False
    changes = _changes(ctx, boots)
    stop = any(c.status == REGRESSED for c in changes) or all(c.status == PASSED for c in changes)
    said = "; ".join(f"{c.figure} {c.status} ({c.mean:+.1%})" for c in changes)
    ctx.notes.append(
        f"first look after {looks.first} boots a side of {looks.final}: {said}"
        + (": stopped early" if stop else ": going on")
    )
    ctx.say(ctx.notes[-1])
    return stop


def _planned(ctx: _Ctx, *, compared: bool) -> PlannedCost:
    """The plan with the node profile's noise and measured boot time when there is one."""
    return _plan_with(
        ctx.bench, ctx.profile, compared=compared, warmup=ctx.warmup, priming=ctx.priming
    )


def _plan_with(
    bench: Bench, prof: Any, *, compared: bool, warmup: bool, priming: bool = True
) -> PlannedCost:
    noise = prof.noise() if prof and compared else None
    minutes = prof.boot_minutes() if prof else None
    boot = (
        (minutes, f"measured: median boot to ready of {len(prof.boot_seconds)} boots ({prof.path})")
        if prof and minutes
        else None
    )
    return planned_cost(
        bench, compared=compared, noise=noise, boot_minutes=boot, warmup=warmup, priming=priming
    )


def run_calibration(
    project: Project,
    image: str,
    req: SmokeRequest,
    *,
    boots: int = 6,
    protocol: BenchProtocol | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[Any, Path]:
    """``bench --calibrate``: ``boots`` boots of ``image``, each with the warm-up, the
    compared speed probe and the single stream (no knee search); the node profile they measure
    (sglforge.bench.noise.Profile), written to ``protocol.noise_profile`` (default: the
    cache's file for this scenario and hardware) and into the report folder. (profile,
    where it was written)."""
    from sglforge.bench import noise as node_noise

    if boots < 2:
        raise ConfigError(f"--calibrate {boots}: a spread needs 2 boots or more", "use 6 or more")
    protocol = protocol or BenchProtocol()
    ctx = _prepare(project, req, protocol.point_timeout)
    ctx.say = progress or (lambda _m: None)
    ctx.warmup = protocol.warmup and ctx.bench.speed.warmup_probe
    image = image if ctx.rt.kind == "docker" else ctx.rt.describe(image)
    _reap(ctx)
    ctx.dataset = choose_dataset(_dataset_choices(ctx, image))
    primed = _prime(ctx, image, protocol.priming)
    measured = [_measure(ctx, image, i, "calibrate", boots, search=False) for i in range(boots)]
    c = ctx.bench.speed.concurrency
    hardware = node_noise.node_hardware(ctx.scenario.standin)
    single = {SINGLE_FIGURE: [Block("baseline", m.order, m.single_samples) for m in measured]}
    profile = node_noise.measure(
        [Block("baseline", m.order, m.speed.decode_tok_s, c) for m in measured],
        scenario=ctx.scenario.name, hardware=hardware, figure=speed_figure(ctx.bench),
        boot_seconds=[round(m.ready_seconds, 1) for m in measured], image=image,
        warmup_probe=ctx.warmup, others=single if ctx.bench.single_stream else None,
    )  # fmt: skip
    profile = replace(profile, priming_boot=primed)
    out = protocol.noise_profile or node_noise.default_path(ctx.scenario.name, hardware)
    path = node_noise.save(profile, out)
    node_noise.save(profile, ctx.report_dir / "noise-profile.json")
    return replace(profile, path=str(path)), path
