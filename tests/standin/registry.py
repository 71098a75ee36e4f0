"""Throwaway local registries for the Docker tests: Debian's ``docker-registry`` on 127.0.0.1
(its config and port helpers are ``sglforge.standin.registry``'s).

Each registry gets a free port, filesystem storage in a temporary folder and, optionally,
htpasswd (bcrypt) authentication. The Docker engine treats 127.0.0.0/8 as an insecure
registry by default, so plain HTTP works for push and pull.
"""

from __future__ import annotations

import base64
import contextlib
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from sglforge.standin.registry import REGISTRY_BIN, free_port, write_config
from sglforge.standin.registry import answers as _answers
from sglforge.standin.registry import registry_binary as _binary

__all__ = ["REGISTRY_BIN", "Registry", "free_port", "registry_binary", "start_registry"]

SETUP_HINT = "install and start what the tests need: `sudo bash .ci/setup`"

AUTH = """\
auth:
  htpasswd:
    realm: sglforge-test
    path: {htpasswd}
"""


def registry_binary() -> str:
    """Path of Debian's registry binary, or RuntimeError saying how to install it."""
    found = _binary()
    if not found:
        raise RuntimeError(
            f"{REGISTRY_BIN} not found (Debian package docker-registry); " + SETUP_HINT
        )
    return found


@dataclass
class Registry:
    """One running registry; ``stop()`` kills it (idempotent)."""

    address: str  # "127.0.0.1:PORT": the prefix of image references pushed here
    folder: Path
    process: subprocess.Popen[bytes]
    username: str | None = None
    password: str | None = None
    log_path: Path = field(default_factory=Path)

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    @property
    def auth_config(self) -> dict[str, str] | None:
        """What the Docker SDK's push/pull take as ``auth_config`` (None when anonymous)."""
        if self.username is None or self.password is None:
            return None
        return {"username": self.username, "password": self.password}

    def ref(self, repository: str, tag: str) -> str:
        """Image reference ``127.0.0.1:PORT/repository:tag`` in this registry."""
        return f"{self.address}/{repository}:{tag}"

    def get(self, path: str, accept: str | None = None) -> tuple[int, dict[str, str], bytes]:
        """GET ``/v2/...`` (with this registry's credentials); status, headers, body."""
        request = urllib.request.Request(self.url + path)
        if accept:
            request.add_header("Accept", accept)
        if self.auth_config:
            token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), err.read()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)


def start_registry(
    folder: Path, username: str | None = None, password: str | None = None, timeout: float = 20
) -> Registry:
    """Start a registry storing under ``folder``; with a username, htpasswd auth is required."""
    binary = registry_binary()
    folder.mkdir(parents=True, exist_ok=True)
    auth = ""
    if username is not None:
        if password is None:
            raise ValueError("a registry user needs a password")
        # bcrypt is the only hash format the registry's htpasswd backend accepts.
        line = subprocess.run(
            ["htpasswd", "-Bbn", username, password], check=True, capture_output=True, text=True
        ).stdout.strip()
        (folder / "htpasswd").write_text(line + "\n")
        auth = AUTH.format(htpasswd=folder / "htpasswd")
    last_log = ""
    for _ in range(3):  # the free port may be taken between probing and binding
        address = f"127.0.0.1:{free_port()}"
        config = write_config(folder, address, auth)
        log_path = folder / "registry.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT
            )
        registry = Registry(address, folder, proc, username, password, log_path)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            if _answers(address):
                return registry
            time.sleep(0.1)
        registry.stop()
        last_log = registry.log()
    raise RuntimeError(
        f"{binary} did not answer on /v2/ within {timeout:.0f}s:\n{last_log[-2000:]}"
    )
