"""The import graph of sglforge has no cycle, and every module imports on its own.

Every ``import`` counts, at module level or inside a function (a late import hides a cycle
from the reader, not from the interpreter): an edge goes from a module to the most specific
sglforge module it names (``from sglforge.engine import images`` is an edge to
``sglforge.engine.images``).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "sglforge"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {
    _module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "data" not in p.parts[-3:-1]
}


def _imports(name: str, path: Path) -> set[str]:
    """The sglforge modules ``name`` imports anywhere in its source."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            candidates = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for candidate in candidates:
            # The most specific module named: `sglforge.engine.images.x` -> engine.images.
            parts = candidate.split(".")
            while parts and ".".join(parts) not in MODULES:
                parts.pop()
            if parts:
                found.add(".".join(parts))
                if isinstance(node, ast.ImportFrom):
                    break  # `from a import b`: b when it is a module, else a
    found.discard(name)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_the_modules_and_their_imports() -> None:
    # The check below proves nothing if the walk finds no modules or no edges.
    assert {"sglforge.build", "sglforge.provenance", "sglforge.engine.images"} <= set(GRAPH)
    assert "sglforge.provenance" in GRAPH["sglforge.build"]
    assert "sglforge.engine.images" in GRAPH["sglforge.release"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle() -> None:
    cycles = _cycles(GRAPH)
    assert cycles == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def _room(name: str) -> str:
    """A folder is one room: ``sglforge.patches.apply`` -> ``sglforge.patches``."""
    return ".".join(name.split(".")[:2])


ROOMS = {
    room: {_room(d) for m, deps in GRAPH.items() if _room(m) == room for d in deps} - {room}
    for room in {_room(m) for m in GRAPH}
}

# Folder-level loops still to undo, one entry per loop; it can only shrink (the bench helper
# moves ``bench/spec.py`` beside the scenario format).
KNOWN_ROOM_LOOPS: list[list[str]] = []  # none: every arrow between rooms runs down


def test_no_arrow_runs_back_up_between_rooms() -> None:
    """Folders taken as one room, the rooms form no loop beyond the known ones."""
    loops = _cycles(ROOMS)
    assert loops == KNOWN_ROOM_LOOPS, "rooms that import each other: " + "; ".join(
        " <-> ".join(c) for c in loops
    )


def test_the_queue_data_sits_below_project_and_the_verbs_above() -> None:
    """``project.py`` reads the queue's data (``queue/``); the queue's verbs (``patches/``)
    take a ``Project`` from above, and the data imports neither."""
    assert "sglforge.queue.series" in GRAPH["sglforge.project"]
    assert "sglforge.project" in GRAPH["sglforge.patches.apply"]
    assert not ROOMS["sglforge.queue"] & {"sglforge.patches", "sglforge.project"}


def test_the_image_contract_imports_no_engine_and_no_build() -> None:
    # provenance is read by build, publish, inspect, release and smoke: it stays at the bottom.
    def reachable(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for nxt in GRAPH[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    below = reachable("sglforge.provenance")
    assert not {m for m in below if m.startswith("sglforge.engine")}
    users = {"sglforge.build", "sglforge.publish", "sglforge.inspect", "sglforge.release"}
    assert not below & users


@pytest.mark.parametrize("name", sorted(set(MODULES) - {"sglforge.__main__"}))  # runs the CLI
def test_every_module_imports(name: str) -> None:
    importlib.import_module(name)


def test_the_engine_and_the_image_contract_agree_on_the_managed_label() -> None:
    """engine/ may not import core modules, so it spells the label every object sglforge
    creates carries; provenance spells it for the images' labels. They must be one key."""
    from sglforge import engine, provenance

    assert engine.LABEL == provenance.LABEL_MANAGED


def test_the_gates_stand_between_the_pipelines_and_the_analyses() -> None:
    """gates/ is imported by publish and upgrade and imports the analyses (smoke, bench,
    coverage, scan, construct through the candidate); none of those imports it back."""
    gates = {m for m in GRAPH if m == "sglforge.gates" or m.startswith("sglforge.gates.")}
    assert {"sglforge.gates.scan", "sglforge.gates.coverage", "sglforge.gates.smoke"} <= gates
    assert "sglforge.gates" in GRAPH["sglforge.publish"]
    assert "sglforge.gates" in GRAPH["sglforge.upgrade"]
    below = ("sglforge.smoke", "sglforge.bench", "sglforge.coverage", "sglforge.scan")
    below += ("sglforge.construct", "sglforge.candidate", "sglforge.build")
    for name, imported in GRAPH.items():
        if name.startswith(below):
            assert not imported & gates, f"{name} imports the gates above it"
    for gate in gates - {"sglforge.gates"}:
        assert not GRAPH[gate] & {"sglforge.publish", "sglforge.upgrade"}, gate


def test_the_bench_builds_on_smoke_and_never_the_other_way() -> None:
    # The [bench] table is part of the scenario format (smoke.bench_spec); the bench runs the
    # server through smoke's public wait_ready/http_request. An arrow back would be a cycle.
    assert "sglforge.scenario.bench" in GRAPH["sglforge.scenario.file"]
    assert {"sglforge.smoke.runner", "sglforge.smoke.checks"} <= GRAPH["sglforge.bench.runner"]
    back = sorted(
        f"{m} -> {d}"
        for m, deps in GRAPH.items()
        if m.startswith("sglforge.smoke")
        for d in deps
        if d.startswith("sglforge.bench")
    )
    assert back == [], "smoke imports bench: " + "; ".join(back)
