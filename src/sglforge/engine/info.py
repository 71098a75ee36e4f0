"""What the engine says about itself: version, API, storage folder (for ``sglforge doctor``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineFacts:
    version: str
    api_version: str
    os: str
    root_dir: str  # where images live (DockerRootDir): its disk must hold the base images
    images: int


def facts() -> EngineFacts:
    """The connected engine's facts; EngineUnavailable (with how to start one) otherwise."""
    import docker.errors

    from sglforge.engine import client
    from sglforge.engine.errors import EngineError

    c = client()
    try:
        version = c.version()
        info = c.info()
    except docker.errors.DockerException as exc:
        raise EngineError(f"the engine did not describe itself: {exc}", "docker info") from None
    return EngineFacts(
        version=str(version.get("Version", "?")),
        api_version=str(version.get("ApiVersion", "?")),
        os=f"{info.get('OperatingSystem', '?')} ({info.get('Architecture', '?')})",
        root_dir=str(info.get("DockerRootDir", "")),
        images=int(info.get("Images", 0) or 0),
    )
