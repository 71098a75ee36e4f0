"""Atomic writes keep file modes and never leave a half-written file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sglforge.transactions import commit_files, recover_transactions
from sglforge.util import atomic_write


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_write_keeps_the_mode_and_uses_the_umask_for_new_files(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        new = tmp_path / "new.txt"
        atomic_write(new, "x")
        assert mode(new) == 0o644
        script = tmp_path / "run.sh"
        script.write_text("#!/bin/sh\n")
        script.chmod(0o755)
        atomic_write(script, "#!/bin/sh\necho hi\n")
        assert mode(script) == 0o755 and "echo hi" in script.read_text()
        commit_files(tmp_path, {script: "#!/bin/sh\n", tmp_path / "b": "b"})
        assert mode(script) == 0o755 and mode(tmp_path / "b") == 0o644
    finally:
        os.umask(old)


def test_failed_write_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "series"
    path.write_text("old\n")

    with pytest.raises(TypeError):  # the write fails after the temp file was made
        atomic_write(path, 12345)  # type: ignore[arg-type]
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["series"]


def test_commit_files_deletes_and_recovery_drops_strays(tmp_path: Path) -> None:
    (tmp_path / "gone").write_text("x")
    commit_files(tmp_path, {tmp_path / "gone": None, tmp_path / "kept": "k"})
    assert not (tmp_path / "gone").exists() and (tmp_path / "kept").read_text() == "k"
    (tmp_path / ".kept.abc.sglforge-tmp").write_text("half")
    assert recover_transactions(tmp_path) is False
    assert not list(tmp_path.glob("*.sglforge-tmp"))


def test_counts_agree_with_their_nouns() -> None:
    from sglforge.util import plural

    assert plural(1, "patch", "es") == "1 patch" and plural(2, "patch", "es") == "2 patches"
    assert plural(0, "tag") == "0 tags" and plural(1, "warning") == "1 warning"


def test_messages_people_read_carry_no_ambiguous_plurals() -> None:
    """The class of "(1 patches)", "1 patch(es)", "READY TO MERGE: ready to merge": counts go
    through util.plural in every module that words one."""
    import re
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "src" / "sglforge"
    offenders = []
    for path in src.rglob("*.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\{len\([^)]*\)\} patch(es|\(es\))\b|patch\(es\)", line):
                if not line.lstrip().startswith(("#", '"""')):
                    offenders.append(f"{path.name}:{n}: {line.strip()}")
    assert offenders == []
    upgrade = (src / "upgrade.py").read_text()
    assert '"ready to merge: ' not in upgrade and 'f"ready to merge: ' not in upgrade
