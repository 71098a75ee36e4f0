"""The GitHub workflows parse, and every `sglforge` command and option they use exists."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from sglforge.cli import main

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / ".github" / "workflows"


def load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    assert isinstance(data, dict), f"{name} is not a mapping"
    # YAML 1.1 reads the key `on` as the boolean True.
    if True in data:
        data["on"] = data.pop(True)
    return data


def run_scripts(workflow: dict[str, Any]) -> list[str]:
    return [
        step["run"]
        for job in workflow["jobs"].values()
        for step in job.get("steps", [])
        if "run" in step
    ]


def sglforge_calls(script: str) -> list[list[str]]:
    """Every `sglforge ...` command line in a shell script, as tokens up to `>`, `|`, `;`
    (outside quotes: `--tags '>=pin'` is one word)."""
    script = script.replace("\\\n", " ")
    calls = []
    for line in script.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>()")
        lexer.whitespace_split = True
        try:
            tokens = list(lexer)
        except ValueError:
            continue
        for i, tok in enumerate(tokens):
            prev = tokens[i - 1] if i else ""
            if tok != "sglforge" or prev not in ("", ";", "&&", "||", "|", "(", "-m"):
                continue
            words = []
            for w in tokens[i + 1 :]:
                if w and all(c in ";&|<>()" for c in w):
                    break
                words.append(w)
            calls.append(words)
    return calls


def resolve(words: list[str]) -> tuple[click.Command, list[str], list[click.Command]]:
    """Walk the click groups along ``words``: the command reached and the rest of the words."""
    cmd: click.Command = main
    chain = [cmd]
    rest = list(words)
    while isinstance(cmd, click.Group) and rest and not rest[0].startswith("-"):
        sub = cmd.get_command(click.Context(cmd), rest[0])
        assert sub is not None, f"`sglforge {' '.join(words)}`: no command {rest[0]!r}"
        cmd = sub
        chain.append(cmd)
        rest = rest[1:]
    return cmd, rest, chain


def options_of(cmd: click.Command) -> set[str]:
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}


@pytest.mark.parametrize("name", ["ci.yml", "publish.yml", "upstream-watch.yml"])
def test_workflow_parses_and_its_sglforge_calls_exist(name: str) -> None:
    wf = load(name)
    assert wf["jobs"], f"{name} has no jobs"
    for job_name, job in wf["jobs"].items():
        assert job.get("steps"), f"{name}: job {job_name} has no steps"
        assert "runs-on" in job, f"{name}: job {job_name} has no runs-on"
    for script in run_scripts(wf):
        for words in sglforge_calls(script):
            cmd, rest, chain = resolve(words)
            known = set().union(*(options_of(c) for c in chain)) | {"--help", "-h"}
            if isinstance(cmd, click.Group):
                assert "--help" in rest, f"{name}: `sglforge {' '.join(words)}` runs no command"
            # Options inside shell expansions (`${MODEL:+--model "$MODEL"}`) count too.
            for opt in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", " ".join(rest)):
                assert opt in known, f"{name}: `sglforge {' '.join(words)}`: no option {opt}"


def test_the_scanner_sees_commands_and_rejects_unknown_ones() -> None:
    # Guards the test above against passing because it found nothing.
    calls = sglforge_calls('sglforge publish --target "$T" \\\n  --json > out.json\nsglforge x')
    assert calls == [["publish", "--target", "$T", "--json"], ["x"]]
    with pytest.raises(AssertionError, match="no command 'x'"):
        resolve(["x"])
    cmd, rest, chain = resolve(["publish", "--nope"])
    assert "--nope" not in set().union(*(options_of(c) for c in chain))
    publish_calls = [c for s in run_scripts(load("publish.yml")) for c in sglforge_calls(s)]
    assert any(c[:1] == ["publish"] and "--json" in c and "--junit" in c for c in publish_calls)


def test_ci_runs_lint_and_the_ci_script_on_push_and_pull_request() -> None:
    wf = load("ci.yml")
    assert {"push", "pull_request"} <= set(wf["on"])
    scripts = "\n".join(run_scripts(wf))
    assert "bash .ci/run" in scripts and (REPO / ".ci" / "run").is_file()
    # the fast checks run first, and the slow suite waits for them
    assert "bash .ci/lint" in scripts
    lint = (REPO / ".ci" / "lint").read_text()
    assert all(c in lint for c in ("ruff format --check", "ruff check", "mypy"))
    assert wf["jobs"]["tests"]["needs"] == "lint"


def test_publish_runs_per_target_on_gpu_runners_with_secrets_and_reports() -> None:
    wf = load("publish.yml")
    on = wf["on"]
    assert "workflow_dispatch" in on and any(t.startswith("v") for t in on["push"]["tags"])
    job = wf["jobs"]["publish"]
    targets = job["strategy"]["matrix"]["target"]
    known = tomllib.loads((REPO / "images" / "targets.toml").read_text())["targets"]
    assert targets and set(targets) <= set(known), f"matrix {targets} vs targets.toml {known}"
    assert job["runs-on"][0] == "self-hosted" and "${{ matrix.target }}" in job["runs-on"]
    steps = job["steps"]
    push_step = next(
        s for s in steps if "run" in s and "--registry" in s["run"] and "--dry-run" not in s["run"]
    )
    env = push_step.get("env", {})
    assert env.get("SGLFORGE_REGISTRY_USER", "").startswith("${{ secrets.")
    assert env.get("SGLFORGE_REGISTRY_PASSWORD", "").startswith("${{ secrets.")
    assert "$GITHUB_STEP_SUMMARY" in push_step["run"]
    upload = next(s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    assert upload.get("if") == "always()"
    assert "build/reports/" in upload["with"]["path"]
    # Secrets never sit in the job-wide environment, where every step (and action) sees them.
    assert not any("secrets." in str(v) for v in job.get("env", {}).values())


def cache_steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/cache@")]


@pytest.mark.parametrize("name", ["ci.yml", "publish.yml", "upstream-watch.yml"])
def test_upstream_caches_are_kept_between_runs_keyed_on_the_pin(name: str) -> None:
    wf = load(name)
    for job_name, job in wf["jobs"].items():
        if name == "ci.yml" and job_name == "lint":
            continue
        env = {**wf.get("env", {}), **job.get("env", {})}
        assert "SGLFORGE_CACHE" in env, f"{name}: {job_name} leaves the cache in $HOME"
        (step,) = cache_steps(job)
        assert step["with"]["path"] == "${{ env.SGLFORGE_CACHE }}"
        assert "hashFiles('patches/upstream.toml')" in step["with"]["key"]
        assert step["with"].get("restore-keys")
        users = [
            i
            for i, s in enumerate(job["steps"])
            if "sglforge" in str(s.get("run", "")) or ".ci/run" in str(s.get("run", ""))
        ]
        assert users and job["steps"].index(step) < users[0], f"{name}: cache restored late"


def test_publish_is_a_matrix_of_targets_and_rocm_behind_a_protected_environment() -> None:
    job = load("publish.yml")["jobs"]["publish"]
    matrix = job["strategy"]["matrix"]
    assert set(matrix["target"]) == {"mi355x", "mi300x"}
    assert set(matrix["rocm"]) == {"rocm700", "rocm720"}
    targets = tomllib.loads((REPO / "images" / "targets.toml").read_text())["targets"]
    for t in matrix["target"]:
        assert set(matrix["rocm"]) <= set(targets[t]["rocm"]), t
    assert job["environment"] == "release"
    assert job["env"]["TARGET"] == "${{ matrix.target }}-${{ matrix.rocm }}"
    upload = next(s for s in job["steps"] if "upload-artifact" in str(s.get("uses", "")))
    assert "${{ matrix.rocm }}" in upload["with"]["name"]


def test_upstream_watch_pr_gets_ci_and_the_smoke_gets_its_model() -> None:
    wf = load("upstream-watch.yml")
    job = wf["jobs"]["upgrade"]
    checkout = next(
        s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/checkout")
    )
    assert "secrets.SGLFORGE_BOT_TOKEN" in checkout["with"]["token"]
    pr = next(s for s in job["steps"] if "gh pr create" in str(s.get("run", "")))
    assert "secrets.SGLFORGE_BOT_TOKEN" in pr["env"]["GH_TOKEN"]
    # without the bot token, CI is dispatched explicitly (GITHUB_TOKEN's events start none)
    assert "gh workflow run ci.yml" in pr["run"] and wf["permissions"]["actions"] == "write"
    assert "workflow_dispatch" in load("ci.yml")["on"]
    upgrade = next(s for s in job["steps"] if "sglforge upgrade" in str(s.get("run", "")))
    assert "--model" in upgrade["run"] and "vars.SGLFORGE_MODEL_PATH" in job["env"]["MODEL"]


@pytest.mark.parametrize(
    "name", [".github/workflows/sglforge.yml", ".github/workflows/sglforge-upstream-watch.yml"]
)
def test_the_init_workflows_parse_and_their_calls_exist(name: str) -> None:
    from sglforge.init import project_files

    text = project_files(watch=True)[name].decode()
    wf = yaml.safe_load(text)
    wf["on"] = wf.pop(True)
    for script in run_scripts(wf):
        for words in sglforge_calls(script):
            cmd, rest, chain = resolve(words)
            known = set().union(*(options_of(c) for c in chain))
            for opt in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", " ".join(rest)):
                assert opt in known, f"{name}: `sglforge {' '.join(words)}`: no {opt}"
    assert all(cache_steps(job) for job in wf["jobs"].values())
    if "publish" not in wf["jobs"]:
        return
    publish = wf["jobs"]["publish"]
    assert publish["environment"] == "release" and set(publish["strategy"]["matrix"]["rocm"])
    assert all(cache_steps(job) for job in wf["jobs"].values())
