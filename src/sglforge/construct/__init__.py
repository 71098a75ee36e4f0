"""What a pinned sglang release builds for a launch, by running that release's own code.

A release tree (its ``python/`` folder, e.g. from the PyPI wheel) is imported in a child
process (:mod:`sglforge.construct.child`) with test doubles for torch and the GPU stack
(:mod:`sglforge.construct.fakes`: one ROCm gfx950 MI355X); the child parses the launch flags with
sglang's own parser and ``ServerArgs.__post_init__``, and constructs the main model and the MTP
draft through sglang's own loader. What it records per model (the contract, :class:`Built`):

- ``modules``: every layer's quant decision, ``{module name: "Class: method/scheme"}``;
- ``moe``: every fused-MoE layer as built: ``num_experts`` (a fused shared expert included),
  ``num_local_experts``, ``top_k``, ``hidden_size``, ``intermediate_size_per_partition``,
  ``num_fused_shared_experts``, the weights' shapes, the quant scheme and activation;
- ``tokens``: the CUDA-graph capture batch sizes, the tokens each batch runs (target verify,
  draft steps, draft extend) and the chunked-prefill size;
- ``server_args`` and ``parallel``: the launch as sglang resolved it.

Used by ``sglforge configs coverage`` (issue 21) and by the 0002 differential test; kept small so
a later scan can reuse it. No weights are loaded and no kernel runs: constructors only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglforge.errors import ConfigError

CHILD_TIMEOUT = 900  # seconds: a 78-layer model and its draft, per batch of cases


@dataclass(frozen=True)
class Case:
    """One construction: a checkpoint's config.json, the launch flags, main model or draft."""

    id: str
    config: Mapping[str, Any]  # config.json, quantization_config included
    args: Sequence[str]  # sglang launch flags, --model-path included
    draft: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "config": self.config, "args": list(self.args), "draft": self.draft}


@dataclass(frozen=True)
class Built:
    """What the release built for one case (see the module docstring for the fields)."""

    architecture: str
    modules: Mapping[str, str]
    moe: tuple[Mapping[str, Any], ...]
    tokens: Mapping[str, Any]
    server_args: Mapping[str, Any]
    parallel: Mapping[str, int]


def build(tree: Path, cases: Sequence[Case]) -> dict[str, Built]:
    """Construct every case with the sglang of ``tree`` (a release's ``python/`` folder)."""
    if not (tree / "sglang" / "srt").is_dir():
        raise ConfigError(
            f"{tree}: not a sglang release's python/ folder (no sglang/srt)",
            "pass the python/ folder of a release checkout (sglforge patches apply, or a wheel)",
        )
    src = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(src)  # sglforge.construct only; the release comes from ``tree``
    with tempfile.TemporaryDirectory(prefix="sglforge-construct-") as cwd:
        # An empty working folder: nothing in it shadows the stubbed packages.
        proc = subprocess.run(
            [sys.executable, "-m", "sglforge.construct.child", str(tree)],
            input=json.dumps([c.to_dict() for c in cases]),
            capture_output=True,
            text=True,
            cwd=cwd,
            env=env,
            timeout=CHILD_TIMEOUT,
            check=False,
        )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ConfigError(
            f"{tree}: sglang's model construction failed: {tail[0]}",
            "run `python -m sglforge.construct.child TREE` with the cases on stdin to see all",
        )
    raw: dict[str, dict[str, Any]] = json.loads(lines[-1])
    out = {}
    for case in cases:
        got = raw[case.id]
        if "error" in got:
            last = got["error"].strip().splitlines()[-1]
            raise ConfigError(
                f"{tree}: building {case.id} with sglang's own code failed: {last}",
                "check the model's config.json and the launch flags (sglang's parser reads them)",
            )
        out[case.id] = Built(
            architecture=got["architecture"],
            modules=got["modules"],
            moe=tuple(got["moe"]),
            tokens=got["tokens"],
            server_args=got["server_args"],
            parallel=got["parallel"],
        )
    return out
