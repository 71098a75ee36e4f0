"""Image references: the one type and parser every caller uses.

``ImageRef`` splits ``[registry/]repository[:tag][@digest]`` the way the engine reads it:
``registry`` is the host (``docker.io`` when none is named), ``repository`` the path at that
registry (what ``/v2/<repository>/...`` takes; ``library/ubuntu`` for ``ubuntu``), and
``name`` the spelling the engine uses in RepoTags and RepoDigests and takes for push, pull
and tag (``ubuntu``, ``lmsysorg/sglang``, ``127.0.0.1:5000/sglforge/sglang``).

The checks made on every reference and ``--registry`` value live here too: userinfo
(``user:password@``) is refused without being echoed, repository paths must be lowercase
components, ports must be TCP ports.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from sglforge.engine.errors import BadReference

DEFAULT_REGISTRY = "docker.io"
# Docker Hub serves its registry API from another host than its name.
_REGISTRY_API = {DEFAULT_REGISTRY: "registry-1.docker.io"}
USER_ENV = "SGLFORGE_REGISTRY_USER"
PASSWORD_ENV = "SGLFORGE_REGISTRY_PASSWORD"

# The distribution spec's grammar: a host (name, IPv4 or [IPv6]) with an optional port, then
# lowercase path components separated by "/" (each alphanumeric runs joined by ".", "_",
# "__" or dashes).
_HOST = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
    r"|\[[0-9A-Fa-f:.]+\])(?::([0-9]+))?$"
)
_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*$")
_DIGEST = re.compile(r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[0-9a-fA-F]{32,}$")
_USERINFO = re.compile(r"^(?:[a-z][a-z0-9+.-]*://)?[^/]*@", re.I)


@dataclass(frozen=True)
class ImageRef:
    """An image reference: registry host, repository path there, tag and optional digest."""

    registry: str
    repository: str
    tag: str = "latest"
    digest: str | None = None

    @property
    def name(self) -> str:
        """The engine's spelling of the repository (RepoTags/RepoDigests; push, pull, tag)."""
        if self.registry == DEFAULT_REGISTRY:
            return self.repository.removeprefix("library/")
        return f"{self.registry}/{self.repository}"

    @property
    def is_loopback(self) -> bool:
        """True when the registry is on this host (the engine talks plain HTTP to it)."""
        return is_loopback(self.registry)

    @property
    def api_host(self) -> str:
        """The host serving the registry API (Docker Hub's is not ``docker.io``)."""
        return _REGISTRY_API.get(self.registry, self.registry)

    @property
    def base_url(self) -> str:
        """``http://`` for loopback registries, ``https://`` for every other one."""
        return f"{'http' if self.is_loopback else 'https'}://{self.api_host}"

    def __str__(self) -> str:
        at = f"@{self.digest}" if self.digest else ""
        return f"{self.name}:{self.tag}{at}"


def refuse_controls(text: str, what: str = "image reference") -> None:
    """BadReference (exit 2) for whitespace or control characters inside ``text``, shown
    escaped: no reference holds them, and a raw newline would forge a line of the message."""
    from sglforge.util import printable

    inner = text.strip(" ")
    if any(ch.isspace() or not ch.isprintable() for ch in inner):
        shown = printable(inner[:200]).replace(" ", "\\x20")
        raise BadReference(
            f"{what} '{shown}' holds whitespace or control characters", "check the name"
        )


def refuse_credentials(text: str, what: str) -> None:
    """BadReference (exit 2) when ``text`` carries ``user:password@``; the text is never shown.

    A secret in an option would otherwise reach plans, logs, JSON, JUnit and step summaries.
    """
    if _USERINFO.match(text.strip()):
        host = text.strip().split("@", 1)[1].split("/", 1)[0]
        raise BadReference(
            f"{what}: credentials in a registry reference are refused (user:password@ before "
            f"{host!r}; the value is not shown)",
            f"log in with `docker login {host}` or set {USER_ENV}/{PASSWORD_ENV}, and pass "
            "only HOST[:PORT][/NAMESPACE]",
        )


def is_host(first: str) -> bool:
    """Whether a reference's first path component names a registry host (the docker CLI's
    rule: a dot, a port, or ``localhost``)."""
    return "." in first or ":" in first or first == "localhost"


