"""``sglforge upgrade``: move the queue to a new upstream release, prove it, report.

The whole upgrade happens in a staging copy of the project (``build/upgrade/<ref>/project``:
``patches/``, ``images/``, ``smoke/`` and ``CHANGELOG.md``, sharing the real ``build/``
caches). The queue is refreshed there (3-way), upstreamed or excluded patches are retired
to ``patches/retired/`` with their evidence, each target's image is built and smoke-tested
(and, with ``publish``, published). Only when all of that passed is the staged queue copied
back, in one journalled change; an interrupted or failed upgrade leaves the queue, the pin and
CHANGELOG.md as they were. The report (markdown and JSON) says what happened either way.
"""

from __future__ import annotations

import datetime as _dt
import json
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglforge.errors import ConfigError, SglforgeError
from sglforge.patches.apply import safe_ref
from sglforge.patches.check import select_tags
from sglforge.patches.refresh import RefreshResult, refresh_queue
from sglforge.project import Project
from sglforge.provenance import LABEL_CONFIG_PREFIX
from sglforge.queue.series import ref_version
from sglforge.queue.upstream import Upstream, hint_upstream, with_upstream
from sglforge.requests import BuildRequest, PublishRequest, SmokeRequest, UpgradeRequest
from sglforge.transactions import commit_files
from sglforge.upgrade_result import TargetOutcome, UpgradeResult
from sglforge.util import atomic_write, confined, project_lock

if TYPE_CHECKING:
    from sglforge.candidate import Candidate
    from sglforge.queue.configs import BaseTables
    from sglforge.targets import BuildTarget

STAGED = ("patches", "images", "smoke")
# why an upgrade that does not publish skips the bench gate (it would compare with nothing)
NO_BENCH = "upgrade without --publish: no registry, so no last release to bench against"


def _newest(up: Upstream, pre: bool) -> str:
    tags = select_tags(up, ">=0", pre=pre)
    if not tags:
        raise ConfigError(
            f"upstream {up.source} has no tags that parse as versions",
            "pass --to REF explicitly",
        )
    return tags[-1]


@dataclass
class _Upgrade:
    """One upgrade as its steps build it up: what was asked, the refs, the time by stage."""

    project: Project
    req: UpgradeRequest
    say: Callable[[str], None]
    old_ref: str = ""
    new_ref: str = ""
    stages: dict[str, float] = field(default_factory=dict)
    t0: float = field(default_factory=time.monotonic)

    def report(
        self,
        refreshed: RefreshResult | None,
        ok: bool,
        reason: str,
        outcomes: Sequence[TargetOutcome] = (),
    ) -> UpgradeResult:
        """The result written out; a ready upgrade is the only one applied to the project."""
        result = UpgradeResult(
            old_ref=self.old_ref,
            new_ref=self.new_ref,
            new_commit=refreshed.new_commit if refreshed else None,
            ready=ok,
            applied=ok and refreshed is not None,
            reason=reason,
            patches=refreshed.patches if refreshed else (),
            targets=tuple(outcomes),
            changelog=refreshed.changelog if refreshed else (),
            stages=self.stages,
        )
        return _write_report(self.project.root, result, self.req.report_dir)

    def timed(self, stage: str, since: float) -> None:
        self.stages[stage] = time.monotonic() - since


def upgrade(
    project: Project, req: UpgradeRequest, progress: Callable[[str], None] | None = None
) -> UpgradeResult:
    """Upgrade the queue to ``req.to`` (a ref, or ``latest``); see the module docstring.

    ``req.dry_run``: the plan and each patch's action, nothing written (no report either).
    ``req.branch``: the upgrade lands on that new git branch as one commit (as the CI job
    does); the current branch is left as it was.
    """
    if req.branch is not None:
        _check_branch(project.root, req.branch)
    run = _Upgrade(project, req, progress or (lambda _m: None))
    with project_lock(project.root):
        up = project.upstream
        project.pin_commit()  # a moved pin stops here
        run.old_ref = project.queue.pin.ref
        run.new_ref = _newest(up, req.pre) if req.to == "latest" else up.tag(req.to)
        up.resolve(run.new_ref)  # an unknown ref stops here, before any staging folder
        if _nothing_to_do(run):
            run.timed("check", run.t0)
            return run.report(None, True, f"already at {run.old_ref}; nothing to upgrade")
        run.say(f"upgrade: {run.old_ref} -> {run.new_ref}")
        if req.dry_run:
            return _dry_run(run)
        stage_root = _stage(project.root, run.new_ref)
        try:
            # The staging copy takes the upstream this run fetched (one fetch per run) and
            # the targets read (images/ is copied unchanged).
            return _upgrade_staged(run, project.staging(stage_root))
        finally:
            shutil.rmtree(stage_root.parent, ignore_errors=True)


