"""The overlay image writer: the same inputs give the same bytes; each input shows in them."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import zlib

import pytest

from sglforge.images import oci

BASE_CONFIG = {
    "architecture": "amd64",
    "os": "linux",
    "created": "2025-11-02T08:00:00.123Z",
    "container": "4f1c0ffee",
    "docker_version": "20.10.24",
    "config": {
        "Env": ["PATH=/usr/bin", "HIP_FORCE_DEV_KERNARG=0"],
        "WorkingDir": "/sgl-workspace",
        "Cmd": ["/bin/bash"],
        "Labels": {"maintainer": "upstream"},
    },
    "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "a" * 64]},
    "history": [{"created": "2025-11-02T08:00:00Z", "created_by": "ADD rootfs"}],
}
BASE_MANIFEST = {
    "schemaVersion": 2,
    "mediaType": oci.DOCKER_MANIFEST,
    "config": {"mediaType": oci.DOCKER_CONFIG, "size": 1, "digest": "sha256:" + "c" * 64},
    "layers": [{"mediaType": oci.DOCKER_LAYER, "size": 1234, "digest": "sha256:" + "b" * 64}],
}
FILES = (
    oci.LayerFile("/sgl-workspace/sglang/python/sglang/srt/x.py", b"print('patched')\n"),
    oci.LayerFile("/opt/sglforge/manifest.json", b"{}\n"),
    oci.LayerFile("/sgl-workspace/sglang/run.sh", b"#!/bin/sh\n", 0o755),
    oci.LayerFile("/sgl-workspace/sglang/link", link="run.sh"),
    oci.LayerFile("/sgl-workspace/sglang/caf\u00e9-" + "n" * 120 + ".py", b"long\n"),
)
DELETED = ("/sgl-workspace/sglang/python/sglang/srt/old.py",)
CHANGE = oci.ConfigChange(
    labels={"io.sglforge.queue-hash": "7ab9680e"},
    env={"HIP_FORCE_DEV_KERNARG": "1", "SGLANG_USE_AITER": "1"},
    created=oci.rfc3339(1700000000),
)


def base(manifest: dict[str, object] | None = None) -> oci.BaseImage:
    body = oci.canonical_json(manifest or BASE_MANIFEST)
    return oci.BaseImage(
        "127.0.0.1:5000/lmsysorg/sglang", oci.digest_of(body), body, oci.canonical_json(BASE_CONFIG)
    )


def image(**kw: object) -> oci.OverlayImage:
    args: dict[str, object] = {
        "files": FILES,
        "deleted": DELETED,
        "change": CHANGE,
        "mtime": 1700000000,
    }
    args.update(kw)
    return oci.overlay_image(base(), **args)  # type: ignore[arg-type]


def members(img: oci.OverlayImage) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(img.layer.blob))) as tar:
        return tar.getmembers()


def test_same_inputs_same_digests_whatever_the_order() -> None:
    a = image()
    b = image(files=tuple(reversed(FILES)), deleted=tuple(DELETED))
    assert (a.layer.digest, a.config_digest, a.digest) == (
        b.layer.digest,
        b.config_digest,
        b.digest,
    )
    assert a.layer.blob == b.layer.blob and a.manifest == b.manifest


@pytest.mark.parametrize(
    "change",
    [
        {"files": FILES[:-1]},  # a file fewer
        {"files": (oci.LayerFile(FILES[0].path, b"print('other')\n"), *FILES[1:])},  # bytes
        {"files": (oci.LayerFile(FILES[0].path, FILES[0].data, 0o755), *FILES[1:])},  # mode
        {"deleted": ()},  # a deletion fewer
        {"mtime": 0},  # the fixed time
        {
            "change": oci.ConfigChange(
                {"io.sglforge.queue-hash": "0000dead"}, CHANGE.env, CHANGE.created
            )
        },
        {"change": oci.ConfigChange(CHANGE.labels, {"A": "1"}, CHANGE.created)},
    ],
)
def test_every_input_changes_the_digest(change: dict[str, object]) -> None:
    assert image(**change).digest != image().digest


def test_layer_entries_are_sorted_rooted_owned_by_root_with_parents_and_whiteouts() -> None:
    got = members(image())
    names = [m.name for m in got]
    assert names == sorted(names, key=lambda n: n.split("/"))
    assert "sgl-workspace/sglang/python/sglang/srt/.wh.old.py" in names
    for name in names:  # every parent directory is an entry before its children
        parts = name.split("/")
        for i in range(1, len(parts)):
            assert "/".join(parts[:i]) in names[: names.index(name)]
    for m in got:
        assert (m.uid, m.gid, m.uname, m.gname, m.mtime) == (0, 0, "", "", 1700000000)
        assert not m.pax_headers or set(m.pax_headers) <= {"path"}, m.pax_headers
        if m.isdir():
            assert m.mode == 0o755
    by = {m.name: m for m in got}
    assert by["sgl-workspace/sglang/run.sh"].mode == 0o755
    assert by["sgl-workspace/sglang/link"].issym()
    assert by["sgl-workspace/sglang/link"].linkname == "run.sh"
    # PAX only where ustar cannot hold the name (UTF-8 and over 100 bytes)
    assert [m.name for m in got if m.pax_headers] == [FILES[-1].path.lstrip("/")]


def test_gzip_header_is_fixed_and_diff_id_is_the_tar() -> None:
    img = image()
    blob = img.layer.blob
    assert blob[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # no mtime, no name
    tar = zlib.decompress(blob, 16 + zlib.MAX_WBITS)
    assert oci.digest_of(tar) == img.layer.diff_id
    assert img.layer.tar_size == len(tar)


def test_config_keeps_the_base_and_changes_only_what_the_overlay_says() -> None:
    img = image()
    cfg = json.loads(img.config)
    inner = cfg["config"]
    assert inner["WorkingDir"] == "/sgl-workspace" and inner["Cmd"] == ["/bin/bash"]
    assert "Entrypoint" not in inner
    # the base's variable replaced in place, the new one appended
    assert inner["Env"] == ["PATH=/usr/bin", "HIP_FORCE_DEV_KERNARG=1", "SGLANG_USE_AITER=1"]
    assert inner["Labels"] == {"maintainer": "upstream", "io.sglforge.queue-hash": "7ab9680e"}
    assert cfg["rootfs"]["diff_ids"] == ["sha256:" + "a" * 64, img.layer.diff_id]
    assert cfg["created"] == cfg["history"][-1]["created"] == "2023-11-14T22:13:20Z"
    assert len(cfg["history"]) == 2
    assert not {"container", "docker_version", "container_config"} & set(cfg)
    reset = oci.ConfigChange(CHANGE.labels, CHANGE.env, CHANGE.created, entrypoint_reset=True)
    again = json.loads(image(change=reset).config)["config"]
    assert again["Entrypoint"] is None and again["Cmd"] == ["/bin/bash"]


def test_manifest_mounts_the_base_layers_and_follows_its_media_types() -> None:
    img = image()
    doc = json.loads(img.manifest)
    assert doc["mediaType"] == img.media_type == oci.DOCKER_MANIFEST
    assert doc["layers"][0] == BASE_MANIFEST["layers"][0]  # type: ignore[index]
    assert doc["layers"][1] == {
        "mediaType": oci.DOCKER_LAYER,
        "size": img.layer.size,
        "digest": img.layer.digest,
    }
    assert doc["config"]["digest"] == img.config_digest
    as_oci = {
        **BASE_MANIFEST,
        "mediaType": oci.OCI_MANIFEST,
        "config": {**BASE_MANIFEST["config"], "mediaType": oci.OCI_CONFIG},
    }  # type: ignore[dict-item]
    layer = oci.make_layer(FILES, DELETED, 0)
    body, kind = oci.make_manifest(base(as_oci), b"{}", layer)
    assert kind == oci.OCI_MANIFEST
    assert json.loads(body)["layers"][1]["mediaType"] == oci.OCI_LAYER


@pytest.mark.parametrize("bad", ["/", "/a/../etc/passwd", "../x"])
def test_paths_outside_the_image_are_refused(bad: str) -> None:
    with pytest.raises(oci.ImageFormatError):
        oci.make_layer((oci.LayerFile(bad, b"x"),), (), 0)


def test_docker_archive_holds_config_and_the_new_layer_only() -> None:
    img = image()
    with tarfile.open(fileobj=io.BytesIO(oci.docker_archive(img, ["x:1"], 0))) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
    assert manifest[0]["RepoTags"] == ["x:1"]
    assert len(manifest[0]["Layers"]) == 2 and manifest[0]["Layers"][1] in names
    assert manifest[0]["Layers"][0] not in names  # the base's: the engine holds it


def test_the_tar_is_the_same_on_any_machine() -> None:
    # A literal: the uncompressed layer (its diff_id) depends on no zlib, clock or locale.
    assert image().layer.diff_id == (
        "sha256:b436fdb48a56724f5231c71e1a06d783a6cefa6f33e6cfb3be805ad23ebebdea"
    )


@pytest.mark.parametrize(("given", "epoch"), [(None, 0), ("", 0), ("1700000000", 1700000000)])
def test_the_only_time_is_source_date_epoch(
    given: str | None, epoch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglforge import build

    if given is None:
        monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    else:
        monkeypatch.setenv("SOURCE_DATE_EPOCH", given)
    assert build.source_date_epoch() == epoch


@pytest.mark.parametrize("bad", ["yesterday", "-1", "1.5"])
def test_a_source_date_epoch_that_is_no_count_of_seconds_is_refused(
    bad: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglforge import build
    from sglforge.errors import ConfigError

    monkeypatch.setenv("SOURCE_DATE_EPOCH", bad)
    with pytest.raises(ConfigError, match="SOURCE_DATE_EPOCH"):
        build.source_date_epoch()
