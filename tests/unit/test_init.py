"""``sglforge init``: a new project from the shipped files, never overwriting anything."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from sglforge import __version__
from sglforge.cli import main
from sglforge.init import init_project, project_files
from sglforge.patches.series import load_queue
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
    for rel in ("images/targets.toml", "images/overlay.Dockerfile", "patches/upstream.toml"):
        assert (dest / rel).read_bytes() == (REPO / rel).read_bytes()
    queue = load_queue(dest)
    assert queue.patches == () and queue.pin.ref.startswith("v")
    assert load_scenario(dest / "smoke" / "standin-cpu.toml").model_path.is_dir()
    assert "/build/" in (dest / ".gitignore").read_text().splitlines()
    assert "## [Unreleased]" in (dest / "CHANGELOG.md").read_text()
    workflow = (dest / ".github" / "workflows" / "sglforge.yml").read_text()
    assert f'SGLFORGE_VERSION: "{__version__}"' in workflow and "{{" not in workflow.replace(
        "${{", ""
    )
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
        p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()
    }
