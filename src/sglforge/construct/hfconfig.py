"""The checkpoint's config object in the construction child (child side).

Two forms. :func:`resolved` is the normal one: transformers' own configuration class read
config.json in the config-only child (:mod:`sglforge.construct.hfresolve`, at the version the
release pins), and :class:`Resolved` presents that reading (``to_dict()``, the class's
``attribute_map`` aliases and read-only properties, ``rope_scaling`` as 5.x's property over
``rope_parameters``) under the class's name, to sglang's own ``get_config``.

:class:`HFConfig` is the fallback, used only when transformers' own class cannot read the config
here (``trust_remote_code``, a model type it does not know, the wheels not to be had); the
construction then says so (``Construction.config_source``). It presents config.json the way
transformers 5.8.1's ``PreTrainedConfig`` does for what sglang reads of it (lines are 5.8.1's):

- a key config.json lacks takes ``PreTrainedConfig.__init__``'s default (the common keys,
  ``configuration_utils.py``: ``DEFAULTS`` below); any other missing key is an AttributeError;
- RoPE (``modeling_rope_utils.py:706-725`` ``convert_rope_params_to_dict``, called from
  ``configuration_utils.py:278-279`` for every config class with a ``rope_parameters`` field,
  as ``GlmMoeDsaConfig`` and ``DeepseekV3Config`` have): ``rope_parameters`` is config.json's
  ``rope_scaling`` or its ``rope_parameters`` or ``{}``; ``rope_theta`` moves into it (default
  ``default_theta`` 10000.0) and leaves the top level; ``standardize_rope_params``
  (``:727-758``, the one-dict case) sets ``rope_type`` (from a legacy ``type``, else
  ``"default"``) and, for llama3/yarn/longrope, ``original_max_position_embeddings``;
- ``rope_scaling`` is a property returning ``rope_parameters`` (``configuration_utils.py:483-489``),
  which sglang reads (``srt/configs/model_config.py:760`` at 0.5.14).

The fallback does not fill the per-class defaults transformers fills (``GlmMoeDsaConfig``:
``mlp_layer_types``, ``indexer_types``, ...): a config.json that omits them is built as written.
"""

# mypy: ignore-errors

from __future__ import annotations

import copy
import types

DEFAULT_THETA = 10_000.0  # RotaryEmbeddingConfigMixin.default_theta
SCALED_ROPE = ("llama3", "yarn", "longrope")

DEFAULTS = dict(
    pad_token_id=None,
    bos_token_id=None,
    eos_token_id=None,
    sep_token_id=None,
    decoder_start_token_id=None,
    tie_word_embeddings=True,
    is_encoder_decoder=False,
    is_decoder=False,
    add_cross_attention=False,
    output_hidden_states=False,
    output_attentions=False,
    return_dict=True,
    use_return_dict=True,
    torchscript=False,
    use_bfloat16=False,
    tie_encoder_decoder=False,
    torch_dtype=None,
    tokenizer_class=None,
    prefix=None,
    finetuning_task=None,
    task_specific_params=None,
    problem_type=None,
    chunk_size_feed_forward=0,
    num_labels=2,
)


def rope_parameters(config: dict) -> dict:
    """``rope_parameters`` as transformers 5.8.1 builds it from config.json (see above);
    pops ``rope_scaling`` and ``rope_theta`` from ``config``."""
    params = config.pop("rope_scaling", None) or config.get("rope_parameters") or {}
    params = dict(params)
    params.setdefault("rope_theta", config.pop("rope_theta", DEFAULT_THETA))
    factor = config.get("partial_rotary_factor")
    if factor is not None:
        params.setdefault("partial_rotary_factor", factor)
    params.setdefault("rope_type", params.get("type", "default"))
    if params["rope_type"] in SCALED_ROPE:
        if "original_max_position_embeddings" in config:
            params["original_max_position_embeddings"] = config["original_max_position_embeddings"]
        else:
            params.setdefault(
                "original_max_position_embeddings", config.get("max_position_embeddings")
            )
    return params


class HFConfig(types.SimpleNamespace):
    """config.json with transformers' defaults and RoPE form (the module docstring)."""

    def __init__(self, **config):
        config = copy.deepcopy(config)
        config["rope_parameters"] = rope_parameters(config)
        super().__init__(**{**DEFAULTS, **config})

    @property
    def rope_scaling(self):
        return self.rope_parameters

    @rope_scaling.setter
    def rope_scaling(self, value):
        self.rope_parameters = value

    def to_dict(self):
        return copy.deepcopy(vars(self))

    def get_text_config(self, *a, **k):
        return self

    def __getitem__(self, key):
        return getattr(self, key)


class Resolved(types.SimpleNamespace):
    """A config transformers' own class resolved in the config child
    (``construct.configchild``): ``to_dict()`` as transformers wrote it, the class's aliases
    (``attribute_map``) and read-only properties, and ``rope_scaling`` as 5.x's property
    (``rope_parameters``). Built by :func:`resolved`, named as transformers' class."""

    _record: dict = {}

    def __init__(self, model_path=None):
        super().__init__()
        if model_path is None:  # copy.deepcopy's reconstruction: the state follows
            return
        record = type(self)._record
        vars(self).update(copy.deepcopy(record["to_dict"]))
        self._name_or_path = model_path
        for name, value in record["properties"].items():
            if not hasattr(type(self), name):  # an alias or rope_scaling reads its target
                object.__setattr__(self, name, copy.deepcopy(value))

    @property
    def rope_scaling(self):
        return self.rope_parameters

    @rope_scaling.setter
    def rope_scaling(self, value):
        self.rope_parameters = value

    @property
    def torch_dtype(self):
        return getattr(self, "dtype", None)

    @torch_dtype.setter
    def torch_dtype(self, value):
        self.dtype = value

    def to_dict(self):
        return copy.deepcopy(vars(self))

    def update(self, values):
        for key, value in values.items():
            setattr(self, key, value)

    def get_text_config(self, *a, **k):
        return self

    def __getitem__(self, key):
        return getattr(self, key)


def _alias(target):
    def get(self):
        return getattr(self, target)

    def put(self, value):
        setattr(self, target, value)

    return property(get, put)


def resolved(record: dict, model_path: str = "") -> Resolved:
    """The config object for transformers' record ``record`` (its class name and aliases)."""
    names = {"_record": record}
    for alias, target in record.get("attribute_map", {}).items():
        names[alias] = _alias(target)
    cls = type(record["class"], (Resolved,), names)
    return cls(model_path)
