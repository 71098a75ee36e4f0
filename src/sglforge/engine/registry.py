"""Registry operations: pushes with every event read, digest checks, tag moves, credentials.

The Docker SDK reports most push failures in-band: the HTTP call succeeds and an event in the
stream carries ``error``/``errorDetail``. Every event is read here and such an event becomes a
PublishError. Transient failures (connection refused or reset, timeouts, 5xx) are retried with
exponential backoff; authentication failures are not (retrying cannot fix a wrong password and
may lock the account).

After a push, the digest the registry serves for the tag (``HEAD /v2/<name>/manifests/<tag>``,
``Docker-Content-Digest``) is compared with the engine's local RepoDigests.

Credentials come from ``SGLFORGE_REGISTRY_USER``/``SGLFORGE_REGISTRY_PASSWORD`` or the Docker
config (``~/.docker/config.json`` or ``$DOCKER_CONFIG``). They never leave this module in a
printable form: the password is excluded from ``repr`` and never put in a message.
"""

from __future__ import annotations

import base64
import io
import ipaddress
import json
import os
import re
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import docker.auth
import docker.errors
import requests.exceptions

from sglforge.engine import LABEL, client
from sglforge.errors import ConfigError, ImageNotFound, PublishError

USER_ENV = "SGLFORGE_REGISTRY_USER"
PASSWORD_ENV = "SGLFORGE_REGISTRY_PASSWORD"

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
    "unexpected eof",
    "no such host",  # DNS hiccups on CI runners
)
_STATUS_5XX = re.compile(r"\b5\d\d\b")


@dataclass(frozen=True)
class Credentials:
    """A registry login; the password is never part of ``repr``."""

    username: str
    password: str = field(repr=False)
    source: str = "env"

    def auth_config(self) -> dict[str, str]:
        """The dict the Docker SDK sends (base64 in a header, never logged by sglforge)."""
        return {"username": self.username, "password": self.password}

    def basic(self) -> str:
        raw = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(raw).decode()


@dataclass(frozen=True)
class Reference:
    """An image reference split into registry host, repository path and tag."""

    registry: str
    repository: str
    tag: str

    def __str__(self) -> str:
        return f"{self.registry}/{self.repository}:{self.tag}"

    @property
    def name(self) -> str:
        """``registry/repository`` (what RepoDigests entries start with)."""
        return f"{self.registry}/{self.repository}"


@dataclass(frozen=True)
class Pushed:
    """One reference pushed: the digest the engine reported and the attempts it took."""

    ref: str
    digest: str
    attempts: int


# The distribution spec's grammar: a host (name, IPv4 or [IPv6]) with an optional port, then
# lowercase path components separated by "/" (each alphanumeric runs joined by ".", "_",
# "__" or dashes).
_HOST = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]+\])(?::([0-9]+))?$"
)
_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*$")
_USERINFO = re.compile(r"^(?:[a-z][a-z0-9+.-]*://)?[^/]*@", re.I)


def refuse_credentials(text: str, what: str) -> None:
    """ConfigError (exit 2) when ``text`` carries ``user:password@``; the text is never shown.

    A secret in an option would otherwise reach plans, logs, JSON, JUnit and step summaries.
    """
    if _USERINFO.match(text.strip()):
        host = text.strip().split("@", 1)[1].split("/", 1)[0]
        raise ConfigError(
            f"{what}: credentials in a registry reference are refused (user:password@ before "
            f"{host!r}; the value is not shown)",
            f"log in with `docker login {host}` or set {USER_ENV}/{PASSWORD_ENV}, and pass "
            "only HOST[:PORT][/NAMESPACE]",
        )


def check_registry(text: str, what: str = "--registry") -> str:
    """``HOST[:PORT][/NAMESPACE]`` validated and normalised; ConfigError (exit 2) otherwise.

    Checked where the option is read, before any build or smoke run: credentials, an
    uppercase or malformed repository path, a port outside 1-65535.
    """
    refuse_credentials(text, what)
    value = re.sub(r"^[a-z]+://", "", text.strip()).rstrip("/")
    if not value:
        raise ConfigError(f"{what} is empty", f"pass {what} HOST[:PORT][/NAMESPACE]")
    host, _, path = value.partition("/")
    m = _HOST.match(host)
    hint = f"e.g. {what} 127.0.0.1:5000 or {what} ghcr.io/org"
    if not m or not ("." in host or ":" in host or host == "localhost"):
        raise ConfigError(f"{what} {value!r}: {host!r} is not a registry host", hint)
    if m.group(1) is not None and not 0 < int(m.group(1)) < 65536:
        raise ConfigError(f"{what} {value!r}: port {m.group(1)} is not a TCP port", hint)
    for part in path.split("/") if path else ():
        if not _COMPONENT.match(part):
            why = "must be lowercase" if _COMPONENT.match(part.lower()) else "is not a valid name"
            raise ConfigError(
                f"{what} {value!r}: repository path component {part!r} {why} "
                "(letters a-z, digits, and . _ - between them)",
                hint,
            )
    return value


