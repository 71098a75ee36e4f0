"""``sglforge init``: lay out a new fork-packaging project from the files sglforge ships.

The project gets the queue (``patches/series``, empty, and ``patches/upstream.toml``, the pin
of the sglang release sglforge's own queue targets), the default ``images/`` and ``smoke/``
(with the stand-in model the CPU scenario mounts), a CI workflow, ``CHANGELOG.md`` and a
``.gitignore`` for ``build/``. Nothing is overwritten: when any of those files exists, nothing
is written and the error names them. Each file is staged complete next to its place and
linked in (a link never replaces an existing file); a failure removes what was linked.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sglforge import __version__
from sglforge.defaults import defaults_root
from sglforge.errors import ConfigError
from sglforge.util import confined, make_dirs, raise_held, signals_held

# Where a new project takes upstream sglang from (``init --upstream``): its released wheels,
# so that no clone of upstream's whole history is needed and the CI job and a laptop agree.
DEFAULT_UPSTREAM = "pypi:sglang"
# The queues ``init --example NAME`` starts from: this repository's own, proven ones (files of
# the shipped patches/ folder).
EXAMPLES = {
    "glm52": (
        "GLM-5.2 MXFP4 with MTP on MI355X: the ROCm include guard, the Quark exclude fix and "
        "the tuned fused-MoE rows",
        ("patches/series", "patches/*.patch", "patches/configs/*"),
    ),
}
# The shipped scenario each example queue is for: a project publishing that scenario without
# the queue is told where its fixes are (the scan gate's hint; issue 45, U10).
EXAMPLE_SCENARIOS = {"glm52": "glm5-mxfp4-mtp-mi355x"}


def example_for(scenario: str, queue_names: set[str]) -> str | None:
    """The example whose queue the shipped scenario ``scenario`` needs, when the project's
    queue (``queue_names``, file names) lacks some of that queue's patches; else None."""
    from sglforge.defaults import defaults_root

    shipped = defaults_root()
    for example, name in EXAMPLE_SCENARIOS.items():
        if name != scenario or shipped is None:
            continue
        wanted = {p.name for p in (shipped / "patches").glob("*.patch")}
        if wanted - queue_names:
            return example
    return None


# Where sglforge itself is published (pyproject's Source URL): the fallback the workflow
# installs from when this install does not say where it came from.
SOURCE_URL = "https://github.com/sglforge/sglforge"

SKELETON = Path(__file__).resolve().parent / "data" / "skeleton"
# project path -> (where it comes from: "skeleton" or "defaults", file there)
_FROM_SKELETON = {
    "patches/series": "series",
    "CHANGELOG.md": "CHANGELOG.md",
    ".gitignore": "gitignore",
    ".github/workflows/sglforge.yml": "sglforge.yml",
}
_FROM_DEFAULTS = (
    "patches/upstream.toml",
    "images/targets.toml",
    "images/overlay.Dockerfile",
    "smoke/*.toml",
    # smoke/standin-cpu.toml mounts it ("../tests/standin/model"): a TEST DOUBLE's config
    "tests/standin/model/config.json",
    # smoke/standin-cpu-aiter.toml's stand-in MXFP4 model (GLM-5.2's MoE sizes): a TEST DOUBLE's
    "tests/standin/model-mxfp4/config.json",
)


@dataclass(frozen=True)
class InitResult:
    """What ``init_project`` wrote: the project folder and its new files (relative paths)."""

    root: Path
    files: tuple[str, ...]
    upstream: str = DEFAULT_UPSTREAM
    example: str | None = None
    install: str = ""  # what the CI workflow pip-installs sglforge from
    install_origin: str = ""  # how that was found
    git: str = ""  # "initialised", "existing" or "" (not asked)
    branch: str = ""  # the branch the workflow runs on pushes to
    note: str = ""  # what was left out of the upstream URL, and how git gets it instead


@dataclass(frozen=True)
class Install:
    """A pip requirement for this very sglforge, and how it was found."""

    requirement: str
    origin: str


def install_requirement() -> Install:
    """What a CI job should ``pip install`` to get the sglforge running now.

    sglforge is on no package index, so ``sglforge==VERSION`` would install nothing. pip
    records where an install came from (PEP 610, ``direct_url.json``): a git URL and commit,
    or an archive URL, are reachable from CI as they are. A local wheel or folder is not:
    then the release tag of this version in sglforge's own repository.
    """
    import importlib.metadata
    import json

    try:
        raw = importlib.metadata.distribution("sglforge").read_text("direct_url.json")
        info = json.loads(raw) if raw else {}
    except (importlib.metadata.PackageNotFoundError, ValueError):
        info = {}
    url = _without_credentials(str(info.get("url", "")))
    vcs = info.get("vcs_info") or {}
    if vcs.get("vcs") == "git" and url and vcs.get("commit_id"):
        return Install(f"sglforge @ git+{url}@{vcs['commit_id']}", "this install (pip: git)")
    archive = info.get("archive_info")
    if archive is not None and url.startswith(("https://", "http://")):
        return Install(f"sglforge @ {url}", "this install (pip: archive URL)")
    return Install(
        f"sglforge @ git+{SOURCE_URL}@v{__version__}",
        f"tag v{__version__} of sglforge's repository: this install came from a local file "
        "or folder, which CI cannot reach; change it with --install-from",
    )


