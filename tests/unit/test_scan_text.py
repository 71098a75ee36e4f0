"""N11: scan's text shows the actionable part of every warning (which header, reached from
and loaded by what, and what to do) and counts what it shows: rows, not include lines."""

from __future__ import annotations

from sglforge.scan.findings import FAIL, WARN, Finding
from sglforge.scan.jit_findings import HINT, KIND
from sglforge.scan.text import scan_text

STORE = "python/sglang/jit_kernel/include/sgl_kernel/store.cuh"


def _warn(file: str, line: int, header: str) -> Finding:
    detail = (
        f"#include <{header}> is active when built for ROCm; reached from "
        "python/sglang/jit_kernel/csrc/dsv4/moe.cu, loaded by jit_kernel/dsv4/moe.py:39; "
        "this launch does not make sglforge see it compiled"
    )
    return Finding(
        KIND, WARN, file, line, "python/sglang/jit_kernel/csrc/dsv4/moe.cu", detail, HINT
    )


FINDINGS = (
    _warn(STORE, 17, "cuda_fp8.h"),
    _warn(STORE, 23, "cuda_bf16.h"),
    _warn(STORE, 40, "cuda_fp16.h"),
    _warn("python/sglang/jit_kernel/include/other.cuh", 5, "cuda_runtime.h"),
    Finding(
        "quant-exclude-unmatched", WARN, "config.json", None, "model.layers.78.*",
        "exclude entry model.layers.78.* matches no module", "check the exclude list",
    ),
)  # fmt: skip


def test_warnings_show_their_detail_and_hint_and_rows_are_counted() -> None:
    out = scan_text(FINDINGS)
    assert len(out.rows) == 3
    store = next(r for r in out.rows if r[2] == STORE)
    assert store[3].startswith("lines 17, 23, 40: #include <cuda_fp8.h> is active")
    assert "loaded by jit_kernel/dsv4/moe.py:39" in store[3] and "-v lists each" in store[3]
    other = next(r for r in out.rows if r[2].endswith("other.cuh"))
    assert other[3].startswith("line 5: #include <cuda_runtime.h>") and "more like" not in other[3]
    assert out.hints == (f"{HINT} (the warnings)", "check the exclude list (the warnings)")
    assert out.footer == "0 fail, 3 warn (5 warning findings in 3 rows): nothing blocks this launch"


def test_verbose_lists_each_and_fails_come_first() -> None:
    fail = Finding(KIND, FAIL, STORE, 9, "u", "compiled at run time", HINT)
    out = scan_text((*FINDINGS, fail), each=True)
    assert len(out.rows) == 6 and ("fail", KIND, f"{STORE}:9", "compiled at run time") in out.rows
    assert out.hints[0] == HINT and "check the exclude list (the warnings)" in out.hints
    assert out.footer == "1 fail, 5 warn"
    assert scan_text(()).footer == "0 fail, 0 warn: nothing blocks this launch"
