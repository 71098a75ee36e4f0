"""Provenance labels: the OCI source/revision name the project, upstream's are io.sglforge.*,
given labels win, and the overlay's FROM pins the base digest it records."""

from __future__ import annotations

from pathlib import Path

from sglforge.bases import from_reference
from sglforge.git import public_url
from sglforge.provenance import (
    OCI,
    Base,
    ImageFacts,
    PatchFacts,
    UpstreamFacts,
    make_labels,
    provenance_from,
)
from sglforge.targets import load_targets, parse_targets

REPO_ROOT = Path(__file__).resolve().parents[2]
UP = UpstreamFacts(
    url="https://github.com/sgl-project/sglang",
    source="pypi:sglang",
    ref="v0.5.14",
    commit="d" * 40,
    revision="e" * 40,
)
DIGEST = "sha256:" + "1" * 64


def labels(**extra: str) -> dict[str, str]:
    facts = ImageFacts(
        version="0.5.14",
        target=load_targets(REPO_ROOT).resolve("mi355x"),
        mode="overlay",
        base=Base("lmsysorg/sglang:v0.5.14-rocm700-mi35x", id="sha256:" + "9" * 64),
        upstream=UP,
        queue_hash="0123456789abcdef" * 4,
        patches=(PatchFacts("0001-x.patch", "x", "a" * 64, "python"),),
    )
    return make_labels(
        facts,
        image="acme/sglang:v0.5.14-rocm700-mi355x-q01234567",
        inputs="f" * 64,
        created="2026-01-01T00:00:00Z",
        extra=extra,
    )


def test_upstream_is_named_in_io_sglforge_labels_not_the_oci_ones() -> None:
    lab = labels()
    assert lab["io.sglforge.upstream.source"] == UP.url
    assert lab["io.sglforge.upstream.revision"] == UP.revision
    assert lab["io.sglforge.upstream"] == "pypi:sglang"
    assert f"{OCI}.source" not in lab and f"{OCI}.revision" not in lab


def test_given_labels_win_over_the_defaults() -> None:
    lab = labels(
        **{
            f"{OCI}.source": "https://github.com/acme/sglang-fork",
            f"{OCI}.revision": "0" * 40,
            f"{OCI}.title": "our sglang",
            f"{OCI}.licenses": "Apache-2.0 AND MIT",
        }
    )
    assert lab[f"{OCI}.source"] == "https://github.com/acme/sglang-fork"
    assert lab[f"{OCI}.revision"] == "0" * 40
    assert lab[f"{OCI}.title"] == "our sglang"
    assert lab[f"{OCI}.licenses"] == "Apache-2.0 AND MIT"


def test_from_pins_the_registry_digest_and_keeps_the_tag_otherwise() -> None:
    tag = "lmsysorg/sglang:v0.5.14-rocm700-mi35x"
    assert from_reference(Base(tag, id="sha256:" + "9" * 64, digest=DIGEST)) == f"{tag}@{DIGEST}"
    # an image ID is no valid FROM reference: a base with no registry digest keeps its tag
    assert from_reference(Base(tag, id="sha256:" + "9" * 64)) == tag
    assert from_reference(Base(tag)) == tag


def test_public_url_drops_credentials_and_local_paths() -> None:
    assert public_url("git@github.com:acme/fork.git") == "https://github.com/acme/fork"
    assert (
        public_url("https://x-access-token:ghs_secret@github.com/acme/fork.git")
        == "https://github.com/acme/fork"
    )
    assert public_url("ssh://git@git.example.com:2222/a/b.git") == "https://git.example.com/a/b"
    assert public_url("/srv/git/fork") is None
    assert public_url("file:///srv/git/fork") is None


def test_image_source_setting(tmp_path: Path) -> None:
    import tomllib

    data = tomllib.loads((REPO_ROOT / "images" / "targets.toml").read_text())
    data["image"]["source"] = "https://github.com/acme/sglang-fork"
    targets = parse_targets(data, tmp_path / "targets.toml")
    assert targets.source == targets.resolve("mi300x-rocm720").source == data["image"]["source"]
    assert load_targets(REPO_ROOT).source == ""


def test_inspect_reads_fork_and_upstream_from_new_and_old_labels() -> None:
    new = {
        f"{OCI}.source": "https://github.com/acme/sglang-fork",
        f"{OCI}.revision": "0" * 40,
        "io.sglforge.upstream.source": UP.url,
        "io.sglforge.upstream.revision": UP.revision,
        "io.sglforge.queue-hash": "q" * 64,
    }
    prov = provenance_from("acme/sglang:x", new, None)
    assert (prov.source, prov.revision) == ("https://github.com/acme/sglang-fork", "0" * 40)
    assert (prov.upstream_url, prov.upstream_commit) == (UP.url, UP.revision)
    # images built before this change named upstream in the OCI labels
    old = {f"{OCI}.source": UP.url, f"{OCI}.revision": UP.revision, "io.sglforge.queue-hash": "q"}
    prov = provenance_from("acme/sglang:y", old, None)
    assert (prov.source, prov.revision) == ("", "")
    assert (prov.upstream_url, prov.upstream_commit) == (UP.url, UP.revision)


def test_the_description_gives_the_real_run_contract() -> None:
    """Registry UIs show it: no ENTRYPOINT, so the run line names the server module, as the
    README's run contract does (`IMAGE --model-path` would try to run `--model-path`)."""
    text = labels()[f"{OCI}.description"]
    image = "acme/sglang:v0.5.14-rocm700-mi355x-q01234567"
    assert f"{image} python3 -m sglang.launch_server --model-path MODEL" in text
    assert "with 1 sglforge patch:" in text


def test_inspect_shows_a_commit_and_the_wheel_for_pypi_sources() -> None:
    """A pypi: image's revision label is the tag (its history's commits are sglforge's own):
    `upstream_commit` is still a commit, and the wheel's file name and sha256 are named."""
    from dataclasses import replace

    from sglforge.provenance import make_manifest

    up = replace(
        UP,
        revision="v0.5.14",
        wheel="sglang-0.5.14-py3-none-any.whl",
        wheel_sha256="c" * 64,
    )
    facts = ImageFacts(
        version="0.5.14",
        target=load_targets(REPO_ROOT).resolve("mi355x"),
        mode="overlay",
        base=None,
        upstream=up,
        queue_hash="0" * 64,
        patches=(),
    )
    lab = make_labels(
        facts,
        image="acme/sglang:v0.5.14-rocm700-mi355x-q01234567",
        inputs="f" * 64,
        created="2026-01-01T00:00:00Z",
    )
    assert lab["io.sglforge.upstream.wheel"] == f"{up.wheel} sha256:{'c' * 64}"
    manifest = make_manifest(facts, image="acme/sglang:x", files=(), deleted=())
    assert manifest["upstream"]["wheel"] == up.wheel
    assert manifest["upstream"]["wheel_sha256"] == "c" * 64
    for m in (manifest, None):  # from the manifest, and from the labels alone
        p = provenance_from("acme/sglang:x", lab, m, {})
        assert p.upstream_commit == UP.commit and p.upstream_revision == "v0.5.14"
        assert p.upstream_wheel == up.wheel and p.upstream_wheel_sha256 == "c" * 64
    # a git source: no wheel, and the revision is the commit
    p = provenance_from("acme/sglang:x", labels(), None, {})
    assert p.upstream_wheel == "" and p.upstream_commit == UP.revision
