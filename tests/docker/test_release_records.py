"""The previous release comes from the registry's release records (``<tag>-release``).

CI checkouts start without build/releases/, so publish reads the records pushed next to the
images; when the registry cannot be asked it falls back to the local folder.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from sglforge.provenance import PatchFacts, Smoke
from sglforge.release import (
    Release,
    previous_release,
    push_release_record,
    record_release,
    registry_records,
)
from standin.registry import Registry, free_port

pytestmark = [pytest.mark.docker, pytest.mark.registry]

REPO = "sglforge/sglang"


def release(registry: Registry, tag: str, **kw: object) -> Release:
    image = registry.ref(REPO, tag)
    base = Release(
        version=tag,
        date="2026-11-30",
        target="mi355x",
        image=image,
        digest="sha256:" + "d" * 64,
        references=(image,),
        upstream_url="pypi:sglang",
        upstream_ref="v0.5.14",
        upstream_commit="0123456789abcdef",
        upstream_version="0.5.14",
        queue_hash="e" * 64,
        patches=(PatchFacts("0001-a.patch", "A", "a" * 64),),
        smoke=Smoke(True, "standin-cpu", "passed", {"decode_tok_s": 200.0}),
        published_at="2026-11-30T07:00:00Z",
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def test_previous_release_is_read_from_the_registry_then_the_local_folder(
    registry: Callable[..., Registry],
    tmp_path: Path,
    docker_client: object,
    docker_labels: dict[str, str],
) -> None:
    r = registry()
    repository = f"{r.address}/{REPO}"
    older = release(r, "v0.5.14-rocm700-mi355x-q1111")
    newer = release(
        r,
        "v0.5.14-rocm700-mi355x-q2222",
        queue_hash="2" * 64,
        published_at="2026-11-30T09:00:00Z",
    )
    other = release(
        r, "v0.5.14-rocm700-mi300x-q3333", target="mi300x", published_at="2026-11-30T10:00:00Z"
    )
    # The record images carry docker_labels: the session fixture removes them.
    for rel in (newer, older, other):  # pushed out of order: the record's time decides
        push_release_record(tmp_path, rel, rel.image, None, docker_labels, attempts=1)
    found = registry_records(repository)
    assert found is not None
    assert {x.version for x in found} == {older.version, newer.version, other.version}
    # A checkout with no build/releases/ (CI) still finds the newest of the target.
    assert not (tmp_path / "build" / "releases").exists()
    prev = previous_release(tmp_path, "mi355x", "v0.5.14-rocm700-mi355x-q9999", repository)
    assert prev is not None and prev.version == newer.version
    third = release(
        r,
        "v0.5.14-rocm700-mi355x-q9999",
        queue_hash="9" * 64,
        published_at="2026-11-30T11:00:00Z",
    )
    done = record_release(tmp_path, third, repository=repository)
    assert done.diff.previous == newer.version and done.fork_version == "v0.5.14-3"

    # The registry cannot be asked: the local folder answers (here: the record just written).
    gone = f"127.0.0.1:{free_port()}/{REPO}"
    assert registry_records(gone) is None
    prev = previous_release(tmp_path, "mi355x", "v0.5.14-rocm700-mi355x-q0000", gone)
    assert prev is not None and prev.version == "v0.5.14-rocm700-mi355x-q9999"
