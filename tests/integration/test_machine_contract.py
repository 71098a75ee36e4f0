"""The machine contract, walked over every command: with ``--json`` each failure prints one
document on stdout (``{"schema": 1, "ok": false, "error": {"code", "message", "hint"}}``) whose
code is the exit code, and the exit codes are the README's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from sglforge.cli import main
from synthetic import make_project, make_upstream

# Commands that need no project: their second run is a success document, not an error.
PROJECTLESS = {"doctor", "cache info", "cache prune"}
# The arguments each command needs to get past click and fail on the missing project (or, for
# init, on a file already there). A new command must be added here: the walk checks coverage.
REQUIRED: dict[str, list[str]] = {
    "init": ["{occupied}"],
    "inspect": ["sglforge-contract/nope:x"],
    "patches drop": ["x", "--reason", "r"],
    "patches fold": ["x", "y"],
    "patches goto": ["1"],
    "patches header": ["x"],
    "patches import": ["x.patch"],
    "patches new": ["x"],
    "patches rename": ["x", "y"],
    "patches reorder": ["x", "--first"],
    "patches show": ["x"],
    "patches refresh": ["--ref", "v9"],
    "publish": ["--registry", "127.0.0.1:5999"],
    "smoke": ["--image", "sglforge-contract/nope:x", "--scenario", "smoke/none.toml"],
    # a bad version fails before the engine is asked (an empty folder is all tryout needs:
    # without one it would build the stand-in base and start a registry here)
    "tryout": ["--sglang", "not-a-version"],
}


def leaves(group: click.Group, prefix: str = "") -> list[str]:
    ctx = click.Context(group)
    out: list[str] = []
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        if isinstance(cmd, click.Group):
            out += leaves(cmd, f"{prefix}{name} ")
        else:
            out.append(f"{prefix}{name}")
    return out


def run(cwd: Path, *args: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    monkeypatch.chdir(cwd)
    res = CliRunner().invoke(main, list(args))
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stdout, res.stderr


def error_doc(code: int, out: str, err: str, what: str) -> dict[str, Any]:
    """The one failure document on stdout, checked against the exit code."""
    assert code != 0, (what, out, err)
    try:
        doc = json.loads(out)
    except json.JSONDecodeError:
        pytest.fail(f"{what}: exit {code} with no single JSON document on stdout:\n{out}\n{err}")
    assert list(doc)[:2] == ["schema", "ok"] and doc["schema"] == 1 and doc["ok"] is False, doc
    assert doc["exit_code"] == code, doc
    e = doc["error"]
    assert set(e) == {"code", "message", "hint"}, (what, e)
    assert e["code"] == code and e["message"], (what, e)
    return doc


def test_every_command_is_walked() -> None:
    names = leaves(main)
    assert {"build", "init", "patches new", "patches import", "doctor", "cache prune"} <= set(names)
    assert set(REQUIRED) <= set(names)


@pytest.mark.parametrize("name", leaves(main))
def test_every_command_prints_an_error_document(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SGLFORGE_ROOT", raising=False)
    (tmp_path / "occupied" / "patches").mkdir(parents=True)
    (tmp_path / "occupied" / "patches" / "series").write_text("")
    args = [a.format(occupied=tmp_path / "occupied") for a in REQUIRED.get(name, [])]
    empty = tmp_path / "empty"
    empty.mkdir()
    # 1. a usage error (click's parser) under --json
    code, out, err = run(
        empty, *name.split(), "--no-such-option", "--json", monkeypatch=monkeypatch
    )
    doc = error_doc(code, out, err, f"{name} --no-such-option")
    assert code == 2 and "--no-such-option" in doc["error"]["message"]
    assert doc["error"]["hint"] == f"sglforge {name} --help"
    # 2. the command's own failure (no project here; init: a file would be overwritten)
    code, out, err = run(empty, *name.split(), *args, "--json", monkeypatch=monkeypatch)
    if name in PROJECTLESS:
        doc = json.loads(out)
        assert doc["schema"] == 1 and code == (0 if doc["ok"] else 1), (name, out)
        return
    doc = error_doc(code, out, err, name)
    assert doc["error"]["message"] in err  # stderr still says it, for people
    assert code in (2, 9), (name, doc)


@pytest.mark.parametrize(
    ("args", "suggestion"),
    [
        (["biuld"], "build"),
        (["patch", "list"], "patches"),
        (["inspcet", "x"], "inspect"),
        (["upgarde"], "upgrade"),
        (["patches", "lsit"], "list"),
        (["patches", "improt"], "import"),
        (["doctr"], "doctor"),
    ],
)
def test_did_you_mean_everywhere(
    args: list[str], suggestion: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = run(tmp_path, *args, monkeypatch=monkeypatch)
    assert code == 2 and f"'{suggestion}'" in err and "Did you mean" in err
    doc = error_doc(*run(tmp_path, *args, "--json", monkeypatch=monkeypatch), " ".join(args))
    assert f"'{suggestion}'" in doc["error"]["message"]


def test_exit_codes_match_the_readme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_project(tmp_path, make_upstream(tmp_path))
    # nothing changed: a finding (1), not a patch that failed to apply or write (4)
    assert run(root, "patches", "apply", monkeypatch=monkeypatch)[0] == 0
    doc = error_doc(*run(root, "patches", "new", "x", "--json", monkeypatch=monkeypatch), "new")
    assert doc["error"]["code"] == 1 and "no changes" in doc["error"]["message"]
    # an unknown ref: upstream (3)
    res = run(root, "patches", "check", "--ref", "v7.7", "--json", monkeypatch=monkeypatch)
    assert error_doc(*res, "check --ref v7.7")["error"]["code"] == 3
    # an unknown target: configuration (2)
    res = run(root, "build", "--dry-run", "--target", "nope", "--json", monkeypatch=monkeypatch)
    assert error_doc(*res, "build --target nope")["error"]["code"] == 2
    # a document is printed once, even when the command printed its own
    res = run(root, "patches", "lint", "--json", monkeypatch=monkeypatch)
    assert res[1].count('"schema"') == 1
