"""Every git operation sglforge performs, asked by meaning: the only module that runs git.

It is built on GitPython: ``Repo`` reads refs, tags, commits and objects; the ``Git`` command
object starts the porcelain (``am``, ``apply``, ``worktree``, ``fast-import``, ...). Callers
ask named queries (``resolve``, ``tags``, ``is_ancestor``, ``patch_ids``, ``add_worktree``,
``am``, ...) and never spell a git command. Every command keeps: exact bytes (output decoded
with ``util.decode_exact``, text input encoded with ``encode_exact``), the fixed IDENTITY and
NONINTERACTIVE environment, a git killed when sglforge is interrupted or a timeout expires,
and failures turned into the project's own errors naming the ref or path.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sglforge import progress as _progress
from sglforge.errors import ConfigError, PatchError, UpstreamError, disk_error
from sglforge.urls import scrub
from sglforge.util import decode_exact, encode_exact, flock

# Without git on PATH GitPython's import raises; sglforge reports a missing git in its own
# words instead (`sglforge doctor`, and a ConfigError from any command).
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

from git import Repo  # noqa: E402
from git.cmd import Git  # noqa: E402
from git.exc import (  # noqa: E402
    BadName,
    BadObject,
    GitCommandError,
    GitCommandNotFound,
    InvalidGitRepositoryError,
    NoSuchPathError,
)

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
# What GitPython's object reads raise for a name or object the repository does not hold.
_NOT_FOUND = (BadName, BadObject, ValueError, IndexError, KeyError, GitCommandError)


@dataclass(frozen=True)
class GitResult:
    status: int
    stdout: str
    stderr: str


class GitFailed(PatchError):
    """A git command failed; carries its output for callers that interpret it."""

    def __init__(self, args: Sequence[str], result: GitResult, cwd: Path | str) -> None:
        lines = (result.stderr or result.stdout).strip().splitlines()
        # git's reason is its fatal:/error: line; the first line is often only progress
        # ("Preparing worktree (new branch ...)").
        said = [ln for ln in lines if ln.startswith(("fatal:", "error:"))]
        line = (said or lines or [f"exit status {result.status}"])[0]
        super().__init__(f"git {' '.join(args[:2])} failed in {cwd}: {line}")
        self.result = result
        disk = disk_error(result.stderr)
        if disk is not None:  # a full or read-only disk, not a patch problem
            self.exit_code = disk.exit_code
            self.hint = disk.hint


def _env(extra: dict[str, str] | None = None, identity: bool = True) -> dict[str, str]:
    """What sglforge sets on top of the inherited environment (GitPython adds the rest)."""
    env = dict(NONINTERACTIVE)
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


def _no_git(exc: BaseException) -> ConfigError:
    return ConfigError("git is not installed or not on PATH", "apt-get install git")


def _start(
    cwd: Path | str,
    args: Sequence[str],
    env: dict[str, str],
    stdin: bool = False,
    stdout: bool = True,
    new_session: bool = False,
) -> subprocess.Popen[bytes]:
    """``git ARGS`` started in ``cwd`` through GitPython's command object, as a process the
    caller waits for. (GitPython's own wait cannot be interrupted without leaving git running,
    so sglforge holds the process: an interrupt or a timeout kills it before propagating.)"""
    if not Path(cwd).is_dir():
        # GitPython would run git in the current folder instead
        raise ConfigError(f"{cwd}: no such folder (git was to run there)")
    try:
        handle = Git(str(cwd)).execute(
            [Git.GIT_PYTHON_GIT_EXECUTABLE or "git", *args],
            istream=subprocess.PIPE if stdin else None,
            as_process=True,
            with_stdout=stdout,
            env=env,
            start_new_session=new_session,
        )
    except GitCommandNotFound as exc:
        raise _no_git(exc) from exc
    proc: subprocess.Popen[bytes] | None = handle.proc
    assert proc is not None
    handle.proc = None  # ours to wait for and kill now, not the wrapper's finaliser
    return proc


def _timed_out(args: Sequence[str], timeout: float | None, waiting_for: str) -> UpstreamError:
    return UpstreamError(
        f"git {' '.join(args[:1])} gave no result within {timeout or 0:g} s"
        + (f" while {waiting_for}" if waiting_for else ""),
        f"check the network or the upstream; set ${TIMEOUT_ENV}=SECONDS to wait longer",
    )


def _run(
    cwd: Path | str,
    *args: str,
    check: bool = True,
    stdin: str | bytes | None = None,
    env: dict[str, str] | None = None,
    strip: bool = True,
    timeout: float | None = None,
    identity: bool = True,
) -> GitResult:
    """Run ``git ARGS`` in ``cwd`` with a clean non-interactive environment.

    Output is decoded so that it encodes back to git's exact bytes (``util.encode_exact``);
    a ``str`` stdin is encoded the same way. An interrupt (Ctrl-C, SIGTERM) kills git before
    it propagates, so no git process outlives sglforge and keeps writing. With ``timeout``,
    a git that does not finish in time is killed and reported as an UpstreamError. With
    ``check``, a failure raises GitFailed naming command and folder.
    """
    raw_in = encode_exact(stdin) if isinstance(stdin, str) else stdin
    _progress.current().detail(f"git {' '.join(args)}  (in {cwd})")
    proc = _start(cwd, args, _env(env, identity=identity), stdin=raw_in is not None)
    with proc:  # its pipes closed whatever happens
        try:
            raw_out, raw_err = proc.communicate(raw_in, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            proc.wait()
            raise _timed_out(args, timeout, "") from exc
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    out_text = decode_exact(raw_out or b"")
    err_text = decode_exact(raw_err or b"")
    if strip and out_text.endswith("\n"):
        out_text = out_text[:-1]
    if err_text.endswith("\n"):
        err_text = err_text[:-1]
    result = GitResult(proc.returncode, out_text, err_text)
    if check and result.status != 0:
        raise GitFailed(args, result, cwd)
    return result


@contextlib.contextmanager
def _repo(path: Path | str) -> Iterator[Repo]:
    """``path`` opened with GitPython, closed (its cat-file helpers ended) on the way out."""
    try:
        repo = Repo(str(path))
    except NoSuchPathError as exc:
        raise ConfigError(f"{path}: no such folder (git was to read a repository there)") from exc
    except InvalidGitRepositoryError as exc:
        raise ConfigError(
            f"{path}: not a git repository", f"git -C {path} status says what git sees there"
        ) from exc
    # The commands GitPython runs itself (its cat-file helpers) get the same clean environment
    # (they may fetch a missing blob of a partial clone: never wait on a prompt), and the
    # repository by name: GitPython takes a bare repository with no config file (a plain
    # mirror) for a work tree's .git and would run them in its parent folder.
    repo.git.update_environment(GIT_DIR=str(repo.git_dir), **_env())
    try:
        yield repo
    finally:
        repo.close()


def fast_import(repo: Path, stream: Iterable[bytes]) -> None:
    """Feed ``stream`` (a git fast-import command stream ending in ``done``) to ``git
    fast-import`` as it is produced, so a release's files are never all in memory at once.
    An interrupt or an error in the producer kills git; nothing it wrote is referenced."""
    # always a pack (never loose objects): the store records and checks its packs
    args = ["-c", "fastimport.unpackLimit=0", "fast-import", "--quiet", "--done"]
    _progress.current().detail(f"git fast-import  (in {repo})")
    proc = _start(repo, args, _env(), stdin=True, stdout=False)
    assert proc.stdin is not None and proc.stderr is not None
    # stderr drained as we write: a pipe nobody reads could fill and block both sides
    errors: list[bytes] = []
    drain = threading.Thread(target=lambda: errors.append(_read_all(proc.stderr)), daemon=True)
    drain.start()
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
    finally:
        drain.join()
        proc.stderr.close()
    if status != 0:
        raise GitFailed(
            ("fast-import",), GitResult(status, "", decode_exact(b"".join(errors))), repo
        )


def _read_all(stream: IO[bytes] | None) -> bytes:
    return stream.read() if stream is not None else b""


# "Receiving objects:  45% (123/456), 1.20 MiB | 300.00 KiB/s", possibly after "remote: ".
_PROGRESS_LINE = re.compile(r"^(?:remote: )?([A-Z][A-Za-z ]+):\s+\d+% \((\d+)/(\d+)\)")


def _run_with_progress(
    cwd: Path | str,
    *args: str,
    label: str,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    waiting_for: str = "",
    progress: _progress.Progress | None = None,
) -> GitResult:
    """``_run`` for a network command given ``--progress`` (fetch, clone): git's counters
    ("Receiving objects: 45% (123/456)") drive one task named ``label``; the other lines of
    its stderr are kept for the result. Killed on interrupt or after ``timeout`` like ``_run``,
    with its whole process group: git hands the transfer to a helper (git-remote-http) that
    holds the output pipe too, so killing git alone would leave the helper running."""
    say = _progress.resolve(progress)
    say.detail(f"git {' '.join(args)}  (in {cwd})")
    proc = _start(cwd, args, _env(env), stdout=False, new_session=True)
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
        assert proc.stderr is not None
        with say.task(label, None, unit="objects") as task:
            pending = b""
            while chunk := os.read(proc.stderr.fileno(), 65536):
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
        if proc.stderr is not None:
            proc.stderr.close()
    if expired.is_set():
        raise _timed_out(args, timeout, waiting_for)
    return GitResult(status, "", "\n".join(kept[-50:]))


# --- the project's own checkout -------------------------------------------------------------


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
            _fetch(tmp, url)
            if path.exists():
                shutil.rmtree(path)
            os.replace(tmp, path)
        else:
            current = _run(path, "remote", "get-url", "origin", check=False).stdout
            if current != url:
                _run(path, "remote", "set-url", "origin", url)
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
    res = _run_with_progress(
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


# --- repositories, refs and commits -----------------------------------------------------------


def version() -> str | None:
    """The installed git's version (``2.39.5``); None when git cannot be run."""
    try:
        said = str(Git().version())  # `git version`, through GitPython's command object
    except (GitCommandNotFound, GitCommandError, OSError):
        return None
    return said.removeprefix("git version ").strip()


