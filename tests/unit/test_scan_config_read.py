"""scan says when config.json was not read by transformers' own class (issue 30: never silent)."""

from __future__ import annotations

import pytest

from sglforge.construct import Construction, literal_launch
from sglforge.scan import CONFIG_READ, config_read
from sglforge.scan.findings import WARN
from sglforge.targets import Device

DEVICE = Device("gfx950", "AMD Instinct MI355X", 256, 288, 8)


def _built(source: str) -> Construction:
    return Construction(DEVICE, literal_launch(["--tp", "8"]), dsa=None, config_source=source)


@pytest.mark.parametrize(
    "source",
    [
        "sglforge's hfconfig.HFConfig, not transformers' own class: config.json has auto_map",
        "sglforge's hfconfig.HFConfig, not transformers' own class: model type 'x' unknown",
        "sglforge's hfconfig.HFConfig, not transformers' own class: no wheels from the index",
    ],
)
def test_a_fallback_reading_is_a_warning_naming_why(source: str) -> None:
    (found,) = config_read(_built(source), "/m/config.json")
    assert (found.kind, found.severity, found.file) == (CONFIG_READ, WARN, "/m/config.json")
    assert source in found.detail and found.hint


@pytest.mark.parametrize("source", ["transformers 5.8.1 (GlmMoeDsaConfig)", ""])
def test_transformers_own_reading_or_no_construction_adds_nothing(source: str) -> None:
    assert config_read(_built(source), "config.json") == []
