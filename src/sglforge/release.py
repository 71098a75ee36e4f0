"""Release records (``build/releases/<version>.json``, and next to the image in the registry)
and release entries in CHANGELOG.md.

A release is one published image: its references, digest, upstream pin, patch queue hash,
patches and the smoke figures measured before it was pushed. The CHANGELOG entry follows Keep a
Changelog: a ``## [version] - date`` heading, the upstream pin, the patches added, refreshed or
dropped since the previous release of the same target, and the smoke figures.

Both writes are idempotent (the version is the key: the same inputs never add a second entry)
and atomic (temporary file + rename). ``publish`` also pushes the record as the sibling tag
``<immutable tag>-release`` (its labels hold the record and the image's digest), where
``inspect`` finds it without a checkout.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglforge import changelog
from sglforge.changelog import Entry
from sglforge.engine import images as engine_images
from sglforge.engine import registry as reg
from sglforge.engine.credentials import Credentials
from sglforge.errors import ConfigError, SglforgeError
from sglforge.figures import BenchFigures
from sglforge.provenance import (
    LABEL_MANAGED,
    LABEL_RELEASE,
    LABEL_RELEASE_FOR,
    LABEL_SMOKE_HARDWARE,
    PatchFacts,
    Smoke,
)
from sglforge.util import atomic_write, confined, loads_bounded, one_line, plural, read_json

RECORD_SCHEMA = 1
RECORD_SUFFIX = "-release"  # the registry tag of a record: the image's immutable tag + this
CHANGELOG = "CHANGELOG.md"
_HEADING = re.compile(r"^## \[(?P<version>[^\]]+)\]", re.MULTILINE)
_UNTESTED = "**untested**"


@dataclass(frozen=True)
class Release:
    """One published image; ``version`` (the immutable tag) is the record's key."""

    version: str
    date: str
    target: str
    image: str
    digest: str
    references: tuple[str, ...]
    upstream_url: str
    upstream_ref: str
    upstream_commit: str
    upstream_version: str
    queue_hash: str
    patches: tuple[PatchFacts, ...]
    smoke: Smoke | None
    gpu_arch: str = ""
    base: str = ""
    base_digest: str = ""
    published_at: str = ""  # ISO 8601 UTC; orders releases made on the same day
    digests: tuple[str, ...] = ()  # other digests of the same version (rebuilt, other registry)
    schema: int = RECORD_SCHEMA
    # The publish coverage gate (sglforge.coverage.Gate.to_dict, or {"not_run": why}); None in
    # records written before it existed.
    coverage: Mapping[str, object] | None = None
    # The publish scan gate (issue 31): {"waived": [{finding, patch, file}], "refused":
    # [{finding, patch, why}]}, or {"not_run": why}; None in records written before it.
    scan: Mapping[str, object] | None = None

    @property
    def tested(self) -> bool:
        """True only when a smoke run on the target's hardware passed before the push (a
        stand-in run never counts)."""
        return self.smoke is not None and self.smoke.passed and not self.smoke.standin


@dataclass(frozen=True)
class PatchDiff:
    """Patches added, refreshed (same slug, new checksum) and dropped since a release."""

    previous: str | None
    added: tuple[PatchFacts, ...]
    refreshed: tuple[PatchFacts, ...]
    dropped: tuple[PatchFacts, ...]


@dataclass(frozen=True)
class Recorded:
    """What ``record_release`` did: the record's path and whether CHANGELOG.md changed."""

    record: Path
    record_written: bool
    changelog: Path
    changelog_written: bool
    diff: PatchDiff
    fork_version: str = ""  # the CHANGELOG heading: v<upstream version>-<n>


# --- records --------------------------------------------------------------------------------


def releases_dir(root: Path) -> Path:
    """The folder holding the release records."""
    return Path(root) / "build" / "releases"


def _safe(version: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]", "_", version)


def record_path(root: Path, version: str) -> Path:
    """Where the record for ``version`` lives."""
    return confined(releases_dir(root), f"{_safe(version)}.json", "release record", version)