def is_repository(path: Path | str) -> bool:
    """Whether ``path`` is inside a usable git repository (a worktree whose repository was
    deleted is not)."""
    if not Path(path).is_dir():
        return False
    return _run(path, "rev-parse", "--git-dir", check=False, identity=False).status == 0


def in_work_tree(path: Path | str) -> bool:
    """Whether ``path`` is inside a git work tree (not a bare repository, not outside git)."""
    res = _run(path, "rev-parse", "--is-inside-work-tree", check=False, identity=False)
    return res.status == 0 and res.stdout.strip() == "true"


def init(path: Path, bare: bool = False, head: str | None = None) -> None:
    """A new repository at ``path`` (``git init``); ``head`` names the branch HEAD points at."""
    path.mkdir(parents=True, exist_ok=True)
    _run(path, "init", "-q", *(["--bare"] if bare else []), identity=False)
    if head:
        _run(path, "symbolic-ref", "HEAD", head)


def current_branch(path: Path | str) -> str:
    """The branch HEAD is on (``main``), even before its first commit; '' when detached."""
    res = _run(path, "symbolic-ref", "--short", "-q", "HEAD", check=False, identity=False)
    return res.stdout.strip() if res.status == 0 else ""


def head(path: Path | str) -> str:
    """The commit HEAD names; GitFailed when there is none yet."""
    return commit_id(path, "HEAD")


