"""Image builds from the patched tree: plan, build context, overlay build, source build.

Owns ``sglforge build``. The public API, also used by ``publish`` and ``upgrade``::

    build_image(project: Project, req: BuildRequest, progress=None) -> BuildResult

- ``project``: the opened project (queue, pin and upstream read once, ``sglforge.project``).
- ``req`` (``sglforge.requests.BuildRequest``): the resolved ``target``; ``mode``
  (``overlay`` starts from the release image of the pinned version and adds one layer with
  only the files the queue changes; ``source`` runs upstream's ``docker/rocm.Dockerfile`` on
  the patched tree through ``docker buildx build``; ``auto`` picks source when a patch is of
  kind aot-kernel or build, else overlay); ``base_image`` instead of the target's base
  template; ``ref``, another upstream ref than the pin; ``tags``, extra references pointed at
  the image; ``labels``, extra labels (tests add ``io.sglforge.test=1``); ``offline``, never
  ask a registry, only the local engine; ``dry_run``, the plan without an engine
  (``BuildResult.plan``; ``id`` is None).
- ``progress`` receives ``Status`` (a phase) and ``engine.images.BuildStep`` (step n of m).

An overlay over a base its registry serves is written, not built (issue 43): the plan's
``oci`` is the image ``sglforge.images.oci`` makes from the base's registry manifest and
config and the plan's files, labels and environment, with ``SOURCE_DATE_EPOCH`` (else 0) as
its only time; the engine then loads it for the self-check. ``images/overlay.Dockerfile``
stays what the engine builds when the base is in no registry, and the text the inputs key
hashes.

The image reference is immutable and content-derived:
``<repository>:v<version>-<rocm>-<target>-q<queue hash[:8]>``. Its labels carry the
``inputs`` key (base image ID or digest, queue hash, upstream commit, Dockerfile, target,
manifest and changed files); when the tag already exists locally with the same key, nothing
is built and ``up_to_date`` is True. Every image carries OCI labels, ``io.sglforge.*``
labels and ``/opt/sglforge/manifest.json`` (patch names and sha256s, files, base, upstream):
the contract ``sglforge.provenance`` defines (with the inputs key) and reads back. The
overlay's base image is found, pinned and inspected by ``sglforge.bases``.

Raises ConfigError (targets, mode), BuildError (missing base, wrong sglang version, failed
step, no buildx) and EngineUnavailable (no engine; never for ``dry_run``).
"""

from __future__ import annotations

import datetime as _dt
import io
import json
import os
import re
import stat
import tarfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Protocol

from sglforge import bases
from sglforge.errors import BuildError, ConfigError, SglforgeError
from sglforge.images import oci
from sglforge.project import Project
from sglforge.provenance import (
    LABEL_ENTRYPOINT_RESET,
    LABEL_INPUTS,
    MANIFEST_PATH,
    Base,
    ContextFile,
    ImageFacts,
    Manifest,
    PatchFacts,
    UpstreamFacts,
    describe,
    manifest_bytes,
    queue_scan_waivers,
    source_labels,
)
from sglforge.requests import BuildRequest, check_mode
from sglforge.targets import BuildTarget
from sglforge.util import atomic_write, plural, sha256_bytes, work_dir

if TYPE_CHECKING:
    from sglforge.engine.images import BuildStep, ImageInfo
    from sglforge.patches.apply import Applied
    from sglforge.queue.configs import BaseTables

SOURCE_KINDS = frozenset({"aot-kernel", "build"})
OVERLAY_TEMPLATE = Path("images") / "overlay.Dockerfile"
UPSTREAM_DOCKERFILE = "docker/rocm.Dockerfile"
# Fixed file times in the build context (2000-01-01, the date sglforge's own commits carry):
# the same inputs give the same layer bytes. The base's stale .pyc files are not used: they
# record the original source's mtime and size (or hash), which the patched file does not match.
MTIME = 946684800

_PLACEHOLDER = re.compile(r"\{\{([A-Z_]+)\}\}")


class PatchLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...


class WorkspaceSource(StrEnum):
    """How a plan knows where the sglang checkout lives in the image."""

    INSPECTED = "inspected"  # the base's editable checkout: the repository's layout
    SITE_PACKAGES = "inspected-site-packages"  # a regular install: python/sglang/... only
    ASSUMED = "assumed"  # targets.toml's workspace, before inspection (dry run, source mode)

    @property
    def inspected(self) -> bool:
        """True when the base was inspected (not assumed from targets.toml)."""
        return self is not WorkspaceSource.ASSUMED


@dataclass(frozen=True)
class Status:
    """A progress event: what the build is doing now."""

    message: str


