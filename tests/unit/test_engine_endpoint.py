"""The engine is found the way the docker CLI finds it: DOCKER_HOST, then DOCKER_CONTEXT, then
the current context of the CLI's config, then the default socket. Contexts are made with the
real docker CLI in a temporary DOCKER_CONFIG (it writes them; sglforge reads them)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sglforge import engine
from sglforge.errors import EngineUnavailable

needs_cli = pytest.mark.skipif(
    shutil.which("docker") is None, reason="the docker CLI makes contexts"
)


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "docker-config"
    folder.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(folder))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    for host, name in (("unix:///run/ctx-a.sock", "ctx-a"), ("tcp://127.0.0.1:2399", "ctx-b")):
        subprocess.run(
            ["docker", "context", "create", name, "--docker", f"host={host}"],
            check=True,
            capture_output=True,
            env={"DOCKER_CONFIG": str(folder), "PATH": "/usr/bin:/bin:/usr/local/bin"},
        )
    return folder


@needs_cli
def test_the_docker_cli_order(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # nothing set: the default socket
    assert engine.endpoint().host == engine.DEFAULT_HOST
    # the CLI's current context
    (config / "config.json").write_text(json.dumps({"currentContext": "ctx-a"}))
    got = engine.endpoint()
    assert got.host == "unix:///run/ctx-a.sock" and "current context 'ctx-a'" in got.origin
    # DOCKER_CONTEXT wins over the config's current context
    monkeypatch.setenv("DOCKER_CONTEXT", "ctx-b")
    assert engine.endpoint().host == "tcp://127.0.0.1:2399"
    # DOCKER_HOST wins over both
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/explicit.sock")
    assert engine.endpoint() == engine.Endpoint(
        "unix:///run/explicit.sock", "DOCKER_HOST", from_env=True
    )
    # "default" is the default socket
    monkeypatch.delenv("DOCKER_HOST")
    monkeypatch.setenv("DOCKER_CONTEXT", "default")
    assert engine.endpoint().host == engine.DEFAULT_HOST


@needs_cli
def test_an_unknown_context_is_named(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for how in ("env", "config"):
        if how == "env":
            monkeypatch.setenv("DOCKER_CONTEXT", "nosuch")
        else:
            monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
            (config / "config.json").write_text(json.dumps({"currentContext": "nosuch"}))
        with pytest.raises(EngineUnavailable) as err:
            engine.endpoint()
        assert "'nosuch'" in str(err.value) and "docker context ls" in str(err.value), how


@needs_cli
def test_no_engine_says_how_to_start_one_on_an_ordinary_machine(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine.reset()
    for setting in ({"DOCKER_CONTEXT": "ctx-a"}, {"DOCKER_HOST": "unix:///nonexistent.sock"}):
        monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
        monkeypatch.delenv("DOCKER_HOST", raising=False)
        for k, v in setting.items():
            monkeypatch.setenv(k, v)
        with pytest.raises(EngineUnavailable) as err:
            engine.client()
        text = str(err.value)
        assert "no Docker engine reachable" in text and next(iter(setting)) in text
        assert "systemctl start docker" in text and "DOCKER_HOST" in text
        assert "--bridge=none" not in text and "docker.pid" not in text  # not our CI's recipe
    engine.reset()


@pytest.mark.docker
@needs_cli
def test_a_context_reaches_the_real_engine(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    subprocess.run(
        ["docker", "context", "create", "real", "--docker", "host=unix:///var/run/docker.sock"],
        check=True,
        capture_output=True,
        env={"DOCKER_CONFIG": str(config), "PATH": "/usr/bin:/bin:/usr/local/bin"},
    )
    monkeypatch.setenv("DOCKER_CONTEXT", "real")
    engine.reset()
    try:
        assert engine.client().ping()
    finally:
        engine.reset()
