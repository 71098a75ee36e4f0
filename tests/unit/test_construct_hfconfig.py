"""config.json's RoPE keys as the construction child presents them: transformers 5.8.1's rule.

sglang 0.5.14 pins transformers 5.8.1 and reads ``hf_text_config.rope_scaling``
(``srt/configs/model_config.py:760``), a property of transformers 5.x returning
``rope_parameters`` (``configuration_utils.py:483-489``); ``rope_parameters`` is built by
``convert_rope_params_to_dict`` and ``standardize_rope_params``
(``modeling_rope_utils.py:706-758``).
Each case below is one config.json form and what that code makes of it.
"""

from __future__ import annotations

from typing import Any

import pytest

from sglforge.construct.hfconfig import HFConfig

GLM52_SHIPPED = {"rope_parameters": {"rope_theta": 8000000, "rope_type": "default"}}
YARN = {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096}

CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # GLM-5.2 as it ships (written by transformers 5.x): taken as it is
    "shipped": (GLM52_SHIPPED, {"rope_theta": 8000000, "rope_type": "default"}),
    # legacy: rope_theta alone moves into rope_parameters, rope_type defaults
    "theta-only": ({"rope_theta": 1000000}, {"rope_theta": 1000000, "rope_type": "default"}),
    "theta-and-null-scaling": (
        {"rope_theta": 10000, "rope_scaling": None},
        {"rope_theta": 10000, "rope_type": "default"},
    ),
    # legacy scaling dict: it becomes rope_parameters, "type" gives rope_type
    "legacy-yarn": (
        {"rope_theta": 10000, "rope_scaling": YARN, "max_position_embeddings": 163840},
        {**YARN, "rope_theta": 10000, "rope_type": "yarn"},
    ),
    # nothing said: the default theta (RotaryEmbeddingConfigMixin.default_theta)
    "none": ({}, {"rope_theta": 10000.0, "rope_type": "default"}),
}


@pytest.mark.parametrize("form", CASES)
def test_rope_keys_read_as_transformers_5_reads_them(form: str) -> None:
    given, want = CASES[form]
    config = HFConfig(architectures=["GlmMoeDsaForCausalLM"], **given)
    assert config.rope_parameters == want
    assert config.rope_scaling == want  # the property sglang reads
    assert not hasattr(config, "rope_theta")  # popped into rope_parameters, as there
    assert config.to_dict()["rope_parameters"] == want


def test_a_yarn_form_without_its_original_length_takes_max_position_embeddings() -> None:
    config = HFConfig(rope_scaling={"type": "yarn", "factor": 4}, max_position_embeddings=8192)
    assert config.rope_scaling["original_max_position_embeddings"] == 8192


def test_the_caller_s_config_is_not_changed() -> None:
    given = {"rope_theta": 5, "rope_scaling": {"type": "linear", "factor": 2.0}}
    HFConfig(**given)
    assert given == {"rope_theta": 5, "rope_scaling": {"type": "linear", "factor": 2.0}}
