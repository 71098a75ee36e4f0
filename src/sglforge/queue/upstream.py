"""Where upstream comes from: a git URL or path, or a history built from PyPI wheels.

Every source ends up as one bare mirror in the user cache (``sglforge.cache``: shared by every
project and CI run) that is fetched, never re-cloned. The pin's commit is enforced here.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from sglforge import git
from sglforge.errors import UpstreamError
from sglforge.queue.series import Pin, load_pin, save_pin

UPSTREAM_ENV = "SGLFORGE_UPSTREAM"


@dataclass(frozen=True)
class PypiSource:
    """A ``pypi:`` upstream's store: releases are imported when a ref first asks for them."""

    project: str
    spec: str
    cache_root: Path  # the PyPI part of the shared cache
    mirrors: Path  # where the git mirror of the store lives
    seed: tuple[Path, ...] = ()

    @property
    def store(self) -> Path:
        from sglforge import pypi

        return pypi.store(self.cache_root, self.project)

    def tags(self) -> list[str]:
        """The releases the index has that the spec admits, as tags (asks the index)."""
        from sglforge import pypi

        return [f"v{v}" for v in pypi.available_versions(self.project, self.spec)]

    def grow(self, versions: list[Version]) -> Path:
        """Import ``versions`` (asked for by ref: yanked ones too) and refresh the mirror."""
        from sglforge import pypi

        store = pypi.ensure(self.cache_root, self.project, versions, exact=True, seed=self.seed)
        return _pypi_mirror(self.mirrors, store)


def _pypi_mirror(mirrors: Path, store: Path) -> Path:
    """The git mirror of a PyPI store (worktrees are made there, never in the shared store),
    fetched only when the store holds a release the mirror lacks."""
    from sglforge import pypi

    path = mirrors / git.cache_name(str(store))
    try:
        if (path / "HEAD").exists() and set(pypi.tagged_versions(path)) >= set(
            pypi.tagged_versions(store)
        ):
            return path
    except git.GitFailed:
        pass  # not a repository any more: ensure_cache makes it again
    return git.ensure_cache(mirrors, str(store), share_objects=True)


def ref_release(ref: str) -> Version | None:
    """The release a ``v<version>`` (or bare version) ref names; None for anything else."""
    text = ref.removeprefix("refs/tags/")
    text = text[1:] if text[:1] in ("v", "V") else text
    if not text[:1].isdigit():
        return None
    try:
        return Version(text)
    except InvalidVersion:
        return None


