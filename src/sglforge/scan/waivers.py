"""Which scan fails a queue patch may waive, and the record of every waiver given.

A patch's ``Fixes-Scan: KIND WHERE`` trailer says it fixes the finding ``KIND WHERE``
(``Finding.key``). It waives that finding only when the patch can have fixed it:

- a source finding (``KIND FILE``, it has a line): the patch touches ``FILE`` (a new, changed,
  deleted or renamed path of its diff). A patch that touches other files waives nothing, and
  its trailer is reported as refused;
- a config finding (``KIND ENTRY``, about the model's config.json, which no patch can touch):
  the patch changes at least one file of the tree (a trailer on an empty patch waives nothing).

Every waiver given is kept (:class:`Waiver`) so that the gate can say what it waived and
record it in the image's manifest, a label and the release record (:func:`record`,
:func:`label_value`); a trailer that waives nothing is kept too (:class:`Refused`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sglforge.provenance import (
    LABEL_SCAN_WAIVERS,
    TrailedPatch,
    fixes_scan_keys,
    touched_paths,
)
from sglforge.scan.findings import FAIL, Finding

# The image label holding the waivers (compact JSON, ``label_value``): provenance's.
WAIVERS_LABEL = LABEL_SCAN_WAIVERS
PatchLike = TrailedPatch  # what the rule reads of a queue patch (``queue.series.Patch``)


@dataclass(frozen=True)
class Waiver:
    """The fail ``key`` (``KIND WHERE``) waived by ``patch``, which touches ``file``."""

    key: str
    patch: str
    file: str
    detail: str = ""


@dataclass(frozen=True)
class Refused:
    """A ``Fixes-Scan:`` trailer of ``patch`` that waives nothing, and why."""

    key: str
    patch: str
    why: str


def waivers(
    findings: Sequence[Finding], patches: Iterable[PatchLike]
) -> tuple[list[Waiver], list[Refused]]:
    """(the waivers the queue's ``Fixes-Scan:`` trailers give for ``findings``' fails, the
    trailers that give none), each in queue order."""
    fails: dict[str, Finding] = {}
    for f in findings:
        if f.severity == FAIL:
            fails.setdefault(f.key, f)
    given: list[Waiver] = []
    refused: list[Refused] = []
    for patch in patches:
        touched = touched_paths(patch)
        for key in fixes_scan_keys(patch):
            found = fails.get(key)
            if found is None:
                refused.append(Refused(key, patch.name, "no such fail in this scan"))
            elif found.line is not None and found.file not in touched:
                refused.append(Refused(key, patch.name, f"the patch does not touch {found.file}"))
            elif found.line is None and not touched:
                refused.append(Refused(key, patch.name, "the patch changes no file"))
            else:
                where = found.file if found.line is not None else sorted(touched)[0]
                given.append(Waiver(key, patch.name, where, found.detail))
    return given, refused


def blocking(findings: Sequence[Finding], patches: Iterable[PatchLike]) -> list[Finding]:
    """The fails that block ``upgrade``/``publish``: every fail no valid waiver covers."""
    given, _ = waivers(findings, list(patches))
    ok = {w.key for w in given}
    return [f for f in findings if f.severity == FAIL and f.key not in ok]


def record(given: Sequence[Waiver]) -> list[dict[str, str]]:
    """The waivers as the manifest and the release record hold them (``scan.waivers``)."""
    return [{"finding": w.key, "patch": w.patch, "file": w.file} for w in given]


def refused_record(refused: Sequence[Refused]) -> list[dict[str, str]]:
    """The refused trailers as the release record holds them (``scan.refused``)."""
    return [{"finding": r.key, "patch": r.patch, "why": r.why} for r in refused]


def label_value(given: Sequence[Waiver]) -> str:
    """The waivers as the ``io.sglforge.scan-waivers`` label holds them (compact JSON;
    an empty list when none were given, so that "none" is recorded too)."""
    return json.dumps(record(given), separators=(",", ":"), sort_keys=True)


__all__ = ["WAIVERS_LABEL", "Refused", "Waiver", "blocking", "label_value"]
__all__ += ["record", "refused_record", "waivers"]
