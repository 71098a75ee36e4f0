"""The files a project may leave out: its own copy wins, else the one shipped with sglforge.

A project holds ``patches/`` and may hold ``images/targets.toml``,
``images/overlay.Dockerfile`` and ``smoke/*.toml``. What it does not hold comes from the
defaults: in an installed wheel ``sglforge/data/project/`` (copied from this repository's
top-level folders at build time, see pyproject.toml), in a source checkout (editable install,
``pythonpath = src``) the repository's top-level folders themselves.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGED = Path(__file__).resolve().parent / "data" / "project"
_CHECKOUT = Path(__file__).resolve().parents[2]
# Files whose presence says "this folder holds the defaults".
_MARKER = Path("images") / "targets.toml"
SMOKE_DIR = "smoke"


def defaults_root() -> Path | None:
    """The folder holding the default images/, smoke/ and tests/standin/model/, if any."""
    for candidate in (_PACKAGED, _CHECKOUT):
        if (candidate / _MARKER).is_file() and (candidate / SMOKE_DIR).is_dir():
            return candidate
    return None


def project_file(root: Path, relative: Path | str) -> Path:
    """``root/relative`` when the project has it, else the default (the project's path when
    neither exists, so errors name the file the user would add)."""
    own = Path(root) / relative
    if own.exists():
        return own
    shipped = defaults_root()
    if shipped is not None and (shipped / relative).exists():
        return shipped / relative
    return own


def smoke_dir(root: Path) -> Path:
    """The project's ``smoke/`` when it holds a scenario, else the default scenarios."""
    own = Path(root) / SMOKE_DIR
    if any(own.glob("*.toml")):
        return own
    shipped = defaults_root()
    if shipped is not None and any((shipped / SMOKE_DIR).glob("*.toml")):
        return shipped / SMOKE_DIR
    return own
