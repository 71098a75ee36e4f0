"""docs/bench.md's H200 table is what bench/data's script computes from the raw archives, and the
archives hold real sglang 0.5.14 output (not figures typed into the docs)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "bench" / "data" / "h200-2026-12-03"


def _analyze():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("h200_analyze", DATA / "analyze.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_table_is_the_scripts_output() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        _analyze().main()
    table = out.getvalue().strip()
    assert table.count("\n") >= 10
    assert table in (ROOT / "docs" / "bench.md").read_text(encoding="utf-8")


def test_the_archives_are_sglang_output_with_the_warmup_effect_in_them() -> None:
    f = _analyze().figures()
    assert f["boots"] == 13
    # the first probe after a boot is slower than the second in the median boot: the reason the
    # bench discards a warm-up probe
    assert f["warmup_gain"]["median"] > 0.05
    # requests of one wave are correlated: a request is never an independent sample
    assert f["icc_mean"] > 0.3
    assert all(s > 40 for s in f["ready_s"]["all"])
