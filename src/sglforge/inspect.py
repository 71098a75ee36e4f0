"""``sglforge inspect``: the provenance of an image, for anyone holding it.

Read from the image itself: its labels (OCI and ``io.sglforge.*``) and the manifest that
``sglforge build`` writes to ``/opt/sglforge/manifest.json`` (upstream version and commit,
patches with checksums, queue hash, target and GPU arch, base image and digest). The smoke
figures measured at publish time are not in the image (labels are fixed before the smoke run);
they come from the release record that matches the image's digest: the one under
``build/releases/`` when there is a checkout, else the one ``publish`` pushed next to the image
as the tag ``<immutable tag>-release``. What the labels and manifest mean is
``sglforge.provenance``'s; this module fetches them from an image and adds the record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from sglforge.engine import containers, registry
from sglforge.engine import images as engine_images
from sglforge.engine.credentials import credentials
from sglforge.engine.reference import parse as parse_reference
from sglforge.errors import SglforgeError
from sglforge.provenance import (
    MANIFEST_PATH,
    OCI_REF_NAME,
    Provenance,
    Smoke,
    parse_manifest,
    provenance_from,
)
from sglforge.release import Release, find_by_digest, record_from_labels, record_ref_for


def queue_statuses(root: Path | None) -> dict[str, str]:
    """Upstream-Status by patch sha256, from the queue on disk (empty without a checkout)."""
    if root is None:
        return {}
    try:
        from sglforge.queue.series import load_queue

        queue = load_queue(root)
    except (SglforgeError, OSError):
        return {}  # inspect works without a checkout; statuses are then what the image says
    return {p.sha256: p.upstream_status for p in queue.patches if p.upstream_status}


def _registry_record(repo: str, digest: str, labels: Mapping[str, str]) -> Release | None:
    """The release record ``publish`` pushed next to the image (``<tag>-release``), if any."""
    tag = labels.get(OCI_REF_NAME)
    if not tag or "/" not in repo:
        return None
    ref = record_ref_for(f"{repo}:{tag}")
    try:
        found = registry.registry_labels(ref, credentials(parse_reference(ref).registry))
        return record_from_labels(found, digest, ref)
    except (SglforgeError, ValueError):
        return None  # no record published, or the registry is not reachable from here


def image_manifest(image: str) -> dict[str, Any] | None:
    """The manifest ``build`` wrote into a local image; None for other images."""
    return parse_manifest(containers.read_file(image, MANIFEST_PATH))


def local_smoke(root: Path | None, image_id: str | None) -> tuple[Smoke, str, str] | None:
    """(smoke, report path, started at) of the newest smoke run of ``image_id`` under
    ``build/smoke/`` (what ``sglforge smoke`` wrote); None when there is none. Read only."""
    from sglforge.util import read_json

    if root is None or not image_id:
        return None
    found: list[tuple[str, Path, dict[str, Any]]] = []
    for path in (Path(root) / "build" / "smoke").glob("*/report.json"):
        try:
            data = read_json(path)  # bounded: size and nesting
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("image_id") == image_id:
            found.append((str(data.get("started_at") or ""), path, data))
    if not found:
        return None
    started, path, data = max(found, key=lambda f: (f[0], str(f[1])))
    smoke = Smoke(
        passed=bool(data.get("passed")),
        scenario=str(data.get("scenario") or ""),
        verdict=str(data.get("verdict") or ""),
        figures=dict(figures) if isinstance(figures := data.get("figures"), dict) else {},
    )
    return smoke, str(path), started


def inspect_image(image: str, root: Path | None = None, pull: bool = False) -> Provenance:
    """Provenance of a local image (pulled first with ``pull``), plus its release record."""
    if pull:
        engine_images.pull(image)
    info = engine_images.require(image)
    labels = dict(info.labels)
    prov = provenance_from(image, labels, image_manifest(image), queue_statuses(root))
    repo_digests = info.repo_digests
    prov = replace(prov, id=info.id or None, repo_digests=repo_digests)
    for repo_digest in repo_digests:
        repo, _, digest = repo_digest.partition("@")
        record = None
        if root is not None:
            try:
                record = find_by_digest(root, digest)
            except SglforgeError:
                record = None
        if record is None:
            record = _registry_record(repo, digest, labels)
        if record is not None:
            return replace(
                prov,
                release=record.version,
                published_at=record.published_at or record.date,
                references=record.references,
                smoke=record.smoke,
                tested=record.tested,
                coverage=record.coverage,
                scan=record.scan,
            )
    seen = local_smoke(root, info.id)
    if seen is not None:
        prov = replace(
            prov, local_smoke=seen[0], local_smoke_report=seen[1], local_smoke_at=seen[2]
        )
    return prov
