"""``sglforge init``: a new project from the shipped files, never overwriting anything."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from sglforge import __version__
from sglforge.cli import main
from sglforge.init import init_project, project_files
from sglforge.queue.series import load_queue
from sglforge.smoke import load_scenario

REPO = Path(__file__).resolve().parents[2]


def test_init_lays_out_a_project_that_loads(tmp_path: Path) -> None:
    dest = tmp_path / "fork"
    result = init_project(dest)
    assert result.root == dest.resolve()
    for rel in (
        "patches/series",
        "patches/upstream.toml",
        "images/targets.toml",
        "images/overlay.Dockerfile",
        "smoke/standin-cpu.toml",
        "smoke/glm5-mxfp4-mtp-mi355x.toml",
        "tests/standin/model/config.json",
        ".github/workflows/sglforge.yml",
        "CHANGELOG.md",
        ".gitignore",
    ):
        assert rel in result.files and (dest / rel).is_file(), rel
    for rel in ("images/targets.toml", "images/overlay.Dockerfile"):
        assert (dest / rel).read_bytes() == (REPO / rel).read_bytes()
    # the shipped pin, with the upstream a new project starts from: the one its workflow uses
    shipped = (REPO / "patches" / "upstream.toml").read_text()
    assert (dest / "patches" / "upstream.toml").read_text() == shipped.replace(
        'url = "https://github.com/sgl-project/sglang"', 'url = "pypi:sglang"'
    )
    queue = load_queue(dest)
    assert queue.patches == () and queue.pin.ref.startswith("v")
    assert load_scenario(dest / "smoke" / "standin-cpu.toml").model_path.is_dir()
    assert "/build/" in (dest / ".gitignore").read_text().splitlines()
    assert "## [Unreleased]" in (dest / "CHANGELOG.md").read_text()
    workflow = (dest / ".github" / "workflows" / "sglforge.yml").read_text()
    assert f"(sglforge {__version__})" in workflow and "{{" not in workflow.replace("${{", "")
    assert "sglforge==" not in workflow and 'pip install "$SGLFORGE_INSTALL"' in workflow
    assert "SGLFORGE_UPSTREAM" not in workflow  # the pin says it, once
    assert not [p for p in dest.iterdir() if p.name.startswith(".sglforge-init-")]


def test_init_refuses_to_overwrite_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "targets.toml").write_text("# mine\n")
    (tmp_path / ".gitignore").write_text("*.pyc\n")
    res = CliRunner().invoke(main, ["init", str(tmp_path)])
    assert res.exit_code == 2
    assert ".gitignore" in res.output and "images/targets.toml" in res.output
    assert "nothing was written" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == [".gitignore", "images"]
    assert (tmp_path / "images" / "targets.toml").read_text() == "# mine\n"


def test_init_cli_json_and_default_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["init", "--json"])
    assert res.exit_code == 0, res.output
    assert '"patches/series"' in res.output
    assert (tmp_path / "patches" / "series").is_file()
    assert set(project_files()) == {
        p.relative_to(tmp_path).as_posix()
        for p in tmp_path.rglob("*")
        if p.is_file() and p.relative_to(tmp_path).parts[0] != ".git"
    }
    assert (tmp_path / ".git").is_dir()  # `git init` ran, as `cargo new` does


def test_init_records_the_upstream_once(tmp_path: Path) -> None:
    """--upstream goes into the pin's `url`; every command then reads it from there."""
    clone = tmp_path / "sglang-clone"
    clone.mkdir()
    for given, recorded in (
        ("pypi:sglang", "pypi:sglang"),
        ("pypi:sglang>=0.5.12", "pypi:sglang>=0.5.12"),
        ("https://github.com/sgl-project/sglang", "https://github.com/sgl-project/sglang"),
        ("git@github.com:sgl-project/sglang.git", "git@github.com:sgl-project/sglang.git"),
        (str(clone), str(clone.resolve())),
    ):
        dest = tmp_path / f"p{abs(hash(given))}"
        init_project(dest, upstream=given)
        pin = load_queue(dest).pin
        assert pin.url == recorded and pin.ref.startswith("v"), given
        assert pin.sources.get("pypi:sglang", {}).get("tree")  # the shipped record, kept


