"""The packages a release requires, installed for real into the construction's environment.

A stub cannot stand in for a package whose behaviour the construction runs: sglang 0.5.23's
``ServerArgs`` is built by ``msgspec.defstruct`` (``srt/server_args.py:551``), which the
last-resort stub of :mod:`sglforge.construct.shims` breaks ("object.__new__(X): X is not a type
object"). So the packages in :data:`REAL` that the release's own metadata requires (the
``Requires-Dist`` of its wheel, at the version it asks) are taken from the package index the
way sglforge takes sglang's wheels (``sglforge.index``: the configured indexes, sha256 checked),
cached under the PyPI cache, unpacked once per wheel and put on the child's ``sys.path`` ahead
of the stubs. Only packages that install without a GPU, and whose wheel matches this
interpreter, are listed.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag, sys_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from sglforge.errors import SglforgeError

# Installed for real when the release requires them (each installs without a GPU; why each is
# needed is in the module docstring).
REAL = (
    "msgspec",
    # the server's and tokenizer's own packages sglang imports at module level: pure wheels
    # with no requirements of their own and nothing of this host's they could report
    "einops",
    "partial_json_parser",
    "pillow",
    "pybase64",
    "pyzmq",
    "sentencepiece",
    "setproctitle",
    "tqdm",
)


@dataclass(frozen=True)
class Installed:
    """The folders to put on the child's ``sys.path``, and what could not be had (why)."""

    paths: tuple[Path, ...]
    missing: tuple[str, ...]


def release_version(tree: Path) -> str | None:
    """The release ``tree`` (its ``python/`` folder) holds, from ``sglang/_version.py``."""
    path = tree / "sglang" / "_version.py"
    text = path.read_text(errors="replace") if path.is_file() else ""
    found = re.search(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", text, re.M)
    return found.group(1) if found else None


def requirements(version: str) -> dict[str, Requirement]:
    """The unconditional ``Requires-Dist`` of sglang ``version``'s wheel, by package name."""
    from sglforge import cache, pypi

    wheel = pypi.wheel(cache.pypi_cache(), "sglang", version)
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(name).decode(errors="replace")
    return {canonicalize_name(req.name): req for req in requires_dist(text)}


def requires_dist(metadata: str) -> list[Requirement]:
    """The unconditional ``Requires-Dist`` of a wheel's METADATA text (no extra, markers
    evaluated for this interpreter); a line that is no valid requirement is left out."""
    out = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        try:
            req = Requirement(line.removeprefix("Requires-Dist:").strip())
        except InvalidRequirement:
            continue
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            out.append(req)
    return out


def _site_root() -> Path:
    from sglforge import cache

    return cache.pypi_cache() / "construct-site"


def _unpacked(wheel: Path) -> Path:
    """``wheel`` unpacked into its own folder under the cache, once (temp folder + rename)."""
    dest = _site_root() / wheel.stem
    if dest.is_dir():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=dest.parent))
    from sglforge import pypi

    try:
        with zipfile.ZipFile(wheel) as zf:
            for member in zf.namelist():
                target = (tmp / member).resolve()
                if tmp.resolve() not in target.parents:
                    raise SglforgeError(f"{wheel}: member {member} leaves the folder; refused")
            # encrypted, unknown compression, .git, bombs: refused and removed (issue 42)
            pypi.check_archive(zf, wheel)
            try:
                zf.extractall(tmp)
            except pypi.BAD_WHEEL as exc:
                raise pypi.bad_wheel(wheel, exc) from None
        try:
            tmp.rename(dest)
        except OSError:  # another process unpacked it first
            if not dest.is_dir():
                raise
    except zipfile.BadZipFile as exc:  # not a zip at all
        raise pypi.bad_wheel(wheel, exc) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


@cache
def _supported() -> frozenset[Tag]:
    """This interpreter's wheel tags, computed once: ``sys_tags()`` takes milliseconds (its
    manylinux probe tries an import per glibc version), and an index lists thousands of files
    per project (numpy: 4,400), which made a first construction take minutes of CPU."""
    return frozenset(sys_tags())


