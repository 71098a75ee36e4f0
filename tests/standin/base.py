"""The stand-in base images for the tests: the one builder is ``sglforge.standin.base`` (the
wheel ships it for ``sglforge tryout``); this module adds what only tests need, the labels of
the objects a test creates and their clean-up.
"""

from __future__ import annotations

import contextlib
import uuid

import docker
import docker.errors

from sglforge.standin.base import (
    AITER_VERSION,
    DEBIAN_TAG,
    DEFAULT_SGLANG_VERSION,
    HASH_LABEL,
    MANAGED,
    PACKAGE_DIR,
    RELEASE_AITER_COMMIT,
    SERVER_PY,
    SGLANG_REPO,
    STANDIN,
    STANDIN_TOKENIZER,
    TRIMMED_INIT,
    WORKSPACE,
    _pyproject,
    aiter_clone,
    aiter_tree,
    aiter_tree_at,
    aiter_wheel,
    bench_deps,
    bench_wheels,
    build_tool_wheels,
    cache_dir,
    ensure_debian_base,
    ensure_sglang_base,
    release_wheel,
    replica_tree,
)

TEST = "io.sglforge.test"
SESSION = "io.sglforge.test.session"

__all__ = [
    "AITER_VERSION",
    "DEBIAN_TAG",
    "DEFAULT_SGLANG_VERSION",
    "HASH_LABEL",
    "MANAGED",
    "PACKAGE_DIR",
    "RELEASE_AITER_COMMIT",
    "SERVER_PY",
    "SESSION",
    "SGLANG_REPO",
    "STANDIN",
    "STANDIN_TOKENIZER",
    "TEST",
    "TRIMMED_INIT",
    "WORKSPACE",
    "_pyproject",
    "aiter_clone",
    "aiter_tree",
    "aiter_tree_at",
    "aiter_wheel",
    "bench_deps",
    "bench_wheels",
    "build_tool_wheels",
    "cache_dir",
    "cleanup",
    "ensure_debian_base",
    "ensure_sglang_base",
    "new_session_id",
    "object_labels",
    "release_wheel",
    "replica_tree",
]


def object_labels(session: str | None = None) -> dict[str, str]:
    """Labels every image and container a test creates must carry (plus an optional session)."""
    labels = {MANAGED: "1", TEST: "1"}
    if session:
        labels[SESSION] = session
    return labels


def new_session_id() -> str:
    """A short id that tags one pytest session's objects (so cleanup spares other sessions)."""
    return uuid.uuid4().hex[:12]


def cleanup(client: docker.DockerClient, session: str | None = None) -> list[str]:
    """Remove containers then images labelled ``io.sglforge.test=1``; returns what went.

    With ``session``, remove everything of that session but, of unlabelled-session objects,
    only stopped containers and images no container uses (other sessions may be running).
    """
    removed: list[str] = []
    # The engine's lists as they are (the low-level API): the SDK's list() inspects each object
    # again, and another worker (xdist) may remove one in between (404).
    api = client.api
    for c in api.containers(all=True, filters={"label": f"{TEST}=1"}):
        theirs = (c.get("Labels") or {}).get(SESSION)
        if session and theirs and theirs != session:
            continue
        if session and not theirs and c.get("State") == "running":
            continue
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            api.remove_container(c["Id"], force=True, v=True)
            removed.append(f"container {c['Id'][:12]} {(c.get('Names') or ['?'])[0].lstrip('/')}")
    for image in api.images(filters={"label": f"{TEST}=1"}):
        theirs = (image.get("Labels") or {}).get(SESSION)
        if session and theirs and theirs != session:
            continue
        force = not session or theirs == session
        tags = [t for t in image.get("RepoTags") or [] if t != "<none>:<none>"]
        for ref in tags or [image["Id"]]:
            # An image in use by another session's container refuses removal: leave it.
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                client.images.remove(ref, force=force, noprune=False)
                removed.append(f"image {ref}")
    return removed
