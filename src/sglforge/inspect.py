"""``sglforge inspect``: the provenance of an image, for anyone holding it.

Read from the image itself: its labels (OCI and ``io.sglforge.*``) and the manifest that
``sglforge build`` writes to ``/opt/sglforge/manifest.json`` (upstream version and commit,
patches with checksums, queue hash, target and GPU arch, base image and digest). The smoke
figures measured at publish time are not in the image (labels are fixed before the smoke run);
they come from the release record that matches the image's digest: the one under
``build/releases/`` when there is a checkout, else the one ``publish`` pushed next to the image
as the tag ``<immutable tag>-release``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sglforge.engine import registry as reg
from sglforge.errors import SglforgeError
from sglforge.release import PatchInfo, Smoke, find_by_digest

MANIFEST_PATH = "/opt/sglforge/manifest.json"
OCI = "org.opencontainers.image"
SGLFORGE = "io.sglforge."


@dataclass(frozen=True)
class Provenance:
    """What an image holds and where it came from."""

    image: str
    id: str | None = None
    repo_digests: tuple[str, ...] = ()
    sglang_version: str = ""
    upstream_url: str = ""
    source: str = ""  # the project's repository (org.opencontainers.image.source)
    revision: str = ""  # the project's commit the image was built from
    upstream_source: str = ""
    upstream_ref: str = ""
    upstream_commit: str = ""
    queue_hash: str = ""
    patches: tuple[PatchInfo, ...] = ()
    target: str = ""
    rocm: str = ""
    gpu_arch: str = ""
    mode: str = ""
    base: str = ""
    base_digest: str = ""
    built_by: str = ""
    created: str = ""
    manifest_found: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    release: str | None = None
    published_at: str | None = None
    references: tuple[str, ...] = ()
    smoke: Smoke | None = None
    tested: bool | None = None  # None: no release record found for this image
    # Config items (tuned tables): name, installed path, sha256, status, origin (issue 13).
    configs: tuple[Mapping[str, Any], ...] = ()

    @property
    def upstream_version(self) -> str:
        return self.sglang_version

    @property
    def is_sglforge_image(self) -> bool:
        """True when the image carries sglforge's labels or manifest."""
        return self.manifest_found or bool(self.queue_hash)


def provenance_from(
    image: str,
    labels: Mapping[str, str],
    manifest: Mapping[str, Any] | None,
    statuses: Mapping[str, str] | None = None,
) -> Provenance:
    """Provenance from labels and the manifest (the manifest wins where both say something).

    ``statuses`` maps a patch sha256 to its Upstream-Status when the manifest has none (the
    queue on disk knows it for patches with the same checksum).
    """
    m: Mapping[str, Any] = manifest or {}
    up: Mapping[str, Any] = m.get("upstream") or {}
    queue: Mapping[str, Any] = m.get("queue") or {}
    base: Mapping[str, Any] = m.get("base") or {}
    statuses = statuses or {}

    def label(key: str) -> str:
        return str(labels.get(key, "") or "")

    patches: list[PatchInfo] = []
    for p in queue.get("patches") or m.get("patches") or ():
        if not isinstance(p, Mapping) or not p.get("name"):
            continue
        sha = str(p.get("sha256", ""))
        status = str(p.get("upstream_status") or p.get("status") or statuses.get(sha, ""))
        patches.append(
            PatchInfo(
                name=str(p["name"]),
                subject=str(p.get("subject", "")),
                sha256=sha,
                kind=str(p.get("kind", "")),
                upstream_status=status,
            )
        )
    if not patches and label(SGLFORGE + "patches"):
        # No manifest: the label lists names only (no checksums to vouch for them).
        patches = [PatchInfo(n) for n in label(SGLFORGE + "patches").split(",") if n]
    fork_labels = SGLFORGE + "upstream.source" in labels  # OCI source/revision name the fork
    configs = [dict(c) for c in m.get("configs") or () if isinstance(c, Mapping)]
    if not configs:  # no manifest: the labels name each item's path and checksum
        for key, value in sorted(labels.items()):
            if key.startswith(SGLFORGE + "config."):
                path, _, sha = str(value).partition(" sha256:")
                configs.append(
                    {
                        "name": key.removeprefix(SGLFORGE + "config."),
                        "installed": path,
                        "sha256": sha,
                    }
                )
    return Provenance(
        configs=tuple(configs),
        image=image,
        sglang_version=str(m.get("sglang_version") or label(SGLFORGE + "sglang-version")),
        # Images from before io.sglforge.upstream.* named upstream in the OCI labels.
        upstream_url=str(
            up.get("url") or label(SGLFORGE + "upstream.source") or label(f"{OCI}.source")
        ),
        source=label(f"{OCI}.source") if fork_labels else "",
        revision=label(f"{OCI}.revision") if fork_labels else "",
        upstream_source=str(up.get("source") or label(SGLFORGE + "upstream")),
        upstream_ref=str(up.get("ref") or label(SGLFORGE + "upstream-ref")),
        upstream_commit=str(
            up.get("revision")
            or up.get("commit")
            or label(SGLFORGE + "upstream.revision")
            or (label(f"{OCI}.revision") if not fork_labels else "")
            or label(SGLFORGE + "upstream-commit")
        ),
        queue_hash=str(queue.get("hash") or label(SGLFORGE + "queue-hash")),
        patches=tuple(patches),
        target=str(m.get("target") or label(SGLFORGE + "target")),
        rocm=str(m.get("rocm") or label(SGLFORGE + "rocm")),
        gpu_arch=str(m.get("gpu_arch") or label(SGLFORGE + "gpu-arch")),
        mode=str(m.get("mode") or label(SGLFORGE + "mode")),
        base=str(base.get("name") or label(f"{OCI}.base.name")),
        base_digest=str(base.get("digest") or label(f"{OCI}.base.digest")),
        built_by=str(m.get("sglforge") or label(SGLFORGE + "version")),
        created=label(f"{OCI}.created"),
        manifest_found=bool(m),
        labels={
            k: str(v)
            for k, v in sorted(labels.items())
            if k.startswith(SGLFORGE) or k.startswith(OCI)
        },
    )


