"""``sglforge patches ...``: the patch queue commands."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from sglforge.cli import colour
from sglforge.cli.common import State, json_option, main, pass_state, print_json, table
from sglforge.cli.complete import complete_patches, complete_tags
from sglforge.cli.options import upstream_option
from sglforge.errors import EXIT_PROBLEMS
from sglforge.urls import shown
from sglforge.util import plural, printable


@main.group("patches")
def patches_group() -> None:
    """Inspect, check and maintain the patch queue in patches/.

    A patch is named the same way by every command: a bare number (`3`) is its # in
    `patches list`, a zero-padded one (`0003`) the number in its file's name, else its file
    name or slug. Counts have their own option: `push -n 2`, `pop -n 2`.
    """


@patches_group.command("list")
@click.option("--wide", is_flag=True, help="Full subjects and statuses (no cutting to fit).")
@json_option
@pass_state
def list_cmd(st: State, wide: bool, as_json: bool) -> None:
    """List the queue: index, file, subject, status, kind, files, lines +/-.

    The first column is the stack in the pin's worktree, as quilt's `series -v` marks it:
    `=` the top patch, `+` applied below it, `!` stopped on a conflict, `?` in the worktree
    but patches/series changed around it since (`sglforge patches apply` makes it again),
    blank unapplied. The marks are read from the worktree's own history.

    \b
    Examples:
      sglforge patches list
      sglforge patches list --wide      # full subjects (also in --json)
    """
    from sglforge.patches.stack import read_stack

    q = st.project.queue
    stack = read_stack(q)
    states = {e.name: e.state for e in stack.entries}
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
            "state": states.get(p.name, "unapplied"),
        }
        for p in q.patches
    ]
    if as_json:
        print_json(
            {
                "pin": {"url": shown(q.pin.url), "ref": q.pin.ref, "commit": q.pin.commit},
                "hash": q.hash,
                "patches": rows,
                "top": stack.top,
                "applied": list(stack.applied),
                "stale": stack.stale,
                "configs": [_config_row(c) for c in q.configs],
            }
        )
        return
    click.echo(f"upstream {shown(q.pin.url)} @ {q.pin.ref}  queue {q.hash[:12]}")
    click.echo(
        table(
            ["", "#", "file", "subject", "status", "kind", "files", "+/-"],
            [
                [
                    _mark(r["name"], r["state"], stack.top),
                    r["index"],
                    r["name"],
                    _cut(r["subject"], 48, wide),
                    _cut(r["status"], 24, wide),
                    r["kind"],
                    len(r["files"]),
                    f"+{r['added']}/-{r['removed']}",
                ]
                for r in rows
            ],
        )
    )
    if stack.stale:
        click.echo(
            f"worktree {stack.worktree} is stale: patches/series changed under the patches "
            "applied there (renamed, reordered or folded); make it again: "
            "sglforge patches apply"
        )
    _echo_configs(q, wide)


def _echo_configs(q: Any, wide: bool) -> None:
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
                        _cut(c.upstream_status, 24, wide),
                        len(c.rows),
                        c.applies_to or "",
                    ]
                    for c in q.configs
                ],
            )
        )


def _mark(name: str, state: str, top: str | None) -> str:
    if name == top:
        return "="
    return {"applied": "+", "conflict": "!", "stale": "?"}.get(state, "")


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


def _cut(s: str, n: int, wide: bool = False) -> str:
    return s if wide or len(s) <= n else s[: n - 1] + "~"


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
        summary = (
            f"lint: {colour.paint(plural(len(errors), 'problem'), 'bad')}"
            if errors
            else f"lint: {colour.paint('clean', 'good')}"
        )
        click.echo(summary + (f", {plural(warnings, 'warning')}" if warnings else ""))
    if errors:
        raise SystemExit(EXIT_PROBLEMS)


@patches_group.command("apply")
@click.option("--ref", shell_complete=complete_tags, help="Upstream ref (default: the pin).")
@upstream_option
@click.option("--force", is_flag=True, help="Discard uncommitted or unexported worktree work.")
@json_option
@pass_state
def apply_cmd(st: State, ref: str | None, upstream: str | None, force: bool, as_json: bool) -> None:
    """Apply the queue in build/worktrees/<ref>, one commit per patch (git am --3way).

    \b
    Examples:
      sglforge patches apply                   # at the pin: build/worktrees/v0.5.14
      sglforge patches apply --ref 0.5.16      # at another release (stops at a conflict)
    """
    from sglforge.patches.apply import apply_queue

    a = apply_queue(st.project, ref=ref, force=force)
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
@click.option(
    "--ref",
    "refs",
    shell_complete=complete_tags,
    multiple=True,
    help="Upstream ref to check (repeatable).",
)
@click.option(
    "--tags",
    metavar="SPEC",
    help="Also every tag whose version matches SPEC; `pin` stands for the pinned version "
    "(--tags '>=pin': the pin and every later release).",
)
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

    report = check_refs(st.project, list(refs), tags=tags, jobs=jobs)
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
@click.option(
    "--ref",
    "new_ref",
    shell_complete=complete_tags,
    help="The new upstream ref to rebase the queue onto. Without it: fold the worktree's "
    "edits into the top patch (quilt refresh).",
)
@click.option(
    "--at",
    "at_ref",
    metavar="REF",
    shell_complete=complete_tags,
    help="Worktree of the top-patch refresh (default: the pin).",
)
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
    new_ref: str | None,
    at_ref: str | None,
    upstream: str | None,
    drop_upstreamed: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Fold worktree edits into the top patch; with --ref, rebase the queue onto NEWREF.

    Without --ref (quilt's refresh): the edits in build/worktrees/<pin> (staged, unstaged,
    new files) go into the top patch's commit and its patch file is written again, its
    header and context width kept.

    With --ref: rebase the queue onto NEWREF (3-way) and move the pin; all or nothing. For a
    new release, `sglforge upgrade --to NEWREF` is the one to use: it also retires what
    upstream merged, and builds and smoke-tests before writing anything.

    \b
    Examples:
      sglforge patches goto 0002 && $EDITOR build/worktrees/v0.5.14/python/...
      sglforge patches refresh                  # the edits go into 0002
      sglforge patches refresh --ref v0.5.16 --dry-run
      sglforge patches refresh --ref v0.5.16 --drop-upstreamed
    """
    from sglforge.patches.refresh import refresh_queue

    if new_ref is None:
        _refresh_top(st, at_ref, as_json)
        return
    if at_ref is not None:
        raise click.UsageError("--at is for the top-patch refresh; --ref rebases the queue")
    from sglforge.queue.upstream import with_upstream

    r = refresh_queue(st.project, new_ref, drop_upstreamed=drop_upstreamed, dry_run=dry_run)
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
                f"refresh: conflicts at {r.new_ref}; nothing was changed. Resolve with "
                f"`{with_upstream(f'sglforge patches apply --ref {r.new_ref}', upstream)}`, edit, "
                "`git am --continue`, "
                f"`sglforge patches export --ref {r.new_ref}`, then refresh again."
            )
        elif r.written:
            click.echo(f"refresh: queue now on {r.new_ref}")
    if not r.ok:
        raise SystemExit(EXIT_PROBLEMS)


