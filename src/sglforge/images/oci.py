"""The overlay image as a pure function of its inputs: one layer, a config, a manifest.

Owns the bytes of an overlay image written without an engine (issue 43). The inputs are the
base's manifest and config (read from its registry by digest), the files the queue changes
(path, mode, bytes), the paths it deletes, labels, environment and a fixed creation time;
the same inputs give the same layer, config and manifest digests on any machine:

- the layer is a tar with sorted entries, every parent directory present (0755), owner 0:0
  with empty names, mtime ``created_epoch``, no extended attributes, PAX records only where
  ustar cannot hold a field, and each deletion as an OCI whiteout ``.wh.NAME``;
- its compression is gzip with a fixed header (mtime 0, no file name, OS "unknown") around
  raw deflate at ``GZIP_LEVEL``. Deflate output is fixed for one zlib version; another zlib
  (zlib-ng, a new release) may compress differently, which changes the layer digest but
  never the ``diff_id`` (the sha256 of the uncompressed tar), kept beside it for that reason;
- the config is the base's with ``Env`` merged (a name keeps its place, as ``ENV`` does),
  ``Labels`` added, an ENTRYPOINT reset when asked (CMD kept), ``rootfs.diff_ids`` and
  ``history`` appended, ``created`` fixed; the base's build-container fields are dropped;
- JSON is written canonically (sorted keys, no spaces), so a digest never depends on a
  dict's order.

Nothing here reads a clock, the environment or the network: callers hand every input in.
"""

from __future__ import annotations

import copy
import datetime as _dt
import hashlib
import io
import json
import struct
import tarfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

GZIP_LEVEL = 6
WHITEOUT = ".wh."
DIR_MODE = 0o755

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_INDEX = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
INDEX_TYPES = (DOCKER_INDEX, OCI_INDEX)
MANIFEST_TYPES = (DOCKER_MANIFEST, OCI_MANIFEST)

# Fields of a Docker image config that describe the base's own last build step (its build
# container, the engine that ran it): not facts of the overlay, and not in the OCI spec.
_DROPPED = ("container", "container_config", "docker_version")


class ImageFormatError(ValueError):
    """A base manifest or config of a shape the writer cannot derive an overlay from."""


@dataclass(frozen=True)
class LayerFile:
    """One file the layer adds: its image path, mode and bytes (or a symlink's target)."""

    path: str  # absolute image path, e.g. /sgl-workspace/sglang/python/sglang/x.py
    data: bytes = b""
    mode: int = 0o644
    link: str | None = None


@dataclass(frozen=True)
class Layer:
    """A written layer: the gzip blob, its digest, and the uncompressed tar's ``diff_id``."""

    blob: bytes
    digest: str
    diff_id: str
    tar_size: int

    @property
    def size(self) -> int:
        return len(self.blob)


@dataclass(frozen=True)
class BaseImage:
    """The base as its registry holds it: the platform manifest's bytes and its config's."""

    name: str  # repository the base lives in, e.g. 127.0.0.1:5000/lmsysorg/sglang
    digest: str  # the platform manifest's digest
    manifest: bytes
    config: bytes

    @property
    def manifest_doc(self) -> dict[str, Any]:
        return _json_object(self.manifest, "base manifest")

    @property
    def config_doc(self) -> dict[str, Any]:
        return _json_object(self.config, "base image config")

    @property
    def layers(self) -> tuple[dict[str, Any], ...]:
        """The base's layer descriptors, as its manifest lists them."""
        layers = self.manifest_doc.get("layers")
        if not isinstance(layers, list) or not all(isinstance(x, dict) for x in layers):
            raise ImageFormatError(f"{self.name}@{self.digest}: the manifest lists no layers")
        return tuple(layers)

    @property
    def size(self) -> int:
        """Bytes of the base's layers and config (what a pull of it transfers)."""
        return sum(int(x.get("size", 0)) for x in self.layers) + len(self.config)


