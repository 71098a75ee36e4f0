"""A sglforge project, opened once: its root, queue, targets and upstream, each read on first use.

The command line opens one ``Project`` per run, with the upstream the command was given
(``--upstream`` / ``$SGLFORGE_UPSTREAM``), and passes it down; core functions take the
``Project`` and never open a second one. Reading is cached for the life of the object; a
command that rewrites the queue (refresh, export, upgrade) calls ``reload()`` so later reads
see the new files.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sglforge.queue.series import Queue
    from sglforge.queue.upstream import Upstream
    from sglforge.scenario.file import Scenario
    from sglforge.targets import BuildTarget, Targets

# the lazily read parts, forgotten by reload(): the queue's files. Not the fetched upstream
# (a refresh rewrites files, not the upstream: it is fetched once per run) nor the targets
# (no command that rewrites the queue touches images/).
_READ = ("queue", "_pin_commit")


class Project:
    """One project folder (the one holding ``patches/``), opened with its upstream."""

    def __init__(
        self, root: Path | str, upstream: str | None = None, opened: Upstream | None = None
    ) -> None:
        """``opened``: an upstream another project of this run already fetched (upgrade's
        staging copy takes its parent's, so one run fetches upstream once)."""
        self.root = Path(root)
        self.upstream_option = upstream  # --upstream / $SGLFORGE_UPSTREAM, when given
        self._targets: dict[str, BuildTarget] = {}
        self._scenarios: dict[Path, Scenario] = {}
        if opened is not None:
            self.__dict__["upstream"] = opened

    def __repr__(self) -> str:
        return f"Project({str(self.root)!r}, upstream={self.upstream_option!r})"

    def staging(self, root: Path) -> Project:
        """The project copied to ``root`` (upgrade's staging folder), sharing what the copy
        does not change: the upstream this run fetched and the targets read (``images/`` is
        copied as it is). Its queue is its own: the staged patches are rewritten there."""
        staged = Project(root, self.upstream_option, opened=self.upstream)
        staged.__dict__["targets"] = self.targets
        staged._targets = self._targets
        return staged

    @cached_property
    def queue(self) -> Queue:
        """The queue (series, patches, pin), loaded and validated once."""
        from sglforge.queue.series import load_queue

        return load_queue(self.root)

    @cached_property
    def targets(self) -> Targets:
        """``images/targets.toml`` (or the shipped defaults), loaded once."""
        from sglforge.targets import load_targets

        return load_targets(self.root)

    def target(self, spec: str) -> BuildTarget:
        """The build target ``spec`` names (``mi355x``, ``mi355x-rocm720``), resolved once."""
        if spec not in self._targets:
            self._targets[spec] = self.targets.resolve(spec)
        return self._targets[spec]

    @cached_property
    def upstream(self) -> Upstream:
        """The upstream source (fetched into the shared cache on first use)."""
        from sglforge.queue.upstream import open_upstream

        return open_upstream(self.root, self.queue.pin, self.upstream_option)

    def pin_commit(self) -> str:
        """The commit the pinned tag resolves to, refused if the tag moved (checked once)."""
        return self._pin_commit

    @cached_property
    def _pin_commit(self) -> str:
        from sglforge.queue.upstream import pinned_commit

        return pinned_commit(self.root, self.queue.pin, self.upstream)

    def scenario_for(self, target: BuildTarget) -> Scenario:
        """The smoke scenario (``smoke/*.toml``) whose ``target`` names this target, parsed once."""
        from sglforge.scenario.file import find_scenario

        return self.scenario_file(find_scenario(self.root, target.name, target.key))

    def scenario_named(self, given: str | Path) -> Scenario:
        """The scenario ``--scenario`` names: a NAME of ``smoke/NAME.toml`` (the project's,
        else the shipped ones) or a file (``scenario_path``), parsed once."""
        from sglforge.scenario.file import scenario_path

        return self.scenario_file(scenario_path(self.root, given))

    def scenario_file(self, path: Path) -> Scenario:
        """The smoke scenario in ``path``, parsed once for the life of the project."""
        from sglforge.scenario.file import load_scenario

        path = Path(path)
        if path not in self._scenarios:
            self._scenarios[path] = load_scenario(path)
        return self._scenarios[path]

    def fresh_queue(self) -> Queue:
        """The queue read again from disk (under a lock, another command may have changed it)."""
        self.__dict__.pop("queue", None)
        return self.queue

    def reload(self) -> None:
        """Forget the queue as read: the next access reads its files again."""
        for name in _READ:
            self.__dict__.pop(name, None)
