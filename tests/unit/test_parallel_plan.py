"""The suite's plan for its xdist workers (tests/parallel.py): ids, estimates, order, count."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import parallel


@dataclass
class _Item:
    nodeid: str


def _units(*spec: tuple[str, int]) -> dict[str, list[_Item]]:
    return {name: [_Item(f"{name}::t{i}") for i in range(n)] for name, n in spec}


def test_reports_keep_their_own_ids() -> None:
    assert parallel.own_id("tests/a.py::t@tests/a.py") == "tests/a.py::t"
    assert parallel.own_id("tests/a.py::t[x@y]") == "tests/a.py::t[x@y]"
    assert parallel.own_id("tests/a.py::t[x@y]@tests/a.py") == "tests/a.py::t[x@y]"
    assert parallel.own_id("tests/a.py::t") == "tests/a.py::t"


def test_estimates_come_from_the_table_else_the_folder() -> None:
    bench = next(iter(parallel.SECONDS))
    assert parallel.estimate(bench + "[param]") == parallel.SECONDS[bench]
    assert (
        parallel.estimate("tests/docker/test_new.py::t") == parallel.FOLDER_SECONDS["tests/docker"]
    )
    assert parallel.estimate("tests/unit/test_new.py::t") == parallel.OTHER_SECONDS


def test_longest_first_and_each_long_unit_followed_by_a_tiny_one() -> None:
    units = _units(
        ("tests/docker/a.py", 30),  # 300 s
        ("tests/docker/b.py", 10),  # 100 s
        ("tests/integration/c.py", 20),  # 30 s
        ("tests/unit/d.py::x", 1),
        ("tests/unit/e.py::y", 1),
        ("tests/reliability/f.py::z", 1),
    )
    got = parallel.order(units, workers=2)
    # one long unit per worker, then a tiny one for each: the scheduler hands every worker two
    # units at the start, so the second one waits behind the first
    assert got[:2] == ["tests/docker/a.py", "tests/docker/b.py"]
    assert set(got[2:4]) == {"tests/unit/d.py::x", "tests/unit/e.py::y"}
    assert got[4:] == ["tests/integration/c.py", "tests/reliability/f.py::z"]
    assert sorted(got) == sorted(units)


@pytest.mark.parametrize(("given", "workers"), [("3", 3), ("0", 0), (" 6 ", 6)])
def test_the_worker_count_can_be_set(
    monkeypatch: pytest.MonkeyPatch, given: str, workers: int
) -> None:
    monkeypatch.setenv(parallel.WORKERS_ENV, given)
    assert parallel.default_workers() == workers


def test_a_bad_worker_count_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(parallel.WORKERS_ENV, "many")
    with pytest.raises(pytest.UsageError, match=parallel.WORKERS_ENV):
        parallel.default_workers()
    monkeypatch.delenv(parallel.WORKERS_ENV)
    assert 4 <= parallel.default_workers() <= 8


def test_every_timed_test_in_the_table_still_exists() -> None:
    """A renamed or removed test left in SECONDS would be estimated at its folder's mean,
    and a long one scheduled last (the suite's wall time grows by its length)."""
    import re
    from pathlib import Path

    root = Path(parallel.__file__).resolve().parents[1]
    stale = []
    for nodeid in parallel.SECONDS:
        path, _, prefix = nodeid.partition("::")
        source = root / path
        text = source.read_text() if source.is_file() else ""
        if not re.search(rf"(?m)^def {re.escape(prefix)}\w*\(", text):
            stale.append(nodeid)
    assert not stale, f"tests/parallel.py SECONDS names tests that no longer exist: {stale}"
