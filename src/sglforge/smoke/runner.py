"""``run_smoke``: preflight, start the container (:mod:`sglforge.engine.containers`), wait for
readiness while watching the container, run the checks, write the report folder.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import time
import uuid
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglforge.errors import ConfigError, SmokeError
from sglforge.requests import SmokeRequest
from sglforge.scenario.constants import EXIT_GRACE_S, HTTP_FAILED, LOG_TAIL_LINES, Value
from sglforge.scenario.file import LogMatch, Scenario
from sglforge.smoke.checks import (
    CHECK_ORDER,
    HttpError,
    _Session,
    _timed,
    http_request,
    logs_check,
    scan_log,
    scan_required,
)
from sglforge.smoke.preflight import (
    GpuInventory,
    Host,
    detect_gpus,
    expected_arch,
    preflight,
    refuse_simulated_acceptance,
)
from sglforge.smoke.report import Check, SmokeReport, report_dict
from sglforge.smoke.runtime import (
    SERVER_URL_NOTE,
    RemoteBox,
    Runtime,
    parse_server_url,
    runtime_for,
)
from sglforge.util import atomic_write, check_output_dir, confined, tail_lines, work_dir

if TYPE_CHECKING:
    from sglforge.project import Project


def _stamp() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")


def new_report_dir(root: Path, scenario: str) -> tuple[Path, str]:
    """A fresh ``build/smoke/<scenario>-<UTC stamp>-<run id>`` folder, and the run id.

    The run id is random and the folder is created exclusively, so two runs of one scenario in
    the same second never share (or overwrite) a report folder.
    """
    parent = work_dir(root, "smoke")
    for _ in range(100):
        run_id = uuid.uuid4().hex[:8]
        folder = confined(parent, f"{scenario}-{_stamp()}-{run_id}", "report folder", scenario)
        try:
            folder.mkdir(exist_ok=False)
        except FileExistsError:
            continue
        return folder, run_id
    raise SmokeError(
        f"{parent}: could not create a new report folder for {scenario}",
        "pass --log-dir DIR",
    )


@dataclass
class _Run:
    """One smoke run as its steps build it up: what was asked, and what preflight found."""

    scenario: Scenario
    image: str
    port: int
    timeout: float
    model_path: Path | None
    report_dir: Path
    run_id: str
    log_path: Path
    say: Callable[[str], None]
    t_start: float
    started_at: str
    image_digest: str | None = None
    image_id: str | None = None
    figures: dict[str, Value] = field(default_factory=dict)
    preflight: tuple[Check, ...] = ()
    rt: Runtime | None = None  # None with --server-url: nothing is started
    base: str = ""  # the server's URL: http://127.0.0.1:<port>, or --server-url's
    server_url: str | None = None
    not_run: tuple[str, ...] = ()  # what a server sglforge did not start leaves unmeasured


@dataclass
class _Outcome:
    """What launching and checking found (empty when the run stopped at preflight)."""

    checks: list[Check]
    reason: str = ""
    log_path: Path | None = None
    cannot_run: bool = False
    figures: Mapping[str, Value] = field(default_factory=dict)
    exit_code: int | None = None
    log_tail: tuple[str, ...] = ()
    crash_at: float | None = None
    warnings: tuple[LogMatch, ...] = ()
    required: tuple[LogMatch, ...] = ()


def run_smoke(
    project: Project,
    image: str,
    req: SmokeRequest,
    progress: Callable[[str], None] | None = None,
    gpus: GpuInventory | None = None,
) -> SmokeReport:
    """Run ``req``'s scenario against ``image``; the report says passed, failed or cannot-run.

    ``project``'s ``build/smoke/`` gets the report folder, and its targets name the arch an
    image without a label needs. A failing
    or dying server is a report, never an exception; a bad scenario raises ConfigError and a
    missing engine EngineUnavailable. Ctrl-C/SIGTERM propagate (as KeyboardInterrupt) after
    the container is removed. ``req.env`` and ``req.labels`` add to the container's; ``gpus``
    replaces probing the host (for callers that already know).

    The steps: ``_prepare`` (scenario, report folder), ``_preflight`` (host and image),
    ``_launch`` (container, readiness, checks, logs), ``_finish`` (verdict, report.json).
    """
    run = _prepare(project.root, image, req, progress)
    env, labels = req.env, req.labels
    refuse_simulated_acceptance({**run.scenario.container.env, **env}, run.scenario.path)
    run = _preflight(project, run, gpus)
    if any(not c.passed for c in run.preflight):
        bad = [c.name for c in run.preflight if not c.passed]
        return _finish(run, _Outcome([], reason=f"preflight: {', '.join(bad)} failed"))
    try:
        outcome = _launch(run, env, labels)
    except SmokeError as exc:
        # The container would not start: the host cannot run this scenario as configured.
        start = Check("start", False, None, None, exc.message)
        outcome = _Outcome([start], exc.message, run.log_path, cannot_run=True)
    return _finish(run, outcome)


def _prepare(
    root: Path, image: str, req: SmokeRequest, progress: Callable[[str], None] | None
) -> _Run:
    """The scenario, the effective options, and a fresh report folder."""
    t_start = time.monotonic()
    started_at = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    scenario = req.scenario
    load_timeout, log_dir, model, port = req.load_timeout, req.log_dir, req.model, req.port
    timeout = float(load_timeout if load_timeout is not None else scenario.load_timeout)
    if not (math.isfinite(timeout) and timeout > 0):
        raise ConfigError(
            f"--load-timeout {timeout!r}: must be a finite number of seconds greater than 0"
        )
    port = port or scenario.port
    rt: Runtime | None = None
    base = f"http://127.0.0.1:{port}"
    not_run: tuple[str, ...] = ()
    if req.server_url:
        _host, port, base = parse_server_url(req.server_url)
        not_run = ("boot time", "logs", "stays-up")
    else:
        rt = runtime_for(req.runtime, req.python or scenario.python)
    if log_dir:
        report_dir, run_id = check_output_dir(log_dir, "--log-dir"), uuid.uuid4().hex[:8]
    else:
        report_dir, run_id = new_report_dir(root, scenario.name)
    return _Run(
        scenario=scenario,
        image=base if req.server_url else rt.describe(image) if rt else image,
        port=port,
        timeout=timeout,
        model_path=Path(model).resolve() if model else scenario.model_path,
        report_dir=report_dir,
        run_id=run_id,
        log_path=report_dir / "server.log",
        say=progress or (lambda _m: None),
        t_start=t_start,
        started_at=started_at,
        rt=rt,
        base=base,
        server_url=req.server_url,
        not_run=not_run,
    )


def _preflight(project: Project, run: _Run, gpus: GpuInventory | None) -> _Run:
    """Leftovers of killed runs removed; the image, devices, arch, model and port checked."""
    if run.rt is None or run.rt.kind != "docker":
        return _preflight_local(project, run, gpus)
    from sglforge.engine import containers
    from sglforge.engine import images as engine_images

    reaped = containers.reap_orphans("smoke")
    if reaped:
        run.say(f"removed {len(reaped)} container(s) left by a killed run: {', '.join(reaped)}")
    info = engine_images.inspect(run.image)
    if run.scenario.accelerator == "rocm" and gpus is None:
        run.say("preflight: probing GPUs (rocminfo / amd-smi / KFD topology)")
        gpus = detect_gpus()
    arch = expected_arch(project, run.scenario, dict(info.labels) if info else {})
    run.preflight = tuple(
        preflight(
            run.scenario,
            image=run.image,
            image_found=info is not None,
            model_path=run.model_path,
            port=run.port,
            arch=arch,
            host=Host(gpus),
        )
    )
    if gpus is not None and gpus.archs:
        run.figures["gpus"] = len(gpus.archs)
        run.figures["gpu_arch"] = ",".join(sorted(set(gpus.archs)))
    if info is not None:
        run.image_digest, run.image_id = info.digest or info.id, info.id
    return run


def _preflight_local(project: Project, run: _Run, gpus: GpuInventory | None) -> _Run:
    """The process runtime's preflight: the container's, with the interpreter for the image;
    none for a server sglforge did not start (it is there or the readiness check says not)."""
    if run.rt is None:
        return run
    if run.scenario.accelerator == "rocm" and gpus is None:
        gpus = detect_gpus()
    checks = preflight(
        run.scenario,
        image=run.image,
        image_found=True,
        model_path=run.model_path,
        port=run.port,
        arch=expected_arch(project, run.scenario, {}),
        host=Host(gpus),
    )
    ran = Check("preflight.runtime", True, run.image, "a local process")
    run.preflight = (ran, *(c for c in checks if c.name != "preflight.image"))
    return run


def _launch(run: _Run, env: Mapping[str, str] | None, labels: Mapping[str, str] | None) -> _Outcome:
    """Start the server, wait until it serves, run the checks, then read its whole log."""
    scenario, say = run.scenario, run.say
    session = _Session(scenario, run.port, run.base)
    out = _Outcome([], log_path=None if run.server_url else run.log_path)
    with _server(run, env, labels) as box:
        ready = wait_ready(box, run.port, run.timeout, say, url=run.base)
        if ready.passed and run.server_url:
            # Seconds until it answered, not a boot: ready_s is left out, and says why.
            ready = replace(ready, detail=f"it answers; no boot time ({SERVER_URL_NOTE})")
            say(f"{run.base} answers; running checks (no boot time: {SERVER_URL_NOTE})")
        elif ready.passed:
            run.figures["ready_s"] = ready.value
            say(f"ready after {ready.value} s; running checks")
        out.checks.append(ready)
        if ready.passed:
            out.checks += _serving_checks(box, session, scenario, say)
        if box.exited.is_set():
            out.exit_code = box.exit_code
            out.crash_at = box.finished_at() or box.noticed_exit_at
            box.drain_logs()
            out.reason = f"the server exited with code {out.exit_code}"
        elif not ready.passed:
            out.reason = ready.detail
        if not all(c.passed for c in out.checks):
            out.log_tail = tuple(box.tail(LOG_TAIL_LINES))
    _log_checks(run, out)
    _fill_not_run(out.checks, scenario)
    out.figures = session.figures
    return out


def _server(
    run: _Run, env: Mapping[str, str] | None, labels: Mapping[str, str] | None
) -> AbstractContextManager[Any]:
    """The scenario's server through the run's runtime (a container, or a local process), or
    the one ``--server-url`` names, which is neither started nor stopped here."""
    if run.rt is None:
        run.say(f"checking {run.base} ({run.scenario.name}): {SERVER_URL_NOTE}")
        return nullcontext(RemoteBox())
    from sglforge.engine.profile import Mount

    scenario = run.scenario
    assert run.model_path is not None  # preflight.model passed
    profile = replace(
        scenario.container,
        mounts=(Mount(str(run.model_path), scenario.model_mount, read_only=True),),
        env={**scenario.container.env, **dict(env or {})},
    )
    run.say(f"starting {run.image} ({scenario.name}) on 127.0.0.1:{run.port}; log: {run.log_path}")
    # The launch command is the container's command, under the image's own ENTRYPOINT (none
    # in release images, reset in overlays): smoke runs exactly what `docker run` runs.
    return run.rt.running(
        run.image,
        entrypoint=None,
        command=scenario.container_command(run.port),
        profile=profile,
        log_path=run.log_path,
        labels={"io.sglforge.smoke": scenario.name, **dict(labels or {})},
    )


def _serving_checks(
    box: Any, session: _Session, scenario: Scenario, say: Callable[[str], None]
) -> list[Check]:
    """The checks against a ready server, in order; those after a server exit are skipped."""
    out: list[Check] = []
    for name, fn in (
        ("serves", session.serves),
        ("arithmetic", session.arithmetic),
        ("decode-speed", session.speed),
        ("spec-accept.requests", session.spec_requests),
        ("spec-accept.server", session.spec_server),
    ):
        if name.startswith("spec-") and not scenario.checks.spec_enabled:
            continue
        if box.exited.is_set():
            out.append(Check(name, False, None, None, "not run: the server exited", skipped=True))
            continue
        say(f"check {name}")
        check = _timed(name, fn)
        out.append(check)
        if check.detail.startswith(HTTP_FAILED):
            # A refused or cut connection usually means the server just died; the engine
            # reports the exit a moment later, so give it that moment.
            box.wait_exit(EXIT_GRACE_S)
    if isinstance(box, RemoteBox):
        out.append(Check("stays-up", False, None, None, f"not run: {SERVER_URL_NOTE}", True))
    elif box.wait_exit(0.05):
        out.append(
            Check(
                "stays-up", False, box.exit_code, "running", "the server exited during the checks"
            )
        )
    else:
        out.append(Check("stays-up", True, "running", "running"))
    return out


def _log_checks(run: _Run, out: _Outcome) -> None:
    """The container is gone, so its log is complete: forbidden and required lines."""
    scenario = run.scenario
    if run.server_url:
        out.checks.append(
            Check("logs", False, None, None, f"not run: no server log ({SERVER_URL_NOTE})", True)
        )
        return
    matches = scan_log(run.log_path, scenario.checks.forbidden)
    out.required = tuple(scan_required(run.log_path, scenario.checks.required))
    out.warnings = tuple(m for m in matches if m.severity == "warn")
    out.warnings += tuple(r for r in out.required if r.severity == "warn" and r.missing)
    out.checks.append(logs_check(matches, len(scenario.checks.forbidden), out.required))
    if not out.reason and not all(c.passed for c in out.checks):
        out.reason = "failed: " + ", ".join(c.name for c in out.checks if not c.passed)
    if not all(c.passed for c in out.checks) and not out.log_tail:
        out.log_tail = tuple(tail_lines(run.log_path, LOG_TAIL_LINES))


def _fill_not_run(checks: list[Check], scenario: Scenario) -> None:
    """Every check of CHECK_ORDER present (skipped when not reached), in that order."""
    ran = {c.name for c in checks}
    for name in CHECK_ORDER:
        if name not in ran and not (name.startswith("spec-") and not scenario.checks.spec_enabled):
            checks.append(
                Check(
                    name, False, None, None, "not run: the server never became ready", skipped=True
                )
            )
    order = {n: i for i, n in enumerate(CHECK_ORDER)}
    checks.sort(key=lambda c: order.get(c.name, len(order)))


def _finish(run: _Run, out: _Outcome) -> SmokeReport:
    """The verdict and the report, written to ``report.json`` in the run's folder."""
    all_checks = (*run.preflight, *out.checks)
    cannot = out.cannot_run or any(
        not c.passed and c.name.startswith("preflight.") for c in all_checks
    )
    # A check a server sglforge did not start cannot have (its log, its life) is skipped and
    # named in the report; it neither fails nor passes the run.
    passed = not cannot and all(
        c.passed or (c.skipped and c.name in run.not_run) for c in all_checks
    )
    if run.not_run:
        gap = f"not run: {', '.join(run.not_run)} ({SERVER_URL_NOTE}: {run.server_url})"
        out.reason = f"{out.reason}; {gap}" if out.reason else gap
    figures = {**run.figures, **out.figures}
    if out.warnings:
        figures["log_warnings"] = sum(w.count for w in out.warnings)
    if out.crash_at is not None:
        figures["exit_to_verdict_s"] = round(time.time() - out.crash_at, 3)
    report = SmokeReport(
        passed=passed,
        verdict="cannot-run" if cannot else ("passed" if passed else "failed"),
        checks=all_checks,
        figures=figures,
        duration_s=round(time.monotonic() - run.t_start, 3),
        image=run.image,
        image_digest=run.image_digest,
        image_id=run.image_id,
        scenario=run.scenario.name,
        scenario_path=run.scenario.path,
        report_dir=run.report_dir,
        started_at=run.started_at,
        run_id=run.run_id,
        log_path=out.log_path,
        exit_code=out.exit_code,
        log_tail=out.log_tail,
        reason=out.reason,
        warnings=out.warnings,
        required=out.required,
        not_run=run.not_run,
        server_url=run.server_url,
    )
    atomic_write(run.report_dir / "report.json", json.dumps(report_dict(report), indent=2) + "\n")
    return report


