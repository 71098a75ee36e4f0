"""``sglforge patches ...``: the patch queue commands."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from sglforge.cli.common import State, json_option, main, pass_state, print_json, table
from sglforge.cli.options import upstream_option
from sglforge.errors import EXIT_PROBLEMS
from sglforge.util import printable


@main.group("patches")
def patches_group() -> None:
    """Inspect, check and maintain the patch queue in patches/."""


@patches_group.command("list")
@json_option
@pass_state
def list_cmd(st: State, as_json: bool) -> None:
    """List the queue: index, file, subject, status, kind, files, lines +/-."""

    q = st.project.queue
    rows: list[dict[str, Any]] = [
        {
            "index": p.index,
            "name": p.name,
            "subject": p.subject,
            "status": p.upstream_status,
            "applies_to": p.applies_to,
            "fixed_in": p.fixed_in,
            "kind": p.kind,
            "files": list(p.files),
            "added": p.added,
            "removed": p.removed,
            "sha256": p.sha256,
        }
        for p in q.patches
    ]
    if as_json:
        print_json(
            {
                "pin": {"url": q.pin.url, "ref": q.pin.ref, "commit": q.pin.commit},
                "hash": q.hash,
                "patches": rows,
                "configs": [_config_row(c) for c in q.configs],
            }
        )
        return
    click.echo(f"upstream {q.pin.url} @ {q.pin.ref}  queue {q.hash[:12]}")
    click.echo(
        table(
            ["#", "file", "subject", "status", "kind", "files", "+/-"],
            [
                [
                    r["index"],
                    r["name"],
                    _cut(r["subject"], 48),
                    _cut(r["status"], 24),
                    r["kind"],
                    len(r["files"]),
                    f"+{r['added']}/-{r['removed']}",
                ]
                for r in rows
            ],
        )
    )
    if q.configs:
        click.echo("config items (patches/configs/):")
        click.echo(
            table(
                ["file", "tool/table", "target", "status", "rows", "applies-to"],
                [
                    [
                        c.csv_file.rsplit("/", 1)[-1],
                        f"{c.tool}/{c.table}",
                        f"{c.target} ({c.gfx})",
                        _cut(c.upstream_status, 24),
                        len(c.rows),
                        c.applies_to or "",
                    ]
                    for c in q.configs
                ],
            )
        )


def _config_row(c: Any) -> dict[str, Any]:
    return {
        "name": c.name,
        "file": c.csv_file,
        "meta": c.meta_file,
        "tool": c.tool,
        "table": c.table,
        "target": c.target,
        "gfx": c.gfx,
        "status": c.upstream_status,
        "origin": c.origin,
        "applies_to": c.applies_to,
        "rows": len(c.rows),
        "covers": list(c.covers),
        "gaps": list(c.gaps),
        "installed_as": c.installed_name,
        "sha256": c.sha256,
    }


def _cut(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "~"


@patches_group.command("lint")
@click.option(
    "--aiter-configs",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The base's aiter/configs folder: check config items against its own table.",
)
@click.option(
    "--aiter-repo",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="An aiter clone: check each config item's rows against its upstream commit's file.",
)
@json_option
@pass_state
def lint_cmd(st: State, aiter_configs: Path | None, aiter_repo: Path | None, as_json: bool) -> None:
    """Check series vs files, metadata and diffs; every finding names file and line.

    Config items (patches/configs/) are checked too: metadata, columns, keys duplicated
    within our files, their bytes against the recorded sha256 of the upstream file they copy;
    with --aiter-configs also against the base's own table; with --aiter-repo against the
    upstream commit's file itself.

    \b
    Example:
      docker cp $(docker create IMAGE):/sgl-workspace/aiter/aiter/configs build/aiter-configs
      sglforge patches lint --aiter-configs build/aiter-configs
      git clone https://github.com/ROCm/aiter build/aiter
      git -C build/aiter fetch origin pull/4344/head
      sglforge patches lint --aiter-repo build/aiter
    """
    from sglforge.patches.lint import lint_queue

    findings = lint_queue(st.root, aiter_configs, aiter_repo)
    errors = [f for f in findings if f.severity == "error"]
    if as_json:
        print_json({"ok": not errors, "findings": findings})
    else:
        for f in findings:
            # A finding may quote a patch's subject or lines: untrusted, shown escaped.
            click.echo(printable(f"{f} ({f.severity})" if f.severity != "error" else str(f)))
        warnings = len(findings) - len(errors)
        summary = f"lint: {len(errors)} problem(s)" if errors else "lint: clean"
        click.echo(summary + (f", {warnings} warning(s)" if warnings else ""))
    if errors:
        raise SystemExit(EXIT_PROBLEMS)


@patches_group.command("apply")
@click.option("--ref", help="Upstream ref (default: the pin).")
@upstream_option
@click.option("--force", is_flag=True, help="Discard uncommitted or unexported worktree work.")
@json_option
@pass_state
def apply_cmd(st: State, ref: str | None, upstream: str | None, force: bool, as_json: bool) -> None:
    """Apply the queue in build/worktrees/<ref>, one commit per patch (git am --3way)."""
    from sglforge.patches.apply import apply_queue

    a = apply_queue(st.project, ref=ref, upstream=upstream, force=force)
    if as_json:
        print_json(a)
        return
    click.echo(
        f"{'reused' if a.reused else 'applied'} at {a.ref} ({a.commit[:12]}) in {a.worktree}"
    )
    click.echo(
        table(["patch", "status", "detail"], [[p.name, p.status, p.detail] for p in a.patches])
    )
    if a.python_only:
        click.echo("note: this upstream is built from PyPI wheels and holds python/ only")


@patches_group.command("check")
@click.option("--ref", "refs", multiple=True, help="Upstream ref to check (repeatable).")
@click.option("--tags", metavar="SPEC", help="Also every tag whose version matches SPEC.")
@upstream_option
@click.option("--jobs", type=int, help="Refs checked in parallel (default: CPU count).")
@click.option(
    "--aiter-configs",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The base's aiter/configs folder: report config items it already carries.",
)
@json_option
@pass_state
def check_cmd(
    st: State,
    refs: tuple[str, ...],
    tags: str | None,
    upstream: str | None,
    jobs: int | None,
    aiter_configs: Path | None,
    as_json: bool,
) -> None:
    """Apply the whole series at each ref (no worktree touched) and report a matrix.

    Without --ref or --tags, checks at the pin.

    \b
    Example:
      sglforge patches check --upstream pypi:sglang --tags '>=0.5.10,<=0.5.23'
    """
    from sglforge.patches.check import check_items, check_refs

    report = check_refs(st.project, list(refs), upstream=upstream, tags=tags, jobs=jobs)
    config_rows = check_items(st.root, [r.ref for r in report.refs], aiter_configs)
    if as_json:
        print_json(
            {**asdict(report), "configs": config_rows} if config_rows else report, ok=report.ok
        )
    else:
        names = [p.name for p in report.refs[0].patches] if report.refs else []
        for n, name in enumerate(names, 1):
            click.echo(f"#{n} {name}")
        click.echo(
            table(
                ["ref", "commit"] + [f"#{n}" for n in range(1, len(names) + 1)],
                [[r.ref, r.commit[:12]] + [p.status for p in r.patches] for r in report.refs],
            )
        )
        for r in report.refs:
            for p in r.patches:
                if p.detail and p.status not in ("clean",):
                    click.echo(printable(f"{r.ref} {p.name}: {p.status}: {p.detail}"))
        if report.python_only:
            click.echo("note: upstream built from PyPI wheels: the tree holds python/ only")
        for c in config_rows:
            click.echo(printable(f"{c['ref']} config {c['name']}: {c['status']}: {c['detail']}"))
    if not report.ok:
        raise SystemExit(EXIT_PROBLEMS)


@patches_group.command("refresh")
@click.option("--ref", "new_ref", required=True, help="The new upstream ref to rebase onto.")
@upstream_option
@click.option(
    "--drop-upstreamed",
    is_flag=True,
    help="Retire patches upstream already has to patches/retired/.",
)
@click.option("--dry-run", is_flag=True, help="Report what would change; write nothing.")
@json_option
@pass_state
def refresh_cmd(
    st: State,
    new_ref: str,
    upstream: str | None,
    drop_upstreamed: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Rebase the queue onto NEWREF (3-way) and move the pin; all or nothing."""
    from sglforge.patches.refresh import refresh_queue

    r = refresh_queue(
        st.project, new_ref, upstream=upstream, drop_upstreamed=drop_upstreamed, dry_run=dry_run
    )
    if as_json:
        print_json(r)
    else:
        click.echo(
            table(
                ["patch", "action", "status", "detail"],
                [[p.name, p.action, p.status, "; ".join(p.hunks) or p.detail] for p in r.patches],
            )
        )
        if not r.ok:
            click.echo(
                f"refresh: conflicts at {new_ref}; nothing was changed. Resolve with "
                f"`sglforge patches apply --ref {new_ref}`, edit, `git am --continue`, "
                f"`sglforge patches export --ref {new_ref}`, then refresh again."
            )
        elif r.written:
            click.echo(f"refresh: queue now on {new_ref}")
    if not r.ok:
        raise SystemExit(EXIT_PROBLEMS)


