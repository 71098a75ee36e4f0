"""``sglforge publish``: build (or reuse), smoke-test, push, verify, then move friendly tags.

The order is the point. An image is pushed only after its target's smoke scenario passed; the
immutable tag (``v0.5.14-rocm700-mi355x-q<queue hash>``) is pushed first, every push event is
read, and the registry's digest is checked against the local one; only then do the friendly
tags (``v0.5.14-rocm700-mi355x``, ``latest-mi355x``) move. A failed smoke run or push leaves
every friendly tag where it was. ``--skip-smoke`` (emergencies) pushes the immutable tag only
and records the release as untested.

Also owns the machine-readable outputs of a publish: the JUnit report and the Markdown step
summary CI shows.
"""

from __future__ import annotations

import datetime as _dt
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglforge.engine import images as engine_images
from sglforge.engine import reference as engine_ref
from sglforge.engine import registry as reg
from sglforge.engine.credentials import Credentials
from sglforge.engine.errors import EngineError
from sglforge.engine.reference import Registry
from sglforge.errors import (
    ConfigError,
    NoBaseline,
    PublishError,
    SglforgeError,
)
from sglforge.figures import BenchFigures, SmokeFigures
from sglforge.gates.bench import FIRST_RELEASE_HINT
from sglforge.gates.result import bench_record, smoke_figures, smoke_report
from sglforge.inspect import image_manifest
from sglforge.progress import current as current_progress
from sglforge.progress import layer_bar
from sglforge.project import Project
from sglforge.provenance import LABEL_INPUTS, OCI_VERSION, PatchFacts, Smoke, provenance_from
from sglforge.release import Recorded, Release, push_release_record, record_release
from sglforge.requests import PublishRequest
from sglforge.scenario.file import run_line
from sglforge.smoke.report import Check
from sglforge.targets import BuildTarget
from sglforge.util import Progress, raise_held, signals_held

if TYPE_CHECKING:
    from sglforge.bench.cost import PlannedCost
    from sglforge.build import BuildResult, OciBuild
    from sglforge.candidate import Against, Candidate
    from sglforge.gates import BenchRecord, GateResult
    from sglforge.scenario.file import Scenario
    from sglforge.smoke.report import SmokeReport

STANDIN_HARDWARE = "standin-cpu"  # what a scenario with accelerator = "none" records
_QUEUE_SUFFIX = re.compile(r"-q[0-9a-f]{6,64}(?:-i[0-9a-f]{6,64})?$")


@dataclass(frozen=True)
class Step:
    """One stage of a publish: ``ok`` is None when the stage did not run."""

    name: str
    ok: bool | None
    seconds: float = 0.0
    detail: str = ""


@dataclass(frozen=True)
class PublishResult:
    """What a publish did (or, with ``dry_run``, would do)."""

    target: str
    registry: str
    image: str  # the local, immutable image reference
    immutable: str  # the immutable reference in the registry
    friendly: tuple[str, ...]  # the friendly references in the registry
    scenario: str | None
    dry_run: bool
    skip_smoke: bool
    pushed: tuple[str, ...] = ()
    digest: str | None = None
    tested: bool = False
    build_reused: bool | None = None
    steps: tuple[Step, ...] = ()
    release_record: str | None = None
    changelog_written: bool = False
    error: str | None = None
    exit_code: int = 0
    run: str | None = None  # the pull-and-run line for the newest friendly tag
    standin: bool = False  # the smoke (and bench) ran on a stand-in (--allow-standin)
    # every gate, run or skipped (and why), with its record: the one carrier of what the run
    # found (the smoke and bench properties below read it)
    gates: tuple[GateResult, ...] = ()
    bench_plan: Mapping[str, object] | None = None  # a dry run's planned bench (no gate ran)

    @property
    def ok(self) -> bool:
        """True when everything planned happened (or the dry run found nothing wrong)."""
        return self.error is None

    @property
    def smoke(self) -> SmokeReport | None:
        """The smoke gate's report (None: the smoke did not run)."""
        return smoke_report(self.gates)

    @property
    def smoke_passed(self) -> bool | None:
        return None if self.smoke is None else self.smoke.passed

    @property
    def smoke_verdict(self) -> str:
        return "" if self.smoke is None else self.smoke.verdict

    @property
    def smoke_figures(self) -> SmokeFigures:
        return smoke_figures(self.gates)

    @property
    def smoke_checks(self) -> tuple[Check, ...]:
        return () if self.smoke is None else tuple(self.smoke.checks)

    @property
    def smoke_reports(self) -> str | None:
        """The folder with the server log and the smoke's reports."""
        folder = None if self.smoke is None else self.smoke.report_dir
        return str(folder) if folder else None

    @property
    def bench(self) -> BenchRecord | None:
        """The bench gate's record (None: no bench ran)."""
        return bench_record(self.gates)


