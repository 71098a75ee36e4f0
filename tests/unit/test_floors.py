"""The dependency floors: every runtime dependency declares one that pip can install exactly
(``.ci/floors`` installs them all and runs the checks below on them), and the command line's
error paths answer as they must on the versions installed here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import floors


def test_every_dependency_has_an_installable_floor() -> None:
    pins = floors.pins()
    names = [p.split("==")[0].lower() for p in pins]
    assert "click" in names and "gitpython" in names and len(pins) == len(set(names))
    assert all("==" in p and ">=" not in p for p in pins), pins
    # a marker travels with its pin, so pip skips it where it does not apply
    assert any(p.startswith("isal==") and "; platform_machine" in p for p in pins), pins


@pytest.mark.parametrize("dep", ["click", "click<9", "click~=8.1", "click>=8.1,<9"])
def test_a_dependency_without_a_plain_floor_is_refused(dep: str, tmp_path: Path) -> None:
    toml = tmp_path / "pyproject.toml"
    toml.write_text(f'[project]\ndependencies = ["{dep}"]\n')
    with pytest.raises(ValueError, match="declares no plain '>=' floor"):
        floors.pins(toml)


def test_the_error_paths_here(tmp_path: Path) -> None:
    assert floors.check(sys.executable, tmp_path) == []
