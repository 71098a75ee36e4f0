"""Credentials never reach output: one scrubber for every URL sglforge shows or records.

A URL can carry a secret in three places: its userinfo (``https://user:token@host``), its
query (``?token=...``, ``?X-Amz-Signature=...``) and its fragment. ``shown`` is the form to
print in a message or a hint (userinfo replaced by ``***``, the query and fragment kept only
when they hold nothing that looks like a key); ``public`` is the form to record in a label,
a manifest or a cache folder name (no userinfo, no query, no fragment). ``scrub_text``
applies ``shown`` to every URL inside a longer text, as the CLI's last line of defence.
"""

from __future__ import annotations

import re
from urllib.parse import SplitResult, urlsplit, urlunsplit

# scheme://[userinfo@]host... inside free text (a message, pip's or git's output)
_URL_IN_TEXT = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>()\[\]{}]+")
# userinfo without a scheme (``user:pw@host/path``), as git and pip sometimes print it
_BARE_USERINFO = re.compile(r"(?<![\w/:@])[^\s/@:'\"]+:[^\s/@'\"]+@(?=[\w.-]+(?::\d+)?/)")


def _split(url: str) -> SplitResult | None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        return None
    return parts if parts.scheme and parts.netloc else None


def _host(parts: SplitResult) -> str:
    return parts.netloc.rpartition("@")[2]


def shown(url: str) -> str:
    """``url`` fit for a message: userinfo as ``***@``, no query or fragment values."""
    parts = _split(url)
    if parts is None:
        return _BARE_USERINFO.sub("***@", url)
    netloc = _host(parts)
    if "@" in parts.netloc:
        netloc = f"***@{netloc}"
    query = "***" if parts.query else ""
    fragment = parts.fragment
    # a wheel URL's #sha256=... is a digest, not a secret; anything else may be
    if fragment and not re.fullmatch(r"(sha256|sha384|sha512|md5)=[0-9a-fA-F]+", fragment):
        fragment = "***"
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def public(url: str) -> str:
    """``url`` fit for a label, a manifest or a folder name: no userinfo, query or fragment."""
    parts = _split(url)
    if parts is None:
        return _BARE_USERINFO.sub("", url).split("?", 1)[0].split("#", 1)[0]
    return urlunsplit((parts.scheme, _host(parts), parts.path, "", ""))


def has_credentials(url: str) -> bool:
    parts = _split(url)
    return bool(parts and "@" in parts.netloc)


def scrub_text(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` with every URL in it passed through :func:`shown` and each of ``secrets``
    (passwords, tokens known to the caller) replaced by ``***``."""
    text = _URL_IN_TEXT.sub(lambda m: shown(m.group(0)), text)
    text = _BARE_USERINFO.sub("***@", text)
    for secret in secrets:
        if secret and len(secret) >= 3:
            text = text.replace(secret, "***")
    return text


__all__ = ["has_credentials", "public", "scrub_text", "shown"]
