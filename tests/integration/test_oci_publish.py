"""The overlay pushed by blobs to Debian's registry on 127.0.0.1, no engine (issue 43).

A base is pushed first (a layer and config written here, so the registry holds real blobs);
then the overlay is written from the base's manifest and config as the registry serves them,
and published with the base's layers mounted, copied across registries, or refused when
another image sits under the immutable tag.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from sglforge.engine import distribution as dist
from sglforge.engine.credentials import Credentials
from sglforge.engine.errors import RegistryAuthRefused
from sglforge.errors import PublishError
from sglforge.images import oci
from sglforge.images import registry as oreg
from standin.registry import Registry

pytestmark = pytest.mark.registry

BASE_FILES = (
    oci.LayerFile("/etc/os-release", b"ID=debian\n"),
    oci.LayerFile("/sgl-workspace/sglang/python/sglang/srt/x.py", b"print('upstream')\n"),
    oci.LayerFile("/sgl-workspace/sglang/python/sglang/srt/old.py", b"old = 1\n"),
)
FILES = (
    oci.LayerFile("/sgl-workspace/sglang/python/sglang/srt/x.py", b"print('patched')\n"),
    oci.LayerFile("/opt/sglforge/manifest.json", b'{"queue": "7ab9680e"}\n'),
)
DELETED = ("/sgl-workspace/sglang/python/sglang/srt/old.py",)
LABELS = {"io.sglforge.queue-hash": "7ab9680e", "io.sglforge.managed": "1"}
CHANGE = oci.ConfigChange(LABELS, {"SGLANG_USE_AITER": "1"}, oci.rfc3339(1700000000))


def push_base(
    address: str,
    repo: str = "lmsysorg/sglang:v0.5.14",
    kind: str = oci.DOCKER_MANIFEST,
    arch: str = "amd64",
    creds: Credentials | None = None,
) -> str:
    """A two-layer base pushed as ``address/repo``; its manifest digest."""
    layers = [
        oci.make_layer(BASE_FILES[:1], (), 0),
        oci.make_layer(BASE_FILES[1:], (), 0),
    ]
    config = oci.canonical_json(
        {
            "architecture": arch,
            "os": "linux",
            "config": {
                "Env": ["PATH=/usr/bin"],
                "WorkingDir": "/sgl-workspace",
                "Cmd": ["/bin/bash"],
            },
            "rootfs": {"type": "layers", "diff_ids": [x.diff_id for x in layers]},
            "history": [{"created_by": "base"}, {"created_by": "base"}],
        }
    )
    docker = kind == oci.DOCKER_MANIFEST
    manifest = oci.canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": kind,
            "config": {
                "mediaType": oci.DOCKER_CONFIG if docker else oci.OCI_CONFIG,
                "size": len(config),
                "digest": oci.digest_of(config),
            },
            "layers": [
                {
                    "mediaType": oci.DOCKER_LAYER if docker else oci.OCI_LAYER,
                    "size": x.size,
                    "digest": x.digest,
                }
                for x in layers
            ],
        }
    )
    blobs = [dist.Blob(x.blob) for x in layers] + [dist.Blob(config)]
    return dist.push_image(f"{address}/{repo}", manifest, kind, blobs, None, creds)


@pytest.fixture
def reg(registry: Callable[..., Registry]) -> Registry:
    return registry()


def overlay(
    address: str, cache: Path, ref: str = "lmsysorg/sglang:v0.5.14"
) -> tuple[oci.OverlayImage, oci.BaseImage]:
    base = oreg.read_base(f"{address}/{ref}", cache=cache)
    return oci.overlay_image(base, FILES, DELETED, CHANGE, 1700000000), base


def test_publish_mounts_the_base_and_uploads_only_the_layer_and_config(
    reg: Registry, tmp_path: Path
) -> None:
    push_base(reg.address)
    image, base = overlay(reg.address, tmp_path / "cache")
    ref = f"{reg.address}/sglforge/sglang:v0.5.14-rocm700-mi355x-q7ab9680e"
    done = oreg.publish(image, base, ref)
    t = done.transfer
    assert done.digest == image.digest == dist.served_digest(ref)
    assert t.mounted == [x["digest"] for x in base.layers] and not t.copied
    assert t.uploaded == [image.layer.digest, image.config_digest]
    assert t.sent == image.layer.size + len(image.config) + len(image.manifest)
    assert t.received == 0  # the base was read before the push, and no layer of it since
    # what was mounted is readable from the new repository, as a pull will read it
    for d in base.layers:
        blob = requests.get(f"{reg.url}/v2/sglforge/sglang/blobs/{d['digest']}", timeout=10)
        assert oci.digest_of(blob.content) == d["digest"]
    again = oreg.publish(image, base, ref)  # the same inputs: nothing to push
    assert again.already and again.digest == image.digest and again.transfer.sent == 0


def test_two_empty_caches_and_a_moved_clock_give_one_digest(
    reg: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    push_base(reg.address)
    first, base = overlay(reg.address, tmp_path / "cache-1")
    ref = f"{reg.address}/sglforge/sglang:v0.5.14-rocm700-mi355x-q7ab9680e"
    oreg.publish(first, base, ref)
    later = time.time() + 86400 * 400
    monkeypatch.setattr(time, "time", lambda: later)
    monkeypatch.setattr(time, "time_ns", lambda: int(later * 1e9))
    second, base2 = overlay(reg.address, tmp_path / "cache-2")
    assert second.manifest == first.manifest and base2.digest == base.digest
    assert oreg.publish(second, base2, ref).digest == first.digest
    # a third run reads the base from its cache only: the registry is not asked for it
    reg.stop()
    cached = oreg.read_base(
        f"{reg.address}/lmsysorg/sglang@{base.digest}", cache=tmp_path / "cache-2"
    )
    assert oci.overlay_image(cached, FILES, DELETED, CHANGE, 1700000000).digest == first.digest


def test_a_damaged_cache_entry_reads_as_a_miss(reg: Registry, tmp_path: Path) -> None:
    push_base(reg.address)
    _, base = overlay(reg.address, tmp_path / "cache")
    entry = next((tmp_path / "cache").iterdir())
    doc = json.loads(entry.read_text())
    doc["config"] = doc["config"].replace("/bin/bash", "/bin/evil")
    entry.write_text(json.dumps(doc))
    again = oreg.read_base(f"{reg.address}/lmsysorg/sglang@{base.digest}", cache=tmp_path / "cache")
    assert again.config == base.config


def test_another_registry_gets_the_base_layers_copied(
    registry: Callable[..., Registry], tmp_path: Path
) -> None:
    source, target = registry(), registry()
    push_base(source.address)
    image, base = overlay(source.address, tmp_path / "cache")
    done = oreg.publish(image, base, f"{target.address}/sglforge/sglang:v1")
    assert done.transfer.copied == [x["digest"] for x in base.layers] and not done.transfer.mounted
    assert done.transfer.received == sum(x["size"] for x in base.layers)
    assert dist.served_digest(f"{target.address}/sglforge/sglang:v1") == image.digest


def test_an_index_resolves_to_the_targets_platform(reg: Registry, tmp_path: Path) -> None:
    amd64 = push_base(reg.address, "lmsysorg/sglang:amd64", oci.OCI_MANIFEST)
    arm64 = push_base(reg.address, "lmsysorg/sglang:arm64", oci.OCI_MANIFEST, "arm64")
    assert arm64 != amd64
    index = oci.canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": oci.OCI_INDEX,
            "manifests": [
                {
                    "mediaType": oci.OCI_MANIFEST,
                    "digest": d,
                    "size": 1,
                    "platform": {"os": "linux", "architecture": a},
                }
                for d, a in ((arm64, "arm64"), (amd64, "amd64"))
            ],
        }
    )
    at = dist.push_image(f"{reg.address}/lmsysorg/sglang:multi", index, oci.OCI_INDEX, (), None)
    base = oreg.read_base(f"{reg.address}/lmsysorg/sglang:multi", cache=tmp_path / "c")
    assert base.digest == amd64
    with pytest.raises(Exception, match="no linux/s390x image .*linux/amd64, linux/arm64"):
        oreg.read_base(
            f"{reg.address}/lmsysorg/sglang:multi", architecture="s390x", cache=tmp_path / "c"
        )
    # What a pull records is the index's digest: the cache answers it too (the index kept
    # with the entry hashes to it and lists the manifest), with the registry gone.
    reg.stop()
    by_index = f"{reg.address}/lmsysorg/sglang@{at}"
    assert oreg.read_base(by_index, cache=tmp_path / "c").digest == amd64
    entry = oreg._entry(tmp_path / "c", at, "amd64")
    doc = json.loads(entry.read_text())
    entry.write_text(json.dumps({**doc, "index": doc["index"].replace(amd64, arm64)}))
    with pytest.raises(Exception, match="did not answer"):
        oreg.read_base(by_index, cache=tmp_path / "c")  # a planted index reads as a miss


def _added_file(image: oci.OverlayImage, base: oci.BaseImage) -> oci.OverlayImage:
    return oci.overlay_image(
        base, (*FILES, oci.LayerFile("/evil", b"EVIL\n")), DELETED, CHANGE, 1700000000
    )


def _contradicting_label(image: oci.OverlayImage, base: oci.BaseImage) -> oci.OverlayImage:
    change = oci.ConfigChange(
        {**LABELS, "io.sglforge.queue-hash": "0000deadbeef"}, CHANGE.env, CHANGE.created
    )
    return oci.overlay_image(base, FILES, DELETED, change, 1700000000)


def _another_layer(image: oci.OverlayImage, base: oci.BaseImage) -> oci.OverlayImage:
    # The same config (labels, diff_ids as claimed) and manifest shape; only the layer blob
    # is another one, of the same size.
    evil = FILES[0].data.replace(b"patched", b"evil!!!")
    layer = oci.make_layer((oci.LayerFile(FILES[0].path, evil), *FILES[1:]), DELETED, 1700000000)
    doc = json.loads(image.manifest)
    doc["layers"][-1] = {**doc["layers"][-1], "digest": layer.digest, "size": layer.size}
    return oci.OverlayImage(layer, image.config, oci.canonical_json(doc), image.media_type)


@pytest.mark.parametrize("plant", [_added_file, _contradicting_label, _another_layer])
def test_a_foreign_image_under_the_tag_is_refused_and_never_promoted(
    reg: Registry,
    tmp_path: Path,
    plant: Callable[[oci.OverlayImage, oci.BaseImage], oci.OverlayImage],
) -> None:
    push_base(reg.address)
    image, base = overlay(reg.address, tmp_path / "cache")
    ref = f"{reg.address}/sglforge/sglang:v0.5.14-rocm700-mi355x-q7ab9680e"
    theirs = plant(image, base)
    assert theirs.digest != image.digest
    oreg.publish(theirs, base, ref)  # planted by someone else
    with pytest.raises(PublishError) as err:
        oreg.publish(image, base, ref)
    text = str(err.value)
    assert theirs.digest in text and image.digest in text and "curl -X DELETE" in text
    assert dist.served_digest(ref) == theirs.digest  # nothing overwritten
    assert dist.served_digest(f"{reg.address}/sglforge/sglang:latest-mi355x") is None


def test_a_registry_that_asks_for_a_login_gets_it_and_a_wrong_one_is_refused(
    registry: Callable[..., Registry], tmp_path: Path
) -> None:
    r = registry("pusher", "oci-secret-3")
    login = Credentials("pusher", "oci-secret-3")
    push_base(r.address, creds=login)
    base = oreg.read_base(f"{r.address}/lmsysorg/sglang:v0.5.14", login, cache=tmp_path / "c")
    image = oci.overlay_image(base, FILES, DELETED, CHANGE, 1700000000)
    ref = f"{r.address}/sglforge/sglang:v1"
    with pytest.raises(RegistryAuthRefused) as refused:
        oreg.publish(image, base, ref, Credentials("pusher", "wrong-password-9"), login)
    assert "wrong-password-9" not in str(refused.value)
    done = oreg.publish(image, base, ref, login, login)
    assert done.transfer.mounted and dist.served_digest(ref, login) == image.digest