def queue_statuses(root: Path | None) -> dict[str, str]:
    """Upstream-Status by patch sha256, from the queue on disk (empty without a checkout)."""
    if root is None:
        return {}
    try:
        from sglforge.patches.series import load_queue

        queue = load_queue(root)
    except (SglforgeError, OSError):
        return {}  # inspect works without a checkout; statuses are then what the image says
    return {p.sha256: p.upstream_status for p in queue.patches if p.upstream_status}


def _registry_record(repo: str, digest: str, labels: Mapping[str, str]) -> Any:
    """The release record ``publish`` pushed next to the image (``<tag>-release``), if any."""
    from sglforge.publish import RECORD_FOR_LABEL, RECORD_LABEL, record_ref_for
    from sglforge.release import from_dict

    tag = labels.get(f"{OCI}.ref.name")
    if not tag or "/" not in repo:
        return None
    ref = record_ref_for(f"{repo}:{tag}")
    try:
        found = reg.registry_labels(ref, reg.credentials(reg.parse_ref(ref).registry))
        if found.get(RECORD_FOR_LABEL) != digest or RECORD_LABEL not in found:
            return None
        return from_dict(json.loads(found[RECORD_LABEL]), ref)
    except (SglforgeError, ValueError):
        return None  # no record published, or the registry is not reachable from here


def inspect_image(image: str, root: Path | None = None, pull: bool = False) -> Provenance:
    """Provenance of a local image (pulled first with ``pull``), plus its release record."""
    if pull:
        reg.pull(image, reg.credentials(reg.parse_ref(image).registry))
    attrs = reg.image_attrs(image)
    config: Mapping[str, Any] = attrs.get("Config") or {}
    labels = dict(config.get("Labels") or {})
    raw = reg.read_image_file(image, MANIFEST_PATH)
    manifest: dict[str, Any] | None = None
    if raw:
        try:
            loaded = json.loads(raw)
            manifest = loaded if isinstance(loaded, dict) else None
        except json.JSONDecodeError:
            manifest = None
    prov = provenance_from(image, labels, manifest, queue_statuses(root))
    repo_digests = tuple(str(d) for d in attrs.get("RepoDigests") or ())
    prov = replace(prov, id=str(attrs.get("Id") or "") or None, repo_digests=repo_digests)
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
            )
    return prov