@dataclass(frozen=True)
class OciBuild:
    """The overlay image as its inputs give it: the base as its registry holds it, the
    image's blobs, and the fixed time its files and config carry."""

    base: oci.BaseImage
    image: oci.OverlayImage
    epoch: int

    def to_dict(self) -> dict[str, object]:
        """What ``build --json`` shows: the digests and how to recompute them."""
        return {
            "digest": self.image.digest,
            "config": self.image.config_digest,
            "layer": self.image.layer.digest,
            "diff_id": self.image.layer.diff_id,
            "layer_size": self.image.layer.size,
            "media_type": self.image.media_type,
            "base": f"{self.base.name}@{self.base.digest}",
            "base_size": self.base.size,
            "source_date_epoch": self.epoch,
            "zlib": oci.ZLIB_VERSION,
            "recompute": "sglforge build --dry-run --json (no engine, no pull)",
        }


@dataclass(frozen=True)
class BuildPlan:
    """Everything a build will do, computed without touching the engine."""

    target: BuildTarget
    version: str
    mode: str
    mode_reason: str
    base: Base
    workspace: str
    workspace_source: WorkspaceSource
    upstream: UpstreamFacts
    queue_hash: str
    patches: tuple[PatchFacts, ...]
    changed_files: tuple[str, ...]
    files: tuple[ContextFile, ...]
    deleted: tuple[str, ...]  # image paths the queue deletes
    skipped: tuple[str, ...]  # repository paths with no place in the image
    image: str
    tags: tuple[str, ...]
    labels: Mapping[str, str]
    dockerfile: str
    manifest: Manifest
    inputs_key: str | None  # None until the base is known
    build_args: Mapping[str, str] = field(default_factory=dict)
    context_dir: Path | None = None  # source mode: the patched worktree
    # the base's aiter tables when staging the config items probed them (the gates reuse them)
    base_tables: BaseTables | None = None
    # the overlay written as an OCI image over the base's registry manifest (issue 43); None
    # when the base is known to no registry (the engine's classic builder makes it then)
    oci: OciBuild | None = None


@dataclass(frozen=True)
class BuildResult:
    """The outcome of ``build_image``."""

    image: str
    id: str | None
    digest: str | None
    mode: str
    mode_reason: str
    up_to_date: bool
    changed_files: tuple[str, ...]
    tags: tuple[str, ...]
    labels: Mapping[str, str]
    base: str
    base_digest: str | None
    log_path: Path | None
    dry_run: bool
    plan: BuildPlan
    seconds: float = 0.0


BuildProgress = Callable[["Status | BuildStep"], None]  # phases and engine build steps


# --- planning (pure) --------------------------------------------------------------------------


def choose_mode(requested: str, patches: Sequence[PatchLike]) -> tuple[str, str]:
    """The build mode and why: ``auto`` picks source when a patch needs compiling."""
    check_mode(requested)
    needs_source = [p for p in patches if p.kind in SOURCE_KINDS]
    if requested == "source":
        return "source", "--mode source was given"
    if requested == "overlay":
        if needs_source:
            p = needs_source[0]
            raise ConfigError(
                f"{p.name} is a {p.kind} patch: an overlay cannot rebuild what it changes",
                "sglforge build --mode source (or --mode auto)",
            )
        return "overlay", "--mode overlay was given"
    if needs_source:
        p = needs_source[0]
        more = f" (and {len(needs_source) - 1} more)" if len(needs_source) > 1 else ""
        return "source", f"{p.name} is a {p.kind} patch{more}: compiled code must be rebuilt"
    kinds = sorted({p.kind for p in patches})
    if not patches:
        return "overlay", "the queue is empty: the release image plus provenance"
    return "overlay", (
        f"all {plural(len(patches), 'patch', 'es')} are {'/'.join(kinds)} kind: "
        "replacing files in the release image is enough"
    )


def workspace_of(package_path: str | None, default: str) -> tuple[str, WorkspaceSource]:
    """Where the sglang checkout lives in the image: from the package path, else ``default``."""
    if package_path:
        p = PurePosixPath(package_path)
        if p.parts[-2:] == ("python", "sglang"):
            return str(p.parent.parent), WorkspaceSource.INSPECTED
        # A regular (non-editable) install: only python/sglang/... has a place.
        return str(p.parent), WorkspaceSource.SITE_PACKAGES
    return default, WorkspaceSource.ASSUMED


def dest_for(repo_path: str, workspace: str, workspace_source: WorkspaceSource) -> str | None:
    """Image path of repository path ``repo_path``; None when it has no place in the image."""
    if workspace_source == WorkspaceSource.SITE_PACKAGES:
        if repo_path.startswith("python/sglang/"):
            return f"{workspace}/{repo_path.removeprefix('python/')}"
        return None
    return f"{workspace.rstrip('/')}/{repo_path}"


def version_of(ref: str) -> str | None:
    """The release version a tag names: ``v0.5.14`` -> ``0.5.14``."""
    m = re.fullmatch(r"(?:.*/)?v?(\d+(?:\.\d+)+(?:(?:\.?post|rc|a|b)\d+)?)", ref)
    return m.group(1) if m else None