@patches_group.command("export")
@click.option("--ref", shell_complete=complete_tags, help="Worktree ref (default: the pin).")
@json_option
@pass_state
def export_cmd(st: State, ref: str | None, as_json: bool) -> None:
    """Write the worktree branch's commits back to patch files (series order kept).

    Uncommitted edits in the worktree are refused, named, never dropped: `sglforge patches
    refresh` folds them into the top patch, `sglforge patches new NAME` makes a new one. A
    rewritten patch keeps its own context width (a -U1 patch stays -U1).

    \b
    Example:
      git -C build/worktrees/v0.5.16 am --continue && sglforge patches export --ref v0.5.16
    """
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


def trailer_options(f: Any) -> Any:
    """``--status``, ``--origin``, ``--applies-to``: the trailers a new patch starts with."""
    f = click.option(
        "--applies-to",
        metavar="SPEC",
        help="Applies-To: the upstream versions it is for (PEP 440), e.g. '>=0.5.10,<0.5.15'.",
    )(f)
    f = click.option(
        "--origin", metavar="URL", help="Origin: where it comes from (a commit, a PR)."
    )(f)
    f = click.option(
        "--status",
        metavar="STATUS",
        help="Upstream-Status: Pending, 'Submitted [URL]', 'Backport [0.5.15]', ...",
    )(f)
    return f