def has_head(path: Path | str) -> bool:
    """Whether HEAD names a commit (false in a repository with no commit yet)."""
    return _run(path, "rev-parse", "--verify", "-q", "HEAD", check=False).status == 0


def commit_id(repo: Path | str, rev: str) -> str:
    """The full SHA of the commit ``rev`` names; GitFailed naming ``rev`` when it names none."""
    with _repo(repo) as r:
        try:
            return str(r.commit(rev).hexsha)
        except _NOT_FOUND as exc:
            raise GitFailed(
                ("rev-parse", rev), GitResult(128, "", f"fatal: {rev!r} names no commit"), repo
            ) from exc


def tree(repo: Path | str, rev: str) -> str:
    """The SHA of the tree of the commit (or tag) ``rev``; GitFailed naming ``rev`` else."""
    with _repo(repo) as r:
        try:
            return str(r.rev_parse(f"{rev}^{{tree}}").hexsha)
        except _NOT_FOUND as exc:
            raise GitFailed(
                ("rev-parse", rev), GitResult(128, "", f"fatal: {rev!r} names no tree"), repo
            ) from exc


def has_tree(repo: Path | str, rev: str) -> bool:
    """Whether ``rev`` (a tag, a branch, a SHA) names a commit or tree held in ``repo``."""
    return (
        _run(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{tree}}", check=False).status == 0
    )


