"""Running git: the fixed identity and non-interactive environment, timeouts, interrupts, the
GitPython ``Repo`` (imported where one is opened), and failures turned into the project's
own errors."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sglforge import progress as _progress
from sglforge.errors import ConfigError, PatchError, UpstreamError, disk_error
from sglforge.util import decode_exact, encode_exact

# Without git on PATH GitPython's import raises; sglforge reports a missing git in its own
# words instead (`sglforge doctor`, and a ConfigError from any command).
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

if TYPE_CHECKING:
    from git import Repo

# GitPython is imported where a repository is opened (``_repo``), never to start git: a
# command that only runs git processes (`patches list`, push, pop) does not load it.

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


def _not_found() -> tuple[type[BaseException], ...]:
    """What GitPython's object reads raise for a name or object the repository does not
    hold (``except _not_found():`` is evaluated only when something was raised)."""
    from git.exc import BadName, BadObject, GitCommandError

    return (BadName, BadObject, ValueError, IndexError, KeyError, GitCommandError)


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
    """``git ARGS`` started in ``cwd`` as a process the caller waits for, as GitPython's
    command object starts it (its executable, messages in English: callers read git's
    words) without importing GitPython. An interrupt or a timeout kills it before
    propagating: no git outlives sglforge."""
    if not Path(cwd).is_dir():
        # Popen would fail with a message naming neither the folder nor git
        raise ConfigError(f"{cwd}: no such folder (git was to run there)")
    exe = os.environ.get("GIT_PYTHON_GIT_EXECUTABLE") or "git"
    try:
        return subprocess.Popen(
            [exe, *args],
            cwd=str(cwd),
            env={**os.environ, "LANGUAGE": "C", "LC_ALL": "C", **env},
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdout else subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=new_session,
        )
    except FileNotFoundError as exc:
        raise _no_git(exc) from exc


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
    from git import Repo
    from git.exc import InvalidGitRepositoryError, NoSuchPathError

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
