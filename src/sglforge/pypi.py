"""Upstream source ``pypi:<project>[<spec>]``: a local git history built from released wheels.

GitHub may be unreachable, and cloning all of sglang's history costs over a gigabyte. A released
wheel, though, carries the real upstream file contents of its release: the wheel's ``sglang/``
folder is the git repository's ``python/sglang/`` folder. This module turns the wheels of every
release matching a PEP 440 specifier into a git history with one commit per release, in
ascending version order, each tagged ``v<version>`` (``v0.5.14``, ``v0.5.10.post1``).

**Such a tree holds ``python/`` only** (in fact only ``python/sglang/``): no ``sgl-kernel/``,
``docker/``, ``3rdparty/``, ``test/``, ``benchmark/``, nor ``python/pyproject.toml``. A patch that
touches anything else does not apply to it. Compiled extension modules (``*.so``, ``*.pyd``)
that a wheel ships are build outputs, not sources, and are left out too; so are the
``*.dist-info`` folder and any other top-level folder of the wheel.

Releases and wheels come from PyPI's JSON API (``$SGLFORGE_PYPI_URL``, else ``$PIP_INDEX_URL``
without ``/simple``, else https://pypi.org): for each release, a Linux x86_64 wheel whatever the
host (a pure ``py3-none-any`` one first, else a ``manylinux`` or ``linux`` x86_64 one), checked
against the sha256 the index publishes; releases with no such wheel are left out. With
``pip_args`` (tests point pip at a local folder: ``--no-index --find-links DIR``) pip lists and
downloads instead. Wheels are kept under ``<cache_root>/pypi-<project>/wheels`` (never
downloaded twice); earlier wheel folders given as ``seed`` (a checkout's old ``build/pypi``) are
linked in first.
Commits use a fixed identity and date, so the same versions give the same SHAs on any machine
(wheels for different Python versions differ only in their compiled modules, which are dropped).
When newer releases appear the history grows at its end and the existing commits keep their SHAs;
if the list of versions changed elsewhere, it is rebuilt from the first changed version. Each
history is built in a temporary folder and renamed into place, under a file lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from sglforge import git
from sglforge.errors import ConfigError, UpstreamError
from sglforge.progress import Progress, resolve

DEFAULT_SPEC = ">=0.5.10"
# Bump when the tree layout or commit format changes: it is part of the history's folder name,
# so a new format never mixes with commits an older sglforge made.
FORMAT = 1
BRANCH = "refs/heads/main"
# Build outputs a platform wheel carries that are not in the source repository.
_BINARY_SUFFIXES = (".so", ".pyd", ".dylib", ".dll", ".pyc")
_SOURCE_RE = re.compile(
    r"^pypi:\s*(?P<project>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)(?P<spec>.*)$"
)
# Signs in pip's output that the index could not be reached at all.
_NETWORK_SIGNS = (
    "NewConnectionError",
    "ConnectTimeout",
    "Could not fetch URL",
    "Max retries exceeded",
    "ProxyError",
    "SSLError",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "connection broken",
)


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


def history(
    cache_root: Path,
    project: str = "sglang",
    spec: str = "",
    *,
    pip_args: Sequence[str] = (),
    seed: Sequence[Path] = (),
    progress: Progress | None = None,
) -> Path:
    """A bare git repository with one commit per release of ``project`` matching ``spec``.

    ``pip_args`` are extra pip options (tests point pip at a local folder of wheels with
    ``--no-index --find-links DIR``); ``seed`` names older caches whose wheels are reused.
    ``progress`` sees each wheel download (bytes) and the history being built (one step per
    release).
    """
    say = resolve(progress)
    spec_set = _spec_set(spec, f"pypi:{project}{spec}")
    versions = available_versions(project, spec_set, pip_args=pip_args)
    base = Path(cache_root) / f"pypi-{canonicalize_name(project)}"
    repo = base / f"history-f{FORMAT}-{_spec_slug(spec_set)}.git"
    with _locked(base / ".lock"):
        _recover(repo)
        chain = _chain(repo) if (repo / "HEAD").exists() else []
        keep = 0
        while keep < min(len(chain), len(versions)) and chain[keep][0] == str(versions[keep]):
            keep += 1
        if keep == len(chain) == len(versions):
            return repo
        todo = versions[keep:]
        say.info(
            f"pypi:{project}: {len(todo)} release(s) to add to the history (of {len(versions)})"
        )
        wheels = [
            _wheel(base / "wheels", project, v, pip_args, seed, say, f"wheel {n}/{len(todo)}")
            for n, v in enumerate(todo, 1)
        ]
        _rebuild(repo, chain[:keep], todo, wheels, project, say)
    return repo


def wheel(
    cache_root: Path, project: str, version: str, *, progress: Progress | None = None
) -> Path:
    """The Linux x86_64 wheel of ``project==version``, from the cache ``history`` fills
    (downloaded once, sha256 checked)."""
    base = Path(cache_root) / f"pypi-{canonicalize_name(project)}"
    with _locked(base / ".lock"):
        return _wheel(base / "wheels", project, Version(version), (), (), resolve(progress))


def available_versions(
    project: str, spec: SpecifierSet | str = "", *, pip_args: Sequence[str] = ()
) -> list[Version]:
    """Released versions of ``project`` on pip's configured index that match ``spec``, ascending.

    Pre-releases are left out unless the specifier names one.
    """
    spec_set = spec if isinstance(spec, SpecifierSet) else _spec_set(spec, f"pypi:{project}")
    pre = bool(spec_set.prereleases)
    if not pip_args:
        on_index = sorted(_index_wheels(project))
        if not on_index:
            raise UpstreamError(
                f"pypi:{project}: no release with a Linux x86_64 wheel on {_index_url()}",
                "check the project name, or pass --upstream PATH to a local sglang clone",
            )
        return _matching(project, spec_set, on_index, pre)
    # -vv: pip then says which index locations it could not fetch, and why
    args = ["index", "versions", "-vv", project, *(["--pre"] if pre else []), *pip_args]
    res = _pip(args, f"asking the package index for the releases of {project}")
    found: list[Version] = []
    for line in res.stdout.splitlines():
        if line.strip().startswith("Available versions:"):
            for item in line.split(":", 1)[1].split(","):
                with contextlib.suppress(InvalidVersion):
                    found.append(Version(item.strip()))
    if res.returncode != 0 or not found:
        _raise_index_error(project, spec_set, res)
    return _matching(project, spec_set, found, pre)


def _matching(
    project: str, spec_set: SpecifierSet, found: list[Version], pre: bool
) -> list[Version]:
    matching = sorted(set(spec_set.filter(found, prereleases=pre)))
    if not matching:
        raise UpstreamError(
            f"pypi:{project}: no release matches {str(spec_set)!r} "
            f"(newest on the index: {max(found)})",
            f"widen the range, e.g. --upstream 'pypi:{project}>={max(found)}'",
        )
    return matching


def _raise_index_error(
    project: str, spec_set: SpecifierSet, res: subprocess.CompletedProcess[str]
) -> None:
    text = f"{res.stdout}\n{res.stderr}"
    last = [ln for ln in text.splitlines() if ln.startswith("ERROR")]
    detail = last[-1] if last else f"pip exited with status {res.returncode}"
    unfetched = [
        (url, why)
        for url, why in re.findall(
            r"Could not fetch URL (\S+?):? (.*?)(?: - skipping)?$", text, re.M
        )
        if not re.search(r"\b4\d\d Client Error", why)  # an answer: the project is not there
    ]
    if unfetched:
        url, why = unfetched[-1]
        why = re.sub(r"\s*\(Caused by (\w+)\(.*", r" (\1)", why)[:200]
        raise UpstreamError(
            f"pypi:{project}: the package index is unreachable: could not fetch {url}: {why}",
            "check the network or pip's index settings (`pip config list`), or pass "
            "--upstream PATH to a local sglang clone",
        )
    if any(sign in text for sign in _NETWORK_SIGNS):
        raise UpstreamError(
            f"pypi:{project}: the package index is unreachable ({detail})",
            "check the network or pip's index settings (`pip config list`), or pass "
            "--upstream PATH to a local sglang clone",
        )
    raise UpstreamError(
        f"pypi:{project}: no release found on the configured index for {str(spec_set)!r} "
        f"({detail})",
        f"check the project name and the index: `{sys.executable} -m pip index versions "
        f"{project}` (an unreachable index reports the same)",
    )


TIMEOUT_ENV = "SGLFORGE_PIP_TIMEOUT"


def pip_timeouts() -> tuple[int, float]:
    """(seconds pip waits per connection, seconds one pip run may take in all)."""
    try:
        each = max(1, int(float(os.environ.get(TIMEOUT_ENV, "30"))))
    except ValueError:
        each = 30
    return each, float(each * 20)


def _pip(args: Sequence[str], waiting_for: str = "") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    each, total = pip_timeouts()
    cmd = [sys.executable, "-m", "pip", *args, "--timeout", str(each), "--retries", "2"]
    try:
        return subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            env=env,
            stdin=subprocess.DEVNULL,
            check=False,
            timeout=total,
        )
    except subprocess.TimeoutExpired as exc:
        raise UpstreamError(
            f"pip gave no answer within {total:g} s while {waiting_for or ' '.join(args[:2])}",
            f"check the network or pip's index settings; set ${TIMEOUT_ENV}=SECONDS (per "
            "connection) to wait longer",
        ) from exc
    except OSError as exc:  # pragma: no cover - the interpreter itself is missing
        raise UpstreamError(f"cannot run pip: {exc}", "install pip for this Python") from exc


def _spec_slug(spec_set: SpecifierSet) -> str:
    # str(SpecifierSet) sorts its clauses, so equivalent spellings share one history.
    text = str(spec_set)
    names = {">=": "ge", "<=": "le", "==": "eq", "!=": "ne", "~=": "compat", ">": "gt", "<": "lt"}
    readable = re.sub(r"===|~=|==|!=|>=|<=|>|<", lambda m: names.get(m.group(0), "arb"), text)
    readable = re.sub(r"[^A-Za-z0-9.]+", "_", readable)[:60]
    return f"{readable}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        # Blocks until another process building the same project's histories is done.
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _recover(repo: Path) -> None:
    """Undo what a process killed mid-build left behind (we hold the lock)."""
    old = repo.with_name(repo.name + ".old")
    if old.exists():
        if (repo / "HEAD").exists():
            shutil.rmtree(old, ignore_errors=True)
        else:
            shutil.rmtree(repo, ignore_errors=True)
            os.replace(old, repo)
    for stale in repo.parent.glob(repo.name + ".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)


def _chain(repo: Path) -> list[tuple[str, str]]:
    """(version, commit) along the history's branch, oldest first; stops at an untagged commit."""
    res = git.run(repo, "rev-list", "--first-parent", "--reverse", BRANCH, check=False)
    if res.status != 0:
        return []
    by_commit: dict[str, str] = {}
    refs = git.out(repo, "for-each-ref", "--format=%(objectname) %(refname:strip=2)", "refs/tags")
    for line in refs.splitlines():
        sha, _, tag = line.partition(" ")
        if tag.startswith("v"):
            by_commit[sha] = tag[1:]
    chain: list[tuple[str, str]] = []
    for sha in res.stdout.split():
        if sha not in by_commit:
            break
        chain.append((by_commit[sha], sha))
    return chain