def scan_files(
    worktree: Path, changed: Iterable[str], workspace: str, workspace_source: WorkspaceSource
) -> tuple[tuple[ContextFile, ...], tuple[str, ...], tuple[str, ...]]:
    """The changed files as they are in the patched tree: (files, deleted dests, skipped)."""
    files: list[ContextFile] = []
    deleted: list[str] = []
    skipped: list[str] = []
    for rel in sorted(set(changed)):
        dest = dest_for(rel, workspace, workspace_source)
        if dest is None:
            skipped.append(rel)
            continue
        path = worktree / rel
        if path.is_symlink():
            target = os.readlink(path)
            files.append(ContextFile(rel, dest, 0, sha256_bytes(target.encode()), 0o777, target))
        elif path.is_file():
            data = path.read_bytes()
            mode = 0o755 if path.stat().st_mode & stat.S_IXUSR else 0o644
            files.append(ContextFile(rel, dest, len(data), sha256_bytes(data), mode))
        elif not path.exists():
            deleted.append(dest)
        else:
            skipped.append(rel)
    return tuple(files), tuple(deleted), tuple(skipped)


def render_overlay_dockerfile(
    template: str,
    base: str,
    target: BuildTarget,
    deleted: Sequence[str],
    labels: Mapping[str, str] | None = None,
    entrypoint: Sequence[str] = (),
    cmd: Sequence[str] | None = None,
) -> str:
    """The overlay Dockerfile for ``base`` and ``target`` from ``images/overlay.Dockerfile``.

    Without ``labels`` the LABEL block is left out: that text is what the inputs key hashes.
    A base ``entrypoint`` is reset at the end, whatever the template says (and the base's
    ``cmd`` restated, as an ENTRYPOINT instruction clears the inherited CMD).
    """
    env = target.env
    env_lines = (
        "ENV " + " \\\n    ".join(f"{k}={json.dumps(v)}" for k, v in env.items())
        if env
        else "# (no runtime defaults for this target)"
    )
    delete = ""
    if deleted:
        # A layer cannot delete through COPY; a RUN adds whiteouts only (a few bytes). The
        # exec (JSON) form hands each name to rm as it is: no shell reads quotes, spaces,
        # "$" or UTF-8 in a file name (a shell would take JSON's \u00e9 literally).
        argv = ["rm", "-f", "--", *sorted(deleted)]
        delete = f"# Files the queue deletes.\nRUN {json.dumps(argv, ensure_ascii=False)}\n"
    values = {
        "BASE": base,
        "LABELS": _label_instruction(labels) if labels else "",
        "DELETE": delete,
        "ENV": env_lines,
        "TARGET": target.key,
        "GPU_ARCH": target.gpu_arch,
        "ROCM": target.rocm.name,
    }

    def sub(m: re.Match[str]) -> str:
        if m.group(1) not in values:
            raise ConfigError(
                f"{OVERLAY_TEMPLATE}: unknown placeholder {{{{{m.group(1)}}}}} "
                f"(known: {', '.join(sorted(values))})",
                f"fix {OVERLAY_TEMPLATE}",
            )
        return values[m.group(1)]

    text = _PLACEHOLDER.sub(sub, template)
    if entrypoint:
        shown = json.dumps(list(entrypoint), ensure_ascii=False)
        text = text.rstrip("\n") + (
            f"\n\n# The base sets ENTRYPOINT {shown}; release images have none, and the run line"
            "\n# (docker run IMAGE python3 -m sglang.launch_server ...) must run the server."
            "\n# Reset here, and recorded in the label "
            + LABEL_ENTRYPOINT_RESET
            + ".\nENTRYPOINT []\n"
        )
        if cmd:
            text += f"CMD {json.dumps(list(cmd), ensure_ascii=False)}\n"
    return text


def _label_instruction(labels: Mapping[str, str]) -> str:
    # Double-quoted values take JSON escapes; "$" would be expanded by the builder.
    def q(text: str) -> str:
        return json.dumps(text).replace("$", "\\$")

    return "LABEL " + " \\\n      ".join(f"{q(k)}={q(v)}" for k, v in sorted(labels.items()))


def fork_labels(root: Path, configured_source: str = "") -> dict[str, str]:
    """``org.opencontainers.image.source``/``.revision`` naming the project's own repository
    (``[image] source``, else the checkout's git remote) and its HEAD commit, when known."""
    from sglforge import git

    url, commit = git.checkout_facts(root)
    return source_labels(configured_source or (str(url) if url else None), commit)


