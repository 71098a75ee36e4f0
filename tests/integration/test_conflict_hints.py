"""A conflict whose code moved to another file says where it went (sglang moved
server_args.py's overrides into arg_groups/overrides.py at v0.5.23); an ordinary conflict,
whose lines are still there, says nothing of the kind."""

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
    up = tmp_path / "upstream"
    up.mkdir()
    git(up, "init", "-q", "-b", "main")
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
    res = CliRunner().invoke(
        main, ["--root", str(root), "patches", "check", "--ref", "v2.0", "--json"]
    )
    patches = {p["name"]: p for p in json.loads(res.stdout)["refs"][0]["patches"]}
    moved = patches["0001-fix-1.patch"]
    assert moved["status"] == "conflict"
    assert (
        "python/pkg/server_args.py no longer holds the lines the patch touches; they are now "
        "in python/pkg/arg_groups/overrides.py:" in moved["detail"]
    ), moved["detail"]
    ordinary = patches["0002-fix-2.patch"]
    assert ordinary["status"] == "conflict" and "no longer holds" not in ordinary["detail"]
