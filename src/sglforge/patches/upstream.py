"""Where upstream comes from: a git URL or path, or a history built from PyPI wheels.

Every source ends up as one shared bare cache under ``build/upstream/`` that is fetched,
never re-cloned. The pin's commit is enforced here.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from sglforge import git
from sglforge.errors import UpstreamError
from sglforge.patches.series import Pin, load_pin, save_pin

UPSTREAM_ENV = "SGLFORGE_UPSTREAM"
_PYPI_HISTORIES: dict[tuple[str, str, str], Path] = {}


@dataclass(frozen=True)
class Upstream:
    """An opened upstream: the source string, the key the pin records it under, the cache."""

    source: str
    key: str
    cache: Path
    python_only: bool  # a PyPI-built tree holds python/ only

    def resolve(self, ref: str) -> str:
        try:
            return git.resolve(self.cache, ref)
        except UpstreamError:
            import difflib

            known = git.tags(self.cache)
            near = difflib.get_close_matches(ref, known, n=5, cutoff=0.5)
            where = f"upstream {self.source}" + (
                " (python/ only, from PyPI)" if self.python_only else ""
            )
            raise UpstreamError(
                f"ref {ref!r} not found in {where}"
                + (f"; closest tags: {', '.join(near)}" if near else f"; {len(known)} tags known"),
                "pass an existing tag (`sglforge patches check --tags '>=0'` lists them) "
                "or another --upstream",
            ) from None

    def resolve_all(self, refs: list[str]) -> dict[str, str]:
        """Commits of many refs at once; unknown refs raise like ``resolve``."""
        known = git.resolve_many(self.cache, [])
        return {ref: known[ref] if ref in known else self.resolve(ref) for ref in refs}

    def tree(self, commit: str) -> str:
        return git.out(self.cache, "rev-parse", f"{commit}^{{tree}}")


def upstream_source(pin: Pin, upstream: str | None = None) -> str:
    """The upstream to use: ``upstream``, else $SGLFORGE_UPSTREAM, else the pin URL."""
    return upstream or os.environ.get(UPSTREAM_ENV) or pin.url


def open_upstream(root: Path, pin: Pin, upstream: str | None = None) -> Upstream:
    """Open (fetching into the cache) the source ``upstream_source`` names."""
    source = upstream_source(pin, upstream)
    cache_root = root / "build" / "upstream"
    parsed = _parse_pypi(source)
    if parsed:
        from sglforge import pypi

        project, spec = parsed
        memo = (str((root / "build" / "pypi").resolve()), project, spec)
        if memo not in _PYPI_HISTORIES:  # asking the index costs seconds; once per process
            _PYPI_HISTORIES[memo] = pypi.history(root / "build" / "pypi", project, spec)
        cache = git.ensure_cache(cache_root, str(_PYPI_HISTORIES[memo]), share_objects=True)
        return Upstream(source=source, key=f"pypi:{project}", cache=cache, python_only=True)
    cache = git.ensure_cache(cache_root, source)
    key = source if source == pin.url else _normalise(source)
    return Upstream(source=source, key=key, cache=cache, python_only=False)


def _parse_pypi(source: str) -> tuple[str, str] | None:
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


def pinned_commit(root: Path, pin: Pin, up: Upstream) -> str:
    """Resolve the pinned tag, record it on first use, refuse if it moved since."""
    commit = up.resolve(pin.ref)
    pin = load_pin(root)  # reread: another command may have recorded it meanwhile
    if up.key == pin.url:
        if pin.commit is None:
            save_pin(root, dataclasses.replace(pin, commit=commit))
        elif pin.commit != commit:
            raise UpstreamError(
                f"pinned tag {pin.ref} now resolves to {commit[:12]} in {up.source}, "
                f"but patches/upstream.toml pins {pin.commit[:12]} (the tag moved)",
                "check upstream; if the new commit is intended, delete the `commit` line of "
                "patches/upstream.toml and rerun (then `sglforge patches check`)",
            )
        return commit
    # Another source (a mirror, a local clone, PyPI wheels) has commits of its own; a PyPI
    # history is rebuilt from wheels, so its content (tree), not its commit, is what we pin.
    tree = up.tree(commit)
    recorded = pin.sources.get(up.key, {})
    if recorded.get("ref") == pin.ref and recorded.get("tree") and recorded["tree"] != tree:
        raise UpstreamError(
            f"pinned tag {pin.ref} in {up.source} has other content ({tree[:12]}) than "
            f"recorded in patches/upstream.toml ({recorded['tree'][:12]}): the tag moved",
            f"check the source; if intended, delete [sources.{up.key!r}] from "
            "patches/upstream.toml and rerun",
        )
    if recorded.get("ref") != pin.ref or not recorded.get("tree"):
        sources = dict(pin.sources)
        sources[up.key] = {"ref": pin.ref, "tree": tree}
        save_pin(root, dataclasses.replace(pin, sources=sources))
    return commit
