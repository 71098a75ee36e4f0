"""Below the command line no option is re-read from the environment (requests.py): nothing
outside ``cli/`` reads an ``SGLFORGE_*`` variable that a click option owns (its ``envvar=``).

An AST walk: the owned names come from every ``envvar=`` keyword under ``cli/``; a read is
``os.environ.get(X)``, ``os.environ[X]``, ``os.getenv(X)`` or ``X in os.environ``, with ``X`` a
string or a module-level constant naming one (``UPSTREAM_ENV = "SGLFORGE_UPSTREAM"``). It
would have caught ``patches/upstream.py`` reading ``$SGLFORGE_UPSTREAM`` after ``--upstream``
had (ARCHITECTURE-REVIEW.md 6.2, test d).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "sglforge"
CLI = PACKAGE / "cli"


def _trees() -> dict[Path, ast.Module]:
    return {p: ast.parse(p.read_text(), str(p)) for p in sorted(PACKAGE.rglob("*.py"))}


def _owned(trees: dict[Path, ast.Module]) -> set[str]:
    owned = set()
    for path, tree in trees.items():
        if CLI not in path.parents:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "envvar":
                values = (
                    node.value.elts
                    if isinstance(node.value, ast.List | ast.Tuple)
                    else [node.value]
                )
                owned |= {v.value for v in values if isinstance(v, ast.Constant)}
    return owned


def _constants(trees: dict[Path, ast.Module]) -> dict[str, set[str]]:
    """Module-level ``NAME = "text"`` assignments, by name, over the whole package."""
    out: dict[str, set[str]] = {}
    for tree in trees.values():
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                for target in node.targets:
                    if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                        out.setdefault(target.id, set()).add(node.value.value)
    return out


def _is_environ(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def _keys(node: ast.AST) -> list[ast.expr]:
    """The variable names an expression reads from the environment."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
        f = node.func
        if (f.attr in ("get", "pop") and _is_environ(f.value)) or f.attr == "getenv":
            return [node.args[0]]
    if isinstance(node, ast.Subscript) and _is_environ(node.value):
        return [node.slice]
    if isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
        return [node.left]
    return []


def _reads(trees: dict[Path, ast.Module]) -> list[tuple[str, str]]:
    constants = _constants(trees)
    found = []
    for path, tree in trees.items():
        if CLI in path.parents:
            continue
        for node in ast.walk(tree):
            for key in _keys(node):
                names = (
                    {key.value}
                    if isinstance(key, ast.Constant) and isinstance(key.value, str)
                    else constants.get(key.id, set())
                    if isinstance(key, ast.Name)
                    else set()
                )
                rel = path.relative_to(PACKAGE.parent)
                found += [(f"{rel}:{node.lineno}", name) for name in names]
    return found


def test_the_walk_finds_the_owned_names_and_the_reads() -> None:
    trees = _trees()
    owned = _owned(trees)
    assert {"SGLFORGE_UPSTREAM", "SGLFORGE_OFFLINE", "SGLFORGE_ROOT"} <= owned, owned
    # the walk sees reads below the CLI (variables no option owns, such as the git timeout)
    assert any(name.startswith("SGLFORGE_") for _, name in _reads(trees))
    # and it would see the three spellings of a read of an owned name
    probe = ast.parse(
        'import os\nA = "SGLFORGE_UPSTREAM"\nos.environ.get(A)\nos.getenv("SGLFORGE_ROOT")\n'
        'x = "SGLFORGE_OFFLINE" in os.environ\n'
    )
    keys = [k for n in ast.walk(probe) for k in _keys(n)]
    assert len(keys) == 3


def test_no_option_is_read_from_the_environment_below_the_command_line() -> None:
    trees = _trees()
    owned = _owned(trees)
    bad = [(where, name) for where, name in _reads(trees) if name in owned]
    assert not bad, f"read below cli/ although an option owns it: {bad}"
