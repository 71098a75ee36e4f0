"""The image contract: what an sglforge image says about itself, written and read back here.

Owns every label key (OCI ``org.opencontainers.image.*`` and our ``io.sglforge.*``), the
manifest at ``/opt/sglforge/manifest.json`` and its schema, the facts both are made from
(``ImageFacts``: upstream, patches, base; and the added files), the inputs key that hashes
them, and reading them back into a ``Provenance``. ``build`` writes the contract,
``inspect``, ``publish``, ``release`` and ``smoke`` read it; images already published must
stay readable, so the readers also accept the keys older images carry.

Pure: no engine, no git, no files (``inspect`` fetches labels and the manifest from images).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NotRequired, Protocol, TypedDict

from sglforge import __version__
from sglforge.targets import BuildTarget
from sglforge.urls import scrub, scrub_secrets, scrub_text
from sglforge.util import plural, sha256_bytes

MANIFEST_PATH = "/opt/sglforge/manifest.json"
MANIFEST_SCHEMA = "sglforge.manifest/1"
LICENSE = "Apache-2.0"  # sglang's license; the overlay only adds its patched files

OCI = "org.opencontainers.image"
OCI_VERSION = f"{OCI}.version"
OCI_CREATED = f"{OCI}.created"
OCI_TITLE = f"{OCI}.title"
OCI_DESCRIPTION = f"{OCI}.description"
OCI_LICENSES = f"{OCI}.licenses"
OCI_REF_NAME = f"{OCI}.ref.name"
# The project's own repository and commit (GHCR links the package to it; Renovate reads the
# changelog there). Images from before io.sglforge.upstream.* named upstream here.
OCI_SOURCE = f"{OCI}.source"
OCI_REVISION = f"{OCI}.revision"
OCI_BASE_NAME = f"{OCI}.base.name"
OCI_BASE_DIGEST = f"{OCI}.base.digest"

PREFIX = "io.sglforge."
# Also the label of every object the engine creates (sglforge.engine.LABEL, which may not
# import this module: engine/ never imports core).
LABEL_MANAGED = PREFIX + "managed"
LABEL_INPUTS = PREFIX + "inputs"  # the hash of everything the image is made of
LABEL_ENTRYPOINT_RESET = PREFIX + "base.entrypoint-reset"  # the base ENTRYPOINT the overlay reset
LABEL_QUEUE = PREFIX + "queue-hash"
LABEL_PATCHES = PREFIX + "patches"  # patch names, comma-separated
LABEL_TARGET = PREFIX + "target"
LABEL_ROCM = PREFIX + "rocm"
LABEL_GPU_ARCH = PREFIX + "gpu-arch"
LABEL_MODE = PREFIX + "mode"
LABEL_UPSTREAM = PREFIX + "upstream"  # what was fetched (a mirror, a path, pypi:sglang)
LABEL_UPSTREAM_REF = PREFIX + "upstream-ref"
LABEL_UPSTREAM_COMMIT = PREFIX + "upstream-commit"
LABEL_UPSTREAM_WHEEL = PREFIX + "upstream.wheel"  # "<file name> sha256:<hex>" (pypi: sources)
LABEL_UPSTREAM_SOURCE = PREFIX + "upstream.source"  # the pinned repository
LABEL_UPSTREAM_REVISION = PREFIX + "upstream.revision"  # the pinned commit
LABEL_SGLANG_VERSION = PREFIX + "sglang-version"
LABEL_TOOL = PREFIX + "version"  # the sglforge that built the image
# One per config item (tuned table): ``io.sglforge.config.<name>`` = "<path> sha256:<hex>".
LABEL_CONFIG_PREFIX = PREFIX + "config."
# On the release record's sibling tag (sglforge.release): the record and the image's digest.
LABEL_RELEASE = PREFIX + "release"
LABEL_RELEASE_FOR = PREFIX + "release-for"
# On a release record's image: "gpu", or "standin-cpu" when the smoke and bench ran on a stand-in.
LABEL_SMOKE_HARDWARE = PREFIX + "smoke.hardware"
# The scan waivers the queue's Fixes-Scan: trailers give (compact JSON, "[]" for none; issue 31).
LABEL_SCAN_WAIVERS = PREFIX + "scan-waivers"
# The labels every image sglforge builds carries; an image with some but not all of them is
# reported naming the missing ones (``Provenance.missing_labels``).
REQUIRED_LABELS = (LABEL_QUEUE, LABEL_PATCHES, LABEL_TARGET)
# Any of these says the image claims to be one sglforge built (``io.sglforge.managed`` alone
# does not: the engine puts it on every object it creates, test bases included).
IMAGE_LABELS = (*REQUIRED_LABELS, LABEL_INPUTS, LABEL_MODE, LABEL_GPU_ARCH, LABEL_UPSTREAM_COMMIT)


@dataclass(frozen=True)
class UpstreamFacts:
    """Where the patched tree came from, as labels and the manifest record it."""

    url: str  # the pinned repository
    source: str  # what was actually fetched (a mirror, a path, pypi:sglang)
    ref: str
    commit: str  # commit the patches were applied on (in ``source``)
    revision: str  # the upstream commit for the labels (the pin's when known)
    # For a pypi: source, the released wheel the tree was taken from: the real provenance
    # (the history's commits are sglforge's own).
    wheel: str = ""
    wheel_sha256: str = ""

    def __post_init__(self) -> None:
        # Labels, the manifest and release records show these: no token leaves with them.
        object.__setattr__(self, "url", scrub(self.url))
        object.__setattr__(self, "source", scrub_text(self.source, record=True))


class PatchLike(Protocol):
    """What :meth:`PatchFacts.of` reads of a patch (this module imports no queue code)."""

    @property
    def name(self) -> str: ...
    @property
    def subject(self) -> str: ...
    @property
    def sha256(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def upstream_status(self) -> str: ...


@dataclass(frozen=True)
class PatchFacts:
    """A patch as an image and its release record name it: name, subject, checksum, status.

    Field order is the release record's (``build/releases/*.json`` lists fields in it).
    """

    name: str
    subject: str = ""
    sha256: str = ""
    kind: str = ""
    upstream_status: str = ""

    @classmethod
    def of(cls, patch: PatchLike) -> PatchFacts:
        """The facts of a queue's patch (``queue.series.Patch``); free text without the
        credentials lint refuses (it reaches the image's manifest and the release record)."""
        return cls(
            patch.name,
            scrub_secrets(patch.subject),
            patch.sha256,
            patch.kind,
            scrub_secrets(patch.upstream_status),
        )

    @property
    def slug(self) -> str:
        """The name without its series number (patches are renumbered when others drop)."""
        return re.sub(r"^\d+-", "", self.name)


@dataclass(frozen=True)
class Base:
    """The base image of an overlay and what inspecting it told (None before that)."""

    ref: str
    id: str | None = None
    digest: str | None = None
    sglang_version: str | None = None
    package_path: str | None = None
    # The base's ENTRYPOINT and CMD: an overlay resets an ENTRYPOINT (release images have
    # none, and `docker run IMAGE python3 -m sglang.launch_server` must run the server).
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] | None = None

    @property
    def pinned(self) -> str | None:
        """The identity that goes into labels and the inputs key: registry digest or ID."""
        return self.digest or self.id


