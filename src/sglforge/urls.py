"""Credentials never reach output: one scrubber for every URL sglforge shows or records.

A token can sit in any part of a URL but the host and the path: in the userinfo
(``https://bob:pat@host/...``, ``https://ghp_x@host/...``), in the query
(``...repo.git?token=...``) or in the fragment.

- ``scrub`` is the form to record (a label, a manifest, a cache folder name): scheme, host,
  port and path only.
- ``shown`` is the form for a message or a hint: the same, but it says that something was
  taken out (``https://***@host/simple``), and keeps a wheel URL's ``#sha256=`` digest.
- ``scrub_text`` applies ``shown`` to every URL inside a longer text (the CLI does this to
  every error as its last line of defence) and blanks the secrets a caller names.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

# A scheme URL inside free text, up to whitespace, a quote or a bracket; an IPv6 host
# (``[::1]:5000``), and userinfo before it, are part of the URL.
_IN_TEXT = re.compile(
    r"\b[A-Za-z][A-Za-z0-9+.-]*://(?:[^\s/@'\"<>`]*@)?(?:\[[0-9A-Fa-f:.]+\])?"
    r"[^\s'\"<>`()\[\]{}]*"
)
# scp-like git addresses: user@host:path (the user is dropped with the rest of the userinfo).
_SCP = re.compile(r"^[^@/:\s]+@([^/:\s]+:.*)$")
# userinfo without a scheme (``user:pw@host/path``), as some tools print it
_BARE_USERINFO = re.compile(r"(?<![\w/:@])[^\s/@:'\"]+:[^\s/@'\"]+@(?=[\w.-]+(?::\d+)?/)")
_DIGEST = re.compile(r"(sha256|sha384|sha512|md5)=[0-9a-fA-F]+")


def _parts(text: str) -> tuple[str, str, str, str, str, bool] | None:
    """(scheme, host[:port], path, query, fragment, had userinfo) of a scheme URL."""
    try:
        p = urlsplit(text)
        return (p.scheme, p.netloc.rpartition("@")[2], p.path, p.query, p.fragment, "@" in p.netloc)
    except ValueError:  # an unparsable netloc (a broken IPv6 literal): cut by hand
        scheme, _, rest = text.partition("://")
        rest = re.split(r"[?#]", rest, maxsplit=1)[0]
        netloc, slash, path = rest.partition("/")
        return scheme, netloc.rpartition("@")[2], slash + path, "", "", "@" in netloc


def scrub(url: str) -> str:
    """``url`` without userinfo, query and fragment.

    ``https://bob:pw@host:8443/org/repo.git?token=x#frag`` -> ``https://host:8443/org/repo.git``;
    ``git@host:org/repo.git`` -> ``host:org/repo.git``; a local path is kept as it is, less
    any ``?``/``#`` tail.
    """
    text = url.strip()
    if "://" not in text:
        text = re.split(r"[?#]", text, maxsplit=1)[0]
        m = _SCP.match(text)
        return m.group(1) if m else _BARE_USERINFO.sub("", text)
    parts = _parts(text)
    assert parts is not None
    scheme, host, path, _, _, _ = parts
    return urlunsplit((scheme, host, path, "", ""))


def shown(url: str) -> str:
    """``url`` fit for a message: userinfo as ``***@``, a query or fragment as ``***`` (a
    ``#sha256=`` digest is kept: it is no secret)."""
    text = url.strip()
    if "://" not in text:
        return _BARE_USERINFO.sub("***@", text)
    parts = _parts(text)
    assert parts is not None
    scheme, host, path, query, fragment, had_user = parts
    netloc = f"***@{host}" if had_user else host
    fragment = fragment if not fragment or _DIGEST.fullmatch(fragment) else "***"
    return urlunsplit((scheme, netloc, path, "***" if query else "", fragment))


def has_credentials(url: str) -> bool:
    parts = _parts(url.strip()) if "://" in url else None
    return bool(parts and parts[5])


def scrub_text(text: str, secrets: tuple[str, ...] = (), *, record: bool = False) -> str:
    """``text`` with every URL in it passed through :func:`shown` (or, with ``record``, for
    a label or a manifest, through :func:`scrub`), and each of ``secrets`` (passwords or
    tokens the caller knows) replaced by ``***``."""
    form = scrub if record else shown
    text = _IN_TEXT.sub(lambda m: form(m.group(0)), text)
    text = _BARE_USERINFO.sub("" if record else "***@", text)
    for secret in secrets:
        if secret and len(secret) >= 3:
            text = text.replace(secret, "***")
    return text


__all__ = ["has_credentials", "scrub", "scrub_text", "shown"]
