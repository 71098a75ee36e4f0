"""``sglforge scan``: blockers a launch will hit, seen statically before a GPU is rented.

The scan reads an upstream tree (the pinned or given ref, with the queue applied unless asked
not to), the model's ``config.json`` and the scenario's launch flags, and reports findings
(``sglforge.scan.findings``) of these kinds:

- ``cuda-only-jit`` (``scan.jit``, ``scan.reach``): a JIT kernel source that includes a
  CUDA-only header outside a ROCm guard; a fail when the launch makes sglang compile it;
- ``quant-exclude-unmatched`` (``scan.quant``): a Quark ``exclude`` entry or
  ``layer_quant_config`` key that matches no module sglang builds, or a module built quantized
  whose checkpoint tensors the exclude list marks unquantized;
- ``fused-shared-expert-dtype`` (``scan.quant``): a shared expert fused into routed experts
  of another dtype.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglforge import git
from sglforge.errors import ConfigError, PatchError
from sglforge.project import Project
from sglforge.scan.findings import FAIL, WARN, Finding
from sglforge.targets import Device

if TYPE_CHECKING:
    from sglforge.construct.built import Construction
    from sglforge.construct.environment import TargetEnv
    from sglforge.queue.series import Patch
    from sglforge.scan import jit_findings

if TYPE_CHECKING:
    from sglforge.scenario.file import Scenario

INCOMPLETE = "scan-incomplete"


@dataclass(frozen=True)
class ScanReport:
    ref: str
    commit: str
    queue: tuple[str, ...]  # the patches applied, in order (empty with --no-queue)
    model: str
    scenario: str | None
    launch: tuple[str, ...]
    findings: tuple[Finding, ...]
    environment: TargetEnv | None = None  # the node's variables the construction ran with

    @property
    def ok(self) -> bool:
        return not any(f.severity == FAIL for f in self.findings)


def read_model_config(model_dir: Path) -> dict[str, Any]:
    """``config.json`` of a model folder (checked: a JSON object naming its architectures)."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise ConfigError(
            f"{path}: no config.json in the model folder",
            "pass --model DIR, the folder of the checkpoint (the one holding config.json)",
        )
    try:
        from sglforge.util import read_json

        data = read_json(path)  # bounded: size and nesting (issue 31, E7)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})", f"fix {path}") from None
    if not isinstance(data, dict) or not isinstance(data.get("architectures"), list):
        raise ConfigError(
            f"{path}: no 'architectures' list", f"fix {path} (a Hugging Face config.json)"
        )
    from sglforge.construct import bounds

    bounds.check(data, str(path))  # sizes that would run the construction away (F7)
    return data


def launch_of(scenario: Scenario | None) -> tuple[list[str], str | None]:
    """The launch flags of a smoke scenario (placeholders filled), and its name."""
    if scenario is None:
        return [], None
    return scenario.launch_args(30000), scenario.name


def device_of(project: Project, scenario: Scenario | None) -> Device:
    """The GPU the scenario's target is (the first target's without one)."""
    target = scenario.target if scenario is not None else None
    return project.target(target or project.targets.targets[0].name).device


@dataclass(frozen=True)
class Node:
    """Where a scan's construction answers for: the target's GPU and the node's environment
    (both key the scan cache)."""

    device: Device
    env: TargetEnv


def env_of(project: Project, scenario: Scenario | None) -> TargetEnv:
    """The node's environment the construction runs in: the release image's variables, the
    target's defaults and the scenario's ``[container.env]`` (``construct.environment``)."""
    from sglforge.construct.environment import target_env

    name = scenario.target if scenario is not None else None
    target = project.target(name or project.targets.targets[0].name)
    return target_env(target.gpu_arch, target, scenario)


