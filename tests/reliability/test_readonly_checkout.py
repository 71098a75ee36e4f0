"""Issue 19: a checkout whose ``build/`` cannot be written. Reading commands (list, lint, hash,
check) work without it: a read-only mount, a dangling ``build`` symlink, a ``build`` that is a
file. Writing commands stop with one line naming what is in the way (exit 74), never a
traceback; the crash handler itself never raises.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from reliability_helpers import cli, tree_digest

from sglforge.cli.common import State, _crash_log
from sglforge.errors import EXIT_DISK
from synthetic import NO_CONFLICT, make_project, make_upstream

READING = [
    ("patches", "list"),
    ("patches", "lint"),
    ("patches", "hash"),
    ("patches", "check", "--ref", "v1.0", "--ref", "v1.1"),
    ("patches", "list", "--json"),
]
WRITING = [("patches", "apply"), ("build", "--dry-run", "--offline")]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path, make_upstream(tmp_path), NO_CONFLICT)


def spoil(project: Path, how: str) -> None:
    shutil.rmtree(project / "build", ignore_errors=True)
    if how == "dangling-symlink":
        (project / "build").symlink_to(project.parent / "no-such-folder")
    elif how == "file":
        (project / "build").write_text("not a folder\n")


@pytest.mark.parametrize("how", ["dangling-symlink", "file"])
def test_reading_commands_work_and_writers_say_what_is_in_the_way(project: Path, how: str) -> None:
    spoil(project, how)
    before = tree_digest(project)
    for args in READING:
        code, out, err = cli(project, *args)
        assert code == 0, (args, out, err)
        assert "Traceback" not in err
    for args in WRITING:
        code, out, err = cli(project, *args)
        assert code == EXIT_DISK, (args, out, err)
        assert "build" in err and "next:" in err and "Traceback" not in err
    assert tree_digest(project) == before
    assert (project / "build").is_symlink() == (how == "dangling-symlink")


def _unshare_works() -> bool:
    try:
        return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0
    except OSError:
        return False


@pytest.mark.skipif(not _unshare_works(), reason="needs `unshare -m` (root) for a ro mount")
def test_a_read_only_mount_of_the_whole_project(project: Path, tmp_path: Path) -> None:
    """The project bind-mounted read-only in a private mount namespace (nothing leaks out)."""
    shutil.rmtree(project / "build", ignore_errors=True)
    before = tree_digest(project)

    def key(args: tuple[str, ...]) -> str:
        return "+".join(args)

    script = [
        f"mount --bind {project} {project} && mount -o remount,ro,bind {project}",
        *(
            f"{sys.executable} -m sglforge --root {project} {' '.join(a)} >/dev/null 2>err.txt;"
            f' echo "rc:{key(a)}:$?"; echo "tracebacks:$(grep -c Traceback err.txt)"'
            for a in [*READING, *WRITING]
        ),
    ]
    res = subprocess.run(
        ["unshare", "-m", "sh", "-c", "\n".join(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "SGLFORGE_LOCK_WAIT": "1"},
    )
    lines = res.stdout.splitlines()
    codes = {x.split(":")[1]: x.split(":")[2] for x in lines if x.startswith("rc:")}
    assert len(codes) == len(READING) + len(WRITING), (res.stdout, res.stderr)
    for args in READING:
        assert codes[key(args)] == "0", (res.stdout, res.stderr)
    for args in WRITING:
        assert codes[key(args)] == str(EXIT_DISK), (res.stdout, res.stderr)
    assert {x for x in lines if x.startswith("tracebacks:")} == {"tracebacks:0"}, res.stdout
    assert tree_digest(project) == before and not (project / "build").exists()


@pytest.mark.parametrize("tmp_writable", [True, False])
def test_the_crash_log_writer_never_raises(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tmp_writable: bool
) -> None:
    spoil(project, "dangling-symlink")
    blocked = tmp_path / "tmp-is-a-file"
    blocked.write_text("")
    if not tmp_writable:
        import tempfile

        # The system temp folder is a file here: nothing can be made under it either.
        monkeypatch.setattr(tempfile, "gettempdir", lambda: str(blocked))
    ctx = click.Context(click.Command("x"), obj=State(root_option=str(project)))
    try:
        raise RuntimeError("boom")
    except RuntimeError as exc:
        log = _crash_log(ctx, exc)
    if tmp_writable:
        assert log is not None and "RuntimeError: boom" in log.read_text()
        log.unlink()
    else:
        assert log is None
