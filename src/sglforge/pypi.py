"""Upstream source ``pypi:<project>[<spec>]``: a local git store built from released wheels.

GitHub may be unreachable, and cloning all of sglang's history costs over a gigabyte. A released
wheel, though, carries the real upstream file contents of its release: the wheel's ``sglang/``
folder is the git repository's ``python/sglang/`` folder. This module imports the wheels of
the releases it is asked for into one bare git repository per project, one commit per
release, tagged ``v<version>`` (``v0.5.14``, ``v0.5.10.post1``).

**Such a tree holds ``python/`` only** (in fact only ``python/sglang/``): no ``sgl-kernel/``,
``docker/``, ``3rdparty/``, ``test/``, ``benchmark/``, nor ``python/pyproject.toml``. A patch that
touches anything else does not apply to it. Compiled extension modules (``*.so``, ``*.pyd``)
that a wheel ships are build outputs, not sources, and are left out too; so are the
``*.dist-info`` folder and any other top-level folder of the wheel.

**Lazily, and stable.** Only the releases a command needs are imported: ``patches apply`` at
the pin fetches the pin's wheel only; ``check --tags`` and ``upgrade`` add what they ask for.
Each release is a commit of its own with no parent, a fixed identity and date, and a message
naming only its version, so its SHA depends on its content alone: the same release has the
same commit on every machine, whatever else was imported before or after, and growing the
store never changes a commit already in it.

**Where wheels come from** is the index pip would read (``sglforge.index``: pip's own
configuration, ``$SGLFORGE_PYPI_URL`` first): for each release a Linux x86_64 wheel whatever
the host (a pure ``py3-none-any`` one first, else a ``manylinux``/``linux`` x86_64 one), checked
against the index's sha256. Yanked files are skipped, except for a release asked for exactly
(PEP 592), which is then named as yanked. Wheels are kept under
``<cache_root>/pypi-<project>/wheels`` with the sha256 computed at download beside each
(``<wheel>.sha256``), re-checked on every use.

**A wheel is imported the way pip installs it:** regular files only (no symlinks, devices),
no ``..`` path components, written one file at a time into a new pack of the store, each
file's compressed bytes as the wheel holds them (``git.new_pack``: nothing is compressed twice).
A wheel no one should unpack is refused whole (exit 3, naming it) and removed from the
cache, so the next run downloads it again rather than failing the same way: an encrypted
member, a compression method pip cannot read, a ``.git`` folder in any spelling git refuses
(``is_dotgit``), a member or package over its size bound, or a package whose compression
ratio is a zip bomb's.

**A damaged store heals:** the pack files it holds are recorded after each import; one that
changed size or went missing makes the store be rebuilt from the cached wheels, with a message
saying so. All of this runs under one file lock per project.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import struct
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from sglforge import git, index
from sglforge.errors import ConfigError, UpstreamError
from sglforge.git.pack import INFLATE_ERRORS, fast_zlib
from sglforge.progress import Progress, Task, resolve
from sglforge.util import flock, read_json

DEFAULT_SPEC = ">=0.5.10"
# what reading a damaged wheel raises
_BAD_WHEEL: tuple[type[Exception], ...] = (
    zipfile.BadZipFile,
    EOFError,
    ValueError,
    RuntimeError,  # zipfile: an encrypted member
    NotImplementedError,  # zipfile: a compression method it does not know
    *INFLATE_ERRORS,
)
# Bump when the tree layout or commit format changes: it is part of the store's folder name,
# so a new format never mixes with commits an older sglforge made.
FORMAT = 2
BRANCH = "refs/heads/main"
STATE_FILE = "sglforge-store.json"
# Build outputs a platform wheel carries that are not in the source repository.
_BINARY_SUFFIXES = (".so", ".pyd", ".dylib", ".dll", ".pyc")
_SOURCE_RE = re.compile(
    r"^pypi:\s*(?P<project>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)(?P<spec>.*)$"
)
# Linux x86_64 platform tags of wheels (manylinux1/2010/2014, manylinux_2_NN, plain linux).
_LINUX_X86_64 = re.compile(r"^(manylinux\w*|linux)_x86_64$")
# Bounds on what one wheel's package may unpack to. Measured on the sources sglforge keeps
# (python/sglang/, no compiled modules): 0.5.14 36 MiB in 3190 files at 4.4:1, 0.5.23 73 MiB
# in 5766 files at 4.2:1, its largest file 28:1. A bomb spread over many small members
# (2048 x 1 MiB of zeros, 900:1) is caught by the whole package's ratio (F10).
MAX_TOTAL_BYTES = 512 << 20
MAX_FILE_BYTES = 256 << 20
# A single member is judged by its ratio only past 32 MiB: real wheels hold small, mostly-zero
# objects (pillow 13.0.0's libXau: 2.1 MB from 9.4 KB, 224:1); below that the totals decide.
MAX_RATIO = 200  # uncompressed / compressed, for members over MEMBER_RATIO_FLOOR
MEMBER_RATIO_FLOOR = 32 << 20
MAX_TOTAL_RATIO = 16  # the package's uncompressed / compressed, once over 16 MiB
# The methods pip's zipfile reads: stored, deflate, bzip2, lzma.
_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA)
# Code points HFS+ ignores in a name (git's is_hfs_dotgit): ".g\u200cit" is ".git" there.
_HFS_IGNORED = frozenset(
    "\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
    "\u206a\u206b\u206c\u206d\u206e\u206f\ufeff"
)
INDEX_ENV = index.INDEX_ENV
TIMEOUT_ENV = index.TIMEOUT_ENV


def parse_source(s: str) -> tuple[str, str] | None:
    """``"pypi:sglang>=0.5.10,<=0.5.23"`` -> ``("sglang", ">=0.5.10,<=0.5.23")``; else None.

    A string that starts with ``pypi:`` but is malformed raises ConfigError rather than being
    mistaken for a path or URL.
    """
    s = s.strip()
    if not s.startswith("pypi:"):
        return None
    m = _SOURCE_RE.match(s)
    if not m:
        raise ConfigError(
            f"upstream {s!r}: expected pypi:<project>[<PEP 440 specifier>]",
            "e.g. --upstream 'pypi:sglang>=0.5.10,<=0.5.23'",
        )
    spec = re.sub(r"\s+", "", m.group("spec"))
    _spec_set(spec, s)
    return m.group("project"), spec


def _spec_set(spec: str, where: str) -> SpecifierSet:
    try:
        return SpecifierSet(spec or DEFAULT_SPEC)
    except InvalidSpecifier as exc:
        raise ConfigError(
            f"upstream {where!r}: invalid version specifier {spec!r}",
            "use PEP 440 syntax, e.g. 'pypi:sglang>=0.5.10,<=0.5.23'",
        ) from exc


# --- what the index offers ------------------------------------------------------------------


@dataclass(frozen=True)
class Release:
    version: Version
    file: index.File  # the wheel to use

    @property
    def yanked(self) -> bool:
        return self.file.yanked


def releases(project: str) -> dict[Version, Release]:
    """version -> the Linux x86_64 wheel to use, for every release on the configured indexes
    (yanked ones included, flagged). The first index listing a usable wheel wins; within it a
    pure wheel, then the first file name (``cp310`` before ``cp311``), whatever the listing
    order."""
    ranked: dict[Version, tuple[tuple[int, int, int, str, str, str], index.File]] = {}
    order = {ix: n for n, ix in enumerate(index.config().indexes)}
    for f in index.files(project):
        rank = _linux_rank(f.filename, project)
        if rank is None:
            continue
        try:
            version = parse_wheel_filename(f.filename)[1]
        except InvalidWheelFilename:
            continue
        # A total order: the same files give the same wheel whatever order a page lists them
        # in (a tie of rank and index goes to the file name, then its URL and digest).
        key = (int(f.yanked), rank, order.get(f.index, len(order)), f.filename, f.url, f.sha256)
        if version not in ranked or key < ranked[version][0]:
            ranked[version] = (key, f)
    return {v: Release(v, f) for v, (_, f) in ranked.items()}


def _linux_rank(filename: str, project: str) -> int | None:
    """0 for a pure wheel, 1 for a Linux x86_64 one; None for anything else."""
    try:
        name, _, _, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return None
    if name != canonicalize_name(project):
        return None
    platforms = {t.platform for t in tags}
    if "any" in platforms:
        return 0
    if any(_LINUX_X86_64.match(p) for p in platforms):
        return 1
    return None


def available_versions(project: str, spec: SpecifierSet | str = "") -> list[Version]:
    """Released, non-yanked versions of ``project`` with a Linux x86_64 wheel on the configured
    indexes that match ``spec``, ascending. Pre-releases only when the specifier names one."""
    spec_set = spec if isinstance(spec, SpecifierSet) else _spec_set(spec, f"pypi:{project}")
    found = releases(project)
    usable = sorted(v for v, r in found.items() if not r.yanked)
    if not usable:
        raise UpstreamError(
            f"pypi:{project}: no release with a Linux x86_64 wheel on {index.config().describe()}",
            "check the project name and pip's index settings (`pip config list`), or pass "
            "--upstream PATH to a local sglang clone",
        )
    pre = bool(spec_set.prereleases)
    matching = sorted(set(spec_set.filter(usable, prereleases=pre)))
    if not matching:
        newest = max([v for v in usable if pre or not v.is_prerelease] or usable)
        raise UpstreamError(
            f"pypi:{project}: no release matches {str(spec_set)!r} (newest on the index: {newest})",
            f"widen the range, e.g. --upstream 'pypi:{project}>={newest}'",
        )
    return matching


def _release(project: str, version: Version, exact: bool) -> Release:
    found = releases(project).get(version)
    if found is None:
        raise UpstreamError(
            f"pypi:{project}=={version}: no Linux x86_64 wheel on {index.config().describe()}",
            "pick another release (`sglforge patches check --tags '>=0'` lists them)",
        )
    if found.yanked and not exact:
        raise UpstreamError(
            f"pypi:{project}=={version} is yanked on {found.file.index.shown}",
            f"pin it exactly (ref v{version}) to use it anyway, or pick another release",
        )
    return found


# --- the store ------------------------------------------------------------------------------


def store(cache_root: Path, project: str) -> Path:
    """The store's path (it may not exist yet)."""
    return Path(cache_root) / f"pypi-{canonicalize_name(project)}" / f"releases-f{FORMAT}.git"