def _wheel(
    wheels: Path,
    project: str,
    version: Version,
    pip_args: Sequence[str],
    seed: Sequence[Path] = (),
    progress: Progress | None = None,
    step: str = "wheel",
) -> Path:
    """The cached wheel of ``project==version``, downloading it once."""
    found = _cached_wheel(wheels, project, version)
    if found:
        return found
    wheels.mkdir(parents=True, exist_ok=True)
    for folder in seed:
        old = _cached_wheel(folder, project, version)
        if old:
            tmp = wheels / f".seed-{os.getpid()}-{old.name}"
            try:
                os.link(old, tmp)
            except OSError:
                shutil.copyfile(old, tmp)
            os.replace(tmp, wheels / old.name)
            return wheels / old.name
    say = resolve(progress)
    if not pip_args:
        return _download(wheels, project, version, say, step)
    say.info(f"{step}: downloading {project} {version} with pip")
    tmp = Path(tempfile.mkdtemp(dir=wheels, prefix=f".download-{version}-"))
    try:
        res = _pip(
            [
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--quiet",
                "--dest",
                str(tmp),
                *pip_args,
                f"{project}=={version}",
            ],
            f"downloading the wheel of {project} {version}",
        )
        got = _cached_wheel(tmp, project, version)
        if res.returncode != 0 or not got:
            text = f"{res.stdout}\n{res.stderr}"
            errors = [ln for ln in text.splitlines() if ln.startswith("ERROR")]
            raise UpstreamError(
                f"pypi:{project}=={version}: wheel download failed"
                f" ({errors[-1] if errors else f'pip exited with status {res.returncode}'})",
                f"retry, or check `{sys.executable} -m pip download --no-deps "
                f"--only-binary=:all: {project}=={version}`",
            )
        dest = wheels / got.name
        os.replace(got, dest)
        return dest
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


