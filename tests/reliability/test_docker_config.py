"""Issue 19: a Docker config that cannot be read is named (the Docker SDK reads a broken
``config.json`` as empty, so the registry's refusal of an anonymous login hid it): invalid
JSON, a wrong shape, ``DOCKER_CONFIG`` naming a file. ``publish`` stops before the build."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from reliability_helpers import cli, empty_project

from sglforge.engine.credentials import credentials
from sglforge.engine.errors import CredentialsUnusable
from standin.registry import free_port

BROKEN = {
    "truncated": '{"auths": {',
    "not an object": "[1, 2]",
    "auths not an object": '{"auths": 5}',
    "not json": "auths = {}",
    "deep": "[" * 100_000,
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_config_json_is_named(tmp_path: Path, name: str) -> None:
    (tmp_path / "config.json").write_text(BROKEN[name])
    env = {"DOCKER_CONFIG": str(tmp_path)}
    with pytest.raises(CredentialsUnusable) as err:
        credentials("127.0.0.1:5000", env)
    assert str(tmp_path / "config.json") in err.value.message
    assert "DOCKER_CONFIG" in str(err.value)


def test_docker_config_naming_a_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "cfg").write_text("{}")
    with pytest.raises(CredentialsUnusable) as err:
        credentials("127.0.0.1:5000", {"DOCKER_CONFIG": str(tmp_path / "cfg")})
    assert "not a folder" in err.value.message and "cfg" in err.value.message


def test_good_and_absent_configs_still_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "none"))
    assert credentials("127.0.0.1:5000", {"DOCKER_CONFIG": str(tmp_path / "none")}) is None
    auth = {"auths": {"127.0.0.1:5000": {"auth": "dTpw"}}}  # u:p
    (tmp_path / "config.json").write_text(json.dumps(auth))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    found = credentials("127.0.0.1:5000", {"DOCKER_CONFIG": str(tmp_path)})
    assert found is not None and found.username == "u"


@pytest.mark.parametrize("name", ["truncated", "auths not an object"])
def test_publish_names_the_broken_config_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    project = empty_project(tmp_path / "p")
    config = tmp_path / "docker"
    config.mkdir()
    (config / "config.json").write_text(BROKEN[name])
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    registry = f"127.0.0.1:{free_port()}"
    code, out, err = cli(project, "publish", "--registry", registry, "--skip-smoke")
    assert code == 8, (out, err)
    assert str(config / "config.json") in err and "anonymous" not in err
    assert not (project / "build" / "worktrees").exists()
