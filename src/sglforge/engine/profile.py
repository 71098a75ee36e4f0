"""How a server runs, as data: the run profile of a scenario (``[container]``) and its bind
mounts. Plain dataclasses with no Docker SDK import, so that reading a scenario and the
process runtime (:mod:`sglforge.smoke.runtime`) never need the SDK; :mod:`.containers` turns
a profile into the engine's create options.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NotRequired, TypedDict


@dataclass(frozen=True)
class Mount:
    """A bind mount from the engine's host into the container (read-only by default)."""

    source: str
    target: str
    read_only: bool = True


@dataclass(frozen=True)
class Profile:
    """How a container runs: the ``docker run`` flags a ROCm serving container needs."""

    devices: tuple[str, ...] = ()
    group_add: tuple[str, ...] = ()
    ipc_mode: str | None = None
    shm_size: str | None = None
    security_opt: tuple[str, ...] = ()
    cap_add: tuple[str, ...] = ()
    nofile: int | None = None
    network_mode: str = "host"
    mounts: tuple[Mount, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


class Launch(TypedDict):
    """What to start, as ``running(image, **launch)`` takes it: a container
    (:func:`.containers.running`) or a local process (``smoke.runtime.ProcessRuntime``)."""

    entrypoint: Sequence[str] | None
    command: Sequence[str]
    profile: Profile
    log_path: Path
    role: NotRequired[str]  # who runs it ("smoke", "bench-client"...); default "smoke"
    labels: NotRequired[Mapping[str, str] | None]
