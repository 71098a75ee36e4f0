"""Every git operation sglforge performs: the only module that imports GitPython.

Commands run through ``subprocess`` directly (timeouts, exact bytes, and a git that is killed
when sglforge is interrupted); failures become the project's own errors, naming ref or path.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from git.exc import GitCommandError

from sglforge import progress as _progress
from sglforge.errors import ConfigError, PatchError, UpstreamError
from sglforge.util import _flock, decode_exact, encode_exact

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
    env = dict(os.environ)
    env.update(NONINTERACTIVE)
    if identity:
        env.update(IDENTITY)
    if extra:
        env.update(extra)
    return env


# Seconds a network git command (clone, fetch) may take in all ($SGLFORGE_GIT_TIMEOUT); a
# stalled transfer is cut sooner by git's own low-speed limit (below LOW_SPEED bytes/s for
# LOW_SPEED_TIME s).
TIMEOUT_ENV = "SGLFORGE_GIT_TIMEOUT"
LOW_SPEED = ("1000", "30")


def network_timeout() -> float:
    try:
        return max(1.0, float(os.environ.get(TIMEOUT_ENV, "1800")))
    except ValueError:
        return 1800.0


def run(
    cwd: Path | str,
    *args: str,
    check: bool = True,
    stdin: str | bytes | None = None,
    env: dict[str, str] | None = None,
    strip: bool = True,
    timeout: float | None = None,
    waiting_for: str = "",
    identity: bool = True,
) -> GitResult:
    """Run ``git ARGS`` in ``cwd`` with a clean non-interactive environment.

    Output is decoded so that it encodes back to git's exact bytes (``util.encode_exact``);
    a ``str`` stdin is encoded the same way. An interrupt (Ctrl-C, SIGTERM) kills git before
    it propagates, so no git process outlives sglforge and keeps writing. With ``timeout``,
    a git that does not finish in time is killed and reported as an UpstreamError saying what
    it was waiting for.
    """
    raw_in = encode_exact(stdin) if isinstance(stdin, str) else stdin
    _progress.current().detail(f"git {' '.join(args)}  (in {cwd})")
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=str(cwd),
            input=raw_in,
            stdin=None if raw_in is not None else subprocess.DEVNULL,
            capture_output=True,
            env=_env(env, identity=identity),
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as exc:
        if not Path(cwd).is_dir():
            raise ConfigError(f"{cwd}: no such folder (git was to run there)") from exc
        raise ConfigError("git is not installed or not on PATH", "apt-get install git") from exc
    except subprocess.TimeoutExpired as exc:
        raise UpstreamError(
            f"git {' '.join(args[:1])} gave no result within {timeout:g} s"
            + (f" while {waiting_for}" if waiting_for else ""),
            f"check the network or the upstream; set ${TIMEOUT_ENV}=SECONDS to wait longer",
        ) from exc
    out_text = decode_exact(proc.stdout)
    err_text = decode_exact(proc.stderr)
    if strip and out_text.endswith("\n"):
        out_text = out_text[:-1]
    if err_text.endswith("\n"):
        err_text = err_text[:-1]
    result = GitResult(proc.returncode, out_text, err_text)
    if check and result.status != 0:
        raise GitFailed(args, result, cwd)
    return result


def fast_import(repo: Path, stream: Iterable[bytes]) -> None:
    """Feed ``stream`` (a git fast-import command stream ending in ``done``) to ``git
    fast-import`` as it is produced, so a release's files are never all in memory at once.
    An interrupt or an error in the producer kills git; nothing it wrote is referenced."""
    import tempfile

    _progress.current().detail(f"git fast-import  (in {repo})")
    # stderr to a file: a pipe nobody reads while we write could fill and block both sides
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(
            # always a pack (never loose objects): the store records and checks its packs
            ["git", "-c", "fastimport.unpackLimit=0", "fast-import", "--quiet", "--done"],
            cwd=str(repo),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=errors,
            env=_env(),
        )
        assert proc.stdin is not None
        try:
            try:
                for chunk in stream:
                    proc.stdin.write(chunk)
            except BrokenPipeError:
                pass  # git stopped reading: its status and stderr below say why
            finally:
                with contextlib.suppress(BrokenPipeError):
                    proc.stdin.close()
            status = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        errors.seek(0)
        err = errors.read()
    if status != 0:
        raise GitFailed(("fast-import",), GitResult(status, "", decode_exact(err)), repo)


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


# "Receiving objects:  45% (123/456), 1.20 MiB | 300.00 KiB/s", possibly after "remote: ".
_PROGRESS_LINE = re.compile(r"^(?:remote: )?([A-Z][A-Za-z ]+):\s+\d+% \((\d+)/(\d+)\)")


def run_with_progress(
    cwd: Path | str,
    *args: str,
    label: str,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    waiting_for: str = "",
    progress: _progress.Progress | None = None,
) -> GitResult:
    """``run`` for a network command given ``--progress`` (fetch, clone): git's counters
    ("Receiving objects: 45% (123/456)") drive one task named ``label``; the other lines of
    its stderr are kept for the result. Killed on interrupt or after ``timeout`` like ``run``."""
    say = _progress.resolve(progress)
    say.detail(f"git {' '.join(args)}  (in {cwd})")
    try:
        proc = subprocess.Popen(
            ["git", *args],
            cwd=str(cwd),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=_env(env),
            # Its own process group: git hands the transfer to a helper (git-remote-http)
            # that holds the output pipe too, so the whole group is killed, not git alone.
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        raise ConfigError("git is not installed or not on PATH", "apt-get install git") from exc
    expired = threading.Event()

    def kill_group() -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # already gone

    def expire() -> None:
        expired.set()
        kill_group()

    timer = threading.Timer(timeout, expire) if timeout else None
    kept: list[str] = []
    try:
        if timer:
            timer.start()
        assert proc.stdout is not None
        with say.task(label, None, unit="objects") as task:
            pending = b""
            while chunk := os.read(proc.stdout.fileno(), 65536):
                pending += chunk
                *lines, pending = re.split(rb"[\r\n]", pending)
                for raw in lines:
                    line = decode_exact(raw)
                    m = _PROGRESS_LINE.match(line)
                    if m:
                        task.update(int(m.group(2)), int(m.group(3)), note=m.group(1).lower())
                    elif line.strip():
                        kept.append(line)
            if pending.strip():
                kept.append(decode_exact(pending))
            status = proc.wait()
    except BaseException:
        kill_group()
        proc.wait()
        raise
    finally:
        if timer:
            timer.cancel()
        if proc.stdout is not None:
            proc.stdout.close()
    if expired.is_set():
        raise UpstreamError(
            f"git {' '.join(args[:1])} gave no result within {timeout or 0:g} s"
            + (f" while {waiting_for}" if waiting_for else ""),
            f"check the network or the upstream; set ${TIMEOUT_ENV}=SECONDS to wait longer",
        )
    return GitResult(status, "", "\n".join(kept[-50:]))


# --- the project's own checkout -------------------------------------------------------------


def public_url(url: str) -> str | None:
    """``url`` as a browsable https address with any credentials removed; None for a local
    path (nobody else can follow it). ``git@host:org/repo.git`` -> ``https://host/org/repo``."""
    url = url.strip()
    m = re.match(r"^(?:[a-z][a-z0-9+.-]*://)?(?:[^@/]+@)?([^/:]+)(?::\d+)?[:/](.+)$", url)
    if not m or url.startswith("file:") or is_local(url):
        return None
    host, path = m.group(1), m.group(2)
    path = re.sub(r"\.git/?$", "", path.strip("/"))
    return f"https://{host}/{path}" if path else None


