"""Bounds on the config.json values a construction sizes things by, checked before any child runs.

sglang builds one module (and one weight-loader entry) per expert and per layer, so a
config.json with ``n_routed_experts: 10**12`` took a construction to 22.6 GB of memory, and
``num_hidden_layers: 10**9`` ran for minutes (REDTEAM-5 F7). Real checkpoints are far inside
these bounds (the largest of each we know of, for scale: 384 routed experts in Kimi K2, 126
layers in Llama 3.1 405B, hidden size 16384 and MLP size 53248 there, a 262144-token
vocabulary in Gemma 3); the bounds leave an order of magnitude over those. A value outside
them, or one that is not a whole number, is refused with the file and key named, before the
child starts. Every dictionary of the config is checked (``text_config`` and the like hold a
model's sizes too).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from sglforge.errors import ConfigError

# key: (smallest, largest) accepted
BOUNDS: dict[str, tuple[int, int]] = {
    "n_routed_experts": (0, 4096),
    "num_experts": (0, 4096),
    "num_local_experts": (0, 4096),
    "n_shared_experts": (0, 64),
    "num_experts_per_tok": (0, 256),
    "moe_topk": (0, 256),
    "num_hidden_layers": (1, 1024),
    "num_nextn_predict_layers": (0, 64),
    "first_k_dense_replace": (0, 1024),
    "hidden_size": (1, 1 << 17),
    "intermediate_size": (1, 1 << 20),
    "moe_intermediate_size": (1, 1 << 20),
    "shared_expert_intermediate_size": (0, 1 << 20),
    "vocab_size": (1, 1 << 23),
    "num_attention_heads": (1, 4096),
    "num_key_value_heads": (1, 4096),
    "head_dim": (1, 4096),
    "kv_lora_rank": (0, 1 << 16),
    "q_lora_rank": (0, 1 << 16),
    "qk_nope_head_dim": (0, 4096),
    "qk_rope_head_dim": (0, 4096),
    "v_head_dim": (0, 4096),
    "n_group": (0, 4096),
    "topk_group": (0, 4096),
    "index_topk": (0, 1 << 20),
    "index_n_heads": (0, 4096),
    "index_head_dim": (0, 4096),
}


class ConfigOutOfBounds(ConfigError):
    """A config.json value that sizes the construction is outside what any model needs."""


def _values(config: Mapping[str, Any], where: str) -> Iterator[tuple[str, str, Any]]:
    """(path of the key, key, value) for every key of :data:`BOUNDS` in any nested object."""
    stack: list[tuple[str, Any]] = [(where, config)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, Mapping):
            for key, value in node.items():
                if key in BOUNDS:
                    yield f"{path}.{key}" if path != where else str(key), str(key), value
                if isinstance(value, Mapping | list):
                    stack.append((f"{path}.{key}" if path != where else str(key), value))
        elif isinstance(node, list):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(node))


def check(config: Mapping[str, Any], file: str) -> None:
    """Raise ConfigOutOfBounds, naming ``file`` and the key, for the first value out of bounds
    (None and absent keys are sglang's defaults: accepted; a list: each of its items)."""
    for path, key, value in _values(config, file):
        low, high = BOUNDS[key]
        # a list is one value per layer (Gemma 3n's intermediate_size)
        for one in value if isinstance(value, list) and value else [value]:
            _one(file, path, one, low, high)


def _one(file: str, path: str, value: Any, low: int, high: int) -> None:
    if value is not None:
        whole = isinstance(value, int) and not isinstance(value, bool)
        if not whole or not low <= value <= high:
            shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
            raise ConfigOutOfBounds(
                f"{file}: {path} = {shown} is outside what a construction accepts "
                f"(a whole number from {low} to {high}); sglang was not run",
                f"fix {path} in {file} (the checkpoint's own value)",
            )
