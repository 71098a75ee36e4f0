"""Every sglang release the index has, from the queue's pin to the newest, through sglang's own
construction on GLM-5.2's config.json (issue 41 item 2).

The config is ``tests/data/glm52/config.json`` (the closest public copy of the checkpoint's; its
README says what it lacks): ``rope_parameters``, ``index_topk_freq``, ``index_topk_pattern``,
``index_skip_topk_offset``, a 1M context. The launch is the README's (the MI355X MTP
scenario) as ``scan`` passes it (the scenario's model path, which exists on the node only).
Each release either constructs GLM-5.2 natively (``GlmMoeDsaForCausalLM`` and its NextN draft)
or the construction says, with upstream's lines, that the release does not serve it natively
(``construct.child._check_registered``); never a failure of our own stand-ins, and no
``scan-incomplete`` finding.

Cached: an outcome is kept in the shared PyPI cache (``construct-releases/``), sealed by this
machine's key (``sglforge.cachekey``), keyed by the wheel's sha256, the config, the launch, the
device, the node's environment and the construction code's digest (``sglforge/construct/``), so
a run costs a construction only for a release or a construction change it has not seen (about
10 s each here; the eleven releases 0.5.14..0.5.23 once per machine).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest

from sglforge import cache, construct, pypi
from sglforge.cachekey import opened, seal
from sglforge.construct import lock
from sglforge.construct.environment import default_env
from sglforge.scan import launch_of, quant
from sglforge.scan.cache import code_id
from sglforge.scenario.file import load_scenario
from sglforge.standin.base import release_wheel
from sglforge.targets import load_targets

pytestmark = pytest.mark.pypi

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "tests" / "data" / "glm52"
SCENARIO = REPO / "smoke" / "glm5-mxfp4-mtp-mi355x.toml"
NOT_NATIVE = "does not serve the model natively"
KIND = "construct-release"


def _pin() -> str:
    doc = tomllib.loads((REPO / "patches" / "upstream.toml").read_text())
    return str(doc["ref"]).removeprefix("v")


def _construction_code() -> str:
    folder = Path(construct.__file__).parent
    return code_id(*sorted(f"construct/{p.name}" for p in folder.glob("*.py")))


def _key(wheel: Path, inputs: dict[str, Any]) -> str:
    doc = {"wheel": lock.sha256(wheel), **inputs, "python": sys.version_info[:2]}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def _entry(key: str) -> Path:
    return cache.pypi_cache() / "construct-releases" / f"{key}.json"


def _cached(key: str) -> dict[str, Any] | None:
    try:
        return opened(KIND, key, json.loads(_entry(key).read_text()))
    except (OSError, ValueError):
        return None


def _store(key: str, outcome: dict[str, Any]) -> None:
    sealed = seal(KIND, key, outcome)
    if sealed is None:
        return
    path = _entry(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(sealed, f)
    os.replace(tmp, path)


def _construct(wheel: Path, where: Path, inputs: dict[str, Any]) -> dict[str, Any]:
    """The release's construction of GLM-5.2: constructed (classes, findings) or why not."""
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(where, [n for n in archive.namelist() if n.startswith("sglang/")])
    config = inputs["config"]
    try:
        built = construct.build(where, config, inputs["launch"], inputs["device"])
    except construct.ConstructionError as exc:
        return {"outcome": "error", "detail": str(exc)}
    found = quant.findings(built, config, "config.json")
    return {
        "outcome": "constructed",
        "classes": {name: m.cls for name, m in built.models.items()},
        "config_source": built.config_source,
        "incomplete": [f.detail for f in found if f.kind == "scan-incomplete"],
    }


def test_every_release_from_the_pin_constructs_glm52_or_says_it_is_not_native(
    tmp_path: Path,
) -> None:
    device = load_targets(REPO).resolve("mi355x").device
    inputs = {
        "config": json.loads((MODEL / "config.json").read_text()),
        # as ``sglforge scan`` launches it: the scenario's model path, which is the node's
        "launch": launch_of(load_scenario(SCENARIO))[0],
        "device": device,
        "env": default_env(device.gfx).to_dict()["variables"],
        "code": _construction_code(),
    }
    versions = [str(v) for v in pypi.available_versions("sglang", f">={_pin()}")]
    assert versions[0] == _pin() and len(versions) >= 2, versions
    outcomes = {}
    for version in versions:
        wheel = release_wheel(version)
        keyed = {**inputs, "device": construct.device_json(device)}
        key = _key(wheel, keyed)
        got = _cached(key)
        if got is None:
            got = _construct(wheel, tmp_path / version, inputs)
            if _acceptable(got):
                _store(key, got)
        outcomes[version] = got
    wrong = {v: got for v, got in outcomes.items() if not _acceptable(got)}
    assert not wrong, json.dumps(wrong, indent=1)


def _acceptable(got: dict[str, Any]) -> bool:
    """Constructed natively with no incomplete finding, or upstream does not serve it."""
    if got["outcome"] == "error":
        return NOT_NATIVE in got["detail"]
    classes = got["classes"]
    return (
        classes["main"] == "GlmMoeDsaForCausalLM"
        and classes.get("draft", "").endswith("NextN")
        and not got["incomplete"]
    )
