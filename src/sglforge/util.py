"""Small helpers shared by every module: atomic writes, hashing, the project root, path
confinement for data-derived paths, exact (byte-preserving) text, the project locks, and the
one way to run a read-only probe (``run_probe``)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from sglforge.errors import BusyError, ConfigError, LocalDiskError, disk_error

ROOT_ENV = "SGLFORGE_ROOT"

Progress = Callable[[str], None]  # receives one line of progress for people

# ROCm's tools live here when the installer put nothing on PATH.
ROCM_BIN = "/opt/rocm/bin"
NOT_FOUND, CANNOT_RUN = 127, 126  # run_probe's codes, as a shell says them


def find_program(name: str) -> str | None:
    """``name`` on PATH, else in ROCm's bin folder; None when neither has it."""
    found = shutil.which(name)
    if found:
        return found
    candidate = os.path.join(ROCM_BIN, name)
    return candidate if os.access(candidate, os.X_OK) and os.path.isfile(candidate) else None


def folder_size(path: Path) -> int:
    """Bytes in the files under ``path`` (symlinks counted as links, never followed)."""
    total = 0
    for dirpath, _dirs, files in os.walk(path, followlinks=False):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def run_probe(
    cmd: Sequence[str], timeout: float, env: Mapping[str, str] | None = None
) -> tuple[int, str]:
    """(exit code, output) of a read-only probe: its stdout when it exits 0, else its own
    words (stderr, else stdout). ``NOT_FOUND`` with no output when the program is missing,
    ``CANNOT_RUN`` with the reason when it cannot start or runs past ``timeout`` seconds."""
    exe = find_program(cmd[0])
    if exe is None:
        return NOT_FOUND, ""
    try:
        res = subprocess.run(
            [exe, *cmd[1:]],
            capture_output=True,
            text=True,
            errors="replace",
            env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return CANNOT_RUN, str(exc)
    if res.returncode == 0:
        return 0, res.stdout or ""
    return res.returncode, (res.stderr or "").strip() or (res.stdout or "")


def file_mode(path: Path) -> int:
    """The mode a rewritten ``path`` should keep: its own, or the umask's default for new files."""
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def confined(
    base: Path, relative: str | os.PathLike[str], what: str, file: str, line: int | None = None
) -> Path:
    """``base / relative``, refused (ConfigError, exit 2) unless it stays inside ``base``.

    Every path sglforge derives from data (a journal entry, a series entry, a path inside a
    patch, a retired record, a worktree named after a ref) goes through here before anything
    is written, so a file can never steer a write or a delete outside its folder. ``what``
    names the kind of path and ``file`` where it came from, for the message.
    """
    text = os.fspath(relative)
    base_abs = Path(os.path.abspath(base))
    problem = ""
    if not text or "\0" in text:
        problem = "is empty" if not text else "contains a NUL byte"
    elif os.path.isabs(text):
        problem = "is an absolute path"
    else:
        target = Path(os.path.abspath(base_abs / text))
        if target == base_abs or not target.is_relative_to(base_abs):
            problem = f"leaves {base_abs}"
        else:
            # A symlink on the way may point elsewhere: what counts is where it lands.
            real = Path(os.path.realpath(target))
            if not real.is_relative_to(Path(os.path.realpath(base_abs))):
                problem = f"resolves outside {base_abs} (through a symbolic link)"
            else:
                return target
    reason = f"{what} {text!r} {problem}; refused before writing anything"
    hint = f"fix {file} (paths it names must stay inside {base_abs})"
    if line is not None:
        raise ConfigError.at(file, line, reason, hint)
    raise ConfigError(f"{file}: {reason}", hint)


def decode_exact(raw: bytes) -> str:
    """Text that encodes back to exactly ``raw`` (invalid UTF-8 kept as surrogates)."""
    return raw.decode("utf-8", errors="surrogateescape")


def encode_exact(text: str) -> bytes:
    """The bytes ``decode_exact`` read (the inverse: non-UTF-8 bytes come back unchanged)."""
    return text.encode("utf-8", errors="surrogateescape")


def read_exact(path: Path) -> str:
    """A file's text with every byte kept: no newline translation, no replacement characters."""
    return decode_exact(Path(path).read_bytes())


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename (never half-written)."""
    path = Path(path)
    make_dirs(path.parent)
    raw = encode_exact(data) if isinstance(data, str) else data
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise disk_error(exc, str(path)) or exc from None
    try:
        os.fchmod(fd, file_mode(path))  # mkstemp's 0600 would otherwise replace the file's mode
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        disk = disk_error(exc, str(path)) if isinstance(exc, OSError) else None
        if disk is not None:
            raise disk from None
        raise


def write_private(folder: Path, name: str, data: str | bytes, *, shared: bool = False) -> Path:
    """``data`` written 0600 to ``folder/name`` through a temporary file and a rename, with
    no symbolic link followed: the folder is opened ``O_NOFOLLOW`` and must be ours; with
    ``shared`` (a folder under a temp folder other users can write) it is created 0700 and
    refused unless it is a real folder that only we can read. OSError when refused."""
    import stat

    if shared:
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)
    else:
        folder.mkdir(parents=True, exist_ok=True)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    dfd = os.open(folder, flags)
    try:
        st = os.fstat(dfd)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            raise PermissionError(13, "not a folder of this user", str(folder))
        if shared and st.st_mode & 0o077:
            os.fchmod(dfd, 0o700)  # ours, but opened up: close it before writing
        tmp = f".{name}.{os.getpid()}{TMP_SUFFIX}"
        create = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        fd = os.open(tmp, create, 0o600, dir_fd=dfd)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(encode_exact(data) if isinstance(data, str) else data)
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            os.unlink(tmp, dir_fd=dfd)
            raise
    finally:
        os.close(dfd)
    return folder / name


def make_dirs(path: Path) -> Path:
    """``path`` and its parents, created on demand; LocalDiskError (exit 74) naming what is in
    the way when that cannot be done (a read-only disk, a dangling ``build`` symlink)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        disk = disk_error(exc, str(path))
        if disk is not None:
            raise disk from None
        blocker = next(
            (p for p in (path, *path.parents) if p.is_symlink() and not p.exists()), None
        )
        why = (
            f"{blocker} is a symlink to {os.readlink(blocker)}, which does not exist"
            if blocker
            else exc.strerror or str(exc)
        )
        raise LocalDiskError(
            f"cannot create {path}: {why}",
            "make it a writable folder (or remove the dangling symlink), then rerun",
        ) from None
    return path


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def plural(n: int, word: str, suffix: str = "s", many: str | None = None) -> str:
    """``1 patch``, ``2 patches``: a count with its noun agreed, for messages people read
    (``many`` for an irregular plural: entry, entries)."""
    return f"{n} {word}" if n == 1 else f"{n} {many or word + suffix}"


def find_root(explicit: str | os.PathLike[str] | None = None, start: Path | None = None) -> Path:
    """The folder holding ``patches/``: ``explicit`` (``--root``, which also reads
    ``$SGLFORGE_ROOT`` at the command line), else walk up."""
    given = explicit
    if given:
        root = Path(given).resolve()
        if not (root / "patches").is_dir():
            raise ConfigError(
                f"{root}: no patches/ folder here (from --root or ${ROOT_ENV})",
                "pass --root pointing at a sglforge checkout",
            )
        return root
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "patches" / "series").is_file() or (
            candidate / "patches" / "upstream.toml"
        ).is_file():
            return candidate
    raise ConfigError(
        f"{here}: no patches/series or patches/upstream.toml here or in any parent folder",
        "cd into a sglforge checkout or pass --root DIR",
    )