def _trailers(status: str | None, origin: str | None, applies_to: str | None) -> dict[str, str]:
    given = {"Upstream-Status": status, "Origin": origin, "Applies-To": applies_to}
    return {k: v for k, v in given.items() if v is not None}


@patches_group.command("new")
@click.argument("name")
@click.option("--ref", shell_complete=complete_tags, help="Worktree ref (default: the pin).")
@click.option("-m", "--message", help="Subject line (default: NAME with spaces).")
@trailer_options
@json_option
@pass_state
def new_cmd(
    st: State,
    name: str,
    ref: str | None,
    message: str | None,
    status: str | None,
    origin: str | None,
    applies_to: str | None,
    as_json: bool,
) -> None:
    """Start patch NAME from the uncommitted changes in the ref's worktree.

    \b
    Examples:
      sglforge patches new fix-mtp-exclude -m "glm: honour Quark excludes for the MTP layer"
      sglforge patches new fix-x --status 'Submitted [https://github.com/sgl-project/sglang/pull/1]'
    """
    from sglforge.patches.export import new_patch

    r = new_patch(
        st.project, name, ref=ref, message=message, trailers=_trailers(status, origin, applies_to)
    )
    if as_json:
        print_json(r)
    else:
        for n in r.added:
            click.echo(
                f"new patch patches/{n} (Upstream-Status: {status or 'Pending'}; "
                "edit its description)"
            )


@patches_group.command("import")
@click.argument("source", metavar="FILE|URL|COMMIT")
@click.option("--name", help="File name slug (default: from the subject).")
@click.option(
    "--force",
    is_flag=True,
    help="Import even when the queue holds the same change or Origin already.",
)
@trailer_options
@upstream_option
@json_option
@pass_state
def import_cmd(
    st: State,
    source: str,
    name: str | None,
    force: bool,
    status: str | None,
    origin: str | None,
    applies_to: str | None,
    upstream: str | None,
    as_json: bool,
) -> None:
    """Add a patch to the end of the queue: a file, a URL or an upstream commit.

    A URL is e.g. an upstream pull request's .patch (Upstream-Status: Submitted [PR]); a
    COMMIT of the upstream repository gets Backport [first release holding it] and an
    Applies-To below that release; a file starts Pending. Trailers the patch already carries
    are kept (and said) unless an option overrides them; a file's name is kept (renumbered)
    unless --name. A file holding several commits (a pull request's) gives one patch per
    commit. A change the queue holds already (the same diff or Origin) is refused unless
    --force.

    \b
    Examples:
      sglforge patches import https://github.com/sgl-project/sglang/pull/30116.patch
      sglforge patches import 1a2b3c4d --upstream https://github.com/sgl-project/sglang
      sglforge patches import ~/fix.patch --status 'Backport [0.5.16]'
      sglforge patches check            # then: where does it apply?
    """
    from sglforge.patches.edit import import_patches

    r = import_patches(st.project, source, name, _trailers(status, origin, applies_to), force)
    _render_edit(r, as_json)


@patches_group.command("drop")
@click.argument("name", shell_complete=complete_patches)
@click.option("--reason", required=True, help="Why it goes (recorded as its Retired: line).")
@json_option
@pass_state
def drop_cmd(st: State, name: str, reason: str, as_json: bool) -> None:
    """Move patch NAME out of the series into patches/retired/, with the reason.

    NAME is its # in `patches list` (`3`), its file name, its slug or its file's number
    (`0003`).

    \b
    Example:
      sglforge patches drop 0003 --reason "superseded by 0004"
    """
    from sglforge.patches.edit import drop_patch

    _render_edit(drop_patch(st.project, name, reason), as_json)


@patches_group.command("rename")
@click.argument("name", shell_complete=complete_patches)
@click.argument("new")
@json_option
@pass_state
def rename_cmd(st: State, name: str, new: str, as_json: bool) -> None:
    """Rename patch NAME to NEW (its number kept), in the series and Depends-On lines.

    \b
    Example:
      sglforge patches rename 0003 fix-mtp-draft   # -> 0003-fix-mtp-draft.patch
    """
    from sglforge.patches.edit import rename_patch

    _render_edit(rename_patch(st.project, name, new), as_json)


