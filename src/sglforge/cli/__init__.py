"""The click command line: only click code here, over the core modules' APIs."""

from __future__ import annotations

# First of all: a signal while the rest is imported ends the process without a traceback.
from sglforge.cli import signals as _signals

_signals.install_startup()

# Each command group lives in its own module; importing registers it on ``main``.
from sglforge.cli import build as _build  # noqa: E402,F401
from sglforge.cli import init as _init  # noqa: E402,F401
from sglforge.cli import patches as _patches  # noqa: E402,F401
from sglforge.cli import publish as _publish  # noqa: E402,F401
from sglforge.cli import smoke as _smoke  # noqa: E402,F401
from sglforge.cli import upgrade as _upgrade  # noqa: E402,F401
from sglforge.cli.common import main  # noqa: E402

__all__ = ["main"]