@dataclass(frozen=True)
class ContextFile:
    """One file the image adds: repository path, where it goes in the image, its content."""

    path: str
    dest: str
    size: int
    sha256: str
    mode: int
    link: str | None = None  # symlink target, when the patched tree holds a symlink


@dataclass(frozen=True)
class ScanWaiver:
    """A scan fail (``finding``: ``KIND WHERE``) a queue patch waives, touching ``file``."""

    finding: str
    patch: str
    file: str

    def to_dict(self) -> dict[str, str]:
        return {"finding": self.finding, "patch": self.patch, "file": self.file}


FIXES_SCAN = "Fixes-Scan"  # the trailer that waives a scan finding (scan.findings uses it)


class TrailedPatch(Protocol):
    """What :func:`queue_scan_waivers` reads of a queue patch (``queue.series.Patch``)."""

    @property
    def name(self) -> str: ...
    @property
    def files(self) -> tuple[str, ...]: ...
    @property
    def paths(self) -> tuple[str, ...]: ...
    @property
    def trailers(self) -> tuple[tuple[str, str], ...]: ...


def fixes_scan_keys(patch: TrailedPatch) -> list[str]:
    """The ``KIND WHERE`` keys ``patch``'s ``Fixes-Scan:`` trailers name (whitespace folded)."""
    keys = (" ".join(v.split()) for k, v in patch.trailers if k.lower() == FIXES_SCAN.lower())
    return [key for key in keys if key]