# --- scenarios and references ---------------------------------------------------------------


def references(
    registry: Registry, image: str, target: str, default_rocm: bool = True
) -> tuple[str, tuple[str, ...]]:
    """The immutable registry reference for ``image`` and its friendly references.

    ``sglforge/sglang:v0.5.14-rocm700-mi355x-q1a2b3c4d`` in ``127.0.0.1:5000`` gives
    ``127.0.0.1:5000/sglforge/sglang:v0.5.14-rocm700-mi355x-q1a2b3c4d`` plus
    ``...:v0.5.14-rocm700-mi355x`` and ``...:latest-mi355x``. The registry was checked when
    it was made (where the command line read ``--registry``), not again here.
    """
    prefix = registry.prefix
    repo, sep, tag = image.rpartition(":")
    if not sep or "/" in tag:
        raise PublishError(f"{image}: built image reference has no tag", "rebuild: sglforge build")
    first, sep, rest = repo.partition("/")
    repo = rest if sep and engine_ref.is_host(first) else repo
    immutable = f"{prefix}/{repo}:{tag}"
    friendly_tag = _QUEUE_SUFFIX.sub("", tag)
    latest = f"latest-{target}"
    if not default_rocm:
        rocm = re.search(r"-(rocm\d+)-", tag)
        latest += f"-{rocm.group(1)}" if rocm else ""
    friendly = tuple(
        f"{prefix}/{repo}:{t}" for t in dict.fromkeys((friendly_tag, latest)) if t != tag
    )
    return immutable, friendly


# --- the publish flow -----------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.steps: list[Step] = []
        self._t = time.monotonic()

    def done(self, name: str, ok: bool | None, detail: str = "") -> None:
        now = time.monotonic()
        self.steps.append(Step(name, ok, round(now - self._t, 3), detail))
        self._t = now

    def reset(self) -> None:
        self._t = time.monotonic()


@dataclass
class _Run:
    """One publish as its steps build it up: what was asked, and what each step found.

    Settled before anything long runs (``_open``): the registry prefix and its login, the
    stand-in rule. Then the scan gate, ``_build`` sets ``built`` and the references,
    ``_candidate`` the image to test and push, the push ``pushed``/``digest``/``source``.
    What the gates found stays on the candidate (``cand.results``), read when recording.
    """

    project: Project
    req: PublishRequest
    registry: Registry
    creds: Credentials | None
    say: Callable[[str], None]
    cand: Candidate  # what the gates prove
    clock: _Clock = field(default_factory=_Clock)
    standin: bool = False
    built: BuildResult | None = None
    immutable: str = ""
    moving: tuple[str, ...] = ()  # the friendly references that move (none with --skip-smoke)
    candidate: str = ""  # the local image tested and pushed (built here, or pulled)
    pushed: list[str] = field(default_factory=list)
    digest: str = ""
    source: str = ""  # the image the friendly tags are made from

    @property
    def root(self) -> Path:
        return self.project.root

    @property
    def target(self) -> BuildTarget:
        return self.req.target

    @property
    def scenario(self) -> Scenario | None:
        return self.req.smoke.scenario if self.req.smoke else None

    @property
    def build_result(self) -> BuildResult:
        assert self.built is not None, "the build step runs first"
        return self.built

    def failed(
        self, result: PublishResult, step: str, exc: SglforgeError | EngineError
    ) -> PublishResult:
        """``result`` stopped at ``step`` by ``exc``: nothing (more) pushed, no tag moved."""
        self.clock.done(step, False, exc.message)
        return replace(
            result,
            pushed=tuple(self.pushed),
            steps=tuple(self.clock.steps),
            error=str(exc),
            exit_code=exc.exit_code,
        )