INDEX_ENV = "SGLFORGE_PYPI_URL"
_RELEASES: dict[tuple[str, str], dict[Version, dict[str, str]]] = {}
# Linux x86_64 platform tags of wheels (manylinux1/2010/2014, manylinux_2_NN, plain linux).
_LINUX_X86_64 = re.compile(r"^(manylinux\w*|linux)_x86_64$")


def _index_url() -> str:
    """``$SGLFORGE_PYPI_URL``, else pip's ``$PIP_INDEX_URL`` without its ``/simple`` (a mirror
    serving PyPI's JSON API there too), else https://pypi.org."""
    given = os.environ.get(INDEX_ENV) or re.sub(
        r"/simple/?$", "", os.environ.get("PIP_INDEX_URL", "")
    )
    return (given or "https://pypi.org").rstrip("/")


def _index_wheels(project: str) -> dict[Version, dict[str, str]]:
    """version -> the Linux x86_64 wheel to use (filename, url, sha256), from the JSON API."""
    import requests

    key = (_index_url(), canonicalize_name(project))
    if key in _RELEASES:
        return _RELEASES[key]
    url = f"{key[0]}/pypi/{key[1]}/json"
    each, _ = pip_timeouts()
    hint = f"check the network (or ${INDEX_ENV}), or pass --upstream PATH to a local sglang clone"
    try:
        res = requests.get(url, timeout=each, headers={"Accept": "application/json"})
    except requests.RequestException as exc:
        raise UpstreamError(
            f"pypi:{project}: the package index is unreachable: could not fetch {url}: "
            f"{type(exc).__name__}",
            hint,
        ) from None
    if res.status_code == 404:
        raise UpstreamError(
            f"pypi:{project}: no such project on {key[0]} ({url}: 404)",
            "check the project name (pypi:sglang)",
        )
    try:
        res.raise_for_status()
        releases = res.json()["releases"]
    except (requests.RequestException, ValueError, KeyError, TypeError) as exc:
        raise UpstreamError(f"pypi:{project}: unexpected answer from {url}: {exc}", hint) from None
    picked: dict[Version, dict[str, str]] = {}
    for raw, files in releases.items():
        try:
            version = Version(raw)
        except InvalidVersion:
            continue
        choice = _linux_wheel(files or [])
        if choice:
            picked[version] = choice
    _RELEASES[key] = picked
    return picked


