"""The real queue on the replica of sglang's 0.5.14 ROCm release image (a TEST DOUBLE built from
the released wheel with upstream's install, tests/standin/base.py).

What this proves on the replica: ``sglforge build`` (overlay) succeeds and its in-image
self-check passes; the files Python imports, from the image's WORKDIR and from ``/``, are byte
for byte what ``git am`` of the queue gives on the release tree; the command line that runs the
release image (``docker run IMAGE python3 -m sglang.launch_server ...``) reaches the server on
the base and on our image alike; a base holding another release is refused by its content, not
its name; and a base whose layout shadows the package fails the build's self-check (exit 6).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest
from click.testing import CliRunner

from pipelines import build_at as build_image
from real_project import copy_real_project
from sglang_release import release_history
from sglforge import selfcheck
from sglforge.build import BuildResult
from sglforge.cli import main
from sglforge.queue.series import read_series
from standin.base import PACKAGE_DIR, ensure_sglang_base
from standin.registry import free_port

pytestmark = [pytest.mark.docker, pytest.mark.pypi]

UPSTREAM = "pypi:sglang>=0.5.14,<=0.5.14"
REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "tests" / "standin" / "model"


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLFORGE_OFFLINE", "1")
    monkeypatch.delenv("SGLFORGE_UPSTREAM", raising=False)


@pytest.fixture(scope="module")
def replica(docker_client: docker.DockerClient) -> str:
    return ensure_sglang_base("0.5.14", client=docker_client)


@pytest.fixture
def built(
    tmp_path: Path, replica: str, docker_client: docker.DockerClient, docker_labels: dict[str, str]
) -> Iterator[BuildResult]:
    root = copy_real_project(tmp_path / "project")
    repo = f"sglforge-test/replica-{uuid.uuid4().hex[:8]}"
    text = (root / "images" / "targets.toml").read_text()
    (root / "images" / "targets.toml").write_text(
        text.replace('repository = "sglforge/sglang"', f'repository = "{repo}"')
    )
    result = build_image(root, base_image=replica, upstream=UPSTREAM, labels=docker_labels)
    yield result
    for ref in (result.image, *result.tags):
        try:
            docker_client.images.remove(ref, force=True)
        except docker.errors.NotFound:
            pass


def git_am_tree(dest: Path) -> Path:
    """Release 0.5.14's tree with the real queue applied by plain ``git am``."""
    repo = release_history("==0.5.14")
    subprocess.run(["git", "clone", "-q", "--branch", "v0.5.14", str(repo), str(dest)], check=True)
    patches = [str(REPO / "patches" / e.name) for e in read_series(REPO)]
    subprocess.run(["git", "am", "-q", *patches], cwd=dest, check=True)
    return dest


def test_real_queue_builds_and_imports_the_git_am_result(
    built: BuildResult, tmp_path: Path, docker_labels: dict[str, str]
) -> None:
    assert built.mode == "overlay" and not built.up_to_date
    plan = built.plan
    assert plan.workspace == "/sgl-workspace/sglang" and plan.workspace_source == "inspected"
    assert plan.base.sglang_version == "0.5.14"
    assert plan.base.package_path == "/sgl-workspace/sglang/python/sglang"
    reference = git_am_tree(tmp_path / "am")
    # The queue's patches change sglang's tree; its aiter config items (issue 13) land in the
    # image's aiter, checked by tests/docker/test_aiter_configs.py.
    sglang_files = [f for f in plan.files if f.path.startswith("python/")]
    changed = {f.path for f in sglang_files}
    assert "python/sglang/srt/models/deepseek_nextn.py" in changed
    assert any("jit_kernel" in p for p in changed)
    for f in sglang_files:
        assert f.dest == f"/sgl-workspace/sglang/{f.path}"
        assert f.sha256 == hashlib.sha256((reference / f.path).read_bytes()).hexdigest(), f.path
    # Asked again from the WORKDIR and from /: every changed file resolves to git am's bytes,
    # and the untouched server_args still resolves to the released file.
    expected = selfcheck.expectations(
        [(f.path, f.dest, f.sha256) for f in sglang_files], [], reference
    )
    assert any(e.module == selfcheck.SIBLING for e in expected)
    assert selfcheck.run(built.image, expected, labels=docker_labels) == []