def parse_ref(ref: str) -> Reference:
    """Split ``host[:port]/path:tag``; the registry part is required (no implicit Docker Hub)."""
    refuse_credentials(ref, "image reference")
    if "@" in ref:
        raise PublishError(f"{ref}: a digest reference cannot be pushed", "push a tag instead")
    first, sep, rest = ref.partition("/")
    if not sep or not ("." in first or ":" in first or first == "localhost"):
        raise PublishError(
            f"{ref}: no registry host in the reference",
            "name the registry, e.g. --registry 127.0.0.1:5000",
        )
    repo, colon, tag = rest.rpartition(":")
    if not colon or "/" in tag:
        repo, tag = rest, "latest"
    if not repo or repo != repo.lower():
        raise PublishError(f"{ref}: repository names must be lowercase and non-empty")
    return Reference(first, repo, tag)


def is_loopback(registry: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost (registries the engine talks plain HTTP to)."""
    if registry.startswith("["):
        host = registry[1 : registry.find("]")]
    elif registry.count(":") == 1:
        host = registry.rsplit(":", 1)[0]
    else:
        host = registry
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# --- credentials ----------------------------------------------------------------------------


def credentials(registry: str, env: dict[str, str] | None = None) -> Credentials | None:
    """The login for ``registry``: the environment first, then the Docker config, else None."""
    env = dict(os.environ) if env is None else env
    user, password = env.get(USER_ENV), env.get(PASSWORD_ENV)
    if user or password:
        if not (user and password):
            missing = PASSWORD_ENV if user else USER_ENV
            raise PublishError(
                f"{USER_ENV} and {PASSWORD_ENV} must be set together ({missing} is empty)",
                f"export {missing}=... or unset both to use the Docker config",
            )
        return Credentials(user, password, "env")
    try:
        config = docker.auth.load_config(config_path=None)
        found = config.resolve_authconfig(registry)
    except (docker.errors.DockerException, OSError, ValueError) as exc:
        raise PublishError(
            f"cannot read registry credentials for {registry} from the Docker config: "
            f"{type(exc).__name__}",
            f"set {USER_ENV}/{PASSWORD_ENV} or run `docker login {registry}`",
        ) from None
    if not found:
        return None
    user = found.get("Username") or found.get("username")
    password = found.get("Password") or found.get("password")
    if user and password:
        return Credentials(user, password, "docker-config")
    return None


# --- error classification -------------------------------------------------------------------


def classify(message: str) -> str:
    """``auth``, ``transient`` or ``fatal`` for a registry or engine error message."""
    low = f" {message.lower()}"
    if any(p in low for p in _AUTH_PATTERNS):
        return "auth"
    if any(p in low for p in _TRANSIENT_PATTERNS) or _STATUS_5XX.search(low):
        return "transient"
    return "fatal"


class _Failure(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def _scrub(message: str, creds: Credentials | None) -> str:
    # Registries do not echo passwords, but a proxy or a URL with userinfo could; never risk it.
    message = re.sub(r"//[^/@\s]+:[^/@\s]+@", "//***@", message)
    if creds and creds.password:
        message = message.replace(creds.password, "***")
    return message.strip()


# --- push -----------------------------------------------------------------------------------


def _push_once(
    ref: Reference, creds: Credentials | None, progress: Callable[[str], None] | None
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
                failure = failure or _Failure(classify(msg), _scrub(msg, creds))
                continue
            aux = event.get("aux")
            if isinstance(aux, dict) and isinstance(aux.get("Digest"), str):
                digest = aux["Digest"]
            status = event.get("status")
            if progress and isinstance(status, str) and "id" not in event:
                progress(_scrub(status, creds))
    except docker.errors.APIError as exc:
        msg = str(exc.explanation or exc)
        kind = "fatal" if exc.status_code == 404 else classify(msg)
        raise _Failure(kind, _scrub(msg, creds)) from None
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
) -> Pushed:
    """Push ``ref``, read every event, retry transient errors; PublishError on failure."""
    parsed = parse_ref(ref)
    attempts = max(1, attempts)
    last: _Failure | None = None
    for attempt in range(1, attempts + 1):
        try:
            digest = _push_once(parsed, creds, progress)
            return Pushed(ref, digest, attempt)
        except _Failure as failure:
            last = failure
            if failure.kind == "auth":
                who = (
                    f"refused the login of {creds.username!r} (from {creds.source})"
                    if creds
                    else "requires a login and none was found"
                )
                raise PublishError(
                    f"push {ref}: registry {parsed.registry} {who}: {failure.message}",
                    f"set {USER_ENV}/{PASSWORD_ENV} or run `docker login {parsed.registry}`",
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
    raise PublishError(
        f"push {ref} failed{tried}: {last.message}",
        f"check that the registry {parsed.registry} is up (curl http://{parsed.registry}/v2/) "
        "and rerun sglforge publish",
    )


def tag(image: str, ref: str) -> None:
    """Point ``ref`` at ``image`` in the local engine (moving it if it existed)."""
    parsed = parse_ref(ref)
    try:
        ok = client().api.tag(image, parsed.name, parsed.tag, force=True)
    except docker.errors.APIError as exc:
        raise PublishError(f"tag {image} as {ref}: {exc.explanation or exc}") from None
    if not ok:
        raise PublishError(f"tag {image} as {ref}: the engine refused")


def local_id(ref: str) -> str | None:
    """The local image id ``ref`` points at, or None if it does not exist locally."""
    try:
        return str(client().api.inspect_image(ref)["Id"])
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as exc:
        raise PublishError(f"inspect {ref}: {exc.explanation or exc}") from None


def local_repo_digest(ref: str) -> str | None:
    """The digest in the local image's RepoDigests for ``ref``'s repository, if any."""
    parsed = parse_ref(ref)
    try:
        attrs = client().api.inspect_image(ref)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as exc:
        raise PublishError(f"inspect {ref}: {exc.explanation or exc}") from None
    for entry in attrs.get("RepoDigests") or []:
        name, _, digest = str(entry).partition("@")
        if name == parsed.name:
            return digest
    return None


def local_repo_digests(image: str, ref: str) -> tuple[str, ...]:
    """Digests the local ``image`` has in the repository of ``ref`` (its RepoDigests)."""
    name = parse_ref(ref).name
    try:
        attrs = client().api.inspect_image(image)
    except docker.errors.ImageNotFound:
        return ()
    except docker.errors.APIError as exc:
        raise PublishError(f"inspect {image}: {exc.explanation or exc}") from None
    out = []
    for entry in attrs.get("RepoDigests") or []:
        repo, _, digest = str(entry).partition("@")
        if repo == name:
            out.append(digest)
    return tuple(out)


# --- the registry HTTP API -----------------------------------------------------------------


def _base_url(registry: str) -> str:
    scheme = "http" if is_loopback(registry) else "https"
    return f"{scheme}://{registry}"


class _Missing(PublishError):
    """The registry has no such manifest or blob (HTTP 404)."""


class _Unreachable(PublishError):
    """The registry did not answer."""


def _bearer_token(
    challenge: str, creds: Credentials | None, timeout: float, registry: str = ""
) -> str:
    """A token from the registry's token service (ghcr.io, Docker Hub, Harbor...)."""
    params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    realm = params.pop("realm", "")
    if not realm:
        raise PublishError("registry asked for a bearer token without a realm")
    url = realm + "?" + urllib.parse.urlencode(params)
    req = urllib.request.Request(url)
    if creds:
        req.add_header("Authorization", creds.basic())
    hint = f"set {USER_ENV}/{PASSWORD_ENV} or run `docker login {registry}`"
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - registry realm
            body = json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        exc.close()
        login = f"the login of {creds.username!r}" if creds else "anonymous access"
        if exc.code in (401, 403):
            raise PublishError(
                f"registry {registry}: its token service refused the credentials ({login}, "
                f"HTTP {exc.code})",
                hint,
            ) from None
        raise _Unreachable(
            f"registry {registry}: its token service answered HTTP {exc.code}", hint
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise _Unreachable(
            f"registry {registry}: its token service did not answer: {_scrub(str(reason), creds)}",
            hint,
        ) from None
    token = body.get("token") or body.get("access_token")
    if not token:
        raise PublishError("the registry's token service returned no token")
    return str(token)


def _request(
    ref: Reference,
    path: str,
    creds: Credentials | None,
    *,
    method: str = "GET",
    accept: str | None = None,
    what: str = "checking the digest",
    timeout: float = 15.0,
) -> tuple[dict[str, str], bytes]:
    """One registry API call (``/v2/<name>/<path>``) with Basic or Bearer auth as challenged."""
    if ref.repository:
        url = f"{_base_url(ref.registry)}/v2/{ref.repository}/{path}"
    else:  # the registry's base endpoint
        url = f"{_base_url(ref.registry)}/v2/"
    name = str(ref) if ref.repository else ref.registry
    auth: str | None = None
    for _ in range(2):
        req = urllib.request.Request(url, method=method)
        if accept:
            req.add_header("Accept", accept)
        if auth:
            req.add_header("Authorization", auth)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
                return dict(resp.headers), resp.read()
        except urllib.error.HTTPError as exc:
            exc.close()  # the error carries the open response; the body is not needed
            challenge = exc.headers.get("WWW-Authenticate", "") if exc.headers else ""
            if exc.code == 401 and auth is None and challenge:
                if challenge.lower().startswith("bearer"):
                    auth = "Bearer " + _bearer_token(challenge, creds, timeout, ref.registry)
                    continue
                if creds:
                    auth = creds.basic()
                    continue
            if exc.code in (401, 403):
                login = f"the login of {creds.username!r}" if creds else "anonymous access"
                raise PublishError(
                    f"{name}: registry {ref.registry} refused the credentials ({login}, "
                    f"HTTP {exc.code}) while {what}",
                    f"set {USER_ENV}/{PASSWORD_ENV} or run `docker login {ref.registry}`",
                ) from None
            if exc.code == 404:
                raise _Missing(f"{name}: the registry has no {path} (HTTP 404)") from None
            raise PublishError(f"{name}: registry answered HTTP {exc.code} while {what}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise _Unreachable(
                f"{name}: registry {ref.registry} unreachable while {what}: "
                f"{_scrub(str(reason), creds)}",
                f"check that the registry is up: curl {_base_url(ref.registry)}/v2/",
            ) from None
    raise PublishError(f"{name}: registry {ref.registry} refused the credentials while {what}")


def check_login(registry: str, creds: Credentials | None) -> None:
    """Fail early when ``registry`` refuses the login (``GET /v2/``); silent when it is down.

    A refused login would otherwise surface only after the build and the smoke run; a
    registry that is down may be back by then, and ``push`` retries it.
    """
    try:
        _request(Reference(registry, "", ""), "", creds, what="checking the login")
    except (_Unreachable, _Missing):
        return
    except PublishError as exc:
        if "refused the credentials" in exc.message:
            raise
        return  # other answers (5xx, odd proxies) are left to the push and its retries


def registry_digest(ref: str, creds: Credentials | None = None, timeout: float = 15.0) -> str:
    """The digest the registry serves for ``ref`` (``HEAD /v2/<name>/manifests/<tag>``)."""
    parsed = parse_ref(ref)
    try:
        headers, _ = _request(
            parsed,
            f"manifests/{parsed.tag}",
            creds,
            method="HEAD",
            accept=MANIFEST_ACCEPT,
            timeout=timeout,
        )
    except _Missing:
        raise PublishError(
            f"{ref}: the registry has no such tag (HTTP 404)",
            "rerun sglforge publish; check the registry's storage",
        ) from None
    lowered = {k.lower(): v for k, v in headers.items()}
    digest = lowered.get("docker-content-digest")
    if not digest:
        raise PublishError(f"{ref}: the registry answered without a Docker-Content-Digest header")
    return str(digest)


def registry_digest_or_none(ref: str, creds: Credentials | None = None) -> str | None:
    """The registry's digest for ``ref``; None when the tag is absent or the registry is down.

    A registry that is down is left to ``push``, which retries and reports it; a refused
    login is raised here (retrying cannot fix it).
    """
    parsed = parse_ref(ref)
    try:
        headers, _ = _request(
            parsed, f"manifests/{parsed.tag}", creds, method="HEAD", accept=MANIFEST_ACCEPT
        )
    except (_Missing, _Unreachable):
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    return lowered.get("docker-content-digest") or None


def registry_labels(ref: str, creds: Credentials | None = None) -> dict[str, str]:
    """The labels of the image ``ref`` names in the registry (manifest -> config blob)."""
    parsed = parse_ref(ref)
    what = "reading the image config"
    _, body = _request(parsed, f"manifests/{parsed.tag}", creds, accept=MANIFEST_ACCEPT, what=what)
    manifest = json.loads(body or b"{}")
    if "manifests" in manifest:  # an index: take the linux/amd64 image (what the engine runs)
        chosen = next(
            (
                m
                for m in manifest["manifests"]
                if (m.get("platform") or {}).get("architecture") in ("amd64", None)
            ),
            None,
        )
        if chosen is None:
            return {}
        _, body = _request(
            parsed, f"manifests/{chosen['digest']}", creds, accept=MANIFEST_ACCEPT, what=what
        )
        manifest = json.loads(body or b"{}")
    config_digest = (manifest.get("config") or {}).get("digest")
    if not config_digest:
        return {}
    _, blob = _request(parsed, f"blobs/{config_digest}", creds, what=what)
    config = json.loads(blob or b"{}")
    labels = (config.get("config") or {}).get("Labels") or {}
    return {str(k): str(v) for k, v in labels.items()}


def verify(ref: str, pushed_digest: str, creds: Credentials | None = None) -> str:
    """Check registry digest == local RepoDigest == the digest the push reported."""
    remote = registry_digest(ref, creds)
    local = local_repo_digest(ref)
    if local is None:
        raise PublishError(
            f"{ref}: the engine recorded no RepoDigest for this repository after the push",
            "rerun sglforge publish",
        )
    if not (remote == local == pushed_digest):
        raise PublishError(
            f"{ref}: digest mismatch: registry {remote}, local {local}, push reported "
            f"{pushed_digest}",
            "someone else may be pushing the same tag; rerun sglforge publish",
        )
    return remote


# --- reading an image without running it ----------------------------------------------------


def image_attrs(image: str) -> dict[str, Any]:
    """The engine's inspect data for ``image`` (labels under Config.Labels)."""
    try:
        return dict(client().api.inspect_image(image))
    except docker.errors.ImageNotFound:
        raise ImageNotFound(
            f"{image}: no such image in the local engine",
            f"pull it first: sglforge inspect --pull {image} (or docker pull {image})",
        ) from None
    except docker.errors.APIError as exc:
        if exc.status_code == 400:  # "invalid reference format": a typo, not the registry
            raise ConfigError(f"inspect {image}: {exc.explanation or exc}") from None
        raise PublishError(f"inspect {image}: {exc.explanation or exc}") from None


def pull(ref: str, creds: Credentials | None = None) -> str:
    """Pull ``ref`` into the local engine and return its image id."""
    parsed = parse_ref(ref)
    kwargs: dict[str, object] = {"tag": parsed.tag, "stream": True, "decode": True}
    if creds:
        kwargs["auth_config"] = creds.auth_config()
    error: str | None = None
    try:
        for event in client().api.pull(parsed.name, **kwargs):  # read to the end, as in push
            if isinstance(event, dict) and ("error" in event or "errorDetail" in event):
                error = error or _scrub(str(event.get("error")), creds)
    except docker.errors.APIError as exc:
        text = _scrub(str(exc.explanation or exc), creds)
        if exc.status_code == 404:
            hint = f"check the tag: docker pull {ref}"
            raise ImageNotFound(f"pull {ref}: {text}", hint) from None
        raise PublishError(f"pull {ref}: {text}") from None
    if error:
        if re.search(r"manifest unknown|not found|does not exist", error, re.I):
            raise ImageNotFound(f"pull {ref}: {error}", f"check the tag: docker pull {ref}")
        raise PublishError(f"pull {ref}: {error}", f"check the registry: docker pull {ref}")
    found = local_id(ref)
    if not found:
        raise PublishError(f"pull {ref}: the engine has no image after the pull")
    return found


def read_image_file(image: str, path: str) -> bytes | None:
    """The bytes of ``path`` inside ``image`` (a created, never started container), or None."""
    api = client().api
    # Named up front, so a Ctrl-C while the engine creates it still leaves a name to remove.
    cid = f"sglforge-read-{uuid.uuid4().hex[:12]}"
    try:
        try:
            api.create_container(
                image,
                command=["/nonexistent-never-started"],
                name=cid,
                labels={LABEL: "1"},
                network_disabled=True,
            )
        except docker.errors.APIError as exc:
            raise PublishError(
                f"{image}: cannot create a container to read {path}: {exc}"
            ) from None
        try:
            stream, _ = api.get_archive(cid, path)
        except docker.errors.NotFound:
            return None
        data = b"".join(stream)
    finally:
        try:
            api.remove_container(cid, force=True)
        except docker.errors.APIError:
            pass
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                fh = tar.extractfile(member)
                return fh.read() if fh else None
    return None
