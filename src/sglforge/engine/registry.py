"""The remote registry: pushes with every event read, digests, labels and tag lists of tags.

The Docker SDK reports most push failures in-band: the HTTP call succeeds and an event in the
stream carries ``error``/``errorDetail``. Every event is read here and such an event becomes a
PushFailed. Transient failures (connection refused or reset, timeouts, 5xx) are retried with
exponential backoff; authentication failures are not (retrying cannot fix a wrong password and
may lock the account).

The digest a registry serves for a tag comes from the engine (``APIClient.inspect_distribution``),
so it reaches the registry exactly as ``docker push`` does: with the engine's TLS
certificates, its insecure-registry list (127.0.0.0/8 by default) and credential helpers.
Labels of a remote image and tag lists are read over the registry's own HTTP API
(:class:`~sglforge.engine.credentials.RegistrySession`).
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import docker.errors
import requests

from sglforge.engine import client
from sglforge.engine import images as local
from sglforge.engine.credentials import (
    PASSWORD_ENV,
    USER_ENV,
    Credentials,
    RegistrySession,
    auth_config,
    credentials,
    login_hint,
    scrub,
)
from sglforge.engine.errors import (
    ManifestMissing,
    PushFailed,
    RegistryAuthRefused,
    RegistryError,
    RegistryUnreachable,
)
from sglforge.engine.reference import ImageRef, parse
from sglforge.util import abort_response, deadline, loads_bounded

__all__ = [
    "MANIFEST_ACCEPT",
    "PASSWORD_ENV",
    "USER_ENV",
    "Credentials",
    "DigestMismatch",
    "Pushed",
    "RemoteTag",
    "check_login",
    "classify",
    "credentials",
    "push",
    "registry_digest",
    "registry_digest_or_none",
    "registry_labels",
    "remote_tag",
    "remote_tags",
    "verify",
]

REGISTRY_TIMEOUT = 10.0
MAX_TAG_PAGES = 20

# A manifest larger than this is refused (distribution's own limit is 4 MiB), as is an image
# config blob larger than BLOB_CAP; a whole answer has READ_DEADLINE seconds.
MANIFEST_CAP = 4 << 20
BLOB_CAP = 16 << 20
READ_DEADLINE = 120.0

# Every manifest type a registry may hold for an image; without them a registry may convert
# the manifest (schema 1) and answer with a digest that is not the pushed one.
MANIFEST_ACCEPT = ", ".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
    ]
)

_AUTH_PATTERNS = (
    "unauthorized",
    "authentication required",
    "no basic auth credentials",
    "denied",
    "forbidden",
    "incorrect username or password",
    " 401",
    " 403",
)
_TRANSIENT_PATTERNS = (
    "connection refused",
    "connection reset",
    "broken pipe",
    "timeout",
    "timed out",
    "temporarily unavailable",
    "service unavailable",
    "bad gateway",
    "gateway time",
    "internal server error",
    "too many requests",
    "toomanyrequests",  # the distribution spec's error code, as the engine reports it (429)
    " 429",
    "rate limit",
    "unexpected eof",
    "no such host",  # DNS hiccups on CI runners
)
_STATUS_5XX = re.compile(r"\b5\d\d\b")
_MISSING = re.compile(r"manifest unknown|not found|no such manifest|does not exist", re.I)


class DigestMismatch(RegistryError):
    """The registry serves another digest for a tag than the image pushed (exit 8)."""


@dataclass(frozen=True)
class Pushed:
    """One reference pushed: the digest the engine reported and the attempts it took."""

    ref: str
    digest: str
    attempts: int


@dataclass(frozen=True)
class RemoteTag:
    """The answer of a registry about one tag: exists True/False, or None when unknown."""

    exists: bool | None
    digest: str | None
    error: str | None = None


def classify(message: str) -> str:
    """``auth``, ``transient`` or ``fatal`` for a registry or engine error message."""
    low = f" {message.lower()}"
    if any(p in low for p in _AUTH_PATTERNS):
        return "auth"
    if any(p in low for p in _TRANSIENT_PATTERNS) or _STATUS_5XX.search(low):
        return "transient"
    return "fatal"


# --- push -----------------------------------------------------------------------------------


class _Failure(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


# (layer id, status, bytes sent, layer size): the push stream's per-layer events.
LayerProgress = Callable[[str, str, int | None, int | None], None]


def _push_once(
    ref: ImageRef,
    creds: Credentials | None,
    progress: Callable[[str], None] | None,
    layer_progress: LayerProgress | None = None,
) -> str:
    api = client().api
    kwargs: dict[str, object] = {"tag": ref.tag, "stream": True, "decode": True}
    if creds:
        kwargs["auth_config"] = creds.auth_config()
    digest: str | None = None
    failure: _Failure | None = None
    try:
        events: Iterable[dict[str, object]] = api.push(ref.name, **kwargs)
        # Read the stream to its end even after an error event: the first error is the one
        # reported, and a half-read response would hold the engine connection open.
        for event in events:
            if not isinstance(event, dict):
                continue
            if "error" in event or "errorDetail" in event:
                detail = event.get("errorDetail")
                msg = (detail.get("message") if isinstance(detail, dict) else None) or str(
                    event.get("error") or "unknown error"
                )
                failure = failure or _Failure(classify(msg), scrub(msg, creds))
                continue
            aux = event.get("aux")
            if isinstance(aux, dict) and isinstance(aux.get("Digest"), str):
                digest = aux["Digest"]
            status = event.get("status")
            if progress and isinstance(status, str) and "id" not in event:
                progress(scrub(status, creds))
            layer = event.get("id")
            if layer_progress and isinstance(status, str) and isinstance(layer, str):
                # {"status": "Pushing", "id": "3f1a...", "progressDetail": {"current": n,
                # "total": m}}; "Pushed" / "Layer already exists" carry no detail.
                detail = event.get("progressDetail")
                detail = detail if isinstance(detail, dict) else {}
                current, total = detail.get("current"), detail.get("total")
                layer_progress(
                    layer,
                    status,
                    current if isinstance(current, int) else None,
                    total if isinstance(total, int) else None,
                )
    except docker.errors.APIError as exc:
        msg = str(exc.explanation or exc)
        kind = "fatal" if exc.status_code == 404 else classify(msg)
        raise _Failure(kind, scrub(msg, creds)) from None
    except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
        raise _Failure("transient", f"engine connection: {type(exc).__name__}") from None
    if failure is not None:
        raise failure
    if not digest:
        raise _Failure("fatal", "the push stream ended without a digest (no aux event)")
    return digest


def push(
    ref: str,
    creds: Credentials | None = None,
    attempts: int = 4,
    backoff: float = 2.0,
    progress: Callable[[str], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    layer_progress: LayerProgress | None = None,
) -> Pushed:
    """Push ``ref``, read every event, retry transient errors; PushFailed on failure.
    ``layer_progress`` gets each layer's (id, status, bytes sent, size) as the engine reports."""
    parsed = parse(ref, require_registry=True)
    attempts = max(1, attempts)
    last: _Failure | None = None
    for attempt in range(1, attempts + 1):
        try:
            digest = _push_once(parsed, creds, progress, layer_progress)
            return Pushed(ref, digest, attempt)
        except _Failure as failure:
            last = failure
            if failure.kind == "auth":
                who = (
                    f"refused the login of {creds.username!r} (from {creds.source})"
                    if creds
                    else "requires a login and none was found"
                )
                raise RegistryAuthRefused(
                    f"push {ref}: registry {parsed.registry} {who}: {failure.message}",
                    login_hint(parsed.registry),
                ) from None
            if failure.kind != "transient" or attempt == attempts:
                break
            wait = backoff * (2 ** (attempt - 1))
            if progress:
                progress(
                    f"push {ref}: {failure.message}; retry {attempt}/{attempts - 1} in {wait:g}s"
                )
            sleep(wait)
    assert last is not None
    tried = f" after {attempts} attempts" if last.kind == "transient" else ""
    raise PushFailed(
        f"push {ref} failed{tried}: {last.message}",
        f"check that the registry {parsed.registry} is up (curl {parsed.base_url}/v2/) "
        "and rerun sglforge publish",
    )