def candidate_for(project: Project, req: PublishRequest, say: Progress) -> Candidate:
    """The candidate of ``req`` with a publish's gate policy: its target, parsed scenario and
    model, probes labelled with the request's labels, and the bench compared with the last
    release in ``req.registry`` (or told why not). The registry's login is read here (not for
    a dry run): once, for the whole publish. The caller closes it."""
    from sglforge.candidate import Candidate, GatePolicy

    policy = GatePolicy(
        baseline=_last_release_image,
        baseline_required=True,  # a publish compares, or says why not (--no-baseline)
        no_baseline=req.no_baseline,
        accept_regression=req.accept_regression,
        registry=req.registry,
        creds=None if req.dry_run else reg.credentials(req.registry.host),
    )
    smoke = req.smoke
    return Candidate(
        project,
        req.target,
        smoke.scenario if smoke else None,
        smoke.model if smoke else None,
        smoke=smoke,
        labels=req.build.labels,
        say=say,
        policy=policy,
    )


def publish(
    project: Project, req: PublishRequest, candidate: Candidate, progress: Progress | None = None
) -> PublishResult:
    """Build or reuse, run the gates, push the immutable tag, verify, move friendly tags, record.

    Gate failures and push errors come back as a result with ``error`` set and nothing moved;
    errors that stop the flow before anything ran (configuration, engine, a blocking scan)
    are raised. The steps, each over one ``_Run``: ``_open`` (registry login, stand-in rule),
    the scan gate, ``_build``, ``_candidate``, the gates after the build (coverage, smoke,
    bench: :mod:`sglforge.gates`), ``_push`` (immutable tag, digest check, friendly tags) and
    ``_record`` (release record and CHANGELOG entry, pushed next to the image).

    ``candidate``: made by :func:`candidate_for` (the caller closes it). ``upgrade
    --publish`` hands over the one holding the image it built from ``req.build`` and the
    gates it ran already; neither is done again.
    """
    return _publish(_open(project, req, candidate, progress), candidate)


def _publish(run: _Run, cand: Candidate) -> PublishResult:
    from sglforge import gates

    before: tuple[GateResult, ...] = ()
    if not run.req.dry_run:
        # Before the build: blockers a GPU run would hit (issue 24, docs/scan.md); run once
        # per candidate (upgrade --publish hands over the one it ran).
        before = _gates(run, cand, gates.BEFORE_BUILD)
        for gate in before:
            if gate.raised is not None:
                raise gate.raised
    result = replace(_build(run, cand.built), gates=before)
    if run.req.dry_run:
        return _dry_run(run, result)
    try:
        run.candidate = _candidate(run)
    except (PublishError, EngineError) as exc:
        return run.failed(result, "push", exc)
    cand.with_build(run.build_result, run.candidate)
    result = _gated(run, result, _gates(run, cand, gates.AFTER_BUILD))
    if result.error:
        return result
    return _push_and_record(run, result)


def _gates(run: _Run, cand: Candidate, which: Sequence[str]) -> tuple[GateResult, ...]:
    """The gates ``which`` over the candidate, each a step of the run (skipped ones too)."""
    from sglforge import gates

    run.clock.reset()

    def step(r: GateResult) -> None:
        run.clock.done(r.name, r.ok, r.detail)

    return gates.run(cand, only=which, on_result=step)


def _gated(run: _Run, result: PublishResult, done: Sequence[GateResult]) -> PublishResult:
    """The result with the gates after the build (their records are what the run found), and
    the first failure among them as its error."""
    from sglforge.gates import first_failure

    result = replace(result, gates=(*result.gates, *done), standin=run.standin)
    bad = first_failure(done)
    if bad is None:
        return result
    return replace(result, steps=tuple(run.clock.steps), error=bad.error, exit_code=bad.exit_code)


def _model(req: PublishRequest) -> Path | None:
    return req.smoke.model if req.smoke else None


def _open(
    project: Project, req: PublishRequest, cand: Candidate, progress: Progress | None
) -> _Run:
    """The registry login and the stand-in rule, checked before the build (the registry and
    its login as the candidate's policy holds them)."""
    registry, creds = _registry(cand), cand.policy.creds
    sc = req.smoke.scenario if req.smoke else None
    if sc is not None and sc.bench is not None and not req.no_baseline:
        # before the login and the build: a comparison known never to pass is refused now,
        # not after an hour of building and booting
        from sglforge.bench.cost import require_passable

        require_passable(sc.bench, sc.path)
    if not req.dry_run:
        # Before the build and the smoke run, which can take an hour on real hardware.
        reg.check_login(registry.host, creds)
    run = _Run(project, req, registry, creds, progress or (lambda _msg: None), cand)
    run.standin = _standin_rule(run)
    if not req.dry_run and _compares(run):
        # U3: the first release is found out now, with one read of the registry's tag list,
        # not after the build, the smoke and a model load on every GPU runner
        found, why = _last_release(run)
        if found is False:
            raise NoBaseline(
                f"bench: {why}: a publish compares with the last release, so this one was "
                "refused before the build (nothing built, pushed or tagged)",
                FIRST_RELEASE_HINT,
            )
    return run


