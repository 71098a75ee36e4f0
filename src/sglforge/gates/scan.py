"""The scan gate: before the build, a fail no ``Fixes-Scan:`` trailer waives blocks the
release (issue 24, docs/scan.md). It applies to ROCm scenarios whose model folder holds a
config.json on this host; otherwise it is skipped, saying why."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglforge.gates.result import GateResult, ScanRecord, failed, passed, skipped

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sglforge.candidate import Candidate
    from sglforge.scan.findings import Finding
    from sglforge.scan.waivers import Refused, Waiver

NAME = "scan"


def check(c: Candidate) -> GateResult:
    """Scan the candidate's patched tree for its model and launch; ScanBlocked as ``raised``."""
    from sglforge.errors import EXIT_PROBLEMS, ScanBlocked
    from sglforge.scan import (
        CACHE_HIT,
        Node,
        blocking_findings,
        cached_scan,
        launch_of,
        report_of,
        scan_tree,
    )
    from sglforge.scan.waivers import waivers

    sc = c.scenario
    if sc is None:
        return skipped(NAME, "no smoke scenario (--skip-smoke)")
    if sc.accelerator != "rocm":
        return skipped(NAME, f"{sc.path} is not a ROCm scenario")
    config = c.model_config
    if config is None:
        return skipped(NAME, f"no config.json in {c.model} on this host")
    assert c.model is not None
    launch, _name = launch_of(sc)
    config_file = str(c.model / "config.json")

    def scan(_ref: str, _commit: str, _patches: object) -> list[Finding]:
        # the candidate's own checkout (the same pin and queue): the coverage gate reads it
        # too, and the construction built here is the one it checks
        tree = c.checkout.tree
        return scan_tree(
            tree,
            config,
            launch,
            c.target.device,
            config_file,
            built=lambda: c.construction,
            env=c.environment,
        )

    # served from the scan cache when `sglforge scan` (or an earlier publish) saw the same
    # commit, queue, config, launch and device
    node = Node(c.target.device, c.environment)
    where, found, hit = cached_scan(c.project, None, True, config, launch, node, config_file, scan)
    if hit:
        c.say(CACHE_HIT)
    report = report_of(c.model, sc, where, found, c.environment)
    blocked = blocking_findings(c.project, report)
    given, refused = waivers(report.findings, c.project.queue.patches)
    record = ScanRecord(report, tuple(given), tuple(refused))
    said = waivers_text(given, refused)
    if not blocked:
        detail = f"{len(report.findings)} finding(s), none blocking" + said
        c.say(f"scan: {detail}")
        return passed(NAME, detail, record)
    shown = "; ".join(
        f"{f.kind} {f.file if f.line is not None else f.entry}"
        + (f":{f.line}" if f.line is not None else "")
        for f in blocked[:3]
    )
    more = f" (+{len(blocked) - 3} more)" if len(blocked) > 3 else ""
    message = (
        f"scan at {report.ref} with the queue: {len(blocked)} blocking finding(s): {shown}{more}"
        + said
    )
    from sglforge.init import example_for

    example = example_for(sc.name, {p.name for p in c.project.queue.patches})
    error = ScanBlocked(
        message,
        (
            f"{sc.name} is the {example} example's scenario and needs its queue: start from "
            f"`sglforge init --example {example} DIR` (or import its patches); "
            if example
            else ""
        )
        + f"sglforge scan --model {c.model} --scenario {sc.path}; fix it in the queue, or "
        "add a 'Fixes-Scan: KIND WHERE' trailer to the patch that does",
    )
    return failed(NAME, message, str(error), EXIT_PROBLEMS, record, raised=error)


def waivers_text(given: Sequence[Waiver], refused: Sequence[Refused]) -> str:
    """``; N waived: FINDING by PATCH, ...; N Fixes-Scan trailer(s) refused: FINDING (PATCH:
    why), ...`` ("" when the queue names no finding): every output of the gate shows it."""
    parts = []
    if given:
        parts.append(f"{len(given)} waived: " + ", ".join(f"{w.key} by {w.patch}" for w in given))
    if refused:
        parts.append(
            f"{len(refused)} Fixes-Scan trailer(s) refused: "
            + ", ".join(f"{r.key} ({r.patch}: {r.why})" for r in refused)
        )
    return "".join(f"; {p}" for p in parts)