# --- digests, through the engine ----------------------------------------------------------


def _distribution(ref: ImageRef, creds: Credentials | None) -> str:
    """The digest the registry serves for ``ref``, asked through the engine.

    ManifestMissing, RegistryAuthRefused or RegistryUnreachable when there is none.
    """
    auth = creds.auth_config() if creds else auth_config(ref.registry)
    try:
        data = client().api.inspect_distribution(f"{ref.name}:{ref.tag}", auth_config=auth)
    except docker.errors.APIError as exc:
        text = scrub(str(exc.explanation or exc), creds)
        kind = classify(text)
        if exc.status_code == 404 or (kind == "fatal" and _MISSING.search(text)):
            raise ManifestMissing(f"{ref}: the registry has no such tag ({text})") from None
        if kind == "auth" or exc.status_code in (401, 403):
            who = f"the login of {creds.username!r}" if creds else "anonymous access"
            raise RegistryAuthRefused(
                f"{ref}: registry {ref.registry} refused the credentials ({who}): {text}",
                login_hint(ref.registry),
            ) from None
        if kind == "transient":
            raise RegistryUnreachable(
                f"{ref}: registry {ref.registry} unreachable: {text}",
                f"check that the registry is up: curl {ref.base_url}/v2/",
            ) from None
        raise RegistryError(f"{ref}: the engine could not ask the registry: {text}") from None
    digest = (data.get("Descriptor") or {}).get("digest")
    if not digest:
        raise RegistryError(f"{ref}: the registry answered without a digest")
    return str(digest)


