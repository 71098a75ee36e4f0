"""docs/bench.md's H200 table is what bench/data's script computes from the raw archives, and the
archives hold real sglang 0.5.14 output (not figures typed into the docs)."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "bench" / "data" / "h200-2026-12-03"


@functools.cache
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


def test_the_calibration_archives_are_what_sglforge_recorded() -> None:
    """Runs 4-6 went through ``sglforge bench --calibrate``: the script's figure for each boot is
    the one sglforge wrote into its noise profile, recomputed from bench_serving's own JSONL."""
    g = _analyze().sglforge_figures()
    assert g["boots"] == 9
    assert g["gate_figure_reproduced"] < 1e-9
    sd_all, _ = g["boot_sd"]["all_128"]
    sd_later, df_later = g["boot_sd_without_first_boot"]["all_128"]
    # the first boot of a machine lease is the outlier the priming boot discards
    assert df_later == 4 and sd_later < sd_all / 3
    # more requests a boot narrow the boot-to-boot spread (8 waves against 4 and 2)
    later = g["boot_sd_without_first_boot"]
    assert later["all_128"][0] < later["first_64"][0] < later["first_32"][0]
    assert g["ready_s"]["fresh_machine"] == [119.1, 89.1]
