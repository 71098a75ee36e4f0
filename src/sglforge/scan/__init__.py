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
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglforge import git
from sglforge.errors import ConfigError, PatchError
from sglforge.project import Project
from sglforge.scan.findings import FAIL, WARN, Finding

DEFAULT_MODEL_MOUNT = "/models/model"
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
    return data


def launch_of(scenario: Path | None) -> tuple[list[str], str | None]:
    """The launch flags of a smoke scenario (placeholders filled), and its name."""
    if scenario is None:
        return [], None
    from sglforge.smoke.scenario import load_scenario

    sc = load_scenario(scenario)
    return sc.launch_args(30000), sc.name


def scan_tree(
    tree: Path, config: dict[str, Any], launch: Sequence[str], config_file: str = "config.json"
) -> list[Finding]:
    """Every finding for this tree (a release's git tree on disk), model config and launch."""
    from sglforge.scan import construction, jit_findings, quant

    try:
        built = construction.build(tree, config, launch, DEFAULT_MODEL_MOUNT)
    except construction.ConstructionError as exc:
        # The kernel scan does not need the models: go on with the flags as written, and say
        # that the quantization kinds could not be checked.
        built = construction.Built(launch=construction.literal_launch(launch), dsa=None, models={})
        incomplete = Finding(
            INCOMPLETE,
            WARN,
            config_file,
            None,
            "construction",
            f"sglang's own model construction did not run on this tree ({exc.message}); "
            "quant-exclude-unmatched and fused-shared-expert-dtype were not checked, and the "
            "launch was read from its flags as written (the DSA backend assumed)",
            "report it with the release and the config; the kernel findings still hold",
        )
        return [*jit_findings.findings(tree, built), incomplete]
    out = jit_findings.findings(tree, built)
    out += quant.findings(built, config, config_file)
    return out


@contextmanager
def checkout(
    project: Project, ref: str | None, queue: bool
) -> Iterator[tuple[Path, str, str, list[str]]]:
    """A temporary copy of upstream's tree at ``ref`` (default: the pin), the queue applied
    with ``git apply`` unless ``queue`` is False: (folder, ref, commit, patches applied)."""
    q = project.queue
    up = project.upstream
    from sglforge.patches.series import ref_version

    if ref is None:
        ref, commit = q.pin.ref, project.pin_commit()
    else:
        commit = up.resolve(ref)

    version = ref_version(ref)
    tmp = Path(tempfile.mkdtemp(prefix="sglforge-scan-"))
    try:
        tree = tmp / "tree"
        tree.mkdir()
        archive = tmp / "tree.tar"
        # python/ only: what the scan reads (a git upstream also holds sgl-kernel/, docs, ...)
        git.archive(up.cache, commit, "python", archive)
        with tarfile.open(archive) as tar:
            tar.extractall(tree, filter="data")
        archive.unlink()
        applied: list[str] = []
        if queue:
            for patch in q.patches:
                if patch.applies_at(version) is False:
                    continue
                res = git.apply_to_folder(tree, patch.path, include="python/*")
                if res.status != 0:
                    raise PatchError(
                        f"{patch.name} does not apply at {ref}: {res.stderr.strip()[:200]}",
                        f"sglforge patches check --ref {ref}",
                    )
                applied.append(patch.name)
        yield tree, ref, commit, applied
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_scan(
    project: Project,
    model_dir: Path,
    ref: str | None = None,
    queue: bool = True,
    scenario: Path | None = None,
) -> ScanReport:
    """Scan the upstream tree at ``ref`` (the pin by default) for ``model_dir`` and the
    scenario's launch."""
    config = read_model_config(model_dir)
    launch, name = launch_of(scenario)
    with checkout(project, ref, queue) as (tree, ref_used, commit, applied):
        found = scan_tree(tree, config, launch, str(Path(model_dir) / "config.json"))
    return ScanReport(
        ref=ref_used,
        commit=commit,
        queue=tuple(applied),
        model=str(model_dir),
        scenario=name,
        launch=tuple(launch),
        findings=tuple(found),
    )


def blocking_findings(project: Project, report: ScanReport) -> list[Finding]:
    """The fails of ``report`` that block ``upgrade``/``publish``: those no ``Fixes-Scan:``
    trailer of a queue patch names (``KIND FILE`` or ``KIND ENTRY``, see ``Finding.key``)."""
    from sglforge.scan.waivers import blocking  # a waiver only from a patch touching the file

    return blocking(report.findings, project.queue.patches)


def gate(
    project: Project,
    scenario: Path | None,
    model: str | Path | None = None,
    ref: str | None = None,
    say: Callable[[str], None] = lambda _msg: None,
) -> ScanReport | None:
    """The scan ``publish`` (and, later, ``upgrade``) runs before a build: ScanBlocked when a
    fail no ``Fixes-Scan:`` trailer waives is found. It applies to ROCm scenarios whose model
    folder (``model``, else the scenario's ``model.path``) holds a config.json on this host;
    otherwise it says why it was skipped and returns None."""
    from sglforge.errors import ScanBlocked
    from sglforge.smoke.scenario import load_scenario

    if scenario is None:
        return None
    sc = load_scenario(scenario)
    if sc.accelerator != "rocm":
        say(f"scan: skipped ({scenario} is not a ROCm scenario)")
        return None
    folder = Path(model) if model else sc.model_path
    if folder is None or not (folder / "config.json").is_file():
        say(f"scan: skipped (no config.json in {folder} on this host)")
        return None
    report = run_scan(project, folder, ref=ref, queue=True, scenario=scenario)
    blocked = blocking_findings(project, report)
    if blocked:
        shown = "; ".join(
            f"{f.kind} {f.file if f.line is not None else f.entry}"
            + (f":{f.line}" if f.line is not None else "")
            for f in blocked[:3]
        )
        more = f" (+{len(blocked) - 3} more)" if len(blocked) > 3 else ""
        raise ScanBlocked(
            f"scan at {report.ref} with the queue: {len(blocked)} blocking finding(s): "
            f"{shown}{more}",
            f"sglforge scan --model {folder} --scenario {scenario}; fix it in the queue, or "
            "add a 'Fixes-Scan: KIND WHERE' trailer to the patch that does",
        )
    say(f"scan: {len(report.findings)} finding(s), none blocking")
    return report