@dataclass(frozen=True)
class PlanInputs:
    """What a plan is made from besides the image's facts: the patched tree and the asks."""

    worktree: Path  # the patched tree (the queue's worktree)
    changed_files: tuple[str, ...]  # repository paths the queue changes
    mode_reason: str = ""
    template: str = ""  # the overlay Dockerfile template (overlay mode)
    tags: tuple[str, ...] = ()
    extra_labels: Mapping[str, str] = field(default_factory=dict)
    created: str | None = None  # the creation label (None: now)


@dataclass(frozen=True)
class _Layout:
    """Where a build's files go and what builds them: one overlay or source layout."""

    base: Base
    workspace: str
    workspace_source: WorkspaceSource
    files: tuple[ContextFile, ...]
    deleted: tuple[str, ...]
    skipped: tuple[str, ...]
    render: Callable[[Mapping[str, str] | None], str]  # the Dockerfile, given its labels
    key_dockerfile: str  # what the inputs key hashes of the Dockerfile (and build arguments)
    build_args: Mapping[str, str] = field(default_factory=dict)
    context_dir: Path | None = None


def plan_build(facts: ImageFacts, given: PlanInputs) -> BuildPlan:
    """The plan of a build, computed without the engine; ``facts.mode`` is overlay or source.

    Overlay: the release image ``facts.base`` plus the changed files, placed where the base's
    sglang lives (``base.package_path`` once inspected). Source: upstream's
    ``docker/rocm.Dockerfile`` on the patched tree, told to copy it (``BRANCH_TYPE=local``).
    Both share the image name, the manifest, the labels and the inputs key.
    """
    if facts.mode == "overlay":
        layout = _overlay_layout(facts, given)
    elif facts.mode == "source":
        layout = _source_layout(facts, given)
    else:
        choose_mode(facts.mode, ())  # raises the ConfigError naming the known modes
        raise AssertionError(facts.mode)
    image, manifest, key, labels = describe(
        facts,
        files=layout.files,
        deleted=layout.deleted,
        key_dockerfile=layout.key_dockerfile,
        created=given.created or oci.rfc3339(source_date_epoch()),
        extra_labels=given.extra_labels,
    )
    return BuildPlan(
        target=facts.target,
        version=facts.version,
        mode=facts.mode,
        mode_reason=given.mode_reason,
        base=layout.base,
        workspace=layout.workspace,
        workspace_source=layout.workspace_source,
        upstream=facts.upstream,
        queue_hash=facts.queue_hash,
        patches=facts.patches,
        changed_files=given.changed_files,
        files=layout.files,
        deleted=layout.deleted,
        skipped=layout.skipped,
        image=image,
        tags=given.tags,
        labels=labels,
        dockerfile=layout.render(labels),
        manifest=manifest,
        inputs_key=key,
        build_args=layout.build_args,
        context_dir=layout.context_dir,
    )


def _overlay_layout(facts: ImageFacts, given: PlanInputs) -> _Layout:
    base, target = facts.base, facts.target
    assert base is not None, "an overlay needs its base"
    from_ref = bases.from_reference(base)
    workspace, ws_source = workspace_of(base.package_path, target.workspace)
    files, deleted, skipped = scan_files(given.worktree, given.changed_files, workspace, ws_source)

    def render(labels: Mapping[str, str] | None) -> str:
        return render_overlay_dockerfile(
            given.template, from_ref, target, deleted, labels, base.entrypoint, base.cmd
        )

    return _Layout(base, workspace, ws_source, files, deleted, skipped, render, render(None))


def _source_layout(facts: ImageFacts, given: PlanInputs) -> _Layout:
    target, worktree = facts.target, given.worktree
    dockerfile_path = worktree / UPSTREAM_DOCKERFILE
    if not dockerfile_path.is_file():
        raise BuildError(
            f"{dockerfile_path}: upstream's ROCm Dockerfile is not in the patched tree "
            "(a PyPI-built upstream holds python/ only)",
            "pass --upstream with a git clone of sglang, or use --mode overlay",
        )
    upstream_dockerfile = dockerfile_path.read_text()
    workspace, ws_source = target.workspace, WorkspaceSource.ASSUMED
    files, deleted, _ = scan_files(worktree, given.changed_files, workspace, ws_source)
    build_args = {
        # The Dockerfile's local-source path copies the build context instead of cloning.
        "BRANCH_TYPE": "local",
        "GPU_ARCH": target.source_gpu_arch,
        "SGL_BRANCH": facts.upstream.ref,
        # The context's .git points outside it; setuptools_scm needs the version given.
        "SETUPTOOLS_SCM_PRETEND_VERSION": facts.version,
    }
    return _Layout(
        base=Base(ref=f"{UPSTREAM_DOCKERFILE} (GPU_ARCH={target.source_gpu_arch})"),
        workspace=workspace,
        workspace_source=ws_source,
        files=files,
        deleted=deleted,
        skipped=(),
        render=lambda _labels: upstream_dockerfile,
        key_dockerfile=upstream_dockerfile + json.dumps(build_args, sort_keys=True),
        build_args=build_args,
        context_dir=worktree,
    )


