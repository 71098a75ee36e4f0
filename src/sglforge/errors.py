"""The project's errors: one class per failure kind, each with its own exit code.

A message is one or two lines: what failed, where, and the command that helps next.
"""

from __future__ import annotations

# Exit codes; README.md documents them.
EXIT_OK = 0
EXIT_PROBLEMS = 1  # the command ran and found problems (lint findings, conflicts, failed checks)
EXIT_USAGE = 2  # usage or configuration error
EXIT_UPSTREAM = 3  # upstream unreachable, unknown ref, moved pin
EXIT_PATCH = 4  # a patch could not be applied or written
EXIT_ENGINE = 5  # no Docker engine reachable
EXIT_BUILD = 6  # image build failed
EXIT_SMOKE = 7  # smoke run could not run (preflight, container start)
EXIT_PUBLISH = 8  # push or registry failure
EXIT_NO_IMAGE = 9  # the image named (to inspect, or to build on) does not exist
EXIT_BASELINE = 10  # the bench baseline (the last release) was found but cannot be benched
EXIT_DISK = 74  # local disk: full, read-only or not writable (sysexits' EX_IOERR)
EXIT_BUSY = 75  # another sglforge command holds the project (sysexits' EX_TEMPFAIL)
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT)
EXIT_TERMINATED = 143  # SIGTERM (128 + 15), handled like Ctrl-C
EXIT_UNEXPECTED = 70


class SglforgeError(Exception):
    """Base error: ``str(err)`` is the whole user-facing message."""

    exit_code = EXIT_UNEXPECTED

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  next: {self.hint}"


def split_hint(text: str) -> tuple[str, str | None]:
    """``(message, hint)`` of an error's text as :meth:`SglforgeError.__str__` writes it: the
    last ``next:`` line is the hint (an earlier one belongs to a cause quoted in the message);
    None when there is none. Results that carry an error as text (a failed gate, a push) give
    their JSON ``hint`` this way."""
    message, sep, hint = text.rpartition(NEXT)
    return (message, hint) if sep else (text, None)


NEXT = "\n  next: "


class ConfigError(SglforgeError):
    """Bad input. When it sits at a line of a file (``at``), ``file``, ``line`` and ``reason``
    say where and what, for callers that list findings (``patches lint``)."""

    exit_code = EXIT_USAGE
    file: str | None = None
    line: int | None = None
    reason: str = ""

    @classmethod
    def at(cls, file: str, line: int, reason: str, hint: str | None = None) -> ConfigError:
        """``FILE:LINE: REASON``, with the three kept apart."""
        err = cls(f"{file}:{line}: {reason}", hint)
        err.file, err.line, err.reason = file, line, reason
        return err


class UpstreamError(SglforgeError):
    exit_code = EXIT_UPSTREAM


class WorktreeMissing(ConfigError):
    """A command needs the worktree of a ref that no ``patches apply`` (or ``push``) made:
    a usage error (exit 2; nothing was applied), whose hint is the command that makes it."""

    def __init__(self, ref: str, path: object, hint: str) -> None:
        super().__init__(f"no sglforge worktree for {ref} at {path}", hint)


class PatchError(SglforgeError):
    exit_code = EXIT_PATCH


class EngineUnavailable(SglforgeError):
    exit_code = EXIT_ENGINE


class BuildError(SglforgeError):
    exit_code = EXIT_BUILD


class SmokeError(SglforgeError):
    exit_code = EXIT_SMOKE


class BenchError(SglforgeError):
    """A serving benchmark could not run (server never ready, bench_serving failed)."""

    exit_code = EXIT_SMOKE


class PublishError(SglforgeError):
    exit_code = EXIT_PUBLISH


class NoBaseline(SglforgeError):
    """A publish whose bench compares with the last release of its target, and the registry
    holds none (found before the build: the first release needs ``--no-baseline REASON``)."""

    exit_code = EXIT_PROBLEMS


class BaselineUnusable(SglforgeError):
    """The last release was found but cannot be benched (its bench client does not start:
    a module it imports is missing from the image), so nothing can be compared with it."""

    exit_code = EXIT_BASELINE


class BusyError(SglforgeError):
    """Another sglforge command holds the project's lock; running again later helps."""

    exit_code = EXIT_BUSY


class LocalDiskError(SglforgeError):
    """The local disk refused a write: full (ENOSPC, EDQUOT), read-only, or not a folder."""

    exit_code = EXIT_DISK


# What the OS and git say when the disk, not the input, is the problem.
_DISK_ERRNOS = {"ENOSPC", "EDQUOT", "EROFS"}
_DISK_TEXT = (
    "no space left on device",
    "out of diskspace",  # git's own word for ENOSPC in some writers
    "disk quota exceeded",
    "read-only file system",
)
DISK_HINT = (
    "free space (or make the folder writable), or move the caches: SGLFORGE_CACHE=/bigger/disk"
)


def disk_error(exc: BaseException | str, where: str = "") -> LocalDiskError | None:
    """A LocalDiskError when ``exc`` (an OSError, or a tool's message) is the local disk's
    refusal: full, over quota or read-only; None for anything else."""
    import errno
    import os

    if isinstance(exc, OSError) and exc.errno is not None:
        if errno.errorcode.get(exc.errno) not in _DISK_ERRNOS:
            return None
        what = os.strerror(exc.errno)
        path = where or exc.filename or ""
    else:
        text = str(exc).lower()
        found = next((t for t in _DISK_TEXT if t in text), None)
        if found is None:
            return None
        what, path = found[0].upper() + found[1:], where
    return LocalDiskError(f"{path + ': ' if path else ''}{what}", DISK_HINT)


class Terminated(KeyboardInterrupt):
    """SIGTERM (or SIGHUP) arrived: unwinds like Ctrl-C, so every cleanup runs."""


class ScanBlocked(SglforgeError):
    """``sglforge scan`` found a fail no queue patch waives (upgrade and publish stop)."""

    exit_code = EXIT_PROBLEMS


class ImageNotFound(SglforgeError):
    """An image that must exist does not: the one ``inspect`` was given, or a build's base."""

    exit_code = EXIT_NO_IMAGE


class BaseImageMissing(ImageNotFound, BuildError):
    """The base image a build starts from exists nowhere (a build error with its own code)."""


class BaseImageUnreachable(ImageNotFound, BuildError):
    """The base image is not on the engine and its registry did not answer: no image to build
    on (exit 9, like a missing one), though nobody can tell whether it exists."""


class NothingToDo(SglforgeError):
    """The command ran and found nothing to act on (``patches new`` with no changes): exit 1,
    a finding rather than a failure to apply or write."""

    exit_code = EXIT_PROBLEMS
