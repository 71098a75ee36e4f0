"""Every target the publish workflow builds has a smoke scenario that loads."""

from __future__ import annotations

from pathlib import Path

from test_workflows import load

from sglforge.scenario.file import find_scenario
from sglforge.smoke import load_scenario
from sglforge.targets import load_targets

REPO = Path(__file__).resolve().parents[2]


def test_each_published_target_has_its_own_scenario() -> None:
    matrix = load("publish.yml")["jobs"]["publish"]["strategy"]["matrix"]["target"]
    targets = load_targets(REPO)
    for target in matrix:
        path = find_scenario(REPO, target)
        scenario = load_scenario(path)
        assert scenario.target == target
        assert scenario.accelerator == "rocm"
        arch = targets.resolve(target).gpu_arch
        assert arch in ("gfx950", "gfx942")