def scan_tree(
    tree: Path,
    config: dict[str, Any],
    launch: Sequence[str],
    device: Device,
    config_file: str = "config.json",
    built: Callable[[], Construction] | None = None,
    env: TargetEnv | None = None,
) -> list[Finding]:
    """Every finding for this tree (a release's git tree on disk), model config and launch
    on ``device`` (the target's GPU), in the node's environment ``env``.

    ``built``: the construction as the caller holds it (``Candidate.construction``); called
    once, it raises ConstructionError as ``construct.build`` does."""
    from concurrent.futures import ThreadPoolExecutor

    from sglforge import construct
    from sglforge.scan import jit_findings

    def make() -> Construction:
        return (
            built()
            if built is not None
            else construct.build(tree / "python", config, launch, device, env)
        )

    # sglang's construction runs in a child process: the kernel sources are preprocessed
    # while it runs
    with ThreadPoolExecutor(1, thread_name_prefix="sglforge-construct") as pool:
        pending = pool.submit(make)
        seen = jit_findings.includes(tree)
        try:
            made = pending.result()
        except construct.ConstructionError as exc:
            # The kernel scan does not need the models: go on with the flags as written, and
            # say that the quantization kinds could not be checked.
            made = construct.Construction(device, construct.literal_launch(launch), dsa=None)
            # A fail, not a warning: the kinds that depend on the construction were not
            # checked, so "nothing blocks" cannot be said (REDTEAM-5 F7).
            incomplete = Finding(
                INCOMPLETE,
                FAIL,
                config_file,
                None,
                "construction",
                # the checkout is a temporary folder: named as the tree's python/, so two
                # scans of the same inputs read alike
                "sglang's own model construction did not run on this tree "
                f"({exc.message.replace(str(tree.resolve()), '<tree>')}); "
                "quant-exclude-unmatched and fused-shared-expert-dtype were not checked, and the "
                "launch was read from its flags as written (the DSA backend assumed)",
                "report it with the release and the config (sglforge -v scan shows the child's "
                "error); the kernel findings still hold",
            )
            return [*jit_findings.findings(tree, made, seen), incomplete]
    return findings_of(tree, made, config, config_file, seen)


def findings_of(
    tree: Path,
    built: Construction,
    config: dict[str, Any],
    config_file: str = "config.json",
    seen: jit_findings.Includes | None = None,
) -> list[Finding]:
    """The findings of one construction (``construct.build``) of ``config`` on ``tree``
    (``seen``: ``jit_findings.includes(tree)`` when already computed)."""
    from sglforge.scan import jit_findings, quant

    return [
        *jit_findings.findings(tree, built, seen),
        *quant.findings(built, config, config_file),
        *config_read(built, config_file),
    ]


CONFIG_READ = "config-read"


def config_read(built: Construction, config_file: str) -> list[Finding]:
    """A warning when config.json was not read by the transformers the release pins (an
    ``auto_map`` model, a model type that transformers does not know, no wheels): the
    decisions were then made on sglforge's reading, which fills no per-class defaults."""
    source = built.config_source
    if not source or source.startswith("transformers "):
        return []
    return [
        Finding(
            CONFIG_READ,
            WARN,
            config_file,
            None,
            "config.json",
            f"config.json was not read by transformers' own configuration class ({source}); "
            "per-class defaults and legacy-key conversion are sglforge's, not transformers'",
            "check the model type and the index (sglforge -v scan ...); the findings still hold "
            "for the keys config.json sets",
        )
    ]


def _selected(project: Project, ref: str | None, queue: bool) -> tuple[str, str, list[Patch]]:
    """(ref, commit, the queue patches that apply at it): ``ref`` None is the pin."""
    from sglforge.queue.series import ref_version

    q = project.queue
    if ref is None:
        ref, commit = q.pin.ref, project.pin_commit()
    else:
        commit = project.upstream.resolve(ref)
    version = ref_version(ref)
    patches = [p for p in q.patches if p.applies_at(version) is not False] if queue else []
    return ref, commit, patches


@contextmanager
def checkout(
    project: Project, ref: str | None, queue: bool
) -> Iterator[tuple[Path, str, str, list[str]]]:
    """A temporary copy of upstream's tree at ``ref`` (default: the pin), the queue applied
    with ``git apply`` unless ``queue`` is False: (folder, ref, commit, patches applied)."""
    ref, commit, patches = _selected(project, ref, queue)
    with _checkout(project, ref, commit, patches) as tree:
        yield tree, ref, commit, [p.name for p in patches]


