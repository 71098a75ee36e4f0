"""A local registry on 127.0.0.1: Debian's ``docker-registry`` binary, filesystem storage.

What ``sglforge tryout`` starts for the walk-through, and what the tests' throwaway registries
are made of (tests/standin/registry.py). The Docker engine treats 127.0.0.0/8 as an insecure
registry by default, so plain HTTP works for push and pull.
"""

from __future__ import annotations

import shutil
import socket
import urllib.error
import urllib.request
from pathlib import Path

REGISTRY_BIN = "docker-registry"
INSTALL_HINT = "install Debian's registry: `apt-get install docker-registry` (as root)"

CONFIG = """\
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: {storage}
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: {address}
  secret: sglforge-local-only
{auth}"""


def registry_binary() -> str | None:
    """Path of Debian's registry binary, or None."""
    found = shutil.which(REGISTRY_BIN)
    if found:
        return found
    fallback = Path("/usr/bin") / REGISTRY_BIN
    return str(fallback) if fallback.is_file() else None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def answers(address: str) -> bool:
    """Whether a registry answers ``/v2/`` at ``address`` (401 counts: up, asking to log in)."""
    try:
        with urllib.request.urlopen(f"http://{address}/v2/", timeout=2):
            return True
    except urllib.error.HTTPError as err:
        return err.code == 401
    except OSError:
        return False


def write_config(folder: Path, address: str, auth: str = "") -> Path:
    """The registry's config file under ``folder`` (storage in ``folder/storage``)."""
    import json

    # Each value a JSON string, which YAML reads as a double-quoted scalar: a folder named
    # `my #1` or `try: v2` is a path, not a comment or a mapping (F14).
    config = folder / "config.yml"
    storage, addr = json.dumps(str(folder / "storage")), json.dumps(address)
    config.write_text(CONFIG.format(storage=storage, address=addr, auth=auth))
    return config
