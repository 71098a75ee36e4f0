"""Every config item of the queue is upstream's file, byte for byte, at the commit it names.

Two checks, both through ``sglforge.queue.configs.upstream_findings`` (what ``patches lint``
runs):

- always (CI, no aiter clone): the item's CSV bytes against the ``upstream-sha256`` its TOML
  records, and the recorded blob id against git's id of those bytes;
- the commit's own file: read with ``git cat-file`` from a ROCm/aiter clone when one is present
  (``$SGLFORGE_AITER_REPO``, or the search tool's mirror), else the copy shipped under
  tests/data/aiter, whose git blob id is checked (``tests/aiter_data.py``). The lint's
  ``--aiter-repo`` path runs on the clone, or on a git repository built from the shipped copy.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import aiter_data
from sglforge import git
from sglforge.queue.configs import load_items, upstream_findings
from synthetic import git as git_run

REPO = Path(__file__).resolve().parents[2]


def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(REPO / "patches" / "configs", root / "patches" / "configs")
    return root


def test_every_queue_item_names_an_upstream_file_and_matches_its_sha256() -> None:
    items = load_items(REPO)
    assert items, "the queue carries config items"
    for item in items:
        assert item.upstream is not None, f"{item.meta_file}: no upstream-* keys"
        data = (REPO / item.csv_file).read_bytes()
        assert git.blob_id(data) == item.upstream.blob, item.csv_file
    assert upstream_findings(items, REPO) == []


def test_a_changed_byte_or_a_missing_origin_is_found(tmp_path: Path) -> None:
    root = project(tmp_path)
    csv_path = root / "patches" / "configs" / "glm52-mxfp4-moe-gfx950.csv"
    data = csv_path.read_bytes()
    # Relabel one row's expert count (what the old item did): no longer upstream's bytes.
    csv_path.write_bytes(data.replace(b",6144,512,256,8,", b",6144,512,255,8,", 1))
    (found,) = upstream_findings(load_items(root), root)
    assert found[:3] == ("patches/configs/glm52-mxfp4-moe-gfx950.csv", 1, "config-not-upstream")
    # An item with no upstream-* keys cannot be verified: the finding says so.
    meta = root / "patches" / "configs" / "glm52-mxfp4-moe-gfx950.toml"
    text = "\n".join(
        line for line in meta.read_text().splitlines() if not line.startswith("upstream-")
    )
    meta.write_text(text.replace('upstream-status = "', "") + "\n")
    meta.write_text(meta.read_text().replace("[config]", '[config]\nupstream-status = "Pending"'))
    (found,) = upstream_findings(load_items(root), root)
    assert found[2] == "config-unverified"


def _replica(tmp_path: Path, root: Path) -> Path:
    """A git repository holding the shipped upstream files; ``root``'s items name its commit."""
    repo = tmp_path / "aiter-replica"
    repo.mkdir()
    git_run(repo, "init", "-q")
    items = load_items(root)
    for item in items:
        assert item.upstream is not None
        dest = repo / item.upstream.path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(aiter_data.blob(item.upstream.commit, item.upstream.path))
    git_run(repo, "add", "-A")
    git_run(repo, "commit", "-q", "-m", "the shipped aiter files")
    head = git_run(repo, "rev-parse", "HEAD").strip()
    for item in items:
        assert item.upstream is not None
        meta = root / item.meta_file
        meta.write_text(meta.read_text().replace(item.upstream.commit, head))
    return repo


def test_rows_equal_the_upstream_commit_s_file(tmp_path: Path) -> None:
    # The commit's own bytes: from a clone when present, else the shipped copy (blob id checked).
    items = load_items(REPO)
    for item in items:
        assert item.upstream is not None
        upstream = aiter_data.blob(item.upstream.commit, item.upstream.path)
        assert upstream == (REPO / item.csv_file).read_bytes(), item.csv_file
    # What `patches lint --aiter-repo DIR` does with a repository holding the commit.
    clone = aiter_data.clone()
    root = project(tmp_path)
    repo = clone if clone is not None else _replica(tmp_path, root)
    assert upstream_findings(load_items(root), root, repo) == []
    # The same check on a relabelled copy names the commit to copy from again.
    csv_path = root / "patches" / "configs" / "glm52-mxfp4-moe-gfx950.csv"
    csv_path.write_bytes(csv_path.read_bytes().replace(b"\n", b"\r\n"))
    codes = [f[2] for f in upstream_findings(load_items(root), root, repo)]
    assert codes == ["config-not-upstream", "config-not-upstream"]
    if clone is not None:
        # 01ff06ed, the commit the old item claimed, is not in aiter's history.
        gone = subprocess.run(
            ["git", "-C", str(clone), "cat-file", "-e", "01ff06ed7fc800ca4fc3f920adfb73d4ba110469"],
            capture_output=True,
        )
        assert gone.returncode != 0
