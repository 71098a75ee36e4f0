"""Issue 31 (E4): a Fixes-Scan: trailer waives a scan fail only when its patch touches the
named file (a source finding) or changes some file (a config finding); every waiver given
and every trailer refused is kept, for the gate to say and record."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from sglforge.scan.findings import FAIL, WARN, Finding
from sglforge.scan.waivers import blocking, label_value, record, waivers

KERNEL_FILE = "python/sglang/jit_kernel/csrc/elementwise/fused_metadata_copy.cuh"
KERNEL = Finding("cuda-only-jit", FAIL, KERNEL_FILE, 38, "u", "d")
OTHER = Finding("cuda-only-jit", FAIL, "python/sglang/jit_kernel/csrc/other.cuh", 9, "u", "d")
EXCLUDE = Finding("quant-exclude-unmatched", FAIL, "config.json", None, "model.layers.78.a", "d")
WARNING = Finding("cuda-only-jit", WARN, "python/sglang/jit_kernel/csrc/y.cuh", 3, "u", "d")


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
    return (("Upstream-Status", "Pending"), *(("Fixes-Scan", k) for k in keys))


def test_a_patch_not_touching_the_file_waives_nothing() -> None:
    # E4 as reported: a patch that only touches version.py names the kernel's fail
    liar = P("0001-version.patch", ("python/sglang/version.py",), fixes(KERNEL.key))
    assert blocking([KERNEL], [liar]) == [KERNEL]
    given, refused = waivers([KERNEL], [liar])
    assert given == [] and refused[0].why == f"the patch does not touch {KERNEL_FILE}"


def test_waivers_by_instance() -> None:
    findings = [KERNEL, OTHER, EXCLUDE, WARNING]
    fixer = P(
        "0002-guard.patch",
        (KERNEL_FILE, "python/sglang/x.py"),
        fixes(KERNEL.key),
        diff=writes(KERNEL_FILE, 38),
    )
    # a rename: the old path counts as touched, and its hunk wrote the flagged line
    mover = P(
        "0003-move.patch",
        ("python/sglang/new.cuh",),
        fixes(OTHER.key),
        (OTHER.file,),
        diff=writes(OTHER.file, 9),
    )
    quark = P("0004-quark.patch", ("python/sglang/srt/layers/quark.py",), fixes(EXCLUDE.key))
    empty = P("0005-empty.patch", (), fixes("quant-exclude-unmatched model.layers.78.a"))
    stale = P("0006-stale.patch", ("a.py",), fixes("cuda-only-jit python/gone.cuh"))
    spaced = P(
        "0007-spaced.patch",
        (KERNEL_FILE,),
        fixes(f"cuda-only-jit   {KERNEL_FILE}"),
        diff=writes(KERNEL_FILE, 38),
    )
    assert blocking(findings, [fixer]) == [OTHER, EXCLUDE]
    assert blocking(findings, [fixer, mover, quark]) == []
    assert blocking(findings, [empty]) == [KERNEL, OTHER, EXCLUDE]
    assert blocking(findings, [stale]) == [KERNEL, OTHER, EXCLUDE]
    assert blocking([KERNEL], [spaced]) == []
    # a kind of another finding on the same file waives nothing
    wrong_kind = P("0008.patch", (KERNEL_FILE,), fixes(f"quant-exclude-unmatched {KERNEL_FILE}"))
    assert blocking([KERNEL], [wrong_kind]) == [KERNEL]
    given, refused = waivers(findings, [fixer, mover, quark, empty, stale])
    assert [(w.key, w.patch, w.file) for w in given] == [
        (KERNEL.key, "0002-guard.patch", KERNEL_FILE),
        (OTHER.key, "0003-move.patch", OTHER.file),
        (EXCLUDE.key, "0004-quark.patch", "python/sglang/srt/layers/quark.py"),
    ]
    assert [(r.patch, r.why) for r in refused] == [
        ("0005-empty.patch", "the patch changes no file"),
        ("0006-stale.patch", "no such fail in this scan"),
    ]


def test_waivers_are_recorded_for_the_manifest_and_a_label() -> None:
    fixer = P("0002-guard.patch", (KERNEL_FILE,), fixes(KERNEL.key), diff=writes(KERNEL_FILE, 38))
    given, _ = waivers([KERNEL], [fixer])
    assert record(given) == [
        {"finding": KERNEL.key, "patch": "0002-guard.patch", "file": KERNEL_FILE}
    ]
    assert json.loads(label_value(given)) == record(given)
    assert label_value([]) == "[]"  # "no waiver" is recorded too


# Issue 42 (F5): a waiver needs the patch's hunks to have written the flagged line; a finding
# still present on the patched tree (a line the patch left alone) is never waived.
COMMENT = f"--- a/{KERNEL_FILE}\n+++ b/{KERNEL_FILE}\n@@ -120,1 +120,2 @@\n }}\n+// harmless\n"
ABOVE = f"--- a/{KERNEL_FILE}\n+++ b/{KERNEL_FILE}\n@@ -10,1 +10,4 @@\n a\n+b\n+c\n+d\n"
DROP = f"--- a/{KERNEL_FILE}\n+++ b/{KERNEL_FILE}\n@@ -10,3 +9,0 @@\n-a\n-b\n-c\n"


def test_a_patch_that_does_not_write_the_flagged_line_waives_nothing() -> None:
    cases = {
        "comment-after": COMMENT,  # REDTEAM-5's case: a comment appended to the file
        "lines-above": ABOVE,  # lines added above it (it moved, it did not change)
        "lines-removed": DROP,  # lines removed above it
        "context-only": writes(KERNEL_FILE, 38).replace("+guarded", " guarded"),
        "next-line": writes(KERNEL_FILE, 39),
    }
    for name, diff in cases.items():
        p = P(f"0004-{name}.patch", (KERNEL_FILE,), fixes(KERNEL.key), diff=diff)
        assert blocking([KERNEL], [p]) == [KERNEL], name
        given, refused = waivers([KERNEL], [p])
        assert given == [] and "line 38" in refused[0].why, name


def test_the_flagged_line_is_followed_through_later_patches() -> None:
    # 0001 writes the kernel's line 35; 0002 then adds three lines above it: the scan of the
    # whole queue flags line 38, which is 0001's line
    first = P("0001-guard.patch", (KERNEL_FILE,), fixes(KERNEL.key), diff=writes(KERNEL_FILE, 35))
    later = P("0002-more.patch", (KERNEL_FILE,), (), diff=ABOVE)
    assert blocking([KERNEL], [first, later]) == []
    # a later patch rewrote line 38 itself: the waiving patch's line is not the one flagged
    rewrote = P("0002-rewrite.patch", (KERNEL_FILE,), (), diff=writes(KERNEL_FILE, 38))
    early = P("0001-guard.patch", (KERNEL_FILE,), fixes(KERNEL.key), diff=writes(KERNEL_FILE, 38))
    given, refused = waivers([KERNEL], [early, rewrote])
    assert given == [] and "written by 0002-rewrite.patch" in refused[0].why
    # two fails of one key: only the line the patch wrote is waived
    again = Finding(KERNEL.kind, FAIL, KERNEL_FILE, 90, "u", "d")
    assert blocking([KERNEL, again], [early]) == [again]
