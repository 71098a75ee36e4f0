"""The config-only child: transformers' own configuration classes read a checkpoint's config.json.

Run as ``python -I -S configchild.py`` (:mod:`sglforge.construct.hfresolve` launches it): no
site-packages, no ``PYTHONPATH``, no torch; ``sys.path`` is only the folders of the real wheels
named on stdin (transformers at the version the sglang release pins, and what it imports to read
a configuration). Reads ``{"paths": [...], "configs": {key: config.json}}`` on stdin and, per
config, writes the checkpoint's config.json into an empty folder and loads it the way sglang's
``get_config`` does, with ``transformers.AutoConfig.from_pretrained(folder)`` (offline: the
folder is the whole model). Prints one JSON object on its last stdout line, per key either

- ``{"class", "transformers", "to_dict", "attribute_map", "properties"}``: the config class's
  name, the transformers version, ``to_dict()`` (transformers' own output: per-class defaults
  filled, legacy keys converted, ``rope_parameters`` as 5.x builds it), the class's
  ``attribute_map`` (aliases such as ``head_dim`` -> ``qk_rope_head_dim``) and the values of the
  class's read-only properties the config answers with; or
- ``{"fallback": reason}``: transformers' own class cannot read it here (a ``trust_remote_code``
  config, whose class is the checkpoint's own code; a model type this transformers does not know).

Self-contained on purpose: nothing of sglforge is importable here.
"""

# mypy: ignore-errors

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback


def _jsonable(value):
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _record(config) -> dict:
    import transformers

    cls = type(config)
    to_dict = config.to_dict()
    to_dict.pop("_name_or_path", None)  # the temporary folder; sglang names the model path
    properties = {}
    for klass in cls.__mro__:
        for name, member in vars(klass).items():
            if name.startswith("_") or name in properties or not isinstance(member, property):
                continue
            if name == "name_or_path":
                continue
            try:
                value = getattr(config, name)
            except Exception:  # a property that needs torch or a sub-config: not offered
                continue
            if _jsonable(value):
                properties[name] = value
    return {
        "class": cls.__name__,
        "transformers": transformers.__version__,
        "to_dict": json.loads(json.dumps(to_dict, default=str)),
        "attribute_map": dict(getattr(cls, "attribute_map", {}) or {}),
        "properties": properties,
    }


def _one(raw: dict) -> dict:
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if "auto_map" in raw:
        return {
            "fallback": "config.json has auto_map (trust_remote_code): its class is the "
            "checkpoint's own code, which is not run"
        }
    model_type = raw.get("model_type")
    if model_type not in CONFIG_MAPPING:
        return {"fallback": f"transformers does not know model_type {model_type!r}"}
    with tempfile.TemporaryDirectory(prefix="sglforge-config-") as folder:
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(raw, f)
        return _record(AutoConfig.from_pretrained(folder))


def main() -> None:
    doc = json.loads(sys.stdin.read())
    sys.path[:0] = list(doc["paths"])
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
    out = {}
    for key, raw in doc["configs"].items():
        try:
            out[key] = _one(raw)
        except Exception:  # one config transformers refuses does not hide the others
            out[key] = {"error": "".join(traceback.format_exc().splitlines(True)[-6:])}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
