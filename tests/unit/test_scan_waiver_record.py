"""Issue 31 (E4): the waivers a scan gave are said by the gate in every output (text, JSON,
Markdown, JUnit), recorded in the release record, and the waivers the queue gives are in the
image's manifest and its ``io.sglforge.scan-waivers`` label, from the queue alone (the same
inputs keep the same tag); ``inspect`` shows both."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from test_build_plan import overlay, target, worktree  # noqa: F401 (fixtures)
from test_publish_helpers import result
from test_release import make_release

from sglforge.cli.inspect import prov_json, render_provenance
from sglforge.errors import ConfigError
from sglforge.gates import ScanRecord, failed, passed
from sglforge.gates.scan import waivers_text
from sglforge.provenance import (
    FIXES_SCAN,
    LABEL_PATCHES,
    LABEL_QUEUE,
    LABEL_SCAN_WAIVERS,
    LABEL_TARGET,
    ScanWaiver,
    provenance_from,
    queue_scan_waivers,
)
from sglforge.release import from_dict, to_dict
from sglforge.reports.publish import junit_xml, markdown, summary
from sglforge.scan import ScanReport
from sglforge.scan import findings as scan_findings
from sglforge.scan.findings import FAIL, Finding
from sglforge.scan.waivers import WAIVERS_LABEL, label_value, waivers

KERNEL = "python/sglang/jit_kernel/csrc/elementwise/fused_metadata_copy.cuh"
QUARK = "python/sglang/srt/layers/quantization/quark.py"
F_KERNEL = Finding("cuda-only-jit", FAIL, KERNEL, 38, "u", "d")
F_OTHER = Finding("cuda-only-jit", FAIL, "python/sglang/jit_kernel/other.cuh", 9, "u", "d")
F_EXCLUDE = Finding("quant-exclude-unmatched", FAIL, "config.json", None, "model.layers.78.a", "d")


@dataclass(frozen=True)
class P:
    name: str
    files: tuple[str, ...]
    trailers: tuple[tuple[str, str], ...]
    paths: tuple[str, ...] = ()
    diff: str = ""  # what the patch writes (``writes``): a waiver needs the flagged line

    def diff_lines(self) -> Iterator[str]:
        return iter(self.diff.splitlines())


def writes(file: str, line: int) -> str:
    """A diff whose hunk writes line ``line`` of ``file`` (the line before it is context)."""
    return f"--- a/{file}\n+++ b/{file}\n@@ -{line - 1},1 +{line - 1},2 @@\n ctx\n+guarded\n"


def fixes(*keys: str) -> tuple[tuple[str, str], ...]:
    return (("Upstream-Status", "Pending"), *((FIXES_SCAN, k) for k in keys))


NONE = P("0001-plain.patch", (QUARK,), fixes())
GIVER = P("0002-guard.patch", (KERNEL,), fixes(F_KERNEL.key), diff=writes(KERNEL, 38))
LIAR = P("0003-version.patch", ("python/sglang/version.py",), fixes(F_OTHER.key))
QUARKP = P("0004-quark.patch", (QUARK,), fixes(F_EXCLUDE.key))


def test_the_contract_names_agree() -> None:
    assert LABEL_SCAN_WAIVERS == WAIVERS_LABEL and FIXES_SCAN == scan_findings.FIXES_SCAN


def test_the_queue_s_waivers_by_instance() -> None:
    assert queue_scan_waivers([NONE]) == ()
    assert queue_scan_waivers([GIVER]) == (ScanWaiver(F_KERNEL.key, GIVER.name, KERNEL),)
    assert queue_scan_waivers([LIAR]) == ()  # E4: a patch not touching the file waives nothing
    # two patches, in queue order; a config entry is kept with the patch's file
    both = queue_scan_waivers([GIVER, LIAR, QUARKP])
    assert [(w.finding, w.patch, w.file) for w in both] == [
        (F_KERNEL.key, GIVER.name, KERNEL),
        (F_EXCLUDE.key, QUARKP.name, QUARK),
    ]
    # an empty patch waives no config entry; a renamed file's old path counts as touched
    assert queue_scan_waivers([P("0005.patch", (), fixes(F_EXCLUDE.key))]) == ()
    mover = P("0006.patch", ("python/new.cuh",), fixes(F_OTHER.key), (F_OTHER.file,))
    assert queue_scan_waivers([mover]) == (ScanWaiver(F_OTHER.key, "0006.patch", F_OTHER.file),)
    # every waiver a scan gives is among those the image records
    findings = [F_KERNEL, F_OTHER, F_EXCLUDE]
    queue = [NONE, GIVER, LIAR, QUARKP, mover]
    given, _ = waivers(findings, queue)
    recorded = {(w.finding, w.patch, w.file) for w in queue_scan_waivers(queue)}
    assert {(w.key, w.patch, w.file) for w in given} <= recorded


@pytest.mark.parametrize(
    "queue",
    [[], [NONE], [GIVER], [LIAR], [GIVER, QUARKP]],
    ids=["empty", "none", "one", "refused", "two"],
)
def test_manifest_and_label_hold_the_queue_s_waivers(target, worktree: Path, queue) -> None:  # noqa: F811
    expected = queue_scan_waivers(queue)
    plan = overlay(target, worktree, scan_waivers=expected)
    assert plan.manifest["scan_waivers"] == [w.to_dict() for w in expected]
    label = plan.labels[LABEL_SCAN_WAIVERS]
    assert json.loads(label) == [w.to_dict() for w in expected]
    # the label is the rule module's own value for the same waivers ("[]" for none)
    given, _ = waivers([F_KERNEL, F_OTHER, F_EXCLUDE], queue)
    assert label == label_value(given)
    # the same inputs give the same tag, whenever built
    again = overlay(target, worktree, scan_waivers=expected, created="2031-01-01T00:00:00Z")
    assert again.image == plan.image
    prov = provenance_from(plan.image, plan.labels, plan.manifest)
    assert prov.scan_waivers == expected
    # labels only (no manifest): read from the label
    assert provenance_from(plan.image, plan.labels, None).scan_waivers == expected


def test_unreadable_waiver_labels_are_not_recorded() -> None:
    base = {LABEL_QUEUE: "q", LABEL_PATCHES: "a", LABEL_TARGET: "t"}
    for bad in ("{", "[1]", '{"a": 1}', '[{"finding": 1, "patch": "p", "file": "f"}]', "x" * 99):
        assert provenance_from("i", {**base, LABEL_SCAN_WAIVERS: bad}, None).scan_waivers is None
    assert provenance_from("i", base, None).scan_waivers is None  # an older image
    assert "waivers   not recorded" in render_provenance(provenance_from("i", base, None))


def _gate(queue: list[P], findings: list[Finding]) -> object:
    report = ScanReport("v0.5.14", "c" * 40, (), "/m", "s", (), tuple(findings))
    given, refused = waivers(findings, queue)
    record = ScanRecord(report, tuple(given), tuple(refused))
    detail = f"{len(findings)} finding(s), none blocking" + waivers_text(given, refused)
    return passed("scan", detail, record)


def test_the_gate_says_what_it_waived_in_every_output() -> None:
    assert waivers_text([], []) == ""
    gate = _gate([GIVER, LIAR, QUARKP], [F_KERNEL, F_EXCLUDE])
    assert gate.detail == (  # type: ignore[attr-defined]
        f"2 finding(s), none blocking; 2 waived: {F_KERNEL.key} by {GIVER.name}, "
        f"{F_EXCLUDE.key} by {QUARKP.name}; 1 Fixes-Scan trailer(s) refused: "
        f"{F_OTHER.key} ({LIAR.name}: no such fail in this scan)"
    )
    done = result(gates=(gate,), steps=())
    from sglforge.cli.publish import render
    from sglforge.publish import Step

    done = replace(done, steps=(Step("scan", True, 0.1, gate.detail),))  # type: ignore[attr-defined]
    doc = summary(done)["gates"][0]
    assert doc["waived"] == [
        {"finding": F_KERNEL.key, "patch": GIVER.name, "file": KERNEL},
        {"finding": F_EXCLUDE.key, "patch": QUARKP.name, "file": QUARK},
    ]
    assert doc["refused"] == [
        {"finding": F_OTHER.key, "patch": LIAR.name, "why": "no such fail in this scan"}
    ]
    assert f"{F_KERNEL.key} by {GIVER.name}" in render(done)
    assert f"2 waived: {F_KERNEL.key} by {GIVER.name}" in markdown(done, "mi355x")
    suite = ET.fromstring(junit_xml(done, "mi355x").split("\n", 1)[1]).find("testsuite")
    assert suite is not None
    case = next(c for c in suite.iter("testcase") if c.get("name") == "scan")
    assert f"refused: {F_OTHER.key}" in ET.tostring(case, encoding="unicode")
    # a refused waiver in a failing gate: the error says which trailer was refused and why
    blocked = failed("scan", "1 blocking" + waivers_text([], waivers([F_OTHER], [LIAR])[1]), "e", 1)
    assert f"the patch does not touch {F_OTHER.file}" in blocked.detail


def test_the_release_record_keeps_the_scan_and_inspect_shows_it() -> None:
    gate = _gate([GIVER, LIAR], [F_KERNEL, F_OTHER])
    scan = gate.record.to_dict()  # type: ignore[attr-defined]
    release = make_release(scan=scan)
    back = from_dict(json.loads(json.dumps(to_dict(release))))
    assert back.scan == scan
    assert from_dict({**to_dict(release), "scan": None}).scan is None  # an older record
    for bad in ([1], {"waived": "x"}, {"refused": [1]}):
        with pytest.raises(ConfigError, match="not a valid release record"):
            from_dict({**to_dict(release), "scan": bad})
    labels = {LABEL_QUEUE: "q", LABEL_PATCHES: "a", LABEL_TARGET: "t"}
    labels[LABEL_SCAN_WAIVERS] = label_value(waivers([F_KERNEL], [GIVER])[0])
    prov = replace(provenance_from("img", labels, None), release="v1", scan=back.scan)
    text = render_provenance(prov)
    assert f"waivers   1: {F_KERNEL.key} by {GIVER.name} (touches {KERNEL})" in text
    assert "scan      at publish time: 1 waived, 1 trailer(s) refused" in text
    assert f"  refused {F_OTHER.key} ({LIAR.name}: the patch does not touch {F_OTHER.file})" in text
    doc = prov_json(prov)
    assert doc["scan"] == scan and doc["scan_waivers"] == [
        {"finding": F_KERNEL.key, "patch": GIVER.name, "file": KERNEL}
    ]
    none = provenance_from("img", {**labels, LABEL_SCAN_WAIVERS: "[]"}, None)
    assert "waivers   none" in render_provenance(replace(none, scan={"not_run": "no model"}))
    assert "scan      not run at publish time: no model" in render_provenance(
        replace(none, scan={"not_run": "no model"})
    )


def test_publish_records_the_gate_it_ran_or_why_not() -> None:
    from types import SimpleNamespace

    from sglforge.gates import skipped
    from sglforge.publish import _scan_record

    def run(results: dict[str, object]) -> Any:
        # the gates the candidate ran, as publish reads them for the record
        from sglforge.publish import _gate_results

        return _gate_results(SimpleNamespace(cand=SimpleNamespace(results=results)))  # type: ignore[arg-type]

    ran = _gate([GIVER, LIAR], [F_KERNEL])
    assert _scan_record(run({"scan": ran})) == {
        "waived": [{"finding": F_KERNEL.key, "patch": GIVER.name, "file": KERNEL}],
        "refused": [
            {"finding": F_OTHER.key, "patch": LIAR.name, "why": "no such fail in this scan"}
        ],
    }
    none = _gate([NONE], [F_KERNEL])
    assert _scan_record(run({"scan": none})) == {"waived": [], "refused": []}
    why = "no config.json in /m on this host"
    assert _scan_record(run({"scan": skipped("scan", why)})) == {"not_run": why}
    assert _scan_record(run({})) == {"not_run": "the scan gate was not run"}
