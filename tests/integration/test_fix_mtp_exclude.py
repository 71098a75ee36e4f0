"""Patch 0002 does what it claims on the real v0.5.14 code: the MTP excludes are found.

sglang's import chain needs torch, triton and a GPU stack, so the patched code runs in
isolation: the functions and the exact statements involved are cut out of the real files
(the released 0.5.14 wheel, patched with ``git apply``) with ``ast`` and executed on their
own, with plain Python objects standing in for the model config and QuarkConfig (TEST
DOUBLES that carry only the attributes the code reads). What runs is sglang's code, in the
order sglang's loader runs it:

1. ``QuarkConfig.apply_weight_name_mapper`` (quark/quark.py) with the draft class's
   ``hf_to_sglang_mapper`` (``WeightsMapper`` from models/utils.py, its arguments read from
   ``DeepseekV3ForCausalLMNextN`` in models/deepseek_nextn.py): what ``_get_quantization_config``
   in model_loader/loader.py does before the model is built;
2. the Quark block of ``DeepseekV3ForCausalLMNextN.__init__`` (its lazy import removed: the
   function it imports is supplied), plus the patch's module-level helper;
3. ``should_ignore_layer`` (quark/utils.py) with the packed-module mapping the loader gives
   Quark, as ``QuarkConfig.get_quant_method`` calls it for each layer prefix.
"""

from __future__ import annotations
import __future__

import ast
import re
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Optional

import pytest

from sglang_release import release_tree

pytestmark = pytest.mark.pypi

NEXTN = "python/sglang/srt/models/deepseek_nextn.py"
QUARK_UTILS = "python/sglang/srt/layers/quantization/quark/utils.py"
QUARK = "python/sglang/srt/layers/quantization/quark/quark.py"
MODEL_UTILS = "python/sglang/srt/models/utils.py"
# What model_loader/loader.py::_get_quantization_config adds for Quark in 0.5.14.
QUARK_PACKED = {
    "gate_up_proj": ["gate_proj", "up_proj"],
    "fused_qkv_a_proj_with_mqa": ["q_a_proj", "kv_a_proj_with_mqa"],
}
SHARED = "mlp.shared_experts"


def _node(tree: ast.AST, kind: type, name: str) -> Any:
    for node in ast.walk(tree):
        if isinstance(node, kind) and getattr(node, "name", None) == name:
            return node
    raise AssertionError(f"{name} not found")


def _exec(nodes: list[ast.stmt], namespace: dict[str, Any]) -> dict[str, Any]:
    module = ast.Module(body=nodes, type_ignores=[])
    # Annotations stay strings (they name torch types this test does not load).
    code = compile(module, "<sglang extract>", "exec", flags=__future__.annotations.compiler_flag)
    exec(code, namespace)
    return namespace


class Sglang:
    """The pieces of one sglang tree this test runs."""

    def __init__(self, tree: Path) -> None:
        nextn = ast.parse((tree / NEXTN).read_text())
        utils = ast.parse((tree / QUARK_UTILS).read_text())
        quark = ast.parse((tree / QUARK).read_text())
        model_utils = ast.parse((tree / MODEL_UTILS).read_text())

        ns: dict[str, Any] = {
            "re": re,
            "Iterable": Iterable,
            "Mapping": Mapping,
            "MappingProxyType": MappingProxyType,
            "Optional": Optional,
            "dataclass": dataclass,
            "field": field,
        }
        names = ["should_ignore_layer", "check_equal_or_regex_match", "_is_equal_or_regex_match"]
        _exec([_node(utils, ast.FunctionDef, n) for n in names], ns)
        _exec([_node(model_utils, ast.ClassDef, "WeightsMapper")], ns)
        self.ns = ns
        self.should_ignore_layer = ns["should_ignore_layer"]

        # The draft class's mapper, built from the literal arguments in the class body.
        cls = _node(nextn, ast.ClassDef, "DeepseekV3ForCausalLMNextN")
        (assign,) = [
            s
            for s in cls.body
            if isinstance(s, ast.Assign)
            and any(getattr(t, "id", None) == "hf_to_sglang_mapper" for t in s.targets)
        ]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in assign.value.keywords}
        self.mapper = ns["WeightsMapper"](**kwargs)

        apply_mapper = _node(quark, ast.FunctionDef, "apply_weight_name_mapper")
        self.apply_weight_name_mapper = _exec([apply_mapper], dict(ns))[apply_mapper.name]

        # Module-level statements the patch adds (helpers), then the Quark block of __init__.
        helpers = [
            s
            for s in nextn.body
            if isinstance(s, ast.FunctionDef | ast.Assign)
            and (
                (isinstance(s, ast.FunctionDef) and "nextn" in s.name)
                or (
                    isinstance(s, ast.Assign)
                    and any("NEXTN" in getattr(t, "id", "") for t in s.targets)
                )
            )
        ]
        init = _node(cls, ast.FunctionDef, "__init__")
        start = [
            i
            for i, s in enumerate(init.body)
            if isinstance(s, ast.Assign) and ast.unparse(s) == "nextn_quant_config = quant_config"
        ][0]
        block = init.body[start : start + 2]
        assert isinstance(block[1], ast.If) and "quark" in ast.unparse(block[1].test)
        block = [_drop_imports(s) for s in block]
        self.quark_block = compile(
            ast.Module(body=block, type_ignores=[]), "<DeepseekV3ForCausalLMNextN.__init__>", "exec"
        )
        self.helper_ns = _exec(helpers, dict(ns))

    def draft_excludes(self, exclude: list[str], num_hidden_layers: int) -> list[str] | None:
        """The exclude list the draft model's layers are looked up in (None: not quantized)."""
        quant = QuarkConfigStandIn(list(exclude))
        self.apply_weight_name_mapper(quant, self.mapper)  # the loader, before the model
        ns = dict(self.helper_ns)
        ns.update(
            quant_config=quant,
            config=types.SimpleNamespace(num_hidden_layers=num_hidden_layers),
            self=types.SimpleNamespace(hf_to_sglang_mapper=self.mapper),
        )
        exec(self.quark_block, ns)
        nextn = ns["nextn_quant_config"]
        return None if nextn is None else list(nextn.exclude_layers)

    def excluded(self, prefix: str, exclude: list[str]) -> bool:
        """What QuarkConfig.get_quant_method decides for the layer built under ``prefix``."""
        return bool(self.should_ignore_layer(prefix, ignore=exclude, fused_mapping=QUARK_PACKED))


