"""Long-running containers on the Docker engine: start with a profile, stream logs, always remove.

Owns the container side of ``sglforge smoke``: turning a :class:`Profile` (ROCm devices, the
``video`` group, host IPC, shared memory, seccomp, ``SYS_PTRACE``, the open-files limit, host
networking, read-only mounts, environment) into the engine's create options; streaming the
container's output to a log file; noticing the moment it exits; and removing it whatever
happens -- success, failure, timeout, Ctrl-C or SIGTERM -- through :func:`running`.

``docker.errors.*`` are translated here into
:class:`~sglforge.engine.errors.ContainerFailed` naming the image (a container that cannot
start means the smoke run cannot run). :func:`read_file` reads one file out of an image
through a created, never started container; :func:`run_python` runs ``python3 -c`` in a
throwaway container with no network (the probes and the self-check core modules run).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import io
import os
import socket
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Unpack

import docker
import docker.errors
import docker.types
import requests

from sglforge.engine import LABEL, client
from sglforge.engine.errors import BuildFailed, ContainerFailed, EngineError
from sglforge.engine.profile import Launch, Profile
from sglforge.engine.profile import Mount as Mount  # re-exported: callers build mounts here
from sglforge.util import env_seconds, raise_held, signals_held, signals_raise
from sglforge.util import tail_lines as tail_lines  # re-exported: the log tail of a run

# Labels on every smoke container: which runner (host + pid) owns it, so an orphan left by a
# runner that was SIGKILLed can be recognised and removed by the next run.
ROLE_LABEL = "io.sglforge.role"
OWNER_HOST_LABEL = "io.sglforge.owner-host"
OWNER_PID_LABEL = "io.sglforge.owner-pid"
# The owner's pid namespace: a runner in another one (a CI job's container sharing the host's
# engine and hostname) has a pid this process cannot see, so it is never judged dead here.
OWNER_PIDNS_LABEL = "io.sglforge.owner-pidns"
# How long to wait for the log stream to drain after the container stopped.
LOG_DRAIN_S = 1.0


def create_options(profile: Profile) -> dict[str, Any]:
    """The Docker SDK keyword arguments for ``profile`` (``containers.create``)."""
    opts: dict[str, Any] = {
        "network_mode": profile.network_mode,
        "environment": dict(profile.env),
    }
    if profile.devices:
        # host:container:permissions, the same path on both sides (as `--device /dev/kfd`).
        opts["devices"] = [f"{d}:{d}:rwm" for d in profile.devices]
    if profile.group_add:
        opts["group_add"] = list(profile.group_add)
    if profile.ipc_mode:
        opts["ipc_mode"] = profile.ipc_mode
    if profile.shm_size:
        opts["shm_size"] = profile.shm_size
    if profile.security_opt:
        opts["security_opt"] = list(profile.security_opt)
    if profile.cap_add:
        opts["cap_add"] = list(profile.cap_add)
    if profile.nofile:
        opts["ulimits"] = [
            docker.types.Ulimit(name="nofile", soft=profile.nofile, hard=profile.nofile)
        ]
    if profile.mounts:
        opts["mounts"] = [
            docker.types.Mount(target=m.target, source=m.source, type="bind", read_only=m.read_only)
            for m in profile.mounts
        ]
    return opts


def _parse_time(value: str | None) -> float | None:
    """Epoch seconds from the engine's RFC 3339 time (nanoseconds trimmed), None when unset."""
    if not value or value.startswith("0001-"):
        return None
    head, _, frac = value.rstrip("Z").partition(".")
    frac = "".join(ch for ch in frac if ch.isdigit())[:6]
    stamp = _dt.datetime.fromisoformat(head).replace(tzinfo=_dt.UTC)
    return stamp.timestamp() + (int(frac.ljust(6, "0")) / 1e6 if frac else 0.0)


