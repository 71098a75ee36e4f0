"""URLs that reach output (labels, manifests, messages, hints): one scrubber for all of them.

A token can sit in any part of a URL but the host and the path: in the userinfo
(``https://bob:pat@host/...``, ``https://ghp_x@host/...``), in the query
(``...repo.git?token=...``) or in the fragment. ``scrub`` keeps scheme, host, port and path;
``scrub_text`` does that to every URL inside a longer text.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

# A scheme URL inside free text, up to whitespace or a quote.
_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")
# scp-like git addresses: user@host:path (the user is dropped with the rest of the userinfo).
_SCP = re.compile(r"^[^@/:\s]+@([^/:\s]+:.*)$")


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
        return m.group(1) if m else text
    try:
        parts = urlsplit(text)
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit((parts.scheme, host, parts.path, "", ""))
    except ValueError:  # an unparsable netloc (a broken IPv6 literal): cut by hand
        scheme, _, rest = text.partition("://")
        rest = re.split(r"[?#]", rest, maxsplit=1)[0]
        netloc, slash, path = rest.partition("/")
        return f"{scheme}://{netloc.rpartition('@')[2]}{slash}{path}"


def scrub_text(text: str) -> str:
    """``text`` with every ``scheme://`` URL in it scrubbed (see ``scrub``)."""
    return _IN_TEXT.sub(lambda m: scrub(m.group(0)), text)