def branch_exists(repo: Path | str, branch: str) -> bool:
    return (
        _run(repo, "rev-parse", "--verify", "-q", f"refs/heads/{branch}", check=False).status == 0
    )


def valid_branch_name(repo: Path | str, name: str) -> bool:
    """Whether git accepts ``name`` as a new branch's name."""
    return _run(repo, "check-ref-format", "--branch", name, check=False).status == 0


def checkout(repo: Path | str, rev: str = "HEAD", new_branch: str | None = None) -> None:
    """Switch the user's work tree to ``rev`` (with ``new_branch``: to a new branch made at
    ``rev``); the work tree's uncommitted changes come along, as with ``git checkout``."""
    _run(repo, "checkout", "-q", *(["-b", new_branch] if new_branch else []), rev, identity=False)


def delete_branch(repo: Path | str, branch: str) -> None:
    _run(repo, "branch", "-D", branch, check=False)


def set_ref(repo: Path | str, name: str, rev: str) -> None:
    """Point the ref ``name`` at the commit ``rev`` names."""
    _run(repo, "update-ref", name, f"{rev}^{{commit}}")


def resolve(repo: Path, ref: str) -> str:
    """The full commit SHA ``ref`` names in ``repo`` (a tag first, then an upstream branch,
    then any name git knows); UpstreamError naming ``ref`` when none."""
    with _repo(repo) as r:
        for cand in (f"refs/tags/{ref}", f"refs/remotes/origin/{ref}", ref):
            try:
                return str(r.commit(cand).hexsha)
            except _NOT_FOUND:
                continue
    raise UpstreamError(
        f"ref {ref!r} not found in upstream {repo}",
        "run `sglforge upstream tags` to list known tags, or fetch with the right --upstream",
    )


def resolve_many(repo: Path, refs: list[str]) -> dict[str, str]:
    """Commit SHAs of many tags and upstream branches in one call (others via ``resolve``).

    With no ``refs``, every tag and upstream branch the repository knows.
    """
    listing = _run(
        repo,
        "for-each-ref",
        "--format=%(refname)%09%(objectname)%09%(*objectname)",
        "refs/tags",
        "refs/remotes/origin",
    ).stdout
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
    """Every tag name of ``repo``, sorted as ``git tag --list`` sorts them."""
    with _repo(repo) as r:
        return sorted((str(t.name) for t in r.tags), key=encode_exact)


def tags_containing(repo: Path, commit: str) -> list[str]:
    """The tags whose history holds ``commit`` (the releases that shipped it)."""
    return _run(repo, "tag", "--contains", commit).stdout.split()


def is_ancestor(repo: Path | str, a: str, b: str) -> bool:
    """Whether commit ``a`` is in the history of ``b`` (false for a name git does not know)."""
    with _repo(repo) as r:
        try:
            return r.is_ancestor(r.commit(a), r.commit(b))
        except _NOT_FOUND:
            return False


def merge_base(repo: Path, a: str, b: str) -> str | None:
    """The best common ancestor of two commits; None for unrelated histories."""
    found = _run(repo, "merge-base", a, b, check=False).stdout
    return found or None


def commits_between(repo: Path | str, base: str, tip: str = "HEAD") -> list[str]:
    """The commits in ``base..tip``, oldest first."""
    return _run(repo, "rev-list", "--reverse", f"{base}..{tip}").stdout.split()


def subject(repo: Path | str, commit: str) -> str:
    """The subject line of ``commit``'s message, as ``git log --format=%s`` shows it."""
    return _run(repo, "log", "-1", "--format=%s", commit).stdout


def blob(repo: Path, commit: str, path: str) -> bytes | None:
    """The exact bytes of ``path`` at ``commit`` in ``repo`` (a bare or working clone), or None
    when the commit or the path is not there."""
    with _repo(repo) as r:
        try:
            obj = r.commit(commit).tree[path]
        except _NOT_FOUND:
            return None
        if obj.type != "blob":
            return None
        return bytes(obj.data_stream.read())


