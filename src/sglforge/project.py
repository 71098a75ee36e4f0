"""A sglforge project, opened once: its root, queue, targets and upstream, each read on first use.

The command line opens one ``Project`` per run and passes it down; core functions accept a
``Project`` or a plain root path (``Project.of``), so library callers and tests keep working
with paths. Reading is cached for the life of the object; a command that rewrites the queue
(refresh, export, upgrade) calls ``reload()`` so later reads see the new files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    from sglforge.patches.series import Queue
    from sglforge.patches.upstream import Upstream
    from sglforge.targets import BuildTarget, Targets


@dataclass(eq=False)
class Project:
    """One project folder (the one holding ``patches/``)."""

    root: Path
    upstream_option: str | None = None  # --upstream / $SGLFORGE_UPSTREAM, when given
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, where: ProjectLike, upstream: str | None = None) -> Project:
        """``where`` itself when it is a Project (``upstream`` given here wins), else a new one."""
        if isinstance(where, Project):
            if upstream and upstream != where.upstream_option:
                return cls(where.root, upstream)
            return where
        return cls(Path(where), upstream)

    @property
    def queue(self) -> Queue:
        """The queue (series, patches, pin), loaded and validated once."""
        if "queue" not in self._cache:
            from sglforge.patches.series import load_queue

            self._cache["queue"] = load_queue(self.root)
        return self._cache["queue"]  # type: ignore[no-any-return]

    @property
    def targets(self) -> Targets:
        """``images/targets.toml`` (or the shipped defaults), loaded once."""
        if "targets" not in self._cache:
            from sglforge.targets import load_targets

            self._cache["targets"] = load_targets(self.root)
        return self._cache["targets"]  # type: ignore[no-any-return]

    def target(self, spec: str) -> BuildTarget:
        """The build target ``spec`` names (``mi355x``, ``mi355x-rocm720``), resolved once."""
        key = f"target:{spec}"
        if key not in self._cache:
            self._cache[key] = self.targets.resolve(spec)
        return self._cache[key]  # type: ignore[no-any-return]

    def upstream(self) -> Upstream:
        """The upstream source (fetched into the shared cache on first use)."""
        if "upstream" not in self._cache:
            from sglforge.patches.upstream import open_upstream

            self._cache["upstream"] = open_upstream(self.root, self.queue.pin, self.upstream_option)
        return self._cache["upstream"]  # type: ignore[no-any-return]

    def fresh_queue(self) -> Queue:
        """The queue read again from disk (under a lock, another command may have changed it)."""
        self._cache.pop("queue", None)
        return self.queue

    def reload(self) -> None:
        """Forget what was read: the next access reads the files again."""
        self._cache.clear()


ProjectLike = Union[Project, Path, str]  # noqa: UP007 (a runtime alias, also for Python 3.10)