@patches_group.command("reorder")
@click.argument("name", shell_complete=complete_patches)
@click.option(
    "--before", metavar="OTHER", shell_complete=complete_patches, help="Put NAME just before OTHER."
)
@click.option(
    "--after", metavar="OTHER", shell_complete=complete_patches, help="Put NAME just after OTHER."
)
@click.option("--first", is_flag=True, help="Put NAME first.")
@click.option("--last", is_flag=True, help="Put NAME last.")
@click.option(
    "--renumber",
    is_flag=True,
    help="Also rename every file's NNNN- to its place in the series (alone: only that).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Write an order under which a patch stops applying at the pin (then mend it by hand).",
)
@json_option
@pass_state
def reorder_cmd(
    st: State,
    name: str,
    before: str | None,
    after: str | None,
    first: bool,
    last: bool,
    renumber: bool,
    force: bool,
    as_json: bool,
) -> None:
    """Move patch NAME in the series (a Depends-On never ends up naming a later patch).

    \b
    Examples:
      sglforge patches reorder 0003 --before 0001 && sglforge patches check
      sglforge patches reorder 0003 --first --renumber   # 0003-x becomes 0001-x, and so on
      sglforge patches reorder 0003 --first --force   # it stops applying: mend it by hand

    An order under which a patch stops applying at the pin is refused, naming the patch, the
    hunk and the reorder that fixes it; --force writes it anyway and says how to mend it.
    """
    from sglforge.patches.edit import reorder_patch

    r = reorder_patch(st.project, name, before, after, first, last, renumber, force)
    _render_edit(r, as_json)
    if not as_json:
        _say_if_stale(st)


def _render_edit(r: Any, as_json: bool) -> None:
    if as_json:
        print_json(r)
        return
    verbs = {"import": "added", "drop": "retired", "rename": "renamed", "reorder": "moved"}
    if r.detail == "unchanged":
        click.echo(f"{r.action}: nothing to change")
    elif r.action == "rename":
        click.echo(f"renamed patches/{r.patches[0]} -> patches/{r.patches[1]}")
    else:
        for n in r.patches:
            click.echo(f"{verbs[r.action]} {n}")
            for what in (r.kept or {}).get(n, ()):
                if what == "name":
                    click.echo("  kept the file's name (--name NAME overrides)")
                else:
                    key = what.split(":", 1)[0]
                    option = {"Upstream-Status": "--status", "Applies-To": "--applies-to"}
                    flag = option.get(key, f"--{key.lower()}")
                    click.echo(f"  kept its own {what}  ({flag} overrides)")
        if r.action == "drop":
            click.echo(f"  kept as {r.detail}")
    if r.action == "reorder" and r.detail and r.detail != "unchanged":
        click.echo(f"note: {r.patches[0]} {r.detail}")
    click.echo("series: " + (", ".join(r.series) or "(empty)"))
    if r.action in ("import", "reorder"):
        click.echo("next: sglforge patches check   (where does the queue apply?)")


@patches_group.command("prune")
@click.option("--dry-run", is_flag=True, help="Show what would go; remove nothing.")
@json_option
@pass_state
def prune_cmd(st: State, dry_run: bool, as_json: bool) -> None:
    """Remove the worktrees of refs other than the pin's (build/worktrees/<ref>).

    A worktree holding work not saved to patches/ (uncommitted edits, unexported commits,
    a `git am` stopped on a conflict) is kept and named.

    \b
    Example:
      sglforge patches prune --dry-run
    """
    from sglforge.patches.apply import prune_worktrees

    found = prune_worktrees(st.project, dry_run=dry_run)
    if as_json:
        print_json({"dry_run": dry_run, "worktrees": found})
        return
    verb = "would remove" if dry_run else "removed"
    for p in found:
        click.echo(
            f"{verb if p.removed else 'kept'} {p.path}" + ("" if p.removed else f" ({p.why})")
        )
    removed = sum(p.removed for p in found)
    click.echo(f"patches prune: {verb} {plural(removed, 'worktree')}")


