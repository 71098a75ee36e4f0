"""sglang's own construction runs on the newest release on the index (0.5.23 today).

One construction, the README launch of the GLM-5.2 test model (TEST DOUBLE: config.json only),
in one child: about 10 s, plus msgspec's wheel (about 0.2 MB) once per cache. 0.5.23's
``ServerArgs`` is a msgspec struct (``srt/server_args.py:551`` ``msgspec.defstruct``), which a
stub breaks, so this also holds that msgspec is installed for real at the release's requirement
(``construct.packages``). The quant findings run on that construction, so ``scan`` has every
kind there (the kernel scan is the same code as on 0.5.14 and is not repeated: about 2 min).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglforge import construct, coverage
from sglforge.construct.packages import install, release_version
from sglforge.scan import quant
from sglforge.scenario.file import load_scenario
from sglforge.targets import load_targets

pytestmark = pytest.mark.pypi

REPO = Path(__file__).resolve().parents[2]
NEWEST = "0.5.23"
MODEL = REPO / "tests" / "standin" / "model-mxfp4"


def test_the_newest_release_constructs_with_its_own_msgspec(tmp_path: Path) -> None:
    from sglang_release import release_tree

    tree = release_tree(tmp_path / "sglang", NEWEST, patched=False) / "python"
    assert release_version(tree) == NEWEST
    real = install(tree)
    assert real.missing == () and any(p.name.startswith("msgspec-") for p in real.paths)
    config = json.loads((MODEL / "config.json").read_text())
    launch = load_scenario(REPO / "smoke" / "glm5-mxfp4-mtp-mi355x.toml").args
    args = coverage.launch_args(launch, MODEL)
    built = construct.build(tree, config, args, load_targets(REPO).resolve("mi355x").device)
    # config.json read by the transformers 0.5.23 pins (its wheel's Requires-Dist), for real
    assert built.config_source == "transformers 5.19.0 (GlmMoeDsaConfig)"
    main = built.models["main"]
    assert len(main.moe) == 75
    assert {(m["top_k"], tuple(m["w2_shape"])) for m in main.moe} == {(9, (257, 6144, 128))}
    assert main.tokens["tokens_per_bs"] == {"target_verify": 6}
    assert main.tokens["chunked_prefill_size"] > 0 and 1 in main.tokens["capture_bs"]
    assert "draft" in built.models
    found = quant.findings(built, config, "config.json")
    assert all(f.kind != "scan-incomplete" for f in found)
