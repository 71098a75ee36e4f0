"""The Docker engine boundary: the only package that imports the Docker SDK.

``docker.errors.*`` are translated here into the project's own errors, naming the image.
Submodules: ``images`` (inspect, build, tag, push) and ``containers`` (run, logs, removal).
"""

from __future__ import annotations

import functools
import os

import docker
import docker.errors

from sglforge.errors import EngineUnavailable

# Every object sglforge creates carries this label so it can be found and cleaned up.
LABEL = "io.sglforge.managed"
START_HINT = (
    "start one: `dockerd --bridge=none --iptables=false &` (as root; remove a stale "
    "/var/run/docker.pid first), or set DOCKER_HOST"
)


@functools.lru_cache(maxsize=4)
def _client(base_url: str | None) -> docker.DockerClient:
    client = None
    try:
        if base_url:
            client = docker.DockerClient(base_url=base_url, timeout=600)
        else:
            client = docker.from_env(timeout=600)
        client.ping()
    except (docker.errors.DockerException, OSError) as exc:
        if client is not None:
            client.close()  # do not leak the socket of a failed attempt
        where = base_url or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        raise EngineUnavailable(f"no Docker engine reachable at {where}", START_HINT) from exc
    return client


def client() -> docker.DockerClient:
    """A connected client, or EngineUnavailable with one line on how to start an engine."""
    return _client(os.environ.get("DOCKER_HOST") or None)


def reset() -> None:
    """Forget cached clients (tests that start and stop engines)."""
    _client.cache_clear()