def work_dir(root: Path, *parts: str) -> Path:
    """A folder under ``build/`` (the tool's work area), created on demand."""
    return make_dirs(root.joinpath("build", *parts))


def scratch_dir(root: Path, *parts: str) -> Path:
    """``build/<parts>`` for temporary files of a reading command, else (a read-only checkout,
    a dangling ``build`` symlink) a folder of this user's under the system temp folder: a
    command that only reads the project must not need a writable ``build/``."""
    try:
        return work_dir(root, *parts)
    except LocalDiskError:
        digest = hashlib.sha256(str(Path(root).resolve()).encode()).hexdigest()[:12]
        return make_dirs(Path(tempfile.gettempdir(), f"sglforge-{os.getuid()}", digest, *parts))


# --- locks (the journalled multi-file changes they guard: sglforge.transactions) ----------

LOCKS = ("build", "locks")
TMP_SUFFIX = ".sglforge-tmp"  # a temporary file of ours (write_private, a transaction)


_HELD = threading.local()  # .counts: lock file -> how many times this thread holds it
_COMMAND = ["sglforge"]  # what a lock file says holds it: the CLI sets the subcommand


def set_command(name: str) -> None:
    """Name the running command (``sglforge patches apply``) in the locks it takes."""
    _COMMAND[0] = printable(" ".join(name.split()))[:200] or "sglforge"