def _nothing_to_do(run: _Upgrade) -> bool:
    new_version, old_version = ref_version(run.new_ref), ref_version(run.old_ref)
    if run.new_ref == run.old_ref:
        return True
    return (
        new_version is not None
        and old_version is not None
        and new_version <= old_version
        and run.req.to == "latest"
    )


def _dry_run(run: _Upgrade) -> UpgradeResult:
    """The plan and each patch's action; nothing written, no report."""
    req = run.req
    planned = refresh_queue(
        run.project, run.new_ref, drop_upstreamed=True, retire_excluded=True, dry_run=True
    )
    names = ", ".join(t.spec for t in req.targets)
    steps = ["refresh the queue"] + (
        [f"build {'and smoke ' if req.smoke else ''}{names}"] if req.build else []
    )
    if req.publish is not None:
        steps.append(f"publish to {req.publish.registry}")
    if req.branch:
        steps.append(f"commit on a new branch {req.branch}")
    plan = "dry run, nothing written: would " + ", ".join(steps)
    if not planned.ok:
        plan += "; stops at the refresh (conflicts)"
    plan += _config_plan(run)
    run.timed("check", run.t0)
    return UpgradeResult(
        old_ref=run.old_ref,
        new_ref=run.new_ref,
        new_commit=planned.new_commit,
        ready=planned.ok,
        applied=False,
        reason=plan,
        patches=planned.patches,
        targets=(),
        changelog=planned.changelog,
        stages=run.stages,
    )


def _config_plan(run: _Upgrade) -> str:
    """What the upgrade does with each config item at the new release, for the dry run: an
    item whose Applies-To excludes it is left out of the images (its files stay); one that
    applies is installed, or retired if the new base's aiter carries every row (known only
    once the base is read, at the real run)."""
    from sglforge.overlay_configs import item_applies
    from sglforge.queue.configs import load_items

    version = ref_version(run.new_ref)
    if version is None:
        return ""
    said = []
    for item in load_items(run.project.root):
        if item_applies(item, str(version)):
            said.append(
                f"config item {item.name} applies at {version}: installed (retired instead "
                "if the new base's aiter carries every row)"
            )
        else:
            said.append(
                f"config item {item.name}: Applies-To {item.applies_to} excludes {version}, "
                "so it is left out of the new images (patches/configs/ keeps it; widen its "
                "Applies-To or retire it)"
            )
    return "".join(f"; {s}" for s in said)


def _upgrade_staged(run: _Upgrade, stage: Project) -> UpgradeResult:
    """Refresh, retire and prove in the staging copy; write back only when all passed."""
    req, new_ref = run.req, run.new_ref
    # 1. queue: check + refresh (3-way) + retire, in the staging copy
    t = time.monotonic()
    refreshed = refresh_queue(stage, new_ref, drop_upstreamed=True, retire_excluded=True)
    run.timed("check+refresh", t)
    if not refreshed.ok:
        return run.report(refreshed, False, _conflict_reason(run, refreshed))
    outcomes = []
    if req.build:
        # The config items the new bases' aiter carries leave the staged queue once, before
        # any build: every target's outcome names the same retired set.
        retired = _retire_upstreamed_configs(stage, _bases(run), req.labels, run.say)
        outcomes = [_prove_target(run, stage, bt, retired) for bt in req.targets]
    failed = [o for o in outcomes if o.error or (req.smoke and o.smoke_passed is False)]
    if failed:
        reason = "; ".join(f"{o.target}: {o.error or 'smoke failed'}" for o in failed)
        return run.report(refreshed, False, reason, outcomes)
    # 2. everything passed: the staged queue replaces the project's, all or nothing
    t = time.monotonic()
    what = "queue refreshed" + (", images built and smoke-tested" if req.build else "")
    root = run.project.root
    if req.branch:
        from sglforge import git

        start = git.current_branch(root) or git.head(root)
        git.checkout(root, new_branch=req.branch)
        _write_back(root, stage.root)
        run.timed("write", t)
        run.timed("total", run.t0)
        done = run.report(refreshed, True, f"{what}; committed on branch {req.branch}", outcomes)
        _commit_on_branch(root, req.branch, done)
        git.checkout(root, start)
        return done
    _write_back(root, stage.root)
    run.timed("write", t)
    run.timed("total", run.t0)
    return run.report(refreshed, True, what, outcomes)


