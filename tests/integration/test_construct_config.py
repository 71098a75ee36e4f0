"""config.json read by the transformers the release pins, in the config-only child (issue 30).

The release's own metadata names the version (sglang 0.5.14's wheel: ``Requires-Dist:
transformers==5.8.1``); that wheel and the closure of its requirements come from the package
index (cached), and ``transformers.AutoConfig.from_pretrained`` reads the checkpoint's
config.json in a child without site-packages or torch. About 4 s once the wheels are cached
(about 40 MB the first time: numpy, tokenizers and transformers are most of it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglforge import construct
from sglforge.construct import hfresolve

pytestmark = pytest.mark.pypi

STANDIN = Path(__file__).resolve().parents[1] / "standin"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> hfresolve.Environment:
    tree = tmp_path_factory.mktemp("release")  # only what names the release: its version
    (tree / "sglang").mkdir()
    (tree / "sglang" / "_version.py").write_text('__version__ = "0.5.14"\n')
    return hfresolve.environment(tree)


def test_the_pinned_transformers_reads_the_shipped_and_legacy_forms(
    env: hfresolve.Environment,
) -> None:
    assert env.transformers == "5.8.1" and env.missing is None
    names = {p.name.split("-")[0] for p in env.paths}
    assert {"transformers", "huggingface_hub", "tokenizers", "numpy"} <= names
    assert not names & {"torch", "typer", "hf_xet", "fsspec"}  # never imported for a config
    forms = {
        f: json.loads((STANDIN / f / "config.json").read_text())
        for f in ("model-mxfp4-rope-parameters", "model-mxfp4-rope-theta")
    }
    got = hfresolve.resolve(env, forms)
    for form, record in got.items():
        assert record["class"] == "GlmMoeDsaConfig" and record["transformers"] == "5.8.1"
        theta = 8000000 if form.endswith("parameters") else 1000000
        # transformers' own rope conversion: rope_theta moves into rope_parameters
        assert record["to_dict"]["rope_parameters"] == {"rope_theta": theta, "rope_type": "default"}
        assert "rope_theta" not in record["to_dict"]
        assert record["properties"]["rope_scaling"] == record["to_dict"]["rope_parameters"]
        # the class's own defaults: 3 dense layers (first_k_dense_replace) then sparse
        layers = record["to_dict"]["mlp_layer_types"]
        assert layers[:4] == ["dense", "dense", "dense", "sparse"] and len(layers) == 78
        assert record["attribute_map"]["head_dim"] == "qk_rope_head_dim"
        assert construct.config_source(record) == "transformers 5.8.1 (GlmMoeDsaConfig)"
    # cached by (transformers version, config.json): the same answer without a child
    again = hfresolve.resolve(env, forms)
    assert again == got


def test_a_config_transformers_cannot_read_falls_back_and_says_why(
    env: hfresolve.Environment,
) -> None:
    config = json.loads((STANDIN / "model-mxfp4" / "config.json").read_text())
    got = hfresolve.resolve(
        env,
        {
            "remote": config | {"auto_map": {"AutoConfig": "configuration_x.XConfig"}},
            "unknown": config | {"model_type": "not_a_transformers_type"},
        },
    )
    assert "trust_remote_code" in got["remote"]["fallback"]
    assert "not_a_transformers_type" in got["unknown"]["fallback"]
    for record in got.values():
        source = construct.config_source(record)
        assert source.startswith("sglforge's hfconfig.HFConfig, not transformers' own class: ")


def test_a_reading_is_keyed_by_the_config_child_s_own_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """A record another version of the config child wrote is another key: a warm cache never
    hands a newer child a stale reading."""
    config = {"model_type": "glm_moe_dsa", "index_topk_freq": 4}
    now = hfresolve._key("5.19.0", config)
    assert now == hfresolve._key("5.19.0", dict(config))
    assert now != hfresolve._key("5.8.1", config) != hfresolve._key("5.19.0", {**config, "a": 1})
    monkeypatch.setattr(hfresolve, "_reader", lambda: "another config child")
    assert hfresolve._key("5.19.0", config) != now
