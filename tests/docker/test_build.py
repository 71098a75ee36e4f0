"""``sglforge build`` against a real engine, on stand-in bases (TEST DOUBLES of sglang images).

The project is a synthetic sglang-like upstream plus a queue of real patches
(tests/helpers_build.py). Every image built here carries the session's test labels and is
removed at teardown.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
from click.testing import CliRunner

from helpers_build import (
    AOT_CHANGE,
    CUH,
    DEFAULT_CHANGES,
    NEW_FILE,
    OBSOLETE,
    QUARK,
    STANDIN_OWNED,
    STANDIN_REPO,
    BuildProject,
    make_build_project,
    upstream_files,
)
from pipelines import build_at as build_image
from sglforge import selfcheck
from sglforge.build import BuildResult, fork_labels
from sglforge.cli import main
from sglforge.errors import BuildError
from standin.base import ensure_sglang_base

pytestmark = pytest.mark.docker

WS = "/sgl-workspace/sglang"
BASE_TAG = f"{STANDIN_REPO}:v0.5.14-rocm700-mi35x"
WRONG_TAG = f"{STANDIN_REPO}:v0.5.14-rocm700-mi35x-holds-0.5.13"


def base_files() -> dict[str, bytes]:
    return {k: v.encode() for k, v in upstream_files().items() if k not in STANDIN_OWNED}


@pytest.fixture(scope="session")
def build_base(docker_client: docker.DockerClient, standin_base: str) -> str:
    """Stand-in sglang 0.5.14 holding the synthetic upstream tree (TEST DOUBLE)."""
    return ensure_sglang_base("0.5.14", tag=BASE_TAG, files=base_files(), client=docker_client)


@pytest.fixture(scope="session")
def wrong_base(docker_client: docker.DockerClient, standin_base: str) -> str:
    """A base tagged like 0.5.14 that holds sglang 0.5.13 (TEST DOUBLE): the 0.5.13 replica
    the suite builds anyway (tests/docker/test_infra.py), under this tag, not a build of its own."""
    replica = ensure_sglang_base("0.5.13", client=docker_client)
    docker_client.images.get(replica).tag(WRONG_TAG)
    return WRONG_TAG


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    # Stand-in repositories would resolve to Docker Hub: never ask a registry off this host.
    monkeypatch.setenv("SGLFORGE_OFFLINE", "1")
    monkeypatch.delenv("SGLFORGE_UPSTREAM", raising=False)


@pytest.fixture
def images(docker_client: docker.DockerClient, docker_labels: dict[str, str]) -> Iterator[list]:
    """Image references a test built: each must carry the test labels; removed at teardown."""
    refs: list[str] = []
    yield refs
    for ref in refs:
        try:
            img = docker_client.images.get(ref)
        except docker.errors.ImageNotFound:
            continue
        for k, v in docker_labels.items():
            assert img.labels.get(k) == v, f"{ref} lacks label {k}={v}"
        try:
            docker_client.images.remove(ref, force=True)
        except docker.errors.NotFound:
            pass


@pytest.fixture
def project(tmp_path: Path, build_base: str) -> BuildProject:
    return make_build_project(tmp_path, repository=f"sglforge-test/sglang-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def do_build(docker_labels: dict[str, str], images: list[str]) -> Callable[..., BuildResult]:
    def run(project: BuildProject, **kw: Any) -> BuildResult:
        kw.setdefault("upstream", str(project.upstream))
        result = build_image(project.root, labels=docker_labels, **kw)
        images.extend(t for t in result.tags if t not in images)
        return result

    return run


def snapshot(client: docker.DockerClient, image: str, labels: dict[str, str]) -> dict[str, tuple]:
    """Every path of the image's file system: (type, mode, uid, gid, sha256 or link)."""
    container = client.containers.create(
        image, entrypoint=["true"], command=[], network_mode="none", labels=labels
    )
    out: dict[str, tuple] = {}
    try:
        with tempfile.TemporaryFile() as fh:
            for chunk in container.export():
                fh.write(chunk)
            fh.seek(0)
            with tarfile.open(fileobj=fh) as tar:
                for m in tar:
                    name = "/" + m.name.lstrip("./").rstrip("/")
                    if m.isfile():
                        data = tar.extractfile(m).read()  # type: ignore[union-attr]
                        what: Any = hashlib.sha256(data).hexdigest()
                    else:
                        what = m.linkname
                    out[name] = (m.type, m.mode & 0o7777, m.uid, m.gid, what)
    finally:
        container.remove(force=True)
    return out