@contextmanager
def _checkout(project: Project, ref: str, commit: str, patches: Sequence[Patch]) -> Iterator[Path]:
    tmp = Path(tempfile.mkdtemp(prefix="sglforge-scan-"))
    try:
        tree = tmp / "tree"
        tree.mkdir()
        # python/ only: what the scan reads (a git upstream also holds sgl-kernel/, docs, ...)
        git.export_files(project.upstream.cache, commit, "python", tree, tmp / "index")
        for patch in patches:
            res = git.apply_to_folder(tree, patch.path, include="python/*")
            if res.status != 0:
                raise PatchError(
                    f"{patch.name} does not apply at {ref}: {res.stderr.strip()[:200]}",
                    f"sglforge patches check --ref {ref}",
                )
        yield tree
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_scan(
    project: Project,
    model_dir: Path,
    ref: str | None = None,
    queue: bool = True,
    scenario: Scenario | None = None,
) -> ScanReport:
    """Scan the upstream tree at ``ref`` (the pin by default) for ``model_dir`` and the
    scenario's launch; a scan of the same commit, queue patches, config, launch and device
    by the same sglforge is served from the scan cache (``scan.cache``)."""
    from sglforge.progress import current

    config = read_model_config(model_dir)
    launch, _name = launch_of(scenario)
    device = device_of(project, scenario)
    env = env_of(project, scenario)
    config_file = str(Path(model_dir) / "config.json")

    def scan(ref_used: str, commit: str, patches: Sequence[Patch]) -> list[Finding]:
        with _checkout(project, ref_used, commit, patches) as tree:
            return scan_tree(tree, config, launch, device, config_file, env=env)

    node = Node(device, env)
    where, found, hit = cached_scan(project, ref, queue, config, launch, node, config_file, scan)
    if hit:
        current().info(CACHE_HIT)
    return report_of(model_dir, scenario, where, found, env)


CACHE_HIT = "scan: served from the scan cache (same commit, queue, config, launch)"


def cached_scan(
    project: Project,
    ref: str | None,
    queue: bool,
    config: Mapping[str, Any],
    launch: Sequence[str],
    node: Node,
    config_file: str,
    scan: Callable[[str, str, Sequence[Patch]], list[Finding]],
) -> tuple[tuple[str, str, list[str]], list[Finding], bool]:
    """((ref, commit, patches applied), findings, served from the cache): the one way every
    scan (``sglforge scan``, publish's scan gate) keys, reads and fills the scan cache.
    ``scan(ref, commit, patches)`` runs on a miss; a result with an incomplete construction
    (perhaps this machine's: no index) is not kept, so it is asked again next time."""
    from sglforge.scan import cache

    ref_used, commit, patches = _selected(project, ref, queue)
    key = cache.report_key(
        commit,
        [(p.name, p.sha256) for p in patches],  # the bytes the queue read, not the disk's
        config,
        launch,
        node.device,
        config_file,
        node.env.as_dict(),
    )
    found = cache.load_report(key)
    hit = found is not None
    if found is None:
        found = scan(ref_used, commit, patches)
        if not any(f.kind == INCOMPLETE for f in found):
            cache.store_report(key, found)
    return (ref_used, commit, [p.name for p in patches]), found, hit


def report_of(
    model_dir: Path,
    scenario: Scenario | None,
    where: tuple[str, str, Sequence[str]],
    found: Sequence[Finding],
    env: TargetEnv | None = None,
) -> ScanReport:
    """The report of one scan: ``where`` is (ref, commit, patches applied); ``env``: the
    node's environment the construction ran in."""
    launch, name = launch_of(scenario)
    ref_used, commit, applied = where
    return ScanReport(
        ref=ref_used,
        commit=commit,
        queue=tuple(applied),
        model=str(model_dir),
        scenario=name,
        launch=tuple(launch),
        findings=tuple(found),
        environment=env,
    )


def blocking_findings(project: Project, report: ScanReport) -> list[Finding]:
    """The fails of ``report`` that block ``upgrade``/``publish``: those no ``Fixes-Scan:``
    trailer of a queue patch names (``KIND FILE`` or ``KIND ENTRY``, see ``Finding.key``)."""
    from sglforge.scan.waivers import blocking  # a waiver only from a patch touching the file

    return blocking(report.findings, project.queue.patches)
