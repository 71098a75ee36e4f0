"""Issue 31 (E4): a Fixes-Scan: trailer waives a scan fail only when its patch touches the
named file (a source finding) or changes some file (a config finding); every waiver given
and every trailer refused is kept, for the gate to say and record."""

from __future__ import annotations

import json
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
    fixer = P("0002-guard.patch", (KERNEL_FILE, "python/sglang/x.py"), fixes(KERNEL.key))
    # a rename: the old path counts as touched
    mover = P("0003-move.patch", ("python/sglang/new.cuh",), fixes(OTHER.key), (OTHER.file,))
    quark = P("0004-quark.patch", ("python/sglang/srt/layers/quark.py",), fixes(EXCLUDE.key))
    empty = P("0005-empty.patch", (), fixes("quant-exclude-unmatched model.layers.78.a"))
    stale = P("0006-stale.patch", ("a.py",), fixes("cuda-only-jit python/gone.cuh"))
    spaced = P("0007-spaced.patch", (KERNEL_FILE,), fixes(f"cuda-only-jit   {KERNEL_FILE}"))
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
    fixer = P("0002-guard.patch", (KERNEL_FILE,), fixes(KERNEL.key))
    given, _ = waivers([KERNEL], [fixer])
    assert record(given) == [
        {"finding": KERNEL.key, "patch": "0002-guard.patch", "file": KERNEL_FILE}
    ]
    assert json.loads(label_value(given)) == record(given)
    assert label_value([]) == "[]"  # "no waiver" is recorded too
