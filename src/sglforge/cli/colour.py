"""Colour for people: on a terminal only, never under ``NO_COLOR`` (https://no-color.org)
or ``--color never``, always with ``--color always``; JSON documents are never coloured."""

from __future__ import annotations

import os
import sys

import click

CHOICES = ("auto", "always", "never")
TONES = {"good": "green", "bad": "red", "warn": "yellow", "note": "cyan"}
_mode = {"value": "auto"}


def set_mode(mode: str) -> None:
    _mode["value"] = mode


def enabled(err: bool = False) -> bool:
    """Whether text for stdout (``err``: stderr) gets colour."""
    mode = _mode["value"]
    if mode != "auto":
        return mode == "always"
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    stream = sys.stderr if err else sys.stdout
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def paint(text: str, tone: str, err: bool = False) -> str:
    """``text`` in the tone's colour (good, bad, warn, note) when colour is on."""
    bold = True if tone == "bad" else None
    return click.style(text, fg=TONES[tone], bold=bold) if enabled(err) else text


def verdict(text: str, passed: bool | None, err: bool = False) -> str:
    """A verdict word (PASSED, FAILED, READY, ...): green, red, or yellow when undecided."""
    return paint(text, "good" if passed else "warn" if passed is None else "bad", err)
