"""Orphans reaped side by side: runs that start at once all reap the same killed runner's
containers (reaping is engine-wide), and each must return with them gone, whichever run's
removal the engine carried out ("removal already in progress" is not "removed").

The orphans' runner is a real process, alive while its containers are created and started (as
a runner is) and SIGKILLed after: labelled with a pid that was dead from the start, they were
orphans before they started, and a reap running beside this test (another case here, a smoke
run) removed one between its create and start (the engine's 404 on start, seen once in CI)."""

from __future__ import annotations

import socket
import subprocess
import threading

import docker
import pytest

from sglforge.engine import containers

pytestmark = pytest.mark.docker


def _runner() -> subprocess.Popen[bytes]:
    """A stand-in for the runner that owns the orphans: alive until the test kills it."""
    return subprocess.Popen(["sleep", "600"])


@pytest.mark.parametrize(("orphans", "runs"), [(1, 2), (1, 4), (3, 4)])
def test_every_run_reaping_at_once_returns_with_the_orphans_gone(
    docker_client: docker.DockerClient,
    standin_base: str,
    docker_labels: dict[str, str],
    orphans: int,
    runs: int,
) -> None:
    runner = _runner()
    labels = {
        **docker_labels,
        containers.LABEL: "1",
        containers.ROLE_LABEL: "smoke",
        containers.OWNER_HOST_LABEL: socket.gethostname(),
        containers.OWNER_PID_LABEL: str(runner.pid),
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
    runner.kill()  # SIGKILL: its containers are orphans from now on
    runner.wait()
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


def test_a_runner_in_another_pid_namespace_is_never_judged_dead(
    docker_client: docker.DockerClient, standin_base: str, docker_labels: dict[str, str]
) -> None:
    """A pid from another namespace (a CI job's runner in a container, sharing this engine and
    hostname) says nothing about a process here: its container stays, while the same dead pid
    labelled with this namespace is reaped."""
    runner = _runner()
    runner.kill()
    runner.wait()
    ours = containers.owner_labels("smoke")
    assert ours[containers.OWNER_PIDNS_LABEL].startswith("pid:[")
    made = {}
    for side, pidns in (("foreign", "pid:[1]"), ("ours", ours[containers.OWNER_PIDNS_LABEL])):
        labels = {**docker_labels, **ours, containers.OWNER_PID_LABEL: str(runner.pid)}
        labels[containers.OWNER_PIDNS_LABEL] = pidns
        made[side] = docker_client.api.create_container(
            standin_base, ["true"], labels=labels, name=f"sglforge-test-reap-{side}-{runner.pid}"
        )["Id"]
    try:
        containers.reap_orphans("smoke")
        listed = {c["Id"] for c in docker_client.api.containers(all=True)}
        assert made["foreign"] in listed and made["ours"] not in listed
    finally:
        containers.remove(made["foreign"])
