"""Issue 10: file names round-trip into images. A file a patch adds or deletes with a name
outside ASCII (``rt_é.py``), with spaces, quotes or ``$`` lands in the overlay image, the
manifest and the build context exactly, and no bogus ``RUN rm -f`` is emitted."""

from __future__ import annotations

import io
import json
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from helpers_build import (
    DEFAULT_CHANGES,
    OBSOLETE,
    STANDIN_OWNED,
    STANDIN_REPO,
    Change,
    _write,
    make_build_project,
    upstream_files,
)
from pipelines import build_at as build_image
from sglforge.build import WorkspaceSource, render_overlay_dockerfile, scan_files
from sglforge.targets import load_targets
from standin.base import ensure_sglang_base

REPO = Path(__file__).resolve().parents[2]
WS = "/sgl-workspace/sglang"
SRT = "python/sglang/srt"
NAMES = [
    f"{SRT}/rt_é.py",
    f"{SRT}/with space.py",
    f"{SRT}/quo'te\".py",
    f"{SRT}/dollar$HOME.py",
    f"{SRT}/模型/ünï.py",
]


@pytest.mark.parametrize("name", NAMES)
def test_deleting_such_a_name_is_one_exact_argument(name: str) -> None:
    """The RUN that deletes is exec form: each name reaches rm as one exact argument."""
    target = load_targets(REPO).resolve("mi355x")
    dest = f"{WS}/{name}"
    df = render_overlay_dockerfile("FROM {{BASE}}\n{{DELETE}}", "b:1", target, [dest])
    run = next(line for line in df.splitlines() if line.startswith("RUN "))
    assert json.loads(run[4:]) == ["rm", "-f", "--", dest]


def test_scan_files_reads_every_name(tmp_path: Path) -> None:
    for n, name in enumerate(NAMES):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(f"X = {n}\n")
    files, deleted, skipped = scan_files(
        tmp_path, [*NAMES, f"{SRT}/gone_é.py"], WS, WorkspaceSource.ASSUMED
    )
    assert sorted(f.path for f in files) == sorted(NAMES)
    assert deleted == (f"{WS}/{SRT}/gone_é.py",) and skipped == ()


# --------------------------------------------------------------------------- real build

BASE_TAG = f"{STANDIN_REPO}:v0.5.14-rocm700-mi35x"


@pytest.fixture(scope="module")
def build_base(docker_client: docker.DockerClient) -> str:
    files = {k: v.encode() for k, v in upstream_files().items() if k not in STANDIN_OWNED}
    return ensure_sglang_base("0.5.14", tag=BASE_TAG, files=files, client=docker_client)


@pytest.fixture
def built(
    tmp_path: Path,
    build_base: str,
    docker_client: docker.DockerClient,
    docker_labels: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[object, docker.DockerClient, dict[str, str]]]:
    monkeypatch.setenv("SGLFORGE_OFFLINE", "1")
    monkeypatch.delenv("SGLFORGE_UPSTREAM", raising=False)
    changes = (
        *DEFAULT_CHANGES,
        *(Change(f"add-{n}", _write(name, f"VALUE = {n}  # é\n")) for n, name in enumerate(NAMES)),
    )
    project = make_build_project(
        tmp_path, changes, repository=f"sglforge-test/names-{uuid.uuid4().hex[:8]}"
    )
    result = build_image(project.root, upstream=str(project.upstream), labels=docker_labels)
    try:
        yield result, docker_client, docker_labels
    finally:
        for ref in result.tags:
            try:
                docker_client.images.remove(ref, force=True)
            except docker.errors.NotFound:
                pass


def _read(client: docker.DockerClient, image: str, path: str, labels: dict[str, str]) -> bytes:
    container = client.containers.create(image, entrypoint=["true"], labels=labels)
    try:
        stream, _ = container.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            return tar.extractfile(tar.getmembers()[0]).read()  # type: ignore[union-attr]
    finally:
        container.remove(force=True)


@pytest.mark.docker
def test_overlay_image_and_manifest_hold_every_name(built) -> None:
    result, client, labels = built
    assert sorted(set(NAMES) & set(result.changed_files)) == sorted(NAMES)
    for n, name in enumerate(NAMES):
        assert _read(client, result.image, f"{WS}/{name}", labels) == f"VALUE = {n}  # é\n".encode()
    manifest = json.loads(_read(client, result.image, "/opt/sglforge/manifest.json", labels))
    paths = {f["path"] for f in manifest["files"]}
    assert set(NAMES) <= paths
    # The one deletion is the real one, spelled so rm gets it exactly.
    assert manifest["deleted"] == [f"{WS}/{OBSOLETE}"]
    rm = [ln for ln in result.plan.dockerfile.splitlines() if ln.startswith("RUN ")]
    assert [json.loads(ln[4:]) for ln in rm] == [["rm", "-f", "--", f"{WS}/{OBSOLETE}"]]
    with pytest.raises(docker.errors.NotFound):
        _read(client, result.image, f"{WS}/{OBSOLETE}", labels)
