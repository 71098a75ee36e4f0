"""The click command line: only click code here, over the core modules' APIs."""

from __future__ import annotations

# First of all: a signal while the rest is imported ends the process without a traceback.
from sglforge.cli import signals as _signals

_signals.install_startup()

# Each command lives in its own module, imported when it runs (cli.common.COMMANDS).
from sglforge.cli.common import main  # noqa: E402

__all__ = ["main"]