def ensure(
    cache_root: Path,
    project: str,
    versions: Sequence[Version | str],
    *,
    exact: bool = False,
    seed: Sequence[Path] = (),
    progress: Progress | None = None,
) -> Path:
    """The store, holding (at least) each of ``versions``: missing ones are downloaded and
    imported, nothing else is. ``exact`` admits a yanked release (it was asked for by pin).
    ``seed`` names older wheel folders to take wheels from before downloading."""
    say = resolve(progress)
    wanted = sorted({Version(str(v)) for v in versions})
    repo = store(cache_root, project)
    base = repo.parent
    # the store and wheels, one process at a time (others wait: a first import can take
    # minutes on a slow index); reentrant in-process
    with flock(base / ".lock", f"the PyPI cache {base}", None):
        state = _open_store(repo, project, base / "wheels", seed, say)
        have = {Version(v) for v in state["versions"]}
        todo = [v for v in wanted if v not in have]
        if not todo:
            return repo
        say.info(f"pypi:{project}: importing {len(todo)} release(s): {_listing(todo)}")
        wheels = [
            _wheel(base / "wheels", project, v, seed, say, f"wheel {n}/{len(todo)}", exact)
            for n, v in enumerate(todo, 1)
        ]
        with say.task(f"pypi:{project} releases", len(todo)) as task:
            for version, wheel in zip(todo, wheels, strict=True):
                _import_release(repo, version, wheel, project)
                state["versions"].append(str(version))
                _save_state(repo, state)
                task.advance(note=f"v{version}")
    return repo


