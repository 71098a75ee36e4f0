"""Issue 10: each failure has its own exit code. ``inspect`` of an image that does not exist
and a build whose base image does not exist exit 9 (no such image), not 8 ("publish") or 6
("build failed"); a malformed reference is a usage error (2)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from reliability_helpers import cli

from helpers_build import make_build_project

pytestmark = pytest.mark.docker


@pytest.mark.parametrize(
    "image",
    [
        "sglforge-test/nothing-here:v0",
        "127.0.0.1:5000/sglforge/sglang:never-built",
        "sha256:" + "0" * 64,
    ],
)
def test_inspect_of_a_missing_image_exits_9(tmp_path: Path, image: str) -> None:
    code, out, err = cli(tmp_path, "inspect", image)
    assert code == 9, (out, err)
    assert "no such image" in err


@pytest.mark.parametrize("image", ["Upper/Case:tag", "bad::ref"])
def test_inspect_of_a_malformed_reference_exits_2(tmp_path: Path, image: str) -> None:
    code, out, err = cli(tmp_path, "inspect", image)
    assert code == 2, (out, err)


@pytest.mark.parametrize(
    "base",
    [
        f"sglforge-test/no-such-base-{uuid.uuid4().hex[:6]}:v0.5.14-rocm700-mi35x",
        "sglforge-test/no-such-base:v0.5.14-rocm700-mi35x-{date}",
    ],
)
def test_build_on_a_missing_base_exits_9(tmp_path: Path, base: str, docker_client) -> None:
    project = make_build_project(tmp_path, repository="sglforge-test/exit9")
    code, out, err = cli(
        project.root,
        "build",
        "--offline",
        "--base-image",
        base,
        "--upstream",
        str(project.upstream),
    )
    assert code == 9, (out, err)
    assert "base image" in err or "no tag of" in err
    assert not (project.root / "build" / "worktrees").exists()  # refused before any work
