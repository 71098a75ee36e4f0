"""Running one of construct's child programs: a fresh interpreter in an empty working folder
(nothing in it shadows the packages it is handed), a JSON request on stdin, and its answer
as the last line of stdout."""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ChildAnswer:
    """The child's answer (``doc``), or None and why not: its last line of output, or that
    it ran past the timeout."""

    doc: dict[str, Any] | None
    tail: str = ""
    timed_out: bool = False


def run_json_child(
    argv: Sequence[str],
    stdin: str,
    *,
    timeout: float,
    prefix: str,
    env: Mapping[str, str] | None = None,
) -> ChildAnswer:
    """Run ``argv`` with ``stdin`` in a new empty folder (``prefix``) and read its answer."""
    with tempfile.TemporaryDirectory(prefix=prefix) as cwd:
        try:
            proc = subprocess.run(
                list(argv),
                input=stdin,
                capture_output=True,
                text=True,
                cwd=cwd,
                env=None if env is None else dict(env),
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return ChildAnswer(None, timed_out=True)
    lines = proc.stdout.strip().splitlines()
    tail = ((proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"])[0]
    if proc.returncode != 0 or not lines:
        return ChildAnswer(None, tail)
    try:
        doc = json.loads(lines[-1])
    except json.JSONDecodeError:
        return ChildAnswer(None, f"no answer on its last line: {lines[-1][:200]}")
    return ChildAnswer(doc if isinstance(doc, dict) else None, tail)