def _conflict_reason(run: _Upgrade, refreshed: RefreshResult) -> str:
    hint = hint_upstream(run.project.upstream, run.project.queue.pin)
    new_ref = run.new_ref
    conflicts = [p for p in refreshed.patches if p.action == "conflict"]
    hunks = "; ".join(p.where for p in conflicts)
    return (
        f"{', '.join(p.name for p in conflicts)} conflict at {new_ref} ({hunks}); "
        f"resolve with `{with_upstream(f'sglforge patches apply --ref {new_ref}', hint)}`"
        f", edit, `git am --continue`, `sglforge patches export --ref {new_ref}`, then "
        f"rerun `{with_upstream(f'sglforge upgrade --to {new_ref}', hint)}`"
    )


def _check_branch(root: Path, branch: str) -> None:
    """Refuse ``--branch`` before any work: no repository, a bad or existing name, or
    uncommitted changes under patches/ or CHANGELOG.md (they would ride along)."""
    from sglforge import git

    if not git.is_repository(root):
        raise ConfigError(
            f"--branch {branch}: {root} is not a git repository", f"git -C {root} init"
        )
    if not git.valid_branch_name(root, branch):
        raise ConfigError(
            f"--branch {branch!r}: not a valid branch name", "--branch upgrade/v0.5.16"
        )
    if git.branch_exists(root, branch):
        raise ConfigError(
            f"--branch {branch}: the branch exists already; nothing was changed",
            f"pick another name, or `git -C {root} branch -D {branch}`",
        )
    if not git.has_head(root):
        raise ConfigError(
            f"--branch {branch}: the repository has no commit to branch from",
            'commit the project first: git add -A && git commit -m "sglforge project"',
        )
    dirty = git.uncommitted(root, "patches", "CHANGELOG.md")
    if dirty:
        raise ConfigError(
            f"--branch {branch}: uncommitted changes under patches/ or CHANGELOG.md ({dirty[0]})",
            "commit or stash them first",
        )


def _commit_on_branch(root: Path, branch: str, result: UpgradeResult) -> None:
    from sglforge import git

    message = (
        f"Upgrade the queue to sglang {result.new_ref}\n\n"
        f"{result.old_ref} -> {result.new_ref}: {result.reason}"
    )
    try:
        committed = git.commit_all(
            root, message, paths=("patches", "CHANGELOG.md"), own_identity=True
        )
    except git.GitFailed as exc:
        said = (exc.result.stderr or exc.result.stdout).strip().splitlines() or ["no output"]
        raise ConfigError(
            f"upgrade written, but `git commit` on {branch} failed: {said[-1]}",
            'set your identity: git config user.name "..."; git config user.email ...',
        ) from None
    if not committed:
        raise ConfigError(
            f"upgrade written, but nothing changed under patches/ or CHANGELOG.md to commit "
            f"on {branch}",
            f"git -C {root} status; git -C {root} checkout - to go back",
        )


def _stage(root: Path, new_ref: str) -> Path:
    """A staging copy of the project's data, sharing the real build/ caches."""
    base = confined(root / "build" / "upgrade", safe_ref(new_ref), "staging folder", "--to")
    shutil.rmtree(base, ignore_errors=True)
    stage = base / "project"
    stage.mkdir(parents=True)
    for name in STAGED:
        if (root / name).is_dir():
            shutil.copytree(root / name, stage / name)
    if (root / "CHANGELOG.md").exists():
        shutil.copy2(root / "CHANGELOG.md", stage / "CHANGELOG.md")
    (stage / "build").symlink_to((root / "build").resolve(), target_is_directory=True)
    return stage


def _write_back(root: Path, stage: Path) -> None:
    files: dict[Path, str | bytes | None] = {}
    staged = {p.relative_to(stage) for p in (stage / "patches").rglob("*") if p.is_file()}
    current = {p.relative_to(root) for p in (root / "patches").rglob("*") if p.is_file()}
    for rel in staged:
        data = (stage / rel).read_bytes()
        if rel not in current or (root / rel).read_bytes() != data:
            files[root / rel] = data
    for rel in current - staged:
        if not rel.name.startswith("."):
            files[root / rel] = None
    if (stage / "CHANGELOG.md").exists():
        files[root / "CHANGELOG.md"] = (stage / "CHANGELOG.md").read_bytes()
    commit_files(root / "patches", files)


