"""The suite side by side (pytest-xdist), for a 2-core CI machine in at most 25 minutes (issue 33).

`python3 -m pytest` (the whole suite: no paths, or just ``tests``) runs on
:func:`default_workers` worker processes with ``--dist loadgroup``; a run naming files or
folders stays in one process (``pytest tests/unit/test_x.py -x`` is quick to start and ``--pdb``
works), unless it gives ``-n N`` itself. ``$SGLFORGE_TEST_WORKERS`` sets the count for the whole
suite (``0``: one process); ``-p no:xdist`` turns the plugin off.

More workers than cores pay here: the slowest Docker tests mostly wait (the stand-in server's
timed arrivals, image builds on I/O), so CPU-bound tests run beside them.

Under xdist each worker collects the same items; :func:`pytest_collection_modifyitems` gives
every worker the same order and groups, so the controller's scheduler sees them:

- A test file whose tests share a fixture of module or class scope defined in that file (a
  built image, release trees from wheels) is one ``xdist_group``: one worker runs the file and
  builds the fixture once. tests/docker/test_bench.py is one too, on purpose: its tests time
  the stand-in server, and two of them side by side (or beside CPU-bound tests) miss the knee
  rule (TTFT p95 <= 1 s) on 2 cores; one worker runs them one after another from the start.
- Work units go longest first (:data:`SECONDS`, measured; else a per-folder guess), so no long
  test starts last. The scheduler hands every worker two units at the start and a worker
  runs the first of them while the second waits; the longest units are therefore followed
  by tiny ones, so nothing long queues behind them.

Workers run at a lower CPU priority (:data:`NICE`) than the engine's containers: what a test
times (the stand-in server and bench_serving in their containers, the smoke's decode speed)
keeps its CPU while the tests beside it wait, as on a machine running the tests one at a time.

Stand-in images, wheels, the debootstrap tarball and the PyPI cache are shared across workers
under file locks (tests/standin/base.py, sglforge.pypi); each worker has its own Docker
session label (tests/conftest.py), so its cleanup spares the other workers' objects.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import pytest

WORKERS_ENV = "SGLFORGE_TEST_WORKERS"
LOADGROUP = "sglforge_loadgroup"  # the workers' input saying the controller groups
TESTS = Path(__file__).resolve().parent

# Seconds a test (or a file's first test, with its module fixture) took in the last full run
# with empty caches on the 2-core machine; only the order of the work depends on them.
SECONDS = {
    "tests/docker/test_bench.py::test_an_unchanged_image_passes_against_a_registry_only_b": 566,
    "tests/docker/test_bench.py::test_publish_gates_on_a_regression_against_the_last_rele": 265,
    "tests/docker/test_bench.py::test_a_slower_image_is_refused_and_the_compared_figure_m": 122,
    "tests/docker/test_tune.py::test_tune_turns_the_standin_tuner_s_rows_into_a_pending_i": 114,
    "tests/docker/test_infra.py::test_sglang_base_extra_files_land_and_it_is_reused_un": 110,
    "tests/docker/test_release_replica.py::test_real_queue_builds_and_imports_the_git_am_": 87,
    "tests/docker/test_upgrade_real.py::test_upgrade_0_5_14_to_0_5_16_retires_both_and_st": 80,
    "tests/docker/test_upgrade_real.py::test_upgrade_with_publish_pushes_only_after_smoke": 74,
    "tests/docker/test_build.py::test_wrong_sglang_version_is_refused": 67,
    "tests/integration/test_scan.py::test_gate_blocks_unless_a_patch_names_the_finding": 67,
    "tests/integration/test_coverage_differential.py::test_coverage_answers_what_the_rele": 63,
    "tests/reliability/test_publish_trust.py::test_a_foreign_image_under_our_immutable_ta": 60,
    "tests/integration/test_scan.py::test_a_regex_mtp_exclude_is_not_honoured_even_at_0_5": 59,
    "tests/docker/test_infra.py::test_sglang_base_reports_version_and_path": 58,
    "tests/docker/test_walkthrough.py::test_the_walkthrough_runs_as_written": 58,
    "tests/docker/test_build.py::test_overlay_holds_exactly_the_patched_files": 43,
    "tests/integration/test_scan.py::test_scan_command_json": 39,
    "tests/integration/test_construct_device.py::test_fusion_holds_from_gfx942_and_goes_b": 39,
    "tests/integration/test_package.py::test_installed_from_git_the_workflow_installs_tha": 37,
    "tests/integration/test_coverage_differential.py::test_the_publish_gate_fails_on_an_u": 37,
    "tests/docker/test_publish.py::test_publish_push_pull_round_trip_then_inspect_and_no_": 36,
}
# Everything else, per top folder (the last full run's mean per test, rounded).
FOLDER_SECONDS = {"tests/docker": 12.0, "tests/integration": 1.5, "tests/reliability": 0.4}
OTHER_SECONDS = 0.05
# Added to each worker's niceness: containers, started by the engine, keep niceness 0.
# $SGLFORGE_TEST_NICE overrides it (a suite run inside a worker, tests/integration/
# test_parallel_groups.py, would otherwise sit at 19 behind everything on the machine).
NICE_ENV = "SGLFORGE_TEST_NICE"
NICE = 10


def default_workers() -> int:
    """Workers for the whole suite: ``$SGLFORGE_TEST_WORKERS``, else twice the cores, 4 to 8."""
    given = os.environ.get(WORKERS_ENV, "").strip()
    if given:
        try:
            return max(0, int(given))
        except ValueError:
            raise pytest.UsageError(f"${WORKERS_ENV}={given!r}: not a number of workers") from None
    return min(8, max(4, 2 * (os.cpu_count() or 1)))


def _whole_suite(config: pytest.Config) -> bool:
    if config.args_source == pytest.Config.ArgsSource.TESTPATHS:
        return True
    paths = [arg.split("::", 1)[0] for arg in config.args]
    root = Path(config.invocation_params.dir)
    return bool(paths) and all((root / p).resolve() == TESTS for p in paths)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """The whole suite on workers; ``-n`` given without ``--dist`` takes this file's groups."""
    option = config.option
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return
    if option.numprocesses is None and _whole_suite(config):
        if not (option.usepdb or option.collectonly):
            option.numprocesses = default_workers()
    if option.numprocesses and option.dist == "no":
        option.dist = "loadgroup"
        option.loadscopereorder = False  # keep the order made below, not by test count


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:  # type: ignore[no-untyped-def]
    """Tell each worker the controller's distribution: a worker parses only the command line,
    so a ``--dist`` set above (not typed) would not reach it."""
    node.workerinput[LOADGROUP] = node.config.option.dist == "loadgroup"


