"""``sglforge tryout``: the walk-through on a machine without a GPU, from the installed tool.

It prepares the three things the README's settings name, all TEST DOUBLES and labelled so:

- the stand-in base: a replica of the sglang release image whose ``sglang.launch_server`` is
  the stand-in server (``sglforge.standin.base``; tag ``sglforge-standin/sglang:v<pin>-...``),
  given to the tool as ``$SGLFORGE_BASE_IMAGE``;
- a registry on 127.0.0.1 (Debian's ``docker-registry``), or the one ``--use-registry`` names;
- the stand-in scenario ``standin-cpu`` (from the shipped ``smoke/standin-cpu.toml``) and its
  model folder, under the try-out folder, with ``$SGLFORGE_ALLOW_STANDIN`` so a GPU target's
  publish takes it, and records it as a stand-in.

The result is the shell lines that set those (``env.sh`` in the folder); ``stop`` ends the
registry this started. Nothing here runs on a GPU or pretends to.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
import tomllib
from pathlib import Path

from sglforge import progress as _progress
from sglforge.defaults import defaults_root
from sglforge.errors import BuildError, ConfigError, SglforgeError
from sglforge.util import atomic_write, make_dirs, raise_held, signals_held

SCENARIO_NAME = "standin-cpu"
# What a first run costs (measured on 2 busy cores: 5 m 23 s to 10 m 01 s, of which
# debootstrap and its import 7 m 22 s at a load of 10) and what a bench adds per publish;
# said before anything starts.
FIRST_BUILD = "5 to 10 minutes"
# --bench, measured on 2 busy cores (USER-AUDIT-5 U15; issue 45): the bench base 538 s and
# 3.27 GB over the plain one, its first push 367 s, a first release's bench 316 s, a compared
# one's 293 s
BENCH_COST = "about 5 minutes"
BENCH_BASE = "about 9 to 12 minutes and 3.3 GB more, once; its first push about 6 minutes"
REGISTRY_WAIT = 20.0
# What env.sh sets: the walk-through's three settings, then what the tool reads.
SETTINGS = ("REGISTRY", "SCENARIO", "MODEL", "SGLFORGE_BASE_IMAGE", "SGLFORGE_ALLOW_STANDIN")


# Registries this process started, kept so they are reaped by ``stop`` (a command exits and
# leaves them running: they serve until ``sglforge tryout --stop``).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


class TryoutError(SglforgeError):
    """What the try-out needs and does not have (exit 2, with the command that fixes it)."""

    exit_code = ConfigError.exit_code


@dataclasses.dataclass
class Tryout:
    """What ``prepare`` made: the folder, the settings the walk-through reads, and how."""

    folder: Path
    version: str
    base_image: str
    base_built: bool  # built now (False: an earlier build was reused)
    registry: str
    registry_started: bool  # started now (False: already running, or --registry given)
    scenario: Path
    model: Path
    bench: bool
    env: dict[str, str]
    env_file: Path


def pinned_version() -> str:
    """The sglang version ``sglforge init`` pins (the shipped ``patches/upstream.toml``)."""
    root = defaults_root()
    if root is None:
        raise TryoutError("no shipped defaults (sglforge/data/project) in this installation")
    data = tomllib.loads((root / "patches" / "upstream.toml").read_text())
    source = data.get("sources", {}).get("pypi:sglang", {})
    return str(source.get("ref") or data["ref"]).removeprefix("v")


def release_version(given: str | None) -> str:
    """``--sglang`` (``0.5.14`` or ``v0.5.14``), else the pin; a version, never a path or tag."""
    version = (given or pinned_version()).removeprefix("v")
    if not re.fullmatch(r"\d+(\.\d+)+(\.?(post|rc|a|b)\d+)?", version):
        raise TryoutError(
            f"--sglang {given!r} is not a release version",
            "give one like 0.5.14 (sglforge upstream tags lists them)",
        )
    return version


def base_tag(version: str, bench: bool) -> str:
    from sglforge.standin.base import SGLANG_REPO

    return f"{SGLANG_REPO}:v{version}-rocm700-mi35x" + ("-bench" if bench else "")


def plan_text(version: str, bench: bool) -> list[str]:
    """What the try-out will do and what it costs, said before it starts."""
    lines = [
        f"tryout: the walk-through without a GPU, on TEST DOUBLES labelled {SCENARIO_NAME}:",
        f"  stand-in base  {base_tag(version, bench)} (a replica of the sglang v{version} "
        "release image serving a stand-in, no model)",
        f"  first run      {FIRST_BUILD} to build it (Debian minbase, PyPI wheels, docker "
        "build); later runs reuse it" + (f"; the bench base: {BENCH_BASE}" if bench else ""),
        "  registry       127.0.0.1 (Debian's docker-registry)",
        f"  scenario       {SCENARIO_NAME} (smoke checks against the stand-in; "
        + (f"a bench adds {BENCH_COST} per publish)" if bench else "no bench: --bench adds one)"),
    ]
    return lines


def prepare(
    folder: Path,
    bench: bool = False,
    registry: str | None = None,
    version: str | None = None,
    progress: _progress.Progress | None = None,
) -> Tryout:
    """Build (or reuse) the stand-in base, start (or reuse) the registry, write the scenario,
    the model folder and ``env.sh`` under ``folder``."""
    from sglforge.engine.reference import check_registry, is_loopback

    say = _progress.resolve(progress)
    version = release_version(version)
    if registry is not None:
        # what publish --registry takes (HOST[:PORT][/NAMESPACE], no credentials): env.sh
        # is written 0644 and printed, and the walk-through passes it to publish (F15)
        registry = check_registry(registry, "--use-registry")
        if not is_loopback(registry.split("/", 1)[0]):
            say.warn(
                f"tryout: --use-registry {registry} is not on this machine; a try-out pushes "
                "stand-in images (TEST DOUBLES) there"
            )
    folder = make_dirs(folder.resolve())  # a file in the way: exit 74 naming it (F17)
    _preflight(registry)
    tag, built = _base(version, bench, say, folder)
    if registry:
        address, started = registry, False
    else:
        address, started = start_registry(folder, say)
    scenario, model = write_scenario(folder, bench)
    env = {
        "REGISTRY": address,
        "SCENARIO": str(scenario),
        "MODEL": str(model),
        "SGLFORGE_BASE_IMAGE": tag.replace(f"v{version}", "v{version}", 1),
        "SGLFORGE_ALLOW_STANDIN": "1",
        "SGLFORGE_TRYOUT_DIR": str(folder),  # so `sglforge tryout --stop` finds it anywhere
    }
    env_file = folder / "env.sh"
    atomic_write(env_file, shell_lines(env))
    return Tryout(
        folder, version, tag, built, address, started, scenario, model, bench, env, env_file
    )


def shell_lines(env: dict[str, str]) -> str:
    """``export NAME=value`` lines (quoted for sh), one per setting."""
    head = "# sglforge tryout: TEST DOUBLES (stand-in base, local registry, standin-cpu)\n"
    return head + "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())


def _preflight(registry: str | None) -> None:
    """The engine, then what the first build or the registry needs and is missing."""
    from sglforge import engine
    from sglforge.standin import base
    from sglforge.standin.registry import INSTALL_HINT, registry_binary

    client = engine.client()  # EngineUnavailable says how to start one
    if base.needs_debootstrap(client):
        if shutil.which("debootstrap") is None:
            raise TryoutError(
                "debootstrap not found: the stand-in base starts from a Debian bookworm minbase",
                "install it (as root): apt-get install debootstrap; then run sglforge tryout",
            )
        if os.geteuid() != 0:
            raise TryoutError(
                "the first stand-in build runs debootstrap, which needs root",
                "run it once as root: sudo sglforge tryout (later runs reuse the base)",
            )
    if registry is None and registry_binary() is None:
        raise TryoutError(
            "docker-registry not found: the try-out pushes to a registry on 127.0.0.1",
            f"{INSTALL_HINT}, or pass --use-registry HOST:PORT of a registry you run",
        )


def _base(version: str, bench: bool, say: _progress.Progress, folder: Path) -> tuple[str, bool]:
    from sglforge.standin import base

    tag = base_tag(version, bench)
    if base.replica_ready(version, tag, bench=bench):
        say.info(f"stand-in base {tag}: built earlier, reused")
        return tag, False
    say.info(f"stand-in base {tag}: not built yet, building it (first run: {FIRST_BUILD})")
    try:
        with say.task(f"stand-in base {tag}"):
            base.ensure_sglang_base(version, tag, bench=bench)
    except (BuildError, OSError, subprocess.CalledProcessError) as exc:
        # debootstrap, pip download or the docker build failed: their output is in the text
        log = folder / "base-build.log"
        atomic_write(log, f"{type(exc).__name__}: {exc}\n")
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise BuildError(
            f"stand-in base {tag} could not be built: {first}",
            f"its output: {log}; fix that, then run sglforge tryout again",
        ) from exc
    return tag, True


def write_scenario(folder: Path, bench: bool) -> tuple[Path, Path]:
    """``folder/standin-cpu.toml`` (the shipped scenario on a free port, its model folder
    beside it, without ``[bench]`` unless ``bench``) and ``folder/model``."""
    from sglforge.standin.registry import free_port

    root = defaults_root()
    if root is None:
        raise TryoutError("no shipped defaults (sglforge/data/project) in this installation")
    text = (root / "smoke" / f"{SCENARIO_NAME}.toml").read_text()
    if not bench:
        # the plain stand-in base has no bench_serving dependencies (--bench builds them)
        start = text.index("\n[bench]\n")
        end = text.index("\n# The same log patterns", start)
        text = text[:start] + text[end:]
    text = re.sub(r"^port = \d+", f"port = {free_port()}", text, count=1, flags=re.M)
    text = re.sub(r'^path = "[^"]*"', 'path = "model"', text, count=1, flags=re.M)
    model = make_dirs(folder / "model")
    shipped_model = root / "tests" / "standin" / "model" / "config.json"
    atomic_write(model / "config.json", shipped_model.read_text())
    scenario = folder / f"{SCENARIO_NAME}.toml"
    atomic_write(scenario, text)
    return scenario, model


# --- the registry -------------------------------------------------------------------------


def _pid_file(folder: Path) -> Path:
    return folder / "registry" / "pid"


def running_registry(folder: Path) -> tuple[int, str] | None:
    """(pid, address) of the registry this folder's try-out started, if it still runs."""
    from sglforge.standin.registry import answers

    pid_file = _pid_file(folder)
    try:
        pid_text, address = pid_file.read_text().split()
        pid = int(pid_text)
    except (OSError, ValueError):
        return None
    if not _is_our_registry(pid, folder) or not answers(address):
        return None
    return pid, address