def touched_paths(patch: TrailedPatch) -> set[str]:
    """Every path ``patch`` changes or reads (a rename's old path too), without ``a/``/``b/``:
    the files a ``Fixes-Scan:`` trailer of it may name."""
    return {p.removeprefix("a/").removeprefix("b/") for p in (*patch.files, *patch.paths)}


def queue_scan_waivers(patches: Sequence[TrailedPatch]) -> tuple[ScanWaiver, ...]:
    """The waivers the queue alone can give, as the image records them (no scan needed, so
    the same queue keeps the same manifest and tag): each ``Fixes-Scan: KIND FILE`` whose
    patch touches FILE (the rule of ``sglforge.scan.waivers``), and each ``KIND ENTRY``
    naming a config entry (no ``/``) on a patch that changes some file, kept with its first
    file. A trailer naming a file its patch does not touch is no waiver and is left out.
    Which of them a scan used, and which it refused, is the release record's ``scan``."""
    out: list[ScanWaiver] = []
    for patch in patches:
        touched = sorted(touched_paths(patch))
        for key in fixes_scan_keys(patch):
            where = key.partition(" ")[2]
            if where in touched:
                out.append(ScanWaiver(key, patch.name, where))
            elif where and "/" not in where and touched:
                out.append(ScanWaiver(key, patch.name, touched[0]))
    return tuple(out)


def waivers_label(waivers: Sequence[ScanWaiver]) -> str:
    """The ``io.sglforge.scan-waivers`` label: compact sorted JSON, ``[]`` when none."""
    return json.dumps([w.to_dict() for w in waivers], separators=(",", ":"), sort_keys=True)


def _waivers_from(value: object) -> tuple[ScanWaiver, ...] | None:
    """Waivers read back from a manifest list or a label's JSON; None when absent or not of
    the shape written (an image may hold anything there)."""
    if isinstance(value, str):
        if len(value) > MANIFEST_MAX_BYTES:
            return None
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return None
    if not isinstance(value, list):
        return None
    out = []
    for row in value:
        if not isinstance(row, dict) or not all(
            isinstance(row.get(k), str) for k in ("finding", "patch", "file")
        ):
            return None
        out.append(ScanWaiver(row["finding"], row["patch"], row["file"]))
    return tuple(out)


@dataclass(frozen=True)
class ImageFacts:
    """What an image is made of: the facts its labels, manifest and inputs key all state.

    The image's own name is not among them: it is derived from them and the inputs key
    (:meth:`image_ref`), and the key hashes a manifest that names the image.
    """

    version: str
    target: BuildTarget
    mode: str
    base: Base | None  # the overlay's base; None for a source build
    upstream: UpstreamFacts
    queue_hash: str
    patches: tuple[PatchFacts, ...]
    # What the queue's Fixes-Scan: trailers waive (scan.waivers.queue_waivers): from the
    # queue alone, so the same inputs keep the same manifest and tag.
    scan_waivers: tuple[ScanWaiver, ...] = ()

    def image_ref(self, inputs: str | None = None) -> str:
        """``<repository>:v<version>-<rocm>-<target>-q<queue>[-i<inputs>]``."""
        return self.target.image_ref(self.version, self.queue_hash, inputs)


@dataclass(frozen=True)
class Smoke:
    """What the smoke run (and the bench, when the scenario has one) measured before publishing.

    ``hardware`` is ``"gpu"``, or ``"standin-cpu"`` for a scenario with ``accelerator =
    "none"``: such a run never counts as a GPU target's smoke or bench. ``gpus`` holds the
    smoke host's GPU facts as read on the node (name, count, gfx, ROCm and driver versions).
    """

    passed: bool
    scenario: str = ""
    verdict: str = ""
    figures: Mapping[str, object] = field(default_factory=dict)  # SmokeFigures.as_dict()
    hardware: str = "gpu"
    gpus: Mapping[str, object] = field(default_factory=dict)
    bench: Mapping[str, object] | None = None  # BenchFigures.as_dict(), as the record keeps it

    @property
    def standin(self) -> bool:
        return self.hardware != "gpu"


# --- the manifest's shape (``/opt/sglforge/manifest.json``, as ``make_manifest`` writes it) ------


class ManifestBase(TypedDict):
    name: str
    digest: str | None
    entrypoint_reset: NotRequired[list[str]]