def _registry(cand: Candidate) -> Registry:
    """The registry a publish's candidate pushes to (``candidate_for`` puts it in the policy)."""
    registry = cand.policy.registry
    assert registry is not None, "publish's candidate comes from candidate_for (with a registry)"
    return registry


def _compares(run: _Run) -> bool:
    """The bench gate will compare with the last release: a [bench] table, a smoke run, and
    no ``--no-baseline``."""
    sc = run.scenario
    return sc is not None and sc.bench is not None and not run.req.no_baseline


def _last_release(run: _Run) -> tuple[bool | None, str]:
    """Whether the target has a last release to bench against, from one read of the
    registry's tag list, before anything is built: (True, which), (False, why not), or
    (None, why nobody can tell: the registry did not answer; the bench gate decides after
    the build). Like the gate, a registry without the repository falls back to the records
    under build/releases/ (a release published elsewhere, pulled where it was recorded)."""
    from sglforge.release import load_records, release_tags

    bt = run.target
    repository = _repository(references(run.registry, f"{bt.repository}:v", bt.name)[0])
    tags = release_tags(repository, bt.name)
    if tags is None:
        return None, f"{repository} did not answer: whether {bt.name} has a release is unknown"
    if tags:
        return True, f"the last of {len(tags)} release(s) of {bt.name} in {repository}"
    if any(r.target == bt.name for r in load_records(run.root)):
        return True, f"the last release of {bt.name} recorded under build/releases/"
    return False, f"no release of {bt.name} in {repository} yet"


def _build(run: _Run, built: BuildResult | None) -> PublishResult:
    """The image (built, reused, or handed in by the caller) and the references it gets."""
    from sglforge.build import build_image

    bt, req = run.target, run.req
    if built is None:
        run.say(f"build {bt.key} ({'plan' if req.dry_run else 'or reuse'})")
        built = build_image(run.project, req.build, lambda event: run.say(_event_text(event)))
        detail = "up to date, reused" if built.up_to_date else "built"
    else:
        detail = "built by the caller from the same request, reused"
    run.built = built
    run.immutable, friendly = references(run.registry, built.image, bt.name, bt.default_rocm)
    run.moving = () if req.skip_smoke else friendly
    run.clock.done("build", None if req.dry_run else True, detail)
    return PublishResult(
        target=bt.key,
        registry=run.registry.prefix,
        image=built.image,
        immutable=run.immutable,
        friendly=run.moving,
        scenario=str(run.scenario.path) if run.scenario else None,
        dry_run=req.dry_run,
        skip_smoke=req.skip_smoke,
        build_reused=bool(built.up_to_date),
    )


def _dry_run(run: _Run, result: PublishResult) -> PublishResult:
    """Every stage a real run would take, none of them run: the gates with what each will
    use (the bench with its planned node-minutes), the push and the tags."""
    steps = [*run.clock.steps]
    planned = _planned_bench(run)
    baseline = _last_release(run) if _compares(run) else None
    for name, detail in _planned_gates(run, planned, baseline):
        steps.append(Step(name, None, detail=detail))
    steps.append(Step("push", None, detail=run.immutable))
    steps += [Step("tag", None, detail=ref) for ref in run.moving]
    bench: dict[str, object] | None = None
    if planned is not None:
        bench = {"planned": planned.as_dict()}
        if baseline is not None:
            bench["baseline"] = {"found": baseline[0], "detail": baseline[1]}
    return replace(result, steps=tuple(steps), bench_plan=bench)


def _planned_bench(run: _Run) -> PlannedCost | None:
    """The bench's planned cost (None: no bench runs)."""
    from sglforge.bench.runner import plan

    sc = run.scenario
    if sc is None or sc.bench is None:
        return None
    # --no-baseline: the candidate boots once, nothing is compared
    return plan(sc, compared=not run.req.no_baseline)