def history(
    cache_root: Path,
    project: str = "sglang",
    spec: str = "",
    *,
    seed: Sequence[Path] = (),
    progress: Progress | None = None,
) -> Path:
    """The store, holding every release of ``project`` that matches ``spec`` (the index is
    asked which those are)."""
    spec_set = _spec_set(spec, f"pypi:{project}{spec}")
    versions = available_versions(project, spec_set)
    exact = all(s.operator in ("==", "===") for s in spec_set) and len(versions) == 1
    return ensure(cache_root, project, versions, exact=exact, seed=seed, progress=progress)


def has_release(repo: Path, version: Version | str) -> bool:
    return str(Version(str(version))) in tagged_versions(repo)


def tagged_versions(repo: Path) -> list[str]:
    """The versions the store holds, ascending."""
    if not (Path(repo) / "HEAD").exists():
        return []
    found = []
    for tag in git.tags(repo):
        if tag.startswith("v"):
            with contextlib.suppress(InvalidVersion):
                found.append(Version(tag[1:]))
    return [str(v) for v in sorted(found)]


def _listing(versions: Sequence[Version]) -> str:
    shown = ", ".join(str(v) for v in versions[:6])
    return shown + (f" and {len(versions) - 6} more" if len(versions) > 6 else "")


def _packs(repo: Path) -> dict[str, int]:
    folder = repo / "objects" / "pack"
    if not folder.is_dir():
        return {}
    return {p.name: p.stat().st_size for p in folder.glob("pack-*.pack")}


