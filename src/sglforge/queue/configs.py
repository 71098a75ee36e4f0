"""Config items: tuned kernel-selection tables carried in the queue beside the patches.

An item is two files under ``patches/configs/``: ``NAME.toml`` (metadata, like a patch's
trailers) and ``NAME.csv`` (rows for one of aiter's tuned tables, e.g. ``tuned_fmoe``). The
build installs the rows as ``aiter/configs/model_configs/sglforge_NAME_<table>.csv`` in the
image, where aiter merges every ``*tuned_fmoe*`` file after its own table (see
docs/aiter-tuned-configs.md for aiter's merge, its duplicate-key abort and the lookup key).

The rows are shaped onto the base's own columns (aiter 0.1.x asserts that every merged file has
exactly the first file's columns); a column the base lacks is dropped only when it carries no
information for that base (``gfx`` equal to the item's ``gfx``, or an empty/zero value).
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from sglforge.aiter_rules import KNOWN_COLUMNS
from sglforge.errors import BuildError, ConfigError

if TYPE_CHECKING:
    from sglforge.aiter_rules import AiterRule

CONFIGS_DIR = "patches/configs"
TOOLS = {"aiter": ("tuned_fmoe",)}
# aiter/fused_moe.py's lookup key (amd-aiter 0.1.7.post2.dev18 fused_moe.py:525-567; newer
# aiter prefixes gfx). A row without these cannot be looked up.
LOOKUP_KEY = KNOWN_COLUMNS[1:]  # every key column but gfx
# What a tuned row chooses; equal choices on equal keys mean upstream carries the row.
CHOICE = ("block_m", "ksplit", "kernelName1", "kernelName2")
REQUIRED = LOOKUP_KEY + CHOICE + ("us",)
INT_COLUMNS = frozenset(
    {"cu_num", "token", "model_dim", "inter_dim", "expert", "topk", "use_g1u1", "doweight_stage1"}
    | {"block_m", "ksplit", "run_1stage"}
)
META_KEYS = {
    "description",
    "tool",
    "table",
    "target",
    "gfx",
    "upstream-status",
    "origin",
    "applies-to",
    "covers",
    "gaps",
    *(f"upstream-{k}" for k in ("repo", "commit", "path", "blob", "sha256")),
    # rows tuned by `sglforge configs tune` (upstream-status "Pending"): where and how
    *(
        f"tuned-{k}"
        for k in (
            "image",
            "image-digest",
            "aiter-version",
            "aiter-commit",
            "gfx",
            "cu-num",
            "args",
            "input-sha256",
            "output-sha256",
        )
    ),
    "time-before",
    "time-after",
}
META_REQUIRED = ("description", "tool", "table", "target", "gfx", "upstream-status", "origin")


@dataclass(frozen=True)
class Upstream:
    """Where an item's CSV comes from, byte for byte: one file of one upstream commit."""

    repo: str  # e.g. ROCm/aiter
    commit: str
    path: str
    blob: str  # git's blob id of the file at that commit
    sha256: str  # of the file's bytes (checkable without the repository)