def lock_file(root: Path, kind: str, key: Path) -> Path:
    """``build/locks/<kind>-<digest>.lock``: under the work area, never in committed files."""
    digest = hashlib.sha256(str(Path(key).resolve()).encode()).hexdigest()[:12]
    return Path(root).joinpath(*LOCKS, f"{kind}-{digest}.lock")


@contextlib.contextmanager
def flock(path: Path, what: str, wait: float | None) -> Iterator[None]:
    """An exclusive ``flock`` on ``path``, reentrant within this process.

    ``wait`` None blocks; otherwise waits that many seconds, then raises BusyError naming
    the holder (the pid and command it wrote into the lock file).
    """
    import fcntl

    key = str(path)
    held: dict[str, int] = _HELD.__dict__.setdefault("counts", {})
    if held.get(key):
        held[key] += 1
        try:
            yield
        finally:
            held[key] -= 1
        return
    make_dirs(path.parent)
    try:
        fh = open(path, "a+")  # noqa: SIM115 - closed below, after the lock is released
    except OSError as exc:
        raise disk_error(exc, str(path)) or LocalDiskError(
            f"cannot open the lock file {path}: {exc.strerror}", "make build/ writable"
        ) from None
    with fh:
        deadline = None if wait is None else time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | (0 if wait is None else fcntl.LOCK_NB))
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    fh.seek(0)
                    holder = printable(fh.read(300).strip()) or "another sglforge process"
                    raise BusyError(
                        f"{what} is busy: {holder} is working on it"
                        + (f" (waited {wait:g} s)" if wait else ""),
                        "wait for it to finish and run again (or set SGLFORGE_LOCK_WAIT=SECONDS "
                        "to wait longer)",
                    ) from None
                time.sleep(0.1)
        try:
            fh.seek(0)
            fh.truncate()
            fh.write(f"pid {os.getpid()} ({_COMMAND[0]})\n")
            fh.flush()
            held[key] = 1
            yield
        finally:
            held.pop(key, None)
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def env_seconds(name: str, default: float, minimum: float = 1.0) -> float:
    """Seconds from the environment variable ``name`` (``default`` when unset), at least
    ``minimum``; ConfigError (exit 2) naming the variable for text, nan or infinity: every
    wait has a finite deadline."""
    import math

    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ConfigError(
            f"${name}={raw!r} is not a finite number of seconds", f"set {name}=SECONDS, or unset it"
        )
    return max(minimum, value)


LOCK_WAIT_ENV = "SGLFORGE_LOCK_WAIT"


def lock_wait() -> float:
    """Seconds a command waits for another one holding the project (``$SGLFORGE_LOCK_WAIT``)."""
    try:
        return max(0.0, float(os.environ.get(LOCK_WAIT_ENV, "10")))
    except ValueError:
        return 10.0


@contextlib.contextmanager
def project_lock(root: Path) -> Iterator[None]:
    """One writer at a time per project: apply, refresh, export, new and upgrade hold it.

    A second command waits ``lock_wait()`` seconds, then stops with a BusyError naming the
    command holding it: never a raw ``index.lock`` error, never a refresh silently lost.
    """
    path = lock_file(root, "project", root)
    with flock(path, f"project {Path(root).resolve()}", lock_wait()):
        yield


# --- untrusted text, output paths, signals held (image/smoke/publish side of issue 10) -----

