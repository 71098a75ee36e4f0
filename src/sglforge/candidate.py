"""The image we are about to vouch for: one target's build, its scenario and model, and every
fact the gates (:mod:`sglforge.gates`) need about it, each computed at most once.

A ``Candidate`` is opened by ``publish`` (and ``upgrade``) for one target, before the build
(the scan gate needs no image); ``built`` and ``image`` are set once the build is there. Each
fact is a cached property, computed on first use and kept for the life of the candidate:

- ``model_config``: the model folder's ``config.json`` (None when it is not on this host);
- ``scan_tree``: upstream's ``python/`` at the pin with the queue applied (a temporary copy,
  removed when the candidate closes);
- ``construction``: sglang's own construction of the launch's models on that tree and the
  target's GPU, the MoE shapes and the quant decisions together (one child run: the one place
  that asks for one);
- ``base_tables``: the base image's aiter tables (those the build's overlay staging probed,
  when it did);
- ``host``: this machine's GPUs (``detect_gpus``) and their node facts, probed once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sglforge import construct
    from sglforge.build import BuildResult
    from sglforge.engine.credentials import Credentials
    from sglforge.engine.reference import Registry
    from sglforge.project import Project
    from sglforge.queue.configs import BaseTables
    from sglforge.requests import SmokeRequest
    from sglforge.scenario.file import Scenario
    from sglforge.smoke.preflight import GpuInventory
    from sglforge.targets import BuildTarget


@dataclass(frozen=True)
class Against:
    """The last release to bench against: its local ``image``, or None and ``why`` there is
    none; ``knee_prior``: its knee bracket (the knee, the rate that failed above it) when it
    was benched on the same scenario and hardware, for the search to start from."""

    image: str | None
    why: str = ""
    knee_prior: tuple[float, float | None] | None = None


# Finds the last release of the candidate's target (publish's: in the registry it pushes to).
Baseline = Callable[["Candidate"], Against]


def _no_baseline(_c: Candidate) -> Against:
    return Against(None, "no registry to find the last release in (only publish has one)")


@dataclass(frozen=True)
class GatePolicy:
    """How the gates judge a candidate, settled before any gate runs and handed to the
    candidate when it is made (never set on it afterwards).

    The default is upgrade's without ``--publish``: no registry, so the bench compares with
    nothing and nothing requires it. A publish's (``publish.candidate_for``) finds the last
    release in its ``registry`` (with its login ``creds``) and requires a comparison unless
    ``no_baseline`` says why not; ``accept_regression`` waives a drop (recorded).
    """

    baseline: Baseline = _no_baseline
    baseline_required: bool = False  # publish: compare with the last release, or say why not
    no_baseline: str | None = None  # --no-baseline REASON
    accept_regression: str | None = None  # --accept-regression REASON
    registry: Registry | None = None  # the registry the release is pushed to (None: none)
    creds: Credentials | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Host:
    """The GPUs of the machine the smoke runs on, probed once (``gpus`` None: not probed,
    a CPU scenario)."""

    gpus: GpuInventory | None
    facts: Mapping[str, object] = field(default_factory=dict)  # node_facts: name, gfx, ROCm


@dataclass(frozen=True)
class Checkout:
    """The patched tree the scan and the construction read: ``tree`` holds ``python/``."""

    tree: Path
    ref: str
    commit: str
    applied: tuple[str, ...]

    @property
    def python(self) -> Path:
        return self.tree / "python"


class Candidate:
    """One target's image on its way to a release, and the facts the gates prove it by.

    ``scenario`` None: ``--skip-smoke`` (no gate runs). ``model``: the host's model folder
    (``--model``, else the scenario's ``model.path``). ``smoke``: the smoke request (port, log
    folder, env, labels). ``labels``: the labels of probe containers (the request's).
    ``policy``: how the gates judge it (:class:`GatePolicy`).
    Close it (``with``) to remove the temporary tree.
    """

    def __init__(
        self,
        project: Project,
        target: BuildTarget,
        scenario: Scenario | None,
        model: Path | None = None,
        *,
        smoke: SmokeRequest | None = None,
        labels: Mapping[str, str] | None = None,
        say: Callable[[str], None] = lambda _msg: None,
        policy: GatePolicy = GatePolicy(),
    ) -> None:
        self.project = project
        self.target = target
        self.scenario = scenario
        self.model = model or (scenario.model_path if scenario else None)
        self.built: BuildResult | None = None
        self.smoke = smoke
        self.labels: Mapping[str, str] = dict(labels or {})
        self.say = say
        self.policy = policy
        self.image = ""  # the image smoked: built, or pulled (with_build)
        self.standin = bool(scenario and scenario.standin)
        # the gates run on it, by name (sglforge.gates keeps its GateResults here: each gate
        # runs at most once per candidate, also when upgrade hands the candidate to publish)
        self.results: dict[str, object] = {}
        self._stack = ExitStack()

    def __enter__(self) -> Candidate:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Remove what the candidate made (the temporary tree)."""
        self._stack.close()

    def with_build(self, built: BuildResult, image: str | None = None) -> None:
        """The build is there: ``image`` (default: the built one) is what gets smoked."""
        self.built = built
        self.image = image or built.image

    @property
    def build_result(self) -> BuildResult:
        assert self.built is not None, "the build runs before the gates that need it"
        return self.built

    # --- the facts, each computed once --------------------------------------------------

    @cached_property
    def model_config(self) -> dict[str, Any] | None:
        """``config.json`` of the model folder, or None when there is none on this host."""
        from sglforge.scan import read_model_config

        if self.model is None or not (self.model / "config.json").is_file():
            return None
        return read_model_config(self.model)

    @cached_property
    def checkout(self) -> Checkout:
        """Upstream's ``python/`` at the pin with the queue applied, in a temporary folder."""
        from sglforge.scan import checkout

        tree, ref, commit, applied = self._stack.enter_context(
            checkout(self.project, None, queue=True)
        )
        return Checkout(tree, ref, commit, tuple(applied))

    @property
    def scan_tree(self) -> Path:
        """The patched ``python/`` tree (sglang's package under it)."""
        return self.checkout.python

    @cached_property
    def construction(self) -> construct.Construction:
        """sglang's own construction of the launch's models (main and MTP draft) on the
        patched tree and the target's GPU: the MoE shapes coverage reads and the quant
        decisions the scan reads, from one child run (raises ConstructionError)."""
        from sglforge import construct
        from sglforge.scan import launch_of

        config = self.model_config
        assert config is not None, "the gates check for a config.json first"
        launch, _name = launch_of(self.scenario)
        return construct.build(self.scan_tree, config, launch, self.target.device, self.environment)

    @cached_property
    def environment(self) -> construct.TargetEnv:
        """The node's environment the construction runs in: the release image's variables
        (the replica's list: the scan gate runs before the base is pulled), the target's
        defaults and the scenario's ``[container.env]``."""
        from sglforge.construct.environment import target_env

        return target_env(self.target.gpu_arch, self.target, self.scenario)

    @cached_property
    def base_tables(self) -> BaseTables | None:
        """The base image's aiter tables: the build's (staging config items probed them),
        else probed now with the request's labels; None without a base or an aiter."""
        built = self.build_result
        if built.plan.base_tables is not None:
            return built.plan.base_tables
        if not built.base:
            return None
        from sglforge.overlay_configs import base_aiter

        return base_aiter(built.base, self.labels)

    @cached_property
    def host(self) -> Host:
        """This machine's GPUs and their facts (a stand-in scenario probes none)."""
        if self.standin or self.scenario is None or self.scenario.accelerator != "rocm":
            return Host(None)
        from sglforge.smoke.preflight import detect_gpus, node_facts

        self.say("preflight: probing GPUs (rocminfo / amd-smi / KFD topology)")
        gpus = detect_gpus()
        return Host(gpus, node_facts(gpus))
