"""pip's configuration read in-process (``index._pip_config_here``, pip's own loader) is what
``pip config list`` prints for the same files and environment, and the command stays the
answer where the loader is not used."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglforge import index

PROBE_ENV = {":env:.no-input", ":env:.disable-pip-version-check"}  # set by the probe itself


def pip_config_list(env: dict[str, str]) -> dict[str, str]:
    out = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    found = {}
    for line in out.splitlines():
        key, _, raw = line.partition("=")
        found[key.strip()] = str(ast.literal_eval(raw))
    return {k: v for k, v in found.items() if k not in PROBE_ENV}


def test_the_loader_reads_what_the_command_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text(
        "[global]\nindex-url = https://mirror.example/simple\n"
        "[download]\nextra-index-url = file:///srv/a file:///srv/b\n"
        "[install]\nfind-links = /srv/wheels\n"
    )
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("PIP_PROXY", "http://proxy.example:3128")
    here = index._pip_config_here()
    assert here is not None
    assert {k: v for k, v in here.items() if k not in PROBE_ENV} == pip_config_list(
        dict(os.environ)
    )
    assert here["global.index-url"] == "https://mirror.example/simple"
    assert here[":env:.proxy"] == "http://proxy.example:3128"


def test_isolated_mode_is_left_to_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_ISOLATED", "1")
    assert index._pip_config_here() is None