def _linux_wheel(files: list[dict[str, object]]) -> dict[str, str] | None:
    """A wheel any Linux x86_64 host could install: pure first, then manylinux; by name."""
    ranked = []
    for f in files:
        name = str(f.get("filename", ""))
        if f.get("packagetype") != "bdist_wheel" or f.get("yanked"):
            continue
        try:
            _, _, _, tags = parse_wheel_filename(name)
        except InvalidWheelFilename:
            continue
        platforms = {t.platform for t in tags}
        if "any" in platforms:
            rank = 0
        elif any(_LINUX_X86_64.match(p) for p in platforms):
            rank = 1
        else:
            continue
        digests = f.get("digests")
        sha = str(digests.get("sha256", "")) if isinstance(digests, dict) else ""
        ranked.append((rank, name, {"filename": name, "url": str(f.get("url")), "sha256": sha}))
    return min(ranked, key=lambda r: r[:2])[2] if ranked else None


def _download(
    wheels: Path,
    project: str,
    version: Version,
    progress: Progress | None = None,
    step: str = "wheel",
) -> Path:
    """Download the chosen wheel of ``project==version`` into ``wheels`` (checked, renamed in);
    ``progress`` sees the bytes as they arrive."""
    import requests

    info = _index_wheels(project).get(version)
    if info is None:
        raise UpstreamError(
            f"pypi:{project}=={version}: no Linux x86_64 wheel on {_index_url()}",
            "pick another release",
        )
    each, _ = pip_timeouts()
    dest = wheels / info["filename"]
    tmp = wheels / f".download-{os.getpid()}-{info['filename']}"
    digest = hashlib.sha256()
    say = resolve(progress)
    try:
        with requests.get(info["url"], stream=True, timeout=each) as res:
            res.raise_for_status()
            size = res.headers.get("Content-Length", "")
            total = int(size) if size.isdigit() else None
            with (
                say.task(f"{step} {info['filename']}", total, unit="bytes") as task,
                open(tmp, "wb") as fh,
            ):
                for chunk in res.iter_content(1 << 18):
                    fh.write(chunk)
                    digest.update(chunk)
                    task.advance(len(chunk))
    except (requests.RequestException, OSError) as exc:
        tmp.unlink(missing_ok=True)
        raise UpstreamError(
            f"pypi:{project}=={version}: wheel download failed ({type(exc).__name__}: {exc})",
            f"retry; the wheel is {info['url']}",
        ) from None
    if info["sha256"] and digest.hexdigest() != info["sha256"]:
        tmp.unlink(missing_ok=True)
        raise UpstreamError(
            f"pypi:{project}=={version}: {info['filename']} does not match the index's sha256",
            "retry (a proxy or mirror may have served other bytes)",
        )
    os.replace(tmp, dest)
    return dest


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
        if name == want and ver == version:
            hits.append(path)
    # Several platform wheels of one release carry the same sources; pick one stably.
    return sorted(hits)[0] if hits else None