def wait_ready(
    box: Any, port: int, timeout: float, say: Callable[[str], None], url: str = ""
) -> Check:
    """Poll ``GET /health_generate`` until 200, the server exits, or ``timeout`` passes
    (``url``: the server's base URL, default ``http://127.0.0.1:<port>``)."""
    url = f"{url or f'http://127.0.0.1:{port}'}/health_generate"
    started = time.monotonic()
    deadline = started + timeout
    next_note = started + 30
    while True:
        if box.exited.is_set():
            return Check(
                "ready",
                False,
                None,
                timeout,
                f"the server exited with code {box.exit_code} after "
                f"{time.monotonic() - started:.1f} s, before it was ready",
            )
        try:
            status, _ = http_request(
                url, None, timeout=min(10.0, max(0.5, deadline - time.monotonic()))
            )
            if status == 200:
                return Check("ready", True, round(time.monotonic() - started, 2), timeout)
        except HttpError:
            pass  # not listening yet: sglang opens its port only once the model is loaded
        now = time.monotonic()
        if now >= deadline:
            return Check(
                "ready",
                False,
                None,
                timeout,
                f"not ready after {timeout:g} s (the scenario's load timeout)",
            )
        if now >= next_note:
            say(f"still loading after {now - started:.0f} s (timeout {timeout:g} s)")
            next_note = now + 30
        # Waiting on the exit event (not sleeping) is what makes a crash visible at once; the
        # poll interval only bounds how late readiness is seen (tight at first, then relaxed
        # for the many minutes a large model loads).
        interval = 0.1 if now - started < 30 else 1.0
        box.wait_exit(min(interval, max(0.0, deadline - now)))


# --------------------------------------------------------------------------- reports
