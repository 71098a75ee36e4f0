"""The scan gate: a fail blocks unless a queue patch's Fixes-Scan: trailer names it."""

from __future__ import annotations

from sglforge.scan.findings import FAIL, WARN, Finding, blocking, waived

KERNEL = Finding(
    "cuda-only-jit", FAIL, "python/sglang/jit_kernel/csrc/elementwise/x.cuh", 38, "u", "d"
)
EXCLUDE = Finding("quant-exclude-unmatched", FAIL, "config.json", None, "model.layers.78.a", "d")
WARNING = Finding("cuda-only-jit", WARN, "python/sglang/jit_kernel/csrc/y.cuh", 3, "u", "d")


def test_keys_name_the_file_or_the_entry() -> None:
    assert KERNEL.key == "cuda-only-jit python/sglang/jit_kernel/csrc/elementwise/x.cuh"
    assert EXCLUDE.key == "quant-exclude-unmatched model.layers.78.a"


def test_only_named_fails_are_waived() -> None:
    findings = [KERNEL, EXCLUDE, WARNING]
    assert blocking(findings, []) == [KERNEL, EXCLUDE]
    trailers = [
        ("Upstream-Status", "Backport [0.5.15]"),
        ("fixes-scan", "cuda-only-jit   python/sglang/jit_kernel/csrc/elementwise/x.cuh"),
    ]
    assert waived(findings, trailers) == {KERNEL.key}
    assert blocking(findings, trailers) == [EXCLUDE]
    trailers.append(("Fixes-Scan", "quant-exclude-unmatched model.layers.78.a"))
    assert blocking(findings, trailers) == []
    # a trailer naming another file or kind waives nothing
    assert blocking([KERNEL], [("Fixes-Scan", "cuda-only-jit python/other.cuh")]) == [KERNEL]
    assert blocking([KERNEL], [("Fixes-Scan", f"quant-exclude-unmatched {KERNEL.file}")]) == [
        KERNEL
    ]
