"""N18: the shell completes what a project holds, read from local files only: targets from
images/targets.toml, scenario names, patch names and numbers, and tags of the cached
upstream mirrors. A completion never writes, and never fails (nothing to offer is empty)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from sglforge.cache import upstream_mirrors
from sglforge.cli import main
from synthetic import git, make_project, make_upstream, snapshot


def complete(words: str, cwd: Path | None = None) -> list[str]:
    """What bash is offered for the last word of ``words`` (click's own completion
    protocol, as `eval "$(_SGLFORGE_COMPLETE=bash_source sglforge)"` drives it)."""
    parts = words.split(" ")
    env = {
        "_SGLFORGE_COMPLETE": "bash_complete",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(parts) - 1),
    }
    runner = CliRunner()
    if cwd is None:
        res = runner.invoke(main, [], env=env, prog_name="sglforge")
    else:
        with contextlib.chdir(cwd):  # click 8.5 deprecates isolated_filesystem(temp_dir=)
            res = runner.invoke(main, [], env=env, prog_name="sglforge")
    assert res.exit_code == 0, res.output
    return [line.split(",", 1)[1] for line in res.stdout.splitlines() if "," in line]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    upstream = make_upstream(tmp_path)
    root = make_project(tmp_path, upstream)
    upstream_mirrors().mkdir(parents=True, exist_ok=True)
    mirror = upstream_mirrors() / "somewhere_upstream.git"
    git(tmp_path, "clone", "-q", "--bare", str(upstream), str(mirror))  # packed-refs
    git(mirror, "tag", "v1.2rc1", "v1.1")  # a loose tag
    return root


def test_targets_scenarios_patches_and_tags(project: Path) -> None:
    at = f"sglforge --root {project}"
    before = snapshot(project)
    assert "mi355x" in complete(f"{at} build --target ")
    assert complete(f"{at} build --target mi3") == [
        t for t in complete(f"{at} build --target ") if t.startswith("mi3")
    ]
    assert "mi355x-rocm700" in complete(f"{at} publish --target mi355x-")
    assert "standin-cpu" in complete(f"{at} bench --scenario ")
    assert complete(f"{at} smoke --scenario standin-cpu-") == ["standin-cpu-aiter"]
    assert "0003-fix-c" in complete(f"{at} patches drop ")
    assert complete(f"{at} patches show 0003") == ["0003-fix-c"]
    assert len(complete(f"{at} patches fold 0001-fix-a ")) == 8
    assert complete(f"{at} patches reorder 0001-fix-a --before 0002-") == ["0002-fix-b"]
    assert complete(f"{at} patches check --ref v1.") == ["v1.2rc1", "v1.1", "v1.0"]
    # the pin's own mirror, once cached, is the one completed from
    from sglforge.git.mirror import cache_name

    pinned = upstream_mirrors() / cache_name(str(project.parent / "upstream"))
    git(project.parent, "clone", "-q", "--bare", str(project.parent / "upstream"), str(pinned))
    assert complete(f"{at} patches check --ref v1.") == ["v1.1", "v1.0"]
    assert complete(f"{at} upgrade --to v1.1") == ["v1.1"]
    assert snapshot(project) == before  # read-only


def test_completion_never_fails(project: Path, tmp_path: Path) -> None:
    (project / "images").mkdir()
    (project / "images" / "targets.toml").write_text("[[target]\nbroken")
    assert complete(f"sglforge --root {project} build --target ") == []
    # no project at all (not under one, no --root): nothing offered, no error
    (tmp_path / "elsewhere").mkdir()
    assert complete("sglforge patches drop ", cwd=tmp_path / "elsewhere") == []
    assert complete("sglforge --root /nonexistent smoke --scenario ") == []
