"""The Docker engine boundary: the only package that imports the Docker SDK.

Split by what the code talks to: ``images`` (local images: inspect, build, buildx, pull,
tag, remove), ``containers`` (running and reading), ``registry`` (the remote API:
push, digests, labels, tag lists). ``reference`` holds the one image-reference type and
parser, ``credentials`` the registry logins and auth handshake, and ``errors`` the engine's
own error kinds: ``docker.errors.*`` are translated into them, naming the image.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglforge.errors import EngineUnavailable

if TYPE_CHECKING:
    import docker

# Every object sglforge creates carries this label so it can be found and cleaned up.
LABEL = "io.sglforge.managed"
START_HINT = (
    "start the engine (`sudo systemctl start docker`), or point sglforge at one: set "
    "DOCKER_HOST (e.g. unix:///run/user/$UID/docker.sock for rootless Docker) or a context "
    "(`docker context use NAME`, or DOCKER_CONTEXT)"
)
DEFAULT_HOST = "unix:///var/run/docker.sock"


@dataclass(frozen=True)
class Endpoint:
    """Where the engine is, found the way the docker CLI finds it."""

    host: str
    origin: str  # "DOCKER_HOST", "DOCKER_CONTEXT=NAME", "context NAME (~/.docker/config.json)"
    tls: Any = None  # a docker.tls.TLSConfig from the context, or None
    from_env: bool = False  # DOCKER_HOST: let the SDK read DOCKER_TLS_VERIFY/DOCKER_CERT_PATH


def endpoint() -> Endpoint:
    """``DOCKER_HOST``, then ``DOCKER_CONTEXT``, then the current context of the docker CLI's
    config (``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json``), else the default
    socket. Contexts are read with the SDK's own context store."""
    host = os.environ.get("DOCKER_HOST", "").strip()
    if host:
        return Endpoint(host, "DOCKER_HOST", from_env=True)
    name = os.environ.get("DOCKER_CONTEXT", "").strip()
    origin = f"DOCKER_CONTEXT={name}"
    if not name:
        name = _current_context()
        origin = f"the docker CLI's current context {name!r}"
    if name and name != "default":
        host, tls = _context(name, origin)
        return Endpoint(host, origin, tls=tls)
    return Endpoint(DEFAULT_HOST, "the default socket")


def _config_dir() -> Path:
    return Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker")


def _context(name: str, origin: str) -> tuple[str, Any]:
    """(host, TLS settings) of the docker CLI context ``name``, read from its context store
    (``contexts/meta/<sha256 of the name>/meta.json``, TLS files under ``contexts/tls/``)."""
    import hashlib
    import json

    key = hashlib.sha256(name.encode()).hexdigest()
    meta = _config_dir() / "contexts" / "meta" / key / "meta.json"
    hint = "list them with `docker context ls`; unset DOCKER_CONTEXT or pick another"
    try:
        data = json.loads(meta.read_text())
        point = data["Endpoints"]["docker"]
        host = str(point.get("Host") or DEFAULT_HOST)
    except FileNotFoundError:
        raise EngineUnavailable(
            f"Docker context {name!r} (from {origin}) does not exist", hint
        ) from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise EngineUnavailable(
            f"Docker context {name!r} (from {origin}) cannot be read ({meta}: {exc})", hint
        ) from None
    tls_dir = _config_dir() / "contexts" / "tls" / key / "docker"
    skip = bool(point.get("SkipTLSVerify"))
    if not tls_dir.is_dir() and not skip:
        return host, None
    from docker.tls import TLSConfig

    ca, cert, pem = (tls_dir / f for f in ("ca.pem", "cert.pem", "key.pem"))
    return host, TLSConfig(
        client_cert=(str(cert), str(pem)) if cert.is_file() and pem.is_file() else None,
        ca_cert=str(ca) if ca.is_file() else None,
        verify=not skip,
    )


def _current_context() -> str:
    import json

    try:
        data = json.loads((_config_dir() / "config.json").read_text())
    except (OSError, ValueError):
        return "default"
    name = data.get("currentContext") if isinstance(data, dict) else None
    return name if isinstance(name, str) and name else "default"


_CLIENTS: dict[Endpoint, docker.DockerClient] = {}


def _client(where: Endpoint) -> docker.DockerClient:
    if where not in _CLIENTS:
        _CLIENTS[where] = _connect(where)
    return _CLIENTS[where]


def _connect(where: Endpoint) -> docker.DockerClient:
    # Imported here: the SDK (and requests) cost a third of a second, and commands that
    # never reach the engine should not pay it.
    import docker
    import docker.errors

    client = None
    failure = ""
    try:
        if where.from_env:
            client = docker.from_env(timeout=600)
        else:
            client = docker.DockerClient(base_url=where.host, tls=where.tls or False, timeout=600)
        client.ping()
    except (docker.errors.DockerException, OSError) as exc:
        if client is not None:
            client.close()  # do not leak the socket of a failed attempt
        failure = f"{type(exc).__name__}"
    if failure:
        client = None
        _collect_failed_sockets()  # the traceback holding the socket is gone by now
        from sglforge.urls import shown

        raise EngineUnavailable(
            f"no Docker engine reachable at {shown(where.host)} (from {where.origin})", START_HINT
        )
    assert client is not None
    return client


def _collect_failed_sockets() -> None:
    """The SDK's unix-socket adapter leaves the socket of a refused connection to the garbage
    collector; collect it now, quietly, instead of warning at some later point."""
    import gc
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def client() -> docker.DockerClient:
    """A connected client, or EngineUnavailable with one line on how to start an engine."""
    return _client(endpoint())


def reset() -> None:
    """Close and forget cached clients (tests that start and stop engines)."""
    while _CLIENTS:
        _, client_ = _CLIENTS.popitem()
        client_.close()
