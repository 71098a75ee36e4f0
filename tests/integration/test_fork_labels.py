"""org.opencontainers.image.source/.revision come from the project's own checkout."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sglforge.build import fork_labels
from sglforge.provenance import OCI


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def test_remote_and_head_of_the_checkout(tmp_path: Path) -> None:
    assert fork_labels(tmp_path) == {}  # no checkout: nothing claimed
    git(tmp_path, "init", "-q")
    assert fork_labels(tmp_path) == {}  # no commit, no remote
    (tmp_path / "CHANGELOG.md").write_text("# Changelog\n")
    git(tmp_path, "add", "CHANGELOG.md")
    git(tmp_path, "commit", "-q", "-m", "start")
    head = git(tmp_path, "rev-parse", "HEAD")
    assert fork_labels(tmp_path) == {f"{OCI}.revision": head}
    git(tmp_path, "remote", "add", "origin", "https://ci:s3cret@github.com/acme/sglang-fork.git")
    sub = tmp_path / "sub"
    sub.mkdir()
    assert fork_labels(sub) == {
        f"{OCI}.source": "https://github.com/acme/sglang-fork",
        f"{OCI}.revision": head,
    }
    # [image] source wins over the remote
    assert fork_labels(tmp_path, "https://git.example.com/acme/fork")[f"{OCI}.source"] == (
        "https://git.example.com/acme/fork"
    )