def context_tar(plan: BuildPlan, worktree: Path) -> bytes:
    """The overlay build context: Dockerfile, ``overlay/<image path>`` files, the manifest.

    Entries are sorted, owned by root, dated ``MTIME``: the same plan gives the same bytes.
    Directories get mode 0755, the mode release images give theirs.
    """
    buf = io.BytesIO()
    entries: dict[str, tuple[bytes | None, int, str | None]] = {}
    for f in plan.files:
        data = None if f.link else (worktree / f.path).read_bytes()
        if data is not None and sha256_bytes(data) != f.sha256:
            raise BuildError(
                f"{worktree / f.path} changed while building",
                "rerun `sglforge build` once nothing else writes to the worktree",
            )
        entries["overlay" + f.dest] = (data, f.mode, f.link)
    entries["overlay" + MANIFEST_PATH] = (manifest_bytes(plan.manifest), 0o644, None)
    dirs: set[str] = set()
    for name in entries:
        parent = PurePosixPath(name).parent
        while str(parent) not in (".", ""):
            dirs.add(str(parent))
            parent = parent.parent
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dockerfile = plan.dockerfile.encode()
        info = oci.tar_info("Dockerfile", tarfile.REGTYPE, 0o644, MTIME, len(dockerfile))
        tar.addfile(info, io.BytesIO(dockerfile))
        for d in sorted(dirs):
            tar.addfile(oci.tar_info(d, tarfile.DIRTYPE, 0o755, MTIME))
        for name in sorted(entries):
            data, mode, link = entries[name]
            if link is not None:
                info = oci.tar_info(name, tarfile.SYMTYPE, 0o777, MTIME)
                info.linkname = link
                tar.addfile(info)
            else:
                assert data is not None
                info = oci.tar_info(name, tarfile.REGTYPE, mode, MTIME, len(data))
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def buildx_command(plan: BuildPlan, docker: str = "docker") -> list[str]:
    """The ``docker buildx build`` command line of a source-mode plan."""
    assert plan.context_dir is not None
    cmd = [
        docker,
        "buildx",
        "build",
        "--file",
        str(plan.context_dir / UPSTREAM_DOCKERFILE),
        "--progress",
        "plain",
        "--load",
    ]
    for k, v in sorted(plan.build_args.items()):
        cmd += ["--build-arg", f"{k}={v}"]
    for k, v in sorted(plan.labels.items()):
        cmd += ["--label", f"{k}={v}"]
    for t in (plan.image, *plan.tags):
        cmd += ["--tag", t]
    cmd.append(str(plan.context_dir))
    return cmd


# --- the build -------------------------------------------------------------------------------


def build_image(
    project: Project, req: BuildRequest, progress: BuildProgress | None = None
) -> BuildResult:
    """Apply the queue and build (or, with ``req.dry_run``, plan) the image ``req`` asks for.

    The queue is read once (``project.queue``), the target comes resolved in the request. The
    steps: the base checked (before any work: a base tag never published is a lost day), the
    queue applied, ``_facts`` (what the image is made of), then ``plan_build`` and the
    overlay or source build.
    """
    from sglforge.patches.apply import apply_queue

    started = time.monotonic()
    say = _sayer(progress)
    root, queue = project.root, project.queue
    chosen, reason = choose_mode(req.mode, queue.patches)
    the_ref = req.ref or queue.pin.ref
    version = version_of(the_ref)
    base: Base | None = None
    if chosen == "overlay" and version is not None:
        base = _base_for(req, version, say)
    say(f"applying the patch queue at {the_ref}")
    applied = apply_queue(project, ref=req.ref)
    facts, given = _facts(project, req, applied, chosen, reason)
    if chosen == "source":
        plan = plan_build(facts, given)
        if req.dry_run:
            return _result(plan, None, dry_run=True, started=started)
        return _build_source(
            _Build(root, plan, applied.worktree, say, progress, started, req.labels)
        )
    base = base or _base_for(req, facts.version, say)
    plan = _overlay_plan(project, req, facts, given, base, say)
    if req.dry_run:
        return _result(plan, None, dry_run=True, started=started)
    return _build_overlay(_Build(root, plan, applied.worktree, say, progress, started, req.labels))