def _planned_gates(
    run: _Run, planned: PlannedCost | None, baseline: tuple[bool | None, str] | None = None
) -> list[tuple[str, str]]:
    """(gate, what it will use) for each gate, in the order a real run takes them;
    ``baseline``: what :func:`_last_release` found (None: nothing is compared)."""
    from sglforge.gates import GATES

    sc = run.scenario
    if sc is None:
        return [(name, "skipped (--skip-smoke)") for name in GATES]
    model = _model(run.req) or sc.model_path
    rocm = sc.accelerator == "rocm"
    analysis = f"the patched tree at the pin, {model}/config.json when on this host"
    out = [
        ("scan", f"before the build: {analysis}" if rocm else "skipped (not a ROCm scenario)"),
        ("coverage", f"the base's aiter tables and the queue's config items; {analysis}"),
        ("smoke", str(sc.path)),
    ]
    if planned is None:
        out.append(("bench", "skipped (the scenario has no [bench] table)"))
    else:
        if baseline is None:
            against = f"--no-baseline: {run.req.no_baseline}"
        elif baseline[0] is False:
            refused = f"REFUSED before the build: {baseline[1]}; {FIRST_RELEASE_HINT}"
            return [*out, ("bench", refused)]
        elif baseline[0] is None:
            against = f"the last release in {run.req.registry} ({baseline[1]})"
        else:
            against = baseline[1]
        sees = (
            f"; {planned.boots // 2} boots a side see a drop of {planned.best_mde:.1%} at best "
            f"(a pass rules out {planned.max_mde:.1%})"
            if planned.best_mde is not None and planned.max_mde is not None
            else ""
        )
        out.append(
            ("bench", f"{planned.node_minutes:.0f} node-minutes planned, against {against}{sees}")
        )
    return out


def _push_and_record(run: _Run, result: PublishResult) -> PublishResult:
    """Push the tested image, move the friendly tags, then record the release."""
    try:
        _push(run)
    except (PublishError, EngineError) as exc:
        return run.failed(result, "push" if not run.pushed else "tag", exc)
    except KeyboardInterrupt:
        # Ctrl-C or SIGTERM after the image is in the registry: what was pushed still gets
        # its release record (local and next to the image), then the interrupt goes on.
        if run.pushed:
            with signals_held():
                run.say("interrupted after the push: recording the release before stopping")
                _record(run)
        raise
    # The image is in the registry: its record is written and pushed whole, an interrupt
    # arriving meanwhile is held and raised after it (exit 130/143, record in place).
    with signals_held() as arrived:
        release, recorded = _record(run)
    raise_held(arrived)
    return replace(
        result,
        run=run_line(run.scenario, _runnable(run), _model(run.req)) if run.scenario else None,
        pushed=tuple(run.pushed),
        digest=run.digest,
        tested=release.tested,
        steps=tuple(run.clock.steps),
        release_record=str(recorded.record),
        changelog_written=recorded.changelog_written,
    )


def _runnable(run: _Run) -> str:
    """The reference a person pulls: the first friendly tag that moved (the versioned one),
    else the immutable one."""
    moved = [ref for ref in run.pushed if ref != run.immutable]
    return moved[0] if moved else run.immutable


def _push(run: _Run) -> None:
    """The immutable tag pushed and verified, then each friendly tag moved to its digest."""
    req = run.req
    run.clock.reset()
    if run.build_result.plan.oci is not None:
        run.digest, run.source = _push_oci(run, run.build_result.plan.oci), run.candidate
    else:
        run.digest, run.source = _push_immutable(
            run.candidate, run.immutable, run.creds, req.attempts, req.backoff, run.say
        )
    run.pushed.append(run.immutable)
    run.clock.done("push", True, f"{run.immutable}@{run.digest}")
    _move_friendly(run)


def _standin_rule(run: _Run) -> bool:
    """A stand-in scenario (``accelerator = "none"``) never passes as a GPU target's smoke:
    refused before the build unless ``--allow-standin``, which records it as a stand-in."""
    if run.scenario is None or not run.scenario.standin:
        return False
    if not run.req.allow_standin:
        raise ConfigError(
            f'{run.scenario.path}: a stand-in scenario (accelerator = "none") cannot be '
            f"the smoke and bench of GPU target {run.target.key}",
            "pass the target's GPU scenario with --scenario, or --allow-standin to publish with "
            "the run recorded as a stand-in",
        )
    run.say(f"{run.scenario.name} is a STAND-IN: the release is recorded as one")
    return True