def _drop_imports(stmt: ast.stmt) -> ast.stmt:
    class Dropper(ast.NodeTransformer):
        def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST:
            return ast.Pass()

    return ast.fix_missing_locations(Dropper().visit(stmt))


class QuarkConfigStandIn:
    """Stand-in for QuarkConfig (TEST DOUBLE): the attributes the code under test reads."""

    def __init__(self, exclude_layers: list[str]) -> None:
        self.exclude_layers = exclude_layers

    def get_name(self) -> str:
        return "quark"


def quark_excludes(layer: int) -> list[str]:
    """An exclude list as Quark exports it: lm_head, the gates, the MTP shared expert."""
    return [
        "lm_head",
        "re:model\\.layers\\.\\d+\\.mlp\\.gate$",
        *(f"model.layers.{layer}.{SHARED}.{p}" for p in ("gate_proj", "up_proj", "down_proj")),
    ]


@pytest.fixture(scope="module")
def stock_and_patched(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Sglang]:
    base = tmp_path_factory.mktemp("v0.5.14")
    return {
        "stock": Sglang(release_tree(base / "stock", "0.5.14", patched=False)),
        "patched": Sglang(release_tree(base / "patched", "0.5.14", patched=True)),
    }


@pytest.fixture(scope="module")
def patched(stock_and_patched: dict[str, Sglang]) -> Sglang:
    return stock_and_patched["patched"]


@pytest.mark.parametrize("proj", ["gate_up_proj", "down_proj"])
def test_glm_mtp_shared_expert_is_excluded(patched: Sglang, proj: str) -> None:
    excludes = patched.draft_excludes(quark_excludes(78), num_hidden_layers=78)
    assert excludes is not None
    assert patched.excluded(f"model.decoder.{SHARED}.{proj}", excludes)


def test_glm_mtp_other_layers_stay_quantized(patched: Sglang) -> None:
    excludes = patched.draft_excludes(quark_excludes(78), num_hidden_layers=78)
    assert excludes is not None
    assert not patched.excluded("model.decoder.mlp.experts", excludes)
    assert not patched.excluded("model.decoder.self_attn.fused_qkv_a_proj_with_mqa", excludes)
    # Entries of the target model are kept as they were (the regex, lm_head).
    assert patched.excluded("model.layers.3.mlp.gate", excludes)
    assert patched.excluded("lm_head", excludes)


@pytest.mark.parametrize("proj", ["gate_up_proj", "down_proj"])
def test_stock_v0_5_14_misses_the_glm_mtp_shared_expert(
    stock_and_patched: dict[str, Sglang], proj: str
) -> None:
    # The bug: in stock 0.5.14 the lookup misses and the bf16 expert is built as MXFP4.
    stock = stock_and_patched["stock"]
    excludes = stock.draft_excludes(quark_excludes(78), num_hidden_layers=78)
    assert excludes is not None
    assert not stock.excluded(f"model.decoder.{SHARED}.{proj}", excludes)


@pytest.mark.parametrize("proj", ["gate_up_proj", "down_proj"])
def test_deepseek_layer_61_is_still_excluded_and_unchanged(
    stock_and_patched: dict[str, Sglang], proj: str
) -> None:
    patched, stock = stock_and_patched["patched"], stock_and_patched["stock"]
    after = patched.draft_excludes(quark_excludes(61), num_hidden_layers=61)
    before = stock.draft_excludes(quark_excludes(61), num_hidden_layers=61)
    assert after is not None and after == before
    assert patched.excluded(f"model.decoder.{SHARED}.{proj}", after)


def test_mtp_own_modules_map_to_model_not_decoder(patched: Sglang) -> None:
    excludes = patched.draft_excludes(
        ["model.layers.78.eh_proj", "model.layers.78.self_attn.o_proj"], num_hidden_layers=78
    )
    assert excludes is not None
    assert patched.excluded("model.eh_proj", excludes)
    assert patched.excluded("model.decoder.self_attn.o_proj", excludes)
    assert not patched.excluded("model.decoder.eh_proj", excludes)


def test_a_wholly_excluded_mtp_layer_still_drops_the_quant_config(patched: Sglang) -> None:
    assert patched.draft_excludes(["model.layers.78"], num_hidden_layers=78) is None
    assert patched.draft_excludes(["model.layers.61"], num_hidden_layers=61) is None
