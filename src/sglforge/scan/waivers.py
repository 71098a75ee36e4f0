"""Which scan fails a queue patch may waive, and the record of every waiver given.

A patch's ``Fixes-Scan: KIND WHERE`` trailer says it fixes the finding ``KIND WHERE``
(``Finding.key``). It waives that finding only when the patch can have fixed it:

- a source finding (``KIND FILE``, it has a line): the patch's hunks wrote the flagged line.
  The scan reads the tree with the whole queue applied, so its line is mapped back through
  the later patches to the waiving one; a line the waiving patch did not write (one it left
  as it was, as a patch appending a comment does, or one a later patch wrote) is a finding
  still present on the patched tree, and is never waived (issue 42, F5). A patch that does
  not touch ``FILE`` waives nothing either; each such trailer is reported as refused;
- a config finding (``KIND ENTRY``, about the model's config.json, which no patch can touch):
  the patch changes at least one file of the tree (a trailer on an empty patch waives nothing).

Every waiver given is kept (:class:`Waiver`) so that the gate can say what it waived and
record it in the image's manifest, a label and the release record (:func:`record`,
:func:`label_value`); a trailer that waives nothing is kept too (:class:`Refused`).
"""

from __future__ import annotations

import json
import re
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
    line: int | None = None  # the flagged line the patch wrote (a source finding)


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
    trailers that give none), each in queue order. ``patches`` is the whole queue, in order
    (the tree the scan read): a later patch may move or rewrite the flagged line."""
    queue = list(patches)
    fails: dict[str, list[Finding]] = {}
    for f in findings:
        if f.severity == FAIL:
            fails.setdefault(f.key, []).append(f)
    given: list[Waiver] = []
    refused: list[Refused] = []
    for n, patch in enumerate(queue):
        touched = touched_paths(patch)
        for key in fixes_scan_keys(patch):
            found = fails.get(key, [])
            if not found:
                refused.append(Refused(key, patch.name, "no such fail in this scan"))
            elif found[0].line is None:
                if touched:
                    given.append(Waiver(key, patch.name, sorted(touched)[0], found[0].detail))
                else:
                    refused.append(Refused(key, patch.name, "the patch changes no file"))
            elif found[0].file not in touched:
                refused.append(
                    Refused(key, patch.name, f"the patch does not touch {found[0].file}")
                )
            else:
                for f in found:
                    why = _not_written(f, queue, n)
                    if why:
                        refused.append(Refused(key, patch.name, why))
                    else:
                        given.append(Waiver(key, patch.name, f.file, f.detail, f.line))
    return given, refused


def blocking(findings: Sequence[Finding], patches: Iterable[PatchLike]) -> list[Finding]:
    """The fails that block ``upgrade``/``publish``: every fail no valid waiver covers."""
    given, _ = waivers(findings, list(patches))
    ok = {(w.key, w.line) for w in given}
    return [f for f in findings if f.severity == FAIL and (f.key, f.line) not in ok]


def _not_written(found: Finding, queue: Sequence[PatchLike], n: int) -> str:
    """Why ``queue[n]`` did not write the line ``found`` flags on the patched tree ("" when
    it did): the line is mapped back through the later patches, then looked up among
    ``queue[n]``'s added lines for that file."""
    line = found.line
    assert line is not None
    for later in reversed(queue[n + 1 :]):
        written, before = _through(line, _hunks(later, found.file))
        if written:
            return f"line {found.line} of {found.file} was written by {later.name}"
        line = before
    written, _ = _through(line, _hunks(queue[n], found.file))
    if written:
        return ""
    return (
        f"the patch does not change line {found.line} of {found.file}, where the scan still "
        "finds it on the patched tree"
    )


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _hunks(patch: PatchLike, file: str) -> list[tuple[int, int, str]]:
    """The hunks ``patch`` has for ``file`` (its new path): (old start, new start, the
    lines' first characters, `` ``, ``+`` or ``-``). Counted by the hunk's lengths, so a
    format-patch ``-- `` signature is no line."""
    lines = getattr(patch, "diff_lines", None)
    if lines is None:
        return []
    out: list[tuple[int, int, str]] = []
    current = ""
    it = iter(lines())
    for text in it:
        if text.startswith("+++ "):
            current = text[4:].split("\t")[0].strip().removeprefix("b/")
            continue
        m = _HUNK.match(text)
        if not m or current != file:
            continue
        old_left = int(m.group(2) or "1")
        new_left = int(m.group(4) or "1")
        tags: list[str] = []
        while old_left > 0 or new_left > 0:
            body = next(it, None)
            if body is None:
                break
            tag = body[:1] or " "
            if tag == "\\":
                continue  # "\ No newline at end of file"
            tags.append(tag)
            old_left -= tag != "+"
            new_left -= tag != "-"
        out.append((int(m.group(1)), int(m.group(3)), "".join(tags)))
    return out


def _through(line: int, hunks: list[tuple[int, int, str]]) -> tuple[bool, int]:
    """(whether these hunks added ``line`` of their new side, else where it was before)."""
    shift = 0
    for old_start, new_start, tags in hunks:
        # a side of length 0 names the line before the hunk (``@@ -4,0 +5,2 @@``)
        old = old_start + 1 if set(tags) <= {"+"} else old_start
        new = new_start + 1 if set(tags) <= {"-"} else new_start
        if line < new:
            break
        for tag in tags:
            if tag == "+":
                if new == line:
                    return True, line
                new += 1
            elif tag == "-":
                old += 1
            else:
                if new == line:
                    return False, old
                old += 1
                new += 1
        shift = old - new
    return False, line + shift


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
