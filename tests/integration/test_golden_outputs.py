"""The machine-readable outputs of ``publish``, ``publish --dry-run`` and ``upgrade --publish``
are held byte for byte against golden files (tests/data/golden/), so that a change to how a
run's results are carried (issue 44: one result model) cannot change what CI and scripts read.

The runs are those of ``test_gates_counting.py`` (the real command line on the synthetic
project, only the outside systems replaced), with the scenario's ``[bench]`` kept: the bench's
run is replaced by a fixed report (``run_bench`` is an outside system here: it boots servers),
so its figures, table and JUnit cases reach every output. Besides ``--json``, publish's
``--junit`` and ``--summary`` files are held too (the renderers move in issue 44).

Normalised (volatile, nothing else): the temporary folder (``<tmp>``), every step's and
gate's ``seconds`` and JUnit ``time`` (0), the release date in tags and paths (``<date>``),
and the host name JUnit stamps. To regenerate after a change that is meant to change them:
``SGLFORGE_GOLDEN_UPDATE=1 python3 -m pytest tests/integration/test_golden_outputs.py`` and
read the diff.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import socket
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_gates_counting import REGISTRY, REPO, _project
from test_gates_counting import counted as counted  # the outside systems replaced

from sglforge.cli import main

GOLDEN = REPO / "tests" / "data" / "golden"
pytestmark = pytest.mark.usefixtures("counted")
UPDATE = os.environ.get("SGLFORGE_GOLDEN_UPDATE") == "1"


def _fake_bench(monkeypatch: pytest.MonkeyPatch) -> None:
    """``run_bench`` answers a fixed first-release report (three probes, the knee at 6 RPS)."""
    from sglforge.bench import report as bench_report
    from sglforge.bench import runner
    from sglforge.bench.stats import Point
    from sglforge.scenario.bench import Knee

    def run_bench(project: Any, image: str, req: Any, **kw: Any) -> Any:
        def point(rate: float, tok: float, p95: float) -> Point:
            return Point(rate, tok * 1.4, tok, p95 / 2, p95, 1.0, 0.6, sustained_rps=rate)

        rows = (point(3, 210.125, 0.2104), point(6, 401.5, 0.61), point(9, 443.25, 1.7))
        singles = [bench_report.SingleStream(341.0, 3.37)]
        run = bench_report.ImageRun.of(image, None, rows, rows[1], singles, knee_above=9.0)
        sc = req.scenario
        return bench_report.BenchReport(
            scenario=sc.name,
            scenario_path=sc.path,
            hardware="gpu",
            dataset="generated-shared-prefix",
            expected_hit=0.6,
            knee_rule=Knee(1.0, 0.99),
            run=run,
            baseline=None,
            changes=(),
            refused=(),
            report_dir=project.root / "build" / "bench" / f"{sc.name}-20261202T000000Z-abcd1234",
            started_at="2026-12-02T00:00:00+00:00",
            duration_s=61.0,
            repeats=2,
            no_baseline=kw.get("no_baseline", ""),
            boot_seconds=(30.0, 31.0),
        )

    monkeypatch.setattr(runner, "run_bench", run_bench)


def _project_with_bench(tmp_path: Path) -> tuple[Any, Path, Path]:
    p, chosen, model = _project(tmp_path)
    # the counting test's scenario without its [bench]; here the shipped one, whole, as it was
    # when the golden files were taken (a retuned [bench] must not change them)
    chosen.write_text((GOLDEN / "scenario.toml").read_text())
    return p, chosen, model


def _normalised(text: str, tmp_path: Path) -> str:
    text = text.replace(str(tmp_path.resolve()), "<tmp>").replace(str(tmp_path), "<tmp>")
    text = re.sub(r'("(?:build_)?seconds": )[0-9.e-]+', r"\g<1>0", text)
    text = re.sub(r'( time=")[0-9.]+(")', r"\g<1>0\2", text)
    text = re.sub(r'( hostname=")[^"]*(")', r"\g<1>HOST\2", text)
    text = text.replace(socket.gethostname(), "HOST")
    text = re.sub(r"-i[0-9a-f]{8}\b", "-i<inputs>", text)  # the inputs' hash (commit times)
    text = re.sub(r"sha256:[0-9a-f]{64}", "sha256:<digest>", text)
    text = re.sub(r"\b[0-9a-f]{40}\b", "<commit>", text)
    text = re.sub(r"T[0-9]{6}Z-[0-9a-f]{8}", "T<time>Z-<run>", text)  # a smoke run's folder
    text = re.sub(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}", "<date>T<time>", text)
    stages = re.search(r'"stages": \{[^}]*\}', text)  # upgrade's seconds per stage
    if stages:
        timed = re.sub(r": [0-9.e-]+", ": 0", stages.group(0))
        text = text[: stages.start()] + timed + text[stages.end() :]
    today = dt.datetime.now(dt.UTC)
    for day in {today, today - dt.timedelta(days=1)}:
        text = text.replace(day.strftime("%Y-%m-%d"), "<date>")
        text = text.replace(day.strftime("%Y%m%d"), "<date>")
    return text


def _hold(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"{path} is missing: SGLFORGE_GOLDEN_UPDATE=1 writes it"
    assert text == path.read_text(), f"{name} differs from its golden file {path}"


def _invoke(root: Path, *args: str, code: int = 0) -> str:
    res = CliRunner().invoke(main, ["--root", str(root), *args], catch_exceptions=False)
    assert res.exit_code == code, res.output
    return res.stdout


def _json(text: str, tmp_path: Path) -> str:
    json.loads(text)  # one document
    return _normalised(text, tmp_path)


def test_publish_outputs_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_bench(monkeypatch)
    p, chosen, model = _project_with_bench(tmp_path)
    junit, summary = tmp_path / "publish.xml", tmp_path / "summary.md"
    args = ["publish", "--upstream", str(p.upstream), "--registry", REGISTRY, "--offline"]
    args += ["--scenario", str(chosen), "--model", str(model), "--no-baseline", "first release"]
    out = _invoke(p.root, *args, "--json", "--junit", str(junit), "--summary", str(summary))
    _hold("publish.json", _json(out, tmp_path))
    _hold("publish.junit.xml", _normalised(junit.read_text(), tmp_path))
    _hold("publish.summary.md", _normalised(summary.read_text(), tmp_path))
    assert '"ran": true' in out and "first release" in out  # the bench ran, uncompared


def test_publish_dry_run_output_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sglforge.engine import registry

    # the registry does not answer: whether a last release exists is unknown (a dry run says so)
    monkeypatch.setattr(registry, "remote_tags", lambda repository, timeout=0, **_: None)
    p, chosen, model = _project_with_bench(tmp_path)
    args = ["publish", "--upstream", str(p.upstream), "--registry", REGISTRY, "--offline"]
    args += ["--scenario", str(chosen), "--model", str(model), "--dry-run", "--json"]
    out = _invoke(p.root, *args)
    _hold("publish-dry-run.json", _json(out, tmp_path))
    assert '"planned"' in out


def test_a_failed_smoke_s_outputs_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sglforge.smoke import runner
    from sglforge.smoke.report import Check

    real = runner.run_smoke

    def failing(*a: Any, **k: Any) -> Any:
        from dataclasses import replace

        done = real(*a, **k)
        bad = Check("decode-speed", False, 12.5, 40.0, "below the floor")
        return replace(done, passed=False, verdict="failed", checks=(*done.checks, bad))

    import sglforge.smoke as smoke_package

    monkeypatch.setattr(runner, "run_smoke", failing)
    monkeypatch.setattr(smoke_package, "run_smoke", failing)
    p, chosen, model = _project(tmp_path)
    junit, summary = tmp_path / "publish.xml", tmp_path / "summary.md"
    args = ["publish", "--upstream", str(p.upstream), "--registry", REGISTRY, "--offline"]
    args += ["--scenario", str(chosen), "--model", str(model)]
    out = _invoke(p.root, *args, "--json", "--junit", str(junit), "--summary", str(summary), code=1)
    _hold("publish-smoke-failed.json", _json(out, tmp_path))
    _hold("publish-smoke-failed.junit.xml", _normalised(junit.read_text(), tmp_path))
    _hold("publish-smoke-failed.summary.md", _normalised(summary.read_text(), tmp_path))


def test_upgrade_publish_output_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from synthetic import git as run_git

    _fake_bench(monkeypatch)
    p, chosen, model = _project_with_bench(tmp_path)
    run_git(p.upstream, "tag", "v0.5.15")
    base = "sglforge-standin/sglang-build:v{version}-rocm700-mi35x"
    args = ["upgrade", "--to", "v0.5.15", "--upstream", str(p.upstream), "--publish"]
    args += ["--registry", REGISTRY, "--offline", "--base-image", base]
    args += ["--scenario", str(chosen), "--model", str(model), "--no-baseline", "first release"]
    out = _invoke(p.root, *args, "--json")
    _hold("upgrade-publish.json", _json(out, tmp_path))
    (target,) = json.loads(out)["targets"]
    assert target["published"] and target["bench"], target
