"""Issue 19: a full or read-only local disk is a local-disk error (exit 74) with a hint to free
space or move SGLFORGE_CACHE, whatever wrote: our own atomic writes, git, or a folder made on
demand; never exit 3 ("upstream") or 4 ("a patch could not be applied")."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglforge.errors import EXIT_DISK, LocalDiskError, disk_error
from synthetic import NO_CONFLICT, make_project, make_upstream


@pytest.mark.parametrize(
    "exc",
    [
        OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/x/y"),
        OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), "/x/y"),
        OSError(errno.EROFS, os.strerror(errno.EROFS), "/x/y"),
        "fatal: unable to write new index file: No space left on device",
        "error: git-fast-import: Out of diskspace",
        "fatal: could not create work tree dir 'x': Read-only file system",
    ],
)
def test_the_disk_refusing_is_recognised(exc: OSError | str) -> None:
    found = disk_error(exc)
    assert isinstance(found, LocalDiskError) and found.exit_code == EXIT_DISK
    assert "SGLFORGE_CACHE" in str(found)


@pytest.mark.parametrize(
    "exc",
    [
        OSError(errno.ENOENT, "No such file or directory", "/x"),
        OSError(errno.EACCES, "Permission denied", "/x"),
        "error: patch failed: python/pkg/a.py:5",
        "fatal: not a git repository",
    ],
)
def test_other_failures_are_not_disk_errors(exc: OSError | str) -> None:
    assert disk_error(exc) is None


def _namespaces() -> bool:
    try:
        return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0
    except OSError:
        return False


@pytest.mark.skipif(not _namespaces(), reason="needs `unshare -m` (root) for a tiny tmpfs")
@pytest.mark.parametrize(
    "command",
    [("patches", "apply"), ("patches", "apply", "--ref", "v1.1"), ("build", "--dry-run")],
)
def test_a_full_build_folder_is_a_disk_error(tmp_path: Path, command: tuple[str, ...]) -> None:
    """build/ on a 64 kB tmpfs, in a private mount namespace (gone with the process)."""
    project = make_project(tmp_path, make_upstream(tmp_path), NO_CONFLICT)
    build = project / "build"
    build.mkdir(exist_ok=True)
    # Fill it so the first write fails however small.
    extra = " --offline" if command[0] == "build" else ""
    script = (
        f"mount -t tmpfs -o size=64k tmpfs {build} && "
        f"(dd if=/dev/zero of={build}/fill bs=4k 2>/dev/null || true) && "
        f"{sys.executable} -m sglforge --root {project} {' '.join(command)}{extra}"
    )
    res = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, cwd=tmp_path
    )
    assert res.returncode == EXIT_DISK, (res.returncode, res.stdout, res.stderr)
    assert "SGLFORGE_CACHE" in res.stderr and "Traceback" not in res.stderr
    assert "No space left on device" in res.stderr or "Out of diskspace" in res.stderr