@dataclass(frozen=True)
class OverlayImage:
    """The overlay image's blobs and digests; ``digest`` names it in any registry."""

    layer: Layer
    config: bytes
    manifest: bytes
    media_type: str

    @property
    def config_digest(self) -> str:
        return digest_of(self.config)

    @property
    def digest(self) -> str:
        return digest_of(self.manifest)


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def canonical_json(doc: Any) -> bytes:
    """The one JSON spelling of ``doc``: sorted keys, no spaces, UTF-8."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def rfc3339(epoch: int) -> str:
    """``epoch`` seconds as the RFC 3339 UTC time image configs carry."""
    when = _dt.datetime.fromtimestamp(epoch, _dt.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


# --- the layer --------------------------------------------------------------------------------


def layer_tar(files: Sequence[LayerFile], deleted: Sequence[str], mtime: int) -> bytes:
    """The layer's uncompressed tar: sorted entries, parents present, whiteouts for ``deleted``."""
    entries: dict[str, LayerFile | None] = {}  # None: a whiteout
    for f in files:
        entries[_member(f.path)] = f
    for path in deleted:
        p = PurePosixPath(_member(path))
        entries[str(p.parent / (WHITEOUT + p.name)).removeprefix("./")] = None
    dirs = {str(parent) for name in entries for parent in PurePosixPath(name).parents}
    dirs.discard(".")
    clash = sorted(set(entries) & dirs)
    if clash:
        raise ImageFormatError(f"{clash[0]}: both a file and a directory in the overlay")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar:
        for name in sorted((*dirs, *entries), key=lambda n: PurePosixPath(n).parts):
            if name in dirs:
                tar.addfile(tar_info(name, tarfile.DIRTYPE, DIR_MODE, mtime))
                continue
            entry = entries[name]
            if entry is None:
                tar.addfile(tar_info(name, tarfile.REGTYPE, 0o644, mtime))
            elif entry.link is not None:
                info = tar_info(name, tarfile.SYMTYPE, 0o777, mtime)
                info.linkname = entry.link
                tar.addfile(info)
            else:
                mode = entry.mode & 0o7777
                info = tar_info(name, tarfile.REGTYPE, mode, mtime, len(entry.data))
                tar.addfile(info, io.BytesIO(entry.data))
    return buf.getvalue()


def _member(path: str) -> str:
    """The tar member name of absolute image path ``path`` (no leading slash, no ``..``)."""
    p = PurePosixPath("/" + path.lstrip("/"))
    if ".." in p.parts or str(p) == "/":
        raise ImageFormatError(f"{path}: not a file path inside the image")
    return str(p).lstrip("/")


def tar_info(name: str, kind: bytes, mode: int, mtime: int, size: int = 0) -> tarfile.TarInfo:
    """A tar header owned by root with no user or group names: the same bytes on every host."""
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = size
    info.mode = mode
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def gzip_bytes(data: bytes, level: int = GZIP_LEVEL) -> bytes:
    """``data`` as gzip with a fixed header (mtime 0, no name, OS unknown) and raw deflate."""
    deflate = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS, 8, zlib.Z_DEFAULT_STRATEGY)
    body = deflate.compress(data) + deflate.flush()
    header = b"\x1f\x8b\x08\x00" + b"\x00\x00\x00\x00" + b"\x00\xff"
    trailer = struct.pack("<II", zlib.crc32(data) & 0xFFFFFFFF, len(data) & 0xFFFFFFFF)
    return header + body + trailer


def make_layer(files: Sequence[LayerFile], deleted: Sequence[str], mtime: int) -> Layer:
    """The overlay layer of ``files`` and ``deleted``, compressed, with both digests."""
    tar = layer_tar(files, deleted, mtime)
    blob = gzip_bytes(tar)
    return Layer(blob, digest_of(blob), digest_of(tar), len(tar))


# --- the config and the manifest --------------------------------------------------------------


@dataclass(frozen=True)
class ConfigChange:
    """What the overlay changes in the base's config (its Dockerfile's LABEL, ENV and reset)."""

    labels: Mapping[str, str]
    env: Mapping[str, str]
    created: str  # RFC 3339, from the inputs (never the clock)
    entrypoint_reset: bool = False
    created_by: str = "sglforge overlay"