class ManifestUpstream(TypedDict):
    url: str
    source: str
    ref: str
    commit: str
    revision: str
    wheel: NotRequired[str]  # pypi: sources, flat as the shape check wants
    wheel_sha256: NotRequired[str]


class ManifestPatch(TypedDict):
    name: str
    sha256: str
    kind: str
    subject: str
    upstream_status: str


class ManifestQueue(TypedDict):
    hash: str
    patches: list[ManifestPatch]


class ManifestFile(TypedDict):
    path: str
    dest: str
    sha256: str
    size: int


class Manifest(TypedDict):
    """The manifest a build writes. Reading one back from an image (``parse_manifest``) gives
    a plain mapping: images built by older sglforge releases hold older shapes."""

    schema: str
    image: str
    sglang_version: str
    target: str
    rocm: str
    gpu_arch: str
    mode: str
    base: ManifestBase | None
    upstream: ManifestUpstream
    queue: ManifestQueue
    files: list[ManifestFile]
    deleted: list[str]
    sglforge: str
    configs: NotRequired[list[dict[str, Any]]]  # config items (``overlay_configs.Staged``)
    scan_waivers: NotRequired[list[dict[str, str]]]  # ``ScanWaiver.to_dict`` rows (issue 31)


# --- writing ----------------------------------------------------------------------------------


def make_manifest(
    facts: ImageFacts, *, image: str, files: Sequence[ContextFile], deleted: Sequence[str]
) -> Manifest:
    """The provenance manifest written to ``/opt/sglforge/manifest.json`` (no timestamps)."""
    target, base, upstream = facts.target, facts.base, facts.upstream
    base_entry: ManifestBase | None = None
    if base:
        base_entry = {"name": base.ref, "digest": base.pinned}
        if base.entrypoint:
            base_entry["entrypoint_reset"] = list(base.entrypoint)
    up: ManifestUpstream = {
        "url": upstream.url,
        "source": upstream.source,
        "ref": upstream.ref,
        "commit": upstream.commit,
        "revision": upstream.revision,
    }
    if upstream.wheel:  # flat, as the manifest's shape check wants: the wheel's name and sha256
        up["wheel"], up["wheel_sha256"] = upstream.wheel, upstream.wheel_sha256
    return {
        "schema": MANIFEST_SCHEMA,
        "image": image,
        "sglang_version": facts.version,
        "target": target.name,
        "rocm": target.rocm.name,
        "gpu_arch": target.gpu_arch,
        "mode": facts.mode,
        "base": base_entry,
        "upstream": up,
        "queue": {
            "hash": facts.queue_hash,
            "patches": [
                {
                    "name": p.name,
                    "sha256": p.sha256,
                    "kind": p.kind,
                    "subject": p.subject,
                    "upstream_status": p.upstream_status,
                }
                for p in facts.patches
            ],
        },
        "files": [
            {"path": f.path, "dest": f.dest, "sha256": f.sha256, "size": f.size} for f in files
        ],
        "deleted": list(deleted),
        "sglforge": __version__,
        "scan_waivers": [w.to_dict() for w in facts.scan_waivers],
    }


