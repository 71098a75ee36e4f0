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
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglforge.errors import ConfigError, SmokeError
from sglforge.util import atomic_write, check_output_dir, confined, work_dir

if TYPE_CHECKING:
    pass
from sglforge.smoke.checks import (
    CHECK_ORDER,
    HttpError,
    _request,
    _Session,
    _timed,
    logs_check,
    scan_log,
    scan_required,
)
from sglforge.smoke.constants import EXIT_GRACE_S, HTTP_FAILED, LOG_TAIL_LINES, Value
from sglforge.smoke.preflight import GpuInventory, detect_gpus, expected_arch, preflight
from sglforge.smoke.report import Check, SmokeReport, report_dict
from sglforge.smoke.scenario import LogMatch, load_scenario


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


def run_smoke(
    root: Path,
    image: str,
    scenario_path: Path | str,
    model: Path | str | None = None,
    port: int | None = None,
    log_dir: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    load_timeout: float | None = None,
    labels: Mapping[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
    gpus: GpuInventory | None = None,
) -> SmokeReport:
    """Run the scenario against ``image``; the report says passed, failed or cannot-run.

    A failing or dying server is a report, never an exception; a bad scenario raises
    ConfigError and a missing engine EngineUnavailable. Ctrl-C/SIGTERM propagate (as
    KeyboardInterrupt) after the container is removed. ``env`` and ``labels`` add to the
    container's; ``gpus`` replaces probing the host (for callers that already know).
    """
    from sglforge.engine import containers
    from sglforge.engine import images as engine_images

    say = progress or (lambda _m: None)
    t_start = time.monotonic()
    started_at = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    scenario = load_scenario(scenario_path)
    port = port or scenario.port
    timeout = float(load_timeout if load_timeout is not None else scenario.load_timeout)
    if not (math.isfinite(timeout) and timeout > 0):
        raise ConfigError(
            f"--load-timeout {timeout!r}: must be a finite number of seconds greater than 0"
        )
    model_path = Path(model).resolve() if model else scenario.model_path
    if log_dir:
        report_dir, run_id = check_output_dir(log_dir, "--log-dir"), uuid.uuid4().hex[:8]
    else:
        report_dir, run_id = new_report_dir(root, scenario.name)
    log_path = report_dir / "server.log"

    reaped = containers.reap_orphans("smoke")
    if reaped:
        say(f"removed {len(reaped)} container(s) left by a killed run: {', '.join(reaped)}")
    info = engine_images.inspect(image)
    labels_of_image = dict(info.labels) if info else {}
    if scenario.accelerator == "rocm" and gpus is None:
        say("preflight: probing GPUs (rocminfo / amd-smi / KFD topology)")
        gpus = detect_gpus()
    arch = expected_arch(root, scenario, labels_of_image)
    checks = preflight(
        scenario,
        image=image,
        image_found=info is not None,
        model_path=model_path,
        port=port,
        gpus=gpus,
        arch=arch,
    )
    figures: dict[str, Value] = {}
    if gpus is not None and gpus.archs:
        figures["gpus"] = len(gpus.archs)
        figures["gpu_arch"] = ",".join(sorted(set(gpus.archs)))
    common: dict[str, Any] = dict(
        image=image,
        image_digest=(info.digest or info.id) if info else None,
        image_id=info.id if info else None,
        scenario=scenario.name,
        scenario_path=scenario.path,
        report_dir=report_dir,
        started_at=started_at,
        run_id=run_id,
    )

    def finish(**kw: Any) -> SmokeReport:
        all_checks = tuple(kw.pop("checks"))
        cannot = any(not c.passed and c.name.startswith("preflight.") for c in all_checks)
        cannot = cannot or kw.pop("cannot_run", False)
        passed = not cannot and all(c.passed for c in all_checks)
        verdict = "cannot-run" if cannot else ("passed" if passed else "failed")
        fig = {**figures, **kw.pop("figures", {})}
        if kw.get("warnings"):
            fig["log_warnings"] = sum(w.count for w in kw["warnings"])
        crash_at = kw.pop("crash_at", None)
        if crash_at is not None:
            fig["exit_to_verdict_s"] = round(time.time() - crash_at, 3)
        report = SmokeReport(
            passed=passed,
            verdict=verdict,
            checks=all_checks,
            figures=fig,
            duration_s=round(time.monotonic() - t_start, 3),
            **common,
            **kw,
        )
        atomic_write(report_dir / "report.json", json.dumps(report_dict(report), indent=2) + "\n")
        return report

    if any(not c.passed for c in checks):
        bad = [c.name for c in checks if not c.passed]
        return finish(
            checks=checks,
            log_path=None,
            reason=f"preflight: {', '.join(bad)} failed",
        )

    assert model_path is not None  # preflight.model passed
    profile = replace(
        scenario.container,
        mounts=(containers.Mount(str(model_path), scenario.model_mount, read_only=True),),
        env={**scenario.container.env, **dict(env or {})},
    )
    session = _Session(scenario, port)
    warnings: tuple[LogMatch, ...] = ()
    required: tuple[LogMatch, ...] = ()
    exit_code: int | None = None
    tail: tuple[str, ...] = ()
    crash_at: float | None = None
    reason = ""
    live: list[Check] = []
    say(f"starting {image} ({scenario.name}) on 127.0.0.1:{port}; log: {log_path}")
    try:
        # The launch command is the container's command, with any image ENTRYPOINT cleared:
        # release images have none (CMD ["/bin/bash"]), and a drop-in image must not need one.
        with containers.running(
            image,
            entrypoint=(),
            command=scenario.container_command(port),
            profile=profile,
            log_path=log_path,
            labels={"io.sglforge.smoke": scenario.name, **dict(labels or {})},
        ) as box:
            ready = _wait_ready(box, port, timeout, say)
            live.append(ready)
            if ready.passed:
                figures["ready_s"] = ready.value
                say(f"ready after {ready.value} s; running checks")
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
                        live.append(
                            Check(
                                name, False, None, None, "not run: the server exited", skipped=True
                            )
                        )
                        continue
                    say(f"check {name}")
                    check = _timed(name, fn)
                    live.append(check)
                    if check.detail.startswith(HTTP_FAILED):
                        # A refused or cut connection usually means the server just died; the
                        # engine reports the exit a moment later, so give it that moment.
                        box.wait_exit(EXIT_GRACE_S)
                if box.wait_exit(0.05):
                    live.append(
                        Check(
                            "stays-up",
                            False,
                            box.exit_code,
                            "running",
                            "the server exited during the checks",
                        )
                    )
                else:
                    live.append(Check("stays-up", True, "running", "running"))
            if box.exited.is_set():
                exit_code = box.exit_code
                crash_at = box.finished_at() or box.noticed_exit_at
                box.drain_logs()
                reason = f"the server exited with code {exit_code}"
            elif not ready.passed:
                reason = ready.detail
            if not all(c.passed for c in live):
                tail = tuple(box.tail(LOG_TAIL_LINES))
        # The container is gone: the log stream has reached its end, scan all of it.
        matches = scan_log(log_path, scenario.checks.forbidden)
        required = tuple(scan_required(log_path, scenario.checks.required))
        warnings = tuple(m for m in matches if m.severity == "warn")
        warnings += tuple(r for r in required if r.severity == "warn" and r.missing)
        live.append(logs_check(matches, len(scenario.checks.forbidden), required))
        if not reason and not all(c.passed for c in live):
            reason = "failed: " + ", ".join(c.name for c in live if not c.passed)
        if not all(c.passed for c in live) and not tail:
            tail = tuple(containers.tail_lines(log_path, LOG_TAIL_LINES))
    except SmokeError as exc:
        # The container would not start: the host cannot run this scenario as configured.
        return finish(
            checks=[*checks, Check("start", False, None, None, exc.message)],
            log_path=log_path,
            cannot_run=True,
            reason=exc.message,
        )
    ran = {c.name for c in live}
    for name in CHECK_ORDER:
        if name not in ran and not (name.startswith("spec-") and not scenario.checks.spec_enabled):
            live.append(
                Check(
                    name, False, None, None, "not run: the server never became ready", skipped=True
                )
            )
    order = {n: i for i, n in enumerate(CHECK_ORDER)}
    live.sort(key=lambda c: order.get(c.name, len(order)))
    return finish(
        checks=[*checks, *live],
        figures=session.figures,
        log_path=log_path,
        exit_code=exit_code,
        log_tail=tail,
        reason=reason,
        crash_at=crash_at,
        warnings=warnings,
        required=required,
    )


def _wait_ready(box: Any, port: int, timeout: float, say: Callable[[str], None]) -> Check:
    """Poll ``GET /health_generate`` until 200, the container exits, or ``timeout`` passes."""
    url = f"http://127.0.0.1:{port}/health_generate"
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
            status, _ = _request(
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