def _facts(
    project: Project, req: BuildRequest, applied: Applied, mode: str, reason: str
) -> tuple[ImageFacts, PlanInputs]:
    """What the image is made of (the queue at the applied ref, on the request's target) and
    what its plan starts from (the worktree, the tags and labels)."""
    queue = project.queue
    version = version_of(req.ref or queue.pin.ref) or applied.version
    if version is None:
        raise ConfigError(
            f"upstream ref {applied.ref!r} names no release version, so no base image fits",
            'pin a release tag in patches/upstream.toml (ref = "v0.5.14") or pass --ref',
        )
    source = project.upstream.source  # derived once, when the project opened it
    wheel, wheel_sha = _wheel_facts(source, version) if applied.python_only else ("", "")
    up = UpstreamFacts(
        url=queue.pin.url,
        source=source,
        ref=applied.ref,
        commit=applied.commit,
        revision=applied.revision(queue.pin),
        wheel=wheel,
        wheel_sha256=wheel_sha,
    )
    facts = ImageFacts(
        version=version,
        target=req.target,
        mode=mode,
        base=None,  # an overlay's, once inspected (_overlay_plan)
        upstream=up,
        queue_hash=queue.hash,
        patches=tuple(PatchFacts.of(p) for p in queue.patches),
        scan_waivers=queue_scan_waivers(queue.patches),
    )
    given = PlanInputs(
        worktree=applied.worktree,
        changed_files=tuple(applied.changed_files),
        mode_reason=reason,
        template=_overlay_template(project.root) if mode == "overlay" else "",
        tags=req.tags,
        # Image labels only (the build's containers get ``req.labels``): --label wins.
        extra_labels={**fork_labels(project.root, req.target.source), **req.labels},
    )
    return facts, given


def _overlay_plan(
    project: Project,
    req: BuildRequest,
    facts: ImageFacts,
    given: PlanInputs,
    base: Base,
    say: Callable[[str], None],
) -> BuildPlan:
    """The overlay's plan on the inspected base, with the queue's config items staged where
    the base's aiter merges them (``sglforge.overlay_configs``)."""
    root, version, labels = project.root, facts.version, req.labels
    if req.dry_run:
        base = bases.dry_run_base(root, base, version, labels, req.offline)
    else:
        base = bases.inspect_base(root, base, version, labels)
    configs = project.queue.configs
    base_ref = bases.from_reference(base)  # by digest: the aiter tables kept for it
    if not configs or (req.dry_run and not _tables_known(base_ref)):
        return _with_oci(plan_build(replace(facts, base=base), given), given.worktree, req, say)
    from sglforge import overlay_configs

    staged = overlay_configs.stage(root, configs, base_ref, version, req.target.name, labels, say)
    extra = {**staged.labels, **given.extra_labels}
    plan = plan_build(replace(facts, base=base), replace(given, extra_labels=extra))
    plan = replace(plan, base_tables=staged.tables)
    if staged.files:
        # The staged files join the context and the items the manifest.
        manifest: Manifest = {**plan.manifest, "configs": [dict(e) for e in staged.manifest]}
        plan = replace(plan, files=plan.files + staged.files, manifest=manifest)
    return _with_oci(plan, given.worktree, req, say)


def _tables_known(base_ref: str) -> bool:
    """Whether the base's aiter tables are kept by its digest (a dry run starts no probe)."""
    digest = base_ref.rpartition("@")[2] if "@sha256:" in base_ref else None
    return bases.cached_facts(digest, "aiter") is not None


def _with_oci(
    plan: BuildPlan, worktree: Path, req: BuildRequest, say: Callable[[str], None]
) -> BuildPlan:
    """``plan`` with its overlay written as an OCI image over the base's registry manifest
    (read by digest, or from the cache kept by it); unchanged when the base is in no
    registry (or, ``--offline``, not cached), or not inspected (its sglang's place unknown)."""
    from sglforge.images import registry as oreg

    base = plan.base
    if not (base.digest and base.digest.startswith("sha256:") and base.package_path):
        return plan
    try:
        ref = bases.from_reference(base)
        found = oreg.read_base(ref, bases.login_for(ref), offline=req.offline)
    except (SglforgeError, oci.ImageFormatError) as exc:
        say(f"{base.ref}: its registry did not give its manifest ({exc}); the engine builds")
        return plan
    epoch = source_date_epoch()
    image = oci.overlay_image(
        found, _layer_files(plan, worktree), plan.deleted, _config_change(plan, epoch), epoch
    )
    return replace(plan, oci=OciBuild(found, image, epoch))


def _layer_files(plan: BuildPlan, worktree: Path) -> list[oci.LayerFile]:
    """The overlay layer's files: the changed files as the patched tree holds them (checked
    against the plan) and ``/opt/sglforge/manifest.json``; the context's, without ``overlay/``."""
    files: list[oci.LayerFile] = []
    for f in plan.files:
        if f.link is not None:
            files.append(oci.LayerFile(f.dest, link=f.link))
            continue
        data = (worktree / f.path).read_bytes()
        if sha256_bytes(data) != f.sha256:
            raise BuildError(
                f"{worktree / f.path} changed while building",
                "rerun `sglforge build` once nothing else writes to the worktree",
            )
        files.append(oci.LayerFile(f.dest, data, f.mode))
    files.append(oci.LayerFile(MANIFEST_PATH, manifest_bytes(plan.manifest)))
    return files


