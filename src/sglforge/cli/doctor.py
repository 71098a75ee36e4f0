"""``sglforge doctor`` and ``sglforge cache ...``: this machine's readiness and the shared cache."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

import click

from sglforge.cli import colour
from sglforge.cli.common import json_option, main, print_json, table
from sglforge.errors import EXIT_PROBLEMS
from sglforge.util import plural

if TYPE_CHECKING:
    from sglforge.cache import Entry


@main.command("doctor")
@json_option
def doctor_cmd(as_json: bool) -> None:
    """Check this machine for sglforge's work, read-only: what is there, what to do.

    Python, git, the Docker engine and its version, buildx (--mode source), free disk where
    the engine keeps images, registry logins (names only), /dev/kfd and /dev/dri, the GPUs
    and their gfx names (rocminfo or amd-smi), the shared cache's size. Exit 1 when a check
    fails (a warning does not).

    \b
    Example:
      sglforge doctor            # on a fresh MI355X node, before the first build
    """
    from sglforge.doctor import diagnose

    report = diagnose()
    if as_json:
        print_json(report, ok=report.ok)
    else:
        click.echo(f"sglforge {report.version}")
        click.echo(
            table(
                ["check", "status", "detail"],
                [
                    [c.name, c.status.upper() if c.status != "ok" else "ok", c.detail]
                    for c in report.checks
                ],
            )
        )
        for c in report.checks:
            if c.hint and c.status in ("fail", "warn"):
                tone = "bad" if c.status == "fail" else "warn"
                click.echo(f"{colour.paint('next', tone)} ({c.name}): {c.hint}")
    if not report.ok:
        raise SystemExit(EXIT_PROBLEMS)


@main.group("cache")
def cache_group() -> None:
    """Show or prune the shared cache: upstream mirrors, PyPI wheels and histories."""


@cache_group.command("info")
@json_option
def cache_info_cmd(as_json: bool) -> None:
    """Show what the shared cache holds ($SGLFORGE_CACHE), largest first.

    \b
    Example:
      sglforge cache info
    """
    import time

    from sglforge.cache import cache_root, entries

    found = entries()
    total = sum(e.size for e in found)
    if as_json:
        print_json({"root": cache_root(), "size": total, "entries": found})
        return
    count = plural(len(found), "entry", many="entries")
    click.echo(f"cache {cache_root()}: {total / 1e6:.0f} MB in {count}")
    now = time.time()
    rows = [
        [e.kind, f"{e.size / 1e6:.0f} MB", f"{(now - e.used) / 86400:.0f} d", _entry_name(e)]
        for e in found
    ]
    click.echo(table(["kind", "size", "unused", "of"], rows))


def _entry_name(entry: Entry) -> str:
    """What a cache entry is of, told apart from the others: a mirror by the upstream it
    mirrors (its origin URL, credentials scrubbed; one in this cache by its place there),
    wheels and histories by their PyPI project (``pypi-sglang/wheels``)."""
    import re

    from sglforge.cache import cache_root
    from sglforge.urls import shown

    if entry.kind != "mirror":
        return f"{entry.path.parent.name}/{entry.path.name}"
    url = None
    try:
        section = ""
        for line in (entry.path / "config").read_text(encoding="utf-8").splitlines():
            text = line.strip()
            if text.startswith("["):
                section = text
            elif section == '[remote "origin"]' and re.match(r"url\s*=", text):
                url = text.split("=", 1)[1].strip()
    except (OSError, UnicodeDecodeError):
        pass
    if not url:
        return str(entry.path.name)
    with contextlib.suppress(ValueError):
        url = Path(url).resolve().relative_to(cache_root()).as_posix()
    return shown(url)


@cache_group.command("prune")
@click.option(
    "--older-than",
    "days",
    type=click.FloatRange(min=0),
    default=30,
    show_default=True,
    metavar="DAYS",
    help="Remove what was not used for DAYS days.",
)
@click.option("--wheels", is_flag=True, help="Wheels too (downloaded again when needed).")
@click.option("--dry-run", is_flag=True, help="Show what would go; remove nothing.")
@json_option
def cache_prune_cmd(days: float, wheels: bool, dry_run: bool, as_json: bool) -> None:
    """Remove upstream mirrors and PyPI histories unused for a while (rebuilt on demand).

    Each is removed under the lock its writers take, so a running sglforge is waited for.
    A mirror that borrows a history's objects goes with it.

    \b
    Examples:
      sglforge cache prune --dry-run
      sglforge cache prune --older-than 0 --wheels    # everything
    """
    from sglforge.cache import prune

    gone = prune(days, wheels=wheels, dry_run=dry_run)
    freed = sum(e.size for e in gone)
    if as_json:
        print_json({"dry_run": dry_run, "freed": freed, "removed": gone})
        return
    verb = "would remove" if dry_run else "removed"
    for e in gone:
        click.echo(f"{verb} {e.kind} {e.path} ({e.size / 1e6:.0f} MB)")
    click.echo(
        f"cache prune: {verb} {plural(len(gone), 'entry', many='entries')}, {freed / 1e6:.0f} MB"
    )
