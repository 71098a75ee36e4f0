"""The remote registry's distribution API, without the engine: read an image, push one by blobs.

Owns what ``sglforge`` asks a registry over HTTP when it publishes an overlay written by
``sglforge.images.oci`` (issue 43): the base's manifest read by digest (an index resolved to
the target's platform) and its config; then the overlay pushed with the base's layers
mounted from the base's repository (``POST /v2/<name>/blobs/uploads/?mount=<digest>&from=
<repository>``) where the registry is the same one and agrees, copied blob by blob (streamed)
otherwise, only the new layer and config uploaded, and the manifest ``PUT`` under its tag.
No base layer is ever read when a mount works; every byte sent or received is counted
(:class:`Transfer`) so a bench can hold that.

The HTTP client and the auth handshake are ``engine.credentials.RegistrySession``'s; bounded
reads are ``engine.registry``'s. The first request of a push session is a write (a mount or
an upload), so a token service grants push and pull together.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urljoin

from sglforge.engine.credentials import Credentials, RegistrySession, login_hint
from sglforge.engine.errors import (
    ManifestMissing,
    PushFailed,
    RegistryAuthRefused,
    RegistryError,
)
from sglforge.engine.reference import ImageRef, parse
from sglforge.engine.registry import BLOB_CAP, MANIFEST_ACCEPT, MANIFEST_CAP, _get, _object

INDEX_TYPES = (
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.index.v1+json",
)
COPY_CHUNK = 1 << 20


@dataclass
class Transfer:
    """What one push moved: bytes sent and received, and each blob's fate by digest."""

    sent: int = 0
    received: int = 0
    mounted: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)  # the target repository had it
    copied: list[str] = field(default_factory=list)
    uploaded: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sent": self.sent,
            "received": self.received,
            "mounted": len(self.mounted),
            "present": len(self.present),
            "copied": len(self.copied),
            "uploaded": len(self.uploaded),
        }


@dataclass(frozen=True)
class RemoteImage:
    """One platform image in a registry: its manifest's bytes and digest, its config's bytes."""

    name: str  # registry/repository
    digest: str
    media_type: str
    manifest: bytes
    config: bytes
    index: bytes | None = None  # the index the reference named, when it named one


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def read_image(
    ref: str,
    creds: Credentials | None = None,
    architecture: str = "amd64",
    os_name: str = "linux",
    transfer: Transfer | None = None,
) -> RemoteImage:
    """The image ``ref`` (a tag or ``@digest``) names, for ``os_name``/``architecture``.

    Every answer is checked against the digest that names it: a manifest asked for by digest
    must hash to it, a config must hash to the manifest's descriptor."""
    parsed = parse(ref, require_registry=True, allow_digest=True)
    transfer = transfer if transfer is not None else Transfer()
    what = f"reading the manifest of {ref}"
    with RegistrySession(parsed.registry, creds) as session:
        wanted = parsed.digest or parsed.tag
        body, kind = _manifest(session, parsed, wanted, what, transfer)
        index = None
        if kind in INDEX_TYPES or "manifests" in _object(body, ref, "manifest"):
            index = body
            chosen = _platform_entry(_object(body, ref, "index"), ref, architecture, os_name)
            body, kind = _manifest(session, parsed, chosen, what, transfer)
            if digest_of(body) != chosen:
                raise RegistryError(f"{ref}: the manifest served for {chosen} has another sha256")
        doc = _object(body, ref, "manifest")
        config = doc.get("config")
        digest = config.get("digest") if isinstance(config, dict) else None
        if not isinstance(digest, str):
            raise RegistryError(f"{ref}: the manifest names no config blob")
        blob = _get(
            session, parsed, f"blobs/{digest}", f"reading the config of {ref}", cap=BLOB_CAP
        )
        transfer.received += len(blob)
        if digest_of(blob) != digest:
            raise RegistryError(f"{ref}: the config blob served for {digest} has another sha256")
    name = f"{parsed.registry}/{parsed.repository}"
    return RemoteImage(name, digest_of(body), kind, body, blob, index)


def _manifest(
    session: RegistrySession, ref: ImageRef, wanted: str, what: str, transfer: Transfer
) -> tuple[bytes, str]:
    headers: dict[str, str] = {}
    body = _get(session, ref, f"manifests/{wanted}", what, MANIFEST_ACCEPT, headers=headers)
    transfer.received += len(body)
    if wanted.startswith("sha256:") and digest_of(body) != wanted:
        raise RegistryError(f"{ref}: the manifest served for {wanted} has another sha256")
    kind = headers.get("content-type", "").split(";")[0].strip()
    doc_kind = _object(body, str(ref), "manifest").get("mediaType")
    return body, str(doc_kind or kind)


