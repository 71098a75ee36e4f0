"""Issue 19: the immutable tag names every input. The same queue on another base, with another
Dockerfile, in another mode or with another manifest gets another tag (the queue hash stays
readable in it, ``-q<queue>-i<inputs>``); the same inputs get the same tag; a tag the local
engine already has from other inputs is never re-pointed.
"""

from __future__ import annotations

import io
import re
import uuid
from dataclasses import replace
from pathlib import Path

import docker
import pytest

from helpers_build import STANDIN_REPO, make_build_project
from pipelines import build_at as build_image
from pipelines import plan_at
from sglforge.errors import BuildError
from sglforge.provenance import Base, PatchFacts, UpstreamFacts
from sglforge.targets import load_targets
from standin.base import ensure_sglang_base

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = (REPO / "images" / "overlay.Dockerfile").read_text()
QHASH = "0123456789abcdef" * 4
UP = UpstreamFacts("https://github.com/sgl-project/sglang.git", "/m", "v0.5.14", "c" * 40, "c" * 40)
PATCHES = (PatchFacts("0001-a.patch", "a", "a" * 64, "python"),)
QUARK = "python/sglang/srt/layers/quantization/quark.py"


def plan(tmp: Path, mode: str = "overlay", **kw: object) -> str:
    wt = tmp / "wt"
    (wt / QUARK).parent.mkdir(parents=True, exist_ok=True)
    (wt / QUARK).write_text("fixed = True\n")
    (wt / "docker").mkdir(exist_ok=True)
    (wt / "docker" / "rocm.Dockerfile").write_text(str(kw.pop("upstream_dockerfile", "FROM x\n")))
    args: dict[str, object] = dict(
        target=load_targets(REPO).resolve("mi355x"),
        version="0.5.14",
        mode_reason="test",
        base=Base("lmsysorg/sglang:v0.5.14-rocm700-mi35x", id="sha256:" + "1" * 64),
        upstream=UP,
        queue_hash=QHASH,
        patches=PATCHES,
        worktree=wt,
        changed_files=(QUARK,),
        template=TEMPLATE,
        created="2026-01-01T00:00:00Z",
    )
    args.update(kw)
    return plan_at(mode, **args).image


def test_every_input_changes_the_tag_and_the_queue_hash_stays_readable(tmp_path: Path) -> None:
    same = plan(tmp_path)
    variants = {
        "base digest": plan(tmp_path, base=Base("lmsysorg/sglang:x", id="sha256:" + "2" * 64)),
        "base by digest": plan(
            tmp_path,
            base=Base("lmsysorg/sglang:v0.5.14-rocm700-mi35x", digest="sha256:" + "3" * 64),
        ),
        "dockerfile": plan(tmp_path, template=TEMPLATE + "# another line\n"),
        "mode": plan(tmp_path, "source"),
        "source dockerfile": plan(tmp_path, "source", upstream_dockerfile="FROM y\n"),
        "manifest (files)": plan(tmp_path, changed_files=(QUARK, "python/sglang/srt/gone.py")),
        "manifest (upstream commit)": plan(tmp_path, upstream=replace(UP, commit="d" * 40)),
        "manifest (patch subject)": plan(
            tmp_path, patches=(PatchFacts("0001-a.patch", "b", "a" * 64, "python"),)
        ),
    }
    assert plan(tmp_path) == same  # the same inputs, the same tag (no clock in it)
    tags = {same, *variants.values()}
    assert len(tags) == len(variants) + 1, variants
    for tag in tags:
        assert re.fullmatch(
            r"sglforge/sglang:v0\.5\.14-rocm700-mi355x-q01234567-i[0-9a-f]{8}", tag
        ), tag


@pytest.mark.docker
def test_the_same_queue_on_two_bases_gets_two_tags_and_no_tag_is_taken_over(
    tmp_path: Path, docker_client: docker.DockerClient, docker_labels: dict[str, str]
) -> None:
    project = make_build_project(tmp_path, repository=f"sglforge-test/tags-{uuid.uuid4().hex[:8]}")
    base = ensure_sglang_base(
        tag=f"{STANDIN_REPO}:v0.5.14-rocm700-mi35x", files=project.base_files()
    )
    other, _ = docker_client.images.build(
        fileobj=io.BytesIO(f"FROM {base}\nLABEL io.sglforge.test.other-base=1\n".encode()),
        labels=docker_labels,
        rm=True,
    )
    other_ref = f"sglforge-test/other-base-{uuid.uuid4().hex[:8]}:v0.5.14-rocm700-mi35x"
    other.tag(other_ref)

    def build(base_image: str | None = None):  # type: ignore[no-untyped-def]
        return build_image(
            project.root,
            "mi355x",
            base_image=base_image,
            upstream=str(project.upstream),
            offline=True,
            labels=docker_labels,
        )

    first = build()
    second = build(other_ref)
    assert first.image != second.image
    assert first.image.rpartition("-i")[0] == second.image.rpartition("-i")[0]  # same queue
    # Both images keep their tags: the second build took nothing over.
    assert docker_client.images.get(first.image).id == first.id
    assert docker_client.images.get(second.image).id == second.id
    again = build()
    assert again.image == first.image and again.up_to_date and again.id == first.id

    # Another image put under the first tag by hand: the build refuses to move it.
    docker_client.images.get(other_ref).tag(first.image)
    with pytest.raises(BuildError) as err:
        build()
    assert "never re-pointed" in err.value.message and first.image in err.value.message
    assert docker_client.images.get(first.image).id == other.id
    docker_client.images.remove(first.image)
