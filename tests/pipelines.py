"""Test helpers: run a pipeline from a folder and keyword options, as the command line would.

The core takes ``(project, request)``; these helpers open the ``Project`` (with the upstream
given) and build the request the way ``sglforge.cli`` builds it, so a test reads like the
command it stands for. They decide nothing themselves: every option goes into the request.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sglforge.build import BuildResult, build_image
from sglforge.project import Project
from sglforge.requests import (
    BuildRequest,
    PublishOptions,
    PublishRequest,
    SmokeRequest,
    UpgradeRequest,
)
from sglforge.scenario.file import Scenario, load_scenario

Where = Project | Path | str


def offline_of(given: bool | None) -> bool:
    """``given``, else ``$SGLFORGE_OFFLINE`` read as the command line's ``--offline`` reads it
    (click's flag envvar), so a test that sets the variable runs as a user who set it would."""
    if given is not None:
        return given
    import os

    import click

    value = os.environ.get("SGLFORGE_OFFLINE", "")
    return bool(click.BOOL.convert(value, None, None)) if value else False


def open_project(where: Where, upstream: str | Path | None = None) -> Project:
    """``where`` itself when it is a Project (and no other upstream is asked), else opened."""
    if isinstance(where, Project) and (upstream is None or str(upstream) == where.upstream_option):
        return where
    root = where.root if isinstance(where, Project) else Path(where)
    return Project(root, str(upstream) if upstream is not None else None)


def build_at(
    where: Where,
    target: str = "mi355x",
    mode: str = "auto",
    base_image: str | None = None,
    upstream: str | Path | None = None,
    tags: Sequence[str] = (),
    dry_run: bool = False,
    progress: Callable[[Any], None] | None = None,
    *,
    ref: str | None = None,
    labels: Mapping[str, str] | None = None,
    offline: bool | None = None,
) -> BuildResult:
    project = open_project(where, upstream)
    req = BuildRequest(
        target=project.target(target),
        mode=mode,
        base_image=base_image,
        ref=ref,
        tags=tuple(tags),
        labels=dict(labels or {}),
        offline=offline_of(offline),
        dry_run=dry_run,
    )
    return build_image(project, req, progress)


def plan_at(mode: str, **kwargs: Any) -> Any:
    """``plan_build`` from keyword facts, as the tests write them: the image's facts
    (``target``, ``version``, ``upstream``, ``queue_hash``, ``patches``, ``base``) and the
    plan's inputs (``worktree``, ``changed_files``, ``mode_reason``, ``template``, ``tags``,
    ``extra_labels``, ``created``)."""
    from sglforge.build import PlanInputs, choose_mode, plan_build
    from sglforge.provenance import ImageFacts

    if mode not in ("overlay", "source"):
        choose_mode(mode, ())  # the ConfigError naming the known modes
    base = kwargs.pop("base", None)
    facts = ImageFacts(
        version=kwargs.pop("version"),
        target=kwargs.pop("target"),
        mode=mode,
        base=base if mode == "overlay" else None,
        upstream=kwargs.pop("upstream"),
        queue_hash=kwargs.pop("queue_hash"),
        patches=tuple(kwargs.pop("patches")),
        scan_waivers=tuple(kwargs.pop("scan_waivers", ())),
    )
    kwargs["changed_files"] = tuple(kwargs["changed_files"])
    kwargs["tags"] = tuple(kwargs.get("tags", ()))
    kwargs["extra_labels"] = dict(kwargs.get("extra_labels") or {})
    return plan_build(facts, PlanInputs(**kwargs))


def smoke_request(
    scenario: Path | str | Scenario,
    model: Path | str | None = None,
    port: int | None = None,
    log_dir: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    load_timeout: float | None = None,
) -> SmokeRequest:
    return SmokeRequest(
        scenario=scenario if isinstance(scenario, Scenario) else load_scenario(Path(scenario)),
        model=Path(model) if model else None,
        port=port,
        log_dir=log_dir,
        env=dict(env or {}),
        labels=dict(labels or {}),
        load_timeout=load_timeout,
    )


def smoke_at(
    root: Path | Project,
    image: str,
    scenario: Path | str,
    model: Path | str | None = None,
    port: int | None = None,
    log_dir: Path | None = None,
    *,
    progress: Callable[[str], None] | None = None,
    gpus: Any = None,
    **options: Any,
) -> Any:
    from sglforge.smoke import run_smoke

    project = root if isinstance(root, Project) else Project(root)
    req = smoke_request(scenario, model, port, log_dir, **options)
    return run_smoke(project, image, req, progress=progress, gpus=gpus)


def publish_at(
    where: Where,
    target: str,
    registry: str,
    *,
    model: str | Path | None = None,
    port: int | None = None,
    scenario: Path | None = None,
    skip_smoke: bool = False,
    allow_standin: bool = False,
    accept_regression: str | None = None,
    dry_run: bool = False,
    mode: str = "auto",
    base_image: str | None = None,
    upstream: str | Path | None = None,
    labels: Mapping[str, str] | None = None,
    offline: bool | None = None,
    attempts: int = 4,
    backoff: float = 2.0,
    date: str | None = None,
    changelog: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> Any:
    from sglforge.engine.reference import Registry
    from sglforge.publish import candidate_for, publish

    project = open_project(where, upstream)
    bt = project.target(target)
    build = BuildRequest(
        target=bt,
        mode=mode,
        base_image=base_image,
        labels=dict(labels or {}),
        offline=offline_of(offline),
        dry_run=dry_run,
    )
    smoke = None
    if not skip_smoke:
        chosen = project.scenario_file(Path(scenario)) if scenario else project.scenario_for(bt)
        smoke = smoke_request(chosen, model, port, labels=labels)
    req = PublishRequest(
        build=build,
        registry=Registry(registry),
        smoke=smoke,
        allow_standin=allow_standin,
        accept_regression=accept_regression,
        attempts=attempts,
        backoff=backoff,
        date=date,
        changelog=changelog,
    )
    with candidate_for(project, req, progress or (lambda _m: None)) as cand:
        return publish(project, req, cand, progress)


def upgrade_at(
    where: Where,
    to: str = "latest",
    *,
    upstream: str | Path | None = None,
    targets: Sequence[str] = ("mi355x",),
    model: str | Path | None = None,
    scenario: Path | None = None,
    labels: Mapping[str, str] | None = None,
    offline: bool | None = None,
    progress: Callable[[str], None] | None = None,
    **options: Any,
) -> Any:
    from sglforge.upgrade import upgrade

    project = open_project(where, upstream)
    publish_keys = {f.name for f in dataclasses.fields(PublishOptions)}
    given = {k: options.pop(k) for k in list(options) if k in publish_keys}
    if isinstance(given.get("registry"), str):  # as the command line makes it
        from sglforge.engine.reference import Registry

        given["registry"] = Registry(given["registry"])
    if options.pop("publish", False):
        options["publish"] = PublishOptions(**given)
    req = UpgradeRequest(
        to=to,
        targets=tuple(project.target(t) for t in targets),
        model=Path(model) if model else None,
        scenario=project.scenario_file(Path(scenario)) if scenario else None,
        labels=dict(labels or {}),
        offline=offline_of(offline),
        **options,
    )
    return upgrade(project, req, progress)