def registry_digest(ref: str, creds: Credentials | None = None) -> str:
    """The digest the registry serves for tag ``ref``; ManifestMissing when it has none."""
    try:
        return _distribution(parse(ref, require_registry=True), creds)
    except ManifestMissing as exc:
        hint = "rerun sglforge publish; check the registry's storage"
        raise ManifestMissing(exc.message, hint) from None


def registry_digest_or_none(ref: str, creds: Credentials | None = None) -> str | None:
    """The registry's digest for ``ref``; None when the tag is absent or the registry is down.

    A registry that is down is left to ``push``, which retries and reports it; a refused
    login is raised here (retrying cannot fix it).
    """
    try:
        return _distribution(parse(ref, require_registry=True), creds)
    except (ManifestMissing, RegistryUnreachable):
        return None


def remote_tag(ref: str) -> RemoteTag:
    """Ask the image's registry, through the engine, whether tag ``ref`` exists."""
    parsed = parse(ref)
    try:
        return RemoteTag(True, _distribution(parsed, None))
    except ManifestMissing:
        return RemoteTag(False, None)
    except RegistryError as exc:
        return RemoteTag(None, None, exc.message.splitlines()[0])


def verify(ref: str, pushed_digest: str, creds: Credentials | None = None) -> str:
    """Check registry digest == local RepoDigest == the digest the push reported.

    A registry (or a proxy in front of it) that answers the tag with another digest than the
    manifest's own makes the engine look up that digest and find "manifest unknown": the
    registry's answer is then read over its HTTP API, and a digest that is not the pushed one
    is a DigestMismatch naming the image and both digests (D25)."""
    try:
        remote = registry_digest(ref, creds)
    except ManifestMissing:
        _served_digest_matches(ref, pushed_digest, creds)
        raise
    if remote != pushed_digest:
        raise DigestMismatch(
            f"{ref}: digest mismatch: the registry serves {remote} for this tag, the image "
            f"pushed is {pushed_digest}",
            "someone else may be pushing the same tag, or a proxy rewrites digests; "
            "rerun sglforge publish",
        )
    local_digests = local.repo_digests(ref, ref)
    if not local_digests:
        raise RegistryError(
            f"{ref}: the engine recorded no RepoDigest for this repository after the push",
            "rerun sglforge publish",
        )
    if remote not in local_digests:
        raise DigestMismatch(
            f"{ref}: digest mismatch: the registry serves {remote} for this tag, the image "
            f"pushed is {pushed_digest}, the engine's RepoDigests {', '.join(local_digests)}",
            "someone else may be pushing the same tag, or a proxy rewrites digests; "
            "rerun sglforge publish",
        )
    return remote


