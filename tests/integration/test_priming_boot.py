"""The priming boot of a comparison (issue 40; ``[bench.gate] priming_boot``,
``bench --no-priming-boot``): the side that boots first is booted once more before its first
measured boot, with its warm-up probe, and discarded: in the notes and the server logs, not in
the compared figures.

No Docker: the stand-in server and bench client (tests/integration/test_process_runtime.py's
site folder) run as local processes. The process runtime itself refuses ``--against`` (both
sides would run the same ``--python``: src/sglforge/bench/runner.py, ``run_bench``), so the
runtime here is that runtime with images (the runtime boundary replaced, the bench's logic
not): each image name maps to a site folder put on the child's PYTHONPATH, and the engine's
image lookup (IDs for the help cache, digests for the report) answers "no such image", as it
does for an image built nowhere.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from test_process_runtime import ROOT, free_port, mark, marked, request, scenario_file, site  # noqa: F401 (fixtures)

from sglforge.bench import runner
from sglforge.bench.runner import BenchProtocol, run_bench
from sglforge.engine import images as engine_images
from sglforge.project import Project
from sglforge.reports.bench import text
from sglforge.requests import SmokeRequest
from sglforge.scenario.file import load_scenario
from sglforge.smoke.runtime import Box, ProcessRuntime

OLD, NEW = "sglforge-test/priming:old", "sglforge-test/priming:new"


@dataclass(frozen=True)
class Images(ProcessRuntime):
    """The process runtime with images: ``sites[image]`` is the image's ``sglang`` package
    folder; every start is recorded (the image, its log file's name)."""

    sites: dict[str, Path] = field(default_factory=dict)
    started: list[tuple[str, str]] = field(default_factory=list)
    kind = "docker"  # images, so a comparison may run

    def describe(self, image: str) -> str:
        return image

    def running(self, image: str, **launch: Any) -> AbstractContextManager[Box]:
        self.started.append((image, Path(launch["log_path"]).name))
        profile = launch["profile"]
        env = {**profile.env, "PYTHONPATH": str(self.sites[image])}
        return super().running(image, **{**launch, "profile": replace(profile, env=env)})


@pytest.fixture
def images(
    site: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Iterator[Images]:
    """The runtime with two images, OLD and NEW (the same stand-in: the test holds the order
    of the boots, not a difference between them); the engine knows neither."""
    monkeypatch.setenv("SGLFORGE_CACHE", str(tmp_path / "cache"))  # no node profile of the user's
    monkeypatch.setattr(engine_images, "inspect", lambda name: None)
    rt = Images((sys.executable,), sites={OLD: site, NEW: site})
    monkeypatch.setattr(runner, "runtime_for", lambda kind, python: rt)
    yield rt


def _figure(folder: Path, name: str) -> float:
    """The output tok/s bench_serving wrote for the probe ``name``."""
    last = (folder / f"{name}.jsonl").read_text().splitlines()[-1]
    return float(json.loads(last)["output_throughput"])


@pytest.mark.parametrize("priming", [True, False], ids=["primed", "--no-priming-boot"])
def test_a_comparison_discards_a_priming_boot_of_its_first_side(
    images: Images,
    site: Path,  # noqa: F811
    mark: str,  # noqa: F811
    tmp_path: Path,
    priming: bool,
) -> None:
    # the scenario asks for the priming boot; --no-priming-boot (priming=False) turns it off
    path = scenario_file(tmp_path, priming=True)
    path.write_text(path.read_text().replace("warmup_probe = false", "warmup_probe = true"))
    sc = load_scenario(path)
    assert sc.bench is not None and sc.bench.repeats == 1  # one ABBA pair: the baseline first
    out = tmp_path / "b"
    req = SmokeRequest(scenario=sc, log_dir=out, **request(site, mark, free_port()))  # type: ignore[arg-type]
    protocol = BenchProtocol(priming=priming)
    report = run_bench(Project(ROOT), NEW, req, against=OLD, protocol=protocol)
    assert marked(mark) == []

    boots = [(image, log) for image, log in images.started if log.endswith(".server.log")]
    measured = [(OLD, "baseline-0.server.log"), (NEW, "candidate-1.server.log")]
    saved = json.loads((out / "report.json").read_text())
    notes = [n for n in saved["notes"] if n.startswith("priming boot: ")]
    parts = [p["name"] for p in saved["cost"]["planned"]["parts"]]
    assert ("priming boot, discarded (with its warm-up probe)" in parts) is priming
    if priming:
        # one more boot of the side that boots first, before it, with its warm-up probe
        assert boots == [(OLD, "priming.server.log"), *measured]
        at = images.started.index((OLD, "priming.server.log"))
        assert images.started[at + 1] == (OLD, "priming-warmup.log")
        assert (out / "priming-warmup.jsonl").is_file()
        assert len(notes) == 1 and notes[0].startswith(f"priming boot: {OLD} booted once (")
        assert "discarded before the first measured boot" in notes[0]
    else:
        assert boots == measured
        assert not list(out.glob("priming*"))
        assert notes == [
            "priming boot: off (--no-priming-boot): the first measured boot is the node's first"
        ]
    assert f"note: {notes[0]}" in text(report)
    # the compared figures are the measured boots' alone: one boot a side, 16 requests each
    assert len(saved["cost"]["boot_seconds"]) == 2
    for side, probe in (("baseline", "baseline-0-speed"), ("candidate", "candidate-1-speed")):
        speed = saved["baseline"]["speed"] if side == "baseline" else saved["speed"]
        assert speed["requests_per_boot"] == [16]
        assert speed["output_tok_s_per_boot"] == [pytest.approx(_figure(out, probe), abs=1e-3)]
        assert saved["regression"]["changes"][0]["boots"][side] == 1