def read_file(client: docker.DockerClient, image: str, path: str, labels: dict[str, str]) -> bytes:
    container = client.containers.create(image, entrypoint=["true"], labels=labels)
    try:
        stream, _ = container.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.getmembers()[0]
            return tar.extractfile(member).read()  # type: ignore[union-attr]
    finally:
        container.remove(force=True)


def test_overlay_holds_exactly_the_patched_files(
    docker_client, docker_labels, project, build_base, do_build
) -> None:
    steps: list[Any] = []
    result = do_build(project, progress=steps.append)
    assert result.mode == "overlay" and not result.up_to_date
    assert result.id and result.id == docker_client.images.get(result.image).id
    assert result.image.startswith("sglforge-test/sglang-")
    assert result.image.endswith(
        f"v0.5.14-rocm700-mi355x-q{result.plan.queue_hash[:8]}-i{result.plan.inputs_key[:8]}"
    )
    assert set(result.changed_files) == {QUARK, NEW_FILE, CUH, OBSOLETE}
    assert any(getattr(s, "total", 0) >= 5 for s in steps)  # step n of m was reported
    assert result.log_path and "COPY overlay/ /" in result.log_path.read_text()

    before = snapshot(docker_client, build_base, docker_labels)
    after = snapshot(docker_client, result.image, docker_labels)
    changed = {p for p in before.keys() & after.keys() if before[p] != after[p]}
    added = after.keys() - before.keys()
    removed = before.keys() - after.keys()
    assert changed == {f"{WS}/{QUARK}", f"{WS}/{CUH}"}
    assert added == {f"{WS}/{NEW_FILE}", "/opt/sglforge", "/opt/sglforge/manifest.json"}
    assert removed == {f"{WS}/{OBSOLETE}"}
    wt = project.root / "build" / "worktrees" / "v0.5.14"
    for rel in (QUARK, NEW_FILE, CUH):
        assert after[f"{WS}/{rel}"][4] == hashlib.sha256((wt / rel).read_bytes()).hexdigest()
        assert after[f"{WS}/{rel}"][1:4] == (0o644, 0, 0)

    # One layer with content, about the size of the changed files.
    hist = docker_client.api.history(result.image)
    base_layers = len(docker_client.api.history(build_base))
    new = hist[: len(hist) - base_layers]
    sized = [h for h in new if h["Size"]]
    assert len(sized) == 1 and "COPY" in sized[0]["CreatedBy"]
    payload = sum(f.size for f in result.plan.files)
    manifest_size = len(
        read_file(docker_client, result.image, "/opt/sglforge/manifest.json", docker_labels)
    )
    assert sized[0]["Size"] <= 1.05 * (payload + manifest_size) + 64 * 1024

    # The patched code is what Python imports, from the image's WORKDIR and from /: the
    # build's own self-check, asked again here, finds every module resolving to the patched
    # bytes. (Importing it for real needs torch, which the replica lacks.)
    expected = selfcheck.expectations(
        [(f.path, f.dest, f.sha256) for f in result.plan.files], [(OBSOLETE, "")], wt
    )
    assert selfcheck.run(result.image, expected, labels=docker_labels) == []


