"""Pulling an image that lives only in a registry, by digest and by tag, with the registry's
login from the usual credential path (``SGLFORGE_REGISTRY_USER``/``_PASSWORD``): the baseline a
CI runner compares against is never on the runner beforehand."""

from __future__ import annotations

import io
import uuid
from pathlib import Path

import docker
import pytest

from sglforge.bench.runner import ensure_local
from sglforge.engine import images as engine_images
from sglforge.engine import registry as reg
from sglforge.engine.errors import ImageMissing, RegistryAuthRefused
from standin.registry import Registry

pytestmark = pytest.mark.docker

PASSWORD = "digest-pull-secret-7"


@pytest.fixture
def only_in_registry(
    registry: object,
    docker_client: docker.DockerClient,
    docker_labels: dict[str, str],
    standin_base: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> tuple[Registry, str, str, str]:
    """(registry, repository path, tag, digest) of a labelled image pushed then removed here."""
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker-config"))
    monkeypatch.setenv(reg.USER_ENV, "puller")
    monkeypatch.setenv(reg.PASSWORD_ENV, PASSWORD)
    r: Registry = registry("puller", PASSWORD)  # type: ignore[operator]
    marker = uuid.uuid4().hex
    dockerfile = f"FROM {standin_base}\nLABEL io.sglforge.test.pull={marker}\n"
    image, _ = docker_client.images.build(
        fileobj=io.BytesIO(dockerfile.encode()), labels=docker_labels, rm=True
    )
    repo = f"sglforge-test/pull-{marker[:8]}"
    ref = r.ref(repo, "v1")
    engine_images.tag(str(image.id), ref)
    digest = reg.push(ref, reg.credentials(r.address), attempts=1).digest
    engine_images.remove(ref)
    engine_images.remove(str(image.id))
    assert engine_images.inspect(ref) is None and engine_images.inspect(str(image.id)) is None
    return r, repo, marker, digest


def test_an_image_only_in_the_registry_is_pulled_by_digest_and_by_tag(
    only_in_registry: tuple[Registry, str, str, str],
) -> None:
    r, repo, marker, digest = only_in_registry
    name = f"{r.address}/{repo}"
    # By digest (what publish's last-release lookup and `bench --against REG/REPO@sha256:`
    # hold), with and without a tag beside it: the engine names the image REPO@sha256:...
    for ref in (f"{name}@{digest}", f"{name}:v1@{digest}"):
        got = ensure_local(ref)
        assert got == f"{name}@{digest}"
        info = engine_images.require(got)
        assert info.digest == digest and info.labels["io.sglforge.test.pull"] == marker
        engine_images.remove(got)
    # By tag, where only a tag is known.
    info = engine_images.pull(f"{name}:v1")
    assert info.digest == digest and f"{name}:v1" in info.tags
    engine_images.remove(f"{name}:v1")


def test_a_missing_digest_and_a_refused_login_say_so_without_the_password(
    only_in_registry: tuple[Registry, str, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    r, repo, _marker, digest = only_in_registry
    name = f"{r.address}/{repo}"
    other = "sha256:" + ("0" if digest[-1] != "0" else "1") * 64
    with pytest.raises(ImageMissing) as missing:
        engine_images.pull(f"{name}@{other}")
    assert other in missing.value.message
    monkeypatch.setenv(reg.PASSWORD_ENV, "wrong-" + PASSWORD)
    with pytest.raises(RegistryAuthRefused) as refused:
        engine_images.pull(f"{name}@{digest}")
    text = f"{refused.value.message} {refused.value.hint}"
    assert PASSWORD not in text and f"docker login {r.address}" in text
