"""Base images by version range, resolved against a real registry on 127.0.0.1.

The shipped ``images/targets.toml`` is copied with every ``lmsysorg/...`` repository moved
into a throwaway local registry, so its real ranges apply: 0.5.14 resolves to the undated
``lmsysorg/sglang:v0.5.14-rocm720-mi35x``, 0.5.16 to the newest dated
``lmsysorg/sglang-rocm:v0.5.16-rocm720-mi35x-YYYYMMDD`` the registry lists. The images pushed
are tiny ``FROM scratch`` images (TEST DOUBLES: they only need distinct digests), each carrying
the session's test labels so cleanup removes them.
"""

from __future__ import annotations

import io
import json
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from sglforge.bases import check_base
from sglforge.errors import BuildError
from sglforge.provenance import Base
from sglforge.targets import BuildTarget, load_targets
from standin.registry import Registry

pytestmark = [pytest.mark.docker, pytest.mark.registry]

REPO_ROOT = Path(__file__).resolve().parents[2]
MANIFEST_TYPES = ",".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
    ]
)


def tiny_image(client: docker.DockerClient, tag: str, labels: dict[str, str]) -> str:
    """A one-file image whose content (and so digest) depends on ``tag``; returns its ID."""
    stamp = f"{tag}\n".encode()
    dockerfile = b"FROM scratch\nCOPY stamp /stamp\n"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in (("Dockerfile", dockerfile), ("stamp", stamp)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    image, _ = client.images.build(
        fileobj=buf, custom_context=True, tag=tag, labels=labels, rm=True
    )
    return str(image.id)


def push(client: docker.DockerClient, ref: str) -> None:
    for line in client.images.push(ref, stream=True, decode=True):
        assert "error" not in line, line


def registry_digest(reg: Registry, repository: str, tag: str) -> str:
    status, headers, body = reg.get(f"/v2/{repository}/manifests/{tag}", accept=MANIFEST_TYPES)
    assert status == 200, body
    digest = {k.lower(): v for k, v in headers.items()}["docker-content-digest"]
    assert digest.startswith("sha256:")
    return digest


@pytest.fixture
def made(docker_client: docker.DockerClient) -> Iterator[list[str]]:
    """References a test tagged; removed at teardown (the session cleanup is the backstop)."""
    refs: list[str] = []
    yield refs
    for ref in refs:
        try:
            docker_client.images.remove(ref, force=True)
        except docker.errors.NotFound:
            pass


@pytest.fixture
def upstream(
    docker_client: docker.DockerClient,
    docker_labels: dict[str, str],
    registry,
    made: list[str],
    tmp_path: Path,
) -> tuple[Registry, Path, dict[str, str]]:
    """A registry holding upstream-style tags, and a project whose targets point at it.

    Returns the registry, the project root and the registry digest of each pushed tag.
    """
    reg = registry()
    # A unique namespace keeps this test's local tags apart from any other session's.
    ns = f"{reg.address}/t{uuid.uuid4().hex[:6]}/lmsysorg"
    pushed = {
        "sglang:v0.5.14-rocm720-mi35x": True,
        "sglang:v0.5.14-rocm700-mi35x": True,
        # pushed out of date order: the newest date must win, not the last push
        "sglang-rocm:v0.5.16-rocm720-mi35x-20260728": True,
        "sglang-rocm:v0.5.16-rocm720-mi35x-20260701": False,  # also kept on the engine
        "sglang-rocm:v0.5.16-rocm720-mi35x-20260726": True,
        "sglang-rocm:v0.5.16-rocm720-mi30x-20260731": True,  # another GPU family
        "sglang-rocm:v0.5.16-rocm720-mi35x-20260729-srt": True,  # another image kind
        "sglang-rocm:v0.5.18-rocm724-mi35x-20260825": True,
    }
    digests: dict[str, str] = {}
    for name, remove_local in pushed.items():
        ref = f"{ns}/{name}"
        tiny_image(docker_client, ref, docker_labels)
        made.append(ref)
        push(docker_client, ref)
        repo, _, tag = name.partition(":")
        digests[name] = registry_digest(reg, ns.partition("/")[2] + "/" + repo, tag)
        if remove_local:
            docker_client.images.remove(ref)  # only the registry has it now

    root = tmp_path / "project"
    (root / "images").mkdir(parents=True)
    text = (REPO_ROOT / "images" / "targets.toml").read_text()
    moved = text.replace('"lmsysorg/', f'"{ns}/')
    assert moved.count(f'"{ns}/') == 6, "the shipped targets changed shape: update this test"
    (root / "images" / "targets.toml").write_text(moved)
    return reg, root, digests


def target(root: Path, spec: str) -> BuildTarget:
    return load_targets(root).resolve(spec)


def check(bt: BuildTarget, version: str, offline: bool = False) -> tuple[Base, list[str]]:
    said: list[str] = []
    base = check_base(Base(ref=bt.base_image(version)), bt, offline, said.append)
    return base, said


def test_undated_0_5_14_and_newest_dated_0_5_16_with_their_digests(
    docker_client: docker.DockerClient, upstream, made: list[str]
) -> None:
    reg, root, digests = upstream
    bt = target(root, "mi355x-rocm720")
    ns = bt.base_image("0.5.14").rpartition("/sglang:")[0]

    base, _ = check(bt, "0.5.14")  # pulled through the engine
    made.append(base.ref)
    assert base.ref == f"{ns}/sglang:v0.5.14-rocm720-mi35x"
    assert base.digest == digests["sglang:v0.5.14-rocm720-mi35x"]
    assert base.id == docker_client.images.get(base.ref).id

    base, said = check(bt, "v0.5.16")
    made.append(base.ref)
    # the exact tag, not the pattern, is what the build records (labels, manifest)
    assert base.ref == f"{ns}/sglang-rocm:v0.5.16-rocm720-mi35x-20260728"
    assert base.digest == digests["sglang-rocm:v0.5.16-rocm720-mi35x-20260728"]
    assert base.pinned == base.digest
    assert base.digest != digests["sglang-rocm:v0.5.16-rocm720-mi35x-20260726"]
    assert any("newest published tag is v0.5.16-rocm720-mi35x-20260728" in s for s in said)
    labels = docker_client.images.get(base.ref).labels
    assert labels.get("io.sglforge.test") == "1"  # the image we pushed, pulled back

    r724, _ = check(target(root, "mi355x-rocm724"), "0.5.18")
    made.append(r724.ref)
    assert r724.ref == f"{ns}/sglang-rocm:v0.5.18-rocm724-mi35x-20260825"
    assert r724.digest == digests["sglang-rocm:v0.5.18-rocm724-mi35x-20260825"]


def test_offline_resolves_from_the_engine_tags(upstream, monkeypatch) -> None:
    _, root, digests = upstream
    bt = target(root, "mi355x-rocm720")
    # the engine holds only the 20260701 image; the registry is never asked
    monkeypatch.setattr(
        "sglforge.engine.registry.remote_tags",
        lambda *_a, **_k: pytest.fail("offline must not list a registry's tags"),
    )
    base, _ = check(bt, "0.5.16", offline=True)
    assert base.ref.endswith("/sglang-rocm:v0.5.16-rocm720-mi35x-20260701")
    assert base.digest == digests["sglang-rocm:v0.5.16-rocm720-mi35x-20260701"]


def test_no_matching_tag_names_the_pattern_and_the_closest_tags(upstream) -> None:
    _, root, _ = upstream
    bt = target(root, "mi355x-rocm720")
    with pytest.raises(BuildError) as err:
        check(bt, "0.5.17")
    msg = err.value.message
    assert "matches v0.5.17-rocm720-mi35x-{date}" in msg
    assert "in its registry" in msg
    closest = msg.partition("closest tags: ")[2].split(", ")
    assert closest[0] == "v0.5.16-rocm720-mi35x-20260728", msg
    assert "v0.5.18-rocm724-mi35x-20260825" in closest
    assert "pass --base-image" in (err.value.hint or "")
    # the same request offline looks at the engine only, and says so
    with pytest.raises(BuildError) as err:
        check(bt, "0.5.17", offline=True)
    assert "offline, by --offline or $SGLFORGE_OFFLINE" in err.value.message
    assert "v0.5.16-rocm720-mi35x-20260701" in err.value.message


def test_registry_tag_list_is_what_the_resolution_reads(upstream) -> None:
    reg, root, _ = upstream
    bt = target(root, "mi355x-rocm720")
    repo = bt.base_image("0.5.16").partition("/")[2].rpartition(":")[0]
    status, _, body = reg.get(f"/v2/{repo}/tags/list")
    assert status == 200
    tags = json.loads(body)["tags"]
    # sanity of the double: the registry lists what the test pushed, the newest included
    assert "v0.5.16-rocm720-mi35x-20260728" in tags and len(tags) == 6
