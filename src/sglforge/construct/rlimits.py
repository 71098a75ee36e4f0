"""The launcher of every construction child: set resource limits, then exec the child.

Run as ``python -I -S rlimits.py MEMORY CPU FILE_SIZE PROCESSES -- ARGV...`` by
:mod:`sglforge.construct.sandbox` (not ``preexec_fn``: the scan starts the child from a worker
thread, where running Python between fork and exec is unsafe). The limits are set in this
process, which then becomes the child (``os.execv``), so they hold for the child and whatever
it starts:

- ``RLIMIT_AS`` and ``RLIMIT_DATA``: MEMORY bytes (a runaway construction gets MemoryError,
  not the machine's memory);
- ``RLIMIT_CPU``: CPU seconds (SIGXCPU past it);
- ``RLIMIT_FSIZE``: FILE_SIZE bytes per file written;
- ``RLIMIT_NPROC``: this user's processes and threads now, plus PROCESSES.

Self-contained on purpose: the standard library only (``-I -S``: no site-packages).
"""

# mypy: ignore-errors

from __future__ import annotations

import os
import resource
import shutil
import sys


def _tasks_of_this_user() -> int:
    """This user's processes and threads now (what RLIMIT_NPROC counts)."""
    uid, n = os.getuid(), 0
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not pid.isdigit():
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid:
                n += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:  # gone meanwhile
            continue
    return n


def _limit(kind: int, value: int) -> None:
    _soft, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(kind, (value, value))  # the hard limit too: the child cannot raise it


def main(argv: list[str]) -> None:
    memory, cpu, fsize, procs = (int(a) for a in argv[:4])
    if argv[4] != "--" or len(argv) < 6:
        raise SystemExit("usage: rlimits.py MEMORY CPU FILE_SIZE PROCESSES -- ARGV...")
    child = argv[5:]
    _limit(resource.RLIMIT_AS, memory)
    _limit(resource.RLIMIT_DATA, memory)
    _limit(resource.RLIMIT_CPU, cpu)
    _limit(resource.RLIMIT_FSIZE, fsize)
    tasks = _tasks_of_this_user()
    if tasks:
        _limit(resource.RLIMIT_NPROC, tasks + procs)
    program = child[0] if os.sep in child[0] else shutil.which(child[0]) or child[0]
    sys.stdout.flush()
    os.execv(program, child)


if __name__ == "__main__":
    main(sys.argv[1:])