def blob_id(data: bytes) -> str:
    """git's object id of a blob with these bytes (what ``git hash-object`` prints)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def blob_ids(repo: Path) -> set[str]:
    """The ids of every blob the repository holds (packed or loose)."""
    res = _run(
        repo,
        "cat-file",
        "--batch-all-objects",
        "--batch-check=%(objectname) %(objecttype)",
        check=False,
    )
    return {line.split()[0] for line in res.stdout.splitlines() if line.endswith(" blob")}


def fsck(repo: Path) -> str:
    """'' for a repository whose objects are sound, else git fsck's first complaint."""
    res = _run(repo, "fsck", "--no-dangling", "--no-progress", check=False)
    if res.status == 0:
        return ""
    lines = (res.stderr or res.stdout).strip().splitlines()
    return lines[0] if lines else "git fsck failed"


def archive(repo: Path, commit: str, path: str, dest: Path) -> None:
    """A tar of ``path`` (a folder) at ``commit`` written to ``dest``."""
    _run(repo, "archive", "--format=tar", "-o", str(dest), commit, path)


# --- diffs and patches ------------------------------------------------------------------------


def diff_names(repo: Path | str, a: str, b: str) -> list[str]:
    """The files that differ between two commits, named exactly (no quoting, no renames)."""
    out_z = _run(repo, "diff", "--name-only", "-z", "--no-renames", a, b, strip=False).stdout
    return [f for f in out_z.split("\0") if f]


def name_status(repo: Path, a: str, b: str) -> list[tuple[str, str]]:
    """(status letter, path) of each file that differs between two commits, no renames:
    ``("A", path)`` added, ``("D", path)`` deleted, ``("M", path)`` modified."""
    res = _run(repo, "diff", "--name-status", "-z", "--no-renames", a, b, check=False, strip=False)
    fields = res.stdout.split("\0")
    return [(fields[i], fields[i + 1]) for i in range(0, len(fields) - 1, 2)]


def renames(repo: Path, a: str, b: str, paths: Sequence[str] = ()) -> dict[str, str]:
    """{old path: new path} of the files git sees renamed between two commits (among
    ``paths`` only, when given)."""
    res = _run(
        repo,
        "diff",
        "--name-status",
        "-z",
        "-M",
        f"-l{RENAME_LIMIT}",
        "--diff-filter=R",
        a,
        b,
        *(["--", *paths] if paths else []),
        check=False,
        strip=False,
    )
    fields = res.stdout.split("\0")
    moved: dict[str, str] = {}
    for i in range(0, len(fields) - 2, 3):
        if fields[i].startswith("R"):
            moved[fields[i + 1]] = fields[i + 2]
    return moved


def diff(repo: Path, a: str, b: str, paths: Sequence[str] = ()) -> str:
    """The diff from ``a`` to ``b`` (limited to ``paths``), exact bytes."""
    return _run(repo, "diff", a, b, "--", *paths, check=False, strip=False).stdout


def patch_id(repo: Path, text: str) -> str:
    """git's stable patch-id of the diff ``text``; '' when it holds no diff."""
    res = _run(repo, "patch-id", "--stable", stdin=text, check=False)
    return res.stdout.split()[0] if res.stdout else ""


def patch_ids(repo: Path, base: str, tip: str, paths: Sequence[str] = ()) -> list[tuple[str, str]]:
    """(patch-id, commit) of each non-merge commit in ``base..tip`` that touches ``paths``."""
    log = _run(
        repo,
        "log",
        "-p",
        "--no-merges",
        "--format=commit %H",
        f"{base}..{tip}",
        "--",
        *paths,
        check=False,
        strip=False,
    ).stdout
    if not log.strip():
        return []
    ids = _run(repo, "patch-id", "--stable", stdin=log, check=False).stdout
    return [(p[0], p[1]) for line in ids.splitlines() if len(p := line.split()) == 2]


def format_patch(repo: Path | str, commit: str) -> str:
    """``git format-patch`` text of one commit, stable across runs (zero From hash)."""
    return _run(
        repo,
        "format-patch",
        "-1",
        "--stdout",
        "--zero-commit",
        "--no-signature",
        commit,
        strip=False,
    ).stdout


def holds_any_line(repo: Path, commit: str, path: str, lines: Sequence[str]) -> bool:
    """Whether ``path`` at ``commit`` holds any of ``lines`` (fixed strings)."""
    patterns = [a for ln in lines for a in ("-e", ln)]
    res = _run(repo, "grep", "-F", "-c", *patterns, commit, "--", path, check=False)
    return res.status == 0 and bool(res.stdout.strip())