def _served_digest_matches(ref: str, pushed_digest: str, creds: Credentials | None) -> None:
    """DigestMismatch when the registry answers tag ``ref`` with a digest (its
    ``Docker-Content-Digest`` header, or the manifest's own sha256) other than
    ``pushed_digest``; nothing when it agrees or cannot be asked (the caller's error stands)."""
    parsed = parse(ref, require_registry=True)
    headers: dict[str, str] = {}
    try:
        with RegistrySession(parsed.registry, creds) as session:
            body = _get(
                session,
                parsed,
                f"manifests/{parsed.tag}",
                "checking the digest",
                MANIFEST_ACCEPT,
                headers=headers,
            )
    except RegistryError:
        return
    said = headers.get("docker-content-digest", "")
    own = "sha256:" + hashlib.sha256(body).hexdigest()
    if said and said != pushed_digest:
        detail = f"the registry answers {said} for this tag"
        if own != said:
            detail += f" (its manifest's own sha256 is {own})"
    elif own != pushed_digest and not said:
        detail = f"the registry serves a manifest of sha256 {own} for this tag"
    else:
        return
    raise DigestMismatch(
        f"{ref}: digest mismatch: {detail}, the image pushed is {pushed_digest}",
        f"the registry {parsed.registry} (or a proxy in front of it) does not serve what was "
        "pushed: check it, then rerun sglforge publish",
    )


# --- the registry HTTP API -----------------------------------------------------------------


def _get(
    session: RegistrySession,
    ref: ImageRef,
    path: str,
    what: str,
    accept: str | None = None,
    cap: int = MANIFEST_CAP,
    seconds: float | None = None,
    headers: dict[str, str] | None = None,
) -> bytes:
    """``GET /v2/<repository>/<path>`` (or ``/v2/`` for an empty repository); the body,
    read with a size cap and an overall deadline (``headers`` gets the answer's, lowercased)."""
    url = f"{ref.base_url}/v2/{ref.repository}/{path}" if ref.repository else f"{ref.base_url}/v2/"
    name = str(ref) if ref.repository else ref.registry
    resp = session.request("GET", url, headers={"Accept": accept} if accept else {}, stream=True)
    if headers is not None:
        headers.update({k.lower(): v for k, v in resp.headers.items()})
    if resp.status_code >= 400:
        resp.close()  # streamed: its socket is held until closed
    if resp.status_code in (401, 403):
        who = f"the login of {session.creds.username!r}" if session.creds else "anonymous access"
        raise RegistryAuthRefused(
            f"{name}: registry {ref.registry} refused the credentials ({who}, "
            f"HTTP {resp.status_code}) while {what}",
            login_hint(ref.registry),
        )
    if resp.status_code == 404:
        raise ManifestMissing(f"{name}: the registry has no {path} (HTTP 404)")
    if resp.status_code >= 400:
        raise RegistryError(f"{name}: registry answered HTTP {resp.status_code} while {what}")
    return _capped(resp, cap, READ_DEADLINE if seconds is None else seconds, name, what)


def _capped(resp: requests.Response, cap: int, seconds: float, name: str, what: str) -> bytes:
    """The body of ``resp``, streamed: RegistryError past ``cap`` bytes or ``seconds`` (a
    timer shuts the socket: a registry trickling bytes never ends a read on its own)."""
    chunks: list[bytes] = []
    size = 0
    with resp, deadline(seconds, lambda: abort_response(resp)) as fired:
        try:
            for chunk in resp.iter_content(1 << 16):
                size += len(chunk)
                if size > cap:
                    raise RegistryError(
                        f"{name}: the registry's answer is larger than {cap >> 20} MiB while "
                        f"{what}; not read"
                    )
                chunks.append(chunk)
        except (requests.RequestException, OSError, AttributeError, ValueError) as exc:
            if not fired.is_set():
                raise RegistryError(
                    f"{name}: the registry's answer broke off while {what} ({type(exc).__name__})"
                ) from None
        if fired.is_set():
            raise RegistryError(f"{name}: no complete answer within {seconds:g} s while {what}")
    return b"".join(chunks)


def check_login(registry: str, creds: Credentials | None) -> None:
    """Fail early when ``registry`` cannot be reached or refuses the login (``GET /v2/``).

    Both would otherwise surface only after the build and the smoke run, which take an hour
    on real hardware. Other answers (a 5xx, an odd proxy) are left to the push, which retries.
    """
    ref = ImageRef(registry, "", "")
    try:
        with RegistrySession(registry, creds) as session:
            _get(session, ref, "", "checking the login")
    except (RegistryAuthRefused, RegistryUnreachable):
        raise
    except RegistryError:
        return