def _without_credentials(url: str) -> str:
    """A URL with any ``user:token@`` removed: the workflow is committed, secrets are not."""
    import re

    return re.sub(r"^([a-z][a-z0-9+.-]*://)[^/@]*@", r"\1", url)


def pin_text(shipped: str, upstream: str) -> str:
    """The shipped pin with its ``url`` set to ``upstream`` (comments and the rest kept)."""
    import tomlkit

    doc = tomlkit.parse(shipped)
    doc["url"] = upstream
    return tomlkit.dumps(doc)


def check_upstream(upstream: str) -> str:
    """``upstream`` as the pin records it: pypi:PROJECT[SPEC] and URLs as given, a local
    path absolute; ConfigError for what sglforge cannot open (an unknown scheme)."""
    from sglforge import git
    from sglforge.errors import UpstreamError
    from sglforge.queue.upstream import check_source

    upstream = upstream.strip()
    try:
        check_source(upstream)
        if upstream.startswith("pypi:"):
            from sglforge import pypi

            pypi.parse_source(upstream)
            return upstream
    except UpstreamError as exc:
        raise ConfigError(exc.message, exc.hint) from None
    if git.is_local(upstream):
        path = Path(upstream).expanduser().resolve()
        if not path.is_dir():
            raise ConfigError(
                f"--upstream {upstream}: no such folder",
                "pass pypi:sglang, a git URL, or the path of a local sglang clone",
            )
        return str(path)
    return recorded_upstream(upstream)[0]


# What ``init`` says when it took credentials out of ``--upstream``.
CREDENTIALS_NOTE = (
    "the credentials in --upstream were not stored: patches/upstream.toml is committed, so it "
    "holds {url}; git supplies them when it fetches, from its credential helper "
    "(`git config --global credential.helper store`, then `git credential approve`) or "
    "~/.netrc"
)


def recorded_upstream(upstream: str) -> tuple[str, str]:
    """(``upstream`` as patches/upstream.toml records it, a note when something was taken out).

    A committed file holds no credential: a URL's userinfo, query and fragment (``?token=``,
    ``?private_token=``, a signed URL's ``X-Amz-*``) are dropped (``urls.scrub``, the rule
    for every URL sglforge writes), and git asks its own credential helper for them. An ssh
    login name without a password (``ssh://git@host/...``, ``git@host:org/repo``) is kept: it
    is who to log in as, not a secret."""
    from urllib.parse import urlsplit

    from sglforge.urls import scrub, shown

    if "://" not in upstream:
        return upstream, ""  # a path, pypi:PROJECT, or scp-like user@host:path
    clean = scrub(upstream)
    try:
        parts = urlsplit(upstream)
        login = parts.username if parts.password is None else None
        ssh = parts.scheme in ("ssh", "git+ssh")
    except ValueError:
        login, ssh = None, False
    if ssh and login:
        clean = clean.replace("://", f"://{login}@", 1)
    if clean == upstream:
        return clean, ""
    return clean, CREDENTIALS_NOTE.format(url=shown(clean))


# Opt-in (``init --watch``): the nightly upgrade job, on a branch and one pull request.
_WATCH = {".github/workflows/sglforge-upstream-watch.yml": "upstream-watch.yml"}


def project_files(
    upstream: str = DEFAULT_UPSTREAM,
    example: str | None = None,
    install: str | None = None,
    branch: str = "main",
    watch: bool = False,
) -> dict[str, bytes]:
    """Every file a new project gets, by path relative to the project, with its content."""
    shipped = defaults_root()
    if shipped is None:
        raise ConfigError(
            "this sglforge install carries no default images/ and smoke/ files",
            "reinstall sglforge (pip install --force-reinstall sglforge)",
        )
    files: dict[str, bytes] = {}
    for pattern in _FROM_DEFAULTS:
        found = sorted(shipped.glob(pattern))
        if not found:
            raise ConfigError(
                f"{shipped}: no {pattern} among the shipped defaults",
                "reinstall sglforge (pip install --force-reinstall sglforge)",
            )
        for path in found:
            files[path.relative_to(shipped).as_posix()] = path.read_bytes()
    for rel, name in {**_FROM_SKELETON, **(_WATCH if watch else {})}.items():
        text = (SKELETON / name).read_text()
        text = text.replace("{{SGLFORGE_VERSION}}", __version__)
        text = text.replace("{{SGLFORGE_INSTALL}}", install or install_requirement().requirement)
        text = text.replace("{{BRANCH}}", branch)
        files[rel] = text.encode()
    pin = files["patches/upstream.toml"].decode()
    files["patches/upstream.toml"] = pin_text(pin, upstream).encode()
    if example is not None:
        if example not in EXAMPLES:
            raise ConfigError(
                f"no example queue {example!r}; known: {', '.join(sorted(EXAMPLES))}",
                f"sglforge init --example {sorted(EXAMPLES)[0]} DIR",
            )
        for pattern in EXAMPLES[example][1]:
            found = sorted(p for p in shipped.glob(pattern) if p.is_file())
            if not found:
                raise ConfigError(
                    f"{shipped}: no {pattern} for the example {example!r} among the shipped files",
                    "reinstall sglforge (pip install --force-reinstall ...)",
                )
            for path in found:
                files[path.relative_to(shipped).as_posix()] = path.read_bytes()
    return dict(sorted(files.items()))