def manifest_bytes(manifest: Mapping[str, Any]) -> bytes:
    """The manifest as the image holds it (sorted keys: the same facts give the same bytes)."""
    return (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()


def make_labels(
    facts: ImageFacts,
    *,
    image: str,
    inputs: str | None,
    created: str,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """OCI labels plus sglforge's own (queue hash, patches, target, GPU arch, mode, inputs)."""
    version, target, mode = facts.version, facts.target, facts.mode
    base, upstream, queue_hash = facts.base, facts.upstream, facts.queue_hash
    names = [p.name for p in facts.patches]
    described = ", ".join(names) if names else "no patches"
    labels = {
        OCI_VERSION: version,
        OCI_CREATED: created,
        OCI_TITLE: f"sglang {version} for {target.name} ({target.gpu_arch}, "
        f"{target.rocm.name}) + sglforge queue q{queue_hash[:8]}",
        OCI_DESCRIPTION: (
            f"sglang {upstream.ref} with {plural(len(names), 'sglforge patch', 'es')}: "
            f"{described}. Built by sglforge {__version__} ({mode} mode). Run (no ENTRYPOINT, "
            f"as the release image): docker run ... {image} python3 -m sglang.launch_server "
            "--model-path MODEL [server options]"
        ),
        OCI_LICENSES: LICENSE,
        OCI_REF_NAME: image.rpartition(":")[2],
        LABEL_MANAGED: "1",
        LABEL_QUEUE: queue_hash,
        LABEL_PATCHES: ",".join(names),
        LABEL_TARGET: target.name,
        LABEL_ROCM: target.rocm.name,
        LABEL_GPU_ARCH: target.gpu_arch,
        LABEL_MODE: mode,
        LABEL_UPSTREAM: upstream.source,
        LABEL_UPSTREAM_SOURCE: upstream.url,
        LABEL_UPSTREAM_REVISION: upstream.revision,
        LABEL_UPSTREAM_REF: upstream.ref,
        LABEL_UPSTREAM_COMMIT: upstream.commit,
        **(
            {LABEL_UPSTREAM_WHEEL: f"{upstream.wheel} sha256:{upstream.wheel_sha256}"}
            if upstream.wheel
            else {}
        ),
        LABEL_SGLANG_VERSION: version,
        LABEL_TOOL: __version__,
        LABEL_SCAN_WAIVERS: waivers_label(facts.scan_waivers),
    }
    if base is not None:
        labels[OCI_BASE_NAME] = base.ref
        if base.pinned:
            labels[OCI_BASE_DIGEST] = base.pinned
        if base.entrypoint:
            labels[LABEL_ENTRYPOINT_RESET] = json.dumps(list(base.entrypoint))
    if inputs:
        labels[LABEL_INPUTS] = inputs
    # Given labels (--label, the project's source and revision) win over the defaults.
    labels.update(extra or {})
    return labels


def inputs_key(facts: ImageFacts, *, dockerfile: str, manifest: Mapping[str, Any]) -> str | None:
    """The hash of everything that decides the image's content; None without a base."""
    pinned = facts.base.pinned if facts.base else None
    if facts.mode == "overlay" and not pinned:
        return None
    doc = {
        "base": pinned,
        "queue": facts.queue_hash,
        "commit": facts.upstream.commit,
        "dockerfile": sha256_bytes(dockerfile.encode()),
        "target": facts.target.key,
        "mode": facts.mode,
        "manifest": sha256_bytes(manifest_bytes(manifest)),
    }
    return sha256_bytes(json.dumps(doc, sort_keys=True).encode())


def describe(
    facts: ImageFacts,
    *,
    files: Sequence[ContextFile],
    deleted: Sequence[str],
    key_dockerfile: str,
    created: str,
    extra_labels: Mapping[str, str] | None = None,
) -> tuple[str, Manifest, str | None, dict[str, str]]:
    """Image name, manifest, inputs key and labels of a build: the same facts, said four ways.

    The key is taken over the manifest naming the queue-only reference (a key cannot hash a
    name it is part of); the image is then named with both (``targets.image_tag``).
    """
    manifest = make_manifest(facts, image=facts.image_ref(), files=files, deleted=deleted)
    key = inputs_key(facts, dockerfile=key_dockerfile, manifest=manifest)
    image = facts.image_ref(key)
    manifest = make_manifest(facts, image=image, files=files, deleted=deleted)
    labels = make_labels(facts, image=image, inputs=key, created=created, extra=extra_labels)
    return image, manifest, key, labels


def source_labels(url: str | None, commit: str | None) -> dict[str, str]:
    """The OCI source/revision labels naming the project's repository and commit, when known."""
    labels = {}
    if url:
        labels[OCI_SOURCE] = scrub(url)
    if commit:
        labels[OCI_REVISION] = commit
    return labels


def config_label(name: str, installed: str, sha256: str) -> tuple[str, str]:
    """The label recording one config item: its installed path and checksum."""
    return LABEL_CONFIG_PREFIX + name, f"{installed} sha256:{sha256}"


# --- reading back -----------------------------------------------------------------------------


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
    upstream_commit: str = ""  # a commit, never a tag
    upstream_revision: str = ""  # what the labels name upstream's revision (a tag for pypi:)
    upstream_wheel: str = ""  # pypi: sources: the wheel's file name
    upstream_wheel_sha256: str = ""
    queue_hash: str = ""
    patches: tuple[PatchFacts, ...] = ()
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
    coverage: Mapping[str, object] | None = None  # the publish coverage gate, from the record
    # Config items (tuned tables): name, installed path, sha256, status, origin (issue 13).
    configs: tuple[Mapping[str, Any], ...] = ()
    # No release record: the newest local smoke run of this very image (not published)
    local_smoke: Smoke | None = None
    local_smoke_report: str = ""
    local_smoke_at: str = ""
    # The scan waivers the image records (manifest, else label); None: the image records
    # none (built before issue 31, or unreadable). ``scan``: the release's scan gate as its
    # record keeps it (waived and refused trailers, or why it did not run).
    scan_waivers: tuple[ScanWaiver, ...] | None = None
    scan: Mapping[str, object] | None = None

    @property
    def upstream_version(self) -> str:
        return self.sglang_version

    @property
    def is_sglforge_image(self) -> bool:
        """True when the image carries sglforge's labels or manifest."""
        return (
            self.manifest_found
            or bool(self.queue_hash)
            or any(self.labels.get(k) for k in IMAGE_LABELS)
        )

    @property
    def missing_labels(self) -> tuple[str, ...]:
        """The required ``io.sglforge.*`` labels the image lacks (``REQUIRED_LABELS``)."""
        return tuple(k for k in REQUIRED_LABELS if not self.labels.get(k))


def _a_commit(*candidates: object) -> str:
    """The first candidate that is a commit id (hex, 40 or 64 long); else the first given.
    A pypi: image's revision label is the tag: ``inspect`` shows the commit."""
    import re

    given = [str(c) for c in candidates if c]
    for c in given:
        if re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", c):
            return c
    return given[0] if given else ""


MANIFEST_MAX_BYTES = 16 << 20  # ours are a few kB; more is not a manifest of ours

# The manifest's shape, checked in this one place: what ``make_manifest`` writes. A key of the
# wrong type makes the whole manifest malformed (treated as absent): an image can hold any
# bytes at MANIFEST_PATH, and no reader past this point has to guard against them.
_STR = (str,)
_OPT_STR = (str, type(None))
_TOP: dict[str, tuple[type, ...]] = {
    "schema": (int, str),
    "image": _STR,
    "sglang_version": _OPT_STR,
    "target": _STR,
    "rocm": _STR,
    "gpu_arch": _STR,
    "mode": _STR,
    "sglforge": _STR,
    "base": (dict, type(None)),
    "upstream": (dict,),
    "queue": (dict,),
    "patches": (list,),
    "files": (list,),
    "deleted": (list,),
    "configs": (list,),
    "scan_waivers": (list,),
}


_SCALAR = (str, int, float, bool, type(None))


def _flat(value: object, lists: tuple[str, ...] = ()) -> bool:
    """A mapping of scalars; only the keys in ``lists`` may hold lists of strings."""
    if not isinstance(value, dict):
        return False
    return all(
        isinstance(v, _SCALAR)
        or (k in lists and isinstance(v, list) and all(isinstance(x, str) for x in v))
        for k, v in value.items()
    )


def manifest_shape_ok(data: object) -> bool:
    """Whether ``data`` has the shape ``make_manifest`` writes (unknown keys allowed)."""
    if not isinstance(data, dict):
        return False
    for key, types in _TOP.items():
        if key in data and not isinstance(data[key], types):
            return False
    base, upstream = data.get("base"), data.get("upstream")
    if base is not None and not _flat(base, lists=("entrypoint_reset",)):
        return False
    if upstream is not None and not _flat(upstream):
        return False
    queue = data.get("queue") or {}
    if not isinstance(queue.get("hash", ""), str):
        return False
    rows_of = ("patches", "files", "configs", "scan_waivers")
    for rows in (queue.get("patches"), *(data.get(k) for k in rows_of)):
        if rows is not None and not (isinstance(rows, list) and all(_flat(r) for r in rows)):
            return False
    return all(isinstance(d, str) for d in data.get("deleted") or [])


def parse_manifest(raw: bytes | str | None) -> dict[str, Any] | None:
    """The manifest from the file's bytes; None when absent or malformed: not UTF-8, not
    JSON, nested past reason, too large, or not of the shape ``make_manifest`` writes."""
    if not raw or len(raw) > MANIFEST_MAX_BYTES:
        return None
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        loaded = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return loaded if manifest_shape_ok(loaded) else None


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
    wheel_label = str(labels.get(LABEL_UPSTREAM_WHEEL, ""))
    queue: Mapping[str, Any] = m.get("queue") or {}
    base: Mapping[str, Any] = m.get("base") or {}

    def label(key: str) -> str:
        return str(labels.get(key, "") or "")

    fork_labels = LABEL_UPSTREAM_SOURCE in labels  # OCI source/revision name the fork
    return Provenance(
        configs=_configs_from(m, labels),
        image=image,
        sglang_version=str(m.get("sglang_version") or label(LABEL_SGLANG_VERSION)),
        # Images from before io.sglforge.upstream.* named upstream in the OCI labels.
        upstream_url=str(up.get("url") or label(LABEL_UPSTREAM_SOURCE) or label(OCI_SOURCE)),
        source=label(OCI_SOURCE) if fork_labels else "",
        revision=label(OCI_REVISION) if fork_labels else "",
        upstream_source=str(up.get("source") or label(LABEL_UPSTREAM)),
        upstream_ref=str(up.get("ref") or label(LABEL_UPSTREAM_REF)),
        # upstream's own commit (the revision) when it is one; a pypi: image's revision is the
        # tag, and then the commit of the tree the patches were applied on
        upstream_commit=_a_commit(
            up.get("revision"),
            label(LABEL_UPSTREAM_REVISION),
            label(OCI_REVISION) if not fork_labels else "",
            up.get("commit"),
            label(LABEL_UPSTREAM_COMMIT),
        ),
        upstream_revision=str(
            up.get("revision")
            or label(LABEL_UPSTREAM_REVISION)
            or (label(OCI_REVISION) if not fork_labels else "")
        ),
        upstream_wheel=str(up.get("wheel") or wheel_label.partition(" sha256:")[0]),
        upstream_wheel_sha256=str(up.get("wheel_sha256") or wheel_label.partition(" sha256:")[2]),
        queue_hash=str(queue.get("hash") or label(LABEL_QUEUE)),
        patches=_patches_from(m, labels, statuses or {}),
        target=str(m.get("target") or label(LABEL_TARGET)),
        rocm=str(m.get("rocm") or label(LABEL_ROCM)),
        gpu_arch=str(m.get("gpu_arch") or label(LABEL_GPU_ARCH)),
        mode=str(m.get("mode") or label(LABEL_MODE)),
        base=str(base.get("name") or label(OCI_BASE_NAME)),
        base_digest=str(base.get("digest") or label(OCI_BASE_DIGEST)),
        built_by=str(m.get("sglforge") or label(LABEL_TOOL)),
        created=label(OCI_CREATED),
        manifest_found=bool(m),
        scan_waivers=_waivers_from(m["scan_waivers"])
        if "scan_waivers" in m
        else _waivers_from(labels.get(LABEL_SCAN_WAIVERS)),
        labels={
            k: str(v)
            for k, v in sorted(labels.items())
            if k.startswith(PREFIX) or k.startswith(OCI)
        },
    )


def _patches_from(
    m: Mapping[str, Any], labels: Mapping[str, str], statuses: Mapping[str, str]
) -> tuple[PatchFacts, ...]:
    """The manifest's patches (its statuses, else those the queue knows by checksum); without a
    manifest, the names the label lists (no checksums to vouch for them)."""
    queue: Mapping[str, Any] = m.get("queue") or {}
    patches: list[PatchFacts] = []
    for p in queue.get("patches") or m.get("patches") or ():
        if not isinstance(p, Mapping) or not p.get("name"):
            continue
        sha = str(p.get("sha256", ""))
        status = str(p.get("upstream_status") or p.get("status") or statuses.get(sha, ""))
        patches.append(
            PatchFacts(
                name=str(p["name"]),
                subject=str(p.get("subject", "")),
                sha256=sha,
                kind=str(p.get("kind", "")),
                upstream_status=status,
            )
        )
    if not patches and labels.get(LABEL_PATCHES):
        return tuple(PatchFacts(n) for n in str(labels[LABEL_PATCHES]).split(",") if n)
    return tuple(patches)


def _configs_from(m: Mapping[str, Any], labels: Mapping[str, str]) -> tuple[dict[str, Any], ...]:
    """The manifest's config items; without a manifest, each item's path and checksum as the
    labels name them."""
    configs = [dict(c) for c in m.get("configs") or () if isinstance(c, Mapping)]
    if configs:
        return tuple(configs)
    for key, value in sorted(labels.items()):
        if key.startswith(LABEL_CONFIG_PREFIX):
            path, _, sha = str(value).partition(" sha256:")
            name = key.removeprefix(LABEL_CONFIG_PREFIX)
            configs.append({"name": name, "installed": path, "sha256": sha})
    return tuple(configs)
