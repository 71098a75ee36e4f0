"""Orphans reaped side by side: runs that start at once all reap the same killed runner's
containers (reaping is engine-wide), and each must return with them gone, whichever run's
removal the engine carried out ("removal already in progress" is not "removed")."""

from __future__ import annotations

import socket
import subprocess
import threading

import docker
import pytest

from sglforge.engine import containers

pytestmark = pytest.mark.docker


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize(("orphans", "runs"), [(1, 2), (1, 4), (3, 4)])
def test_every_run_reaping_at_once_returns_with_the_orphans_gone(
    docker_client: docker.DockerClient,
    standin_base: str,
    docker_labels: dict[str, str],
    orphans: int,
    runs: int,
) -> None:
    labels = {
        **docker_labels,
        containers.LABEL: "1",
        containers.ROLE_LABEL: "smoke",
        containers.OWNER_HOST_LABEL: socket.gethostname(),
        containers.OWNER_PID_LABEL: str(_dead_pid()),
    }
    ids = [
        docker_client.api.create_container(
            standin_base,
            ["sleep", "600"],
            labels=labels,
            host_config=docker_client.api.create_host_config(network_mode="none"),
        )["Id"]
        for _ in range(orphans)
    ]
    for ident in ids:
        docker_client.api.start(ident)
    left: list[list[str]] = []
    start = threading.Barrier(runs)

    def reap() -> None:
        start.wait()
        containers.reap_orphans("smoke")
        # what this run sees the moment it returns
        listed = docker_client.api.containers(all=True, filters={"label": "io.sglforge.test"})
        left.append([c["Id"] for c in listed if c["Id"] in ids])

    threads = [threading.Thread(target=reap) for _ in range(runs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(left) == runs and all(seen == [] for seen in left), left
