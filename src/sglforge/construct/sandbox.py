"""Where code sglforge did not write runs on this host: upstream sglang with the queue's patches,
and the packages the index serves (transformers and its closure, msgspec, ...).

Every construction child (``scan``, ``configs coverage``, publish's scan and coverage gates)
is started by :func:`run` and nowhere else, and gets:

- an environment built from an allow-list by :func:`child_env`, the one function that makes
  it: ``PATH``, ``LANG``/``LC_ALL`` of the caller; a throw-away ``HOME`` and ``TMPDIR``; the
  target's variables (:mod:`sglforge.construct.environment`: the release image's, then the
  scenario's ``[container.env]``); what sglforge itself hands the child (``PYTHONPATH``).
  Nothing else of the caller's reaches it: no ``SGLFORGE_*``, ``DOCKER_*``, ``AWS_*``,
  ``GITHUB_*`` nor any ``*_TOKEN``/``*_PASSWORD``/``*_KEY``/``*_SECRET`` (not even from the
  target's list), and none of the host's ``SGLANG_*``/``AITER_*``/``HIP_*``/``ROCM_*``/
  ``CUDA_*`` (those come from the target only, so the answer is the node's);
- resource limits, set in the child before it runs anything (:mod:`sglforge.construct.rlimits`,
  a stdlib-only launcher that execs the child): address space and data (:data:`MEMORY`), CPU
  time, file size (:data:`FILE_SIZE`) and processes (this user's count now plus
  :data:`PROCESSES`);
- no network where the platform allows: ``unshare -rn`` (a user and network namespace: only a
  loopback that is down; from there this process's ``/proc/PID/environ`` cannot be read
  either). Where it is not available (no ``unshare``, user namespaces off, not Linux) the
  child runs with the host's network, and :func:`isolation` says so: the reports name it; on
  Linux this process is then made non-dumpable first, so a child of the same (non-root) user
  cannot read this process's environment from ``/proc``;
- where a mount namespace works too (``unshare -rnm`` and ``mount``), the caller's credential
  files (:data:`CREDENTIALS` under ``HOME``, ``$DOCKER_CONFIG``) mounted over, empty; the rest
  of the file system stays readable (a container, as the smoke uses, would fence that too);
- a working folder, ``HOME`` and ``TMPDIR`` in a fresh temporary folder outside the project,
  removed afterwards.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MEMORY = 8 << 30  # bytes of address space (and data): GLM-5.2 and its draft peak near 0.2 GB
FILE_SIZE = 256 << 20  # bytes: the children write only their answer (a pipe) and small files
PROCESSES = 64  # more than this user's processes at the start: a fork bomb stops there
CPU_MARGIN = 30  # seconds of CPU time over the wall-clock timeout

# Of the caller's environment, only these reach a child.
HOST_PASSED = ("PATH", "LANG", "LC_ALL")
# Never in a child's environment, wherever the value comes from (the target's list included).
SECRET = re.compile(
    r"^(SGLFORGE|DOCKER|AWS|GITHUB|ACTIONS|RUNNER)_|_(TOKEN|PASSWORD|PASSWD|KEY|SECRET)S?$"
    r"|(^|_)(CREDENTIALS?|AUTH)(_|$)",
    re.IGNORECASE,
)


def child_env(
    target: Mapping[str, str],
    scratch: Path,
    ours: Mapping[str, str] | None = None,
    host: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The whole environment of a child that runs code sglforge did not write: the allowed
    host variables (``host``: default ``os.environ``), a throw-away ``HOME``/``TMPDIR`` under
    ``scratch``, then ``target`` (the node's variables), then ``ours`` (what sglforge hands
    the child, e.g. ``PYTHONPATH``); names :data:`SECRET` matches are dropped from all."""
    host = os.environ if host is None else host
    env = {k: host[k] for k in HOST_PASSED if k in host}
    env.setdefault("PATH", os.defpath)
    env.setdefault("LANG", "C.UTF-8")
    home, tmp = scratch / "home", scratch / "tmp"
    home.mkdir(exist_ok=True)
    tmp.mkdir(exist_ok=True)
    env.update(HOME=str(home), TMPDIR=str(tmp), PYTHONNOUSERSITE="1", PYTHONDONTWRITEBYTECODE="1")
    env.update(target)
    env.update(ours or {})
    return {k: v for k, v in env.items() if not SECRET.search(k)}


@dataclass(frozen=True)
class Isolation:
    """How the children are fenced on this host: the network (None: isolated), whether the
    caller's credential files are hidden (a mount namespace), and the limits."""

    network: str | None  # why the children have the host's network; None: they have none
    hides: bool = False  # credential files under HOME hidden (unshare -m, mount)

    def describe(self) -> str:
        limits = f"address space {MEMORY >> 30} GiB, file size {FILE_SIZE >> 20} MiB"
        net = (
            "no network (unshare -rn)"
            if self.network is None
            else (f"the host's network ({self.network})")
        )
        hidden = "; credential files under HOME hidden" if self.hides else ""
        return f"{net}{hidden}; {limits}; a throw-away HOME and working folder"


