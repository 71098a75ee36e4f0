"""The Docker engine boundary: the only package that imports the Docker SDK.

Split by what the code talks to: ``images`` (local images: inspect, build, buildx, pull,
tag, remove, probes), ``containers`` (running and reading), ``registry`` (the remote API:
push, digests, labels, tag lists). ``reference`` holds the one image-reference type and
parser, ``credentials`` the registry logins and auth handshake, and ``errors`` the engine's
own error kinds: ``docker.errors.*`` are translated into them, naming the image.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

from sglforge.errors import EngineUnavailable

if TYPE_CHECKING:
    import docker

# Every object sglforge creates carries this label so it can be found and cleaned up.
LABEL = "io.sglforge.managed"
START_HINT = (
    "start one: `dockerd --bridge=none --iptables=false &` (as root; remove a stale "
    "/var/run/docker.pid first), or set DOCKER_HOST"
)


@functools.lru_cache(maxsize=4)
def _client(base_url: str | None) -> docker.DockerClient:
    # Imported here: the SDK (and requests) cost a third of a second, and commands that
    # never reach the engine should not pay it.
    import docker
    import docker.errors

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
