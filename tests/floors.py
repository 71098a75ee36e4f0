"""The dependency floors, held: the lowest version of each runtime dependency that
pyproject.toml declares, and the command line's error paths run on an interpreter that has
them (``.ci/floors``; ``tests/unit/test_floors.py`` runs the same checks on the test
environment's versions).

    python3 tests/floors.py pins            # the floors as pip requirements, one a line
    python3 tests/floors.py check PYTHON    # the error paths on PYTHON (sglforge from src/)

Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# "name>=1.2" with an optional "; marker": the only spelling a floor may take here
_FLOOR = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*>=\s*([0-9][0-9A-Za-z.]*)\s*(;.*)?$")


def pins(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """``name==floor[; marker]`` for every runtime dependency; a dependency without a plain
    ``>=`` floor is an error (a floor nobody can install is a guess)."""
    deps = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]
    out = []
    for dep in deps:
        m = _FLOOR.match(dep)
        if m is None:
            raise ValueError(f"{pyproject}: dependency {dep!r} declares no plain '>=' floor")
        name, version, marker = m.groups()
        out.append(f"{name}=={version}" + (f"; {marker[1:].strip()}" if marker else ""))
    return out


@dataclass(frozen=True)
class Case:
    """One mistake a user makes, and what the command line must answer: the exit code and
    words in its stderr (or, with ``--json``, in the error document's message)."""

    args: tuple[str, ...]
    code: int
    said: tuple[str, ...]


CASES = (
    Case(("biuld",), 2, ("No such command 'biuld'", "Did you mean 'build'?")),
    Case(("patch", "list"), 2, ("No such command 'patch'", "'patches'")),
    Case(("patches", "lsit"), 2, ("No such command 'lsit'", "'list'")),
    Case(("xyzzy",), 2, ("No such command 'xyzzy'",)),
    Case(("patches", "list", "--bogus"), 2, ("No such option", "--bogus")),
    Case(("publish",), 2, ("Missing option '--registry'",)),
    Case(("patches", "header"), 2, ("Missing argument 'NAME'",)),
    Case(("upgarde", "--json"), 2, ("No such command 'upgarde'", "'upgrade'")),
)

# every command's --help, rendered in one process: the option and argument rendering differs
# most between click versions (metavars, choices, defaults)
_ALL_HELP = """
import click
from sglforge.cli import main
def walk(cmd, ctx):
    cmd.get_help(ctx)
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None:
                walk(sub, click.Context(sub, info_name=name, parent=ctx))
            else:
                raise SystemExit(f"{ctx.command_path} {name}: listed but not found")
walk(main, click.Context(main, info_name="sglforge"))
print("help ok")
"""


def _run(python: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLFORGE_")}
    env["PYTHONPATH"] = str(ROOT / "src")
    env["NO_COLOR"] = "1"
    return subprocess.run(
        [python, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def check(python: str, cwd: Path) -> list[str]:
    """What went wrong running ``CASES`` and every ``--help`` on ``python``: [] when all held.
    ``cwd``: an empty folder (no project there)."""
    failures = []
    for case in CASES:
        res = _run(python, ["-m", "sglforge", *case.args], cwd)
        said = res.stderr
        if "--json" in case.args:
            try:
                said = json.loads(res.stdout)["error"]["message"]
            except (ValueError, KeyError, TypeError):
                failures.append(f"sglforge {' '.join(case.args)}: no error document: {res.stdout}")
                continue
        missing = [w for w in case.said if w not in said]
        if res.returncode != case.code or missing:
            failures.append(
                f"sglforge {' '.join(case.args)}: exit {res.returncode} (wanted {case.code}), "
                f"missing {missing}: {res.stderr.strip()[-400:]}"
            )
    res = _run(python, ["-c", _ALL_HELP], cwd)
    if res.returncode != 0 or "help ok" not in res.stdout:
        failures.append(f"--help of every command: exit {res.returncode}: {res.stderr[-800:]}")
    return failures


def main(argv: list[str]) -> int:
    if argv[:1] == ["pins"]:
        print("\n".join(pins()))
        return 0
    if argv[:1] == ["check"] and len(argv) == 2:
        import tempfile

        with tempfile.TemporaryDirectory() as empty:
            failures = check(os.path.abspath(argv[1]), Path(empty))
        for f in failures:
            print(f"floors: {f}", file=sys.stderr)
        print(f"floors: {len(CASES)} error paths and every --help: {len(failures)} failed")
        return 1 if failures else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