def _prove_target(
    run: _Upgrade, stage: Project, bt: BuildTarget, retired: tuple[str, ...]
) -> TargetOutcome:
    """Build the staged queue for ``bt`` once and prove it with the gates publish runs (the
    scan before the build); with ``--publish``, publish gets the candidate, build and all.
    ``retired``: the config items this upgrade retired as upstreamed (named in the outcome)."""
    req = run.req
    build = BuildRequest(
        target=bt,
        mode=req.mode,
        base_image=req.base_image,
        labels=req.labels,
        offline=req.offline,
    )
    try:
        smoke = _smoke_request(run, stage, bt) if req.smoke else None
        pub = req.publish.request(build, smoke) if req.publish is not None else None
        with _candidate(run, stage, bt, smoke, pub) as cand:
            return _built_and_gated(run, stage, build, pub, cand, retired)
    except SglforgeError as exc:
        return TargetOutcome(bt.spec, error=str(exc).splitlines()[0])


def _candidate(
    run: _Upgrade,
    stage: Project,
    bt: BuildTarget,
    smoke: SmokeRequest | None,
    pub: PublishRequest | None,
) -> Candidate:
    """The staged target's candidate: with ``--publish``, publish's (its registry, login and
    gate policy, made before the build); else the gates' default policy (no registry)."""
    from sglforge.candidate import Candidate
    from sglforge.publish import candidate_for

    if pub is not None:
        return candidate_for(stage, pub, run.say)
    return Candidate(
        stage,
        bt,
        smoke.scenario if smoke else None,
        smoke.model if smoke else None,
        smoke=smoke,
        labels=run.req.labels,
        say=run.say,
    )


def _built_and_gated(
    run: _Upgrade,
    stage: Project,
    build: BuildRequest,
    pub: PublishRequest | None,
    cand: Candidate,
    retired: tuple[str, ...],
) -> TargetOutcome:
    """The scan gate, the one build, then publish (which runs the gates after the build) or
    those gates here."""
    from sglforge import gates
    from sglforge.build import build_image

    bt = build.target
    if cand.scenario is not None:
        # The staged queue at the new pin, before the build (issue 24, docs/scan.md).
        (scan,) = gates.run(cand, only=gates.BEFORE_BUILD)
        if scan.raised is not None:
            raise scan.raised
    t = time.monotonic()
    run.say(f"{bt.spec}: building for {run.new_ref}")
    built = build_image(stage, build)
    run.timed(f"build {bt.spec}", t)
    cand.with_build(built)
    installed = tuple(
        (k.removeprefix(LABEL_CONFIG_PREFIX), "installed")
        for k in sorted(built.labels)
        if k.startswith(LABEL_CONFIG_PREFIX)
    )
    out = TargetOutcome(
        bt.spec,
        image=built.image,
        build_mode=built.mode,
        up_to_date=built.up_to_date,
        build_seconds=round(time.monotonic() - t, 2),
        changed_files=built.changed_files,
        configs=tuple((n, "upstreamed") for n in retired) + installed,
    )
    if pub is not None:
        return _publish_target(run, stage, pub, cand, out)
    if cand.scenario is not None:
        return _gate_target(run, cand, out)
    return out


def _smoke_request(run: _Upgrade, stage: Project, bt: BuildTarget) -> SmokeRequest:
    """The smoke of ``bt``: the scenario asked for, else the target's own (staged copy)."""
    req = run.req
    scenario = req.scenario or stage.scenario_for(bt)
    return SmokeRequest(scenario=scenario, model=req.model, port=req.port, labels=req.labels)


def _publish_target(
    run: _Upgrade, stage: Project, pub: PublishRequest, cand: Candidate, out: TargetOutcome
) -> TargetOutcome:
    """Publish the image just built (publish's own gates run; the build is not repeated)."""
    from sglforge.publish import publish

    t = time.monotonic()
    run.say(f"{pub.target.spec}: publishing to {pub.registry}")
    res = publish(stage, pub, cand, run.say)
    run.timed(f"smoke+publish {pub.target.spec}", t)
    return replace(
        out,
        published=tuple(res.pushed),
        gates=res.gates,
        error=res.error or "",
    )