def _last_release_image(c: Candidate) -> Against:
    """The previous release of the candidate's target in the policy's registry, by digest and
    pulled, to bench against, with its knee bracket; else why there is no comparison (a
    publish's :class:`~sglforge.candidate.GatePolicy` baseline)."""
    from sglforge.bench.runner import ensure_local
    from sglforge.candidate import Against
    from sglforge.release import previous_release

    bt, creds = c.target, c.policy.creds
    immutable = references(_registry(c), c.build_result.image, bt.name)[0]
    repository = _repository(immutable)
    version = immutable.rpartition(":")[2]
    previous = previous_release(c.project.root, bt.name, version, repository, creds)
    if previous is None:
        return Against(None, f"no earlier release of {bt.name} in {repository}")
    # U2: pulled where it was just found (--registry), by digest; the address its record
    # names (another registry name, a mirror, an earlier tryout port) only as a fallback
    here = f"{repository}@{previous.digest}"
    recorded = f"{_repository(previous.image)}@{previous.digest}"
    c.say(f"bench against the last release {previous.version} ({here})")
    failures: list[str] = []
    for against in dict.fromkeys((here, recorded)):
        try:
            # the login of --registry goes to --registry only
            name = ensure_local(against, c.say, creds if against == here else None)
            break
        except (SglforgeError, EngineError) as exc:
            failures.append(f"{against}: {exc.message}")
    else:
        why = f"the last release's image cannot be pulled ({'; '.join(failures)})"
        return Against(None, why)
    bench = previous.smoke.bench if previous.smoke else None
    return Against(name, "", _knee_prior(c, bench))


def _knee_prior(
    c: Candidate, bench: Mapping[str, object] | None
) -> tuple[float, float | None] | None:
    """The last release's knee bracket for the search to start from: only from a bench of
    the same scenario on the same kind of hardware (a stand-in's knee says nothing of a
    node's)."""
    if not bench or c.scenario is None:
        return None
    hardware = STANDIN_HARDWARE if c.standin else "gpu"
    return BenchFigures.from_dict(bench).knee_bracket(c.scenario.name, hardware)


def _record(run: _Run) -> tuple[Release, Recorded]:
    """The release record and CHANGELOG entry, then the record pushed next to the image."""
    req = run.req
    gates = _gate_results(run)
    release = replace(
        _release(run),
        smoke=_smoke_record(run, gates),
        coverage=_coverage_record(gates),
        scan=_scan_record(gates),
    )
    recorded = record_release(
        run.root, release, req.changelog, _repository(run.immutable), run.creds
    )
    run.clock.done("record", True, str(recorded.record))
    run.clock.reset()
    try:
        record_ref = push_release_record(
            run.root, release, run.immutable, run.creds, req.build.labels, req.attempts, req.backoff
        )
        run.clock.done("record-push", True, record_ref)
    except SglforgeError as exc:
        # The image is published; only `inspect` on other machines loses the smoke figures.
        run.clock.done("record-push", False, f"release record not pushed: {exc.message}")
        run.say(f"release record not pushed: {exc.message}")
    return release, recorded


def _gate_results(run: _Run) -> tuple[GateResult, ...]:
    """Every gate the candidate ran (upgrade --publish's ran before publish got it)."""
    from sglforge.gates import GateResult

    found = run.cand.results.values()
    return tuple(g for g in found if isinstance(g, GateResult))


def _smoke_record(run: _Run, gates: Sequence[GateResult]) -> Smoke | None:
    """The smoke (and its bench) as the release record keeps them, read from the gates'
    records, with the host's GPU facts (probed once)."""
    report, bench = smoke_report(gates), bench_record(gates)
    if report is None or run.scenario is None:
        return None
    host = None if run.standin else run.cand.host.facts
    return Smoke(
        report.passed,
        report.scenario or run.scenario.name,
        report.verdict,
        smoke_figures(gates).as_dict(),
        hardware=STANDIN_HARDWARE if run.standin else "gpu",
        gpus=dict(host) if host else {},
        bench=bench.figures.as_dict() if bench is not None else None,
    )


def _coverage_record(gates: Sequence[GateResult]) -> dict[str, object] | None:
    """The coverage gate as the release record keeps it, or why it did not run."""
    from sglforge.coverage import Gate

    gate = next((g for g in gates if g.name == "coverage"), None)
    if gate is None:
        return None
    return gate.record.to_dict() if isinstance(gate.record, Gate) else {"not_run": gate.why}


def _scan_record(gates: Sequence[GateResult]) -> dict[str, object]:
    """The scan gate as the release record keeps it: the waivers given and the trailers
    refused (issue 31), or why the gate did not run."""
    from sglforge.gates import ScanRecord

    gate = next((g for g in gates if g.name == "scan"), None)
    if gate is None:
        return {"not_run": "the scan gate was not run"}
    if isinstance(gate.record, ScanRecord):
        return gate.record.to_dict()
    return {"not_run": gate.why or gate.detail}