def init_project(
    dest: Path,
    upstream: str = DEFAULT_UPSTREAM,
    example: str | None = None,
    install: str | None = None,
    git_init: bool = False,
    watch: bool = False,
) -> InitResult:
    """Write a new project into ``dest`` (created if missing); ConfigError if a file exists.

    ``git_init``: make ``dest`` a git repository unless it is inside one already; the
    workflow then runs on pushes to that repository's branch.
    """
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise ConfigError(f"{dest}: exists and is not a folder", "sglforge init NEW_FOLDER")
    note = recorded_upstream(upstream.strip())[1]
    upstream = check_upstream(upstream)
    found = Install(install, "--install-from") if install else install_requirement()
    repo_state, branch = _git_branch(dest) if dest.is_dir() else ("", "")
    files = project_files(upstream, example, found.requirement, branch or "main", watch)
    _refuse_linked_folders(dest, files)
    existing = [rel for rel in files if (dest / rel).exists() or (dest / rel).is_symlink()]
    if existing:
        raise ConfigError(
            f"{dest}: would overwrite {', '.join(existing)}; nothing was written",
            "run sglforge init in an empty folder, or move those files away first",
        )
    make_dirs(dest)  # a dangling link or a file in the path: exit 74 naming it (F17)
    stage = Path(tempfile.mkdtemp(dir=dest, prefix=".sglforge-init-"))
    linked: list[Path] = []
    created: list[Path] = []
    try:
        for rel, data in files.items():
            tmp = stage / rel
            tmp.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        with signals_held() as arrived:
            try:
                for rel in files:
                    target = dest / rel
                    for parent in reversed(target.relative_to(dest).parents[:-1]):
                        folder = dest / parent
                        if not folder.exists():
                            folder.mkdir()
                            created.append(folder)
                    # where it lands, checked again just before (a link made meanwhile)
                    confined(dest, rel, "new file", "sglforge init")
                    os.link(stage / rel, target)  # FileExistsError, never a replacement
                    linked.append(target)
            except FileExistsError as exc:
                _undo(linked, created)
                raise ConfigError(
                    f"{exc.filename}: appeared while sglforge init was writing; "
                    "nothing was written",
                    "run sglforge init again in an empty folder",
                ) from None
            except BaseException:
                _undo(linked, created)
                raise
        raise_held(arrived)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    if git_init and not repo_state:
        repo_state, branch = _git_init(dest)
    return InitResult(
        root=dest.resolve(),
        files=tuple(files),
        upstream=upstream,
        example=example,
        install=found.requirement,
        install_origin=found.origin,
        git=repo_state,
        branch=branch or "main",
        note=note,
    )


def _refuse_linked_folders(dest: Path, files: dict[str, bytes]) -> None:
    """ConfigError when a folder ``init`` would write into is a symbolic link (``patches/``
    pointing at another project, ``.github/workflows`` elsewhere): it would write there."""
    linked = sorted(
        {
            parent.as_posix()
            for rel in files
            for parent in Path(rel).parents[:-1]
            if (dest / parent).is_symlink()
        }
    )
    if linked:
        raise ConfigError(
            f"{dest}: {', '.join(f'{p}/' for p in linked)} "
            f"{'is a symbolic link' if len(linked) == 1 else 'are symbolic links'}; "
            "sglforge init writes only inside the project, so nothing was written",
            "replace the link by a real folder (or remove it), then run sglforge init again",
        )


def _git_branch(dest: Path) -> tuple[str, str]:
    """("existing", its branch) when ``dest`` is inside a git work tree, else ("", "")."""
    from sglforge import git

    if not git.in_work_tree(dest):
        return "", ""
    return "existing", git.current_branch(dest)


def _git_init(dest: Path) -> tuple[str, str]:
    """``git init`` in ``dest`` (as ``cargo new`` does): ("initialised", its branch)."""
    from sglforge import git

    git.init(dest)
    branch = git.current_branch(dest)
    if branch and branch != "main":
        # the workflow was written for "main": follow the branch git chose
        wf = dest / ".github" / "workflows" / "sglforge.yml"
        from sglforge.util import atomic_write

        text = wf.read_text().replace("branches: [main]", f"branches: [{branch}]", 1)
        atomic_write(wf, text)
    return "initialised", branch


def _undo(linked: list[Path], created: list[Path]) -> None:
    for path in reversed(linked):
        path.unlink(missing_ok=True)
    for folder in reversed(created):
        try:
            folder.rmdir()
        except OSError:
            pass