@patches_group.command("export")
@click.option("--ref", help="Worktree ref (default: the pin).")
@json_option
@pass_state
def export_cmd(st: State, ref: str | None, as_json: bool) -> None:
    """Write the worktree branch's commits back to patch files (series order kept)."""
    from sglforge.patches.export import export_queue

    r = export_queue(st.project, ref)
    if as_json:
        print_json(r)
    else:
        click.echo(
            f"export: {len(r.written)} rewritten, {len(r.added)} added, "
            f"{len(r.unchanged)} unchanged"
        )
        for n in r.written:
            click.echo(f"  rewritten {n}")
        for n in r.added:
            click.echo(f"  added     {n}")


@patches_group.command("new")
@click.argument("name")
@click.option("--ref", help="Worktree ref (default: the pin).")
@click.option("-m", "--message", help="Subject line (default: NAME with spaces).")
@json_option
@pass_state
def new_cmd(st: State, name: str, ref: str | None, message: str | None, as_json: bool) -> None:
    """Start patch NAME from the uncommitted changes in the ref's worktree."""
    from sglforge.patches.export import new_patch

    r = new_patch(st.project, name, ref=ref, message=message)
    if as_json:
        print_json(r)
    else:
        for n in r.added:
            click.echo(f"new patch patches/{n} (Upstream-Status: Pending; edit its description)")


@patches_group.command("hash")
@json_option
@pass_state
def hash_cmd(st: State, as_json: bool) -> None:
    """Print the queue fingerprint (pin + series order + patch contents)."""

    q = st.project.queue
    if as_json:
        print_json({"hash": q.hash, "short": q.hash[:8]})
    else:
        click.echo(q.hash)


@patches_group.command("pin")
@upstream_option
@json_option
@pass_state
def pin_cmd(st: State, upstream: str | None, as_json: bool) -> None:
    """Record what the pinned tag resolves to in patches/upstream.toml (comments kept).

    With the pin's own URL this is `commit = ...`; with another shared source (pypi:sglang)
    its tree under [sources]. A local path's facts stay under build/, never in the pin.
    Reading commands (check, build --dry-run, refresh --dry-run) never write the pin.

    \b
    Example:
      sglforge patches pin --upstream pypi:sglang
    """
    from sglforge.patches.upstream import record_pin

    r = record_pin(st.root, upstream)
    if as_json:
        print_json(r)
    else:
        click.echo(f"pin {r['ref']} -> {r['commit'][:12]} ({r['recorded']})")
