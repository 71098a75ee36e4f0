"""The upgrade's report for people (``report-<ref>.md``, beside its JSON): the pins and the
verdict, each patch's action, the images with their smoke and bench, the gates, the config
items, the CHANGELOG entry and the time by stage; a view of the
:class:`~sglforge.upgrade_result.UpgradeResult` and the records of its targets' gates.

Every table is written by :func:`_table`, under its heading by :func:`_section`; a section
with nothing to show is left out. Free text in a cell has its pipes written as slashes
(:func:`_cell`), as this report always has."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sglforge.upgrade_result import TargetOutcome, UpgradeResult

if TYPE_CHECKING:
    from sglforge.gates.result import GateResult


def markdown(result: UpgradeResult) -> str:
    """The human report: pins, per patch what happened, builds, smoke figures, CHANGELOG."""
    lines = _head(result)
    for section in (_patches, _images, _gates, _configs, _changelog, _stages):
        lines += section(result)
    return "\n".join(lines)


def _head(result: UpgradeResult) -> list[str]:
    commit = f" (`{result.new_commit[:12]}`)" if result.new_commit else ""
    return [
        f"# sglforge upgrade {result.old_ref} -> {result.new_ref}",
        "",
        f"**{'READY TO MERGE' if result.ready else 'NOT READY'}**: {result.reason}",
        "",
        f"- old pin: `{result.old_ref}`",
        f"- new pin: `{result.new_ref}`{commit}",
        f"- written to the project: {'yes' if result.applied else 'no (nothing changed)'}",
        "",
    ]


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """The lines of a table, each cell as given."""
    return [
        _row(headers),
        "|" + "---|" * len(headers),
        *(_row(row) for row in rows),
    ]


def _row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _section(title: str, body: Sequence[str]) -> list[str]:
    """``## title`` over ``body`` and a blank line; nothing when the body is empty."""
    return [f"## {title}", "", *body, ""] if body else []


def _cell(text: str) -> str:
    return text.replace("|", "/")


def _patches(result: UpgradeResult) -> list[str]:
    rows = [(p.name, p.action, p.status, _cell(p.where)) for p in result.patches]
    headers = ("patch", "action", "status at new ref", "detail")
    return _section("Patches", _table(headers, rows) if rows else [])


def _images(result: UpgradeResult) -> list[str]:
    """Each target's image, build and smoke, then the bench of those that ran one."""
    if not result.targets:
        return []
    headers = ("target", "image", "mode", "build s", "smoke", "figures", "error")
    table = _table(headers, [_image_row(t) for t in result.targets])
    return _section("Images and smoke tests", table) + _section(
        "Serving benchmark", _bench_lines(result.targets)
    )


def _image_row(t: TargetOutcome) -> tuple[str, ...]:
    figures = ", ".join(f"{k}={v}" for k, v in sorted(t.smoke_figures.items()))
    smoke = t.smoke_verdict or ("-" if t.smoke_passed is None else str(t.smoke_passed))
    seconds = t.build_seconds if t.build_seconds is not None else "-"
    mode = t.build_mode or "-"
    return (t.target, f"`{t.image or '-'}`", mode, str(seconds), smoke, figures or "-", t.error)


def _bench_lines(targets: Sequence[TargetOutcome]) -> list[str]:
    benched = [t for t in targets if t.bench]
    if not benched:
        return []
    from sglforge.release import bench_line

    return [f"- {t.target}: {bench_line(t.bench)}" for t in benched]


def _gates(result: UpgradeResult) -> list[str]:
    rows = [_gate_row(t.target, g) for t in result.targets for g in t.gates]
    headers = ("target", "gate", "result", "detail")
    return _section("Gates", _table(headers, rows) if rows else [])


def _gate_row(target: str, g: GateResult) -> tuple[str, ...]:
    word = "skipped" if not g.ran else "passed" if g.ok else "FAILED"
    return (target, g.name, word, _cell(g.why or g.detail))


def _configs(result: UpgradeResult) -> list[str]:
    rows = [(t.target, name, st) for t in result.targets for name, st in t.configs]
    return _section("Config items", _table(("target", "item", "status"), rows) if rows else [])


def _changelog(result: UpgradeResult) -> list[str]:
    entry = [f"- {c}" for c in result.changelog]
    return _section("CHANGELOG entry (Unreleased, Changed)", entry)


def _stages(result: UpgradeResult) -> list[str]:
    rows = [(k, f"{v:.2f}") for k, v in result.stages.items()]
    return _section("Time by stage", _table(("stage", "seconds"), rows) if rows else [])
