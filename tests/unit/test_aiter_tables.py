"""The base's aiter tables cross from the probe container as one typed value (``AiterTables``),
and ``overlay_configs.base_aiter`` reads its fields, not a dict's keys."""

from __future__ import annotations

import pytest

from sglforge.bases import AiterTables, aiter_tables_from
from sglforge.engine.errors import BuildFailed

PROBED = {
    "root": "/opt/venv/lib/python3.10/site-packages",
    "configs_dir": "/opt/venv/lib/python3.10/site-packages/aiter/configs",
    "tuned_fmoe": "token,model_dim\n1,7168\n",
    "untuned_fmoe_header": "token,model_dim",
    "model_configs": {"a_tuned_fmoe.csv": "token,model_dim\n2,7168\n"},
}


def test_the_probe_output_becomes_frozen_tables() -> None:
    tables = aiter_tables_from("base:1", PROBED)
    assert tables == AiterTables(
        root=PROBED["root"],
        configs_dir=PROBED["configs_dir"],
        tuned_fmoe="token,model_dim\n1,7168\n",
        untuned_fmoe_header="token,model_dim",
        model_configs={"a_tuned_fmoe.csv": "token,model_dim\n2,7168\n"},
    )
    with pytest.raises(AttributeError):
        tables.root = "/elsewhere"  # type: ignore[misc]


@pytest.mark.parametrize("data", [{"root": None}, {}, None, []])
def test_no_aiter_is_none(data: object) -> None:
    assert aiter_tables_from("base:1", data) is None


def test_no_tuned_table_is_kept_as_none() -> None:
    tables = aiter_tables_from("base:1", {**PROBED, "tuned_fmoe": None, "model_configs": None})
    assert tables is not None and tables.tuned_fmoe is None and tables.model_configs == {}


def test_an_unreadable_merged_file_names_the_file_and_the_image() -> None:
    data = {**PROBED, "model_configs": {"b_tuned_fmoe.csv": None}}
    with pytest.raises(BuildFailed) as err:
        aiter_tables_from("base:1", data)
    assert "base:1" in str(err.value) and "model_configs/b_tuned_fmoe.csv" in str(err.value)
