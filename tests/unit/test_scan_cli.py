"""sglforge scan's input errors: one or two lines naming the file and what to run, exit 2."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from sglforge.cli import main


def run(tmp_path: Path, *args: str) -> tuple[int, str]:
    (tmp_path / "patches").mkdir(exist_ok=True)
    res = CliRunner().invoke(main, ["--root", str(tmp_path), "scan", *args])
    return res.exit_code, res.output


def test_a_model_folder_without_config_json(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    code, out = run(tmp_path, "--model", str(model))
    assert code == 2
    assert f"{model / 'config.json'}: no config.json" in out and "next: pass --model DIR" in out


def test_a_config_json_that_is_not_a_model_config(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{not json")
    code, out = run(tmp_path, "--model", str(model))
    assert code == 2 and "not valid JSON" in out
    (model / "config.json").write_text('{"model_type": "x"}')
    code, out = run(tmp_path, "--model", str(model))
    assert code == 2 and "no 'architectures' list" in out
