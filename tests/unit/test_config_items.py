"""Config items against a base's aiter tables: upstreamed detection, duplicate keys, ``check``.

The base tables are built from the real item's own rows (patches/configs/), in the column set of
aiter 0.1.x's tuned_fmoe.csv (no ``gfx`` column), the way a base whose aiter took the rows would
carry them.
"""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

from sglforge.patches.check import check_items
from sglforge.queue.configs import (
    base_duplicates,
    base_tables,
    base_tables_from_dir,
    load_items,
    upstreamed,
)

REPO = Path(__file__).resolve().parents[2]
ITEM = "glm52-mxfp4-moe-gfx950"
UNTUNED = (
    "token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type,"
    "use_g1u1,doweight_stage1"
)


def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(REPO / "patches" / "configs", root / "patches" / "configs")
    return root


def item_rows(root: Path) -> tuple[list[str], list[dict[str, str]]]:
    (item,) = [i for i in load_items(root) if i.name == ITEM]
    columns = [c for c in item.columns if c != "gfx"]
    return columns, [{c: r[c] for c in columns} for r in item.records()]


def table(columns: list[str], rows: list[dict[str, str]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def test_an_item_is_upstreamed_only_when_the_base_carries_every_row_with_its_choice(
    tmp_path: Path,
) -> None:
    root = project(tmp_path)
    (item,) = load_items(root)
    columns, rows = item_rows(root)
    # 1.0 == 1 and "True" == 1: a base writing numbers differently still carries the row.
    rows[0]["use_g1u1"] = "True"
    rows[1]["token"] += ".0"
    model = {"glm5_fp4_tuned_fmoe.csv": table(columns, rows)}
    base = base_tables("/a/configs", "tuned_fmoe", table(columns, []), UNTUNED, model)
    assert upstreamed(item, base)
    # Every key present, so a build would refuse the item: the finding names the key and file.
    dups = base_duplicates([item], base)
    assert len(dups) == len(rows) == 96
    file, line, code, message = dups[0]
    assert (file, line, code) == (f"patches/configs/{ITEM}.csv", 2, "config-base-duplicate")
    assert "token=1, model_dim=6144, inter_dim=2048, expert=257, topk=9" in message
    assert "model_configs/glm5_fp4_tuned_fmoe.csv" in message

    other_kernel = [dict(r) for r in rows]
    other_kernel[2]["kernelName1"] = "some_other_kernel"
    base = base_tables("/a/configs", "tuned_fmoe", table(columns, other_kernel), UNTUNED, {})
    assert not upstreamed(item, base)  # same keys, another choice: ours is not upstream's

    base = base_tables("/a/configs", "tuned_fmoe", table(columns, rows[:4]), UNTUNED, {})
    assert not upstreamed(item, base)  # rows missing
    base = base_tables("/a/configs", "tuned_fmoe", table(columns, []), UNTUNED, {})
    assert not upstreamed(item, base) and base_duplicates([item], base) == []


def test_an_untuned_named_model_config_is_not_merged_so_not_upstream(tmp_path: Path) -> None:
    root = project(tmp_path)
    (item,) = load_items(root)
    columns, rows = item_rows(root)
    model = {"glm5_fp4_untuned_fmoe.csv": table(columns, rows)}
    base = base_tables("/a/configs", "tuned_fmoe", table(columns, []), UNTUNED, model)
    assert not upstreamed(item, base)


def test_check_reports_upstreamed_from_the_base_s_configs_folder(tmp_path: Path) -> None:
    root = project(tmp_path)
    columns, rows = item_rows(root)
    configs = tmp_path / "aiter" / "configs"
    (configs / "model_configs").mkdir(parents=True)
    (configs / "tuned_fmoe.csv").write_text(table(columns, []))
    (configs / "untuned_fmoe.csv").write_text(UNTUNED + "\n")
    (configs / "model_configs" / "glm5_fp4_tuned_fmoe.csv").write_text(table(columns, rows))
    assert upstreamed(load_items(root)[0], base_tables_from_dir(configs))
    out = check_items(root, ["v0.5.14", "v0.5.20"], configs)
    assert [(r["ref"], r["status"]) for r in out] == [
        ("v0.5.14", "upstreamed"),
        ("v0.5.20", "upstreamed"),
    ]
    (configs / "model_configs" / "glm5_fp4_tuned_fmoe.csv").write_text(table(columns, rows[1:]))
    out = check_items(root, ["v0.5.14", "v0.5.20"], configs)
    # Not carried: it applies where Applies-To says so, and is skipped elsewhere.
    assert [(r["ref"], r["status"]) for r in out] == [
        ("v0.5.14", "applies"),
        ("v0.5.20", "skipped"),
    ]
    without = check_items(root, ["v0.5.14"])
    assert without[0]["status"] == "applies" and "no --aiter-configs" in without[0]["detail"]


def test_rows_a_base_cannot_read_are_left_out_never_edited(tmp_path: Path) -> None:
    from sglforge.queue.configs import render, unfit_rows

    root = project(tmp_path)
    (item,) = load_items(root)
    # The amd-aiter 0.1.7 wheel's columns: no gfx, xbf16 or flat (its core.py asserts equal
    # columns). The FLAT rows (flat=1, xbf16=1) cannot be read there: they are left out.
    wheel = [c for c in item.columns if c not in ("gfx", "xbf16", "flat")]
    base = base_tables("/a/configs", "tuned_fmoe", table(wheel, []), UNTUNED, {})
    unfit = unfit_rows(item, base)
    assert len(unfit) == 13 and {c for _, c, _ in unfit} == {"xbf16"}
    out = list(csv.DictReader(io.StringIO(render(item, base).decode())))
    assert len(out) == 96 - 13
    kept = [r for r in item.records() if r["flat"] in ("0", "0.0")]
    assert [{c: r[c] for c in wheel} for r in kept] == out  # the other rows, value for value
    # A base whose own files already differ in columns merges their union (newer aiter):
    # every row fits, nothing is left out.
    model = {"dsv3_fp4_tuned_fmoe.csv": table(list(item.columns), [])}
    union = base_tables("/a/configs", "tuned_fmoe", table(wheel, []), UNTUNED, model)
    assert set(item.columns) <= set(union.columns) and "gfx" in union.key_columns
    assert unfit_rows(item, union) == []
    assert len(list(csv.DictReader(io.StringIO(render(item, union).decode())))) == 96
