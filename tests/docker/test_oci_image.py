"""The OCI overlay on the stock engine (issue 43): pushed by blobs, pulled and run by Docker.

The base is a tiny image of this host's ``sh`` and ``cat`` pushed to Debian's registry on
127.0.0.1 without the engine (tests/standin/host_base.py); the overlay is written from the
manifest and config the registry serves and pushed with the base's layers mounted. The engine
then pulls it, and loads the ``docker load`` archive the build uses for the local smoke.
"""

from __future__ import annotations

from collections.abc import Callable

import docker
import pytest

from sglforge.engine import images as engine_images
from sglforge.images import oci
from sglforge.images import registry as oreg
from standin.host_base import WORKDIR, push_host_base
from standin.registry import Registry

pytestmark = pytest.mark.docker

X = f"{WORKDIR}/sglang/python/sglang/srt/x.py"
OLD = f"{WORKDIR}/sglang/python/sglang/srt/old.py"
CHECK = f"cat {X}; test ! -e {OLD} && echo GONE; pwd; echo aiter=$SGLANG_USE_AITER"


def run(client: docker.DockerClient, image: str, labels: dict[str, str]) -> str:
    out = client.containers.run(
        image, ["/bin/sh", "-c", CHECK], remove=True, labels=labels, network_mode="none"
    )
    return out.decode() if isinstance(out, bytes) else str(out)


def test_the_engine_pulls_and_runs_the_overlay_and_loads_its_archive(
    registry: Callable[..., Registry],
    docker_client: docker.DockerClient,
    docker_labels: dict[str, str],
) -> None:
    r = registry()
    tree = {X: b"print('upstream')\n", OLD: b"old = 1\n"}
    push_host_base(f"{r.address}/standin/base:v1", tree, docker_labels)
    base = oreg.read_base(f"{r.address}/standin/base:v1")
    change = oci.ConfigChange(
        {**docker_labels, "io.sglforge.queue-hash": "7ab9680e"},
        {"SGLANG_USE_AITER": "1"},
        oci.rfc3339(0),
    )
    files = [oci.LayerFile(X, b"print('patched')\n")]
    image = oci.overlay_image(base, files, [OLD], change, 0)
    ref = f"{r.address}/sglforge/overlay:v1"
    oreg.publish(image, base, ref)
    try:
        pulled = engine_images.pull(ref)
        assert pulled.id == image.config_digest and pulled.digest == image.digest
        expected = f"print('patched')\nGONE\n{WORKDIR}\naiter=1\n"
        assert run(docker_client, ref, docker_labels) == expected
        assert pulled.labels["io.sglforge.queue-hash"] == "7ab9680e"
        assert pulled.cmd == ("/bin/sh",) and not pulled.entrypoint
        # The build's way in: the archive of config and layer only, over the base the engine
        # holds (pulled by digest, as the build pulls it); the image ID is the config's again.
        engine_images.pull(f"{base.name}@{base.digest}")
        engine_images.remove(ref)
        loaded = "sglforge-test/oci-loaded:v1"
        engine_images.load(oci.docker_archive(image, [loaded], 0), loaded)
        assert engine_images.require(loaded).id == image.config_digest
        assert run(docker_client, loaded, docker_labels) == expected
    finally:
        for name in (ref, "sglforge-test/oci-loaded:v1", f"{base.name}@{base.digest}"):
            engine_images.remove(name)
