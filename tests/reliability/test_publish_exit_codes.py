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
    ids=["random-repository", "dated-template"],  # xdist workers must collect the same ids
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


@pytest.mark.parametrize("bad", ["closed-port", "not-http"])
def test_publish_to_an_unreachable_registry_stops_before_the_build(
    tmp_path: Path, bad: str
) -> None:
    """The registry is asked first: a publish that could never push fails in seconds (exit 8),
    before the build and the smoke run, naming the registry. (Only 127.0.0.1 is used.)"""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    registry = f"127.0.0.1:{server.getsockname()[1]}"
    if bad == "closed-port":
        server.close()  # nothing listens there any more
    else:
        server.listen(8)

        def hang_up() -> None:  # accepts and closes at once: no HTTP answer
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                conn.close()

        threading.Thread(target=hang_up, daemon=True).start()
    try:
        project = make_build_project(tmp_path, repository="sglforge-test/unreachable")
        code, out, err = cli(
            project.root, "publish", "--registry", registry, "--upstream", str(project.upstream)
        )
    finally:
        server.close()
    assert code == 8, (out, err)
    assert registry in err and "did not answer" in err
    assert not (project.root / "build" / "worktrees").exists()  # nothing was built