@dataclass(frozen=True)
class Upstream:
    """An opened upstream: the source string, the key the pin records it under, the cache."""

    source: str
    key: str
    cache: Path
    python_only: bool  # a PyPI-built tree holds python/ only
    pypi: PypiSource | None = None
    # whether this run fetched the whole upstream already (``refresh``): once is enough
    _fetched: list[bool] = dataclasses.field(
        default_factory=lambda: [False], compare=False, repr=False
    )

    def refresh(self) -> None:
        """Fetch every tag and branch of a git upstream (once a run): for the commands that
        ask what upstream has now (``upstream tags``, ``upgrade``, ``patches check``, ``pin``).
        Every other command works from the local mirror and fetches only what it lacks."""
        if not self._from_pypi() and not self._fetched[0]:
            git.fetch_cache(self.cache, self.source)
            self._fetched[0] = True

    def _from_pypi(self) -> bool:
        """A history built from PyPI wheels: nothing to fetch from git (its releases are
        imported when asked for)."""
        return self.pypi is not None or self.python_only

    def _fetch_names(self, ref: str) -> None:
        """Fetch ``ref`` alone (a tag by name; anything else brings the whole fetch)."""
        if not self._from_pypi() and not self._fetched[0]:
            git.fetch_cache(self.cache, self.source, (ref,))

    def tags(self) -> list[str]:
        """Every tag of upstream: a git source's, or the releases a PyPI source can import."""
        if self.pypi is not None:
            return self.pypi.tags()
        self.refresh()
        return git.tags(self.cache)

    def _grow(self, refs: list[str]) -> None:
        if self.pypi is None:
            return
        wanted = [v for r in refs if (v := ref_release(r)) is not None]
        if wanted:
            self.pypi.grow(wanted)

    def tag(self, ref: str) -> str:
        """``ref`` as upstream spells it: a bare version (``0.5.15``, pip's spelling) is the
        tag ``v0.5.15`` when only that exists; anything else unchanged."""
        if not re.fullmatch(r"\d+(\.\d+)+\S*", ref):
            return ref
        try:
            git.resolve(self.cache, ref)
            return ref
        except UpstreamError:
            pass
        if git.resolve_fixed(self.cache, f"v{ref}") is not None:
            return f"v{ref}"  # in the local mirror: upstream is not asked
        try:
            known = self.tags()
        except UpstreamError:
            known = git.tags(self.cache)
        return f"v{ref}" if f"v{ref}" in known else ref

    def resolve(self, ref: str) -> str:
        """The commit ``ref`` names: from the local mirror when it holds it as a tag or a
        commit (nothing is fetched: the upstream may be unreachable); else fetched by name
        first (a branch, which moves, is always fetched)."""
        fixed = git.resolve_fixed(self.cache, ref)
        if fixed is not None:
            return fixed
        self._fetch_names(ref)
        try:
            return git.resolve(self.cache, ref)
        except UpstreamError:
            pass
        if self.pypi is not None and ref_release(ref) in self._index_versions():
            # a release not imported yet (an unreachable index says so here, not "not found")
            self._grow([ref])
            return git.resolve(self.cache, ref)
        import difflib

        outside = self._outside_spec(ref)
        if outside:
            raise UpstreamError(*outside)
        try:
            known = self.tags()
        except UpstreamError:
            known = git.tags(self.cache)
        near = nearest_tags(ref, known) or difflib.get_close_matches(ref, known, n=5, cutoff=0.5)
        where = f"upstream {self.source}" + (
            " (python/ only, from PyPI)" if self.python_only else ""
        )
        raise UpstreamError(
            f"ref {ref!r} not found in {where}"
            + (f"; nearest tags: {', '.join(near)}" if near else f"; {len(known)} tags known"),
            f"`{with_upstream('sglforge upstream tags', self.source)}` lists them; "
            "or pass another --upstream",
        ) from None

    def _index_versions(self) -> set[Version]:
        from sglforge import pypi

        assert self.pypi is not None
        return set(pypi.releases(self.pypi.project))

    def _outside_spec(self, ref: str) -> tuple[str, str] | None:
        """(message, hint) when ``ref`` is a release a ``pypi:sglang<SPEC>`` source leaves out."""
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version

        parsed = _parse_pypi(self.source) if self.python_only else None
        if not parsed or not parsed[1]:
            return None
        try:
            version = Version(ref.removeprefix("v"))
        except InvalidVersion:
            return None
        spec = SpecifierSet(parsed[1])
        if spec.contains(version, prereleases=True):
            return None
        return (
            f"{ref} is outside {self.source}: that history holds only releases {spec}",
            f"widen the spec to include it (e.g. --upstream 'pypi:{parsed[0]}>={version}')",
        )

    def resolve_all(self, refs: list[str]) -> dict[str, str]:
        """Commits of many refs at once (a PyPI source imports the missing releases in one
        go); unknown refs raise like ``resolve``."""
        known = git.resolve_many(self.cache, [])
        missing = [r for r in refs if r not in known]
        if missing and self.pypi is not None:
            offered = self._index_versions()
            self._grow([r for r in missing if ref_release(r) in offered])
            known = git.resolve_many(self.cache, [])
        return {ref: known[ref] if ref in known else self.resolve(ref) for ref in refs}

    def tree(self, commit: str) -> str:
        return git.tree(self.cache, commit)


def with_upstream(command: str, upstream: str | None) -> str:
    """A ``sglforge ...`` command line for a hint, with the ``--upstream`` in effect (when it
    is not the pin's own), so that pasting the hint works as the command that gave it did."""
    import shlex

    return command + (f" --upstream {shlex.quote(upstream)}" if upstream else "")


def hint_upstream(up: Upstream, pin: Pin) -> str | None:
    """The ``--upstream`` a hint must repeat for ``up``: None when it is the pin's URL."""
    return None if up.source == pin.url else up.source


def nearest_tags(ref: str, known: list[str]) -> list[str]:
    """For a ref naming a version, the release tags next to it by version (the one below,
    the one above, each labelled), not by spelling: ``v9.9.9`` -> ``v0.5.23 (the newest)``.
    [] when ``ref`` names no version or no tag does."""
    from sglforge.queue.series import ref_version

    wanted = ref_version(ref)
    if wanted is None:
        return []
    releases = sorted(
        (v, t) for t in known if (v := ref_version(t)) is not None and not v.is_prerelease
    )
    if not releases:
        return []
    below = [t for v, t in releases if v < wanted]
    above = [t for v, t in releases if v > wanted]
    out = []
    if below:
        out.append(f"{below[-1]} (the newest)" if not above else f"{below[-1]} (below)")
    if above:
        out.append(f"{above[0]} (the oldest)" if not below else f"{above[0]} (above)")
    return out


