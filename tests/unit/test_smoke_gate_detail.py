"""The smoke gate's error carries what each failed check found (issue 45, U13): a preflight
that cannot run says why ("something already listens on 127.0.0.1:30123; pass --port") in
publish and upgrade as ``sglforge smoke`` does, not only "preflight.port failed".
``run_smoke`` is replaced by one returning the report a real run makes."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from sglforge.candidate import Candidate
from sglforge.gates import smoke as smoke_gate
from sglforge.project import Project
from sglforge.requests import SmokeRequest
from sglforge.smoke.report import Check, SmokeReport

REPO = Path(__file__).resolve().parents[2]
PORT = "something already listens on 127.0.0.1:30123; pass --port"


@pytest.mark.parametrize(
    ("checks", "reason", "said"),
    [
        ((Check("preflight.port", False, detail=PORT),), "preflight: preflight.port failed", PORT),
        (
            (Check("preflight.model", False, detail="no config.json in /m"),),
            "preflight: preflight.model failed",
            "no config.json in /m",
        ),
        ((Check("decode_tok_s", False, 3.0, 10.0, "3.0 < 10.0"),), "", "3.0 < 10.0"),
    ],
)
def test_a_failed_check_s_detail_reaches_the_gate_error(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    checks: tuple[Check, ...],
    reason: str,
    said: str,
) -> None:
    root = tmp_path / "project"
    for part in ("patches", "images", "smoke"):
        shutil.copytree(REPO / part, root / part)
    project = Project(root)
    scenario = project.scenario_file(root / "smoke" / "standin-cpu.toml")
    cand = Candidate(
        project, project.target("mi355x"), scenario, smoke=SmokeRequest(scenario=scenario)
    )

    class Host:
        gpus = None

    cand.host = Host()  # type: ignore[assignment]
    cand.image = "sglforge-test/candidate:1"  # type: ignore[misc]
    verdict = "cannot-run" if reason else "failed"

    def run_smoke(*_a: Any, **_k: Any) -> SmokeReport:
        return SmokeReport(
            False,
            verdict,
            checks,
            "img",
            None,
            None,
            "standin-cpu",
            scenario.path,
            {},
            None,
            None,
            reason=reason,
        )

    monkeypatch.setattr("sglforge.smoke.run_smoke", run_smoke)
    result = smoke_gate.check(cand)
    assert result.ok is False and said in result.error
    assert result.exit_code == (7 if reason else 1)