class Container:
    """A started container: its log file, whether and when it exited, and its exit code."""

    def __init__(self, raw: Any, log_path: Path) -> None:
        self._raw = raw
        self.id: str = raw.id
        self.name: str = raw.name
        self.log_path = log_path
        self.started = time.monotonic()
        self.exited = threading.Event()
        self.exit_code: int | None = None
        self.noticed_exit_at: float | None = None  # time.time() when the watcher saw the exit
        self._log_done = threading.Event()
        self._threads = [
            threading.Thread(target=self._stream_logs, name=f"logs-{self.name}", daemon=True),
            threading.Thread(target=self._watch_exit, name=f"wait-{self.name}", daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _stream_logs(self) -> None:
        try:
            with open(self.log_path, "ab", buffering=0) as fh:
                for chunk in self._raw.logs(stream=True, follow=True, stdout=True, stderr=True):
                    fh.write(chunk)
        except (docker.errors.DockerException, requests.RequestException, OSError):
            pass  # the container went away under us; what was written is what there is
        finally:
            self._log_done.set()

    def _watch_exit(self) -> None:
        # `wait` blocks until the container stops; a long model load can outlast the client's
        # read timeout, so a timeout just means "still running": ask again.
        while True:
            try:
                result = self._raw.wait(condition="not-running")
            except requests.exceptions.ReadTimeout:
                continue
            except (docker.errors.DockerException, requests.RequestException):
                result = {"StatusCode": None}
            self.noticed_exit_at = time.time()
            code = result.get("StatusCode") if isinstance(result, dict) else None
            self.exit_code = int(code) if code is not None else None
            self.exited.set()
            return

    def wait_exit(self, timeout: float) -> bool:
        """True once the container has exited (waits at most ``timeout`` seconds)."""
        return self.exited.wait(timeout)

    def drain_logs(self, timeout: float = LOG_DRAIN_S) -> None:
        """Wait (briefly) for the log stream to reach the end after the container stopped."""
        self._log_done.wait(timeout)

    def finished_at(self) -> float | None:
        """Epoch seconds at which the engine saw the process exit (None while running)."""
        try:
            self._raw.reload()
        except docker.errors.DockerException:
            return None
        return _parse_time((self._raw.attrs.get("State") or {}).get("FinishedAt"))

    def status(self) -> str:
        """The engine's status word (``running``, ``exited``...), ``gone`` once removed."""
        try:
            self._raw.reload()
        except docker.errors.NotFound:
            return "gone"
        return str(self._raw.status)

    def tail(self, n: int = 50) -> list[str]:
        """The last ``n`` lines of the log file."""
        return tail_lines(self.log_path, n)


def remove(container_id: str, wait: float = 60.0) -> bool:
    """Kill and remove a container; False when it was already gone or another caller was
    removing it (then it is waited for, up to ``wait`` seconds: when this returns, the
    container is gone either way, so a caller's "nothing left" holds)."""
    try:
        client().api.remove_container(container_id, force=True, v=True)
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError as exc:
        # "removal already in progress": someone (another run reaping the same orphan, or
        # the engine) is on it already; it is gone once that removal ends
        if exc.status_code == 409:
            _wait_gone(container_id, wait)
            return False
        raise ContainerFailed(
            f"container {container_id[:12]}: could not remove it: {exc.explanation or exc}",
            f"docker rm -f {container_id[:12]}",
        ) from exc
    return True


def _wait_gone(container_id: str, wait: float) -> None:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            left = client().api.containers(all=True, filters={"id": container_id})
        except docker.errors.DockerException:
            return
        if not left:
            return
        time.sleep(0.2)


def remove_named(ident: str, name: str, tries: int = 25) -> None:
    """Remove a container and make sure its name is gone: a removal that races the engine
    still creating or starting it (an interrupt landed meanwhile) can leave it behind."""
    for _ in range(tries):
        with contextlib.suppress(ContainerFailed):  # looked for again below
            remove(ident)
        try:
            left = client().api.containers(all=True, filters={"name": f"^/{name}$"})
        except docker.errors.DockerException:
            return
        if not left:
            return
        ident = left[0]["Id"]
        time.sleep(0.2)


def reap_orphans(role: str) -> list[str]:
    """Remove ``role`` containers whose runner process on this host is gone; their names."""
    host = socket.gethostname()
    gone: list[str] = []
    filters = {"label": [f"{LABEL}=1", f"{ROLE_LABEL}={role}", f"{OWNER_HOST_LABEL}={host}"]}
    # The low-level listing: one call, no per-container inspect that a concurrent removal
    # (another run reaping the same orphan) could turn into a NotFound.
    ours = _pid_namespace()
    for c in client().api.containers(all=True, filters=filters):
        labels = c.get("Labels") or {}
        if labels.get(OWNER_PIDNS_LABEL, ours) != ours:
            continue  # its runner's pid means nothing here (older runs carry no namespace)
        try:
            pid = int(labels.get(OWNER_PID_LABEL, "0"))
        except ValueError:
            continue
        if pid and not _pid_alive(pid) and remove(c["Id"]):
            gone.append(str((c.get("Names") or [c["Id"][:12]])[0]).lstrip("/"))
    return gone


def _pid_namespace() -> str:
    """This process's pid namespace as /proc names it (``pid:[4026531836]``); '' without /proc."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def owner_labels(role: str) -> dict[str, str]:
    """The labels naming ``role``'s runner: this host, this process and its pid namespace."""
    labels = {
        LABEL: "1",
        ROLE_LABEL: role,
        OWNER_HOST_LABEL: socket.gethostname(),
        OWNER_PID_LABEL: str(os.getpid()),
    }
    pidns = _pid_namespace()
    if pidns:
        labels[OWNER_PIDNS_LABEL] = pidns
    return labels


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def running(
    image: str, *, name: str | None = None, **launch: Unpack[Launch]
) -> Iterator[Container]:
    """Start ``image`` as ``launch`` says (entrypoint, command, profile, log file, role,
    labels); yield the running :class:`Container`; always remove it.

    The container is removed when the block ends for any reason, including Ctrl-C and
    SIGTERM (re-raised as :class:`Terminated`); signals arriving during removal are held
    until it is done.
    """
    c = client()
    role = launch.get("role", "smoke")
    all_labels = {**owner_labels(role), **(launch.get("labels") or {})}
    name = name or f"sglforge-{role}-{uuid.uuid4().hex[:8]}"
    entrypoint, log_path = launch["entrypoint"], launch["log_path"]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_bytes(b"")
    raw = None
    with signals_raise():
        try:
            try:
                raw = c.containers.create(
                    image,
                    entrypoint=None if entrypoint is None else list(entrypoint),
                    command=list(launch["command"]),
                    name=name,
                    labels=all_labels,
                    detach=True,
                    **create_options(launch["profile"]),
                )
                raw.start()
            except docker.errors.ImageNotFound as exc:
                raise ContainerFailed(
                    f"image {image} is not present on the engine",
                    f"sglforge build, or docker pull {image}",
                ) from exc
            except docker.errors.APIError as exc:
                raise ContainerFailed(
                    f"image {image}: the container could not start: {exc.explanation or exc}",
                    "check the scenario's [container] settings against this host "
                    "(devices, group, mounts)",
                ) from exc
            yield Container(raw, log_path)
        finally:
            # By name when a signal landed after the engine created the container but before
            # `create` returned it: the name was chosen up front, so it is removable either way.
            target = raw.id if raw is not None else name
            with signals_held() as arrived:
                remove_named(target, name)  # nothing to do when it was never created
            raise_held(arrived)


PROBE_TIMEOUT_ENV = "SGLFORGE_PROBE_TIMEOUT"


def run_python(
    ref: str,
    code: str,
    labels: Mapping[str, str] | None = None,
    timeout: float | None = None,
    *,
    args: Sequence[str] = (),
    working_dir: str | None = None,
) -> str:
    """Run ``python3 -c CODE ARGS`` in a throwaway container (no network); its output.

    ``working_dir`` overrides the image's WORKDIR (None keeps it). The run has one overall
    deadline, ``timeout`` (default ``$SGLFORGE_PROBE_TIMEOUT``, 120 s): a python3 that hangs
    is a BuildFailed naming the image, and its container is removed.
    """
    if timeout is None:
        timeout = env_seconds(PROBE_TIMEOUT_ENV, 120.0)
    c = client()
    all_labels = {LABEL: "1", ROLE_LABEL: "probe", **(labels or {})}
    # Named up front: a Ctrl-C between the engine creating it and `create` returning still
    # leaves a name to remove it by.
    name = f"sglforge-probe-{uuid.uuid4().hex[:12]}"
    container = None
    try:
        container = c.containers.create(
            ref,
            entrypoint=["python3", "-c", code],
            command=list(args),
            name=name,
            working_dir=working_dir,
            network_mode="none",
            labels=all_labels,
            detach=True,
        )
        container.start()
        try:
            result = container.wait(timeout=timeout)
        except requests.exceptions.RequestException:  # the engine's wait timed out
            raise BuildFailed(
                f"image {ref}: python3 did not finish within {timeout:g} s (a probe sglforge "
                "runs in it: python3 -c ...); its container was removed",
                f"check the image: docker run --rm --entrypoint python3 {ref} -c 'print(1)'; "
                f"or set {PROBE_TIMEOUT_ENV}=SECONDS",
            ) from None
        output: str = container.logs(stdout=True, stderr=True).decode(errors="replace")
    except docker.errors.DockerException as exc:
        raise BuildFailed(f"image {ref}: could not run python3 in it: {exc}") from exc
    finally:
        with signals_held() as arrived:
            remove_named(container.id if container is not None else name, name)
        raise_held(arrived)
    if int(result.get("StatusCode", 1)) != 0:
        raise BuildFailed(
            f"image {ref}: python3 exited with {result.get('StatusCode')}: {_last_line(output)}",
            f"docker run --rm --entrypoint python3 {ref} --version",
        )
    return output


def read_file(image: str, path: str, limit: int = 16 << 20) -> bytes | None:
    """The bytes of ``path`` inside ``image`` (a created, never started container), or None
    (also when the archive the engine sends is larger than ``limit`` bytes)."""
    api = client().api
    # Named up front, so a Ctrl-C while the engine creates it still leaves a name to remove.
    cid = f"sglforge-read-{uuid.uuid4().hex[:12]}"
    try:
        try:
            api.create_container(
                image,
                command=["/nonexistent-never-started"],
                name=cid,
                labels={LABEL: "1"},
                network_disabled=True,
            )
        except docker.errors.APIError as exc:
            raise EngineError(f"{image}: cannot create a container to read {path}: {exc}") from None
        try:
            stream, _ = api.get_archive(cid, path)
        except docker.errors.NotFound:
            return None
        chunks, size = [], 0
        for chunk in stream:  # read with a cap: an image can hold any file at ``path``
            size += len(chunk)
            if size > limit + (64 << 10):  # the tar headers around the file
                return None
            chunks.append(chunk)
        data = b"".join(chunks)
    finally:
        try:
            api.remove_container(cid, force=True)
        except docker.errors.APIError:
            pass
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                fh = tar.extractfile(member)
                return fh.read() if fh else None
    return None


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "(no output)"