def derive_config(base_config: Mapping[str, Any], layer: Layer, change: ConfigChange) -> bytes:
    """The overlay's image config, derived from the base's (canonical JSON bytes)."""
    doc = {k: copy.deepcopy(v) for k, v in base_config.items() if k not in _DROPPED}
    inner = doc.get("config")
    inner = dict(inner) if isinstance(inner, dict) else {}
    inner["Env"] = merge_env(inner.get("Env") or [], change.env)
    labels = inner.get("Labels")
    inner["Labels"] = {**(labels if isinstance(labels, dict) else {}), **change.labels}
    if change.entrypoint_reset:
        # As `ENTRYPOINT []` then `CMD [...]` restated: the run line is the command.
        inner["Entrypoint"] = None
    doc["config"] = inner
    rootfs = doc.get("rootfs")
    if not isinstance(rootfs, dict) or not isinstance(rootfs.get("diff_ids"), list):
        raise ImageFormatError("the base image config has no rootfs.diff_ids")
    doc["rootfs"] = {"type": "layers", "diff_ids": [*rootfs["diff_ids"], layer.diff_id]}
    history = doc.get("history")
    history = list(history) if isinstance(history, list) else []
    history.append({"created": change.created, "created_by": change.created_by})
    doc["history"] = history
    doc["created"] = change.created
    return canonical_json(doc)


def merge_env(base: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """``NAME=value`` entries: the base's, each name ``env`` sets replaced in place, new ones
    appended in ``env``'s order (what a Dockerfile's ENV does)."""
    out = [str(e) for e in base]
    index = {e.partition("=")[0]: i for i, e in enumerate(out)}
    for name, value in env.items():
        entry = f"{name}={value}"
        if name in index:
            out[index[name]] = entry
        else:
            index[name] = len(out)
            out.append(entry)
    return out


def make_manifest(base: BaseImage, config: bytes, layer: Layer) -> tuple[bytes, str]:
    """The overlay's manifest (base layers by digest, then ours) and its media type; the
    media types follow the base's manifest (Docker schema 2 or OCI)."""
    doc = base.manifest_doc
    kind = doc.get("mediaType") or (
        DOCKER_MANIFEST if _config_type(doc) == DOCKER_CONFIG else OCI_MANIFEST
    )
    if kind not in MANIFEST_TYPES:
        raise ImageFormatError(f"{base.name}@{base.digest}: not an image manifest ({kind})")
    docker = kind == DOCKER_MANIFEST
    out = {
        "schemaVersion": 2,
        "mediaType": kind,
        "config": {
            "mediaType": DOCKER_CONFIG if docker else OCI_CONFIG,
            "size": len(config),
            "digest": digest_of(config),
        },
        "layers": [
            *base.layers,
            {
                "mediaType": DOCKER_LAYER if docker else OCI_LAYER,
                "size": layer.size,
                "digest": layer.digest,
            },
        ],
    }
    return canonical_json(out), str(kind)


def _config_type(doc: Mapping[str, Any]) -> str | None:
    config = doc.get("config")
    return config.get("mediaType") if isinstance(config, dict) else None


def overlay_image(
    base: BaseImage,
    files: Sequence[LayerFile],
    deleted: Sequence[str],
    change: ConfigChange,
    mtime: int,
) -> OverlayImage:
    """The whole overlay image over ``base``: layer, config and manifest."""
    layer = make_layer(files, deleted, mtime)
    config = derive_config(base.config_doc, layer, change)
    manifest, kind = make_manifest(base, config, layer)
    return OverlayImage(layer, config, manifest, kind)


# --- an archive ``docker load`` takes ---------------------------------------------------------


def docker_archive(image: OverlayImage, tags: Sequence[str], mtime: int) -> bytes:
    """A ``docker load`` archive holding the overlay's config and layer only.

    The base's layers are named but not included: the engine skips a layer whose chain it
    holds already, so the base must be on the engine first (``docker pull`` by digest)."""
    config_name = image.config_digest.removeprefix("sha256:") + ".json"
    diff_ids = _json_object(image.config, "overlay config")["rootfs"]["diff_ids"]
    layers = [d.removeprefix("sha256:") + "/layer.tar" for d in diff_ids]
    manifest = canonical_json([{"Config": config_name, "RepoTags": list(tags), "Layers": layers}])
    tar = zlib.decompress(image.layer.blob, 16 + zlib.MAX_WBITS)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as out:
        for name, data in (
            (config_name, image.config),
            (layers[-1], tar),
            ("manifest.json", manifest),
        ):
            out.addfile(tar_info(name, tarfile.REGTYPE, 0o644, mtime, len(data)), io.BytesIO(data))
    return buf.getvalue()


def _json_object(data: bytes, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise ImageFormatError(f"the {what} is not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ImageFormatError(f"the {what} is not a JSON object")
    return doc


# Referenced for the docstring's claim: the zlib whose output the layer digest holds.
ZLIB_VERSION = zlib.ZLIB_RUNTIME_VERSION
