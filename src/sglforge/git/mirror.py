"""The upstream cache: one bare mirror per upstream URL, fetched, never re-cloned."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

from sglforge.errors import UpstreamError
from sglforge.git._process import LOW_SPEED, _run, _run_with_progress, network_timeout
from sglforge.git.refs import is_repository
from sglforge.util import flock


def cache_name(url: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", url.rstrip("/")).strip("_")
    return slug[-80:] + ".git"


def is_local(url: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*://", url) and ":" not in url.split("/")[0]


@contextlib.contextmanager
def cache_lock(cache: Path) -> Iterator[None]:
    """One process at a time changes a cache (fetch, worktree add/prune): caches are shared
    between projects (``.ci/e2e`` symlinks ``build/upstream``), so a project lock is not
    enough. The lock file sits next to the cache, in the shared folder itself."""
    with flock(cache.with_name(cache.name + ".lock"), f"upstream cache {cache}", None):
        yield


def _local_repository(url: str) -> str:
    """The absolute path of a local upstream, refused plainly when it is no git repository."""
    src = Path(url).expanduser()
    if not src.exists():
        raise UpstreamError(
            f"upstream {url}: no such folder",
            "pass --upstream with a git repository path or URL",
        )
    if not src.is_dir() or not is_repository(src):
        raise UpstreamError(
            f"upstream {url}: {src.resolve()} is not a git repository",
            "pass --upstream with a git clone of sglang (a folder holding .git), a URL, or "
            "pypi:sglang",
        )
    return str(src.resolve())


def ensure_cache(
    cache_root: Path, url: str, share_objects: bool = False, refresh: bool = True
) -> Path:
    """One shared bare cache of ``url``: cloned once, then only fetched.

    ``share_objects`` (for local repositories sglforge itself maintains, such as the
    PyPI-built history) borrows the source's objects through git's alternates instead of
    copying them, and copies its refs instead of fetching (``_copy_refs``). A cache that was
    deleted, or left broken, is made again. ``refresh=False``: a cache that exists is used as
    it is, without asking ``url`` anything (the upstream may be unreachable); what it lacks
    is fetched later, by name (``fetch_names``).
    """
    cache_root.mkdir(parents=True, exist_ok=True)
    path = cache_root / cache_name(url)
    if not refresh and (path / "HEAD").exists() and is_repository(path):
        return path
    if is_local(url):
        url = _local_repository(url)
    with cache_lock(path):
        if (path / "HEAD").exists() and not is_repository(path):
            shutil.rmtree(path)  # not a repository any more: rebuilt below
        if not (path / "HEAD").exists():
            tmp = path.with_name(path.name + ".partial")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            _run(tmp, "init", "--bare", "-q")
            _run(tmp, "remote", "add", "origin", url)
            if share_objects and is_local(url):
                objects = Path(url) / "objects"
                if not objects.is_dir():
                    objects = Path(url) / ".git" / "objects"
                (tmp / "objects" / "info").mkdir(parents=True, exist_ok=True)
                (tmp / "objects" / "info" / "alternates").write_text(f"{objects.resolve()}\n")
            if not is_local(url):
                # Blobs on demand: a partial clone where the remote allows it.
                _run(tmp, "config", "core.repositoryformatversion", "1")
                _run(tmp, "config", "extensions.partialClone", "origin")
                _run(tmp, "config", "remote.origin.promisor", "true")
                _run(tmp, "config", "remote.origin.partialclonefilter", "blob:none")
            if share_objects and is_local(url):
                _copy_refs(tmp, url, new=True)
            else:
                _fetch(tmp, url)
            if path.exists():
                shutil.rmtree(path)
            os.replace(tmp, path)
        else:
            current = _run(path, "remote", "get-url", "origin", check=False).stdout
            if current != url:
                _run(path, "remote", "set-url", "origin", url)
            if share_objects and is_local(url) and (path / "objects/info/alternates").is_file():
                _copy_refs(path, url)
            else:
                _fetch(path, url)
    return path


def _copy_refs(path: Path, url: str, new: bool = False) -> None:
    """What ``_fetch`` brings from a local repository whose objects ``path`` borrows: its refs
    alone (branches as ``refs/remotes/origin/*``, tags as they are, gone ones dropped), in
    one ``update-ref`` instead of a fetch's negotiation and helper processes. ``new``: ``path``
    was just made and holds no ref yet."""
    fmt = "--format=%(objectname) %(refname)"
    theirs = _run(url, "for-each-ref", fmt, "refs/heads/", "refs/tags/").stdout.splitlines()
    ours = (
        "" if new else _run(path, "for-each-ref", fmt, "refs/remotes/origin/", "refs/tags/").stdout
    )
    want: dict[str, str] = {}
    for line in theirs:
        sha, ref = line.split(" ", 1)
        if ref.startswith("refs/heads/"):
            ref = "refs/remotes/origin/" + ref[len("refs/heads/") :]
        want[ref] = sha
    have = {ref: sha for sha, ref in (line.split(" ", 1) for line in ours.splitlines())}
    lines = [f"update {ref} {sha}\n" for ref, sha in want.items() if have.get(ref) != sha]
    lines += [f"delete {ref}\n" for ref in have if ref not in want]
    if lines:
        _run(path, "update-ref", "--stdin", stdin="".join(lines))


def fetch_cache(path: Path, url: str, names: tuple[str, ...] = ()) -> None:
    """Fetch into the cache ``path`` of ``url``: every tag and branch, or with ``names``
    those tags alone (one round trip for what a command asks for by name, as kas does); a
    name that is no tag of the remote (a branch, a commit) brings the whole fetch."""
    if is_local(url):
        url = _local_repository(url)
    with cache_lock(path):
        if names and _fetch(path, url, [f"+refs/tags/{n}:refs/tags/{n}" for n in names], False):
            return
        _fetch(path, url)


def _fetch(path: Path, url: str, refspecs: list[str] | None = None, whole: bool = True) -> bool:
    """``git fetch`` of ``refspecs`` (default: every tag and branch); False when a named ref
    is not on the remote and ``whole`` is False, UpstreamError when it is unreachable."""
    args = [
        "-c",
        f"http.lowSpeedLimit={LOW_SPEED[0]}",
        "-c",
        f"http.lowSpeedTime={LOW_SPEED[1]}",
        "fetch",
        "--progress",
        *(["--prune", "--tags"] if refspecs is None else []),
        "--force",
        "origin",
        # Upstream branches go to refs/remotes/origin/*, never refs/heads/*: the cache's own
        # branches are sglforge's worktree branches, which --prune must not delete.
        *(refspecs or ["+refs/heads/*:refs/remotes/origin/*"]),
    ]
    timeout = network_timeout()
    # ssh has no low-speed limit: a connect timeout at least (unless the user set their own)
    env = {} if "GIT_SSH_COMMAND" in os.environ else {"GIT_SSH_COMMAND": "ssh -o ConnectTimeout=30"}
    res = _run_with_progress(
        path,
        *args,
        label=f"fetch {url}",
        timeout=timeout,
        env=env,
        waiting_for=f"fetching tags and branches from upstream {url}",
    )
    if res.status != 0 and not whole and "couldn't find remote ref" in res.stderr:
        return False
    if res.status != 0:
        msg = (res.stderr or res.stdout).strip().splitlines()
        raise UpstreamError(
            f"upstream {url} unreachable: {msg[-1] if msg else 'fetch failed'}",
            "check the URL, or pass --upstream PATH (a local clone) or --upstream pypi:sglang "
            "(released wheels; python/ only)",
        )
    return True
