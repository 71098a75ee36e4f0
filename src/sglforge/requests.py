"""Requests in, results out: one frozen request per pipeline, built once at the command line.

The command line resolves everything a pipeline is asked to do against the one opened
``Project`` (the target from its name, the smoke scenario for that target, options typed:
``offline`` a bool, labels a mapping) and hands the core ``(project, request)``. Below the
command line no target name is resolved again and no option is re-read from the environment.

- ``BuildRequest``: ``sglforge build`` (and the build stage of publish and upgrade);
- ``SmokeRequest``: ``sglforge smoke`` (and the smoke and bench stages of publish/upgrade);
- ``PublishRequest``: ``sglforge publish``: a build, a smoke (None: ``--skip-smoke``), a registry;
- ``UpgradeRequest``: ``sglforge upgrade``: the new ref, the targets and what to prove.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from sglforge.errors import ConfigError

if TYPE_CHECKING:
    from sglforge.engine.reference import Registry
    from sglforge.scenario.file import Scenario
    from sglforge.targets import BuildTarget

MODES = ("auto", "overlay", "source")


def check_mode(mode: str) -> None:
    """ConfigError naming the known modes unless ``mode`` is one."""
    if mode not in MODES:
        raise ConfigError(
            f"unknown build mode {mode!r} (known: {', '.join(MODES)})",
            "sglforge build --mode auto",
        )


def frozen_map(items: Mapping[str, str] | None) -> Mapping[str, str]:
    """A read-only copy of ``items`` (a request never changes under its holder)."""
    return MappingProxyType(dict(items or {}))


def _freeze(obj: object, *names: str) -> None:
    for name in names:
        object.__setattr__(obj, name, frozen_map(getattr(obj, name)))


@dataclass(frozen=True)
class BuildRequest:
    """One image to build for one resolved target."""

    target: BuildTarget
    mode: str = "auto"  # auto, overlay or source
    base_image: str | None = None  # instead of the target's; {version}/{date} are filled in
    ref: str | None = None  # upstream ref to build (None: the pin)
    tags: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)  # extra image labels
    offline: bool = False  # never ask a registry for the base
    dry_run: bool = False

    def __post_init__(self) -> None:
        check_mode(self.mode)
        object.__setattr__(self, "tags", tuple(self.tags))
        _freeze(self, "labels")


@dataclass(frozen=True)
class SmokeRequest:
    """One smoke (or bench) run of a scenario, parsed once at the command line; the image is
    the caller's."""

    scenario: Scenario
    model: Path | None = None  # the host's model folder (None: the scenario's model.path)
    port: int | None = None  # None: the scenario's port
    log_dir: Path | None = None  # None: a new build/smoke/<scenario>-<stamp> folder
    env: Mapping[str, str] = field(default_factory=dict)  # added to the container's
    labels: Mapping[str, str] = field(default_factory=dict)  # added to the container's
    load_timeout: float | None = None  # None: the scenario's
    runtime: str | None = None  # "docker" or "process" (None: docker; the CLI reads the scenario's)
    python: tuple[str, ...] = ()  # the process runtime's interpreter words (): the scenario's
    server_url: str | None = None  # a server sglforge did not start: nothing is launched

    def __post_init__(self) -> None:
        object.__setattr__(self, "python", tuple(self.python))
        if self.model is not None:
            object.__setattr__(self, "model", Path(self.model))
        _freeze(self, "env", "labels")


@dataclass(frozen=True)
class PublishRequest:
    """Build (or reuse), smoke, push and tag one target's image."""

    build: BuildRequest
    registry: Registry  # checked once, where --registry was read
    smoke: SmokeRequest | None  # None: --skip-smoke, the release is recorded as untested
    allow_standin: bool = False
    accept_regression: str | None = None
    attempts: int = 4
    backoff: float = 2.0
    date: str | None = None  # the release date (None: today, UTC)
    changelog: Path | None = None  # None: the project's CHANGELOG.md
    no_baseline: str | None = None  # why publishing with no bench comparison is fine

    @property
    def target(self) -> BuildTarget:
        return self.build.target

    @property
    def dry_run(self) -> bool:
        return self.build.dry_run

    @property
    def skip_smoke(self) -> bool:
        return self.smoke is None


@dataclass(frozen=True)
class PublishOptions:
    """How to publish, apart from what is built and smoked: one value the command line builds,
    which ``upgrade --publish`` copies into each target's ``PublishRequest`` whole."""

    registry: Registry  # checked once, where --registry was read
    allow_standin: bool = False
    accept_regression: str | None = None
    attempts: int = 4
    backoff: float = 2.0
    date: str | None = None  # the release date (None: today, UTC)
    changelog: Path | None = None  # None: the project's CHANGELOG.md
    no_baseline: str | None = None  # why publishing with no bench comparison is fine

    def request(self, build: BuildRequest, smoke: SmokeRequest | None) -> PublishRequest:
        """The publish of ``build`` (and ``smoke``) with these options, every one kept."""
        return PublishRequest(
            build=build,
            registry=self.registry,
            smoke=smoke,
            allow_standin=self.allow_standin,
            accept_regression=self.accept_regression,
            attempts=self.attempts,
            backoff=self.backoff,
            date=self.date,
            changelog=self.changelog,
            no_baseline=self.no_baseline,
        )


@dataclass(frozen=True)
class UpgradeRequest:
    """Move the queue to ``to`` and prove it on each target."""

    to: str = "latest"
    targets: tuple[BuildTarget, ...] = ()
    pre: bool = False
    build: bool = True
    smoke: bool = True
    publish: PublishOptions | None = None  # None: build and smoke only
    mode: str = "auto"  # the build mode of every target
    base_image: str | None = None  # a template: {version} is the new release, {date} resolved
    model: Path | None = None
    scenario: Scenario | None = None  # None: each target's own scenario
    port: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    offline: bool = False
    report_dir: Path | None = None
    dry_run: bool = False
    branch: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "targets", tuple(self.targets))
        _freeze(self, "labels")
        check_mode(self.mode)