def find_line(repo: Path, commit: str, text: str, limit: int = 3) -> list[str]:
    """``path:line`` of the first ``limit`` places the tree of ``commit`` holds ``text``."""
    res = _run(repo, "grep", "-F", "-n", "-e", text, commit, "--", ":/", check=False)
    found = res.stdout.splitlines()[:limit]
    return [":".join(ln.removeprefix(f"{commit}:").split(":", 2)[:2]) for ln in found]


def apply_to_folder(folder: Path, patch: Path, include: str) -> GitResult:
    """``patch`` applied to the plain files of ``folder`` (no repository needed), only its
    files matching ``include``; the result says whether it applied."""
    return _run(
        folder, "apply", "--whitespace=nowarn", f"--include={include}", str(patch), check=False
    )


def apply_to_tree(repo: Path | str, commit: str, text: str) -> str | None:
    """The tree ``text`` (a patch) gives applied on ``commit``, made in a private index (no
    file of the work tree is touched); None when it does not apply."""
    fd, name = tempfile.mkstemp(prefix="sglforge-index-")
    os.close(fd)
    os.unlink(name)
    index = Index(repo, Path(name))
    try:
        index.read_tree(commit, check=False)
        if not index.loaded or index.apply(text).status != 0:
            return None
        return index.write_tree()
    finally:
        index.discard()


class Index:
    """A private index file (``GIT_INDEX_FILE``) over ``repo``'s objects: patches are applied
    to it with ``git apply --cached``, so no file is checked out and no worktree touched."""

    def __init__(self, repo: Path | str, path: Path) -> None:
        self.repo = repo
        self.path = path
        self.loaded = False

    def _git(self, *args: str, stdin: str | None = None, check: bool = False) -> GitResult:
        env = {"GIT_INDEX_FILE": str(self.path)}
        return _run(self.repo, *args, stdin=stdin, env=env, check=check)

    def read_tree(self, tree: str, check: bool = True) -> None:
        """The index becomes the tree (or commit) ``tree``."""
        self.loaded = self._git("read-tree", tree, check=check).status == 0

    def read_paths(self, commit: str, paths: Sequence[str], add: bool = False) -> None:
        """An index holding only ``paths`` of ``commit`` (added to what it holds with ``add``).

        Writing a full index of sglang's thousands of files costs more than the patches' own
        work; the handful of files a queue touches gives the same answers.
        """
        listing = self._git("ls-tree", "-r", "--full-tree", commit, "--", *paths, check=True)
        if not add:
            self.path.unlink(missing_ok=True)
        if not listing.stdout:
            if not add:
                self._git("read-tree", "--empty", check=True)
            return
        self._git("update-index", "--index-info", stdin=listing.stdout + "\n", check=True)
        self.loaded = True

    def write_tree(self) -> str:
        """The SHA of a tree object holding what the index holds."""
        return self._git("write-tree", check=True).stdout

    def has_path(self, path: str) -> bool:
        return self._git("ls-files", "--error-unmatch", "--", path).status == 0

    def apply(
        self,
        patch: str | Sequence[Path],
        three_way: bool = False,
        reverse: bool = False,
        check: bool = False,
    ) -> GitResult:
        """``git apply --cached -v`` of ``patch`` (a patch's text, or patch files applied in
        order, atomically); ``check`` only tells whether it would apply. git's verdict and its
        per-hunk report are in the result (status, stderr)."""
        flags = [
            *(["--3way"] if three_way else []),
            *(["--reverse"] if reverse else []),
            *(["--check"] if check else []),
        ]
        if isinstance(patch, str):
            return self._git("apply", "--cached", "-v", *flags, "-", stdin=patch)
        return self._git("apply", "--cached", "-v", *flags, *(str(p) for p in patch))

    def discard(self) -> None:
        """Remove the index file (and a lock a killed git left)."""
        self.path.unlink(missing_ok=True)
        Path(f"{self.path}.lock").unlink(missing_ok=True)


# --- a work tree: `git am` sessions, changes, commits ---------------------------------------