def check_registry(text: str, what: str = "--registry") -> str:
    """``HOST[:PORT][/NAMESPACE]`` validated and normalised; BadReference (exit 2) otherwise.

    Checked where the option is read, before any build or smoke run: credentials, an
    uppercase or malformed repository path, a port outside 1-65535.
    """
    refuse_credentials(text, what)
    value = re.sub(r"^[a-z]+://", "", text.strip()).rstrip("/")
    if not value:
        raise BadReference(f"{what} is empty", f"pass {what} HOST[:PORT][/NAMESPACE]")
    host, _, path = value.partition("/")
    hint = f"e.g. {what} 127.0.0.1:5000 or {what} ghcr.io/my-team"
    _check_host(host, f"{what} {value!r}", hint)
    _check_path(path, f"{what} {value!r}", hint)
    return value


@dataclass(frozen=True)
class Registry:
    """A registry to push to, ``HOST[:PORT][/NAMESPACE]``: checked once, when it is made
    (where the command line reads ``--registry``), then carried whole to the core.

    ``Registry("http://127.0.0.1:5000/").prefix == "127.0.0.1:5000"``; BadReference (exit 2)
    as :func:`check_registry` says, naming the value (never credentials) and what to pass.
    """

    prefix: str  # normalised: no scheme, no trailing slash

    def __post_init__(self) -> None:
        object.__setattr__(self, "prefix", check_registry(self.prefix))

    @property
    def host(self) -> str:
        """``HOST[:PORT]``: what its login is kept under."""
        return self.prefix.split("/", 1)[0]

    def __str__(self) -> str:
        return self.prefix


def _check_host(host: str, where: str, hint: str) -> None:
    m = _HOST.match(host)
    if not m or not is_host(host):
        raise BadReference(f"{where}: {host!r} is not a registry host", hint)
    if m.group(1) is not None and not 0 < int(m.group(1)) < 65536:
        raise BadReference(f"{where}: port {m.group(1)} is not a TCP port", hint)


# The placeholders sglforge's own docs write for a namespace (README: ghcr.io/your-org),
# refused in any spelling: a copied example would otherwise build and smoke, then fail its push.
PLACEHOLDERS = frozenset({"your-org", "your_org", "yourorg", "your-namespace", "org-name"})


def _check_path(path: str, where: str, hint: str) -> None:
    for part in path.split("/") if path else ():
        if part.lower() in PLACEHOLDERS:
            raise BadReference(
                f"{where}: {part!r} is the documentation's placeholder, not a namespace",
                "replace it with your registry namespace, in lowercase (GHCR: your GitHub "
                "user or organisation, e.g. --registry ghcr.io/my-team)",
            )
        if not _COMPONENT.match(part):
            why = "must be lowercase" if _COMPONENT.match(part.lower()) else "is not a valid name"
            raise BadReference(
                f"{where}: repository path component {part!r} {why} "
                "(letters a-z, digits, and . _ - between them)",
                hint,
            )


def parse(
    text: str,
    *,
    what: str = "image reference",
    require_registry: bool = False,
    allow_digest: bool = False,
) -> ImageRef:
    """Split ``[registry/]repository[:tag][@digest]``; BadReference (exit 2) if malformed.

    Without a registry host the reference is Docker Hub's (``ubuntu`` is
    ``docker.io/library/ubuntu``); ``require_registry`` refuses that (what is pushed always
    names its registry). A digest is refused unless ``allow_digest``.
    """
    refuse_credentials(text, what)
    refuse_controls(text, what)
    ref = text.strip()
    hint = "e.g. 127.0.0.1:5000/sglforge/sglang:v0.5.14-rocm700-mi355x"
    rest, at, digest = ref.partition("@")
    if at:
        if not allow_digest:
            raise BadReference(f"{ref}: a digest reference cannot be used here", "name a tag")
        if not _DIGEST.match(digest):
            raise BadReference(f"{ref}: {digest!r} is not a digest", hint)
    name, tag = rest, "latest"
    if ":" in rest.rsplit("/", 1)[-1]:
        name, _, tag = rest.rpartition(":")
        if not tag:
            raise BadReference(f"{ref}: empty tag", hint)
    first, sep, path = name.partition("/")
    if sep and is_host(first):
        _check_host(first, ref, hint)
        registry = first
    elif require_registry:
        raise BadReference(
            f"{ref}: no registry host in the reference",
            "name the registry, e.g. --registry 127.0.0.1:5000",
        )
    else:
        registry, path = DEFAULT_REGISTRY, name if "/" in name else f"library/{name}"
    if not path:
        raise BadReference(f"{ref}: no repository in the reference", hint)
    _check_path(path, ref, hint)
    return ImageRef(registry, path, tag, digest or None)


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


__all__ = [
    "DEFAULT_REGISTRY",
    "ImageRef",
    "Registry",
    "check_registry",
    "is_loopback",
    "parse",
    "refuse_credentials",
]