def registry_labels(ref: str, creds: Credentials | None = None) -> dict[str, str]:
    """The labels of the image ``ref`` names in the registry (manifest -> config blob).

    Every answer is read bounded (size, deadline, nesting) and checked for its shape: a
    manifest, an index or a config of another shape is a RegistryError naming ``ref``."""
    parsed = parse(ref, require_registry=True)
    what = "reading the image config"
    with RegistrySession(parsed.registry, creds) as session:
        body = _get(session, parsed, f"manifests/{parsed.tag}", what, MANIFEST_ACCEPT)
        manifest = _object(body, ref, "manifest")
        if "manifests" in manifest:  # an index: the linux/amd64 image (what the engine runs)
            entries = manifest["manifests"]
            if not isinstance(entries, list) or not all(isinstance(m, dict) for m in entries):
                raise RegistryError(f"{ref}: the registry's index lists no manifests")
            chosen = next(
                (
                    m
                    for m in entries
                    if _platform(m).get("architecture") in ("amd64", None)
                    and isinstance(m.get("digest"), str)
                ),
                None,
            )
            if chosen is None:
                return {}
            body = _get(session, parsed, f"manifests/{chosen['digest']}", what, MANIFEST_ACCEPT)
            manifest = _object(body, ref, "manifest")
        config_ref = manifest.get("config")
        config_digest = config_ref.get("digest") if isinstance(config_ref, dict) else None
        if not config_digest or not isinstance(config_digest, str):
            return {}
        blob = _get(session, parsed, f"blobs/{config_digest}", what, cap=BLOB_CAP)
        config = _object(blob, ref, "image config")
    inner = config.get("config") or {}
    labels = inner.get("Labels") if isinstance(inner, dict) else None
    if labels is None:
        return {}
    if not isinstance(labels, dict):
        raise RegistryError(f"{ref}: the image config's Labels are not an object")
    return {str(k): str(v) for k, v in labels.items()}


def _object(body: bytes, ref: str, what: str) -> dict[str, Any]:
    """``body`` as a JSON object (bounded); RegistryError for any other answer."""
    try:
        data = loads_bounded(body or b"{}")
    except ValueError as exc:
        raise RegistryError(f"{ref}: the registry's {what} is not readable ({exc})") from None
    if not isinstance(data, dict):
        raise RegistryError(f"{ref}: the registry's {what} is a JSON {type(data).__name__}")
    return data


def _platform(entry: dict[str, Any]) -> dict[str, Any]:
    platform = entry.get("platform")
    return platform if isinstance(platform, dict) else {}


def remote_tags(
    repository: str, timeout: float = REGISTRY_TIMEOUT, *, missing_ok: bool = False
) -> list[str] | None:
    """The tags a registry lists for ``repository``; None when it cannot be asked.

    ``missing_ok``: a repository the registry does not know (HTTP 404, the distribution
    spec's NAME_UNKNOWN) lists no tags (``[]``) instead of None: it answered, and nothing was
    ever pushed there (a first publish).
    """
    ref = parse(repository)
    url = f"{ref.base_url}/v2/{ref.repository}/tags/list?n=1000"
    try:
        with RegistrySession(ref.registry, _creds_or_none(ref.registry), timeout) as session:
            return _tag_pages(session, url, missing_ok)
    except (RegistryError, ValueError):
        return None


def _creds_or_none(registry: str) -> Credentials | None:
    try:
        return credentials(registry)
    except RegistryError:
        return None


def _tag_pages(session: RegistrySession, url: str, missing_ok: bool = False) -> list[str] | None:
    # Registries page long lists (Docker Hub's lmsysorg/sglang has thousands of tags).
    tags: list[str] = []
    for page in range(MAX_TAG_PAGES):
        resp = session.request("GET", url, stream=True)
        if resp.status_code != 200:
            resp.close()
            return [] if missing_ok and page == 0 and resp.status_code == 404 else None
        body = _object(
            _capped(resp, MANIFEST_CAP, READ_DEADLINE, url, "listing tags"), url, "tag list"
        )
        listed = body.get("tags") or []
        if not isinstance(listed, list):
            return None
        tags.extend(t for t in listed if isinstance(t, str))
        nxt = resp.links.get("next", {}).get("url")
        if not nxt:
            break
        url = urljoin(url, nxt)
    return sorted(set(tags))
