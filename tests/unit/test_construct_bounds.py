"""config.json values that size the construction are bounded before any child starts (REDTEAM-5 F7).

``n_routed_experts: 10**12`` took the construction to 22.6 GB and then "nothing blocks"; each
value below is refused with the file and the key named, and no child is started.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sglforge import construct
from sglforge.cli import main
from sglforge.construct import bounds, sandbox
from sglforge.errors import EXIT_USAGE
from sglforge.targets import load_targets

REPO = Path(__file__).resolve().parents[2]
GLM = json.loads((REPO / "tests" / "standin" / "model-mxfp4" / "config.json").read_text())

BAD: list[tuple[str, dict[str, Any], str]] = [
    ("experts", {"n_routed_experts": 10**12, "num_experts_per_tok": 10**6}, "n_routed_experts"),
    ("layers", {"num_hidden_layers": 10**9}, "num_hidden_layers"),
    ("negative-layers", {"num_hidden_layers": -5}, "num_hidden_layers"),
    ("hidden", {"hidden_size": 2**62}, "hidden_size"),
    ("vocab-string", {"vocab_size": "154880"}, "vocab_size"),
    ("float", {"moe_intermediate_size": 2048.5}, "moe_intermediate_size"),
    ("bool", {"num_attention_heads": True}, "num_attention_heads"),
    ("nested", {"text_config": {"num_local_experts": 10**7}}, "text_config.num_local_experts"),
    ("per-layer-list", {"intermediate_size": [8192, 10**9]}, "intermediate_size"),
]


@pytest.mark.parametrize(("change", "key"), [(c, k) for _, c, k in BAD], ids=[i for i, _, _ in BAD])
def test_a_value_out_of_bounds_is_refused_naming_the_file_and_key(
    change: dict[str, Any], key: str
) -> None:
    with pytest.raises(bounds.ConfigOutOfBounds) as got:
        bounds.check({**GLM, **change}, "/m/config.json")
    assert got.value.exit_code == EXIT_USAGE
    assert got.value.message.startswith(f"/m/config.json: {key} = ")
    assert "sglang was not run" in got.value.message


def test_real_checkpoints_pass() -> None:
    bounds.check(GLM, "config.json")
    shipped = sorted((REPO / "tests").rglob("config.json"))
    assert len(shipped) >= 2
    for path in shipped:
        bounds.check(json.loads(path.read_text()), str(path))
    bounds.check({**GLM, "head_dim": None, "intermediate_size": [16384] * 35}, "config.json")


def test_no_child_starts_for_a_config_out_of_bounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_child(*_a: object, **_k: object) -> None:
        raise AssertionError("a child was started")

    monkeypatch.setattr(sandbox, "run", no_child)
    tree = tmp_path / "python"
    (tree / "sglang" / "srt").mkdir(parents=True)
    device = load_targets(REPO).resolve("mi355x").device
    with pytest.raises(bounds.ConfigOutOfBounds, match="n_routed_experts"):
        construct.build(tree, {**GLM, "n_routed_experts": 10**12}, [], device)


def test_scan_refuses_it_with_exit_2(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({**GLM, "num_hidden_layers": 10**9}))
    (tmp_path / "patches").mkdir()
    res = CliRunner().invoke(main, ["--root", str(tmp_path), "scan", "--model", str(model)])
    assert res.exit_code == EXIT_USAGE, res.output
    assert f"{model / 'config.json'}: num_hidden_layers = 1000000000 is outside" in res.output
    assert f"fix num_hidden_layers in {model / 'config.json'}" in res.output