def am(wt: Path, patches: Sequence[Path] = (), text: str | None = None) -> GitResult:
    """``git am --3way`` of ``patches`` (files, in order) or of one patch's ``text``: one
    commit each. On a conflict git stops with markers in the worktree; the result says so."""
    args = ["am", "--3way", "--keep-cr", "--quiet", *(str(p) for p in patches)]
    return _run(wt, *args, stdin=text, check=False)


def am_in_progress(wt: Path) -> bool:
    """Whether a ``git am`` session is stopped in ``wt`` (waiting for --continue or --abort)."""
    return _rebase_apply(wt).exists()


def am_abort(wt: Path) -> None:
    """End a stopped ``git am`` session, returning to where it started; no session left."""
    _run(wt, "am", "--abort", check=False)
    shutil.rmtree(_rebase_apply(wt), ignore_errors=True)


def am_quit(wt: Path) -> None:
    """End a stopped ``git am`` session keeping the commits it made, and drop whatever the
    stopped patch left in the work tree (its conflict, its new files)."""
    _run(wt, "am", "--quit", check=False)
    _run(wt, "reset", "-q", "--hard", "HEAD", check=False)
    _run(wt, "clean", "-fdq", check=False)


def _rebase_apply(wt: Path) -> Path:
    where = Path(_run(wt, "rev-parse", "--git-path", "rebase-apply").stdout)
    return where if where.is_absolute() else wt / where


def uncommitted(wt: Path | str, *paths: str) -> list[str]:
    """The files with uncommitted changes, untracked ones included (under ``paths`` only, when
    given), as ``git status`` names them."""
    listing = _run(wt, "status", "--porcelain", "--untracked-files=normal", "--", *paths).stdout
    return [line[3:] for line in listing.splitlines() if line]


def untracked(wt: Path) -> list[str]:
    """The untracked files and folders of ``wt`` (a folder once, ending in ``/``)."""
    listing = _run(
        wt, "status", "--porcelain", "-z", "--untracked-files=normal", check=False, strip=False
    ).stdout
    return [e[3:] for e in listing.split("\0") if e.startswith("?? ")]


def unmerged(wt: Path) -> list[str]:
    """The files a stopped merge or ``git am`` left in conflict."""
    res = _run(wt, "diff", "--name-only", "-z", "--diff-filter=U", check=False, strip=False)
    return [f for f in res.stdout.split("\0") if f]


def staged_gitlinks(wt: Path) -> list[str]:
    """Staged submodule entries (mode 160000): what a patch cannot carry."""
    res = _run(wt, "diff", "--cached", "--raw", "-z", "--no-renames", check=False, strip=False)
    fields = res.stdout.split("\0")
    return [fields[i + 1] for i in range(0, len(fields) - 1, 2) if " 160000 " in fields[i]]


def user_identity(cwd: Path) -> GitResult:
    """The user's own ``GIT_AUTHOR_IDENT`` (``Name <email> 1700000000 +0100``), never
    sglforge's fixed one; a result whose status and stderr say when git knows none."""
    return _run(cwd, "var", "GIT_AUTHOR_IDENT", identity=False, check=False)


def commit_all(
    wt: Path | str,
    message: str,
    paths: Sequence[str] = (),
    author: tuple[str, str, str] | None = None,
    own_identity: bool = False,
) -> bool:
    """Stage every change (under ``paths``, when given) and commit it; False, and no commit,
    when nothing differs from HEAD. ``author`` is (name, email, date); ``own_identity``
    commits as the user's git config says, not as sglforge. GitFailed when git refuses."""
    identity = not own_identity
    _run(wt, "add", "-A", *(["--", *paths] if paths else []), identity=identity)
    if _run(wt, "diff", "--cached", "--quiet", check=False).status == 0:
        return False
    env = {}
    if author:
        env = {"GIT_AUTHOR_NAME": author[0], "GIT_AUTHOR_EMAIL": author[1]}
        env["GIT_AUTHOR_DATE"] = author[2]
    _run(wt, "commit", "-q", "-m", message, env=env, identity=identity)
    return True


# --- worktrees of a shared repository ---------------------------------------------------------


def add_worktree(repo: Path, path: Path, commit: str, branch: str | None = None) -> None:
    """A worktree of ``repo`` at ``path`` checked out at ``commit``: on ``branch`` (made or
    moved there), or detached when None."""
    at = ["-B", branch] if branch else ["--detach"]
    _run(repo, "worktree", "add", "--force", *at, str(path), commit)


