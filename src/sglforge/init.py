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
from sglforge.util import raise_held, signals_held

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


def project_files() -> dict[str, bytes]:
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
    for rel, name in _FROM_SKELETON.items():
        text = (SKELETON / name).read_text()
        files[rel] = text.replace("{{SGLFORGE_VERSION}}", __version__).encode()
    return dict(sorted(files.items()))


def init_project(dest: Path) -> InitResult:
    """Write a new project into ``dest`` (created if missing); ConfigError if a file exists."""
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise ConfigError(f"{dest}: exists and is not a folder", "sglforge init NEW_FOLDER")
    files = project_files()
    existing = [rel for rel in files if (dest / rel).exists() or (dest / rel).is_symlink()]
    if existing:
        raise ConfigError(
            f"{dest}: would overwrite {', '.join(existing)}; nothing was written",
            "run sglforge init in an empty folder, or move those files away first",
        )
    dest.mkdir(parents=True, exist_ok=True)
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
    return InitResult(root=dest.resolve(), files=tuple(files))


def _undo(linked: list[Path], created: list[Path]) -> None:
    for path in reversed(linked):
        path.unlink(missing_ok=True)
    for folder in reversed(created):
        try:
            folder.rmdir()
        except OSError:
            pass
