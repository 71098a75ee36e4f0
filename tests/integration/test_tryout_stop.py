"""``sglforge tryout --stop`` finds the registry where the walk-through leaves you (issue 45,
U1): one folder down in the project, the try-out folder above is found and its registry (a
real Debian docker-registry) stopped; with none to stop, it says where it looked and exits 1,
never 0 with the registry still running."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sglforge import progress, tryout
from sglforge.cli import main
from sglforge.standin.registry import answers


def stop(*extra: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, ["tryout", "--stop", *extra])
    return res.exit_code, res.stdout, res.stderr


@pytest.mark.registry
def test_stop_from_the_project_finds_the_tryout_above(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "sglforge-tryout"
    folder.mkdir()
    (tmp_path / "my-sglang").mkdir()
    monkeypatch.delenv("SGLFORGE_TRYOUT_DIR", raising=False)
    monkeypatch.chdir(tmp_path / "my-sglang")
    address, started = tryout.start_registry(folder, progress.Progress())
    try:
        assert started and answers(address)
        code, _, err = stop()
        assert code == 0, err
        assert f"of {folder.resolve()} stopped" in err and not answers(address)
    finally:
        tryout.stop(folder)
    # nothing left to stop: said, exit 1
    code, _, err = stop()
    assert code == 1 and "no tryout folder" in err and "nothing was stopped" in err, err


@pytest.mark.parametrize("given", [False, True])
def test_stop_with_no_tryout_says_where_it_looked_and_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: bool
) -> None:
    monkeypatch.delenv("SGLFORGE_TRYOUT_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    extra = ["--dir", str(tmp_path / "elsewhere")] if given else []
    res = CliRunner().invoke(main, ["tryout", "--stop", "--json", *extra])
    assert res.exit_code == 1, res.output
    doc = json.loads(res.stdout)
    assert "no tryout folder at" in doc["error"]["message"]
    assert ("--dir that sglforge tryout used" if given else "SGLFORGE_TRYOUT_DIR") in doc["error"][
        "hint"
    ]
    (tmp_path / "sglforge-tryout").mkdir()  # a folder whose registry is not running
    code, _, err = stop()
    assert code == 1 and "is running: nothing was stopped" in err, err
