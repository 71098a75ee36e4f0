"""git is driven from one package: no other module of sglforge runs a git command.

An AST scan of ``src/sglforge``: outside ``git/`` nothing may start a process whose argv
begins with "git", call the git package's raw entry points (``_run``, ``run``, ``out``, anything
private), call a ``.git(...)`` command helper, or import GitPython.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "sglforge"
# The git package's raw entry points: the named queries are the only way in.
RAW = {"run", "out", "run_with_progress", "execute"}
# Functions that start a process from their first argument.
RUNNERS = {"run", "_run", "Popen", "call", "check_call", "check_output", "execute", "spawn"}


def _starts_with_git(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value == "git"
    if isinstance(node, ast.List | ast.Tuple) and node.elts:
        return _starts_with_git(node.elts[0])
    return False


def violations(source: str, name: str) -> list[str]:
    """Each place in ``source`` that drives git itself instead of asking the git package."""
    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"{name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found += [f"{where} imports GitPython" for a in node.names if a.name == "git"]
            found += [f"{where} imports GitPython" for a in node.names if a.name.startswith("git.")]
        elif isinstance(node, ast.ImportFrom):
            if node.module == "git" or (node.module or "").startswith("git."):
                found.append(f"{where} imports GitPython")
            if node.module == "sglforge.git":
                found += [
                    f"{where} imports git.{a.name}"
                    for a in node.names
                    if a.name in RAW or a.name.startswith("_")
                ]
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            argv = node.args[0] if node.args else None
            if argv is not None and _starts_with_git(argv):
                # an argv list ["git", ...], or "git" handed to a process runner
                if isinstance(argv, ast.List | ast.Tuple) or called in RUNNERS:
                    found.append(f"{where} runs a git command")
            if isinstance(func, ast.Attribute):
                if func.attr == "git":
                    found.append(f"{where} calls .git(...)")
                if isinstance(func.value, ast.Name) and func.value.id == "git":
                    if func.attr in RAW or func.attr.startswith("_"):
                        found.append(f"{where} calls git.{func.attr}")
    return found


def test_only_git_py_runs_git() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("git/"):
            continue
        found += violations(path.read_text(encoding="utf-8"), rel)
    assert not found, "git driven outside git/:\n" + "\n".join(found)


def test_the_scan_sees_each_kind_of_raw_call() -> None:
    source = "\n".join(
        [
            "import subprocess",
            "import git",
            "from git import Repo",
            "from sglforge import git",
            "from sglforge.git import _run",
            "subprocess.run(['git', 'status'])",
            "subprocess.Popen(('git', 'fetch'))",
            "_run('git', '--version')",
            "git.run(root, 'status')",
            "git.out(root, 'rev-parse', 'HEAD')",
            "git._run(root, 'am')",
            "index.git('apply', '--cached')",
            "git.head(root)",  # a named query: fine
            "shutil.which('git')",  # not a command: fine
            "Check('git', 'ok', '2.39')",  # a name, not a command: fine
        ]
    )
    found = violations(source, "x.py")
    assert [f.split(":")[1].split()[0] for f in found] == [
        "2",
        "3",
        "5",
        "6",
        "7",
        "8",
        "9",
        "10",
        "11",
        "12",
    ], found