# Files and folders under the caller's HOME that hold credentials: mounted over (an empty
# tmpfs, /dev/null) in the child's mount namespace. The rest of the file system stays visible
# (the release tree, the cache's wheels, this interpreter).
CREDENTIALS = (
    ".docker",
    ".ssh",
    ".aws",
    ".azure",
    ".kube",
    ".gnupg",
    ".config/gh",
    ".config/gcloud",
    ".config/git/credentials",
    ".git-credentials",
    ".netrc",
    ".pypirc",
    ".npmrc",
)
# Run in the child's user and mount namespace before the child: hide each path named before
# "--", then exec the rest (exit 97, saying which, when one cannot be hidden).
_HIDE = (
    'while [ "$1" != "--" ]; do '
    'if [ -d "$1" ]; then mount -t tmpfs -o size=4k,mode=000 none "$1" || exit 97; '
    'elif [ -e "$1" ]; then mount --bind /dev/null "$1" || exit 97; fi; shift; done; '
    'shift; unset PWD OLDPWD; exec "$@"'
)


def _probe(argv: list[str]) -> str | None:
    """None when ``argv`` runs and exits 0, else why not (one line)."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=20, env={})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{argv[0]}: {exc}"
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return f"{' '.join(argv[1:2])} refused: {why[:160]}"
    return None


@functools.cache
def isolation() -> Isolation:
    """Whether ``unshare -rn`` (and with ``-m``, hiding files by ``mount``) works here
    (probed once per process)."""
    unshare = shutil.which("unshare")
    if not sys.platform.startswith("linux") or unshare is None:
        return Isolation(f"no unshare on {sys.platform}")
    why = _probe([unshare, "-rn", "true"])
    if why is not None:
        return Isolation(f"unshare -rn: {why}")
    mount = shutil.which("mount")
    hides = mount is not None and _probe([unshare, "-rnm", "--", "/bin/sh", "-c", _HIDE, "sh",
                                          "--", "true"]) is None  # fmt: skip
    return Isolation(None, hides)


def hidden_paths(home: Path | None = None) -> list[str]:
    """The credential paths of this host that exist: :data:`CREDENTIALS` under ``home`` and
    ``$DOCKER_CONFIG``."""
    home = Path(os.path.expanduser("~")) if home is None else home
    found = [home / rel for rel in CREDENTIALS]
    if os.environ.get("DOCKER_CONFIG"):
        found.append(Path(os.environ["DOCKER_CONFIG"]))
    return [str(p) for p in found if p.exists()]


@dataclass(frozen=True)
class Answer:
    """The child's answer (``doc``), or None and why not: its last line of output, that it ran
    past the timeout, or that a limit stopped it (``limited``: which)."""

    doc: dict[str, Any] | None
    tail: str = ""
    timed_out: bool = False
    limited: str | None = None


@functools.cache
def _undumpable() -> None:
    """``prctl(PR_SET_DUMPABLE, 0)`` on this process (Linux): its ``/proc/PID/environ`` is
    then root's to read, not a same-user child's. No core dumps of sglforge from then on."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    except (OSError, AttributeError):
        pass


def _launcher(timeout: float) -> list[str]:
    """The argv prefix that sets the limits, then (where it works) drops the network."""
    launcher = Path(__file__).with_name("rlimits.py")
    cpu = int(timeout) + CPU_MARGIN
    limits = [sys.executable, "-I", "-S", str(launcher), str(MEMORY), str(cpu), str(FILE_SIZE)]
    limits += [str(PROCESSES), "--"]
    unshare = shutil.which("unshare")
    fence = isolation()
    if fence.network is None and unshare is not None:
        if fence.hides:
            hide = ["/bin/sh", "-c", _HIDE, "sh", *hidden_paths(), "--"]
            return [*limits, unshare, "-rnm", "--", *hide]
        return [*limits, unshare, "-rn", "--"]
    _undumpable()
    return limits


def run(
    argv: Sequence[str],
    stdin: str,
    *,
    timeout: float,
    prefix: str,
    target: Mapping[str, str],
    ours: Mapping[str, str] | None = None,
) -> Answer:
    """Run ``argv`` (a child that prints one JSON object on its last stdout line) fenced as the
    module says, with ``stdin``, ``target``'s variables and ``ours``."""
    with tempfile.TemporaryDirectory(prefix=prefix) as scratch:
        work = Path(scratch) / "work"  # empty: nothing in it shadows what the child imports
        work.mkdir()
        env = child_env(target, Path(scratch), ours)
        try:
            proc = subprocess.run(
                [*_launcher(timeout), *argv],
                input=stdin,
                capture_output=True,
                text=True,
                errors="replace",
                cwd=work,
                env=env,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return Answer(None, f"ran past {timeout:.0f} s and was stopped", timed_out=True)
    return _answer(proc)


def _answer(proc: subprocess.CompletedProcess[str]) -> Answer:
    lines = proc.stdout.strip().splitlines()
    tail = ((proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"])[0]
    limited = _limit_hit(proc.returncode, proc.stderr or "")
    if limited is not None:
        return Answer(None, f"stopped by its {limited} limit: {tail}", limited=limited)
    if proc.returncode != 0 or not lines:
        return Answer(
            None, tail if proc.returncode >= 0 else f"killed by signal {-proc.returncode}"
        )
    try:
        doc = json.loads(lines[-1])
    except json.JSONDecodeError:
        return Answer(None, f"no answer on its last line: {lines[-1][:200]}")
    return Answer(doc if isinstance(doc, dict) else None, tail)


def _limit_hit(code: int, stderr: str) -> str | None:
    import signal

    if code == -signal.SIGXCPU:
        return "CPU time"
    if code == -signal.SIGXFSZ:
        return "file size"
    if "MemoryError" in stderr or "Cannot allocate memory" in stderr:
        return "memory"
    return None