def _compatible(filename: str, project: str) -> Version | None:
    try:
        name, version, _, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return None
    if name != canonicalize_name(project):
        return None
    return version if not _supported().isdisjoint(tags) else None


def _cached(project: str, req: Requirement) -> Path | None:
    """An unpacked wheel already in the cache that satisfies ``req`` on this interpreter."""
    root = _site_root()
    best: tuple[Version, Path] | None = None
    for folder in (
        root.glob(f"{canonicalize_name(project).replace('-', '_')}-*") if root.is_dir() else []
    ):
        version = _compatible(folder.name + ".whl", project)
        if version is not None and req.specifier.contains(version, prereleases=True):
            if best is None or _preferred(version) > _preferred(best[0]):
                best = (version, folder)
    return best[1] if best else None


def _preferred(version: Version) -> tuple[bool, Version]:
    """Order of choice, as pip's: a final release before any pre-release, then newest."""
    return (not version.is_prerelease, version)


def _fetch(project: str, req: Requirement) -> Path:
    """The newest wheel of ``project`` satisfying ``req`` for this interpreter, unpacked."""
    return _unpacked(_download(project, req))


def _wheel_file(project: str, filename: str) -> Path:
    from sglforge import cache

    return cache.pypi_cache() / f"pypi-{canonicalize_name(project)}" / "wheels" / filename


def _download(project: str, req: Requirement, filename: str | None = None) -> Path:
    """The wheel file ``filename`` of ``project`` (default: the newest satisfying ``req`` for
    this interpreter) in the cache, downloaded when absent (the index's sha256 checked)."""
    from sglforge import index

    files = []
    for f in index.files(project):
        version = _compatible(f.filename, project)
        if version is not None and not f.yanked and filename in (None, f.filename):
            if req.specifier.contains(version, prereleases=True):
                files.append((version, f))
    if not files:
        named = f" ({filename}, as locked)" if filename else ""
        raise SglforgeError(f"no wheel of {req}{named} for this Python on the index")
    version, chosen = max(files, key=lambda vf: (_preferred(vf[0]), vf[1].filename))
    dest = _wheel_file(project, chosen.filename)
    if not dest.is_file():
        index.download(chosen, dest, what=f"downloading pypi:{project}=={version}")
    return dest


def obtain(project: str, req: Requirement, release: str) -> Path:
    """The wheel of ``project`` for ``req`` in sglang ``release``'s construction, unpacked:
    the one the release's lock names (:mod:`sglforge.construct.lock`), else the newest cached
    or indexed one, which is then locked; either way checked against the lock."""
    from sglforge.construct import lock

    pinned = {
        name: v
        for name in lock.locked(release)
        if (v := _compatible(name, project)) is not None
        and req.specifier.contains(v, prereleases=True)
    }
    if pinned:
        name = max(pinned, key=lambda n: (_preferred(pinned[n]), n))
        wheel = _wheel_file(project, name)
        if not wheel.is_file():
            wheel = _download(project, req, name)
    else:
        folder = _cached(project, req)
        have = _wheel_file(project, folder.name + ".whl") if folder is not None else None
        wheel = have if have is not None and have.is_file() else _download(project, req)
    lock.check(release, wheel)
    return _unpacked(wheel)


def install(tree: Path) -> Installed:
    """The real packages of :data:`REAL` that the release in ``tree`` requires."""
    version = release_version(tree)
    if version is None:
        return Installed((), tuple(f"{p}: the tree has no sglang/_version.py" for p in REAL))
    try:
        wanted = requirements(version)
    except (SglforgeError, OSError, StopIteration, zipfile.BadZipFile) as exc:
        return Installed((), (f"sglang {version}'s requirements: {exc}",))
    from sglforge.construct.lock import LockMismatch

    paths, missing = [], []
    for project in REAL:
        req = wanted.get(canonicalize_name(project))
        if req is None:
            continue
        try:
            paths.append(obtain(project, req, version))
        except LockMismatch:
            raise  # other bytes than the locked ones: never stubbed over
        except (SglforgeError, OSError) as exc:
            missing.append(f"{project}: {str(exc).splitlines()[0]}")
    return Installed(tuple(paths), tuple(missing))
