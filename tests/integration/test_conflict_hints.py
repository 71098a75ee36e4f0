"""A conflict whose code moved to another file says where similar lines are (sglang moved
server_args.py's overrides into arg_groups/overrides.py at v0.5.23); an ordinary conflict,
whose lines are still there, says nothing of the kind; nor does a file holding one generic
line of the patch (N7), nor a ref before the pin; upgrade's NOT READY line says it too (N8)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from sglforge.cli import main
from synthetic import commit, edit, git, write

ARGS = [
    f"    parser.add_argument('--option-{i}', default={i}, help='option {i}')" for i in range(30)
]
OTHER = [f"    other_setting_{i} = compute_something_else({i}, {i * 2})" for i in range(30)]


def test_moved_code_is_named_and_an_ordinary_conflict_is_not(tmp_path: Path) -> None:
    root = _project(tmp_path)
    res = CliRunner().invoke(
        main, ["--root", str(root), "patches", "check", "--ref", "v2.0", "--json"]
    )
    patches = {p["name"]: p for p in json.loads(res.stdout)["refs"][0]["patches"]}
    moved = patches["0001-fix-1.patch"]
    assert moved["status"] == "conflict"
    assert (
        "python/pkg/server_args.py no longer holds the lines the patch touches; similar lines "
        "are in python/pkg/arg_groups/overrides.py:9 (7 of 7 lines)" in moved["detail"]
    ), moved["detail"]
    ordinary = patches["0002-fix-2.patch"]
    assert ordinary["status"] == "conflict" and "no longer holds" not in ordinary["detail"]


def test_a_generic_line_elsewhere_and_an_older_ref_name_no_place(tmp_path: Path) -> None:
    """N7: at v3.0 another file holds one context line of the patch (a generic one): not a
    place the code went to; at v0.9, older than the pin, the code is older, not moved."""
    root = _project(tmp_path)
    res = CliRunner().invoke(
        main, ["--root", str(root), "patches", "check", "--ref", "v3.0", "--ref", "v0.9", "--json"]
    )
    refs = {r["ref"]: r for r in json.loads(res.stdout)["refs"]}
    at3 = {p["name"]: p for p in refs["v3.0"]["patches"]}["0001-fix-1.patch"]
    assert at3["status"] == "conflict" and "no longer holds" in at3["detail"], at3
    assert "similar lines" not in at3["detail"] and "moriep" not in at3["detail"]
    at09 = {p["name"]: p for p in refs["v0.9"]["patches"]}["0001-fix-1.patch"]
    assert at09["status"] == "conflict", at09
    assert "no longer holds" not in at09["detail"] and "similar" not in at09["detail"]


def test_upgrade_s_not_ready_line_says_where_the_code_went(tmp_path: Path) -> None:
    """N8: the reason, the table and the report all carry the hint check prints."""
    root = _project(tmp_path)
    res = CliRunner().invoke(main, ["--root", str(root), "upgrade", "--to", "v2.0", "--no-build"])
    assert res.exit_code == 1, res.output
    hint = "similar lines are in python/pkg/arg_groups/overrides.py:9"
    reason = next(ln for ln in res.stdout.splitlines() if "conflict at v2.0" in ln)
    assert hint in reason, res.stdout
    res = CliRunner().invoke(
        main, ["--root", str(root), "upgrade", "--to", "v2.0", "--no-build", "--json"]
    )
    doc = json.loads(res.stdout)
    assert hint in doc["reason"]
    assert hint in Path(doc["report_md"]).read_text()


def _project(tmp_path: Path) -> Path:
    up = tmp_path / "upstream"
    up.mkdir()
    git(up, "init", "-q", "-b", "main")
    # 0.9: older code, none of the patched lines yet
    write(up, "python/pkg/server_args.py", ["def old_parser():", *OTHER[:8]])
    write(up, "python/pkg/model.py", OTHER)
    commit(up, "release 0.9")
    git(up, "tag", "v0.9")
    write(up, "python/pkg/server_args.py", ARGS)
    write(up, "python/pkg/model.py", OTHER)
    commit(up, "release 1.0")
    git(up, "tag", "v1.0")
    # 2.0: the arguments moved to arg_groups/overrides.py; model.py changed in place
    write(up, "python/pkg/server_args.py", ["from pkg.arg_groups.overrides import *", *OTHER[:5]])
    write(up, "python/pkg/arg_groups/overrides.py", ["def add(parser):", *ARGS])
    edit(up, "python/pkg/model.py", 11, "    other_setting_10 = changed_upstream_differently(10)")
    commit(up, "move the overrides")
    git(up, "tag", "v2.0")
    # the queue: one patch on each file, made at 1.0
    root = tmp_path / "project"
    (root / "patches").mkdir(parents=True)
    (root / "patches" / "upstream.toml").write_text(f'url = "{up}"\nref = "v1.0"\n')
    scratch = tmp_path / "scratch"
    git(tmp_path, "clone", "-q", str(up), str(scratch))
    git(scratch, "checkout", "-q", "v1.0")
    names = []
    for n, (rel, line, new) in enumerate(
        [
            ("python/pkg/server_args.py", 11, "    parser.add_argument('--option-10', default=99)"),
            ("python/pkg/model.py", 11, "    other_setting_10 = our_own_fix(10)"),
        ],
        1,
    ):
        edit(scratch, rel, line, new)
        commit(scratch, f"fix {n}\n\nWhy: tests.\n\nUpstream-Status: Pending")
        name = f"000{n}-fix-{n}.patch"
        (root / "patches" / name).write_text(
            git(scratch, "format-patch", "-1", "--stdout", "--zero-commit", "HEAD") + "\n"
        )
        names.append(name)
    (root / "patches" / "series").write_text("".join(f"{x}\n" for x in names))
    (root / "CHANGELOG.md").write_text("# Changelog\n\n## [Unreleased]\n")
    # 3.0: server_args.py rewritten; its removed line elsewhere, without its context
    git(up, "checkout", "-q", "v1.0")
    write(up, "python/pkg/server_args.py", ["def new_parser():", *OTHER[10:14]])
    write(up, "python/pkg/moriep.py", ["def dispatch():", ARGS[10], "    return None", ARGS[12]])
    commit(up, "rewrite server_args")
    git(up, "tag", "v3.0")
    return root
