"""The base's facts kept by its registry digest (issue 43): the aiter probe and the sglang
facts are asked of a container once per digest, then read from the user cache; a damaged or
mismatched entry reads as a miss.

The container is this host's python3 running the real probe script over an aiter tree made
here (``PYTHONPATH`` naming it, as the images' editable install does); only the engine is
left out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sglforge import bases
from sglforge.engine import containers
from sglforge.provenance import Base

DIGEST = "sha256:" + "ab" * 32
REF = f"127.0.0.1:5000/lmsysorg/sglang:v0.5.14-rocm700-mi35x@{DIGEST}"


@pytest.fixture
def probes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every image a probe container ran in; the probe runs in this host's python3."""
    root = tmp_path / "aiter"
    (root / "aiter" / "configs" / "model_configs").mkdir(parents=True)
    (root / "aiter" / "__init__.py").write_text("")
    (root / "aiter" / "configs" / "tuned_fmoe.csv").write_text("cu_num,token\n80,1\n")
    monkeypatch.setenv("SGLFORGE_CACHE", str(tmp_path / "cache"))
    ran: list[str] = []

    def run_python(ref: str, script: str, **_kw: Any) -> str:
        ran.append(ref)
        env = {**os.environ, "PYTHONPATH": str(root)}
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, env=env)
        return out.stdout.decode()

    monkeypatch.setattr(containers, "run_python", run_python)
    return ran


def test_the_aiter_tables_are_probed_once_per_digest(probes: list[str]) -> None:
    first = bases.aiter_configs(REF)
    again = bases.aiter_configs(REF)
    assert probes == [REF]  # the second read asked no container
    assert first is not None and again == first and first.tuned_fmoe == "cu_num,token\n80,1\n"
    other = REF.replace("ab" * 32, "cd" * 32)
    bases.aiter_configs(other)  # another digest is another base
    bases.aiter_configs(REF.rpartition("@")[0])  # no digest: nothing is kept by a tag
    bases.aiter_configs(REF.rpartition("@")[0])
    assert probes == [REF, other, REF.rpartition("@")[0], REF.rpartition("@")[0]]


@pytest.mark.parametrize(
    "damage",
    [
        lambda doc: {**doc, "digest": "sha256:" + "00" * 32},  # kept under another digest
        lambda doc: "not an object",
        lambda doc: None,  # unreadable JSON
    ],
)
def test_a_damaged_entry_reads_as_a_miss(probes: list[str], damage: Any) -> None:
    bases.aiter_configs(REF)
    entry = bases._facts_file(DIGEST, "aiter")
    doc = damage(json.loads(entry.read_text()))
    entry.write_text("{" if doc is None else json.dumps(doc))
    bases.aiter_configs(REF)
    assert probes == [REF, REF]


def test_sglang_facts_kept_by_digest_make_the_base_without_a_probe(
    probes: list[str], tmp_path: Path
) -> None:
    facts = {
        "version": "0.5.14",
        "path": "/sgl-workspace/sglang/python/sglang",
        "fallback_only": False,
        "entrypoint": [],
        "cmd": ["/bin/bash"],
    }
    base = Base(ref="127.0.0.1:5000/lmsysorg/sglang:v0.5.14-rocm700-mi35x", digest=DIGEST)
    assert bases.cached_base(base, "0.5.14") is None
    bases.keep_facts(DIGEST, "sglang", facts)
    got = bases.inspect_base(tmp_path, base, "0.5.14", None)  # no engine, no container
    assert (got.package_path, got.cmd, got.entrypoint) == (facts["path"], ("/bin/bash",), ())
    assert bases.cached_base(base, "0.5.14") == got and probes == []
    with pytest.raises(bases.BuildError, match="holds sglang 0.5.14, but the queue is pinned"):
        bases.cached_base(base, "0.5.15")