def _gate_target(run: _Upgrade, cand: Candidate, out: TargetOutcome) -> TargetOutcome:
    """The gates after the build, as publish runs them, for an upgrade that does not publish
    (no registry: the bench has no last release to compare with and says so)."""
    from sglforge import gates

    t = time.monotonic()
    run.say(f"{out.target}: gates for {cand.image}")
    done = gates.run(cand, skip={"bench": NO_BENCH}, only=gates.AFTER_BUILD)
    run.timed(f"smoke {out.target}", t)
    bad = gates.first_failure(done)
    return replace(
        out,
        gates=done,
        error=bad.error.splitlines()[0] if bad is not None else "",
    )


def _bases(run: _Upgrade) -> tuple[tuple[str, str | None], ...]:
    """Each target's name and its base with ``--base-image``: the one template rule, and
    {date} resolved before the base is probed (None when that fails: the target's build then
    says why). None at all without ``--base-image`` (the targets' own bases are not probed)."""
    from sglforge import bases

    req = run.req
    if not req.base_image:
        return ()
    version = str(ref_version(run.new_ref) or run.new_ref.lstrip("v"))
    found: list[tuple[str, str | None]] = []
    for bt in req.targets:
        try:
            base = bases.base_ref(bt, version, req.base_image)
            found.append((bt.name, bases.resolve_base(base, bt, req.offline, run.say)))
        except SglforgeError:
            found.append((bt.name, None))
    return tuple(found)


def _retire_upstreamed_configs(
    stage: Project,
    bases: Sequence[tuple[str, str | None]],
    labels: Mapping[str, str] | None,
    say: Callable[[str], None],
) -> tuple[str, ...]:
    """Move the staged config items the new bases' aiter already carries to
    patches/retired/configs/, and reload the staged project so nothing later reads them.

    ``bases``: each target built and its base (None: unknown). An item goes when at least one
    target is its own (``target`` in its TOML) and every such target's base carries its keys
    with the same kernel choice: installing it would duplicate keys (the build refuses those)
    and it has nothing left to add. Each base is probed once, and only for a target with items;
    a base without aiter, or one that cannot be read, keeps its targets' items (their build
    then says why).
    """
    from sglforge.queue.configs import upstreamed

    if not bases:
        return ()
    probed: dict[str, BaseTables | None] = {}
    retired = []
    dest = stage.root / "patches" / "retired" / "configs"
    for item in stage.queue.configs:
        wanted = [base for name, base in bases if name == item.target]
        known = [base for base in wanted if base is not None]
        if not known or len(known) < len(wanted):
            continue
        for base in known:
            if base not in probed:
                probed[base] = _base_tables(base, labels, say)
        tables = [probed[base] for base in known]
        if not all(t is not None and upstreamed(item, t) for t in tables):
            continue
        dest.mkdir(parents=True, exist_ok=True)
        for rel in (item.meta_file, item.csv_file):
            shutil.move(stage.root / rel, dest / Path(rel).name)
        where = ", ".join(sorted(set(known)))
        say(f"config item {item.name}: {where}'s aiter carries every row: upstreamed, retired")
        retired.append(item.name)
    if retired:
        stage.reload()  # the queue as read still holds the items moved
    return tuple(retired)


def _base_tables(
    base: str, labels: Mapping[str, str] | None, say: Callable[[str], None]
) -> BaseTables | None:
    """``base``'s aiter tables, None when it has none or cannot be read (said)."""
    from sglforge.overlay_configs import base_aiter

    try:
        return base_aiter(base, labels)
    except SglforgeError as exc:
        say(f"{base}: aiter not read ({str(exc).splitlines()[0]}); its config items kept")
        return None


def _write_report(root: Path, result: UpgradeResult, report_dir: Path | None) -> UpgradeResult:
    from sglforge.reports.upgrade import markdown

    folder = report_dir or (root / "build" / "upgrade")
    folder.mkdir(parents=True, exist_ok=True)
    name = f"report-{safe_ref(result.new_ref)}"
    js = confined(folder, f"{name}.json", "report", "--to")
    md = confined(folder, f"{name}.md", "report", "--to")
    result = replace(result, report_json=js, report_md=md)
    atomic_write(js, json.dumps(to_dict(result), indent=2) + "\n")
    atomic_write(md, markdown(result))
    return result


def to_dict(result: UpgradeResult) -> dict[str, Any]:
    """The JSON form of the report."""
    from dataclasses import asdict

    data = asdict(replace(result, targets=()))
    data["targets"] = [t.to_dict() for t in result.targets]
    data["report_json"] = str(result.report_json) if result.report_json else None
    data["report_md"] = str(result.report_md) if result.report_md else None
    data["generated"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    return data
