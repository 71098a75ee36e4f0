"""``sglforge build``: click code over ``sglforge.build.build_image``."""

from __future__ import annotations

from typing import Any

import click

from sglforge.build import BuildResult, build_image
from sglforge.cli.common import State, json_option, main, pass_state, print_json, table
from sglforge.cli.complete import complete_tags
from sglforge.cli.options import (
    base_image_option,
    label_option,
    mode_option,
    offline_option,
    target_option,
    upstream_option,
)
from sglforge.cli.progress import build_events
from sglforge.progress import current
from sglforge.requests import BuildRequest
from sglforge.util import one_line, plural, printable


@main.command("build")
@target_option
@mode_option
@base_image_option
@upstream_option
@click.option(
    "--ref",
    shell_complete=complete_tags,
    metavar="REF",
    help="Upstream ref to build (default: the pinned tag).",
)
@click.option("--tag", "tags", multiple=True, metavar="T", help="Extra tag (repeatable).")
@label_option
@offline_option
@click.option("--dry-run", is_flag=True, help="Print the plan; needs no Docker engine.")
@json_option
@pass_state
def build_cmd(
    state: State,
    target: str,
    mode: str,
    base_image: str | None,
    upstream: str | None,
    ref: str | None,
    tags: tuple[str, ...],
    labels: dict[str, str],
    offline: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Build the image of the patch queue for a GPU target.

    Applies the queue at the pin (reusing its worktree), then builds an overlay of the
    release image holding only the changed files, or, for compiled patches, a source
    build. The tag is derived from the inputs; the same inputs build nothing.

    \b
    Examples:
      sglforge build --dry-run
      sglforge build --target mi355x
      sglforge build --target mi300x-rocm720 --tag registry.example.com/sglang:glm5
      sglforge build --json
    """
    project = state.project
    req = BuildRequest(
        target=project.target(target),
        mode=mode,
        base_image=base_image,
        ref=ref,
        tags=tags,
        labels=labels,
        offline=offline,
        dry_run=dry_run,
    )
    result = build_image(project, req, build_events(current()))
    if as_json:
        print_json(to_json(result))
    elif dry_run:
        click.echo(printable(render_plan(result), keep="\n"))
    else:
        click.echo(printable(render_result(result), keep="\n"))


def to_json(r: BuildResult) -> dict[str, Any]:
    """The ``--json`` document: the result without the nested plan, plus plan facts."""
    doc: dict[str, Any] = {
        "image": r.image,
        "id": r.id,
        "digest": r.digest,
        "mode": r.mode,
        "mode_reason": r.mode_reason,
        "up_to_date": r.up_to_date,
        "dry_run": r.dry_run,
        "changed_files": list(r.changed_files),
        "tags": list(r.tags),
        "labels": dict(r.labels),
        "base": r.base,
        "base_digest": r.base_digest,
        "log_path": str(r.log_path) if r.log_path else None,
        "seconds": r.seconds,
        "files": [
            {"path": f.path, "dest": f.dest, "size": f.size, "sha256": f.sha256}
            for f in r.plan.files
        ],
        "deleted": list(r.plan.deleted),
        "skipped": list(r.plan.skipped),
        # the overlay's digest as its inputs give it (issue 43); null when the engine builds
        "oci": r.plan.oci.to_dict() if r.plan.oci is not None else None,
    }
    if r.dry_run:
        doc["dockerfile"] = r.plan.dockerfile
        doc["build_args"] = dict(r.plan.build_args)
    return doc


def render_plan(r: BuildResult) -> str:
    """The dry-run plan for people."""
    p = r.plan
    lines = [
        f"image     {p.image}",
        f"target    {p.target.key} ({p.target.gpu_arch}, ROCm {p.target.rocm.version})",
        f"mode      {p.mode}: {p.mode_reason}",
        f"base      {p.base.ref}" + ("" if p.base.pinned else "  (not checked in a dry run)"),
        f"upstream  {p.upstream.source} {p.upstream.ref} ({p.upstream.commit[:12]})",
        f"queue     q{p.queue_hash[:8]}: {plural(len(p.patches), 'patch', 'es')}",
    ]
    if p.tags:
        lines.append("tags      " + ", ".join(one_line(t) for t in p.tags))
    if p.oci is not None:
        lines.append(f"digest    {p.oci.image.digest} (the inputs' image, in any registry)")
    if p.mode == "overlay":
        note = "" if p.workspace_source.inspected else " (assumed until inspected)"
        lines.append(f"workspace {p.workspace}{note}")
        lines += ["", "files that go in:"]
        rows = [(f.path, f.dest, f.size) for f in p.files]
        lines.append(table(["repository path", "image path", "bytes"], rows) if rows else "  none")
        for d in p.deleted:
            lines.append(f"  deleted: {one_line(d)}")
        for s in p.skipped:
            lines.append(f"  not in the image (no place for it): {one_line(s)}")
    else:
        lines += ["", "build arguments:"]
        lines += [f"  {one_line(k)}={one_line(v)}" for k, v in sorted(p.build_args.items())]
    lines += ["", "labels:"]
    lines += [f"  {one_line(k)}={one_line(v)}" for k, v in sorted(p.labels.items())]
    if p.mode == "overlay":
        lines += ["", "Dockerfile:", p.dockerfile.rstrip()]
    return "\n".join(lines)


def render_result(r: BuildResult) -> str:
    """The outcome for people: the image reference and ID (and where the log is)."""
    if r.up_to_date:
        head = f"up to date: {r.image} (same inputs; nothing built)"
    else:
        head = f"built {r.image} ({r.mode}) in {r.seconds:.1f}s"
    digest = r.digest or "(none until pushed)"
    if r.plan.oci is not None:  # the inputs name it: the same in any registry it is pushed to
        digest = f"{r.plan.oci.image.digest} (the inputs'; any registry serves it as this)"
    lines = [head, f"  id      {r.id}", f"  digest  {digest}"]
    lines.append(f"  base    {r.base}" + (f" @ {r.base_digest}" if r.base_digest else ""))
    lines.append(f"  files   {len(r.changed_files)} changed by the queue")
    for t in r.tags[1:]:
        lines.append(f"  tag     {t}")
    if r.log_path:
        lines.append(f"  log     {r.log_path}")
    return "\n".join(lines)