@patches_group.command("hash")
@json_option
@pass_state
def hash_cmd(st: State, as_json: bool) -> None:
    """Print the queue fingerprint (pin + series order + patch contents).

    \b
    Example:
      sglforge patches hash    # images are tagged ...-q<first 8>
    """

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
    from sglforge.queue.upstream import record_pin

    r = record_pin(st.root, upstream)
    if as_json:
        print_json(r)
    else:
        click.echo(f"pin {r['ref']} -> {r['commit'][:12]} ({r['recorded']})")


# ---- the queue as a stack (quilt push/pop/goto/refresh, show, header, fold)


def _refresh_top(st: State, at_ref: str | None, as_json: bool) -> None:
    from sglforge.patches.stack import refresh_top

    r = refresh_top(st.project, at_ref)
    if as_json:
        print_json(r)
        return
    wrote = "rewritten" if r.top in r.exported.written else "unchanged (same effect)"
    click.echo(f"refreshed {r.top} from {r.worktree}: patches/{r.top} {wrote}")


def _render_stack(s: Any, as_json: bool) -> None:
    if as_json:
        print_json(s)
        return
    verb = {"push": "applied", "pop": "removed", "goto": "moved"}.get(s.action, s.action)
    if s.moved:
        click.echo(f"{verb} {', '.join(s.moved)}")
    for e in s.entries:
        if e.state in ("skipped", "upstreamed"):
            click.echo(f"  {e.name}: {e.state} at {s.ref} (no commit)")
    where = f"{len(s.applied)} of {len(s.entries)} applied in {s.worktree}"
    click.echo(f"now at {s.top} ({where})" if s.top else f"no patch applied ({where})")


def _stack_options(f: Any) -> Any:
    f = click.option(
        "--ref", shell_complete=complete_tags, help="Worktree ref (default: the pin)."
    )(f)
    f = upstream_option(f)
    return json_option(f)


def _count_option(f: Any) -> Any:
    return click.option(
        "-n",
        "--count",
        type=click.IntRange(min=1),
        metavar="N",
        help="Move N patches (quilt's `push N`/`pop N`; a bare N names patch #N).",
    )(f)


@patches_group.command("push")
@click.argument("patch", required=False, metavar="[#|NAME]", shell_complete=complete_patches)
@click.option("--all", "all_", is_flag=True, help="Apply every patch of the series.")
@_count_option
@_stack_options
@pass_state
def push_cmd(
    st: State,
    patch: str | None,
    all_: bool,
    count: int | None,
    ref: str | None,
    upstream: str | None,
    as_json: bool,
) -> None:
    """Apply the next patch (or up to patch # or NAME, or --count N more) in
    build/worktrees/<ref>.

    A bare number is the patch's # in `patches list`, as for every verb; 0002 is the number
    in a file's name. The patches go onto the current top (one `git am`); without a
    worktree, it is made from upstream first.

    \b
    Examples:
      sglforge patches push            # one more
      sglforge patches push 3          # up to and including #3 of `patches list`
      sglforge patches push -n 2       # two more
      sglforge patches push --all
    """
    from sglforge.patches.stack import move_stack, parse_move

    move = parse_move("push", patch, all_, count)
    _render_stack(move_stack(st.project, move, ref), as_json)


@patches_group.command("pop")
@click.argument("patch", required=False, metavar="[#|NAME]", shell_complete=complete_patches)
@click.option("--all", "all_", is_flag=True, help="Take every patch off.")
@_count_option
@_stack_options
@pass_state
def pop_cmd(
    st: State,
    patch: str | None,
    all_: bool,
    count: int | None,
    ref: str | None,
    upstream: str | None,
    as_json: bool,
) -> None:
    """Take the top patch (or all above patch # or NAME, or --count N) off the worktree;
    files are kept.

    A bare number is the patch's # in `patches list`, which becomes the top. Refused while
    the worktree holds edits no patch has (`sglforge patches refresh` first) or commits not
    exported.

    \b
    Examples:
      sglforge patches pop             # the top one off
      sglforge patches pop 1           # #1 of `patches list` becomes the top
      sglforge patches pop -n 2        # two off
      sglforge patches pop --all
    """
    from sglforge.patches.stack import move_stack, parse_move

    move = parse_move("pop", patch, all_, count)
    _render_stack(move_stack(st.project, move, ref), as_json)


