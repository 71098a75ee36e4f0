"""``sglforge inspect``: click code over ``sglforge.inspect.inspect_image``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from sglforge.cli.common import State, json_option, main, pass_state, print_json, table
from sglforge.errors import ConfigError, SglforgeError
from sglforge.inspect import inspect_image
from sglforge.provenance import MANIFEST_PATH, REQUIRED_LABELS, Provenance
from sglforge.release import bench_line
from sglforge.util import one_line, plural, printable


def _image_argument(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    from sglforge.engine.reference import refuse_credentials

    try:
        refuse_credentials(value, "IMAGE")
    except ConfigError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


@main.command("inspect")
@click.argument("image", callback=_image_argument)
@click.option("--pull", is_flag=True, help="Pull the image from its registry first.")
@json_option
@pass_state
def inspect_cmd(state: State, image: str, pull: bool, as_json: bool) -> None:
    """Show where an image came from: upstream, patches, queue hash, base, smoke figures.

    Reads the image's labels and /opt/sglforge/manifest.json; the smoke figures
    measured when it was published come from the release record under build/releases/
    that has the image's digest (when run inside the checkout that published it).

    \b
    Examples:
      sglforge inspect sglforge/sglang:v0.5.14-rocm700-mi355x-q1a2b3c4d
      sglforge inspect --pull 127.0.0.1:5000/sglforge/sglang:latest-mi355x --json
    """
    try:
        root: Path | None = state.root
    except SglforgeError:
        root = None  # anyone holding an image can inspect it, without a checkout
    prov = inspect_image(image, root=root, pull=pull)
    if as_json:
        print_json(prov_json(prov))
    else:
        click.echo(printable(render_provenance(prov), keep="\n"))


def prov_json(p: Provenance) -> dict[str, Any]:
    """The ``inspect --json`` document."""
    return {
        "image": p.image,
        "id": p.id,
        "repo_digests": list(p.repo_digests),
        "sglforge_image": p.is_sglforge_image,
        "source": {"url": p.source, "revision": p.revision},
        "upstream": {
            "version": p.sglang_version,
            "url": p.upstream_url,
            "source": p.upstream_source,
            "ref": p.upstream_ref,
            "commit": p.upstream_commit,
            "revision": p.upstream_revision,
            "wheel": (
                {"filename": p.upstream_wheel, "sha256": p.upstream_wheel_sha256}
                if p.upstream_wheel
                else None
            ),
        },
        "queue_hash": p.queue_hash,
        "patches": [
            {
                "name": x.name,
                "subject": x.subject,
                "sha256": x.sha256,
                "kind": x.kind,
                "upstream_status": x.upstream_status,
            }
            for x in p.patches
        ],
        "configs": [dict(c) for c in p.configs],
        "target": p.target,
        "rocm": p.rocm,
        "gpu_arch": p.gpu_arch,
        "mode": p.mode,
        "base": {"name": p.base, "digest": p.base_digest},
        "built_by": p.built_by,
        "created": p.created,
        "manifest_found": p.manifest_found,
        "release": p.release,
        "published_at": p.published_at,
        "references": list(p.references),
        "tested": p.tested,
        "smoke": None
        if p.smoke is None
        else {
            "passed": p.smoke.passed,
            "scenario": p.smoke.scenario,
            "verdict": p.smoke.verdict,
            "figures": dict(p.smoke.figures),
            "hardware": p.smoke.hardware,
            "gpus": dict(p.smoke.gpus),
            "bench": p.smoke.bench,
        },
        "local_smoke": None
        if p.local_smoke is None
        else {
            "published": False,
            "passed": p.local_smoke.passed,
            "scenario": p.local_smoke.scenario,
            "verdict": p.local_smoke.verdict,
            "figures": dict(p.local_smoke.figures),
            "report": p.local_smoke_report,
            "started_at": p.local_smoke_at,
        },
        "coverage": None if p.coverage is None else dict(p.coverage),
        "scan_waivers": None if p.scan_waivers is None else [w.to_dict() for w in p.scan_waivers],
        "scan": None if p.scan is None else dict(p.scan),
        "missing_labels": list(p.missing_labels),
        "labels": dict(p.labels),
    }


def _known(value: object) -> str:
    """A field of the image, or ``?`` when its label is missing (not ``( = ) from``: F19)."""
    return str(value) if value else "?"


def render_provenance(p: Provenance) -> str:
    """Provenance for people."""
    if not p.is_sglforge_image:
        return (
            f"{p.image}: not built by sglforge (none of the labels an sglforge image carries, "
            f"such as {', '.join(REQUIRED_LABELS)}, and no {MANIFEST_PATH})"
        )
    lines = []
    if p.missing_labels:
        # Some of our labels and not others: not an image sglforge built as it is (D33).
        lines.append(
            f"labels    INCOMPLETE: missing {', '.join(p.missing_labels)} (an image sglforge "
            "builds carries them all; its provenance below is what the rest says)"
        )
    lines += [
        f"image     {p.image}",
        f"id        {p.id}",
    ]
    lines += [f"digest    {d}" for d in p.repo_digests]
    pinned = (
        f" ({_known(p.upstream_ref)} = {_known(p.upstream_commit[:12])})"
        if p.upstream_ref or p.upstream_commit
        else ""
    )
    lines += [
        f"upstream  sglang {_known(p.sglang_version)}{pinned} from {_known(p.upstream_url)}"
        + (
            f" via {p.upstream_source}"
            if p.upstream_source and p.upstream_source != p.upstream_url
            else ""
        ),
        *(
            [f"wheel     {p.upstream_wheel} sha256:{p.upstream_wheel_sha256}"]
            if p.upstream_wheel
            else []
        ),
        f"source    {p.source or 'unknown'}" + (f" @ {p.revision[:12]}" if p.revision else ""),
        f"target    {_known(p.target)} ({_known(p.gpu_arch)}, {_known(p.rocm)}), "
        f"{_known(p.mode)} build",
        f"base      {_known(p.base)}" + (f" @ {p.base_digest}" if p.base_digest else ""),
        f"queue     {_known(p.queue_hash)} ({plural(len(p.patches), 'patch', 'es')})",
    ]
    # Every field above comes from the image (labels, manifest): one line each, escaped.
    lines = [one_line(x, 1000) for x in lines]
    if not p.manifest_found:
        lines.append("manifest  missing: patch checksums unknown (labels only)")
    if p.patches:
        lines.append("")
        rows = [
            (x.name, x.upstream_status or "-", x.sha256[:16] or "-", x.subject) for x in p.patches
        ]
        lines.append(table(["patch", "upstream status", "sha256", "subject"], rows))
    if p.configs:  # config items (issue 13): the tuned tables the overlay installed
        lines.append("")
        cfg_rows = [
            (
                str(c.get("name", "-")),
                str(c.get("status") or "-"),
                str(c.get("sha256") or "-")[:16],
                str(c.get("installed") or "-"),
            )
            for c in p.configs
        ]
        lines.append(table(["config item", "upstream status", "sha256", "installed"], cfg_rows))
    lines.append(_waivers_line(p))
    lines.append("")
    lines += _release_lines(p)
    if p.coverage is not None:
        lines.append(_coverage_line(p.coverage))
    lines += _scan_lines(p.scan)
    return "\n".join(lines)


def _waivers_line(p: Provenance) -> str:
    """The scan waivers the image records (its queue's ``Fixes-Scan:`` trailers)."""
    if p.scan_waivers is None:
        return "waivers   not recorded (an image built before sglforge recorded scan waivers)"
    if not p.scan_waivers:
        return "waivers   none (no Fixes-Scan: trailer in the queue waives a scan finding)"
    listed = "; ".join(f"{w.finding} by {w.patch} (touches {w.file})" for w in p.scan_waivers)
    return one_line(f"waivers   {len(p.scan_waivers)}: {listed}", 2000)


def _scan_lines(scan: Mapping[str, Any] | None) -> list[str]:
    """The publish scan gate as its release record keeps it: waived and refused trailers."""
    if scan is None:
        return []
    if "not_run" in scan:
        return [one_line(f"scan      not run at publish time: {scan['not_run']}", 1000)]
    waived, refused = scan.get("waived") or [], scan.get("refused") or []
    lines = [f"scan      at publish time: {len(waived)} waived, {len(refused)} trailer(s) refused"]
    lines += [f"  waived  {w['finding']} by {w['patch']} (touches {w['file']})" for w in waived]
    lines += [f"  refused {r['finding']} ({r['patch']}: {r['why']})" for r in refused]
    return [one_line(x, 1000) for x in lines]


def _release_lines(p: Provenance) -> list[str]:
    """The release record's lines: published or not, and what its smoke run said."""
    lines: list[str] = []
    if p.release is None and p.local_smoke is not None:
        s = p.local_smoke
        lines.append("release   none: not published (no release record for this image)")
        lines.append(
            f"smoke     {s.verdict} ({s.scenario}), a local run at {p.local_smoke_at or '?'}, "
            f"NOT published: {p.local_smoke_report}"
        )
        if s.figures:
            figures = [[k, v] for k, v in sorted(s.figures.items())]
            lines += ["", table(["smoke figure (local run)", "value"], figures)]
    elif p.release is None:
        lines.append("release   no release record for this image here (smoke figures unknown)")
    else:
        lines.append(f"release   {p.release}, published {p.published_at}")
        if p.smoke is None:
            lines.append("smoke     UNTESTED (published with --skip-smoke)")
        else:
            state = "passed" if p.smoke.passed else "FAILED"
            said = f": {p.smoke.verdict}" if p.smoke.verdict.lower() != state.lower() else ""
            if p.smoke.standin:
                state += f" on a STAND-IN ({p.smoke.hardware}; not a GPU run)"
            lines.append(f"smoke     {state} ({p.smoke.scenario}){said}")
            if p.smoke.gpus:
                gpus = ", ".join(f"{k} {v}" for k, v in sorted(p.smoke.gpus.items()))
                lines.append(f"gpus      {gpus}")
            if p.smoke.bench:
                lines.append(f"bench     {bench_line(p.smoke.bench)}")
            if p.smoke.figures:
                figures = [[k, v] for k, v in sorted(p.smoke.figures.items())]
                lines += ["", table(["smoke figure (at publish time)", "value"], figures)]
    return lines


def _coverage_line(cov: Mapping[str, Any]) -> str:
    """The publish coverage gate as recorded (docs/aiter-tuned-configs.md, "The publish gate")."""
    if "not_run" in cov:
        return f"coverage  not run at publish time: {cov['not_run']}"
    state = "passed" if cov.get("passed") else "FAILED"
    accepted = len(cov.get("accepted") or ())
    extra = f", {accepted} accepted miss(es)" if accepted else ""
    return f"coverage  {state}: {cov.get('misses', 0)} tuned-table miss(es){extra}"