# Characters a terminal acts on: C0 and C1 controls, DEL, and the bidirectional overrides
# that reorder what is shown (CVE-2021-42574). Text from patches, server logs or registries
# goes through ``printable`` before it is shown, so it can never move the cursor, clear the
# screen, retitle the window or hide a line.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# ... and the Unicode line and paragraph separators, which end a line for str.splitlines,
# JavaScript and some Markdown renderers (a forged line in a summary or a trailer).
_BIDI |= frozenset("\u2028\u2029")


def printable(text: str, keep: str = "") -> str:
    """``text`` with control characters shown escaped (``\\x1b``, ``\\r``, ``\\u202e``).

    Everything else (``é``, CJK, emoji) is kept as is; ``keep`` names control characters to
    leave alone (``"\\n\\t"`` for multi-line text). Surrogates from undecodable bytes
    (``decode_exact``) come out as ``\\xNN``.
    """
    out: list[str] = []
    for ch in text:
        o = ord(ch)
        if ch in keep:
            out.append(ch)
        elif o < 0x20 or 0x7F <= o < 0xA0:
            out.append({"\r": "\\r", "\n": "\\n", "\t": "\\t"}.get(ch, f"\\x{o:02x}"))
        elif 0xDC80 <= o <= 0xDCFF:
            out.append(f"\\x{o - 0xDC00:02x}")
        elif ch in _BIDI or 0xD800 <= o <= 0xDFFF:
            out.append(f"\\u{o:04x}")
        else:
            out.append(ch)
    return "".join(out)


def non_ascii_note(name: str) -> str:
    """``" (it holds non-ASCII U+0456 at 2)"`` for a name with a look-alike character (a
    Cyrillic і in ``mі355x``), else ``""``: such a name cannot be told from the real one."""
    odd = [(n, ch) for n, ch in enumerate(name, 1) if not ch.isascii()]
    if not odd:
        return ""
    shown = ", ".join(f"U+{ord(ch):04X} at {n}" for n, ch in odd[:3])
    return f" (it holds non-ASCII {shown}{', ...' if len(odd) > 3 else ''})"


def one_line(text: object, limit: int = 400) -> str:
    """``text`` for a one-line field (a label, a reference, a name): ``printable`` with newlines
    escaped too, so it cannot forge a line (a ``next:`` hint, a ``RUN``), and cut at
    ``limit`` characters with how many were left out."""
    shown = printable(str(text))
    if len(shown) <= limit:
        return shown
    return f"{shown[:limit]}... ({len(shown) - limit} more characters)"


def check_output_file(path: str | os.PathLike[str], option: str) -> Path:
    """``path`` if a file can be written there; ConfigError (exit 2) naming ``option`` if not.

    Tried for real (as root every permission check says yes): the parent folders are created
    and the file opened for appending; a file that did not exist before is removed again.
    Called before long work, so a bad path fails in a second, not after an hour.
    """
    target = Path(path)
    existed = target.exists()
    try:
        if target.is_dir():
            raise IsADirectoryError(21, "is a folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "ab"):
            pass
        if not existed:
            target.unlink()
    except OSError as exc:
        raise ConfigError(
            f"{option} {target}: cannot write there ({exc.strerror or exc})",
            f"pass a writable path to {option}",
        ) from None
    return target


def check_output_dir(path: str | os.PathLike[str], option: str) -> Path:
    """``path`` created if needed and proven writable (a file made and removed in it)."""
    target = Path(path)
    try:
        target.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=target, prefix=".sglforge-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(
            f"{option} {target}: cannot write there ({exc.strerror or exc})",
            f"pass a writable folder to {option}",
        ) from None
    return target