@dataclass(frozen=True)
class ConfigItem:
    """One tuned-table item of the queue."""

    name: str
    meta_file: str  # relative to the project root
    csv_file: str
    description: str
    tool: str
    table: str
    target: str
    gfx: str
    upstream_status: str
    origin: str
    applies_to: str | None
    covers: tuple[str, ...]
    gaps: tuple[str, ...]
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    sha256: str  # of the CSV bytes
    upstream: Upstream | None = None
    tuned: Mapping[str, object] | None = None  # tuned-* provenance of a locally tuned item

    @property
    def installed_name(self) -> str:
        """The file name in aiter's model_configs/ (holds the table name, never "untuned")."""
        return f"sglforge_{self.name.replace('-', '_')}_{self.table}.csv"

    def records(self) -> list[dict[str, str]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


@dataclass(frozen=True)
class BaseTables:
    """The base image's own aiter table: where it lives, its columns, keys and rows."""

    configs_dir: str  # e.g. /sgl-workspace/aiter/aiter/configs
    table: str
    columns: tuple[str, ...]
    key_columns: tuple[str, ...]
    rows: tuple[Mapping[str, str], ...] = field(default=())
    sources: tuple[str, ...] = field(default=())  # one per row: the file it came from
    aiter: AiterRule | None = None  # the base's aiter's lookup rule, when it was read

    @property
    def model_configs_dir(self) -> str:
        return f"{self.configs_dir.rstrip('/')}/model_configs"


def _norm(column: str, value: str | None) -> str:
    value = (value or "").strip()
    if column in INT_COLUMNS or column in ("use_g1u1", "doweight_stage1"):
        low = value.lower()
        if low in ("true", "false"):
            return "1" if low == "true" else "0"
        try:
            return str(int(float(value)))
        except ValueError:
            return value
    return value


def key_of(record: Mapping[str, str], columns: Sequence[str]) -> tuple[str, ...]:
    """The normalised key of ``record`` over ``columns`` (1 == 1.0 == True)."""
    return tuple(_norm(c, record.get(c)) for c in columns)


def read_table(text: str, where: str) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """Header and rows of a CSV table; a row with the wrong field count names its line."""
    reader = csv.reader(io.StringIO(text))
    try:
        header = tuple(h.strip() for h in next(reader))
    except StopIteration:
        raise ConfigError(f"{where}:1: empty table (a header line is required)") from None
    rows = []
    for row in reader:
        if not row:
            continue
        if len(row) != len(header):
            raise ConfigError(
                f"{where}:{reader.line_num}: {len(row)} fields, the header has {len(header)}"
            )
        rows.append(tuple(row))
    return header, rows


def load_items(root: Path) -> tuple[ConfigItem, ...]:
    """Every item under ``patches/configs/`` (sorted by name), validated on load."""
    folder = root / CONFIGS_DIR
    if not folder.is_dir():
        return ()
    return tuple(load_item(root, path) for path in sorted(folder.glob("*.toml")))


def load_item(root: Path, meta_path: Path) -> ConfigItem:
    """One item from its TOML file and the CSV beside it."""
    rel = meta_path.relative_to(root).as_posix()
    try:
        meta = tomllib.loads(meta_path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        line = re.search(r"line (\d+)", str(exc))
        raise ConfigError(f"{rel}:{line.group(1) if line else 0}: invalid TOML: {exc}") from exc
    config = meta.get("config")
    if set(meta) != {"config"} or not isinstance(config, dict):
        raise ConfigError(f"{rel}:1: one [config] table is expected (found {sorted(meta)})")
    unknown = sorted(set(config) - META_KEYS)
    if unknown:
        raise ConfigError(
            f"{rel}:{_line(meta_path, unknown[0])}: unknown key {unknown[0]!r} "
            f"(known: {', '.join(sorted(META_KEYS))})"
        )
    for key in META_REQUIRED:
        if not isinstance(config.get(key), str) or not config[key].strip():
            raise ConfigError(f"{rel}:1: {key} is required (a non-empty string)")
    tool, table = config["tool"], config["table"]
    if table not in TOOLS.get(tool, ()):
        raise ConfigError(
            f"{rel}:{_line(meta_path, 'table')}: tool {tool!r} with table {table!r} is not "
            f"supported (supported: {', '.join(f'{t}/{x}' for t, xs in TOOLS.items() for x in xs)})"
        )
    applies = config.get("applies-to")
    if applies is not None:
        try:
            SpecifierSet(applies)
        except InvalidSpecifier:
            raise ConfigError(
                f"{rel}:{_line(meta_path, 'applies-to')}: applies-to {applies!r} is not a "
                "PEP 440 specifier (e.g. '>=0.5.12,<0.5.16')"
            ) from None
    csv_path = meta_path.with_suffix(".csv")
    csv_rel = csv_path.relative_to(root).as_posix()
    if not csv_path.is_file():
        raise ConfigError(f"{rel}:1: its table {csv_rel} does not exist")
    data = csv_path.read_bytes()
    header, rows = read_table(data.decode("utf-8"), csv_rel)
    upstream = _upstream(config, rel, meta_path)
    return ConfigItem(
        name=meta_path.stem,
        meta_file=rel,
        csv_file=csv_rel,
        description=config["description"].strip(),
        tool=tool,
        table=table,
        target=config["target"],
        gfx=config["gfx"],
        upstream_status=config["upstream-status"].strip(),
        origin=config["origin"].strip(),
        applies_to=applies,
        covers=tuple(config.get("covers") or ()),
        gaps=tuple(config.get("gaps") or ()),
        columns=header,
        rows=tuple(rows),
        sha256=hashlib.sha256(data).hexdigest(),
        upstream=upstream,
        tuned={k: v for k, v in config.items() if k.startswith("tuned-")} or None,
    )


UPSTREAM_KEYS = ("repo", "commit", "path", "blob", "sha256")


def _upstream(config: Mapping[str, object], rel: str, meta_path: Path) -> Upstream | None:
    given = {k: config.get(f"upstream-{k}") for k in UPSTREAM_KEYS}
    if all(v is None for v in given.values()):
        return None
    for key, value in given.items():
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(
                f"{rel}:{_line(meta_path, f'upstream-{key}')}: upstream-{key} is required with "
                f"the other upstream-* keys (a non-empty string)"
            )
    for key, size in (("commit", 40), ("blob", 40), ("sha256", 64)):
        if not re.fullmatch(rf"[0-9a-f]{{{size}}}", str(given[key])):
            raise ConfigError(
                f"{rel}:{_line(meta_path, f'upstream-{key}')}: upstream-{key} must be {size} "
                "lowercase hex digits (the full id, never an abbreviation)"
            )
    return Upstream(**{k: str(v) for k, v in given.items()})


def upstream_findings(
    items: Sequence[ConfigItem], root: Path, aiter_repo: Path | None = None
) -> list[tuple[str, int, str, str]]:
    """Each item's CSV against the upstream file it names: by sha256 always, by the commit's
    own bytes when ``aiter_repo`` (a clone holding that commit) is given."""
    found: list[tuple[str, int, str, str]] = []
    for item in items:
        up = item.upstream
        if up is None and item.tuned and item.upstream_status.startswith("Pending"):
            continue  # tuned here: its provenance is the tuned-* stamp, not an upstream file
        if up is None:
            found.append(
                (
                    item.meta_file,
                    1,
                    "config-unverified",
                    "no upstream-commit/-path/-sha256: "
                    "rows that cannot be compared with an upstream file",
                )
            )
            continue
        if item.sha256 != up.sha256:
            found.append(
                (
                    item.csv_file,
                    1,
                    "config-not-upstream",
                    f"sha256 {item.sha256[:12]} is not the recorded sha256 {up.sha256[:12]} "
                    f"of {up.repo} {up.path} at {up.commit[:12]}",
                )
            )
        if aiter_repo is None:
            continue
        from sglforge import git  # GitPython only when a clone is read (lint's import time)

        data = git.blob(aiter_repo, up.commit, up.path)
        if data is None:
            found.append(
                (
                    item.meta_file,
                    1,
                    "config-upstream-missing",
                    f"{aiter_repo} has no "
                    f"{up.path} at {up.commit[:12]} (fetch the commit or its pull request ref)",
                )
            )
            continue
        if git.blob_id(data) != up.blob or hashlib.sha256(data).hexdigest() != up.sha256:
            found.append(
                (
                    item.meta_file,
                    1,
                    "config-upstream-mismatch",
                    f"{up.path} at {up.commit[:12]} "
                    "is not the file whose blob/sha256 the item records",
                )
            )
        if (root / item.csv_file).read_bytes() != data:
            found.append(
                (
                    item.csv_file,
                    1,
                    "config-not-upstream",
                    f"differs from {up.path} at "
                    f"{up.commit[:12]} (copy it again: git show {up.commit}:{up.path})",
                )
            )
    return found


def _line(path: Path, key: str) -> int:
    for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if re.match(rf"\s*{re.escape(key)}\s*=", text):
            return n
    return 1


def item_findings(
    items: Sequence[ConfigItem], base: BaseTables | None = None
) -> list[tuple[str, int, str, str]]:
    """Problems as (file, line, code, message): columns, gfx, duplicates, base conflicts."""
    found: list[tuple[str, int, str, str]] = []
    seen: dict[tuple[str, ...], tuple[str, int]] = {}
    for item in items:
        missing = [c for c in REQUIRED if c not in item.columns]
        if missing:
            found.append(
                (item.csv_file, 1, "config-columns", f"missing column(s) {', '.join(missing)}")
            )
            continue
        if base is not None:
            gaps = _column_gaps(item, base)
            found += [(item.csv_file, 1, "config-base-columns", m) for m in gaps]
        key_cols = _key_columns(item, base)
        for n, record in enumerate(item.records(), 2):
            if "gfx" in item.columns and record["gfx"] != item.gfx:
                found.append(
                    (
                        item.csv_file,
                        n,
                        "config-gfx",
                        f"gfx {record['gfx']!r} but {item.meta_file} says {item.gfx!r}",
                    )
                )
            key = key_of(record, key_cols)
            if key in seen:
                first_file, first_line = seen[key]
                found.append(
                    (
                        item.csv_file,
                        n,
                        "config-duplicate",
                        f"key duplicated (first at {first_file}:{first_line}); aiter refuses "
                        "duplicate keys at run time",
                    )
                )
            else:
                seen[key] = (item.csv_file, n)
    if base is not None:
        for dup in base_duplicates(items, base):
            found.append(dup)
    return found


def _key_columns(item: ConfigItem, base: BaseTables | None) -> tuple[str, ...]:
    if base is not None:
        return tuple(c for c in base.key_columns if c in item.columns)
    return LOOKUP_KEY + (("gfx",) if "gfx" in item.columns else ())


def _column_gaps(item: ConfigItem, base: BaseTables) -> list[str]:
    missing = [c for c in base.columns if c not in item.columns]
    if missing:
        return [f"the base's {base.table}.csv has column(s) {', '.join(missing)} this table lacks"]
    return []


# What aiter fills into a column a merged file lacks (ROCm/aiter 9127c94a18e4
# aiter/jit/core.py:235 _FILL_DEFAULTS, else 0; gfx is derived from cu_num at :245-251).
_NO_INFORMATION = {"", "0", "0.0"}


def unfit_rows(item: ConfigItem, base: BaseTables) -> list[tuple[int, str, str]]:
    """Rows (line, column, value) that carry a value in a column the base's aiter does not read.

    Such a row is left out of the image, never edited: on that base it is a gap."""
    out = []
    extra = [c for c in item.columns if c not in base.columns]
    for n, record in enumerate(item.records(), 2):
        for column in extra:
            value = record[column].strip()
            if column == "gfx" and value == item.gfx:
                continue  # the base keys on cu_num alone; the item's gfx is its target
            if value not in _NO_INFORMATION:
                out.append((n, column, value))
                break
    return out


def base_duplicates(
    items: Sequence[ConfigItem], base: BaseTables
) -> list[tuple[str, int, str, str]]:
    """Item rows whose key the base's own tables already hold (aiter aborts on these)."""
    index: dict[tuple[str, ...], str] = {}
    for record, source in zip(base.rows, base.sources, strict=True):
        index.setdefault(key_of(record, base.key_columns), source)
    found = []
    for item in items:
        for n, record in enumerate(item.records(), 2):
            key = key_of(record, base.key_columns)
            if key in index:
                shown = ", ".join(f"{c}={v}" for c, v in zip(base.key_columns, key, strict=True))
                found.append(
                    (
                        item.csv_file,
                        n,
                        "config-base-duplicate",
                        f"key ({shown}) is already in the base's aiter {index[key]}; aiter "
                        "aborts the merge on duplicate keys and rewrites its own tables",
                    )
                )
    return found


def render(item: ConfigItem, base: BaseTables) -> bytes:
    """The item's rows in the base's columns, as the image's aiter reads them; rows that do not
    fit the base (:func:`unfit_rows`) are left out."""
    gaps = _column_gaps(item, base)
    if gaps:
        raise BuildError(f"{item.csv_file}: {gaps[0]}", "sglforge patches lint --aiter-configs DIR")
    skip = {n for n, _, _ in unfit_rows(item, base)}
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(base.columns)
    for n, record in enumerate(item.records(), 2):
        if n not in skip:
            writer.writerow([record[c] for c in base.columns])
    return out.getvalue().encode()


def upstreamed(item: ConfigItem, base: BaseTables) -> bool:
    """True when the base's tables carry every row of ``item`` they can read (:func:`unfit_rows`
    never reach that base), with the same choice."""
    have: dict[tuple[str, ...], tuple[str, ...]] = {}
    for record in base.rows:
        have[key_of(record, base.key_columns)] = key_of(record, CHOICE)
    unfit = {n for n, _, _ in unfit_rows(item, base)}
    rows = [r for n, r in enumerate(item.records(), 2) if n not in unfit]
    return bool(rows) and all(
        have.get(key_of(r, base.key_columns)) == key_of(r, CHOICE) for r in rows
    )


def base_tables(
    configs_dir: str,
    table: str,
    tuned: str,
    untuned_header: str | None,
    model_configs: Mapping[str, str],
) -> BaseTables:
    """The base's table from file contents: ``tuned`` plus every model_configs file aiter merges.

    The key is aiter's dedup key: the header of ``untuned_<table>.csv`` plus ``cu_num`` and, when
    the table has it, ``gfx`` (newer aiter's ``update_config_files``); without an untuned file,
    the lookup key. When the base's own files differ in columns, its aiter merges their union
    (ROCm/aiter 9127c94a18e4 ``aiter/jit/core.py:235-254``; an aiter that asserts equal columns,
    like the 0.1.7 wheel, would fail on its own tables), so the union is what it reads.
    """
    where = f"{configs_dir}/{table}.csv"
    columns, rows = read_table(tuned, where)
    records = [dict(zip(columns, r, strict=True)) for r in rows]
    sources = [f"{table}.csv"] * len(records)
    for name, text in sorted(model_configs.items()):
        if table not in name or "untuned" in name:
            continue
        more_columns, more = read_table(text, f"{configs_dir}/model_configs/{name}")
        for c in more_columns:
            if c not in columns:
                at = columns.index("tflops") if "tflops" in columns else len(columns) - 1
                columns = columns[:at] + (c,) + columns[at:]
        for r in more:
            records.append(dict(zip(more_columns, r, strict=True)))
            sources.append(f"model_configs/{name}")
    if untuned_header:
        keys = [h.strip() for h in untuned_header.strip().split(",")]
    else:
        keys = list(LOOKUP_KEY)
    for extra in ("cu_num", "gfx"):
        if extra in columns and extra not in keys:
            keys.append(extra)
    return BaseTables(
        configs_dir=configs_dir,
        table=table,
        columns=columns,
        key_columns=tuple(keys),
        rows=tuple(records),
        sources=tuple(sources),
    )


def base_tables_from_dir(path: Path, table: str = "tuned_fmoe") -> BaseTables:
    """The base's table from a copy of its ``aiter/configs`` folder (``lint --aiter-configs``)."""
    tuned = path / f"{table}.csv"
    if not tuned.is_file():
        raise ConfigError(f"{tuned}: not found (give the base's aiter/configs folder)")
    untuned = path / f"untuned_{table.removeprefix('tuned_')}.csv"
    header = untuned.read_text().splitlines()[0] if untuned.is_file() else None
    model = path / "model_configs"
    files = {p.name: p.read_text() for p in model.glob("*.csv")} if model.is_dir() else {}
    return base_tables(str(path), table, tuned.read_text(), header, files)
