"""The models a launch builds, as sglang's own construction builds them: one small interface.

``build(tree, config, launch)`` runs ``sglforge.scan._harness`` in a child process on a release
tree (``<tree>/python``) and returns what it saw: the launch as sglang's parser reads it,
whether the DSA attention backend serves it, and per model (``main``, ``draft``) the module
prefixes built, each quantizable module's decision and how the Quark config's entries
matched. The child imports that release only (a fresh interpreter: two releases never share
``sys.modules``). Its torch is a double; see the harness docstring.

The doubles are ``sglforge.construct.fakes`` (issue 21's construction core); what this harness
records beyond ``sglforge.construct``'s contract is how QuarkConfig's own matching matched each
entry (the exclude and ``layer_quant_config`` analysis), which is why it has its own child.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sglforge
from sglforge.errors import SglforgeError

TIMEOUT = 900.0


class ConstructionError(SglforgeError):
    """sglang's own model construction failed on this tree and config."""

    exit_code = 70


@dataclass(frozen=True)
class Built:
    """What the harness reports (see ``sglforge.scan._harness``)."""

    launch: dict[str, Any]
    dsa: bool | None  # None: not known (the construction did not run)
    models: dict[str, dict[str, Any]]

    def prefixes(self, model: str) -> list[str]:
        return list(self.models.get(model, {}).get("prefixes", []))


def literal_launch(launch: Sequence[str]) -> dict[str, Any]:
    """The launch facts the kernel scan needs, read from the flags as written (the fallback
    when sglang's own parser could not run on a tree)."""
    out: dict[str, Any] = {"speculative_algorithm": None, "speculative_num_steps": None}
    args = list(launch)
    for i, a in enumerate(args):
        name, eq, value = a.partition("=")
        if not eq and i + 1 < len(args):
            value = args[i + 1]
        if name == "--speculative-algorithm":
            out["speculative_algorithm"] = value
        elif name == "--speculative-num-steps":
            out["speculative_num_steps"] = int(value) if value.isdigit() else None
    return out


def build(tree: Path, config: dict[str, Any], launch: Sequence[str], model_path: str) -> Built:
    """Build the main model (and the MTP draft when the launch asks for speculative decoding)
    of ``config`` with the sglang release in ``tree`` for the launch flags ``launch``."""
    src = Path(sglforge.__file__).resolve().parents[1]
    request = json.dumps({"config": config, "launch": list(launch), "model_path": model_path})
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(src)
    with tempfile.TemporaryDirectory(prefix="sglforge-construct-") as cwd:
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "sglforge.scan._harness", str(tree / "python")],
                input=request,
                capture_output=True,
                text=True,
                cwd=cwd,  # an empty folder: nothing in it shadows the stubbed packages
                env=env,
                timeout=TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            raise ConstructionError(
                f"sglang's model construction on {tree} took over {TIMEOUT:.0f} s",
                "rerun with -v; report the config that causes it",
            ) from None
    if proc.returncode != 0 or not proc.stdout.strip():
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ConstructionError(
            f"sglang's model construction failed on {tree}: {last}",
            "check the model's config.json (architectures, layer counts) against this release",
        )
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    return Built(launch=doc["launch"], dsa=bool(doc["dsa"]), models=doc["models"])