def reset_worktree(wt: Path, branch: str, commit: str) -> None:
    """An existing worktree put back on ``branch`` at ``commit``, with no other file in it."""
    _run(wt, "checkout", "--force", "-B", branch, commit)
    _run(wt, "clean", "-fdq")


def remove_worktree(repo: Path, path: Path) -> None:
    """The worktree at ``path`` removed from ``repo`` (its folder too), whatever it holds."""
    _run(repo, "worktree", "remove", "--force", str(path), check=False)
    shutil.rmtree(path, ignore_errors=True)
    prune_worktrees(repo)


def prune_worktrees(repo: Path) -> None:
    """Forget the worktrees of ``repo`` whose folders are gone."""
    _run(repo, "worktree", "prune", check=False)


def worktree_branches(repo: Path) -> dict[str, Path]:
    """{branch ref: worktree folder} of the worktrees of ``repo`` that are on a branch."""
    listing = _run(repo, "worktree", "list", "--porcelain", check=False).stdout
    held: dict[str, Path] = {}
    for block in listing.split("\n\n"):
        fields = dict(line.partition(" ")[::2] for line in block.splitlines() if line)
        if fields.get("branch") and fields.get("worktree"):
            held[fields["branch"]] = Path(fields["worktree"])
    return held


def worktree_home(wt: Path) -> tuple[Path, Path] | None:
    """(the worktree folder git's records of ``wt`` name, those records) when they name
    another folder than ``wt``: the project was copied or moved with its ``build/`` (a
    worktree's ``.git`` file holds an absolute path, and its records point back at the folder
    they were made for). None when ``wt`` is not a linked worktree, or its records are its own.
    """
    import os

    dotgit = wt / ".git"
    try:
        if not dotgit.is_file():
            return None
        first = dotgit.read_text(errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return None
    if not first.startswith("gitdir:"):
        return None
    admin = Path(first[len("gitdir:") :].strip())
    admin = admin if admin.is_absolute() else wt / admin
    try:
        back = Path((admin / "gitdir").read_text(errors="replace").strip())
    except OSError:
        return None
    back = back if back.is_absolute() else admin / back
    if os.path.realpath(back.parent) == os.path.realpath(wt):
        return None
    return back.parent, admin


def repair_worktree(wt: Path) -> None:
    """Point git's records of the linked worktree ``wt`` back at it (``git worktree repair``,
    run in the worktree: for a worktree whose folder was moved)."""
    _run(wt, "worktree", "repair", identity=False)


def common_dir(wt: Path) -> Path | None:
    """The repository a worktree belongs to (its common git folder); None when unknown."""
    res = _run(wt, "rev-parse", "--path-format=absolute", "--git-common-dir", check=False)
    return Path(res.stdout) if res.status == 0 and res.stdout else None


__all__ = [
    "GitFailed",
    "GitResult",
    "IDENTITY",
    "Index",
    "RENAME_LIMIT",
    "add_worktree",
    "am",
    "am_abort",
    "am_in_progress",
    "am_quit",
    "apply_to_folder",
    "apply_to_tree",
    "archive",
    "blob",
    "blob_id",
    "blob_ids",
    "branch_exists",
    "cache_lock",
    "cache_name",
    "checkout",
    "checkout_facts",
    "commit_all",
    "commit_id",
    "commits_between",
    "common_dir",
    "current_branch",
    "delete_branch",
    "diff",
    "diff_names",
    "ensure_cache",
    "fast_import",
    "find_line",
    "format_patch",
    "fsck",
    "has_head",
    "has_tree",
    "head",
    "holds_any_line",
    "in_work_tree",
    "init",
    "is_ancestor",
    "is_local",
    "is_repository",
    "merge_base",
    "name_status",
    "patch_id",
    "patch_ids",
    "prune_worktrees",
    "public_url",
    "remove_worktree",
    "renames",
    "reset_worktree",
    "resolve",
    "resolve_many",
    "set_ref",
    "staged_gitlinks",
    "subject",
    "tags",
    "tags_containing",
    "tree",
    "uncommitted",
    "unmerged",
    "untracked",
    "user_identity",
    "valid_branch_name",
    "version",
    "worktree_branches",
]