def _config_change(plan: BuildPlan, epoch: int) -> oci.ConfigChange:
    """What ``images/overlay.Dockerfile`` changes in the base's config, said as data."""
    return oci.ConfigChange(
        labels=dict(plan.labels),
        env=dict(plan.target.env),
        created=oci.rfc3339(epoch),
        entrypoint_reset=bool(plan.base.entrypoint),
        created_by=f"sglforge overlay: {plural(len(plan.files) + 1, 'file')}, "
        f"{plural(len(plan.deleted), 'deletion')}",
    )


def _base_for(req: BuildRequest, version: str, say: Callable[[str], None]) -> Base:
    """The base the request names (or the target's), checked against the registry unless this
    is a dry run."""
    base = Base(ref=bases.base_ref(req.target, version, req.base_image))
    if req.dry_run:
        return base
    say(f"checking base image {base.ref}")
    return bases.check_base(base, req.target, req.offline, say)


def _already_built(plan: BuildPlan, started: float) -> BuildResult | None:
    """The result for an image already built from the same inputs (retagged), else None."""
    from sglforge.engine import images as eng

    existing = eng.inspect(plan.image)
    if existing is None:
        return None
    if existing.labels.get(LABEL_INPUTS) != plan.inputs_key:
        # The tag names its inputs: another image under it was not built from them (made by
        # hand, or by another tool). An immutable tag is never re-pointed.
        raise BuildError(
            f"{plan.image} already names {existing.id} in the local engine, built from other "
            f"inputs (io.sglforge.inputs {existing.labels.get(LABEL_INPUTS) or 'missing'}, "
            f"this build's {plan.inputs_key}): an immutable tag is never re-pointed",
            f"remove it if it is wrong: docker rmi {plan.image}",
        )
    if plan.oci is not None and existing.id != plan.oci.image.config_digest:
        return None  # the same inputs built by the engine before: the reproducible one replaces it
    _retag(existing.id, plan.tags)
    return _result(
        replace(plan, labels=dict(existing.labels)), existing, up_to_date=True, started=started
    )


@dataclass(frozen=True)
class _Build:
    """One engine build of ``plan`` from ``worktree``: how it reports, when it started, and
    the labels its probe containers carry (the request's)."""

    root: Path
    plan: BuildPlan
    worktree: Path
    say: Callable[[str], None]
    progress: BuildProgress | None
    started: float
    labels: Mapping[str, str] | None = None

    def steps(self) -> Callable[[BuildStep], None] | None:
        """Where the engine's step reports go (the build's progress, when it has one)."""
        progress = self.progress
        return (lambda s: progress(s)) if progress else None


def _engine_build(
    b: _Build, make: Callable[[Path], tuple[ImageInfo | None, str | None]]
) -> BuildResult:
    """What both builds share: an image already built from the same inputs is reused;
    otherwise ``make`` builds it into a log and returns (its facts, its ID), and the self-check
    proves the image imports the patched files."""
    done = _already_built(b.plan, b.started)
    if done is not None:
        return done
    log_path = _log_path(b.root, b.plan)
    info, image_id = make(log_path)
    _self_check(b.plan, b.worktree, b.say, b.labels)
    return _result(b.plan, info, log_path=log_path, started=b.started, image_id=image_id)


def _build_overlay(b: _Build) -> BuildResult:
    from sglforge.engine import images as eng

    plan = b.plan
    built = plan.oci
    if built is not None:
        return _engine_build(b, lambda log_path: _load_oci(b, built, log_path))

    def make(log_path: Path) -> tuple[ImageInfo | None, str | None]:
        context = context_tar(plan, b.worktree)
        b.say(f"building {plan.image} ({len(plan.files)} file(s), {len(context)} bytes of context)")
        image_id = eng.build(context, plan.image, log_path, progress=b.steps())
        _retag(image_id, plan.tags)  # the self-check removes every tag if it fails
        return eng.inspect(plan.image), image_id

    return _engine_build(b, make)


def _load_oci(b: _Build, built: OciBuild, log_path: Path) -> tuple[ImageInfo | None, str]:
    """The OCI overlay loaded into the engine (for the self-check and the smoke): an archive
    of its config and layer only, over the base pulled by digest when the engine lacks it.
    The engine's image ID is then the config's digest, the image what a registry serves."""
    from sglforge.engine import images as eng

    plan, image = b.plan, built.image
    base_ref = bases.from_reference(plan.base)
    if eng.inspect(base_ref) is None:
        b.say(f"pulling {base_ref} (the engine runs the image over it)")
        eng.pull(f"{built.base.name}@{plan.base.digest}")
    b.say(
        f"loading {plan.image} ({image.digest}: {len(plan.files)} file(s), "
        f"{image.layer.size} bytes of layer) into the engine"
    )
    eng.load(oci.docker_archive(image, [plan.image], built.epoch), plan.image)
    atomic_write(log_path, json.dumps(built.to_dict(), indent=2) + "\n")
    _retag(image.config_digest, plan.tags)  # the self-check removes every tag if it fails
    return eng.inspect(plan.image), image.config_digest


