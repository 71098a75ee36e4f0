"""Issue 19: a malformed image manifest (wrong types, deep nesting, invalid UTF-8, too large)
is treated as absent, in one place (``provenance.parse_manifest``): ``inspect`` never crashes
on whatever bytes an image holds at /opt/sglforge/manifest.json."""

from __future__ import annotations

import io
import json
import tarfile
import uuid
from pathlib import Path

import docker
import pytest
from reliability_helpers import cli

from sglforge.provenance import MANIFEST_PATH, parse_manifest, provenance_from

GOOD = {
    "schema": 1,
    "image": "x:y",
    "sglang_version": "0.5.14",
    "target": "mi355x",
    "upstream": {"url": "u", "ref": "v0.5.14", "commit": "c" * 40},
    "queue": {"hash": "ab" * 32, "patches": [{"name": "0001-a.patch", "sha256": "a" * 64}]},
    "base": {"name": "b:1", "digest": "sha256:" + "1" * 64},
    "files": [{"path": "p", "dest": "/d", "sha256": "s", "size": 1}],
    "deleted": [],
}
HOSTILE: list[bytes] = [
    json.dumps({"upstream": "evil"}).encode(),
    json.dumps({"queue": [1, 2, 3]}).encode(),
    json.dumps({"configs": 5}).encode(),
    json.dumps({"queue": {"patches": ["0001-a.patch", 7]}}).encode(),
    json.dumps({"queue": {"hash": {"nested": 1}}}).encode(),
    json.dumps({"base": {"name": ["list"]}}).encode(),
    json.dumps({"files": [{"path": {"x": 1}}]}).encode(),
    json.dumps({"deleted": [1]}).encode(),
    json.dumps({"target": 355}).encode(),
    json.dumps([GOOD]).encode(),
    b"[" * 100_000 + b"]" * 100_000,
    b'{"queue": {"hash": "\xff\xfe"}}',
    b'{"upstream": {"url": "x"',  # truncated
    b"\x00" * 64,
    json.dumps({**GOOD, "pad": "x" * (17 << 20)}).encode(),  # larger than any of ours
]


def test_the_good_shape_is_kept() -> None:
    assert parse_manifest(json.dumps(GOOD).encode()) == GOOD


@pytest.mark.parametrize("entrypoint", [(), ("/bin/sh", "-c", "x")])
def test_what_the_build_writes_is_read_back(tmp_path: Path, entrypoint: tuple[str, ...]) -> None:
    """The writer (make_manifest, through plan_build) and the reader agree on the shape."""
    from pipelines import plan_at
    from sglforge.provenance import Base, PatchFacts, UpstreamFacts, manifest_bytes
    from sglforge.targets import load_targets

    repo = Path(__file__).resolve().parents[2]
    wt = tmp_path / "wt"
    (wt / "python/sglang").mkdir(parents=True)
    (wt / "python/sglang/a.py").write_text("a = 1\n")
    plan = plan_at(
        "overlay",
        target=load_targets(repo).resolve("mi355x"),
        version="0.5.14",
        mode_reason="test",
        base=Base("b:1", id="sha256:" + "1" * 64, entrypoint=entrypoint, cmd=("/bin/bash",)),
        upstream=UpstreamFacts("https://x/y.git", "/m", "v0.5.14", "c" * 40, "c" * 40),
        queue_hash="ab" * 32,
        patches=(PatchFacts("0001-a.patch", "a", "a" * 64, "python", "Pending"),),
        worktree=wt,
        changed_files=("python/sglang/a.py", "python/sglang/gone.py"),
        template=(repo / "images" / "overlay.Dockerfile").read_text(),
        created="2026-01-01T00:00:00Z",
    )
    manifest = {**plan.manifest, "configs": [{"name": "c", "rows": 3, "gfx": "gfx950"}]}
    assert parse_manifest(manifest_bytes(manifest)) == json.loads(manifest_bytes(manifest))


@pytest.mark.parametrize("raw", HOSTILE, ids=lambda raw: repr(raw[:30]))
def test_a_malformed_manifest_is_treated_as_absent(raw: bytes) -> None:
    assert parse_manifest(raw) is None
    prov = provenance_from("x:y", {"io.sglforge.queue-hash": "q"}, parse_manifest(raw))
    assert prov.manifest_found is False and prov.queue_hash == "q"


@pytest.mark.docker
def test_inspect_of_images_holding_malformed_manifests(
    tmp_path: Path,
    docker_client: docker.DockerClient,
    docker_labels: dict[str, str],
    standin_base: str,
) -> None:
    for n, raw in enumerate(HOSTILE[:12]):
        context = io.BytesIO()
        with tarfile.open(fileobj=context, mode="w") as tar:
            dockerfile = f"FROM {standin_base}\nCOPY manifest.json {MANIFEST_PATH}\n".encode()
            for name, data in (("Dockerfile", dockerfile), ("manifest.json", raw)):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        context.seek(0)
        tag = f"sglforge-test/hostile-manifest:{n}-{uuid.uuid4().hex[:6]}"
        labels = {**docker_labels, "io.sglforge.queue-hash": "q" * 8, "io.sglforge.target": "t"}
        docker_client.images.build(
            fileobj=context, custom_context=True, tag=tag, labels=labels, rm=True
        )
        try:
            code, out, err = cli(tmp_path, "inspect", tag, "--json")
            assert code == 0, (raw[:40], out, err)
            shown = json.loads(out)
            assert shown["manifest_found"] is False and shown["queue_hash"] == "q" * 8
            code, out, err = cli(tmp_path, "inspect", tag)
            assert code == 0 and "Traceback" not in err, (out, err)
        finally:
            docker_client.images.remove(tag, force=True)
