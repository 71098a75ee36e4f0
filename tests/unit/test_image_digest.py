"""An image's registry digest is the one of the repository its reference names.

The engine lists every name an image went to or came from in RepoDigests. A local stand-in
base that a test also pushed to a registry carries that registry's digest; pinning the
base's FROM to it sent the build to the other registry (and, for a bare name, to docker.io).
"""

from __future__ import annotations

import pytest

from sglforge.bases import from_reference
from sglforge.engine.images import ImageInfo, digests_in
from sglforge.provenance import Base

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64


def _info(ref: str, *repo_digests: str) -> ImageInfo:
    return ImageInfo(ref, "sha256:" + "f" * 64, repo_digests, (ref,), {}, 0, ())


@pytest.mark.parametrize(
    ("ref", "entries", "want"),
    [
        # a local build later pushed elsewhere: no digest of its own repository
        ("sglforge-standin/sglang-build:0.5.14", (f"127.0.0.1:59575/team/sglang@{A}",), None),
        # the other repository's entry first: the own one is still found
        (
            "127.0.0.1:5000/sglforge/sglang:v1",
            (f"127.0.0.1:59575/team/sglang@{A}", f"127.0.0.1:5000/sglforge/sglang@{B}"),
            B,
        ),
        # Docker Hub's spelling: the engine drops docker.io/ and library/
        ("docker.io/library/ubuntu:24.04", (f"ubuntu@{A}",), A),
        ("lmsysorg/sglang:v0.5.14-rocm700-mi35x", (f"lmsysorg/sglang@{B}",), B),
        # a digest reference names its own repository too
        (f"127.0.0.1:5000/team/sglang@{A}", (f"127.0.0.1:5000/team/sglang@{A}",), A),
        # an image ID has no repository
        ("sha256:" + "f" * 64, (f"ubuntu@{A}",), None),
        ("", (f"ubuntu@{A}",), None),
    ],
)
def test_the_digest_is_the_references_own_repository_s(
    ref: str, entries: tuple[str, ...], want: str | None
) -> None:
    assert _info(ref, *entries).digest == want
    assert digests_in(entries, ref) == (() if want is None else (want,))


def test_a_base_known_elsewhere_is_built_from_its_own_name_not_the_other_registry() -> None:
    info = _info("sglforge-standin/sglang-build:0.5.14", f"127.0.0.1:59575/team/sglang@{A}")
    base = Base(ref=info.ref, id=info.id, digest=info.digest)
    assert from_reference(base) == "sglforge-standin/sglang-build:0.5.14"
    assert base.pinned == info.id  # the inputs key still names exactly this image
