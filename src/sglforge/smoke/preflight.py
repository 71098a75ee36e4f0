"""Before launching: the host has the devices, GPU arch and count, the model path and the port
the scenario needs; a failed preflight is a "cannot-run" verdict, not a crash.
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglforge.errors import SglforgeError
from sglforge.provenance import LABEL_GPU_ARCH, LABEL_TARGET
from sglforge.scenario.file import Scenario
from sglforge.smoke.report import Check
from sglforge.util import CANNOT_RUN, NOT_FOUND, run_probe

if TYPE_CHECKING:
    from sglforge.project import Project


@dataclass(frozen=True)
class GpuInventory:
    """The host's AMD GPUs (one gfx arch per GPU) and where that was read from."""

    archs: tuple[str, ...]
    source: str
    problem: str = ""


_GFX = re.compile(r"\bgfx[0-9a-f]{3,4}\b")


def parse_rocminfo(text: str) -> list[str]:
    """The gfx arch of every GPU agent in ``rocminfo`` output."""
    archs: list[str] = []
    name: str | None = None
    kind: str | None = None

    def flush() -> None:
        if kind == "GPU" and name:
            m = _GFX.search(name)
            if m:
                archs.append(m.group(0))

    for line in text.splitlines():
        if re.match(r"^\s*Agent\s+\d+\s*$", line):
            flush()
            name = kind = None
            continue
        m = re.match(r"^\s*(Name|Device Type):\s*(.*?)\s*$", line)
        if not m:
            continue
        # The agent's own Name comes first; later "Name:" lines belong to its ISA list.
        if m.group(1) == "Name" and name is None:
            name = m.group(2)
        elif m.group(1) == "Device Type" and kind is None:
            kind = m.group(2)
    flush()
    return archs


def parse_amd_smi(text: str) -> list[str]:
    """The gfx arch of every GPU in ``amd-smi static --asic --json`` output (any version)."""
    data = json.loads(text)
    archs: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            value = node.get("target_graphics_version")
            if isinstance(value, str) and _GFX.search(value):
                archs.append(_GFX.search(value).group(0))  # type: ignore[union-attr]
                return
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(data)
    return archs


def gfx_from_target_version(version: int) -> str | None:
    """``gfx950`` from KFD's ``gfx_target_version`` 90500 (None for CPUs: 0)."""
    if version <= 0:
        return None
    major, minor, step = version // 10000, (version // 100) % 100, version % 100
    return f"gfx{major}{minor}{step:x}"


def read_kfd_topology(nodes: Path = Path("/sys/class/kfd/kfd/topology/nodes")) -> list[str]:
    """The gfx arch of every GPU node the amdgpu driver's KFD topology lists."""
    archs: list[str] = []
    if not nodes.is_dir():
        return archs
    for node in sorted(nodes.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 0):
        try:
            props = dict(
                line.split(None, 1)
                for line in (node / "properties").read_text().splitlines()
                if " " in line
            )
        except OSError:
            continue
        gfx = gfx_from_target_version(int(props.get("gfx_target_version", "0") or 0))
        if gfx:
            archs.append(gfx)
    return archs


def detect_gpus(timeout: float = 60.0) -> GpuInventory:
    """The host's GPUs from ``rocminfo``, else ``amd-smi``, else the KFD sysfs topology."""
    problems: list[str] = []
    probes: list[tuple[str, list[str], Callable[[str], list[str]]]] = [
        ("rocminfo", ["rocminfo"], parse_rocminfo),
        ("amd-smi", ["amd-smi", "static", "--asic", "--json"], parse_amd_smi),
    ]
    for name, cmd, parse in probes:
        code, out = run_probe(cmd, timeout)
        if code == NOT_FOUND and not out:
            problems.append(f"{cmd[0]} not found")
            continue
        if code == CANNOT_RUN:
            problems.append(f"{name}: {out}")
            continue
        if code != 0:
            last = out.strip().splitlines()[-1:] or ["no output"]
            problems.append(f"{name} exited {code}: {last[0]}")
            continue
        try:
            archs = parse(out)
        except ValueError as exc:
            problems.append(f"{name}: unreadable output ({exc})")
            continue
        if archs:
            return GpuInventory(tuple(archs), name)
        problems.append(f"{name} lists no GPU")
    archs = read_kfd_topology()
    if archs:
        return GpuInventory(tuple(archs), "kfd-sysfs")
    problems.append("no GPU in /sys/class/kfd")
    return GpuInventory((), "none", "; ".join(problems))


def expected_arch(
    project: Project, scenario: Scenario, labels: Mapping[str, str]
) -> tuple[str | None, str]:
    """The GPU arch the image needs and where that came from (image label, then target, as
    the project's targets resolve it)."""
    from_label = labels.get(LABEL_GPU_ARCH)
    from_target = None
    target = scenario.target or labels.get(LABEL_TARGET)
    if target:
        try:
            from_target = project.target(target).gpu_arch
        except SglforgeError:
            from_target = None
    if from_label and from_target and from_label != from_target:
        return None, (
            f"the image is labelled {LABEL_GPU_ARCH}={from_label} "
            f"but target {target} is {from_target}"
        )
    if from_label:
        return from_label, f"image label {LABEL_GPU_ARCH}"
    if from_target:
        return from_target, f"target {target} in images/targets.toml"
    return None, f"no {LABEL_GPU_ARCH} label on the image and no known target ({target or 'none'})"