def checkout_facts(path: Path) -> tuple[str | None, str | None]:
    """(public URL of the ``origin`` remote, else of the only remote; HEAD commit) of the git
    checkout holding ``path``; None for what is unknown (no checkout, no remote, no commit)."""
    if not Path(path).is_dir() or run(path, "rev-parse", "--git-dir", check=False).status:
        return None, None
    head = run(path, "rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False)
    commit = head.stdout if head.status == 0 and head.stdout else None
    remotes = run(path, "remote", check=False).stdout.split()
    name = "origin" if "origin" in remotes else (remotes[0] if len(remotes) == 1 else None)
    url = None
    if name:
        got = run(path, "remote", "get-url", name, check=False)
        url = public_url(got.stdout) if got.status == 0 else None
    return url, commit


# --- upstream cache -------------------------------------------------------------------------


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
    with _flock(cache.with_name(cache.name + ".lock"), f"upstream cache {cache}", None):
        yield


def _local_repository(url: str) -> str:
    """The absolute path of a local upstream, refused plainly when it is no git repository."""
    src = Path(url).expanduser()
    if not src.exists():
        raise UpstreamError(
            f"upstream {url}: no such folder",
            "pass --upstream with a git repository path or URL",
        )
    res = run(src if src.is_dir() else src.parent, "rev-parse", "--git-dir", check=False)
    if not src.is_dir() or res.status != 0:
        raise UpstreamError(
            f"upstream {url}: {src.resolve()} is not a git repository",
            "pass --upstream with a git clone of sglang (a folder holding .git), a URL, or "
            "pypi:sglang",
        )
    return str(src.resolve())


def ensure_cache(cache_root: Path, url: str, share_objects: bool = False) -> Path:
    """One shared bare cache of ``url``: cloned once, then only fetched.

    ``share_objects`` (for local repositories sglforge itself maintains, such as the
    PyPI-built history) borrows the source's objects through git's alternates instead of
    copying them: the first fetch then copies nothing. A cache that was deleted, or left
    broken, is made again.
    """
    cache_root.mkdir(parents=True, exist_ok=True)
    path = cache_root / cache_name(url)
    if is_local(url):
        url = _local_repository(url)
    with cache_lock(path):
        if (path / "HEAD").exists() and run(path, "rev-parse", "--git-dir", check=False).status:
            shutil.rmtree(path)  # not a repository any more: rebuilt below
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
            if path.exists():
                shutil.rmtree(path)
            os.replace(tmp, path)
        else:
            current = run(path, "remote", "get-url", "origin", check=False).stdout
            if current != url:
                run(path, "remote", "set-url", "origin", url)
            _fetch(path, url)
    return path


def _fetch(path: Path, url: str) -> None:
    args = [
        "-c",
        f"http.lowSpeedLimit={LOW_SPEED[0]}",
        "-c",
        f"http.lowSpeedTime={LOW_SPEED[1]}",
        "fetch",
        "--progress",
        "--prune",
        "--tags",
        "--force",
        "origin",
        # Upstream branches go to refs/remotes/origin/*, never refs/heads/*: the cache's own
        # branches are sglforge's worktree branches, which --prune must not delete.
        "+refs/heads/*:refs/remotes/origin/*",
    ]
    timeout = network_timeout()
    # ssh has no low-speed limit: a connect timeout at least (unless the user set their own)
    env = {} if "GIT_SSH_COMMAND" in os.environ else {"GIT_SSH_COMMAND": "ssh -o ConnectTimeout=30"}
    res = run_with_progress(
        path,
        *args,
        label=f"fetch {url}",
        timeout=timeout,
        env=env,
        waiting_for=f"fetching tags and branches from upstream {url}",
    )
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
    "checkout_facts",
    "ensure_cache",
    "fast_import",
    "is_ancestor",
    "out",
    "resolve",
    "run",
    "tags",
]


def blob(repo: Path, commit: str, path: str) -> bytes | None:
    """The exact bytes of ``path`` at ``commit`` in ``repo`` (a bare or working clone), or None
    when the commit or the path is not there."""
    found = run(repo, "cat-file", "-e", f"{commit}:{path}", check=False)
    if found.status != 0:
        return None
    return encode_exact(run(repo, "cat-file", "blob", f"{commit}:{path}", strip=False).stdout)


def blob_id(data: bytes) -> str:
    """git's object id of a blob with these bytes (what ``git hash-object`` prints)."""
    import hashlib

    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
