"""Config items in the overlay image: where the base's aiter merges them, checked against it.

The base is inspected (bases.aiter_configs) for where its aiter keeps its tables; each
item is rendered in the base's columns and installed as
``<aiter>/configs/model_configs/sglforge_<name>_tuned_fmoe.csv``, beside aiter's own files
(never replacing one). A key the base's tables already hold is refused before building: aiter
aborts the merge on duplicate keys at run time and rewrites its own CSVs (ROCm/aiter
``update_config_files``; docs/aiter-tuned-configs.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from sglforge.errors import BuildError, SglforgeError
from sglforge.provenance import ContextFile, config_label
from sglforge.queue.configs import (
    BaseTables,
    ConfigItem,
    base_tables,
    item_findings,
    render,
    unfit_rows,
)
from sglforge.util import atomic_write, plural, sha256_bytes


@dataclass(frozen=True)
class Staged:
    """Rendered items ready for the overlay: context files, labels, manifest entries."""

    files: tuple[ContextFile, ...]
    labels: Mapping[str, str]
    manifest: tuple[Mapping[str, Any], ...]
    tables: BaseTables | None = None  # the base's aiter tables, when staging probed them


def base_aiter(ref: str, labels: Mapping[str, str] | None = None) -> BaseTables | None:
    """The base image's own tuned_fmoe table, or None when the image has no aiter."""
    from sglforge.aiter_rules import default_rule
    from sglforge.bases import aiter_configs, aiter_rule

    tables = aiter_configs(ref, labels)
    if tables is None or tables.tuned_fmoe is None:
        return None
    found = base_tables(
        tables.configs_dir,
        "tuned_fmoe",
        tables.tuned_fmoe,
        tables.untuned_fmoe_header,
        tables.model_configs,
    )
    try:
        rule = aiter_rule(ref, tables)
    except SglforgeError as exc:  # a build does not need the rule; coverage reports the gap
        rule = replace(default_rule(), source=f"{exc.message.rstrip('.')}; {default_rule().source}")
    return replace(found, aiter=rule)


def stage(
    root: Path,
    items: Sequence[ConfigItem],
    base_ref: str,
    version: str,
    target: str,
    labels: Mapping[str, str] | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> Staged:
    """Check ``items`` against the base's aiter and render those for this target and version."""
    chosen = [i for i in items if item_applies(i, version) and i.target == target]
    for item in items:
        if item not in chosen:
            say(f"config item {item.name}: not for {target} at sglang {version}, left out")
    if not chosen:
        return Staged((), {}, ())
    base = base_aiter(base_ref, labels)
    if base is None:
        raise BuildError(
            f"base image {base_ref} has no aiter (no importable 'aiter' package): config items "
            f"{', '.join(i.name for i in chosen)} have nowhere to go",
            "build from a release image with aiter, or move the items out of patches/configs/",
        )
    problems = item_findings(chosen, base)
    if problems:
        file, line, code, message = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise BuildError(
            f"{file}:{line}: {code}: {message}{more}",
            f"copy the base's {base.configs_dir} out (docker cp) and run "
            "`sglforge patches lint --aiter-configs DIR`",
        )
    out_dir = root / "build" / "configs"
    files, entries, label_map = [], [], {}
    for item in chosen:
        data = render(item, base)
        digest = sha256_bytes(data)
        local = out_dir / digest / item.installed_name
        if not local.is_file():
            local.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(local, data)
        dest = f"{base.model_configs_dir}/{item.installed_name}"
        # An absolute path: context_tar reads worktree / path, which is then this file.
        files.append(ContextFile(str(local.resolve()), dest, len(data), digest, 0o644))
        key, value = config_label(item.name, dest, item.sha256)
        label_map[key] = value
        entries.append(
            {
                "name": item.name,
                "file": item.csv_file,
                "sha256": item.sha256,
                "installed": dest,
                "installed_sha256": digest,
                "tool": item.tool,
                "table": item.table,
                "target": item.target,
                "gfx": item.gfx,
                "status": item.upstream_status,
                "origin": item.origin,
                "rows": len(item.rows) - len(unfit_rows(item, base)),
                "rows_left_out": len(unfit_rows(item, base)),
            }
        )
        unfit = unfit_rows(item, base)
        if unfit:
            shown = ", ".join(f"line {n} ({c}={v})" for n, c, v in unfit[:3])
            more = f" and {len(unfit) - 3} more" if len(unfit) > 3 else ""
            say(
                f"config item {item.name}: {plural(len(unfit), 'row')} left out, the base's "
                f"aiter has no column for them: {shown}{more}"
            )
        say(f"config item {item.name}: {plural(len(item.rows) - len(unfit), 'row')} -> {dest}")
    return Staged(tuple(files), label_map, tuple(entries), base)


def item_applies(item: ConfigItem, version: str) -> bool:
    """Whether config item ``item`` goes into images built at ``version`` (its Applies-To)."""
    if not item.applies_to:
        return True
    try:
        return Version(version) in SpecifierSet(item.applies_to)
    except InvalidVersion:
        return True
