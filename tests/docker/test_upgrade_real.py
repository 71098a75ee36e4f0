"""sglforge upgrade on released sglang (the PyPI-built history) with a real engine.

v0.5.14 -> v0.5.16: both real patches are retired with their evidence, the queue is empty,
and the empty queue still builds (on the stand-in base for 0.5.16) and passes the stand-in
smoke scenario.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipelines import upgrade_at as upgrade
from real_project import copy_real_project
from sglforge.queue.series import load_queue

REPO = Path(__file__).resolve().parents[2]
UPSTREAM = "pypi:sglang>=0.5.10,<=0.5.16"

pytestmark = [pytest.mark.docker, pytest.mark.pypi]


def _no_bench(tmp: Path) -> Path:
    """The CPU stand-in scenario without its [bench] tables (tests/docker/test_bench.py runs
    them on a replica that carries bench_serving's dependencies; this one does not)."""
    text = (REPO / "smoke" / "standin-cpu.toml").read_text()
    start = text.index("\n[bench]\n")
    text = text[:start] + text[text.index("\n# The same log patterns", start) :]
    text = text.replace('"../tests/standin/model"', f'"{REPO / "tests/standin/model"}"')
    path = tmp / "standin-cpu-no-bench.toml"
    path.write_text(text)
    return path


def copy_project(tmp_path: Path) -> Path:
    return copy_real_project(tmp_path / "project")


def test_upgrade_0_5_14_to_0_5_16_retires_both_and_still_builds(
    tmp_path: Path, docker_client, docker_labels, standin_base
) -> None:
    from standin.base import ensure_sglang_base
    from standin.registry import free_port

    ensure_sglang_base("0.5.16", client=docker_client)
    root = copy_project(tmp_path)
    before = [p.name for p in load_queue(root).patches]
    assert len(before) == 2
    r = upgrade(
        root,
        "v0.5.16",
        upstream=UPSTREAM,
        targets=("mi355x",),
        base_image="sglforge-standin/sglang:v{version}-rocm700-mi35x",
        scenario=REPO / "smoke" / "standin-cpu.toml",
        labels=docker_labels,
        offline=True,
        port=free_port(),  # not the scenario's: other tests smoke side by side (xdist)
    )
    assert r.ready and r.applied, r.reason
    assert {p.name: p.action for p in r.patches} == {n: "retired" for n in before}
    q = load_queue(root)
    assert q.pin.ref == "v0.5.16" and q.patches == ()
    guard = (root / "patches" / "retired" / before[0]).read_text()
    assert "Upstream-Status: Backport [0.5.15]" in guard
    assert "Retired: v0.5.16: change already present" in guard
    mtp = (root / "patches" / "retired" / before[1]).read_text()
    assert "Retired: v0.5.16: Upstream-Fixed-In 0.5.16" in mtp
    (target,) = r.targets
    assert target.error == "" and target.image and target.changed_files == ()
    assert target.smoke_passed is True
    labels = docker_client.images.get(target.image).labels
    assert labels["org.opencontainers.image.version"].startswith("0.5.16")
    changelog = (root / "CHANGELOG.md").read_text()
    assert "Upstream pin moved from v0.5.14 to v0.5.16." in changelog
    assert "report-v0.5.16" in str(r.report_md)


@pytest.mark.registry
def test_upgrade_with_publish_pushes_only_after_smoke(
    tmp_path: Path, docker_client, docker_labels, standin_base, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglforge import build, inspect
    from standin.base import ensure_sglang_base
    from standin.registry import free_port, start_registry

    # Counting wrappers around the real functions: an upgrade with --publish builds each
    # target once (publish takes the upgrade's build) and reads no manifest back out of the
    # image it built (the build's plan holds it).
    counted: dict[str, int] = {"build_image": 0, "image_manifest": 0}

    def counting(name: str, real: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counted[name] += 1
            return real(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(build, "build_image", counting("build_image", build.build_image))
    monkeypatch.setattr(
        inspect, "image_manifest", counting("image_manifest", inspect.image_manifest)
    )
    from sglforge import publish as publish_module

    monkeypatch.setattr(publish_module, "image_manifest", inspect.image_manifest)

    ensure_sglang_base("0.5.16", client=docker_client)
    root = copy_project(tmp_path)
    registry = start_registry(tmp_path / "registry")
    try:
        r = upgrade(
            root,
            "v0.5.16",
            upstream=UPSTREAM,
            targets=("mi355x",),
            base_image="sglforge-standin/sglang:v{version}-rocm700-mi35x",
            scenario=_no_bench(tmp_path),
            port=free_port(),
            publish=True,
            allow_standin=True,  # the CPU stand-in, recorded as one
            registry=registry.address,
            labels=docker_labels,
            offline=True,
        )
        assert r.ready and r.applied, r.reason
        assert counted == {"build_image": 1, "image_manifest": 0}, counted
        (target,) = r.targets
        assert target.smoke_passed is True
        pushed = set(target.published)
        prefix = f"{registry.address}/sglforge/sglang:"
        assert f"{prefix}v0.5.16-rocm700-mi355x" in pushed
        assert f"{prefix}latest-mi355x" in pushed
        status, _, body = registry.get("/v2/sglforge/sglang/tags/list")
        assert status == 200
        tags = json.loads(body)["tags"]
        assert "latest-mi355x" in tags
        # the release entry lands in the project's CHANGELOG with the queue changes
        assert "v0.5.16-rocm700-mi355x-q" in (root / "CHANGELOG.md").read_text()
        # Publishing the older 0.5.14 queue afterwards moves its own friendly tag, never
        # latest-mi355x back to an older version.
        from pipelines import publish_at as publish
        from sglforge.engine import registry as reg

        latest = f"{prefix}latest-mi355x"
        before = reg.registry_digest(latest)
        old = publish(
            copy_real_project(tmp_path / "old"),
            "mi355x",
            registry.address,
            scenario=_no_bench(tmp_path),
            port=free_port(),
            allow_standin=True,
            base_image=ensure_sglang_base("0.5.14", client=docker_client),
            upstream=UPSTREAM,
            labels=docker_labels,
            offline=True,
        )
        assert old.error is None, old.error
        assert f"{prefix}v0.5.14-rocm700-mi355x" in old.pushed and latest not in old.pushed
        assert any("kept" in step.detail and "0.5.16" in step.detail for step in old.steps)
        assert reg.registry_digest(latest) == before
        # Anyone holding the image, with no checkout and no release records, sees the smoke
        # figures: publish pushed the record next to the image.
        from sglforge.inspect import inspect_image

        ref = f"{prefix}v0.5.14-rocm700-mi355x"
        docker_client.images.remove(ref, force=True)
        prov = inspect_image(ref, root=None, pull=True)
        assert prov.release and prov.release.startswith("v0.5.14-rocm700-mi355x-q")
        assert prov.smoke is not None and prov.smoke.passed
        assert prov.smoke.figures["spec_accept_length_server"] > 2.5
        status, _, _ = registry.get(f"/v2/sglforge/sglang/manifests/{prov.release}-release")
        assert status == 200
    finally:
        registry.stop()