def _is_our_registry(pid: int, folder: Path) -> bool:
    """``pid`` is a docker-registry serving this folder's config (not a reused pid)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    config = str(folder / "registry" / "config.yml").encode()
    return any(a.endswith(b"docker-registry") for a in argv[:1]) and config in argv


def start_registry(folder: Path, say: _progress.Progress) -> tuple[str, bool]:
    """The folder's registry: the running one, else a new one on a free port (kept until
    ``sglforge tryout --stop``; its storage is ``folder/registry/storage``)."""
    from sglforge.standin.registry import answers, free_port, registry_binary, write_config

    running = running_registry(folder)
    if running:
        say.info(f"registry {running[1]}: running (pid {running[0]}), reused")
        return running[1], False
    binary = registry_binary()
    if binary is None:  # _preflight said so first
        raise TryoutError("docker-registry not found")
    where = make_dirs(folder / "registry")
    address = f"127.0.0.1:{free_port()}"
    config = write_config(where, address)
    # Started and recorded with Ctrl-C held, so an interrupt never leaves a registry that
    # no pid file names (`--stop` finds it); until it answers, any exit ends it (F13).
    with signals_held() as arrived, open(where / "registry.log", "ab") as log:
        proc = subprocess.Popen(
            [binary, "serve", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # outlives this command, like a service
        )
        _CHILDREN[proc.pid] = proc
        atomic_write(_pid_file(folder), f"{proc.pid} {address}\n")
    try:
        raise_held(arrived)
        deadline = time.monotonic() + REGISTRY_WAIT
        while time.monotonic() < deadline and proc.poll() is None:
            if answers(address):
                say.info(f"registry {address}: started (pid {proc.pid}, log {where}/registry.log)")
                return address, True
            time.sleep(0.1)
    except BaseException:
        _end_unanswered(proc, folder)
        raise
    _end_unanswered(proc, folder)
    raise TryoutError(
        f"{binary} did not answer on http://{address}/v2/ within {REGISTRY_WAIT:.0f} s",
        f"read {where}/registry.log",
    )


def _end_unanswered(proc: subprocess.Popen[bytes], folder: Path) -> None:
    """A registry that never answered: ended, reaped and unrecorded, with signals held."""
    with signals_held():
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()
        _CHILDREN.pop(proc.pid, None)
        _pid_file(folder).unlink(missing_ok=True)


def folder_to_stop(folder: Path, default: bool) -> Path:
    """The try-out folder ``--stop`` means: ``folder``, or, when it was not given and there is
    none here, the nearest one above (the walk-through leaves you in the project, one level
    down). NothingToDo (exit 1) when there is none: nothing was stopped (U1)."""
    from sglforge.errors import NothingToDo

    if folder.is_dir() or not default:
        if folder.is_dir():
            return folder
        raise NothingToDo(
            f"no tryout folder at {folder.resolve()}: nothing was stopped",
            "give the --dir that sglforge tryout used",
        )
    here = Path.cwd().resolve()
    for parent in here.parents:
        if _pid_file(parent / folder.name).is_file():
            return parent / folder.name
    raise NothingToDo(
        f"no tryout folder at {here / folder} nor above it: nothing was stopped",
        "run it where you ran `sglforge tryout`, or give --dir (. sglforge-tryout/env.sh sets "
        "SGLFORGE_TRYOUT_DIR)",
    )


def stop(folder: Path) -> int | None:
    """End the registry this folder's try-out started; its pid, or None if none ran."""
    folder = folder.resolve()
    pid_file = _pid_file(folder)
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    stopped = None
    if _is_our_registry(pid, folder):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            stopped = pid
            for _ in range(50):
                if not _is_our_registry(pid, folder):
                    break
                time.sleep(0.1)
    child = _CHILDREN.pop(pid, None)
    if child is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=10)
    pid_file.unlink(missing_ok=True)
    return stopped


__all__ = [
    "SETTINGS",
    "Tryout",
    "TryoutError",
    "pinned_version",
    "release_version",
    "plan_text",
    "prepare",
    "running_registry",
    "shell_lines",
    "stop",
    "write_scenario",
]