def port_in_use(port: int) -> bool:
    """True when something already answers on 127.0.0.1:``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass(frozen=True)
class Host:
    """What preflight reads of this host: the GPUs found (None: not probed), which paths
    exist (the device files) and which ports are taken. Tests hand in their own answers."""

    gpus: GpuInventory | None = None
    exists: Callable[[str], bool] = os.path.exists
    port_busy: Callable[[int], bool] = port_in_use


def preflight(
    scenario: Scenario,
    *,
    image: str,
    image_found: bool,
    model_path: Path | None,
    port: int,
    arch: tuple[str | None, str],
    host: Host = Host(),  # noqa: B008 (frozen: one shared default is safe)
) -> list[Check]:
    """The checks that decide whether ``host`` can run ``scenario`` at all."""
    out = [
        Check(
            "preflight.image",
            image_found,
            image if image_found else "missing",
            "present",
            "" if image_found else f"{image} is not on the engine: build or pull it first",
        )
    ]
    if scenario.accelerator == "rocm":
        out += _gpu_checks(scenario, arch, host)
    out.append(_model_check(model_path))
    busy = host.port_busy(port)
    out.append(
        Check(
            "preflight.port",
            not busy,
            port,
            "free",
            f"something already listens on 127.0.0.1:{port}; pass --port" if busy else "",
        )
    )
    return out


def _gpu_checks(scenario: Scenario, arch: tuple[str | None, str], host: Host) -> list[Check]:
    """A ROCm scenario's device files, the GPU arch against the image's, and the GPU count."""
    out: list[Check] = []
    missing = [d for d in scenario.container.devices if not host.exists(d)]
    out.append(
        Check(
            "preflight.devices",
            not missing,
            ", ".join(missing) + " missing" if missing else "present",
            ", ".join(scenario.container.devices),
            "the amdgpu driver is not loaded or the devices are not visible here"
            if missing
            else "",
        )
    )
    inv = host.gpus or GpuInventory((), "none", "not probed")
    want, why = arch
    have = sorted(set(inv.archs))
    if not inv.archs:
        ok, detail = False, f"no GPU found ({inv.problem})"
    elif want is None:
        ok, detail = False, f"cannot tell which GPU arch the image needs: {why}"
    else:
        ok = all(a == want for a in inv.archs)
        detail = f"from {inv.source}; expected from {why}" + (
            "" if ok else f": the host has {', '.join(have)}, the image needs {want}"
        )
    out.append(Check("preflight.gpu-arch", ok, ", ".join(have) or None, want, detail))
    need = scenario.gpus_needed
    out.append(
        Check(
            "preflight.gpu-count",
            len(inv.archs) >= need,
            len(inv.archs),
            need,
            f"the launch arguments need {need} GPUs" if len(inv.archs) < need else "",
        )
    )
    return out


def _model_check(model_path: Path | None) -> Check:
    """The model folder the run mounts."""
    if model_path is None:
        return Check("preflight.model", False, None, "a folder", "no model path: pass --model PATH")
    ok = model_path.is_dir()
    return Check(
        "preflight.model",
        ok,
        str(model_path),
        "a folder",
        "" if ok else f"{model_path} is not a folder on this host (pass --model PATH)",
    )


# --------------------------------------------------------------------------- HTTP


def node_facts(gpus: GpuInventory | None, timeout: float = 60.0) -> dict[str, object]:
    """The smoke host's GPU facts as read on the node: name, count, gfx, ROCm and driver.

    The names are rocminfo's ``Marketing Name`` of each GPU agent, the ROCm version is
    ``/opt/rocm/.info/version`` and the driver the amdgpu module's ``/sys/module/amdgpu/version``
    (absent with the in-kernel driver). Empty without GPUs.
    """
    if gpus is None or not gpus.archs:
        return {}
    facts: dict[str, object] = {
        "count": len(gpus.archs),
        "gfx": ",".join(sorted(set(gpus.archs))),
        "source": gpus.source,
    }
    code, text = run_probe(["rocminfo"], timeout)
    names = _gpu_marketing_names(text) if code == 0 else []
    if names:
        facts["name"] = ",".join(sorted(set(names)))
    for key, path in (
        ("rocm", "/opt/rocm/.info/version"),
        ("driver", "/sys/module/amdgpu/version"),
    ):
        try:
            facts[key] = Path(path).read_text().strip()
        except OSError:
            pass
    return facts


def _gpu_marketing_names(text: str) -> list[str]:
    names: list[str] = []
    name, kind = "", ""
    for line in [*text.splitlines(), "Agent 0"]:
        if re.match(r"^\s*Agent\s+\d+\s*$", line):
            if kind == "GPU" and name:
                names.append(name)
            name, kind = "", ""
        m = re.match(r"^\s*Marketing Name:\s*(.+?)\s*$", line)
        if m:
            name = m.group(1)
        m = re.match(r"^\s*Device Type:\s*(\S+)", line)
        if m:
            kind = m.group(1)
    return names


SIMULATED_ACCEPT = "SGLANG_SIMULATE_ACC_"  # sglang 0.5.14 srt/environ.py:261-262


def refuse_simulated_acceptance(env: Mapping[str, str], scenario: Path) -> None:
    """ConfigError when ``SGLANG_SIMULATE_ACC_*`` is set (the shell, ``--env`` or the scenario):
    sglang then fakes acceptance, so accept-length and speed figures would not be measured."""
    from sglforge.errors import ConfigError

    simulated = sorted(k for k in {**os.environ, **env} if k.startswith(SIMULATED_ACCEPT))
    if simulated:
        raise ConfigError(
            f"{', '.join(simulated)} is set: accept-length and speed figures would be "
            "simulated, not measured",
            f"unset {simulated[0]} (in the environment, --env or {scenario}) and rerun",
        )
