"""`upgrade --dry-run` shows the plan and each patch's action and writes nothing; `upgrade
--branch NAME` lands the upgrade on a new branch as one commit, as the CI job does."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from sglforge.cli import main
from synthetic import NO_CONFLICT, PATCHES, make_project, make_upstream, snapshot


def cli(root: Path, *args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, ["--root", str(root), *args])
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stdout, res.stderr


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    return make_upstream(tmp_path)


def committed(root: Path) -> Path:
    git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text("/build/\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "project")
    return root


@pytest.mark.parametrize(("queue", "ok"), [(NO_CONFLICT, True), (PATCHES, False)])
def test_dry_run_shows_the_plan_and_writes_nothing(
    tmp_path: Path, upstream: Path, queue: list, ok: bool
) -> None:
    root = make_project(tmp_path, upstream, queue)
    before = snapshot(root)
    code, out, err = cli(root, "upgrade", "--to", "1.1", "--no-build", "--dry-run", "--json")
    doc = json.loads(out)
    assert (code == 0) is ok and doc["ready"] is ok and doc["applied"] is False, err
    assert doc["new_ref"] == "v1.1" and doc["reason"].startswith("dry run, nothing written")
    actions = {p["name"].split("-", 1)[1]: p["action"] for p in doc["patches"]}
    assert set(actions) == {f"{q[0]}.patch" for q in queue}
    if ok:  # fix-e is in v1.1 already: retired; fix-g applies below 1.1 only
        assert actions["fix-e.patch"] == "retired" and actions["fix-a.patch"] == "unchanged"
    else:  # the conflict stops it: nothing else is decided
        assert actions["fix-d.patch"] == "conflict", actions
    assert snapshot(root) == before
    assert not (root / "build" / "upgrade").exists()  # no report either
    code, out, err = cli(root, "upgrade", "--to", "v1.1", "--dry-run")
    assert "(dry run)" in out and "report:" not in out


def test_dry_run_says_what_happens_to_each_config_item(tmp_path: Path, upstream: Path) -> None:
    """N21: an item whose Applies-To excludes the new release is said to be left out of the
    new images; one that applies is said to be installed."""
    import re

    root = make_project(tmp_path, upstream, NO_CONFLICT)
    real = Path(__file__).resolve().parents[2] / "patches" / "configs"
    (root / "patches" / "configs").mkdir()
    for name, spec in (("old-item", "<1.1"), ("new-item", ">=1.0")):
        meta = (real / "glm52-mxfp4-moe-gfx950.toml").read_text()
        meta = re.sub(r'^applies-to = ".*"$', f'applies-to = "{spec}"', meta, flags=re.M)
        (root / "patches" / "configs" / f"{name}.toml").write_text(meta)
        csv = (real / "glm52-mxfp4-moe-gfx950.csv").read_bytes()
        (root / "patches" / "configs" / f"{name}.csv").write_bytes(csv)
    before = snapshot(root)
    code, out, err = cli(root, "upgrade", "--to", "1.1", "--no-build", "--dry-run", "--json")
    reason = json.loads(out)["reason"]
    assert "config item old-item: Applies-To <1.1 excludes 1.1, so it is left out" in reason
    assert "config item new-item applies at 1.1: installed" in reason
    assert snapshot(root) == before


def test_branch_lands_the_upgrade_as_one_commit(tmp_path: Path, upstream: Path) -> None:
    root = committed(make_project(tmp_path, upstream, NO_CONFLICT))
    before = snapshot(root)
    code, out, err = cli(root, "upgrade", "--to", "v1.1", "--no-build", "--branch", "upgrade/v1.1")
    assert code == 0, err
    assert "committed on branch upgrade/v1.1" in out
    # the current branch and its files are as they were
    assert git(root, "symbolic-ref", "--short", "HEAD") == "main"
    assert snapshot(root) == before
    # the branch holds the upgrade: the pin moved, one commit on top of main
    assert git(root, "rev-list", "--count", "main..upgrade/v1.1") == "1"
    pin = git(root, "show", "upgrade/v1.1:patches/upstream.toml")
    assert 'ref = "v1.1"' in pin
    assert git(root, "log", "-1", "--format=%s", "upgrade/v1.1") == (
        "Upgrade the queue to sglang v1.1"
    )


@pytest.mark.parametrize(
    ("setup", "said"),
    [
        ("no-repo", "is not a git repository"),
        ("exists", "the branch exists already"),
        ("bad-name", "not a valid branch name"),
        ("dirty", "uncommitted changes under patches/"),
    ],
)
def test_branch_is_refused_before_any_work(
    tmp_path: Path, upstream: Path, setup: str, said: str
) -> None:
    root = make_project(tmp_path, upstream, NO_CONFLICT)
    name = "upgrade/x"
    if setup != "no-repo":
        committed(root)
    if setup == "exists":
        git(root, "branch", name)
    if setup == "bad-name":
        name = "bad..name"
    if setup == "dirty":
        (root / "patches" / "series").write_text("# edited\n")
    before = snapshot(root)
    code, out, err = cli(root, "upgrade", "--to", "v1.1", "--no-build", "--branch", name)
    assert code == 2 and said in err, err
    assert snapshot(root) == before