def _serve(client: docker.DockerClient, image: str, labels: dict[str, str]) -> dict:
    """``docker run IMAGE python3 -m sglang.launch_server ...`` (host network): /server_info."""
    port = free_port()
    container = client.containers.run(
        image,
        [
            "python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "/models/standin",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        volumes={str(MODEL): {"bind": "/models/standin", "mode": "ro"}},
        network_mode="host",
        environment={"STANDIN_LOAD_SECONDS": "0", "STANDIN_WARMUP_SECONDS": "0"},
        labels=labels,
        detach=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            container.reload()
            assert container.status == "running", container.logs().decode()[-2000:]
            assert time.monotonic() < deadline, container.logs().decode()[-2000:]
            time.sleep(0.2)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5) as r:
            return json.loads(r.read())
    finally:
        container.remove(force=True)


def test_the_release_run_line_reaches_the_server_on_base_and_ours(
    built: BuildResult, replica: str, docker_client, docker_labels
) -> None:
    for image in (replica, built.image):
        info = _serve(docker_client, image, docker_labels)
        assert info.get("version") == "0.5.14", info


def test_a_base_holding_another_release_is_refused_by_content(
    tmp_path: Path, docker_client, docker_labels
) -> None:
    # No version anywhere in the name: only what the image holds can tell. The suite's 0.5.13
    # replica under that name (a tag, not a second build of the same content).
    tag = f"sglforge-standin/sglang-candidate:mi35x-{uuid.uuid4().hex[:6]}"
    docker_client.images.get(ensure_sglang_base("0.5.13", client=docker_client)).tag(tag)
    try:
        root = copy_real_project(tmp_path / "project")
        res = CliRunner().invoke(
            main,
            ["--root", str(root), "build", "--base-image", tag, "--upstream", UPSTREAM],
        )
        assert res.exit_code == 6, res.output
        assert "0.5.13" in res.output and "0.5.14" in res.output and tag in res.output
    finally:
        docker_client.images.remove(tag, force=True)


def test_a_base_that_shadows_the_package_fails_the_self_check(
    tmp_path: Path, replica: str, docker_client, docker_labels
) -> None:
    # A folder the release layout must not have: /sgl-workspace/sglang/srt shadows sglang.srt
    # for anything run from the WORKDIR (the way the old overlay broke the image).
    tag = f"sglforge-test/shadowed:{uuid.uuid4().hex[:8]}"
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(
        f"FROM {replica}\nRUN mkdir -p /sgl-workspace/sglang/srt/models\n"
    )
    docker_client.images.build(
        path=str(ctx), tag=tag, labels=docker_labels, network_mode="none", rm=True
    )
    root = copy_real_project(tmp_path / "project")
    try:
        res = CliRunner().invoke(
            main,
            ["--root", str(root), "build", "--base-image", tag, "--upstream", UPSTREAM],
        )
        assert res.exit_code == 6, res.output
        assert "self-check from /sgl-workspace" in res.output
        assert "does not resolve at all" in res.output and "module sglang.srt." in res.output
        # The failed image is not left behind under its tag.
        assert (
            not [  # the engine's list as it is: other workers remove images meanwhile
                t
                for img in docker_client.api.images(name="sglforge/sglang")
                for t in img.get("RepoTags") or ()
                if "mi355x-q" in t and (img.get("Labels") or {}).get("io.sglforge.base.name") == tag
            ]
        )
    finally:
        docker_client.images.remove(tag, force=True)
        shutil.rmtree(root / "build" / "worktrees", ignore_errors=True)


def test_the_trimmed_package_root_does_not_matter(
    tmp_path: Path, replica: str, docker_client, docker_labels
) -> None:
    """The replica's one liberty in sglang's own code is a trimmed ``sglang/__init__.py`` (the
    released one imports torch). Here the root imports torch as the real one does, and fails
    without it: the probe and the self-check never run it, so the build still succeeds.

    The root is put back over the replica, not built into a second one: the install is
    editable, so Python imports the tree's file whichever way it got there."""
    tag = f"sglforge-test/sglang-torch-init:{uuid.uuid4().hex[:6]}"
    init = b'"""sglang, as released: its imports need torch."""\n\nimport torch  # noqa: F401\n'
    context = tmp_path / "context"
    context.mkdir()
    (context / "__init__.py").write_bytes(init)
    (context / "Dockerfile").write_text(
        f"FROM {replica}\nCOPY __init__.py {PACKAGE_DIR}/__init__.py\n"
    )
    docker_client.images.build(
        path=str(context), tag=tag, labels=docker_labels, network_mode="none", rm=True
    )
    built: str | None = None
    try:
        with pytest.raises(docker.errors.ContainerError, match="torch"):
            docker_client.containers.run(
                tag,
                ["python3", "-c", "import sglang"],
                working_dir="/",
                network_mode="none",
                labels=docker_labels,
                remove=True,
            )
        root = copy_real_project(tmp_path / "project")
        args = ["--root", str(root), "build", "--base-image", tag, "--upstream", UPSTREAM]
        for k, v in docker_labels.items():
            args += ["--label", f"{k}={v}"]
        res = CliRunner().invoke(main, [*args, "--json"])
        assert res.exit_code == 0, res.output
        built = json.loads(res.stdout)["image"]
    finally:
        if built:
            docker_client.images.remove(built, force=True)
        docker_client.images.remove(tag, force=True)
