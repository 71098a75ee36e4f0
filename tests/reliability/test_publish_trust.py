"""Issue 19: publish never trusts a label. An image built ``FROM`` our release inherits every
``io.sglforge.*`` label; pushed under our immutable tag it must not be "reused" as if this run
had built or tested it. Reuse needs the registry's digest to be a digest of the image this run
tested; otherwise publish smoke-tests the registry's image (what would be published) or refuses.

Real engine, a real local registry (Debian's docker-registry on 127.0.0.1), images built on the
stand-in base (TEST DOUBLE) and smoke-tested with the CPU stand-in scenario.
"""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import pytest
from click.testing import CliRunner, Result

from helpers_build import STANDIN_REPO, make_build_project
from sglforge.cli import main
from sglforge.engine import images as engine_images
from sglforge.engine import registry as reg
from standin.base import ensure_sglang_base
from standin.registry import Registry, free_port

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
REPOSITORY = f"sglforge-test/trust-{uuid.uuid4().hex[:8]}"
FRIENDLY = ("v0.5.14-rocm700-mi355x", "latest-mi355x")


@pytest.fixture(autouse=True)
def no_ambient_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in (reg.USER_ENV, reg.PASSWORD_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker-config"))


class Project:
    def __init__(self, tmp: Path, labels: dict[str, str]) -> None:
        built = make_build_project(tmp)
        ensure_sglang_base(tag=f"{STANDIN_REPO}:v0.5.14-rocm700-mi35x", files=built.base_files())
        self.root, self.upstream, self.labels = built.root, built.upstream, labels
        targets = self.root / "images" / "targets.toml"
        targets.write_text(targets.read_text().replace('"sglforge/sglang"', f'"{REPOSITORY}"', 1))
        text = (REPO / "smoke" / "standin-cpu.toml").read_text()
        # its [bench] tables left out (the plain replica has no bench_serving dependencies;
        # tests/docker/test_bench.py covers that step)
        start = text.index("\n[bench]\n")
        text = text[:start] + text[text.index("\n# The same log patterns", start) :]
        text = text.replace(
            '"../tests/standin/model"', json.dumps(str(REPO / "tests/standin/model"))
        )
        (self.root / "smoke").mkdir(exist_ok=True)
        (self.root / "smoke" / "standin-cpu.toml").write_text(
            text.replace("[scenario]\n", '[scenario]\ntarget = "mi355x"\n', 1)
        )

    def publish(self, registry: str, *extra: str) -> tuple[Result, dict[str, Any]]:
        args = ["-v", "--root", str(self.root), "publish", "--target", "mi355x"]
        args += ["--registry", registry, "--upstream", str(self.upstream), "--offline"]
        args += ["--port", str(free_port()), "--retries", "1", "--backoff", "0.2", "--json"]
        args += ["--allow-standin"]  # a GPU target smoke-tested on the CPU stand-in
        for k, v in self.labels.items():
            args += ["--label", f"{k}={v}"]
        res = CliRunner().invoke(main, [*args, *extra], catch_exceptions=False)
        return res, json.loads(res.stdout)


def served(registry: Registry, tag: str) -> str | None:
    status, headers, _ = registry.get(
        f"/v2/{REPOSITORY}/manifests/{tag}", accept=reg.MANIFEST_ACCEPT
    )
    return (
        None
        if status == 404
        else {k.lower(): v for k, v in headers.items()}["docker-content-digest"]
    )


def plant(
    client: docker.DockerClient, labels: dict[str, str], base: str, ref: str, step: str
) -> str:
    """Build ``FROM base`` plus ``step`` and push it as ``ref``; the digest the push gave."""
    dockerfile = f"FROM {base}\n{step}\n"
    image, _ = client.images.build(fileobj=io.BytesIO(dockerfile.encode()), labels=labels, rm=True)
    engine_images.tag(str(image.id), ref)
    digest = reg.push(ref, None, attempts=1).digest
    client.images.remove(ref)  # the engine keeps no name for it: only the registry has it
    return digest


EVIL_FILE = "RUN echo EVIL > /evil"
# Breaks the server the stand-in scenario launches (its python3 exits 3): smoke must catch
# it, as it is what would be published.
EVIL_SERVER = (
    'RUN p=$(command -v python3) && rm -f "$p" && '
    'printf \'#!/bin/sh\\nexit 3\\n\' > "$p" && chmod +x "$p"'
)


def test_a_foreign_image_under_our_immutable_tag_is_never_reused_unseen(
    tmp_path: Path,
    registry: Callable[..., Registry],
    docker_client: docker.DockerClient,
    docker_labels: dict[str, str],
) -> None:
    project = Project(tmp_path / "p", docker_labels)
    r = registry()
    first, out = project.publish(r.address)
    assert first.exit_code == 0, first.output
    immutable, built = out["immutable"], out["image"]
    tag = immutable.rpartition(":")[2]
    good = out["digest"]
    assert all(served(r, t) == good for t in (tag, *FRIENDLY))

    # 1. Same machine: the tag moved under us (an image FROM ours, a file added). Refused,
    # before any smoke run; no friendly tag moves, the registry keeps the foreign image.
    evil = plant(docker_client, docker_labels, built, immutable, EVIL_FILE)
    res, doc = project.publish(r.address)
    assert res.exit_code == 8, res.output
    assert (
        "moved" in doc["error"]["message"]
        and evil in doc["error"]["message"]
        and good in doc["error"]["message"]
    )
    assert doc["smoke_passed"] is None and doc["pushed"] == []
    assert all(served(r, t) == good for t in FRIENDLY)

    # 2. A fresh machine (nothing local from the first publish): the foreign image is what
    # would be published, so it is what gets smoke-tested; a broken one fails smoke and
    # nothing moves.
    for ref in (built, *out["pushed"]):
        engine_images.remove(ref)
    broken = plant(docker_client, docker_labels, _base_of(project), immutable, EVIL_SERVER)
    res, doc = project.publish(r.address)
    assert res.exit_code != 0, res.output
    assert doc["smoke_passed"] is False and doc["pushed"] == []
    assert "smoke-testing that image" in res.stderr
    assert all(served(r, t) == good for t in FRIENDLY) and served(r, tag) == broken

    # 3. With --skip-smoke nothing would test the foreign image: refused.
    res, doc = project.publish(r.address, "--skip-smoke")
    assert res.exit_code == 8, res.output
    assert "neither built nor smoke-tested" in doc["error"]["message"] and doc["pushed"] == []
    assert served(r, tag) == broken

    # 4. The foreign image that serves well is published only as the image smoke tested: the
    # digest moved to is the one smoke ran on, and the record says so.
    fine = plant(docker_client, docker_labels, _base_of(project), immutable, EVIL_FILE)
    assert served(r, tag) == fine
    res, doc = project.publish(r.address)
    assert res.exit_code == 0, res.output
    assert doc["digest"] == fine and doc["smoke_passed"] is True
    tested = docker_client.images.get(f"{r.address}/{REPOSITORY}@{fine}")
    assert f"smoke-testing that image ({tested.id})" in res.stderr
    assert doc["image"] != tested.id  # the image built here was not what smoke ran on


def _base_of(project: Project) -> str:
    """A fresh build of the project's image (what a first publish elsewhere pushed)."""
    code = CliRunner().invoke(
        main,
        ["--root", str(project.root), "build", "--target", "mi355x", "--offline"]
        + ["--upstream", str(project.upstream), "--json"]
        + [a for k, v in project.labels.items() for a in ("--label", f"{k}={v}")],
        catch_exceptions=False,
    )
    assert code.exit_code == 0, code.output
    return str(json.loads(code.stdout)["image"])