@pytest.mark.parametrize(
    ("upstream", "said"),
    [
        ("pypy:sglang", "unknown scheme 'pypy:' (did you mean pypi:sglang?)"),
        ("pipy:sglang", "unknown scheme 'pipy:' (did you mean pypi:sglang?)"),
        ("htps://github.com/sgl-project/sglang", "unknown scheme 'htps:' (did you mean 'https'?)"),
        ("pypi:sglang>=>0.5", "invalid version specifier"),
        ("/nonexistent/sglang", "no such folder"),
    ],
)
def test_init_refuses_an_upstream_it_cannot_open(tmp_path: Path, upstream: str, said: str) -> None:
    res = CliRunner().invoke(main, ["init", "--upstream", upstream, str(tmp_path / "p")])
    assert res.exit_code == 2 and said in res.stderr, res.output
    assert not (tmp_path / "p").exists()


def test_init_example_starts_from_the_proven_queue(tmp_path: Path) -> None:
    dest = tmp_path / "glm"
    result = init_project(dest, example="glm52")
    queue = load_queue(dest)
    assert [p.name for p in queue.patches] == [
        ln for ln in (REPO / "patches" / "series").read_text().splitlines() if ln[:1].isdigit()
    ]
    for rel in ["patches/series", *(f"patches/{p.name}" for p in queue.patches)]:
        assert (dest / rel).read_bytes() == (REPO / rel).read_bytes(), rel
    assert [c.name for c in queue.configs] == ["glm52-mxfp4-moe-gfx950"]
    assert "smoke/glm5-mxfp4-mtp-tp4dp2-mi355x.toml" in result.files
    res = CliRunner().invoke(main, ["init", "--example", "glm5", str(tmp_path / "x")])
    assert res.exit_code == 2 and "'glm52'" in res.stderr


def test_init_next_hint_works_when_pasted(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["init", "my sglang"])
    assert res.exit_code == 0, res.output
    assert "next: cd 'my sglang' && sglforge patches apply" in res.stdout
    monkeypatch.chdir(tmp_path / "my sglang")
    (tmp_path / "my sglang" / "sub").mkdir()
    res = CliRunner().invoke(main, ["init", "sub"])
    assert res.exit_code == 0 and "git:" not in res.stdout  # inside a repository already
    assert not (tmp_path / "my sglang" / "sub" / ".git").exists()


def test_the_workflow_runs_on_the_branch_git_made(tmp_path: Path, monkeypatch) -> None:
    import subprocess

    for branch in ("main", "trunk"):
        monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
        monkeypatch.setenv("GIT_CONFIG_KEY_0", "init.defaultBranch")
        monkeypatch.setenv("GIT_CONFIG_VALUE_0", branch)
        dest = tmp_path / branch
        result = init_project(dest, git_init=True)
        assert result.git == "initialised" and result.branch == branch
        head = subprocess.run(
            ["git", "-C", str(dest), "symbolic-ref", "--short", "HEAD"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        assert head == branch
        workflow = (dest / ".github" / "workflows" / "sglforge.yml").read_text()
        assert f"branches: [{branch}]" in workflow


def test_the_workflow_installs_what_exists(tmp_path: Path) -> None:
    """sglforge is on no index: never `sglforge==VERSION`; --install-from wins."""
    from sglforge.init import install_requirement

    found = install_requirement()
    assert found.requirement.startswith("sglforge @ ") and "==" not in found.requirement
    spec = "sglforge @ https://example.org/sglforge-0.1.0-py3-none-any.whl"
    result = init_project(tmp_path / "p", install=spec)
    workflow = (tmp_path / "p" / ".github" / "workflows" / "sglforge.yml").read_text()
    assert f'SGLFORGE_INSTALL: "{spec}"' in workflow and result.install == spec


def test_watch_writes_the_nightly_upgrade_job(tmp_path: Path) -> None:
    import yaml

    plain = init_project(tmp_path / "plain")
    assert ".github/workflows/sglforge-upstream-watch.yml" not in plain.files
    watched = init_project(tmp_path / "w", watch=True, install="sglforge @ https://x.invalid/w.whl")
    text = (tmp_path / "w" / ".github" / "workflows" / "sglforge-upstream-watch.yml").read_text()
    wf = yaml.safe_load(text)
    assert ".github/workflows/sglforge-upstream-watch.yml" in watched.files
    assert "schedule" in wf[True] and "{{" not in text.replace("${{", "")
    run = "\n".join(s.get("run", "") for s in wf["jobs"]["upgrade"]["steps"])
    assert "sglforge upgrade --to" in run and '--branch "$BRANCH"' in run
    assert 'SGLFORGE_INSTALL: "sglforge @ https://x.invalid/w.whl"' in text
    main_wf = (tmp_path / "w" / ".github" / "workflows" / "sglforge.yml").read_text()
    assert "sglforge patches check --tags '>=pin'" in main_wf