def test_labels_manifest_and_entrypoint(
    docker_client, docker_labels, project, build_base, do_build
) -> None:
    result = do_build(project)
    img = docker_client.images.get(result.image)
    lab = img.labels
    oci = "org.opencontainers.image."
    queue_names = [f"{n:04d}-{c.slug}.patch" for n, c in enumerate(DEFAULT_CHANGES, 1)]
    assert lab["io.sglforge.upstream.source"] == "https://github.com/sgl-project/sglang.git"
    assert lab["io.sglforge.upstream.revision"] == result.plan.upstream.commit
    # the project's own repository and commit, when its checkout has them
    assert {k: lab[k] for k in lab if k in (oci + "source", oci + "revision")} == fork_labels(
        project.root
    )
    assert lab[oci + "version"] == "0.5.14"
    assert lab[oci + "base.name"] == build_base
    assert lab[oci + "base.digest"] == docker_client.images.get(build_base).id
    assert lab[oci + "licenses"] == "Apache-2.0"
    assert lab[oci + "created"].endswith("Z")
    assert lab[oci + "title"] and lab[oci + "description"]
    assert lab["io.sglforge.patches"] == ",".join(queue_names)
    assert lab["io.sglforge.queue-hash"] == result.plan.queue_hash
    assert (lab["io.sglforge.target"], lab["io.sglforge.gpu-arch"]) == ("mi355x", "gfx950")
    assert (lab["io.sglforge.rocm"], lab["io.sglforge.mode"]) == ("rocm700", "overlay")
    assert lab["io.sglforge.managed"] == "1"
    assert lab["io.sglforge.scan-waivers"] == "[]"  # "none" is recorded too (issue 31)

    manifest = json.loads(
        read_file(docker_client, result.image, "/opt/sglforge/manifest.json", docker_labels)
    )
    patches_dir = project.root / "patches"
    assert [(p["name"], p["sha256"]) for p in manifest["queue"]["patches"]] == [
        (n, hashlib.sha256((patches_dir / n).read_bytes()).hexdigest()) for n in queue_names
    ]
    assert {p["upstream_status"] for p in manifest["queue"]["patches"]} == {"Pending"}
    assert manifest["queue"]["hash"] == lab["io.sglforge.queue-hash"]
    assert manifest["base"] == {"name": build_base, "digest": lab[oci + "base.digest"]}
    assert manifest["upstream"]["commit"] == lab["io.sglforge.upstream.revision"]
    assert manifest["deleted"] == [f"{WS}/{OBSOLETE}"]
    assert manifest["scan_waivers"] == []

    # The run contract of the release image is kept: WORKDIR, CMD and no ENTRYPOINT, so
    # the command line that runs the base runs ours, reaching the same server.
    cfg = docker_client.api.inspect_image(result.image)["Config"]
    base_cfg = docker_client.api.inspect_image(build_base)["Config"]
    assert cfg["Entrypoint"] is None and base_cfg["Entrypoint"] is None
    assert cfg["Cmd"] == base_cfg["Cmd"] == ["/bin/bash"]
    assert cfg["WorkingDir"] == base_cfg["WorkingDir"] == "/sgl-workspace"
    assert "SGLANG_USE_AITER=1" in cfg["Env"]
    line = ["python3", "-m", "sglang.launch_server", "--model-path", "/nonexistent"]
    for image in (build_base, result.image):
        with pytest.raises(docker.errors.ContainerError) as err:
            docker_client.containers.run(
                image,
                [*line, "--no-such-flag"],
                network_mode="none",
                labels=docker_labels,
                remove=True,
            )
        assert b"unrecognized arguments: --no-such-flag" in (err.value.stderr or b"")


