"""The first release is found out before the build (issue 45, U3): one read of the registry's
tag list says whether the target has a last release to bench against. A publish without one
is refused at once (exit 1, the hint naming --no-baseline and the workflow's no_baseline
input, in the JSON's ``hint``), ``--dry-run`` says so, and a registry holding a release record
of the target lets both through. Real registries (Debian's docker-registry), no engine: the
refusal comes before any build.
"""

from __future__ import annotations

import hashlib
import json
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from helpers_build import make_build_project
from sglforge.cli import main
from sglforge.errors import split_hint
from standin.registry import Registry

REPOSITORY = "sglforge-first/sglang"
SCHEMA2 = "application/vnd.docker.distribution.manifest.v2+json"


def put_tag(r: Registry, repository: str, tag: str) -> None:
    """A tag in ``r`` (a manifest with an empty config and no layers), written with the
    registry's HTTP API: what the tag list shows is all the check reads."""
    config = b"{}"
    digest = "sha256:" + hashlib.sha256(config).hexdigest()
    start = urllib.request.Request(f"{r.url}/v2/{repository}/blobs/uploads/", method="POST")
    with urllib.request.urlopen(start, timeout=10) as resp:
        location = resp.headers["Location"]
    sep = "&" if "?" in location else "?"
    url = location if location.startswith("http") else r.url + location
    put = urllib.request.Request(
        f"{url}{sep}digest={digest}",
        data=config,
        method="PUT",
        headers={"Content-Type": "application/octet-stream"},
    )
    urllib.request.urlopen(put, timeout=10).close()
    manifest = {
        "schemaVersion": 2,
        "mediaType": SCHEMA2,
        "config": {
            "mediaType": "application/vnd.docker.container.image.v1+json",
            "size": len(config),
            "digest": digest,
        },
        "layers": [],
    }
    req = urllib.request.Request(
        f"{r.url}/v2/{repository}/manifests/{tag}",
        data=json.dumps(manifest).encode(),
        method="PUT",
        headers={"Content-Type": SCHEMA2},
    )
    urllib.request.urlopen(req, timeout=10).close()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    made = make_build_project(tmp_path, repository=REPOSITORY)
    (made.root / "upstream-path").write_text(str(made.upstream))
    return made.root


def publish_args(root: Path, registry: str, *extra: str) -> list[str]:
    upstream = (root / "upstream-path").read_text()
    args = ["--root", str(root), "publish", "--target", "mi355x", "--registry", registry]
    args += ["--upstream", upstream, "--offline", "--scenario", "standin-cpu", "--allow-standin"]
    return [*args, *extra]


def publish(root: Path, registry: str, *extra: str) -> tuple[Result, dict[str, Any]]:
    res = CliRunner().invoke(main, publish_args(root, registry, "--json", *extra))
    return res, json.loads(res.stdout)


def bench_step(doc: dict[str, Any]) -> str:
    return next(s["detail"] for s in doc["steps"] if s["name"] == "bench")


def test_a_first_publish_is_refused_before_the_build_and_the_dry_run_says_so(
    project: Path, registry: Callable[..., Registry]
) -> None:
    r = registry()
    res, doc = publish(project, r.address)
    assert res.exit_code == 1, res.output
    err = doc["error"]
    assert f"no release of mi355x in {r.address}/{REPOSITORY} yet" in err["message"]
    assert "refused before the build" in err["message"] and "next:" not in err["message"]
    assert "--no-baseline REASON" in err["hint"] and "no_baseline input" in err["hint"]
    assert not (project / "build" / "context").exists()  # nothing was built
    res, doc = publish(project, r.address, "--dry-run")
    assert res.exit_code == 0, res.output
    assert bench_step(doc).startswith("REFUSED before the build: no release of mi355x")
    assert doc["bench"]["baseline"]["found"] is False
    # the text plan lists every gate, the bench's refusal among them
    text = CliRunner().invoke(main, publish_args(project, r.address, "--dry-run"))
    assert "  bench     REFUSED before the build" in text.stdout, text.output
    # --no-baseline: nothing is compared, nothing is asked
    res, doc = publish(project, r.address, "--dry-run", "--no-baseline", "the first release")
    assert "--no-baseline: the first release" in bench_step(doc)
    assert "baseline" not in doc["bench"]


def test_a_release_record_of_the_target_lets_it_through_another_target_s_does_not(
    project: Path, registry: Callable[..., Registry]
) -> None:
    r = registry()
    put_tag(r, REPOSITORY, "v0.5.14-rocm700-mi300x-q1234abcd-release")  # another target
    put_tag(r, REPOSITORY, "v0.5.14-rocm700-mi355x-q1234abcd")  # an image, no record
    _, doc = publish(project, r.address, "--dry-run")
    assert doc["bench"]["baseline"]["found"] is False, bench_step(doc)
    put_tag(r, REPOSITORY, "v0.5.14-rocm700-mi355x-q1234abcd-release")
    _, doc = publish(project, r.address, "--dry-run")
    assert doc["bench"]["baseline"] == {
        "found": True,
        "detail": f"the last of 1 release(s) of mi355x in {r.address}/{REPOSITORY}",
    }
    assert "node-minutes planned, against the last of 1 release(s)" in bench_step(doc)


def test_an_unreachable_registry_is_unknown_not_a_first_release(project: Path) -> None:
    from standin.registry import free_port

    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    _, doc = publish(project, address, "--dry-run")
    assert doc["bench"]["baseline"]["found"] is None
    assert "did not answer" in bench_step(doc) and "node-minutes planned" in bench_step(doc)


@pytest.mark.parametrize(
    ("text", "message", "hint"),
    [
        ("a\n  next: b", "a", "b"),
        ("a", "a", None),
        # a cause quoted in the message keeps its own next: line; the last one is the hint
        (
            "pull failed (x\n  next: login); more\n  next: pass --no-baseline",
            "pull failed (x\n  next: login); more",
            "pass --no-baseline",
        ),
    ],
)
def test_an_error_text_splits_into_message_and_hint(
    text: str, message: str, hint: str | None
) -> None:
    assert split_hint(text) == (message, hint)
