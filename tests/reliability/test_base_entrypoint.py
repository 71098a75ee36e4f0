"""Issue 19: a base's ENTRYPOINT does not survive the overlay. Release images have none, and
the documented run line (``docker run IMAGE python3 -m sglang.launch_server ...``) must run the
server: the overlay resets it (``ENTRYPOINT []``, the base's CMD restated), records it in a
label and the manifest, and smoke runs the image as users do (its own ENTRYPOINT, none here).

Real engine; the bases are built ``FROM`` the stand-in release image (TEST DOUBLE).
"""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import docker
import pytest

from helpers_build import STANDIN_REPO, make_build_project
from pipelines import build_at as build_image
from sglforge.provenance import LABEL_ENTRYPOINT_RESET
from standin.base import ensure_sglang_base

pytestmark = pytest.mark.docker

LOUD = '["/bin/sh", "-c", "echo ENTRYPOINT-RAN >&2; exit 3", "sh"]'


@pytest.mark.parametrize(
    ("lines", "entrypoint", "cmd"),
    [
        (f"ENTRYPOINT {LOUD}", json.loads(LOUD), None),  # exec form; CMD cleared by it
        ("ENTRYPOINT echo shell-form", ["/bin/sh", "-c", "echo shell-form"], None),
        (f'ENTRYPOINT {LOUD}\nCMD ["/bin/bash"]', json.loads(LOUD), ["/bin/bash"]),
        ("", None, ["/bin/bash"]),  # a base without one: nothing reset, nothing recorded
    ],
)
def test_the_overlay_resets_a_base_entrypoint_and_records_it(
    tmp_path: Path,
    docker_client: docker.DockerClient,
    docker_labels: dict[str, str],
    lines: str,
    entrypoint: list[str] | None,
    cmd: list[str] | None,
) -> None:
    project = make_build_project(tmp_path, repository=f"sglforge-test/ep-{uuid.uuid4().hex[:8]}")
    standin = ensure_sglang_base(
        tag=f"{STANDIN_REPO}:v0.5.14-rocm700-mi35x", files=project.base_files()
    )
    base_ref = f"sglforge-test/ep-base-{uuid.uuid4().hex[:8]}:v0.5.14-rocm700-mi35x"
    docker_client.images.build(
        fileobj=io.BytesIO(f"FROM {standin}\n{lines}\n".encode()),
        tag=base_ref,
        labels=docker_labels,
        rm=True,
    )
    base_cfg = docker_client.api.inspect_image(base_ref)["Config"]
    assert (base_cfg["Entrypoint"] or None) == entrypoint and base_cfg["Cmd"] == cmd
    try:
        result = build_image(
            project.root,
            "mi355x",
            base_image=base_ref,
            upstream=str(project.upstream),
            offline=True,
            labels=docker_labels,
        )
        cfg = docker_client.api.inspect_image(result.image)["Config"]
        assert not cfg["Entrypoint"]
        assert cfg["Cmd"] == cmd  # what the base would run without a command stays
        recorded = cfg["Labels"].get(LABEL_ENTRYPOINT_RESET)
        assert (json.loads(recorded) if recorded else None) == entrypoint
        assert ("ENTRYPOINT []" in result.plan.dockerfile.splitlines()) == bool(entrypoint)
        manifest = result.plan.manifest["base"]
        assert manifest.get("entrypoint_reset") == entrypoint
        # The documented run line runs what it names.
        out = docker_client.containers.run(
            result.image,
            ["python3", "-c", "print('server-would-start')"],
            remove=True,
            labels=docker_labels,
            stderr=True,
        )
        assert b"server-would-start" in out and b"ENTRYPOINT-RAN" not in out
    finally:
        docker_client.images.remove(base_ref, force=True)