@contextlib.contextmanager
def signals_held() -> Iterator[list[int]]:
    """Hold SIGINT/SIGTERM/SIGHUP while a cleanup or a last record runs; yields what arrived.

    The caller re-raises afterwards (``raise_held``), so the command still ends as
    interrupted (130) or terminated (143), only never half-way through the cleanup.
    """
    import signal

    arrived: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield arrived
        return
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, lambda signum, _f: arrived.append(signum)) for s in sigs}
    try:
        yield arrived
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def raise_held(arrived: list[int]) -> None:
    """Re-raise the first signal ``signals_held`` held: KeyboardInterrupt or Terminated."""
    import signal

    from sglforge.errors import Terminated

    if not arrived:
        return
    if arrived[0] == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(f"received {signal.Signals(arrived[0]).name}")


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Make SIGTERM/SIGHUP raise :class:`Terminated` in the main thread while a server runs, so
    the ``finally`` that stops it runs (a container removed, a process group killed)."""
    import signal

    from sglforge.errors import Terminated

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: Any) -> None:
        raise Terminated(f"received {signal.Signals(signum).name}")

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def tail_lines(path: Path, n: int) -> list[str]:
    """The last ``n`` lines of a text file (empty when there is none), control characters
    shown escaped: a server log is untrusted text on its way to terminals and reports."""
    from collections import deque

    try:
        with open(path, encoding="utf-8", errors="replace", newline="\n") as fh:
            return [printable(line.rstrip("\n")) for line in deque(fh, maxlen=n)]
    except OSError:
        return []


# --- JSON from outside: bounded ---------------------------------------------------------------

# Model configs, image manifests, release records and reports are small (a Hugging Face
# config.json is kilobytes, a registry manifest at most 4 MiB); a larger one is refused before
# it is parsed, and nesting deeper than any of them has is refused instead of recursing.
JSON_CAP = 16 << 20
JSON_DEPTH = 64


class JsonRefused(ValueError):
    """JSON sglforge will not read: too large, nested too deep, or not JSON; ``str`` is one
    line saying which. A ValueError, so callers that refuse bad JSON refuse this too."""


def loads_bounded(data: bytes | str, *, cap: int = JSON_CAP, depth: int = JSON_DEPTH) -> object:
    """``json.loads(data)``, refused (JsonRefused) when ``data`` is larger than ``cap`` bytes,
    nested deeper than ``depth``, or not JSON (invalid UTF-8 included)."""
    import json

    if len(data) > cap:
        raise JsonRefused(f"larger than {_size(cap)} ({_size(len(data))})")
    try:
        value = json.loads(data)
    except RecursionError:
        raise JsonRefused(f"nested deeper than {depth} levels") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise JsonRefused(f"not JSON ({one_line(exc, 160)})") from None
    _check_depth(value, depth)
    return value


def read_json(
    path: str | os.PathLike[str], *, cap: int = JSON_CAP, depth: int = JSON_DEPTH
) -> object:
    """The JSON file ``path`` (at most ``cap`` bytes are read); OSError as ``open`` raises it,
    JsonRefused as :func:`loads_bounded`."""
    with open(path, "rb") as fh:
        data = fh.read(cap + 1)
    if len(data) > cap:
        raise JsonRefused(f"larger than {_size(cap)}")
    return loads_bounded(data, cap=cap, depth=depth)


def _check_depth(value: object, limit: int) -> None:
    todo: list[tuple[object, int]] = [(value, 1)]
    while todo:
        node, level = todo.pop()
        if isinstance(node, dict):
            children: list[object] = list(node.values())
        elif isinstance(node, list):
            children = node
        else:
            continue
        if level > limit:
            raise JsonRefused(f"nested deeper than {limit} levels")
        todo.extend((c, level + 1) for c in children if isinstance(c, (dict, list)))


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


# --- downloads: an overall deadline ---------------------------------------------------------


def abort_response(res: Any) -> None:
    """End a response another thread is reading: shut its socket down (a blocked read then
    returns at once), then close it."""
    import socket

    raw = getattr(res, "raw", None)
    for sock in (
        getattr(getattr(raw, "connection", None), "sock", None),
        getattr(
            getattr(getattr(getattr(raw, "_fp", None), "fp", None), "raw", None), "_sock", None
        ),
    ):
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()  # the real close waits for the reader's file object to let go
    with contextlib.suppress(Exception):
        res.close()


@contextlib.contextmanager
def deadline(seconds: float, on_expiry: Callable[[], None]) -> Iterator[threading.Event]:
    """Call ``on_expiry`` (closing the response) once ``seconds`` have passed."""
    fired = threading.Event()

    def expire() -> None:
        fired.set()
        with contextlib.suppress(Exception):
            on_expiry()

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        yield fired
    finally:
        timer.cancel()
