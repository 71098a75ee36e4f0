"""The aiter files shipped as test data are upstream's bytes: every read checks the blob id.

tests/data/aiter holds verbatim copies of ROCm/aiter files (tests/aiter_data.py says why); these
tests hold the rule that nothing there drifts: each file's git blob id is the one recorded with
its commit and path, nothing is shipped unrecorded, a changed byte is refused with the command
that copies the file again, and with a clone present each copy equals the commit's own blob.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import aiter_data


def test_every_shipped_file_is_recorded_and_has_its_blob_id() -> None:
    rows = aiter_data.manifest()
    assert len(rows) >= 40
    for row in rows.values():
        assert aiter_data.blob_id(row.file.read_bytes()) == row.blob, row.file
    on_disk = {p for p in aiter_data.DATA.rglob("*") if p.is_file()} - {aiter_data.MANIFEST}
    assert on_disk == {row.file for row in rows.values()}


def test_a_changed_byte_is_refused_whichever_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "aiter"
    shutil.copytree(aiter_data.DATA, data)
    monkeypatch.setattr(aiter_data, "DATA", data)
    monkeypatch.setattr(aiter_data, "MANIFEST", data / "blobs.toml")
    monkeypatch.setenv("SGLFORGE_AITER_REPO", str(tmp_path / "no-clone"))
    rows = list(aiter_data.manifest().values())
    for row in (rows[0], rows[len(rows) // 2], rows[-1]):
        original = row.file.read_bytes()
        assert aiter_data.blob(row.commit, row.path) == original
        row.file.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
        with pytest.raises(AssertionError, match=r"copy it again: python3 tests/aiter_data.py"):
            aiter_data.blob(row.commit, row.path)
        row.file.write_bytes(original)
    with pytest.raises(AssertionError, match="neither shipped"):
        aiter_data.blob(rows[0].commit, "aiter/not-shipped.py")


def test_with_a_clone_each_copy_is_the_commit_s_own_blob() -> None:
    clone = aiter_data.clone()
    if clone is None:
        pytest.skip("no ROCm/aiter clone here: the blob ids alone hold the copies (test above)")
    for row in aiter_data.manifest().values():
        assert aiter_data._clone_blob(clone, row.commit, row.path) == row.file.read_bytes()
    for (commit, folder), names in aiter_data.trees().items():
        assert aiter_data.names(commit, folder) == names