def to_dict(release: Release) -> dict[str, Any]:
    """The record as JSON-ready data (``tested`` included for readers of the file)."""
    data = dataclasses.asdict(release)
    data["references"] = list(release.references)
    data["digests"] = list(release.digests)
    data["patches"] = [dataclasses.asdict(p) for p in release.patches]
    data["smoke"] = (
        None
        if release.smoke is None
        else {
            **dataclasses.asdict(release.smoke),
            "figures": dict(release.smoke.figures),
            "gpus": dict(release.smoke.gpus),
            "bench": None if release.smoke.bench is None else dict(release.smoke.bench),
        }
    )
    data["coverage"] = None if release.coverage is None else dict(release.coverage)
    data["scan"] = None if release.scan is None else dict(release.scan)
    data["tested"] = release.tested
    return data


def from_dict(data: object, source: Path | str = "<record>") -> Release:
    """A Release from record data; ConfigError naming the file if it is malformed (of any
    shape: a list, a number, fields of the wrong type)."""
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{source}: not a valid release record (a JSON {type(data).__name__}, not an object)",
            "remove it; the next sglforge publish writes it again",
        )
    try:
        smoke = data.get("smoke")
        return Release(
            version=str(data["version"]),
            date=str(data["date"]),
            target=str(data["target"]),
            image=str(data["image"]),
            digest=str(data["digest"]),
            references=tuple(str(r) for r in data.get("references", ())),
            upstream_url=str(data.get("upstream_url", "")),
            upstream_ref=str(data.get("upstream_ref", "")),
            upstream_commit=str(data.get("upstream_commit", "")),
            upstream_version=str(data.get("upstream_version", "")),
            queue_hash=str(data.get("queue_hash", "")),
            patches=tuple(PatchFacts(**p) for p in data.get("patches", ())),
            smoke=None
            if smoke is None
            else Smoke(
                passed=bool(smoke["passed"]),
                scenario=str(smoke.get("scenario", "")),
                verdict=str(smoke.get("verdict", "")),
                figures=dict(smoke.get("figures") or {}),
                hardware=str(smoke.get("hardware", "gpu")),
                gpus=dict(smoke.get("gpus") or {}),
                bench=smoke.get("bench"),
            ),
            gpu_arch=str(data.get("gpu_arch", "")),
            base=str(data.get("base", "")),
            base_digest=str(data.get("base_digest", "")),
            published_at=str(data.get("published_at", "")),
            digests=tuple(str(d) for d in data.get("digests", ())),
            schema=int(data.get("schema", RECORD_SCHEMA)),
            coverage=dict(data["coverage"]) if data.get("coverage") is not None else None,
            scan=_scan_of(data.get("scan")),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(
            f"{source}: not a valid release record ({type(exc).__name__}: {one_line(exc, 160)})",
            "remove the file; the next sglforge publish writes it again",
        ) from None


def _scan_of(value: object) -> dict[str, Any] | None:
    """The record's ``scan`` (waived and refused rows of strings, or ``not_run``); TypeError
    (a malformed record) when of another shape."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError("scan is not an object")
    if "not_run" in value:
        return {"not_run": str(value["not_run"])}
    out: dict[str, Any] = {}
    for key, fields in (
        ("waived", ("finding", "patch", "file")),
        ("refused", ("finding", "patch", "why")),
    ):
        rows = value.get(key) or []
        if not isinstance(rows, list) or not all(isinstance(r, Mapping) for r in rows):
            raise TypeError(f"scan.{key} is not a list of objects")
        out[key] = [{f: str(r.get(f, "")) for f in fields} for r in rows]
    return out


def load_record(path: Path) -> Release:
    """Read one release record."""
    try:
        data = read_json(path)  # bounded: size and nesting
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read release record: {exc}") from None
    return from_dict(data, path)  # its shape is checked there


def load_records(root: Path) -> list[Release]:
    """Every release record under build/releases/, oldest first."""
    folder = releases_dir(root)
    if not folder.is_dir():
        return []
    records = [load_record(p) for p in sorted(folder.glob("*.json"))]
    return sorted(records, key=lambda r: (r.published_at or r.date, r.version))


def find_by_digest(root: Path, digest: str) -> Release | None:
    """The newest record for an image digest (how ``inspect`` finds smoke figures)."""
    found = [r for r in load_records(root) if digest == r.digest or digest in r.digests]
    return found[-1] if found else None


def registry_records(repository: str, creds: Credentials | None = None) -> list[Release] | None:
    """The release records next to ``repository``'s images (its ``*-release`` tags).

    None when the registry cannot be asked (down, no such repository, refused): callers fall
    back to the local folder. A tag whose labels hold no readable record is left out.
    """
    tags = reg.remote_tags(repository)
    if tags is None:
        return None
    records = []
    for tag in tags:
        if not tag.endswith(RECORD_SUFFIX):
            continue
        where = f"{repository}:{tag}"
        try:
            raw = reg.registry_labels(where, creds).get(LABEL_RELEASE)
            if raw:
                records.append(from_dict(loads_bounded(raw), where))
        except (SglforgeError, ValueError):
            continue  # one unreadable record does not hide the others
    return records


def release_tags(repository: str, target: str) -> list[str] | None:
    """The release-record tags of ``target`` in ``repository``, from one read of its tag list
    (a record's tag names its target: ``v0.5.14-rocm700-mi355x-q…-release``; no record is
    read): ``[]`` when there are none or the registry holds no such repository, None when
    the registry cannot be asked."""
    tags = reg.remote_tags(repository, missing_ok=True)
    if tags is None:
        return None
    return [t for t in tags if t.endswith(RECORD_SUFFIX) and f"-{target}-q" in t]


def known_records(
    root: Path, repository: str | None = None, creds: Credentials | None = None
) -> list[Release]:
    """The records to compare a new release with: the registry's, else build/releases/."""
    found = registry_records(repository, creds) if repository else None
    return load_records(root) if found is None else found


def previous_release(
    root: Path,
    target: str,
    version: str,
    repository: str | None = None,
    creds: Credentials | None = None,
) -> Release | None:
    """The newest release of ``target`` other than ``version`` (registry first, see above)."""
    return _previous(known_records(root, repository, creds), target, version)


def _previous(records: Sequence[Release], target: str, version: str) -> Release | None:
    ordered = sorted(records, key=lambda r: (r.published_at or r.date, r.version))
    others = [r for r in ordered if r.target == target and r.version != version]
    return others[-1] if others else None


def diff_patches(previous: Release | None, patches: Sequence[PatchFacts]) -> PatchDiff:
    """Patches added, refreshed and dropped relative to ``previous`` (all added if None)."""
    if previous is None:
        return PatchDiff(None, tuple(patches), (), ())
    before = {p.slug: p for p in previous.patches}
    now = {p.slug: p for p in patches}
    added = tuple(p for p in patches if p.slug not in before)
    refreshed = tuple(p for p in patches if p.slug in before and before[p.slug].sha256 != p.sha256)
    dropped = tuple(p for p in previous.patches if p.slug not in now)
    return PatchDiff(previous.version, added, refreshed, dropped)


def _write_record(root: Path, release: Release) -> tuple[Path, bool]:
    path = record_path(root, release.version)
    if path.is_file():
        old = load_record(path)
        # The first record stands, with new references (another registry, a moved friendly
        # tag) and new digests (the same inputs rebuilt and pushed elsewhere) merged in; a
        # tested release replaces an untested one.
        refs = tuple(dict.fromkeys((*old.references, *release.references)))
        if old.tested or not release.tested:
            others = tuple(
                d for d in dict.fromkeys((*old.digests, release.digest)) if d != old.digest
            )
            merged = dataclasses.replace(old, references=refs, digests=others)
            if merged == old:
                return path, False
            release = merged
        else:
            others = tuple(d for d in (old.digest, *old.digests) if d != release.digest)
            release = dataclasses.replace(release, references=refs, digests=others)
    atomic_write(path, json.dumps(to_dict(release), indent=2) + "\n")
    return path, True


# --- the record in the registry ---------------------------------------------------------------


def record_ref_for(immutable: str) -> str:
    """Where the release record of ``immutable`` lives in the registry: a sibling tag."""
    return immutable + RECORD_SUFFIX


def record_labels(release: Release, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The labels of the record's image: the record (compact JSON) and the digest it is for."""
    record = json.dumps(to_dict(release), sort_keys=True, separators=(",", ":"))
    labels = {
        **dict(extra or {}),
        LABEL_MANAGED: "1",
        LABEL_RELEASE: record,
        LABEL_RELEASE_FOR: release.digest,
    }
    if release.smoke is not None:
        labels[LABEL_SMOKE_HARDWARE] = release.smoke.hardware
    return labels


def record_from_labels(
    labels: Mapping[str, str], digest: str, source: str = "<record>"
) -> Release | None:
    """The record a ``-release`` tag's labels hold, when it is for ``digest``; else None."""
    if labels.get(LABEL_RELEASE_FOR) != digest or LABEL_RELEASE not in labels:
        return None
    try:
        data = loads_bounded(labels[LABEL_RELEASE])
    except ValueError as exc:
        raise ConfigError(f"{source}: not a valid release record ({exc})") from None
    return from_dict(data, source)  # its shape is checked there


def push_release_record(
    root: Path,
    release: Release,
    immutable: str,
    creds: Credentials | None,
    labels: Mapping[str, str] | None = None,
    attempts: int = 4,
    backoff: float = 2.0,
) -> str:
    """Push the release record (smoke figures included) next to the image it describes.

    The image itself cannot carry figures measured after it was built, so anyone holding it
    finds them on the sibling tag ``<immutable>-release``: a one-file image whose labels hold
    the record and the digest it belongs to.
    """
    all_labels = record_labels(release, labels)
    files = {
        "Dockerfile": b"FROM scratch\nCOPY release.json /sglforge-release.json\n",
        "release.json": all_labels[LABEL_RELEASE].encode(),
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    ref = record_ref_for(immutable)
    log = confined(
        root / "build" / "logs", f"release-record-{release.version}.log", "log name", "the release"
    )
    engine_images.build(buf.getvalue(), ref, log, labels=all_labels)
    reg.push(ref, creds, attempts=attempts, backoff=backoff)
    return ref


# --- CHANGELOG.md ---------------------------------------------------------------------------


def fork_version(records: Sequence[Release], release: Release) -> str:
    """The fork's version of ``release``: ``v<upstream version>-<n>`` (``v0.5.14-1``).

    ``n`` counts the patch queues released on that upstream version, in order of first
    publication: every target and ROCm flavour built from one queue shares the version.
    """
    upstream = _upstream(release)
    ordered = sorted(records, key=lambda r: (r.published_at or r.date, r.version))
    queues = list(dict.fromkeys(r.queue_hash for r in ordered if _upstream(r) == upstream))
    n = queues.index(release.queue_hash) + 1 if release.queue_hash in queues else len(queues) + 1
    return f"v{upstream}-{n}"


def _upstream(release: Release) -> str:
    return (release.upstream_version or release.upstream_ref).removeprefix("v")


def _fmt_figure(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def _image_line(release: Release) -> str:
    line = f"Image `{release.image}` (`{release.digest}`), target {release.target}"
    line += f" ({release.gpu_arch})" if release.gpu_arch else ""
    if release.base:
        line += f", base `{release.base}`" + (
            f" (`{release.base_digest}`)" if release.base_digest else ""
        )
    friendly = [r for r in release.references if r != release.image]
    if friendly:
        line += "; also tagged " + ", ".join(f"`{r}`" for r in friendly)
    smoke = release.smoke
    if smoke is None:
        return line + f"; {_UNTESTED}: published with `--skip-smoke`, no smoke run before the push."
    line += "; smoke " + ("passed" if smoke.passed else "FAILED")
    if smoke.standin:
        line += f" on a **STAND-IN** ({smoke.hardware}, not a GPU run)"
    line += f" (scenario `{smoke.scenario}`)" if smoke.scenario else ""
    if smoke.verdict not in ("", "passed", "failed"):
        line += f": {smoke.verdict}"
    figures = ", ".join(f"{k} {_fmt_figure(v)}" for k, v in sorted(smoke.figures.items()))
    line += f"; {figures}" if figures else ""
    bench = bench_line(smoke.bench)
    return line + (f"; {bench}." if bench else ".")


def bench_line(bench: BenchFigures | Mapping[str, object] | None) -> str:
    """The bench figures of a record in one phrase, with the delta against the last release
    (a record's JSON form is read as :class:`BenchFigures`)."""
    if bench is not None and not isinstance(bench, BenchFigures):
        bench = BenchFigures.from_dict(bench)
    if not bench:
        return ""
    parts = []
    knee = bench.knee or {}
    if knee:
        # Output tok/s per node is the case study's column; older records kept only the total.
        out = knee.get("output_tok_s")
        figure = (
            f"{_fmt_figure(out)} output tok/s/node"
            if out is not None
            else (f"{_fmt_figure(knee.get('total_tok_s'))} total tok/s (in+out)")
        )
        parts.append(f"knee {_fmt_figure(knee.get('request_rate'))} RPS at {figure}")
    single = bench.single_stream or {}
    if single:
        parts.append(f"single stream {_fmt_figure(single.get('decode_tok_s'))} tok/s")
        if single.get("accept_length") is not None:
            parts.append(f"accept length {_fmt_figure(single.get('accept_length'))}")
    regression = bench.regression or {}
    changes = regression.get("changes")
    for change in changes if isinstance(changes, list | tuple) else ():
        parts.append(
            f"{change.get('figure')} {float(change.get('delta', 0.0)):+.1%} vs last release"
        )
    if regression.get("accepted"):
        parts.append(f"regression accepted: {regression['accepted']}")
    where = " (stand-in)" if bench.hardware not in ("", "gpu") else ""
    return f"bench{where}: " + ", ".join(parts) if parts else ""


def _line_key(line: str) -> str:
    # One line per image: the image reference is the key.
    m = re.match(r"^Image `([^`]+)`", line)
    return m.group(1) if m else line


def _better(old: str, new: str) -> bool:
    # A --skip-smoke push later smoke-tested: the tested line replaces the untested one.
    return _UNTESTED in old and _UNTESTED not in new


def changelog_parts(release: Release, diff: PatchDiff, since: str | None = None) -> Entry:
    """The entry's lines (image, upstream pin) and sections (patches added/refreshed/dropped)."""
    short = release.upstream_commit[:12] if release.upstream_commit else "unknown commit"
    upstream = f"sglang {release.upstream_version or release.upstream_ref}"
    pin = (
        f"Upstream pin: {upstream} (`{release.upstream_ref}` = `{short}`"
        + (f" from {release.upstream_url}" if release.upstream_url else "")
        + f"); patch queue `{release.queue_hash[:16]}` with "
        + f"{plural(len(release.patches), 'patch', 'es')}."
    )
    after = f" since {since or diff.previous}" if diff.previous else ""
    sections: dict[str, tuple[str, ...]] = {}
    if diff.added:
        sections["Added"] = tuple(f"- Patch `{p.name}`: {p.subject}" for p in diff.added)
    if diff.refreshed:
        sections["Changed"] = tuple(
            f"- Patch `{p.name}` refreshed{after} (sha256 `{p.sha256[:12]}`): {p.subject}"
            for p in diff.refreshed
        )
    if diff.dropped:
        sections["Removed"] = tuple(
            f"- Patch `{p.name}` dropped{after}"
            + (f" (upstream status: {p.upstream_status})" if p.upstream_status else "")
            + f": {p.subject}"
            for p in diff.dropped
        )
    return Entry((pin, _image_line(release)), sections)


def write_changelog(
    path: Path,
    release: Release,
    diff: PatchDiff,
    version: str | None = None,
    since: str | None = None,
) -> bool:
    """Release ``release`` as fork ``version`` in CHANGELOG.md; True if the file changed.

    Unreleased items move into the release. Another image of the same fork version joins
    its entry; the same image again changes nothing, except that a tested push replaces the
    line of an untested (``--skip-smoke``) one.
    """
    path = Path(path)
    text = path.read_text() if path.is_file() else "# Changelog\n\n## [Unreleased]\n\n"
    parts = changelog_parts(release, diff, since)
    new = changelog.release(
        text, version or release.version, release.date, parts, _line_key, _better
    )
    if new == text:
        return False
    atomic_write(path, new)
    return True


def record_release(
    root: Path,
    release: Release,
    changelog: Path | None = None,
    repository: str | None = None,
    creds: Credentials | None = None,
) -> Recorded:
    """Write the release record and the CHANGELOG entry (each only if new).

    The previous release and the fork version come from ``repository``'s records in the
    registry when given and reachable (CI checkouts have no build/releases/), else from the
    local folder.
    """
    root = Path(root)
    changelog = changelog or root / CHANGELOG
    records = known_records(root, repository, creds)
    prev = _previous(records, release.target, release.version)
    diff = diff_patches(prev, release.patches)
    version = fork_version(records, release)
    since = fork_version(records, prev) if prev else None
    path, written = _write_record(root, release)
    changed = write_changelog(changelog, release, diff, version, since)
    return Recorded(path, written, changelog, changed, diff, version)
