"""The OCI overlay on the stock engine (issue 43): pushed by blobs, pulled and run by Docker.

The base is a tiny image of this host's ``sh`` and ``cat`` pushed to Debian's registry on
127.0.0.1 without the engine (tests/standin/host_base.py); the overlay is written from the
manifest and config the registry serves and pushed with the base's layers mounted. The engine
then pulls it, and loads the ``docker load`` archive the build uses for the local smoke.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import pytest
from click.testing import CliRunner

from helpers_build import STANDIN_OWNED, BuildProject, make_build_project
from sglforge import selfcheck
from sglforge.cli import main
from sglforge.engine import containers
from sglforge.engine import images as engine_images
from sglforge.engine import reset as engine_reset
from sglforge.images import oci
from sglforge.images import registry as oreg
from standin.host_base import WORKDIR, push_host_base
from standin.registry import Registry

pytestmark = [pytest.mark.docker, pytest.mark.registry]

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


def _project_on_a_host_base(
    tmp: Path, reg: Registry, labels: dict[str, str]
) -> tuple[BuildProject, str, str, dict[str, bytes]]:
    """The test queue's project whose base is a host base in ``reg`` holding the synthetic
    upstream's tree (the stand-in's own files too) under /sgl-workspace; (project, the
    repository its images go to, the base's reference, the base's tree)."""
    repository = f"sglforge-test/oci-{uuid.uuid4().hex[:8]}"
    base_ref = f"{reg.address}/standin/sglang:v0.5.14-rocm700-mi35x"
    built = make_build_project(
        tmp / "p",
        base_template=f"{reg.address}/standin/sglang:v{{version}}-{{rocm}}-mi35x",
        repository=repository,
    )
    tree = {f"{WORKDIR}/sglang/{k}": v for k, v in built.base_files().items()}
    tree.update({f"{WORKDIR}/sglang/{k}": built.files[k].encode() for k in STANDIN_OWNED})
    env = {"PYTHONPATH": f"{WORKDIR}/sglang/python"}
    push_host_base(base_ref, tree, labels, python=True, env=env)
    return built, repository, base_ref, tree


def _publish(
    project: Path, registry: str, upstream: Path, labels: dict[str, str], cache: Path
) -> dict[str, Any]:
    args = ["--root", str(project), "publish", "--target", "mi355x", "--registry", registry]
    args += ["--upstream", str(upstream), "--skip-smoke", "--retries", "1", "--json"]
    for k, v in labels.items():
        args += ["--label", f"{k}={v}"]
    env = {"SGLFORGE_CACHE": str(cache), "SOURCE_DATE_EPOCH": ""}
    result = CliRunner().invoke(main, args, env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return {**json.loads(result.stdout), "said": result.stderr}


def test_one_queue_published_twice_from_empty_caches_pushes_one_digest_the_dry_run_predicts(
    registry: Callable[..., Registry],
    docker_labels: dict[str, str],
    docker_client: docker.DockerClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first_reg, second_reg = registry(), registry()
    built, repository, base_ref, _ = _project_on_a_host_base(tmp_path, first_reg, docker_labels)

    first = _publish(built.root, first_reg.address, built.upstream, docker_labels, tmp_path / "c1")
    # A second machine: empty caches, no local image of the queue or the base, a later clock.
    for ref in engine_images.local_tags(repository):
        engine_images.remove(f"{repository}:{ref}")
    engine_images.remove(base_ref)
    shutil.rmtree(built.root / "build" / "cache", ignore_errors=True)
    later = time.time() + 400 * 86400
    monkeypatch.setattr(time, "time", lambda: later)
    second = _publish(
        built.root, second_reg.address, built.upstream, docker_labels, tmp_path / "c2"
    )
    assert first["digest"] == second["digest"] and first["digest"].startswith("sha256:")
    # the same registry mounts the base's 2 layers; another one gets them copied
    assert "2 base layer(s) mounted, 0 copied" in first["said"]
    assert "0 base layer(s) mounted, 2 copied" in second["said"]
    served = oreg.dist.served_digest(second["immutable"])
    assert served == first["digest"]

    # A no-op build asks no container: the base's facts are kept by its digest, and the
    # engine already holds the image whose ID is the inputs' config digest.
    def no_container(*_a: object, **_k: object) -> None:
        raise AssertionError("a no-op build started a container")

    monkeypatch.setattr(containers, "run_python", no_container)
    monkeypatch.setattr(selfcheck, "run", no_container)
    args = ["--root", str(built.root), "build", "--target", "mi355x", "--json"]
    args += ["--upstream", str(built.upstream)]
    for k, v in docker_labels.items():
        args += ["--label", f"{k}={v}"]
    noop = CliRunner().invoke(main, args, env={"SGLFORGE_CACHE": str(tmp_path / "c2")})
    assert noop.exit_code == 0, noop.output
    assert json.loads(noop.stdout)["up_to_date"] is True
    assert json.loads(noop.stdout)["oci"]["digest"] == first["digest"]

    # The prediction: no engine, no pull (the base's facts are kept by its digest).
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    engine_reset()
    args.insert(args.index("--json"), "--dry-run")
    dry = CliRunner().invoke(main, args, env={"SGLFORGE_CACHE": str(tmp_path / "c2")})
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout)["oci"]["digest"] == first["digest"]
    monkeypatch.delenv("DOCKER_HOST")
    engine_reset()


def test_publish_refuses_a_foreign_image_under_the_immutable_tag_before_the_smoke(
    registry: Callable[..., Registry],
    docker_client: docker.DockerClient,  # its session teardown removes the labelled images
    docker_labels: dict[str, str],
    tmp_path: Path,
) -> None:
    r = registry()
    built, repository, _, tree = _project_on_a_host_base(tmp_path, r, docker_labels)
    args = ["--root", str(built.root), "build", "--target", "mi355x", "--json"]
    args += ["--upstream", str(built.upstream)]
    for k, v in docker_labels.items():
        args += ["--label", f"{k}={v}"]
    cache = {"SGLFORGE_CACHE": str(tmp_path / "c")}
    plan = json.loads(CliRunner().invoke(main, args, env=cache).stdout)
    # Someone plants the base itself (plus a file) under the queue's immutable tag.
    tag = plan["image"].rpartition(":")[2]
    planted = f"{r.address}/{repository}:{tag}"
    theirs = push_host_base(planted, {**tree, "/evil": b"EVIL\n"}, docker_labels)
    args = ["--root", str(built.root), "publish", "--target", "mi355x", "--registry", r.address]
    args += ["--upstream", str(built.upstream), "--scenario", "none.toml", "--json"]
    for k, v in docker_labels.items():
        args += ["--label", f"{k}={v}"]
    args[args.index("--scenario") : args.index("--json")] = ["--skip-smoke"]
    out = CliRunner().invoke(main, args, env=cache, catch_exceptions=False)
    assert out.exit_code == 8, out.output
    assert theirs in out.output and "was not made from them" in out.output
    assert "curl -X DELETE" in out.output
    assert "smoke: skipped" not in out.output  # refused before the gates after the build
    assert oreg.dist.served_digest(planted) == theirs  # never overwritten
    for friendly in ("v0.5.14-rocm700-mi355x", "latest-mi355x"):
        assert oreg.dist.served_digest(f"{r.address}/{repository}:{friendly}") is None