def test_same_inputs_build_nothing(
    docker_client, docker_labels, project, build_base, do_build
) -> None:
    first = do_build(project)
    second = do_build(project)
    assert second.up_to_date and not first.up_to_date
    assert second.id == first.id and second.image == first.image
    assert second.log_path is None
    assert second.seconds < 2.0, f"no-op rebuild took {second.seconds:.2f}s"
    created = docker_client.images.get(first.image).labels["org.opencontainers.image.created"]
    assert second.labels["org.opencontainers.image.created"] == created

    # --json through the CLI: the same no-op, machine-readable.
    runner = CliRunner()
    labels = [a for k, v in docker_labels.items() for a in ("--label", f"{k}={v}")]
    res = runner.invoke(
        main,
        [
            "--root",
            str(project.root),
            "build",
            "--upstream",
            str(project.upstream),
            "--json",
            *labels,
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["up_to_date"] is True and doc["id"] == first.id and doc["image"] == first.image
    assert doc["mode"] == "overlay" and set(doc["changed_files"]) == set(first.changed_files)

    # An extra --tag on a no-op still points at the same image.
    third = do_build(project, tags=[first.image + "-extra"])
    assert third.up_to_date
    assert docker_client.images.get(first.image + "-extra").id == first.id

    # Another queue is another image.
    (project.root / "patches" / "series").write_text(
        "".join(f"{n:04d}-{c.slug}.patch\n" for n, c in enumerate(DEFAULT_CHANGES[:2], 1))
    )
    fourth = do_build(project)
    assert not fourth.up_to_date and fourth.image != first.image
    assert set(fourth.changed_files) == {QUARK, NEW_FILE}


def test_wrong_sglang_version_is_refused(project, wrong_base, do_build) -> None:
    with pytest.raises(BuildError) as err:
        do_build(project, base_image=wrong_base)
    assert wrong_base in err.value.message
    assert "0.5.13" in err.value.message and "0.5.14" in err.value.message


def test_missing_base_names_the_closest_tags(project, build_base, do_build) -> None:
    missing = f"{STANDIN_REPO}:v0.5.41-rocm700-mi35x"
    with pytest.raises(BuildError) as err:
        do_build(project, base_image=missing)
    assert missing in err.value.message and "does not exist" in err.value.message
    assert "v0.5.14-rocm700-mi35x" in err.value.message
    # ... and before any work: the queue was never applied.
    assert not (project.root / "build" / "worktrees").exists()


def test_failing_step_surfaces_its_error(
    docker_client, docker_labels, project, build_base, do_build, sglforge_session
) -> None:
    dockerfile = project.root / "images" / "overlay.Dockerfile"
    dockerfile.write_text(
        dockerfile.read_text().replace(
            "COPY overlay/ /\n",
            "COPY overlay/ /\nRUN echo sglforge-test-marker >&2 && exit 3\n",
        )
    )
    with pytest.raises(BuildError) as err:
        do_build(project)
    text = str(err.value)
    assert "failed at step 4/" in text and "RUN echo sglforge-test-marker" in text
    assert "sglforge-test-marker" in text.split("last output:")[1]
    assert "returned a non-zero code: 3" in text
    log = Path(text.split("full log: ")[1].strip())
    assert "sglforge-test-marker" in log.read_text()
    # What the failed build left behind is labelled for cleanup, then removed.
    leftovers = docker_client.images.list(
        filters={"label": f"io.sglforge.test.session={sglforge_session}", "dangling": True}
    )
    for img in leftovers:
        assert img.labels.get("io.sglforge.test") == "1"
        docker_client.images.remove(img.id, force=True)


def test_source_mode_needs_buildx(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, build_base, do_build
) -> None:
    proj = make_build_project(
        tmp_path,
        changes=(*DEFAULT_CHANGES, AOT_CHANGE),
        repository=f"sglforge-test/sglang-{uuid.uuid4().hex[:8]}",
    )
    dry = do_build(proj, dry_run=True)
    assert dry.mode == "source" and "moe-kernel-tweak" in dry.mode_reason
    assert dry.plan.build_args["GPU_ARCH"] == "gfx950"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(shutil.which("git") or "/usr/bin/git")
    monkeypatch.setenv("PATH", str(bin_dir))  # git, but no docker CLI and so no buildx
    with pytest.raises(BuildError) as err:
        do_build(proj)
    assert "docker buildx" in err.value.message and err.value.hint


@pytest.mark.registry
def test_base_from_a_local_registry(
    docker_client, docker_labels, registry, project, build_base, do_build, monkeypatch
) -> None:
    reg = registry()
    ref = reg.ref("sglang", "v0.5.14-rocm700-mi35x")
    docker_client.images.get(build_base).tag(ref)
    for line in docker_client.images.push(ref, stream=True, decode=True):
        assert "error" not in line, line
    docker_client.images.remove(ref)  # only the registry has it now
    monkeypatch.delenv("SGLFORGE_OFFLINE")  # a 127.0.0.1 registry may be asked

    with pytest.raises(BuildError) as err:
        do_build(project, base_image=reg.ref("sglang", "v0.5.41-rocm700-mi35x"))
    assert "in its registry" in err.value.message
    assert "v0.5.14-rocm700-mi35x" in err.value.message  # listed by /v2/sglang/tags/list

    result = do_build(project, base_image=ref)  # pulled through the engine, then built
    try:
        assert result.base == ref and not result.up_to_date
        assert docker_client.images.get(ref).id == docker_client.images.get(build_base).id
    finally:
        docker_client.images.remove(ref)


@pytest.mark.registry
def test_base_from_a_registry_that_needs_a_login(
    docker_client, registry, project, build_base, do_build, monkeypatch
) -> None:
    reg = registry("builder", "s3cret-for-tests")
    ref = reg.ref("team/sglang", "v0.5.14-rocm700-mi35x")
    docker_client.images.get(build_base).tag(ref)
    for line in docker_client.images.push(
        ref, stream=True, decode=True, auth_config=reg.auth_config
    ):
        assert "error" not in line, line
    docker_client.images.remove(ref)
    monkeypatch.delenv("SGLFORGE_OFFLINE")
    monkeypatch.setenv("SGLFORGE_REGISTRY_USER", "builder")
    monkeypatch.setenv("SGLFORGE_REGISTRY_PASSWORD", "s3cret-for-tests")

    with pytest.raises(BuildError) as err:
        do_build(project, base_image=reg.ref("team/sglang", "v0.5.15-rocm700-mi35x"))
    assert (
        "closest existing tags for mi355x-rocm700 on the engine or in its registry: "
        "v0.5.14-rocm700-mi35x" in err.value.message
    )
    assert "s3cret" not in str(err.value)

    result = do_build(project, base_image=ref)
    try:
        assert result.base == ref and result.base_digest
    finally:
        docker_client.images.remove(ref)


def test_unreachable_registry_is_not_reported_as_missing(
    project, build_base, do_build, monkeypatch
) -> None:
    from standin.registry import free_port

    monkeypatch.delenv("SGLFORGE_OFFLINE")
    ref = f"127.0.0.1:{free_port()}/sglang:v0.5.14-rocm700-mi35x"  # nothing listens there
    with pytest.raises(BuildError) as err:
        do_build(project, base_image=ref)
    assert "its registry did not answer" in err.value.message
    # no base to build on: exit 9 (README), not 6 (a failed build step)
    assert err.value.exit_code == 9
    assert "does not exist" not in err.value.message
    assert "docker pull" in (err.value.hint or "")


def test_no_engine_fails_with_how_to_start_one(project) -> None:
    # A separate process: the engine client of this one is cached and shared by the fixtures.
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    args = [
        sys.executable,
        "-m",
        "sglforge",
        "--root",
        str(project.root),
        "build",
        "--upstream",
        str(project.upstream),
    ]
    res = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 5, res.stderr
    assert "no Docker engine reachable" in res.stderr and "systemctl start docker" in res.stderr
    assert "from DOCKER_HOST" in res.stderr and "--bridge=none" not in res.stderr
    assert len(res.stderr.strip().splitlines()) <= 4, res.stderr
    dry = subprocess.run([*args, "--dry-run"], env=env, capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0, dry.stderr
    assert "COPY overlay/ /" in dry.stdout and "not checked in a dry run" in dry.stdout
