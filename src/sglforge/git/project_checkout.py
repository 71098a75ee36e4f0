"""The project's own checkout: the public URL and commit of the repository sglforge runs in."""

from __future__ import annotations

import re
from pathlib import Path

from sglforge.git._process import _run
from sglforge.git.mirror import is_local
from sglforge.git.refs import is_repository
from sglforge.urls import scrub


def public_url(url: str) -> str | None:
    """``url`` as a browsable https address with any credentials removed; None for a local
    path (nobody else can follow it). ``git@host:org/repo.git`` -> ``https://host/org/repo``."""
    url = scrub(url)
    m = re.match(r"^(?:[a-z][a-z0-9+.-]*://)?(?:[^@/]+@)?([^/:]+)(?::\d+)?[:/](.+)$", url)
    if not m or url.startswith("file:") or is_local(url):
        return None
    host, path = m.group(1), m.group(2)
    path = re.sub(r"\.git/?$", "", path.strip("/"))
    return f"https://{host}/{path}" if path else None


def checkout_facts(path: Path) -> tuple[str | None, str | None]:
    """(public URL of the ``origin`` remote, else of the only remote; HEAD commit) of the git
    checkout holding ``path``; None for what is unknown (no checkout, no remote, no commit)."""
    if not is_repository(path):
        return None, None
    head = _run(path, "rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False)
    commit = head.stdout if head.status == 0 and head.stdout else None
    remotes = _run(path, "remote", check=False).stdout.split()
    name = "origin" if "origin" in remotes else (remotes[0] if len(remotes) == 1 else None)
    url = None
    if name:
        got = _run(path, "remote", "get-url", name, check=False)
        url = public_url(got.stdout) if got.status == 0 else None
    return url, commit