def upstream_source(pin: Pin, upstream: str | None = None) -> str:
    """The upstream to use: ``upstream`` (``--upstream``, which also reads $SGLFORGE_UPSTREAM
    at the command line), else the pin URL."""
    return upstream or pin.url


def _said_where(source: str, mirror: Path, history: Path | None = None) -> None:
    """-v: where the upstream's commits come from (the mirror; a PyPI history's store and
    the indexes its wheels come from), credentials never shown."""
    from sglforge.progress import current
    from sglforge.urls import shown

    say = current().detail
    say(f"upstream {shown(source)}: mirror {mirror}")
    if history is not None and current().verbose:  # pip's config is read only for -v
        from sglforge import index

        say(f"upstream {shown(source)}: history {history}; wheels from {index.explain()}")


def open_upstream(root: Path, pin: Pin, upstream: str | None = None) -> Upstream:
    """Open the source ``upstream_source`` names: its mirror in the shared cache, cloned
    when there is none; an existing one is not fetched (``Upstream.refresh`` does)."""
    from sglforge import cache as shared

    source = upstream_source(pin, upstream)
    cache_root = shared.upstream_mirrors()  # shared by every project (not build/upstream)
    parsed = _parse_pypi(source)
    if parsed:
        from sglforge import pypi

        project, spec = parsed
        src = PypiSource(
            project=project,
            spec=spec,
            cache_root=shared.pypi_cache(),
            mirrors=cache_root,
            seed=tuple(shared.legacy_wheels(root, project)),
        )
        # Only the pin's release is imported now; other refs import theirs when asked for.
        pinned = ref_release(pin.ref)
        store = pypi.ensure(
            src.cache_root, project, [pinned] if pinned else [], exact=True, seed=src.seed
        )
        cache = _pypi_mirror(cache_root, store)
        _said_where(source, cache, store)
        return Upstream(
            source=source, key=f"pypi:{project}", cache=cache, python_only=True, pypi=src
        )
    # the mirror as it is, when there is one: refs are fetched when asked for and missing
    cache = git.ensure_cache(cache_root, source, refresh=False)
    _said_where(source, cache)
    key = source if source == pin.url else _normalise(source)
    return Upstream(source=source, key=key, cache=cache, python_only=False)


# What an upstream may start with; anything else before a colon is a typo (``pypy:sglang``), not
# a host of git's scp-like form (those carry a user@ or a dotted host: git@github.com:org/repo).
SCHEMES = ("pypi", "https", "http", "ssh", "git", "file", "git+ssh", "ssh+git")
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def check_source(source: str) -> str:
    """``source`` if it names an upstream sglforge can open; UpstreamError naming an unknown
    scheme (with the closest known one) otherwise, before anything is fetched."""
    import difflib

    m = _SCHEME_RE.match(source)
    if m is None or source.startswith("pypi:"):
        return source
    scheme = m.group(1).lower()
    if scheme in SCHEMES or "." in scheme or "@" in source.split(":", 1)[0]:
        return source
    if Path(source).expanduser().exists():
        return source
    near = difflib.get_close_matches(scheme, SCHEMES, n=1, cutoff=0.5)
    rest = source[m.end() :]
    guess = f"{near[0]}:{rest}" if near and near[0] == "pypi" else f"'{near[0]}'" if near else ""
    raise UpstreamError(
        f"upstream {source!r}: unknown scheme {scheme + ':'!r}"
        + (f" (did you mean {guess}?)" if guess else ""),
        "use pypi:sglang, a git URL (https://, ssh://, git@host:path) or a local path",
    )


def _parse_pypi(source: str) -> tuple[str, str] | None:
    check_source(source)
    if not source.startswith("pypi:"):
        return None
    from sglforge import pypi

    parsed = pypi.parse_source(source)
    if parsed is None:
        raise UpstreamError(
            f"upstream {source!r}: not a valid PyPI source",
            "use pypi:sglang or pypi:sglang>=0.5.10,<=0.5.23",
        )
    return parsed


def _normalise(source: str) -> str:
    if git.is_local(source):
        return str(Path(source).expanduser().resolve())
    return source


def pins_commit(up: Upstream, pin: Pin) -> bool:
    """Whether the pin records ``commit`` for this upstream (its own git URL), rather than a
    [sources] tree: a PyPI history's commits depend on the wheels it was built from, so even
    as the pin's URL (``url = "pypi:sglang"``) it is pinned by content."""
    return up.key == pin.url and not up.python_only


def machine_local(key: str) -> bool:
    """A source only this machine knows (a local path): its facts never go into the pin."""
    return not key.startswith("pypi:") and git.is_local(key)