def _repository(ref: str) -> str:
    """``registry/repo`` of ``registry/repo:tag`` (where the release records are listed)."""
    return ref.rpartition(":")[0]


def _move_friendly(run: _Run) -> None:
    """Move each friendly tag to the pushed digest (appending to ``run.pushed`` as they land)."""
    req = run.req
    for ref in run.moving:
        run.clock.reset()
        newer = _newer_release_at(ref, run.build_result.labels, run.creds)
        if newer:
            # `latest-<target>` never moves back to an older upstream version.
            run.clock.done("tag", True, f"{ref} kept: it names {newer}, newer than this image")
            continue
        run.say(f"move {ref}")
        engine_images.tag(run.source, ref)
        if run.build_result.plan.oci is not None:  # the manifest PUT under the tag, no engine
            from sglforge.images import registry as oci_registry

            oci_registry.promote(run.build_result.plan.oci.image, ref, run.creds)
            run.pushed.append(ref)
            run.clock.done("tag", True, ref)
            continue
        moved = reg.push(
            ref, run.creds, attempts=req.attempts, backoff=req.backoff, progress=run.say
        )
        remote = reg.registry_digest(ref, run.creds)
        if not (moved.digest == remote == run.digest):
            raise PublishError(
                f"{ref}: after the move the registry serves {remote}, expected {run.digest}",
                "rerun sglforge publish",
            )
        run.pushed.append(ref)
        run.clock.done("tag", True, ref)


def _newer_release_at(ref: str, labels: Mapping[str, str], creds: Credentials | None) -> str | None:
    """The version a ``latest-*`` ref names when it is newer than ``labels``' version."""
    from packaging.version import InvalidVersion, Version

    if ":latest-" not in ref or reg.registry_digest_or_none(ref, creds) is None:
        return None
    key = OCI_VERSION
    try:
        ours = Version(str(labels.get(key, "")))
        theirs_text = reg.registry_labels(ref, creds).get(key, "")
        theirs = Version(theirs_text)
    except (InvalidVersion, PublishError, EngineError):
        return None
    return theirs_text if theirs > ours else None


def _event_text(event: object) -> str:
    message = getattr(event, "message", None)
    if message is not None:
        return f"build: {message}"
    if hasattr(event, "n") and hasattr(event, "total"):
        text = f"build [{event.n}/{event.total}] {getattr(event, 'instruction', '')}"
        return text if len(text) <= 160 else text[:157] + "..."
    return f"build: {event}"


def _candidate(run: _Run) -> str:
    """The local image this run will smoke-test and publish under the immutable reference.

    The image just built, unless the registry already holds the tag with another digest. The
    engine's classic builder stamps a creation time into every image, so a rebuild of the
    same inputs on a fresh machine has another digest: then the registry's image is the
    release. Its ``io.sglforge.inputs`` label is no evidence of its content (any ``FROM``
    inherits it), so that image is pulled and it is what gets smoke-tested; with
    ``--skip-smoke`` nothing would test it, and publish refuses.
    """
    image, immutable = run.build_result.image, run.immutable
    built = run.build_result.plan.oci
    if built is not None:
        # Issue 43: the inputs give one digest; the tag names it, is free, or is refused here,
        # before any smoke (a smoke cannot see an added file).
        from sglforge.engine import distribution
        from sglforge.images import registry as oci_registry

        found = distribution.served_digest(immutable, run.creds)
        if found is not None and found != built.image.digest:
            raise oci_registry.foreign(immutable, found, built.image.digest)
        return image
    existing = reg.registry_digest_or_none(immutable, run.creds)
    published = engine_images.repo_digests(image, immutable)
    if existing is None or existing in published:
        return image
    if published:
        raise PublishError(
            f"{immutable} moved: {image} was published there as {', '.join(published)}, the "
            f"registry now serves {existing}: an immutable tag is never re-pointed",
            "find out who pushed it; delete the tag in the registry and rerun sglforge publish",
        )
    theirs = reg.registry_labels(immutable, run.creds).get(LABEL_INPUTS)
    ours = _labels_of(image).get(LABEL_INPUTS)
    if not (theirs and theirs == ours):
        raise PublishError(
            f"{immutable} already names {existing} in the registry, built from other "
            f"inputs than {image}: an immutable tag is never overwritten",
            "delete the tag in the registry if it is wrong, or change the patch queue",
        )
    if run.req.skip_smoke:
        raise PublishError(
            f"{immutable} already names {existing} in the registry, an image this run neither "
            f"built nor smoke-tested (a label is no evidence of its content)",
            "publish without --skip-smoke to smoke-test the registry's image, or delete the tag",
        )
    pulled = engine_images.pull(immutable, run.creds)
    if existing not in engine_images.repo_digests(pulled.id, immutable):
        raise PublishError(
            f"{immutable} moved while it was pulled (the registry named {existing})",
            "someone else is pushing the same tag; rerun sglforge publish",
        )
    run.say(
        f"{immutable} is already in the registry as {existing}, not the image built here: "
        f"smoke-testing that image ({pulled.id}), which is what would be published"
    )
    return pulled.id


