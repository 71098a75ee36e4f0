"""Fixtures shared by every test folder: git identity, the Docker engine, stand-ins, registries.

Folder-specific fixtures belong in that folder's own conftest.py (tests/docker/conftest.py...).
"""

from __future__ import annotations

import gc
import os
import signal
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from sglforge import engine
from sglforge.cache import cache_root
from sglforge.errors import EngineUnavailable
from standin.base import (
    SERVER_PY,
    cleanup,
    ensure_debian_base,
    ensure_sglang_base,
    new_session_id,
    object_labels,
)
from standin.registry import Registry, start_registry

# pytest's own signal handlers, before anything imports sglforge.cli (see restore_signals)
_SIGNALS = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}

# Subprocesses the tests start (`python -m sglforge ...`) import this checkout's code too.
_SRC = str(Path(__file__).resolve().parents[1] / "src")
os.environ["PYTHONPATH"] = os.pathsep.join(
    [_SRC, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
)

# The user cache, found before fixtures isolate HOME: its PyPI wheels and histories are shared
# with the tests (downloads happen once per machine).
USER_CACHE = cache_root()

# the per-folder time table CI prints; the whole suite side by side on pytest-xdist workers
pytest_plugins = ["parallel", "timing"]

ENGINE_HINT = "start the engine (as root): `bash .ci/setup`, or point DOCKER_HOST at one"


@pytest.fixture(autouse=True)
def restore_signals() -> Iterator[None]:
    """pytest's signal handlers back after each test. Importing sglforge.cli, and every command
    run in-process, leaves handlers that end the process at once (cli/signals.py): a Ctrl-C, or
    an xdist worker told to stop, would then skip the session's cleanup of Docker objects."""
    yield
    for signum, handler in _SIGNALS.items():
        if signal.getsignal(signum) is not handler:
            signal.signal(signum, handler)


@pytest.fixture(autouse=True)
def git_identity(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory):
    """Pin the git identity and isolate HOME so no test reads or writes the user's config."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_CONFIG_GLOBAL"):
        monkeypatch.delenv(var, raising=False)
    for who in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{who}_NAME", "sglforge tests")
        monkeypatch.setenv(f"GIT_{who}_EMAIL", "tests@sglforge.invalid")
    return home


@pytest.fixture(autouse=True)
def sglforge_cache(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory):
    """$SGLFORGE_CACHE per test: its own upstream mirrors (tests make throwaway upstreams that
    must not pile up in the user cache) and scan reports, the user cache's PyPI wheels and
    histories, and its scan units (one JIT kernel source's preprocessing, keyed by the blob ids
    of every file it read, the defines and sglforge's code: what a test asserts about the
    scan's caching is its reports', and tests/unit/test_scan_cache.py keeps a cache of its own).
    Shared, a release's 118 kernel sources are preprocessed once per run, not once per test."""
    root = tmp_path_factory.mktemp("sglforge-cache")
    (USER_CACHE / "pypi").mkdir(parents=True, exist_ok=True)
    (root / "pypi").symlink_to(USER_CACHE / "pypi", target_is_directory=True)
    units = USER_CACHE / "scan" / "units"
    units.mkdir(parents=True, exist_ok=True)
    (root / "scan").mkdir()
    (root / "scan" / "units").symlink_to(units, target_is_directory=True)
    monkeypatch.setenv("SGLFORGE_CACHE", str(root))
    # the key the cache's entries are sealed with (sglforge.cachekey): one per machine, as in
    # use, so the shared scan units stay valid across tests, workers and runs
    monkeypatch.setenv("SGLFORGE_KEYS", str(USER_CACHE.parent / "sglforge-keys"))
    return root


@pytest.fixture(scope="session")
def sglforge_session() -> str:
    """Id labelling this session's Docker objects, so cleanup spares concurrent sessions."""
    return new_session_id()


@pytest.fixture(scope="session")
def docker_labels(sglforge_session: str) -> dict[str, str]:
    """Labels every image and container a test creates must carry."""
    return object_labels(sglforge_session)


@pytest.fixture(scope="session")
def docker_client(sglforge_session: str) -> Iterator[docker.DockerClient]:
    """The engine's client; fails (never skips) with how to start one. Cleans up at the end."""
    try:
        client = engine.client()
    except EngineUnavailable as exc:
        problem = exc.message
    else:
        problem = None
    if problem:
        # The failed connection attempt leaves a socket for the garbage collector; collect it
        # now, quietly, so the warnings-as-errors setting reports the engine, not the socket.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
        pytest.fail(f"{problem}; {ENGINE_HINT}", pytrace=False)
    yield client
    cleanup(client, session=sglforge_session)


@pytest.fixture(scope="session")
def standin_base(docker_client: docker.DockerClient) -> str:
    """Tag of the Debian bookworm + python3 stand-in base (TEST DOUBLE)."""
    return ensure_debian_base(docker_client)


@pytest.fixture(scope="session")
def standin_sglang_base(docker_client: docker.DockerClient) -> str:
    """Tag of the fake sglang 0.5.14 ROCm image (TEST DOUBLE) running tests/standin/server.py."""
    if not SERVER_PY.is_file():
        pytest.fail(f"{SERVER_PY} is missing: the stand-in sglang server", pytrace=False)
    return ensure_sglang_base(client=docker_client)


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Callable[..., Registry]]:
    """Factory: ``registry()`` or ``registry(username, password)`` starts a local registry.

    Every registry started is killed at teardown.
    """
    started: list[Registry] = []

    def start(username: str | None = None, password: str | None = None) -> Registry:
        try:
            reg = start_registry(tmp_path / f"registry-{len(started)}", username, password)
        except RuntimeError as exc:
            pytest.fail(str(exc), pytrace=False)
        started.append(reg)
        return reg

    yield start
    for reg in started:
        reg.stop()