def _save_state(repo: Path, state: dict[str, list[str]]) -> None:
    from sglforge.util import atomic_write

    versions = sorted(set(state["versions"]), key=Version)
    data = {"format": FORMAT, "versions": versions, "packs": _packs(repo)}
    atomic_write(repo / STATE_FILE, json.dumps(data, indent=1, sort_keys=True) + "\n")
    state["versions"] = versions


def _open_store(
    repo: Path, project: str, wheels: Path, seed: Sequence[Path], say: Progress
) -> dict[str, list[str]]:
    """The store's recorded state; a new store is made, a damaged one rebuilt (we hold the
    lock)."""
    for stale in repo.parent.glob(repo.name + ".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    if not (repo / "HEAD").exists():
        _init(repo)
        return {"versions": []}
    try:
        recorded = read_json(repo / STATE_FILE)  # bounded: a cache entry (F11)
        if not isinstance(recorded, dict):
            raise TypeError("the state is not an object")
        versions = [str(Version(v)) for v in recorded["versions"]]
        packs = recorded["packs"]
        if not isinstance(packs, dict):
            raise TypeError("packs")
    except (OSError, ValueError, KeyError, TypeError, InvalidVersion):
        versions, packs = tagged_versions(repo), None
    damage = _damage(repo, versions, packs)
    if not damage:
        return {"versions": versions}
    say.warn(
        f"the pypi:{project} store at {repo} is damaged ({damage}); rebuilding it from the "
        "cached wheels"
    )
    tmp = repo.with_name(f"{repo.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    _init(tmp)
    state: dict[str, list[str]] = {"versions": []}
    for n, v in enumerate(versions, 1):
        wheel = _wheel(wheels, project, Version(v), seed, say, f"rebuild {n}/{len(versions)}", True)
        _import_release(tmp, Version(v), wheel, project)
        state["versions"].append(v)
    _save_state(tmp, state)
    old = repo.with_name(f"{repo.name}.old-{os.getpid()}")
    os.replace(repo, old)
    os.replace(tmp, repo)
    shutil.rmtree(old, ignore_errors=True)
    return state


def _init(repo: Path) -> None:
    git.init(repo, bare=True, head=BRANCH)


def _damage(repo: Path, versions: list[str], packs: object) -> str:
    """'' for a sound store, else what is wrong with it."""
    now = _packs(repo)
    if isinstance(packs, dict):
        for name, size in packs.items():
            if name not in now:
                return f"pack {name} is missing"
            if now[name] != size:
                return f"pack {name} is {now[name]} bytes, {size} when written"
        if set(now) == set(packs):
            return ""
    # packs not recorded, or changed by someone else (a git gc): check every object once
    broken = git.fsck(repo)
    if broken:
        return broken
    for v in versions:
        if not git.has_tree(repo, f"v{v}"):
            return f"tag v{v} is missing"
    _save_state(repo, {"versions": versions})
    return ""


# --- wheels ---------------------------------------------------------------------------------


def wheel(
    cache_root: Path, project: str, version: str, *, progress: Progress | None = None
) -> Path:
    """The Linux x86_64 wheel of ``project==version``, from the cache the store fills
    (downloaded once, its sha256 checked on every use)."""
    base = Path(cache_root) / f"pypi-{canonicalize_name(project)}"
    # the store and wheels, one process at a time (others wait: a first import can take
    # minutes on a slow index); reentrant in-process
    with flock(base / ".lock", f"the PyPI cache {base}", None):
        return _wheel(base / "wheels", project, Version(version), (), resolve(progress), exact=True)


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _wheel(
    wheels: Path,
    project: str,
    version: Version,
    seed: Sequence[Path] = (),
    progress: Progress | None = None,
    step: str = "wheel",
    exact: bool = False,
) -> Path:
    """The cached wheel of ``project==version`` (checked), downloading it once."""
    say = resolve(progress)
    found = _cached_wheel(wheels, project, version)
    if found is None:
        for folder in seed:
            old = _cached_wheel(folder, project, version)
            if old:
                wheels.mkdir(parents=True, exist_ok=True)
                index.copy_into(old, wheels / old.name)
                found = wheels / old.name
                break
    if found is not None:
        if _verified(found, project, version, say):
            say.detail(f"{step} {project}=={version}: {found} (cached, sha256 checked)")
            return found
        found.unlink(missing_ok=True)
        _sidecar(found).unlink(missing_ok=True)
    chosen = _release(project, version, exact)
    if chosen.yanked:
        say.warn(
            f"pypi:{project}=={version} is yanked on {chosen.file.index.shown}; used because "
            "it was asked for exactly (PEP 592)"
        )
    dest = wheels / chosen.file.filename
    label = f"{step} {chosen.file.filename}"
    from sglforge.urls import shown as shown_url

    where = chosen.file.index
    say.detail(
        f"{step} {project}=={version}: {shown_url(chosen.file.url)} (index {where.shown}, "
        f"from {where.origin or 'pip config'}) -> {dest}"
    )
    tasks: list[Task] = []

    def on_bytes(n: int, total: int | None) -> None:
        if not tasks:  # started once the size is known (the answer's Content-Length)
            tasks.append(say.start(label, total, unit="bytes"))
        tasks[0].update(tasks[0].done + n, total)

    try:
        digest = index.download(
            chosen.file,
            dest,
            what=f"downloading pypi:{project}=={version}",
            on_bytes=on_bytes,
            warn=say.warn,
        )
    except BaseException:
        for t in tasks:
            say.finish(t, ok=False)
        raise
    for t in tasks:
        say.finish(t)
    _record(dest, digest)
    return dest


def _record(path: Path, digest: str) -> None:
    from sglforge.util import atomic_write

    atomic_write(_sidecar(path), f"{digest}  {path.name}\n")


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _verified(path: Path, project: str, version: Version, say: Progress) -> bool:
    """True when the cached ``path`` still has the bytes recorded at download. A wheel with no
    record (an older cache, a seed folder) is checked against the index once and recorded."""
    got = _file_sha256(path)
    try:
        recorded = _sidecar(path).read_text().split()[0].lower()
    except (OSError, IndexError):
        recorded = ""
    if recorded:
        if recorded == got:
            return True
        say.warn(
            f"the cached {path.name} changed since it was downloaded (sha256 {got[:16]}..., "
            f"recorded {recorded[:16]}...): downloading it again"
        )
        return False
    listed = releases(project).get(version)
    want = listed.file.sha256 if listed and listed.file.filename == path.name else ""
    if want and want != got:
        say.warn(f"the cached {path.name} does not match the index's sha256: downloading it again")
        return False
    if not want:
        say.warn(
            f"the cached {path.name} has no recorded sha256 and the index gives none to check "
            f"it against: taken as it is; its sha256 {got} is recorded"
        )
    _record(path, got)
    return True


def _cached_wheel(folder: Path, project: str, version: Version) -> Path | None:
    if not folder.is_dir():
        return None
    want = canonicalize_name(project)
    hits = []
    for path in folder.glob("*.whl"):
        try:
            name, ver, _, _ = parse_wheel_filename(path.name)
        except InvalidWheelFilename:
            continue
        if name == want and ver == version and _linux_rank(path.name, project) is not None:
            hits.append(path)
    # Several platform wheels of one release carry the same sources; pick one stably.
    return sorted(hits, key=lambda p: (_linux_rank(p.name, project), p.name))[0] if hits else None


# --- importing a wheel ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Member:
    path: str  # in the repository: python/<package>/...
    mode: str  # git mode
    info: zipfile.ZipInfo


class _Hostile(Exception):
    """A wheel sglforge will not import (why, one line); the caller removes it from the cache."""


def is_dotgit(part: str) -> bool:
    """Whether git refuses ``part`` as a path component naming its own folder (git's
    ``verify_path``): ``.git`` in any case, with NTFS's trailing dots and spaces or an
    ``::$INDEX_ALLOCATION`` stream, its short name ``git~1``, or with code points HFS+
    ignores (``.g\u200cit``)."""
    low = part.lower()
    if "".join(ch for ch in low if ch not in _HFS_IGNORED) == ".git":
        return True
    base = low.split(":", 1)[0]
    return any(base.startswith(p) and not base[len(p) :].strip(" .") for p in (".git", "git~1"))


def _members(zf: zipfile.ZipFile, wheel: Path, project: str) -> list[_Member]:
    """The regular files of the wheel's import package, checked as pip would install them;
    ``_Hostile`` for a member no one should unpack (encrypted, an unknown compression
    method, a ``.git`` folder, a zip bomb)."""
    package = canonicalize_name(project).replace("-", "_")
    members: list[_Member] = []
    total = packed = 0
    for info in zf.infolist():
        name = info.filename
        parts = name.split("/")
        # Only the import package: sglang/ -> python/sglang/. dist-info, tools/ etc. are
        # packaging artefacts whose place in the repository a wheel does not record.
        if info.is_dir() or parts[0] != package:
            continue
        _check_member(info, parts)
        if any(p in ("", ".", "..") for p in parts) or "\\" in name or "\0" in name:
            continue  # pip would refuse such a path; it never enters the tree
        if name.endswith(_BINARY_SUFFIXES) or ".so." in name or "/__pycache__/" in name:
            continue
        unix = info.external_attr >> 16
        if stat.S_IFMT(unix) not in (0, stat.S_IFREG):
            continue  # a symlink, a device, a fifo: pip installs regular files only
        total += info.file_size
        packed += info.compress_size
        if total > MAX_TOTAL_BYTES:
            raise _Hostile(f"its package unpacks to over {MAX_TOTAL_BYTES >> 20} MiB")
        mode = "100755" if unix & 0o111 else "100644"
        members.append(_Member(f"python/{name}", mode, info))
    if total > (16 << 20) and total > MAX_TOTAL_RATIO * max(packed, 1):
        raise _Hostile(
            f"its package unpacks to {total} bytes from {packed} "
            f"({total // max(packed, 1)}:1, a zip bomb?)"
        )
    if not members:
        raise UpstreamError(
            f"{wheel.name}: no {package}/ package folder in the wheel",
            "this source only understands wheels whose package folder is python/<package>/",
        )
    return sorted(members, key=lambda m: m.path)


def _check_member(info: zipfile.ZipInfo, parts: list[str]) -> None:
    """``_Hostile`` for a member of the package no one should unpack."""
    name = info.filename
    if info.flag_bits & 0x1:
        raise _Hostile(f"{name} is encrypted")
    if info.compress_type not in _METHODS:
        raise _Hostile(
            f"{name} uses compression method {info.compress_type}, which pip cannot read"
        )
    if any(is_dotgit(p) for p in parts):
        raise _Hostile(f"{name} is inside a .git folder (git refuses such a path)")
    if info.file_size > MAX_FILE_BYTES or (
        info.file_size > MEMBER_RATIO_FLOOR
        and info.file_size > MAX_RATIO * max(info.compress_size, 1)
    ):
        raise _Hostile(
            f"{name} unpacks to {info.file_size} bytes from {info.compress_size} (a zip bomb?)"
        )


def check_archive(zf: zipfile.ZipFile, wheel: Path, max_total: int = 1 << 30) -> None:
    """Every member of ``wheel`` checked before it is unpacked whole (the construction's
    packages): the member checks of an import, and the total and ratio bounds over all of
    them; UpstreamError naming the wheel, removed from the cache, otherwise."""
    total = packed = 0
    try:
        for info in zf.infolist():
            if not info.is_dir():
                _check_member(info, info.filename.split("/"))
                total, packed = total + info.file_size, packed + info.compress_size
        if total > max_total:
            raise _Hostile(f"it unpacks to over {max_total >> 20} MiB")
        if total > (16 << 20) and total > MAX_TOTAL_RATIO * max(packed, 1):
            raise _Hostile(f"it unpacks to {total} bytes from {packed} (a zip bomb?)")
    except _Hostile as exc:
        raise _refused(wheel, str(exc)) from None


def bad_wheel(wheel: Path, exc: BaseException) -> UpstreamError:
    """The error for ``wheel`` that failed to unpack (``exc``, one of the errors a damaged
    wheel raises), the wheel removed from the cache."""
    return _refused(wheel, f"not a readable wheel ({type(exc).__name__}: {exc})")


BAD_WHEEL = _BAD_WHEEL


def _refused(wheel: Path, why: str) -> UpstreamError:
    """The wheel removed from the cache (it would fail the same way on every run) and the
    error that says so, naming it."""
    wheel.unlink(missing_ok=True)
    _sidecar(wheel).unlink(missing_ok=True)
    return UpstreamError(
        f"{wheel}: {why}; not imported, and removed from the cache",
        "check where the index got it (a mirror or proxy?); the next run downloads it again",
    )


@contextlib.contextmanager
def _open_wheel(wheel: Path) -> Iterator[zipfile.ZipFile]:
    try:
        zf = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile as exc:
        raise _refused(wheel, f"not a readable wheel ({exc})") from None
    except OSError as exc:
        raise UpstreamError(
            f"{wheel}: not a readable wheel ({exc})", f"delete it and run again: rm {wheel}"
        ) from exc
    with zf:
        yield zf


def _message(project: str, version: Version) -> bytes:
    package = canonicalize_name(project).replace("-", "_")
    return (
        f"{project} {version}: python/ tree of the released wheel\n\n"
        f"Built by sglforge (pypi source, format {FORMAT}) from the release {version}: the\n"
        f"wheel's {package}/ folder placed at python/{package}/. This tree holds python/ only:\n"
        f"no sgl-kernel/, docker/, 3rdparty/ or tests outside python/, and no compiled modules.\n"
    ).encode()


def _import_release(repo: Path, version: Version, wheel: Path, project: str) -> str:
    """Commit one release, with no parent: its files written as one new pack of the store,
    each file's compressed bytes taken from the wheel as they are (``git.new_pack``)."""
    when = _epoch(git.IDENTITY["GIT_COMMITTER_DATE"])
    who = f"{git.IDENTITY['GIT_COMMITTER_NAME']} <{git.IDENTITY['GIT_COMMITTER_EMAIL']}>"
    known = git.blob_ids(repo)
    with _open_wheel(wheel) as zf:
        try:
            members = _members(zf, wheel, project)
        except _Hostile as exc:
            raise _refused(wheel, str(exc)) from None
        try:
            with open(wheel, "rb") as raw, git.new_pack(repo, have=known) as pack:
                files = {}
                for m in members:
                    data, deflated = _member_bytes(zf, raw, m.info, wheel)
                    files[m.path] = (m.mode, pack.add(git.BLOB, data, deflated))
                tree = pack.add_tree(files).hex()
                # the same commit fast-import made for format 2: its SHA is its content's
                commit = b"tree %s\nauthor %s %d +0000\ncommitter %s %d +0000\n\n%s" % (
                    tree.encode(),
                    who.encode(),
                    when,
                    who.encode(),
                    when,
                    _message(project, version),
                )
                commit_id = pack.add(git.COMMIT, commit).hex()
        except _BAD_WHEEL as exc:
            raise _refused(wheel, f"not a readable wheel ({exc})") from None
    git.set_ref(repo, f"refs/tags/v{version}", commit_id)
    _point_branch(repo)
    return commit_id


def _member_bytes(
    zf: zipfile.ZipFile, raw: BinaryIO, info: zipfile.ZipInfo, wheel: Path
) -> tuple[bytes, bytes | None]:
    """(a member's bytes, its raw deflate stream as the wheel stores it, or None when it is
    not deflated), checked as zipfile checks them: the local header names the member, the
    bytes unpack to the recorded size and CRC-32."""
    if info.compress_type != zipfile.ZIP_DEFLATED or info.flag_bits & 0x1:
        return zf.read(info), None  # stored, another method, or encrypted (zipfile refuses)
    raw.seek(info.header_offset)
    local = raw.read(30)
    if len(local) != 30 or local[:4] != b"PK\x03\x04":
        raise zipfile.BadZipFile(f"{info.filename}: bad local file header")
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    name = raw.read(name_len)
    if name != info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437"):
        raise zipfile.BadZipFile(f"{info.filename}: its local header names {name!r}")
    raw.seek(extra_len, os.SEEK_CUR)
    deflated = raw.read(info.compress_size)
    inflater = fast_zlib.decompressobj(-15)
    data = inflater.decompress(deflated, info.file_size + 1)
    if (
        len(deflated) != info.compress_size
        or not inflater.eof
        or inflater.unused_data
        or len(data) != info.file_size
        or fast_zlib.crc32(data) != info.CRC
    ):
        raise zipfile.BadZipFile(f"{info.filename}: its bytes do not unpack as recorded")
    return data, deflated


def _point_branch(repo: Path) -> None:
    """``main`` names the newest release the store holds."""
    versions = tagged_versions(repo)
    if versions:
        git.set_ref(repo, BRANCH, f"refs/tags/v{versions[-1]}")


def _epoch(date: str) -> int:
    from datetime import datetime

    return int(datetime.strptime(date, "%Y-%m-%dT%H:%M:%S%z").timestamp())


__all__ = [
    "DEFAULT_SPEC",
    "Release",
    "available_versions",
    "ensure",
    "has_release",
    "history",
    "parse_source",
    "releases",
    "store",
    "tagged_versions",
    "wheel",
]
