"""Where a scenario's server (and the bench's client) runs: a container on the Docker engine,
or a local process in an environment the user names. Smoke and bench start both through one
:class:`Runtime`; readiness (``smoke.runner.wait_ready``), the log checks and the verdicts are
written once above it.

- :class:`ContainerRuntime`: :func:`sglforge.engine.containers.running` (the default).
- :class:`ProcessRuntime`: the command under ``python`` (``python3``, a venv's interpreter, or a
  prefix such as ``apptainer exec IMAGE.sif python3``), in its own session (process group),
  stdout and stderr to the log file, a minimal environment, the mounts' paths mapped to their
  host folders; the whole group is stopped (SIGTERM, then SIGKILL) whatever ends the block.
  Nothing here imports the Docker SDK.
- :func:`runtime_for`: the runtime a request and its scenario ask for.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Unpack

from sglforge.engine.profile import Launch, Mount
from sglforge.errors import ConfigError, SmokeError
from sglforge.util import (
    atomic_write,
    env_seconds,
    raise_held,
    signals_held,
    signals_raise,
    tail_lines,
)

RUNTIMES = ("docker", "process")
DEFAULT_PYTHON = ("python3",)
# What a process's environment keeps from sglforge's own: nothing else (no SGLFORGE_*, no
# credentials, no PYTHONPATH unless the scenario's [container.env] or --env passes it).
PASSED_ENV = ("PATH", "HOME", "LANG", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
STOP_GRACE_ENV = "SGLFORGE_STOP_GRACE"  # seconds between SIGTERM and SIGKILL (default 20)
_PYTHON = re.compile(r"^python(3(\.\d+)?)?$")


class Box(Protocol):
    """A started server or client: its log, whether and when it exited, its exit code."""

    log_path: Path
    exited: threading.Event
    exit_code: int | None
    noticed_exit_at: float | None

    def wait_exit(self, timeout: float) -> bool: ...

    def drain_logs(self, timeout: float = ...) -> None: ...

    def finished_at(self) -> float | None: ...

    def tail(self, n: int = ...) -> list[str]: ...


class Runtime(Protocol):
    """Starts commands the way ``docker run IMAGE COMMAND`` would, and always stops them."""

    kind: str  # "docker" or "process"

    def describe(self, image: str) -> str:
        """What runs, for reports: the image, or ``process: <python words>``."""
        ...

    def shell(self, image: str, command: Sequence[str]) -> str:
        """The line a person types to run ``command`` where this runtime runs it (hints)."""
        ...

    def running(self, image: str, **launch: Unpack[Launch]) -> AbstractContextManager[Box]: ...

    def reap(self, role: str) -> list[str]:
        """Remove what killed runs of ``role`` left behind; their names."""
        ...


class ContainerRuntime:
    """The Docker engine: exactly what smoke and bench ran before there was a choice."""

    kind = "docker"

    def describe(self, image: str) -> str:
        return image

    def shell(self, image: str, command: Sequence[str]) -> str:
        return shlex.join(["docker", "run", "--rm", image, *command])

    def running(self, image: str, **launch: Unpack[Launch]) -> AbstractContextManager[Box]:
        from sglforge.engine import containers

        return containers.running(image, **launch)

    def reap(self, role: str) -> list[str]:
        from sglforge.engine import containers

        return containers.reap_orphans(role)


@dataclass(frozen=True)
class ProcessRuntime:
    """Local processes under ``python`` (the interpreter, or a prefix ending in one)."""

    python: tuple[str, ...] = DEFAULT_PYTHON
    kind = "process"

    def describe(self, image: str) -> str:
        return "process: " + shlex.join(self.python)

    def shell(self, image: str, command: Sequence[str]) -> str:
        return shlex.join(self.argv(command, ()))

    def argv(self, command: Sequence[str], mounts: Sequence[Mount]) -> list[str]:
        """``command`` as this runtime runs it: a leading ``python3`` (or ``python``) becomes
        ``self.python``; any other program gets ``self.python``'s prefix (all but its last
        word: ``apptainer exec IMAGE.sif``). Paths under a mount's target become the host's."""
        words = [map_path(w, mounts) for w in command]
        if words and _PYTHON.match(words[0]):
            return [*self.python, *words[1:]]
        return [*self.python[:-1], *words]

    def running(self, image: str, **launch: Unpack[Launch]) -> AbstractContextManager[Box]:
        mounts = launch["profile"].mounts
        argv = self.argv([*(launch["entrypoint"] or ()), *launch["command"]], mounts)
        return _process(argv, child_env(launch["profile"].env, mounts), launch["log_path"])

    def reap(self, role: str) -> list[str]:
        return []  # a process group dies with its block (see _process); none is left to find


def map_path(word: str, mounts: Sequence[Mount]) -> str:
    """``word`` with a mount's target (the container's view) replaced by its host source:
    the whole word, a path under it, or the value of ``--flag=PATH``."""
    flag, eq, value = word.partition("=")
    splits = [("", word)] + ([(flag + eq, value)] if eq and word.startswith("-") else [])
    for m in mounts:
        target = m.target.rstrip("/")
        for head, rest in splits:
            if rest == target or rest.startswith(target + "/"):
                return head + m.source.rstrip("/") + rest[len(target) :]
    return word


def child_env(env: Mapping[str, str], mounts: Sequence[Mount]) -> dict[str, str]:
    """The process's environment: PATH, HOME, LANG and the visible-devices lists from
    sglforge's own, then ``env`` (the scenario's and --env's, paths mapped); never SGLFORGE_*."""
    out = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
    out.update({k: map_path(str(v), mounts) for k, v in env.items()})
    return {k: v for k, v in out.items() if not k.startswith("SGLFORGE_")}