def _observed_path(root: Path) -> Path:
    return root / "build" / "upstream" / "observed.json"


def _observed(root: Path) -> dict[str, dict[str, str]]:
    """What this machine saw each (source, tag) resolve to: build/upstream/observed.json."""
    import json

    try:
        data = json.loads(_observed_path(root).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _observe(
    root: Path, seen: dict[str, dict[str, str]], key: str, ref: str, what: str, value: str
) -> None:
    """Remember ``value`` in ``seen`` (what ``_observed`` read for this run) and write it."""
    import json

    from sglforge.errors import LocalDiskError
    from sglforge.util import atomic_write

    data = dict(seen)
    data[f"{key} {ref}"] = {"source": key, "ref": ref, what: value}
    try:
        atomic_write(_observed_path(root), json.dumps(data, indent=2, sort_keys=True) + "\n")
    except LocalDiskError:
        # A read-only checkout: nothing is remembered, a later run on a writable one will.
        # (The pin's own record, when it has one, is enforced all the same.)
        pass


def pinned_commit(root: Path, pin: Pin, up: Upstream, record: bool = False) -> str:
    """Resolve the pinned tag and refuse it if it moved since it was recorded.

    Reading never writes the pin: what the pin records (``commit``, or a [sources] tree) is
    enforced; what it does not is enforced against what this machine saw before, kept under
    ``build/upstream/observed.json``. With ``record`` (``sglforge patches pin``, refresh and
    upgrade), the pin itself records it, except for machine-local sources (a local path),
    whose facts stay under build/.
    """
    commit = up.resolve(pin.ref)
    seen = _observed(root)
    if pins_commit(up, pin):
        expected, origin = pin.commit, "patches/upstream.toml pins"
        if expected is None and f"{up.key} {pin.ref}" in seen:
            expected = seen[f"{up.key} {pin.ref}"].get("commit")
            origin = "this machine resolved it before to"
        if expected and expected != commit:
            raise UpstreamError(
                f"pinned tag {pin.ref} now resolves to {commit[:12]} in {up.source}, "
                f"but {origin} {expected[:12]} (the tag moved)",
                "check upstream; if the new commit is intended, record it with "
                "`sglforge patches pin` (after deleting the `commit` line of "
                "patches/upstream.toml, or build/upstream/observed.json)",
            )
        if record and pin.commit is None:
            save_pin(root, dataclasses.replace(pin, commit=commit))
        elif expected is None:
            _observe(root, seen, up.key, pin.ref, "commit", commit)
        return commit
    # Another source (a mirror, a local clone, PyPI wheels) has commits of its own; a PyPI
    # history is rebuilt from wheels, so its content (tree), not its commit, is what we pin.
    tree = up.tree(commit)
    recorded = pin.sources.get(up.key, {})
    origin = "patches/upstream.toml"
    if recorded.get("ref") != pin.ref or not recorded.get("tree"):
        recorded = seen.get(f"{up.key} {pin.ref}", {})
        origin = "build/upstream/observed.json (what this machine saw before)"
    if recorded.get("ref") == pin.ref and recorded.get("tree") and recorded["tree"] != tree:
        raise UpstreamError(
            f"pinned tag {pin.ref} in {up.source} has other content ({tree[:12]}) than "
            f"recorded in {origin} ({recorded['tree'][:12]}): the tag moved",
            f"check the source; if intended, delete that record ([sources.{up.key!r}] of "
            "patches/upstream.toml, or build/upstream/observed.json) and rerun",
        )
    if record and not machine_local(up.key):
        if pin.sources.get(up.key) != {"ref": pin.ref, "tree": tree}:
            sources = dict(pin.sources)
            sources[up.key] = {"ref": pin.ref, "tree": tree}
            save_pin(root, dataclasses.replace(pin, sources=sources))
    elif not recorded.get("tree"):
        _observe(root, seen, up.key, pin.ref, "tree", tree)
    return commit


def record_pin(root: Path, upstream: str | None = None) -> dict[str, str]:
    """``sglforge patches pin``: resolve the pinned tag and record it in the pin."""
    from sglforge.util import project_lock

    with project_lock(root):
        pin = load_pin(root)
        up = open_upstream(root, pin, upstream)
        up.refresh()  # recording what upstream says now: a moved tag is refused
        commit = pinned_commit(root, pin, up, record=True)
        if pins_commit(up, pin):
            where = "commit in patches/upstream.toml"
        elif machine_local(up.key):
            where = "a local path: kept in build/upstream/observed.json, not in the pin"
        else:
            where = f"[sources.{up.key!r}] tree in patches/upstream.toml"
        return {"ref": pin.ref, "source": up.source, "commit": commit, "recorded": where}