@patches_group.command("goto")
@click.argument("patch", metavar="#|NAME", shell_complete=complete_patches)
@_stack_options
@pass_state
def goto_cmd(st: State, patch: str, ref: str | None, upstream: str | None, as_json: bool) -> None:
    """Apply the series up to patch # (of `patches list`) or NAME, nothing above it.

    To find which patch breaks: goto 1, build or test, goto 2, ...

    \b
    Examples:
      sglforge patches goto 1 && (cd build/worktrees/v0.5.14 && python -m pytest ...)
      sglforge patches goto 0002-glm_moe_dsa-MTP-draft-class-for-Quark-excludes
    """
    from sglforge.patches.stack import move_stack, parse_move

    _render_stack(move_stack(st.project, parse_move("goto", patch), ref), as_json)


@patches_group.command("show")
@click.argument("name", shell_complete=complete_patches)
@json_option
@pass_state
def show_cmd(st: State, name: str, as_json: bool) -> None:
    """Show patch NAME: its place, state in the pin's worktree, trailers and diff.

    \b
    Example:
      sglforge patches show 0002 | less
    """
    from sglforge.patches.header import show_patch

    p = show_patch(st.project, name)
    if as_json:
        print_json(p)
        return
    click.echo(printable(f"#{p.index} patches/{p.name} ({p.state})", keep="\n\t"))
    click.echo(printable(p.text, keep="\n\t"), nl=False)


@patches_group.command("header")
@click.argument("name", shell_complete=complete_patches)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set a trailer: Upstream-Status, Forwarded, Bug, Origin, Applies-To, "
    "Upstream-Fixed-In, Depends-On (repeatable).",
)
@click.option("--unset", multiple=True, metavar="KEY", help="Remove a trailer (repeatable).")
@json_option
@pass_state
def header_cmd(
    st: State, name: str, sets: tuple[str, ...], unset: tuple[str, ...], as_json: bool
) -> None:
    """Edit the header trailers of patch NAME; values are checked as lint checks them.

    Without --set/--unset, prints the trailers. Only the trailer lines change.

    \b
    Examples:
      sglforge patches header 0002 --set Forwarded=https://github.com/sgl-project/sglang/pull/1
      sglforge patches header 0002 --set 'Upstream-Status=Submitted [https://...]' --set Bug=URL
    """
    from sglforge.patches.header import edit_header, parse_sets, show_patch

    if not sets and not unset:
        p = show_patch(st.project, name)
        if as_json:
            print_json({"name": p.name, "trailers": p.trailers})
            return
        for k, v in p.trailers.items():
            click.echo(printable(f"{k}: {v}"))
        return
    r = edit_header(st.project, name, parse_sets(sets), unset)
    if as_json:
        print_json(r)
        return
    if not r.written:
        click.echo(f"header: patches/{r.name} unchanged")
        return
    for k in sorted(set(r.before) | set(r.after)):
        if r.before.get(k) != r.after.get(k):
            old, new = r.before.get(k, "(none)"), r.after.get(k, "(removed)")
            click.echo(printable(f"patches/{r.name}: {k}: {old} -> {new}"))


@patches_group.command("fold")
@click.argument("name", shell_complete=complete_patches)
@click.argument("into", shell_complete=complete_patches)
@json_option
@pass_state
def fold_cmd(st: State, name: str, into: str, as_json: bool) -> None:
    """Fold patch NAME into patch INTO; NAME goes to patches/retired/, the series updated.

    Refused (nothing written) unless the series then makes the same tree at the pin.

    \b
    Example:
      sglforge patches fold 0003 0002 && sglforge patches check
    """
    from sglforge.patches.fold import fold_patch

    r = fold_patch(st.project, name, into)
    if as_json:
        print_json(r)
        return
    click.echo(f"folded {r.name} into {r.into} (kept as {r.retired})")
    click.echo("series: " + ", ".join(r.series))
    _say_if_stale(st)


def _say_if_stale(st: State) -> None:
    """After an edit of the series: say when the pin's worktree no longer matches it (its
    applied commits renamed, reordered or folded), as `patches list` marks it (U6)."""
    from sglforge.patches.stack import read_stack

    st.project.reload()
    stack = read_stack(st.project.queue)
    if stack.stale:
        click.echo(
            f"worktree {stack.worktree} is now stale (the patches applied there changed "
            "place): make it again with `sglforge patches apply`"
        )