class ProcessBox:
    """A started process group: its log file, whether and when its leader exited."""

    def __init__(self, proc: subprocess.Popen[bytes], log_path: Path) -> None:
        self.proc = proc
        self.pgid = proc.pid  # start_new_session: the leader's pid is the group's id
        self.log_path = log_path
        self.exited = threading.Event()
        self.exit_code: int | None = None
        self.noticed_exit_at: float | None = None
        threading.Thread(target=self._watch, name=f"wait-{proc.pid}", daemon=True).start()

    def _watch(self) -> None:
        code = self.proc.wait()
        self.noticed_exit_at = time.time()
        # A signal as a shell (and the Docker engine) reports it: 128 + its number.
        self.exit_code = 128 - code if code < 0 else code
        self.exited.set()

    def wait_exit(self, timeout: float) -> bool:
        return self.exited.wait(timeout)

    def drain_logs(self, timeout: float = 0.0) -> None:
        """Nothing to drain: the process writes its log file itself."""

    def finished_at(self) -> float | None:
        return self.noticed_exit_at

    def tail(self, n: int = 50) -> list[str]:
        return tail_lines(self.log_path, n)


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies awaiting their reaper don't)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def stop_group(box: ProcessBox, grace: float | None = None) -> None:
    """SIGTERM to the whole group, SIGKILL to what is left after ``grace`` seconds; returns
    once no process of the group runs and the leader is reaped. What the group writes once
    stopped (sglang logs its children's deaths by SIGTERM) is moved to ``*.teardown.log``: the
    log the checks read ends where the server's own life did, as a container's does (the
    engine stops one with SIGKILL)."""
    grace = env_seconds(STOP_GRACE_ENV, 20.0, minimum=0.0) if grace is None else grace
    offset = _size(box.log_path) if group_alive(box.pgid) else None
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 30.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(box.pgid, sig)
        deadline = time.monotonic() + wait
        while group_alive(box.pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not group_alive(box.pgid):
            break
    box.exited.wait(5.0)
    if offset is not None:
        _split_teardown(box.log_path, offset)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def teardown_log(log_path: Path) -> Path:
    """Where a stopped server's last words go: ``server.log`` -> ``server.teardown.log``."""
    return log_path.with_name(f"{log_path.stem}.teardown{log_path.suffix}")


def _split_teardown(log_path: Path, offset: int) -> None:
    """The bytes written after ``offset`` moved from ``log_path`` to its teardown log."""
    try:
        with open(log_path, "r+b") as fh:
            fh.seek(offset)
            rest = fh.read()
            if rest:
                atomic_write(teardown_log(log_path), rest)
                fh.truncate(offset)
    except OSError:
        pass  # the log stays whole: the checks then read the teardown lines too


def _die_with_parent(parent: int) -> None:
    """In the child, before exec: SIGKILL when sglforge dies, even by SIGKILL, where no
    ``finally`` runs (Linux's PR_SET_PDEATHSIG; sglang's own children set the same towards
    the server: sglang/srt/utils/common.py:2538 in 0.5.14, so the whole tree goes)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the call took hold
            os._exit(1)


@contextlib.contextmanager
def _process(argv: list[str], env: dict[str, str], log_path: Path) -> Iterator[ProcessBox]:
    """Start ``argv`` in a new session, output to ``log_path``; yield it; always stop the
    group, also on Ctrl-C and SIGTERM (re-raised once the group is gone)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    box: ProcessBox | None = None
    with signals_raise():
        try:
            with signals_held() as arrived, open(log_path, "wb") as log:
                try:
                    proc = subprocess.Popen(  # noqa: S603 (the user's own command)
                        argv,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=env,
                        start_new_session=True,
                        preexec_fn=functools.partial(_die_with_parent, os.getpid()),  # noqa: PLW1509 (prctl only, no locks)
                    )
                except OSError as exc:
                    raise SmokeError(
                        f"{shlex.join(argv[:4])}: could not start it: {exc.strerror or exc}",
                        "pass --python with an interpreter (or a prefix ending in one) that exists",
                    ) from None
                box = ProcessBox(proc, log_path)
            raise_held(arrived)
            yield box
        finally:
            if box is not None:
                with signals_held() as late:
                    stop_group(box)
                raise_held(late)


def parse_python(words: str | Sequence[str], where: str) -> tuple[str, ...]:
    """The interpreter words (``/venv/bin/python3``, ``apptainer exec x.sif python3``)."""
    out = tuple(shlex.split(words) if isinstance(words, str) else words)
    if not out:
        raise ConfigError(f"{where}: the python command is empty", "pass --python python3")
    return out


def runtime_for(kind: str | None, python: Sequence[str]) -> Runtime:
    """The runtime ``kind`` names, for ``python``. None is Docker: a scenario's ``runtime``
    is read by the ``smoke`` and ``bench`` commands only, so publish and upgrade always test
    the image itself, in a container."""
    chosen = kind or "docker"
    if chosen not in RUNTIMES:
        raise ConfigError(
            f"unknown runtime {chosen!r} (known: {', '.join(RUNTIMES)})", "--runtime process"
        )
    if chosen == "docker":
        return ContainerRuntime()
    words = tuple(python) or DEFAULT_PYTHON
    if shutil.which(words[0]) is None:
        raise ConfigError(
            f"--python {shlex.join(words)}: {words[0]} is not a program here",
            "pass --python /path/to/python3 (or a prefix ending in one)",
        )
    return ProcessRuntime(words)


SERVER_URL_NOTE = "a server sglforge did not start (--server-url)"


def parse_server_url(url: str) -> tuple[str, int, str]:
    """(host, port, base URL) of ``--server-url http://HOST:PORT``; ConfigError otherwise."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise ConfigError(f"--server-url {url!r}: {exc}", "--server-url http://HOST:PORT") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        raise ConfigError(
            f"--server-url {url!r}: not http(s)://HOST:PORT (no path, query or user)",
            "--server-url http://127.0.0.1:30000",
        )
    if parts.query or parts.fragment or parts.username:
        raise ConfigError(f"--server-url {url!r}: no query, fragment or user", "--server-url URL")
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    return host, port, f"{parts.scheme}://{shown}:{port}"


class RemoteBox:
    """A server sglforge did not start: it never "exits" here, and it has no log."""

    def __init__(self) -> None:
        self.log_path = Path(os.devnull)
        self.exited = threading.Event()  # never set: its life is not watched
        self.exit_code: int | None = None
        self.noticed_exit_at: float | None = None

    def wait_exit(self, timeout: float) -> bool:
        return self.exited.wait(timeout)

    def drain_logs(self, timeout: float = 0.0) -> None:
        """No log to drain."""

    def finished_at(self) -> float | None:
        return None

    def tail(self, n: int = 50) -> list[str]:
        return []