def _platform_entry(index: Mapping[str, Any], ref: str, arch: str, os_name: str) -> str:
    entries = index.get("manifests")
    if not isinstance(entries, list):
        raise RegistryError(f"{ref}: the registry's index lists no manifests")
    for entry in entries:
        platform = entry.get("platform") if isinstance(entry, dict) else None
        if not isinstance(platform, dict) or not isinstance(entry.get("digest"), str):
            continue
        if platform.get("architecture") == arch and platform.get("os") == os_name:
            return str(entry["digest"])
    listed = sorted(
        f"{(e.get('platform') or {}).get('os')}/{(e.get('platform') or {}).get('architecture')}"
        for e in entries
        if isinstance(e, dict)
    )
    raise RegistryError(
        f"{ref}: the index has no {os_name}/{arch} image (it lists {', '.join(listed) or 'none'})",
        "pass --base-image with an image built for the target's platform",
    )


def served_digest(ref: str, creds: Credentials | None = None, timeout: float = 15.0) -> str | None:
    """The digest the registry serves for tag ``ref`` (the manifest's own sha256, checked
    against ``Docker-Content-Digest``); None when the tag does not exist."""
    parsed = parse(ref, require_registry=True)
    headers: dict[str, str] = {}
    try:
        with RegistrySession(parsed.registry, creds, timeout) as session:
            body = _get(
                session,
                parsed,
                f"manifests/{parsed.tag}",
                "reading the tag",
                MANIFEST_ACCEPT,
                headers=headers,
            )
    except ManifestMissing:
        return None
    own = digest_of(body)
    said = headers.get("docker-content-digest")
    if said and said != own:
        raise RegistryError(
            f"{ref}: the registry says {said} for this tag, its manifest's own sha256 is {own}",
            f"the registry {parsed.registry} (or a proxy in front of it) does not serve what it "
            "was sent",
        )
    return own


# --- the push ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Blob:
    """A blob the push uploads: its bytes (the overlay's layer or config)."""

    data: bytes

    @property
    def digest(self) -> str:
        return digest_of(self.data)


def push_image(
    ref: str,
    manifest: bytes,
    media_type: str,
    blobs: Sequence[Blob],
    base: RemoteImage | None,
    creds: Credentials | None = None,
    base_creds: Credentials | None = None,
    transfer: Transfer | None = None,
) -> str:
    """Push the image ``manifest`` describes as ``ref`` (``registry/repository:tag``): the
    base's layers mounted (or copied), ``blobs`` uploaded, the manifest PUT; its digest.
    Without a ``base`` every layer must be among ``blobs`` (a base pushed by a test)."""
    target = parse(ref, require_registry=True)
    transfer = transfer if transfer is not None else Transfer()
    ours = {b.digest for b in blobs}
    layers = [
        (str(d["digest"]), int(d.get("size", 0)))
        for d in _object(manifest, ref, "manifest").get("layers", [])
        if isinstance(d, dict) and d.get("digest") not in ours
    ]
    if layers and base is None:
        raise PushFailed(f"{ref}: the manifest names layers that are neither given nor a base's")
    with RegistrySession(target.registry, creds) as session:
        if base is None or parse(base.name, require_registry=True).registry != target.registry:
            # No mount comes first: an upload opened (and cancelled) does the login, so the
            # token asked for covers push as well as pull.
            opened = _start_upload(session, target, transfer)
            session.request("DELETE", opened).close()
        for digest, _size in layers:
            assert base is not None
            source = parse(base.name + "@" + base.digest, require_registry=True, allow_digest=True)
            _mount_or_copy(session, target, source, digest, base_creds, transfer)
        for blob in blobs:
            _upload(session, target, blob, transfer)
        return _put_manifest(session, target, target.tag, manifest, media_type, transfer)


def tag_manifest(ref: str, manifest: bytes, media_type: str, creds: Credentials | None) -> str:
    """PUT ``manifest`` (whose blobs the repository holds already) under tag ``ref``."""
    target = parse(ref, require_registry=True)
    with RegistrySession(target.registry, creds) as session:
        return _put_manifest(session, target, target.tag, manifest, media_type, Transfer())


def _url(ref: ImageRef, path: str) -> str:
    return f"{ref.base_url}/v2/{ref.repository}/{path}"


def _check(resp: Any, ref: ImageRef, what: str, session: RegistrySession) -> None:
    if resp.status_code in (401, 403):
        who = f"the login of {session.creds.username!r}" if session.creds else "anonymous access"
        raise RegistryAuthRefused(
            f"{ref.registry}/{ref.repository}: registry refused {who} (HTTP {resp.status_code}) "
            f"while {what}",
            login_hint(ref.registry),
        )
    if resp.status_code >= 400:
        raise PushFailed(
            f"{ref.registry}/{ref.repository}: registry answered HTTP {resp.status_code} while "
            f"{what}: {resp.text[:200]}",
            f"check the registry (curl {ref.base_url}/v2/) and rerun sglforge publish",
        )


