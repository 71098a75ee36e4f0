"""The overlay image in a registry: its base read by digest (cached), pushed, checked, promoted.

Owns the publish side of issue 43 over ``engine.distribution`` (the registry's HTTP API; no
engine, no pull): the base's manifest and config read once per base digest and kept in the
user cache (a digest names its bytes forever, so the entry is checked, never expired); the
overlay pushed with the base's layers mounted; and the rule that makes the immutable tag
mean something: the tag names exactly the digest the inputs give, so any other image under
it (an added file, another label, another layer) is refused, named, and never promoted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglforge.engine import distribution as dist
from sglforge.engine.credentials import Credentials
from sglforge.engine.errors import RegistryError
from sglforge.engine.reference import parse
from sglforge.errors import PublishError
from sglforge.images import oci
from sglforge.util import atomic_write

CACHE_FOLDER = "oci-bases"


@dataclass(frozen=True)
class Published:
    """An overlay push: the digest the tag names, what moved, and whether it was there."""

    ref: str
    digest: str
    transfer: dist.Transfer
    already: bool = False  # the tag named this very digest before the push


def base_cache(root: Path | None = None) -> Path:
    """Where base manifests and configs are kept by digest (the user cache)."""
    from sglforge.cache import cache_root

    return (root or cache_root()) / CACHE_FOLDER


def read_base(
    ref: str,
    creds: Credentials | None = None,
    architecture: str = "amd64",
    cache: Path | None = None,
    transfer: dist.Transfer | None = None,
    offline: bool = False,
) -> oci.BaseImage:
    """The base ``ref`` names (``repo:tag``, ``repo@digest`` or both) for the platform: from
    the cache when ``ref`` carries a digest already read, else from its registry (and kept;
    ``offline``: RegistryError instead of asking)."""
    folder = cache or base_cache()
    parsed = parse(ref, allow_digest=True)
    name = f"{parsed.registry}/{parsed.repository}"
    if parsed.digest:
        found = _cached(folder, name, parsed.digest, architecture)
        if found is not None:
            return found
    if offline:
        raise RegistryError(f"{ref}: its manifest is not cached, and registries are not asked")
    remote = dist.read_image(ref, creds, architecture=architecture, transfer=transfer)
    base = oci.BaseImage(name, remote.digest, remote.manifest, remote.config)
    entry = {
        "name": name,
        "manifest": remote.manifest.decode(),
        "config": remote.config.decode(),
        "architecture": architecture,
    }
    atomic_write(_entry(folder, remote.digest, architecture), json.dumps(entry, sort_keys=True))
    if remote.index is not None:
        # Also by the index's digest (what a pull records), with the index to check it by.
        indexed = {**entry, "index": remote.index.decode()}
        key = oci.digest_of(remote.index)
        atomic_write(_entry(folder, key, architecture), json.dumps(indexed, sort_keys=True))
    return base


def _entry(folder: Path, digest: str, architecture: str) -> Path:
    return folder / f"{digest.replace(':', '-')}-{architecture}.json"


def _cached(folder: Path, name: str, digest: str, architecture: str) -> oci.BaseImage | None:
    """The cached base, only when its bytes still hash to what the manifest names (a damaged
    or planted entry reads as a miss)."""
    path = _entry(folder, digest, architecture)
    try:
        doc: Any = json.loads(path.read_text())
        manifest, config = doc["manifest"].encode(), doc["config"].encode()
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    base = oci.BaseImage(name, oci.digest_of(manifest), manifest, config)
    try:
        named = base.manifest_doc.get("config", {}).get("digest")
    except (oci.ImageFormatError, AttributeError):
        return None
    if named != oci.digest_of(config):
        return None
    if base.digest == digest:
        return base
    return base if _indexed(doc.get("index"), digest, base.digest, architecture) else None


def _indexed(index: Any, digest: str, manifest: str, architecture: str) -> bool:
    """Whether ``index`` (text) hashes to ``digest`` and lists ``manifest`` for the platform."""
    if not isinstance(index, str) or oci.digest_of(index.encode()) != digest:
        return False
    try:
        entries = json.loads(index).get("manifests") or []
    except (ValueError, AttributeError):
        return False
    return any(
        isinstance(e, dict)
        and e.get("digest") == manifest
        and (e.get("platform") or {}).get("architecture") == architecture
        for e in entries
    )


def publish(
    image: oci.OverlayImage,
    base: oci.BaseImage,
    ref: str,
    creds: Credentials | None = None,
    base_creds: Credentials | None = None,
) -> Published:
    """Push ``image`` as immutable ``ref``; PublishError when the tag names anything else.

    A tag naming this digest already is kept (same inputs, same bytes: nothing to push)."""
    existing = dist.served_digest(ref, creds)
    if existing is not None:
        if existing != image.digest:
            raise foreign(ref, existing, image.digest)
        return Published(ref, existing, dist.Transfer(), already=True)
    transfer = dist.Transfer()
    remote = dist.RemoteImage(base.name, base.digest, "", base.manifest, base.config)
    blobs = (dist.Blob(image.layer.blob), dist.Blob(image.config))
    digest = dist.push_image(
        ref, image.manifest, image.media_type, blobs, remote, creds, base_creds, transfer
    )
    served = dist.served_digest(ref, creds)
    if served != image.digest or digest != image.digest:
        # Someone pushed between the check and the PUT, or a proxy rewrites manifests.
        raise foreign(ref, served or "nothing", image.digest)
    return Published(ref, digest, transfer)


def foreign(ref: str, found: str, expected: str) -> PublishError:
    """The refusal for an image under the immutable tag that the inputs do not give."""
    parsed = parse(ref, require_registry=True)
    url = f"{parsed.base_url}/v2/{parsed.repository}/manifests/{found}"
    return PublishError(
        f"{ref} names {found} in the registry, but this queue's inputs give {expected}: that "
        "image was not made from them (a file, a label or a layer differs); it is never "
        "reused or promoted",
        f"inspect it (sglforge inspect {parsed.name}@{found}); if it is wrong, delete it "
        f"(curl -X DELETE {url}, or the registry's UI) and rerun sglforge publish",
    )


def promote(image: oci.OverlayImage, ref: str, creds: Credentials | None = None) -> str:
    """Point friendly tag ``ref`` at ``image`` (its blobs are in the repository already)."""
    digest = dist.tag_manifest(ref, image.manifest, image.media_type, creds)
    if digest != image.digest:
        raise PublishError(f"{ref}: the registry stored {digest}, expected {image.digest}")
    return digest