def _release(run: _Run) -> Release:
    """The release record of what was published: the image built here (its plan holds the
    manifest and labels), or the registry's image that was pulled and smoke-tested in its
    place (read from that image)."""
    built, published = run.build_result, run.source
    manifest: Mapping[str, Any] | None
    if published == built.image:
        labels, manifest = dict(built.labels), built.plan.manifest
    else:
        labels, manifest = _labels_of(published), image_manifest(published)
    queue = run.project.queue
    statuses = {p.sha256: p.upstream_status for p in queue.patches if p.upstream_status}
    prov = provenance_from(published, labels, manifest, statuses)
    # an image without a manifest: the queue this run built from
    patches = prov.patches or tuple(PatchFacts.of(p) for p in queue.patches)
    now = _dt.datetime.now(_dt.UTC)
    return Release(
        version=run.immutable.rpartition(":")[2],
        date=run.req.date or now.strftime("%Y-%m-%d"),
        target=run.target.name,
        image=run.immutable,
        digest=run.digest,
        references=tuple(run.pushed),
        upstream_url=prov.upstream_url,
        upstream_ref=prov.upstream_ref,
        upstream_commit=prov.upstream_commit,
        upstream_version=prov.upstream_version,
        queue_hash=prov.queue_hash,
        patches=patches,
        smoke=None,  # the gates' records, added by _record
        gpu_arch=prov.gpu_arch or run.target.gpu_arch,
        base=prov.base or built.base or "",
        base_digest=prov.base_digest or built.base_digest or "",
        published_at=now.strftime("%Y-%m-%dT%H:%M:%SZ"),
    )


def _push_immutable(
    image: str,
    immutable: str,
    creds: Credentials | None,
    attempts: int,
    backoff: float,
    say: Progress,
) -> tuple[str, str]:
    """Push the tested ``image`` as the immutable tag; (verified digest, image to tag from).

    An immutable tag never changes what it names: when the registry holds it already, it must
    name ``image`` itself (the tested image was pulled from it, or pushed by an earlier run),
    else publish refuses, whatever the registry's labels say.
    """
    existing = reg.registry_digest_or_none(immutable, creds)
    if existing is not None:
        if existing not in engine_images.repo_digests(image, immutable):
            raise PublishError(
                f"{immutable} names {existing} in the registry, not the image this run "
                f"smoke-tested ({image}): an immutable tag is never overwritten",
                "someone else may be pushing the same tag; rerun sglforge publish",
            )
        say(f"{immutable} is already published as {existing}, the tested image; reusing it")
        engine_images.tag(image, immutable)
        return reg.verify(immutable, existing, creds), image
    engine_images.tag(image, immutable)
    # One bar for the whole push: bytes sent over all layers (the engine reports each).
    with current_progress().task(f"push {immutable}", None, unit="bytes") as task:
        pushed = reg.push(
            immutable,
            creds,
            attempts=attempts,
            backoff=backoff,
            progress=say,
            layer_progress=layer_bar(task),
        )
    return reg.verify(immutable, pushed.digest, creds), image


def _push_oci(run: _Run, built: OciBuild) -> str:
    """The tested overlay pushed by blobs (the base's layers mounted, never pulled) as the
    immutable tag; its digest, the one its inputs give (issue 43)."""
    from sglforge.bases import login_for
    from sglforge.images import registry as oci_registry

    base_creds = login_for(built.base.name)
    done = oci_registry.publish(built.image, built.base, run.immutable, run.creds, base_creds)
    t = done.transfer
    run.say(
        f"{run.immutable} is already {done.digest}, the inputs' image; kept"
        if done.already
        else f"pushed {run.immutable}@{done.digest}: {t.sent} bytes sent, {len(t.mounted)} "
        f"base layer(s) mounted, {len(t.copied)} copied"
    )
    return done.digest


def _labels_of(image: str) -> dict[str, str]:
    return dict(engine_images.require(image).labels)
