"""The click command line: only click code here, over the core modules' APIs."""

from __future__ import annotations

from sglforge.cli.common import main

# Each command group lives in its own module; importing registers it on ``main``.
# command modules are imported below as they land

__all__ = ["main"]
