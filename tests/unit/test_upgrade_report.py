"""The upgrade's Markdown report (``report-<ref>.md``), held byte for byte against golden files
(tests/data/golden/upgrade-report-*.md): a ready upgrade with every section (patches with a
pipe in a detail, two targets, smoke figures, the bench, gates of each kind, config items,
CHANGELOG, time by stage) and a refused one with none. To regenerate after a change meant to
change them: ``SGLFORGE_GOLDEN_UPDATE=1 python3 -m pytest tests/unit/test_upgrade_report.py``
and read the diff."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gate_records import bench_gate, smoke_gate
from sglforge.gates import failed, passed, skipped
from sglforge.patches.refresh import PatchOutcome
from sglforge.reports.upgrade import markdown
from sglforge.upgrade import TargetOutcome, UpgradeResult

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
BENCH = {
    "hardware": "gpu",
    "knee": {"request_rate": 2.4, "total_tok_s": 2626.0},
    "single_stream": {"decode_tok_s": 213.0, "accept_length": 3.5},
    "regression": {"regressed": False, "changes": [{"figure": "knee_total_tok_s", "delta": 0.012}]},
}


def _ready() -> UpgradeResult:
    patches = (
        PatchOutcome("0001-fix-a.patch", "refreshed", "applies", "3-way"),
        PatchOutcome("0002-fix-b.patch", "retired", "upstreamed", "in v1.1 | a0b1c2d"),
        PatchOutcome("0003-fix-c.patch", "conflict", "conflicts", hunks=("a.py hunk 1",)),
    )
    first = TargetOutcome(
        "mi355x",
        image="sglforge/sglang:v1.1-mi355x",
        build_mode="overlay",
        up_to_date=False,
        build_seconds=12.5,
        configs=(("glm52-moe", "upstreamed"), ("other-moe", "installed")),
        gates=(
            passed("scan", "clean"),
            smoke_gate(True, figures={"ready_s": 1.5, "decode_tok_s": 40}),
            bench_gate(None, figures=BENCH),
        ),
    )
    second = TargetOutcome(
        "mi355x-rocm720",
        error="smoke failed",
        configs=(("glm52-moe", "upstreamed"),),
        gates=(skipped("scan", "no scenario | none"), failed("smoke", "failed", "x", 1)),
    )
    return UpgradeResult(
        "v1.0",
        "v1.1",
        "0123456789abcdef0123",
        True,
        True,
        "queue refreshed, images built and smoke-tested",
        patches,
        (first, second),
        ("Upstream pin moved from v1.0 to v1.1.", "Retired `0002-fix-b.patch`."),
        {"check+refresh": 1.234, "build mi355x": 12.5, "total": 20.0},
    )


def _refused() -> UpgradeResult:
    targets = (TargetOutcome("mi300x"),)
    return UpgradeResult("v1.0", "v1.1", None, False, False, "a | b", (), targets, (), {})


@pytest.mark.parametrize(("name", "result"), [("ready", _ready()), ("refused", _refused())])
def test_the_upgrade_report_holds_byte_for_byte(name: str, result: UpgradeResult) -> None:
    path = GOLDEN / f"upgrade-report-{name}.md"
    text = markdown(result)
    if os.environ.get("SGLFORGE_GOLDEN_UPDATE") == "1":
        path.write_text(text)
    assert text == path.read_text(), f"{path} changed: regenerate it only if that is meant"
