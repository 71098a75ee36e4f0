"""``sglforge doctor``: what this machine has for sglforge's work, checked read-only.

Each check names what it looked at and, when something is missing, the command that helps:
Python, git, the Docker engine and its version, buildx (for ``--mode source``), free disk
where the engine keeps images (release images are tens of GB), registry logins (names only,
never credentials), ``/dev/kfd`` and ``/dev/dri``, the GPUs and their gfx names from
``rocminfo`` or ``amd-smi``, and the size of the shared cache. Nothing is written.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sglforge import __version__
from sglforge.errors import SglforgeError
from sglforge.util import folder_size, run_probe

OK, WARN, FAIL, INFO = "ok", "warn", "fail", "info"
# Free space wanted where the engine keeps images: a ROCm release image is tens of GB, an
# upgrade holds two of them plus the overlay layers.
MIN_FREE_GB = 100


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok, warn, fail, info
    detail: str
    hint: str = ""


@dataclass(frozen=True)
class Report:
    version: str
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.status != FAIL for c in self.checks)


def _run(*cmd: str, timeout: float = 20) -> tuple[int, str]:
    """(exit code, output) of a read-only probe (``util.run_probe``); 127 when it is missing."""
    return run_probe(cmd, timeout)


def check_python() -> Check:
    v = sys.version_info
    status = OK if v >= (3, 11) else FAIL
    return Check("python", status, f"{sys.version.split()[0]} ({sys.executable})")


def check_git() -> Check:
    from sglforge import git

    found = git.version()
    if found is None:
        return Check("git", FAIL, "git not found", "install git (apt-get install git)")
    return Check("git", OK, found)


def check_engine() -> list[Check]:
    from sglforge.engine.info import facts

    try:
        f = facts()
    except SglforgeError as exc:
        return [Check("engine", FAIL, exc.message, exc.hint or "")]
    out = [
        Check("engine", OK, f"Docker {f.version} (API {f.api_version}), {f.os}, {f.images} images")
    ]
    out.append(check_disk(f.root_dir, "engine disk"))
    return out


def check_disk(folder: str, name: str) -> Check:
    path = Path(folder) if folder else None
    if path is None or not path.exists():
        return Check(
            name, INFO, f"{folder or 'the engine storage'}: not visible from here (remote engine?)"
        )
    usage = shutil.disk_usage(path)
    free = usage.free / 1e9
    detail = f"{free:.0f} GB free of {usage.total / 1e9:.0f} GB at {path}"
    if free < MIN_FREE_GB:
        return Check(
            name,
            WARN,
            detail,
            f"release base images are tens of GB each: free {MIN_FREE_GB} GB or more "
            "(docker image prune removes unused images)",
        )
    return Check(name, OK, detail)


def check_buildx() -> Check:
    code, out = _run("docker", "buildx", "version")
    if code == 0:
        return Check("buildx", OK, out.strip().splitlines()[0] if out.strip() else "present")
    return Check(
        "buildx",
        INFO,
        "docker buildx not found: only overlay builds (the default) are possible",
        "install the docker-buildx plugin for --mode source",
    )


def check_logins(config: Path | None = None) -> Check:
    """Registries the Docker config has a login for (names only) and the environment login."""
    path = config or Path(os.environ.get("DOCKER_CONFIG", Path.home() / ".docker")) / "config.json"
    names: list[str] = []
    try:
        data = json.loads(path.read_text())
        names = sorted(data.get("auths", {}) or {})
        helpers = data.get("credHelpers", {}) or {}
        names += sorted(f"{k} (helper)" for k in helpers)
        if data.get("credsStore"):
            names.append(f"credential store {data['credsStore']!r}")
    except (OSError, ValueError, AttributeError):
        pass
    if os.environ.get("SGLFORGE_REGISTRY_USER"):
        names.insert(0, "$SGLFORGE_REGISTRY_USER")
    if not names:
        return Check(
            "registry login",
            WARN,
            f"none ({path} has no auths)",
            "docker login REGISTRY, or set SGLFORGE_REGISTRY_USER/_PASSWORD (publish needs one)",
        )
    return Check("registry login", OK, ", ".join(names))


def check_devices(dev: Path = Path("/dev")) -> Check:
    have = [n for n in ("kfd", "dri") if (dev / n).exists()]
    if have == ["kfd", "dri"]:
        return Check("devices", OK, "/dev/kfd and /dev/dri present")
    return Check(
        "devices",
        INFO,
        "no /dev/kfd" + ("" if "dri" in have else " and no /dev/dri") + ": no AMD GPU here; "
        "a GPU smoke test cannot run (the CPU stand-in scenario can)",
        "on a GPU node: load amdgpu (modprobe amdgpu) and install ROCm",
    )


def parse_rocminfo(text: str) -> list[str]:
    """The gfx names of the GPU agents in ``rocminfo`` output (CPU agents left out)."""
    return re.findall(r"^\s*Name:\s+(gfx[0-9a-f]+)\s*$", text, re.M)


def parse_amd_smi(text: str) -> list[str]:
    """The gfx names in ``amd-smi static --asic --json`` output (``TARGET_GRAPHICS_VERSION``)."""
    return re.findall(r'"target_graphics_version"\s*:\s*"(gfx[0-9a-f]+)[^"]*"', text, re.I)


def check_gpus(run: Callable[..., tuple[int, str]] = _run) -> Check:
    code, out = run("rocminfo")
    gfx = parse_rocminfo(out) if code == 0 else []
    tool = "rocminfo"
    if not gfx:
        code2, out2 = run("amd-smi", "static", "--asic", "--json")
        gfx = parse_amd_smi(out2) if code2 == 0 else []
        tool = "amd-smi"
        if code == 127 and code2 == 127:
            return Check(
                "gpus", INFO, "neither rocminfo nor amd-smi found: no ROCm here", "install ROCm"
            )
    if not gfx:
        return Check("gpus", INFO, f"{tool} lists no GPU agent")
    counts = {g: gfx.count(g) for g in dict.fromkeys(gfx)}
    return Check("gpus", OK, ", ".join(f"{n} x {g}" for g, n in counts.items()) + f" ({tool})")


def check_cache() -> Check:
    from sglforge.cache import cache_root

    root = cache_root()
    if not root.exists():
        return Check("cache", OK, f"{root}: empty")
    size = folder_size(root)
    return Check("cache", OK, f"{root}: {size / 1e6:.0f} MB", "sglforge cache info / prune")


def diagnose() -> Report:
    checks = [check_python(), check_git(), *check_engine(), check_buildx(), check_logins()]
    checks += [check_devices(), check_gpus(), check_cache()]
    return Report(__version__, tuple(checks))
