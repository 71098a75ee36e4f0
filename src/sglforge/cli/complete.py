"""Shell completion of the names a project holds: targets (``images/targets.toml``), scenario
names (``smoke/*.toml``), patches (``patches/series``) and upstream tags (the cached mirrors).

Each completer only reads local files (no git process, no network, no lock), and never raises:
a completion that cannot be worked out offers nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import click
from click.shell_completion import CompletionItem

Completer = Callable[[click.Context, click.Parameter, str], list[CompletionItem]]


def _root(ctx: click.Context) -> Path | None:
    """The project the command line names (``--root``, ``$SGLFORGE_ROOT``) or the one the
    working folder is in; None when there is none."""
    from sglforge.util import find_root

    given = ctx.find_root().params.get("root") or os.environ.get("SGLFORGE_ROOT")
    try:
        return find_root(given)
    except Exception:  # noqa: BLE001 - completion never fails
        return None


def _items(names: Iterable[str], incomplete: str) -> list[CompletionItem]:
    seen: list[str] = []
    for name in names:
        if name.startswith(incomplete) and name not in seen:
            seen.append(name)
    return [CompletionItem(n) for n in seen]


def _safe(read: Callable[[click.Context], Iterable[str]]) -> Completer:
    def complete(
        ctx: click.Context, _param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        try:
            return _items(read(ctx), incomplete)
        except Exception:  # noqa: BLE001 - completion never fails
            return []

    return complete


def target_names(ctx: click.Context) -> list[str]:
    from sglforge.targets import load_targets

    root = _root(ctx)
    return load_targets(root).names() if root else []


def scenario_names(ctx: click.Context) -> list[str]:
    """The NAMEs ``scenario_path`` resolves: the project's smoke/ (else the shipped one)."""
    from sglforge.defaults import smoke_dir

    root = _root(ctx)
    return sorted(p.stem for p in smoke_dir(root).glob("*.toml")) if root else []


def patch_names(ctx: click.Context) -> list[str]:
    """The series' entries by name without ``.patch`` (``find_entry`` accepts it; typing
    its number completes to it)."""
    root = _root(ctx)
    if root is None:
        return []
    out: list[str] = []
    text = (root / "patches" / "series").read_text(encoding="utf-8", errors="replace")
    for line in text.splitlines():
        word = line.split("#", 1)[0].strip()
        if word:
            name = word.split()[0]
            out.append(name.removesuffix(".patch"))
    return out


def _mirrors(ctx: click.Context) -> list[Path]:
    """The cached mirror of the project's pinned upstream URL when there is one, else every
    cached mirror (a PyPI history's, a --upstream's)."""
    import tomllib

    from sglforge.cache import upstream_mirrors
    from sglforge.git.mirror import cache_name

    folder = upstream_mirrors()
    root = _root(ctx)
    if root is not None:
        try:
            pin = tomllib.loads((root / "patches" / "upstream.toml").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            pin = {}
        url = pin.get("url")
        if isinstance(url, str) and (folder / cache_name(url)).is_dir():
            return [folder / cache_name(url)]
    return sorted(folder.glob("*.git"))


def cached_tags(ctx: click.Context) -> list[str]:
    """Tags of the project's cached upstream mirror (else of every one), read from its refs
    files (no git process)."""
    tags: set[str] = set()
    for repo in _mirrors(ctx):
        try:
            packed = (repo / "packed-refs").read_text(encoding="utf-8", errors="replace")
        except OSError:
            packed = ""
        for line in packed.splitlines():
            _sha, _, ref = line.partition(" ")
            if ref.startswith("refs/tags/"):
                tags.add(ref.removeprefix("refs/tags/"))
        loose = repo / "refs" / "tags"
        if loose.is_dir():
            tags.update(p.relative_to(loose).as_posix() for p in loose.rglob("*") if p.is_file())
    return sorted(tags, reverse=True)


complete_targets = _safe(target_names)
_scenario_names = _safe(scenario_names)


def complete_scenarios(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """A NAME, or (once a path is being typed) the shell's own file completion."""
    if "/" in incomplete or incomplete.startswith((".", "~")):
        return [CompletionItem(incomplete, type="file")]
    return _scenario_names(ctx, param, incomplete)


complete_patches = _safe(patch_names)
complete_tags = _safe(cached_tags)