def _self_check(
    plan: BuildPlan, worktree: Path, say: Callable[[str], None], labels: Mapping[str, str] | None
) -> None:
    """Prove the image imports the patched files (from its WORKDIR and from /); else remove it
    and raise BuildError (exit 6) naming the file."""
    from sglforge import selfcheck
    from sglforge.engine import images as eng

    gone = set(plan.deleted)
    files = [(f.path, f.dest, f.sha256) for f in plan.files if f.link is None]
    deleted = [
        (p, d)
        for p in plan.changed_files
        if (d := dest_for(p, plan.workspace, plan.workspace_source)) is not None and d in gone
    ]
    expected = selfcheck.expectations(files, deleted, worktree)
    say(f"self-check: {plural(len(expected), 'file')} must resolve where Python imports them")
    found = selfcheck.run(plan.image, expected, labels=labels)
    if found:
        for ref in (plan.image, *plan.tags):
            eng.remove(ref)
        raise selfcheck.failure(plan.image, found)


def _build_source(b: _Build) -> BuildResult:
    from sglforge.engine import images as eng

    plan = b.plan

    def make(log_path: Path) -> tuple[ImageInfo | None, str | None]:
        b.say(f"building {plan.image} from source with docker buildx (log: {log_path})")
        info = eng.buildx(buildx_command(plan)[1:], plan.image, log_path, progress=b.steps())
        # The self-check catches a Dockerfile that ignores BRANCH_TYPE=local and clones
        # upstream instead.
        return info, None

    return _engine_build(b, make)


def _wheel_facts(source: str, version: str | None) -> tuple[str, str]:
    """(file name, sha256) of the released wheel a pypi: tree was taken from: it is cached
    already (the history was built from it), and checked against the index's sha256."""
    import hashlib

    from sglforge import cache, pypi

    parsed = pypi.parse_source(source)
    if parsed is None or version is None:
        return "", ""
    path = pypi.wheel(cache.pypi_cache(), parsed[0], version)
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return path.name, h.hexdigest()


def _retag(image_id: str, tags: Iterable[str]) -> None:
    from sglforge.engine import images as eng

    for t in tags:
        eng.tag(image_id, t)


def _result(
    plan: BuildPlan,
    info: ImageInfo | None,
    *,
    started: float,
    up_to_date: bool = False,
    log_path: Path | None = None,
    dry_run: bool = False,
    image_id: str | None = None,
) -> BuildResult:
    return BuildResult(
        image=plan.image,
        id=(info.id if info is not None else image_id),
        digest=(info.digest if info is not None else None),
        mode=plan.mode,
        mode_reason=plan.mode_reason,
        up_to_date=up_to_date,
        changed_files=plan.changed_files,
        tags=(plan.image, *plan.tags),
        labels=dict(plan.labels),
        base=plan.base.ref,
        base_digest=plan.base.pinned,
        log_path=log_path,
        dry_run=dry_run,
        plan=plan,
        seconds=round(time.monotonic() - started, 3),
    )


def _log_path(root: Path, plan: BuildPlan) -> Path:
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", plan.image.rpartition(":")[2])
    # The pid keeps two builds started in the same second from sharing a log.
    return work_dir(root, "logs") / f"build-{name}-{stamp}-{os.getpid()}.log"


def _overlay_template(root: Path) -> str:
    from sglforge.defaults import project_file

    path = project_file(root, OVERLAY_TEMPLATE)  # the project's own, else the shipped one
    try:
        return path.read_text()
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: the overlay Dockerfile is missing (and none ships with this install)",
            "sglforge init (lays out images/), or reinstall sglforge",
        ) from None


def _sayer(progress: BuildProgress | None) -> Callable[[str], None]:
    def say(message: str) -> None:
        if progress is not None:
            progress(Status(message))

    return say


SOURCE_DATE_EPOCH = "SOURCE_DATE_EPOCH"


def source_date_epoch() -> int:
    """The time an image's files, config and ``created`` label carry: ``$SOURCE_DATE_EPOCH``
    (reproducible-builds.org) when set to whole seconds, else 0; never the clock, so the same
    inputs give the same image digest on any machine at any time (issue 43)."""
    given = os.environ.get(SOURCE_DATE_EPOCH, "").strip()
    if given:
        if not given.isdigit():
            raise ConfigError(
                f"${SOURCE_DATE_EPOCH}={given!r} is not a whole number of seconds",
                f"unset {SOURCE_DATE_EPOCH}, or set it to e.g. $(git log -1 --format=%ct)",
            )
        return int(given)
    return 0