def _mount_or_copy(
    session: RegistrySession,
    target: ImageRef,
    source: ImageRef,
    digest: str,
    source_creds: Credentials | None,
    transfer: Transfer,
) -> None:
    """The base layer ``digest`` in ``target``'s repository: mounted when the registries are
    one and it agrees (201), already there, or else copied through an upload session."""
    if source.registry == target.registry:
        url = _url(target, f"blobs/uploads/?mount={quote(digest)}&from={quote(source.repository)}")
        resp = session.request("POST", url, data=b"")
        resp.close()
        _check(resp, target, f"mounting {digest}", session)
        if resp.status_code == 201:
            transfer.mounted.append(digest)
            return
        # 202: the registry opened an upload instead (no mount); it is used for the copy.
        location = urljoin(url, resp.headers.get("Location", ""))
    else:
        head = session.request("HEAD", _url(target, f"blobs/{digest}"))
        head.close()
        if head.status_code == 200:
            transfer.present.append(digest)
            return
        location = _start_upload(session, target, transfer)
    with RegistrySession(source.registry, source_creds) as reader:
        resp = reader.request("GET", _url(source, f"blobs/{digest}"), stream=True)
        try:
            _check(resp, source, f"reading base layer {digest}", reader)
            _finish_upload(session, target, location, digest, _counted(resp, transfer), transfer)
        finally:
            resp.close()
    transfer.copied.append(digest)


def _counted(resp: Any, transfer: Transfer) -> Iterator[bytes]:
    for chunk in resp.iter_content(COPY_CHUNK):
        transfer.received += len(chunk)
        yield chunk


def _start_upload(session: RegistrySession, target: ImageRef, transfer: Transfer) -> str:
    url = _url(target, "blobs/uploads/")
    resp = session.request("POST", url, data=b"")
    resp.close()
    _check(resp, target, "starting an upload", session)
    if resp.status_code != 202 or not resp.headers.get("Location"):
        raise PushFailed(
            f"{target.registry}/{target.repository}: the registry opened no upload "
            f"(HTTP {resp.status_code})",
            f"check the registry (curl {target.base_url}/v2/) and rerun sglforge publish",
        )
    # str(): requests before 2.32 (the declared floor is 2.31) types its headers as Any
    return urljoin(url, str(resp.headers["Location"]))


def _upload(session: RegistrySession, target: ImageRef, blob: Blob, transfer: Transfer) -> None:
    head = session.request("HEAD", _url(target, f"blobs/{blob.digest}"))
    head.close()
    if head.status_code == 200:
        transfer.present.append(blob.digest)
        return
    location = _start_upload(session, target, transfer)
    _finish_upload(session, target, location, blob.digest, blob.data, transfer)
    transfer.uploaded.append(blob.digest)


def _finish_upload(
    session: RegistrySession,
    target: ImageRef,
    location: str,
    digest: str,
    body: bytes | Iterator[bytes],
    transfer: Transfer,
) -> None:
    """A monolithic PUT of ``body`` closing the upload at ``location`` as ``digest``."""
    sep = "&" if "?" in location else "?"
    data: bytes | Iterator[bytes]
    if isinstance(body, bytes):
        transfer.sent += len(body)
        data = body
    else:
        data = _sent(body, transfer)
    headers = {"Content-Type": "application/octet-stream"}
    resp = session.request(
        "PUT", f"{location}{sep}digest={quote(digest)}", data=data, headers=headers
    )
    resp.close()
    _check(resp, target, f"uploading {digest}", session)
    said = resp.headers.get("Docker-Content-Digest")
    if said and said != digest:
        raise PushFailed(f"{target}: the registry stored {digest} as {said}")


def _sent(chunks: Iterator[bytes], transfer: Transfer) -> Iterator[bytes]:
    for chunk in chunks:
        transfer.sent += len(chunk)
        yield chunk


def _put_manifest(
    session: RegistrySession,
    target: ImageRef,
    tag: str,
    manifest: bytes,
    media_type: str,
    transfer: Transfer,
) -> str:
    url = _url(target, f"manifests/{tag}")
    resp = session.request("PUT", url, data=manifest, headers={"Content-Type": media_type})
    resp.close()
    transfer.sent += len(manifest)
    _check(resp, target, f"putting the manifest of {target.repository}:{tag}", session)
    digest = digest_of(manifest)
    said = resp.headers.get("Docker-Content-Digest")
    if said and said != digest:
        raise PushFailed(
            f"{target.registry}/{target.repository}:{tag}: the registry stored the manifest as "
            f"{said}, its sha256 is {digest}",
            "the registry (or a proxy in front of it) rewrites manifests; check it",
        )
    return digest


__all__ = [
    "MANIFEST_CAP",
    "Blob",
    "RemoteImage",
    "Transfer",
    "push_image",
    "read_image",
    "served_digest",
    "tag_manifest",
]