def _rebuild(
    repo: Path,
    kept: list[tuple[str, str]],
    versions: Sequence[Version],
    wheels: Sequence[Path],
    project: str,
    progress: Progress | None = None,
) -> None:
    """Build the new history in a temporary folder, then rename it over ``repo``."""
    repo.parent.mkdir(parents=True, exist_ok=True)
    tmp = repo.with_name(f"{repo.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        if (repo / "HEAD").exists():
            # A local clone hard-links every object file: cheap, the old history stays intact,
            # and no object ever disappears from the history (a cache that borrows objects
            # from it through alternates keeps working even after a rebuild from the start).
            git.run(repo.parent, "clone", "--bare", "--quiet", "--local", str(repo), str(tmp))
            git.run(tmp, "remote", "remove", "origin")
            keep = {f"v{v}" for v, _ in kept}
            for tag in git.out(tmp, "tag", "--list").splitlines():
                if tag and tag not in keep:
                    git.run(tmp, "tag", "-d", tag)
            if kept:
                git.run(tmp, "update-ref", BRANCH, kept[-1][1])
            else:
                git.run(tmp, "update-ref", "-d", BRANCH)
        else:
            tmp.mkdir(parents=True)
            git.run(tmp, "init", "--bare", "--quiet")
            git.run(tmp, "symbolic-ref", "HEAD", BRANCH)
        parent = kept[-1][1] if kept else None
        known = _tree_blobs(tmp, parent) if parent else {}
        with resolve(progress).task(f"pypi:{project} history", len(versions)) as task:
            for version, wheel in zip(versions, wheels, strict=True):
                parent, known = _import_release(tmp, parent, known, version, wheel, project)
                task.advance(note=f"v{version}")
        old = repo.with_name(repo.name + ".old")
        if repo.exists():
            os.replace(repo, old)
        os.replace(tmp, repo)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _tree_blobs(repo: Path, commit: str) -> dict[str, tuple[str, str]]:
    """path -> (mode, blob sha) of every file in ``commit``."""
    files: dict[str, tuple[str, str]] = {}
    listing = git.run(repo, "ls-tree", "-r", "-z", "--full-tree", commit, strip=False).stdout
    for entry in listing.split("\0"):
        if not entry:
            continue
        meta, _, path = entry.partition("\t")
        mode, _, sha = meta.split(" ")
        files[path] = (mode, sha)
    return files


def _wheel_files(wheel: Path, project: str) -> dict[str, tuple[str, bytes]]:
    """repo path -> (git mode, content) for the sources in the wheel's package folders."""
    package = canonicalize_name(project).replace("-", "_")
    files: dict[str, tuple[str, bytes]] = {}
    try:
        zf = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise UpstreamError(
            f"{wheel}: not a readable wheel ({exc})", f"delete it and run again: rm {wheel}"
        ) from exc
    with zf:
        for info in zf.infolist():
            name = info.filename
            top = name.split("/", 1)[0]
            # Only the import package: sglang/ -> python/sglang/. dist-info, tools/ etc. are
            # packaging artefacts whose place in the repository a wheel does not record.
            if info.is_dir() or top != package or ".." in name.split("/"):
                continue
            if name.endswith(_BINARY_SUFFIXES) or ".so." in name or "/__pycache__/" in name:
                continue
            unix = info.external_attr >> 16
            data = zf.read(info)
            if stat.S_ISLNK(unix):
                mode = "120000"
            elif unix & 0o111:
                mode = "100755"
            else:
                mode = "100644"
            files[f"python/{name}"] = (mode, data)
    if not files:
        raise UpstreamError(
            f"{wheel.name}: no {package}/ package folder in the wheel",
            "this source only understands wheels whose package folder is python/<package>/",
        )
    return files


def _blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _import_release(
    repo: Path,
    parent: str | None,
    known: dict[str, tuple[str, str]],
    version: Version,
    wheel: Path,
    project: str,
) -> tuple[str, dict[str, tuple[str, str]]]:
    """Commit one release on top of ``parent`` with git fast-import; returns (commit, files)."""
    files = _wheel_files(wheel, project)
    package = canonicalize_name(project).replace("-", "_")
    have = {sha for _, sha in known.values()}
    when = _epoch(git.IDENTITY["GIT_COMMITTER_DATE"])
    who = f"{git.IDENTITY['GIT_COMMITTER_NAME']} <{git.IDENTITY['GIT_COMMITTER_EMAIL']}>"
    message = (
        f"{project} {version}: python/ tree of the released wheel\n\n"
        f"Built by sglforge (pypi source, format {FORMAT}) from the PyPI release {version}: the\n"
        f"wheel's {package}/ folder placed at python/{package}/. This tree holds python/ only:\n"
        f"no sgl-kernel/, docker/, 3rdparty/ or tests outside python/, and no compiled modules.\n"
    ).encode()
    chunks = [
        b"commit %s\nmark :1\n" % BRANCH.encode(),
        b"author %s %d +0000\ncommitter %s %d +0000\n" % (who.encode(), when, who.encode(), when),
        b"data %d\n%s\n" % (len(message), message),
    ]
    if parent:
        chunks.append(b"from %s\n" % parent.encode())
    chunks.append(b"deleteall\n")
    new_known: dict[str, tuple[str, str]] = {}
    for path in sorted(files):
        mode, data = files[path]
        sha = _blob_sha(data)
        new_known[path] = (mode, sha)
        quoted = _quote_path(path)
        if sha in have:
            # Already in the repository: refer to it instead of sending the bytes again.
            chunks.append(b"M %s %s %s\n" % (mode.encode(), sha.encode(), quoted))
        else:
            chunks.append(
                b"M %s inline %s\ndata %d\n%s\n" % (mode.encode(), quoted, len(data), data)
            )
            have.add(sha)
    chunks.append(b"reset refs/tags/v%s\nfrom :1\n\ndone\n" % str(version).encode())
    git.run(repo, "fast-import", "--quiet", "--done", stdin=b"".join(chunks))
    commit = git.out(repo, "rev-parse", "--verify", f"refs/tags/v{version}^{{commit}}")
    return commit, new_known


def _quote_path(path: str) -> bytes:
    raw = path.encode()
    if any(c in raw for c in b'"\\\n') or raw.startswith(b'"'):
        escaped = raw.replace(b"\\", b"\\\\").replace(b'"', b'\\"').replace(b"\n", b"\\n")
        return b'"' + escaped + b'"'
    return raw


def _epoch(date: str) -> int:
    from datetime import datetime

    return int(datetime.strptime(date, "%Y-%m-%dT%H:%M:%S%z").timestamp())


def tagged_versions(repo: Path) -> list[str]:
    """The versions a history built by :func:`history` holds, oldest first."""
    return [v for v, _ in _chain(repo)]


__all__ = ["DEFAULT_SPEC", "available_versions", "history", "parse_source", "tagged_versions"]
