"""Every git operation sglforge performs: the only module that imports GitPython.

GitCommandError is translated here into the project's own errors, naming the ref or path.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import git as gitpython
from git.exc import GitCommandError, GitCommandNotFound

from sglforge.errors import ConfigError, PatchError, UpstreamError

# Fixed identity so commits sglforge makes are reproducible and never depend on user config.
IDENTITY = {
    "GIT_AUTHOR_NAME": "sglforge",
    "GIT_AUTHOR_EMAIL": "sglforge@localhost",
    "GIT_COMMITTER_NAME": "sglforge",
    "GIT_COMMITTER_EMAIL": "sglforge@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}
# Never wait on a terminal, an editor or a credential prompt.
NONINTERACTIVE = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_EDITOR": "true",
    "GIT_SEQUENCE_EDITOR": "true",
    "GIT_ASKPASS": "true",
    "SSH_ASKPASS": "true",
    "GIT_CONFIG_NOSYSTEM": "1",
    "LC_ALL": "C",
}
# sglang has thousands of files: rename detection needs a higher limit than git's default.
RENAME_LIMIT = "100000"


@dataclass(frozen=True)
class GitResult:
    status: int
    stdout: str
    stderr: str


def _env(extra: dict[str, str] | None = None, identity: bool = True) -> dict[str, str]:
    env = dict(NONINTERACTIVE)
    if identity:
        env.update(IDENTITY)
    if extra:
        env.update(extra)
    return env


def run(
    cwd: Path | str,
    *args: str,
    check: bool = True,
    stdin: str | bytes | None = None,
    env: dict[str, str] | None = None,
    strip: bool = True,
) -> GitResult:
    """Run ``git ARGS`` in ``cwd`` with a clean non-interactive environment."""
    g = gitpython.Git(str(cwd))
    full_env = _env(env)
    try:
        kwargs: dict[str, object] = {
            "with_extended_output": True,
            "with_exceptions": False,
            "env": full_env,
            "strip_newline_in_stdout": strip,
        }
        stream = _as_stream(stdin) if stdin is not None else None
        if stream is not None:
            kwargs["istream"] = stream
        try:
            status, out, err = g.execute(["git", *args], **kwargs)  # type: ignore[call-overload]
        finally:
            if stream is not None:
                stream.close()
    except GitCommandNotFound as exc:  # pragma: no cover - git is a hard requirement
        raise ConfigError("git is not installed or not on PATH", "apt-get install git") from exc
    result = GitResult(int(status or 0), out if isinstance(out, str) else out.decode(), err)
    if check and result.status != 0:
        raise GitFailed(args, result, cwd)
    return result


def _as_stream(data: str | bytes) -> IO[bytes]:
    raw = data.encode() if isinstance(data, str) else data
    fh = tempfile.TemporaryFile()
    fh.write(raw)
    fh.seek(0)
    return fh


class GitFailed(PatchError):
    """A git command failed; carries its output for callers that interpret it."""

    def __init__(self, args: tuple[str, ...], result: GitResult, cwd: Path | str) -> None:
        first = (result.stderr or result.stdout).strip().splitlines()
        line = first[0] if first else f"exit status {result.status}"
        super().__init__(f"git {' '.join(args[:2])} failed in {cwd}: {line}")
        self.args_ = args
        self.result = result


def out(cwd: Path | str, *args: str) -> str:
    return run(cwd, *args).stdout


# --- upstream cache -------------------------------------------------------------------------


def cache_name(url: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", url.rstrip("/")).strip("_")
    return slug[-80:] + ".git"


def is_local(url: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*://", url) and ":" not in url.split("/")[0]


def ensure_cache(cache_root: Path, url: str, share_objects: bool = False) -> Path:
    """One shared bare cache of ``url``: cloned once, then only fetched.

    ``share_objects`` (for local repositories sglforge itself maintains, such as the
    PyPI-built history) borrows the source's objects through git's alternates instead of
    copying them: the first fetch then copies nothing.
    """
    cache_root.mkdir(parents=True, exist_ok=True)
    path = cache_root / cache_name(url)
    if is_local(url):
        src = Path(url).expanduser()
        if not src.exists():
            raise UpstreamError(
                f"upstream {url}: no such folder",
                "pass --upstream with a git repository path or URL",
            )
        url = str(src.resolve())
    if not (path / "HEAD").exists():
        tmp = path.with_name(path.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        run(tmp, "init", "--bare", "-q")
        run(tmp, "remote", "add", "origin", url)
        if share_objects and is_local(url):
            objects = Path(url) / "objects"
            if not objects.is_dir():
                objects = Path(url) / ".git" / "objects"
            (tmp / "objects" / "info").mkdir(parents=True, exist_ok=True)
            (tmp / "objects" / "info" / "alternates").write_text(f"{objects.resolve()}\n")
        if not is_local(url):
            # Blobs on demand: a partial clone where the remote allows it.
            run(tmp, "config", "core.repositoryformatversion", "1")
            run(tmp, "config", "extensions.partialClone", "origin")
            run(tmp, "config", "remote.origin.promisor", "true")
            run(tmp, "config", "remote.origin.partialclonefilter", "blob:none")
        _fetch(tmp, url)
        os.replace(tmp, path)
    else:
        current = run(path, "remote", "get-url", "origin", check=False).stdout
        if current != url:
            run(path, "remote", "set-url", "origin", url)
        _fetch(path, url)
    return path


def _fetch(path: Path, url: str) -> None:
    args = [
        "fetch",
        "--quiet",
        "--prune",
        "--tags",
        "--force",
        "origin",
        # Upstream branches go to refs/remotes/origin/*, never refs/heads/*: the cache's own
        # branches are sglforge's worktree branches, which --prune must not delete.
        "+refs/heads/*:refs/remotes/origin/*",
    ]
    res = run(path, *args, check=False)
    if res.status != 0:
        msg = (res.stderr or res.stdout).strip().splitlines()
        raise UpstreamError(
            f"upstream {url} unreachable: {msg[-1] if msg else 'fetch failed'}",
            "check the URL, or pass --upstream PATH (a local clone) or --upstream pypi:sglang "
            "(released wheels; python/ only)",
        )


def resolve(repo: Path, ref: str) -> str:
    """The full commit SHA ``ref`` names in ``repo``."""
    for cand in (f"refs/tags/{ref}", f"refs/remotes/origin/{ref}", ref):
        res = run(repo, "rev-parse", "--verify", "--quiet", f"{cand}^{{commit}}", check=False)
        if res.status == 0 and res.stdout:
            return res.stdout
    raise UpstreamError(
        f"ref {ref!r} not found in upstream {repo}",
        "run `sglforge upstream tags` to list known tags, or fetch with the right --upstream",
    )


def resolve_many(repo: Path, refs: list[str]) -> dict[str, str]:
    """Commit SHAs of many tags and upstream branches in one call (others via ``resolve``).

    With no ``refs``, every tag and upstream branch the repository knows.
    """
    listing = out(
        repo,
        "for-each-ref",
        "--format=%(refname)%09%(objectname)%09%(*objectname)",
        "refs/tags",
        "refs/remotes/origin",
    )
    known: dict[str, str] = {}
    for line in listing.splitlines():
        name, obj, peeled = (line.split("\t") + ["", ""])[:3]
        short = name.removeprefix("refs/tags/").removeprefix("refs/remotes/origin/")
        if name.startswith("refs/tags/") or short not in known:
            known[short] = peeled or obj
    if not refs:
        return known
    return {ref: known.get(ref) or resolve(repo, ref) for ref in refs}


def tags(repo: Path) -> list[str]:
    text = out(repo, "tag", "--list")
    return [t for t in text.splitlines() if t]


def is_ancestor(repo: Path, a: str, b: str) -> bool:
    return run(repo, "merge-base", "--is-ancestor", a, b, check=False).status == 0


__all__ = [
    "GitCommandError",
    "GitFailed",
    "GitResult",
    "IDENTITY",
    "RENAME_LIMIT",
    "cache_name",
    "ensure_cache",
    "is_ancestor",
    "out",
    "resolve",
    "run",
    "tags",
]