_ON_WORKER: list[bool] = [False]


def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    _ON_WORKER[0] = workerinput is not None
    if workerinput is not None:
        os.nice(int(os.environ.get(NICE_ENV, NICE)))  # the timed containers first (docstring)
    if workerinput is not None and workerinput.get(LOADGROUP):
        # what xdist's worker reads (from --dist) before it names the groups' tests
        config.option.loadgroup = True


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def estimate(nodeid: str) -> float:
    """Expected seconds of one test (setup, call and teardown)."""
    for prefix, seconds in SECONDS.items():
        if nodeid.startswith(prefix):
            return float(seconds)
    parts = _file(nodeid).split("/")
    return FOLDER_SECONDS.get("/".join(parts[:2]), OTHER_SECONDS)


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    module = str(Path(str(item.fspath)))
    for defs in info.name2fixturedefs.values():
        for fixturedef in defs:
            where = getattr(fixturedef, "baseid", "")
            scope = getattr(fixturedef, "scope", "function")
            if scope in ("module", "class") and _file(where) == _file(item.nodeid):
                return True
            func = getattr(fixturedef, "func", None)
            code = getattr(func, "__code__", None)
            if scope in ("module", "class") and code and code.co_filename == module:
                return True
    return False


def work_units(items: list[pytest.Item]) -> dict[str, list[pytest.Item]]:
    """Items by work unit: a grouped file's name, else the test's own id."""
    grouped = {_file(item.nodeid) for item in items if _shares_a_module_fixture(item)}
    units: dict[str, list[pytest.Item]] = defaultdict(list)
    for item in items:
        name = _file(item.nodeid)
        units[name if name in grouped else item.nodeid].append(item)
    return units


def order(units: dict[str, list[pytest.Item]], workers: int) -> list[str]:
    """Units longest first; after the first ``workers`` (one per worker), tiny units, as many as
    there are long ones, so the second unit each long one's worker is handed does not wait."""
    cost = {name: sum(estimate(i.nodeid) for i in members) for name, members in units.items()}
    ranked = sorted(units, key=lambda name: -cost[name])
    first, rest = ranked[:workers], ranked[workers:]
    tiny = [name for name in reversed(rest) if len(units[name]) == 1][: len(first)]
    return first + tiny + [name for name in rest if name not in tiny]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None or not getattr(config.option, "loadgroup", False):
        return
    units = work_units(items)
    for name, members in units.items():
        if len(members) > 1 or name == _file(members[0].nodeid):
            for item in members:
                item.add_marker(pytest.mark.xdist_group(name))
    ordered = order(units, int(workerinput.get("workercount", 1)))
    items[:] = [item for name in ordered for item in units[name]]


def own_id(nodeid: str) -> str:
    """A test's own id: loadgroup reports ``id@group`` (a parametrize id may hold an ``@``)."""
    return nodeid.rsplit("@", 1)[0] if nodeid.rfind("@") > nodeid.rfind("]") else nodeid


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # on the controller, before the terminal, --durations, junit and the last-failed cache read
    # it: the test's own id, so `-ra`, `--lf` and the slowest list name tests as a serial run does
    # (a worker sends its reports with the ids it collected: xdist checks them)
    if not _ON_WORKER[0]:
        report.nodeid = own_id(report.nodeid)
