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
- ``scrub_secrets`` is the form for free text that is committed or written to disk (a patch
  trailer, a crash log's argv): only the credentials go (userinfo; a query or fragment
  parameter named like a credential, ``token=``, ``access_token=``, ``X-Amz-Signature=``; a
  bare ``password=...``; a token by its issuer's prefix, ``ghp_...``), so a bug tracker's
  ``?id=123`` is kept. ``secrets_in`` says whether a text holds any (lint's check).
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
# A parameter named like a credential, in a URL's query or fragment or bare in a text
# (``token=``, ``access_token=``, ``X-Amz-Signature=``, ``password=``, ``sig=``), with its value.
_SECRET_PARAM = re.compile(
    r"(?i)(?<![\w-])((?:[\w-]*[_-])?(?:token|secret|password|passwd|pwd|api[_-]?key|apikey|"
    r"signature|sig|credential|auth|authorization|session|private[_-]?key|access[_-]?key)"
    r")=([^\s&;#'\"<>`\[\](){}]+)"
)
# A short number (up to 6 digits) is no credential: aiter's key fields (``token=512``), counts
# and sizes are named so; a longer run of digits may be a PIN or a numeric token and stays masked.
_NUMBER = re.compile(r"[+-]?\d{1,6}(?:\.\d+)?,?")


def _redacted(m: re.Match[str]) -> str:
    """A credential-named parameter with its value masked, unless the value is a number."""
    return m.group(0) if _NUMBER.fullmatch(m.group(2)) else f"{m.group(1)}=***"


def _secret_param(part: str) -> bool:
    m = _SECRET_PARAM.fullmatch(part)
    return bool(m) and not _NUMBER.fullmatch(m.group(2))  # type: ignore[union-attr]


# Tokens known by their issuer's prefix (GitHub, GitLab, Slack, Hugging Face, AWS, npm, PyPI).
_TOKEN = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{8,}|github_pat_[A-Za-z0-9_]{8,}|glpat-[A-Za-z0-9_-]{8,}|"
    r"xox[abporst]-[A-Za-z0-9-]{8,}|hf_[A-Za-z0-9]{8,}|A[KS]IA[0-9A-Z]{16}|npm_[A-Za-z0-9]{8,}|"
    r"pypi-[A-Za-z0-9_-]{16,})"
)


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


def _clean_url(url: str) -> str:
    """``url`` without userinfo and without the query or fragment parameters named like a
    credential (the others kept: a tracker's ``?id=123``)."""
    scheme, sep, rest = url.partition("://")
    m = re.search(r"[/?#]", rest)
    netloc, tail = (rest[: m.start()], rest[m.start() :]) if m else (rest, "")
    head, hash_, fragment = tail.partition("#")
    path, ask, query = head.partition("?")

    def kept(params: str, mark: str) -> str:
        left = [p for p in re.split(r"[&;]", params) if p and not _secret_param(p)]
        return mark + "&".join(left) if left else ""

    tail = path + kept(query, ask) + kept(fragment, hash_)
    return f"{scheme}{sep}{netloc.rpartition('@')[2]}{tail}"


def scrub_secrets(text: str) -> str:
    """``text`` without the credentials in it, the rest kept (see the module's docstring):
    the form for a trailer value, a crash log's argv, anything written to disk."""
    text = _IN_TEXT.sub(lambda m: _clean_url(m.group(0)), text)
    text = _BARE_USERINFO.sub("", text)
    text = _SECRET_PARAM.sub(_redacted, text)
    return _TOKEN.sub("***", text)


def secrets_in(text: str) -> bool:
    """Whether ``text`` holds a credential :func:`scrub_secrets` would take out."""
    return scrub_secrets(text) != text


def scrub_text(text: str, secrets: tuple[str, ...] = (), *, record: bool = False) -> str:
    """``text`` with every URL in it passed through :func:`shown` (or, with ``record``, for
    a label or a manifest, through :func:`scrub`), and each of ``secrets`` (passwords or
    tokens the caller knows) replaced by ``***``."""
    form = scrub if record else shown
    text = _IN_TEXT.sub(lambda m: form(m.group(0)), text)
    text = _BARE_USERINFO.sub("" if record else "***@", text)
    text = _TOKEN.sub("***", _SECRET_PARAM.sub(_redacted, text))
    for secret in secrets:
        if secret and len(secret) >= 3:
            text = text.replace(secret, "***")
    return text


__all__ = ["has_credentials", "scrub", "scrub_secrets", "scrub_text", "secrets_in", "shown"]
