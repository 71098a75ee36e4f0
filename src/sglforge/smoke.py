"""Smoke tests of serving images: scenarios, preflight, checks, the runner and its reports.

Owns ``sglforge smoke``: a scenario (``smoke/*.toml``, loaded with tomllib into frozen
dataclasses, unknown keys rejected naming the key and the file) says how to launch sglang in
an image (launch arguments, container profile, model mount, port, load timeout) and what to
check (readiness, non-empty output, arithmetic answers, speculative accept length, single
stream decode speed, forbidden and required log lines). :func:`run_smoke` checks the host
first (devices, GPU arch and count, model path, port: a failed preflight is a "cannot-run"
verdict, not a crash), starts the container through :mod:`sglforge.engine.containers`,
polls readiness while watching the container (a dead server is reported within about a
second of its exit, with its exit code and last log lines), runs the checks over HTTP on
127.0.0.1 and returns a :class:`SmokeReport`. Reports render as table rows, JSON, JUnit XML
and markdown.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglforge import reports
from sglforge.config import Table as _Table
from sglforge.config import read_toml
from sglforge.errors import ConfigError, SglforgeError, SmokeError
from sglforge.provenance import LABEL_GPU_ARCH, LABEL_TARGET
from sglforge.util import atomic_write, check_output_dir, confined, printable, work_dir

if TYPE_CHECKING:
    from sglforge.engine.containers import Profile

DEFAULT_PORT = 30000
DEFAULT_LOAD_TIMEOUT = 1800.0
DEFAULT_ACCEPT_LENGTH = 2.5
DEFAULT_COMMAND = ("python3", "-m", "sglang.launch_server")
PLACEHOLDERS = frozenset({"port", "model"})
LOG_TAIL_LINES = 50
# After a failed request: how long to wait for the engine to report the container's exit.
EXIT_GRACE_S = 2.0
HTTP_FAILED = "request failed: "
ACCELERATORS = ("rocm", "none")
SEVERITIES = ("fail", "warn")
Value = float | int | str | None


# --------------------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class ForbiddenPattern:
    """A log line to catch: a regular expression, its name, why it matters and its severity.

    ``fail`` lines fail the run; ``warn`` lines are counted and reported but do not.
    """

    name: str
    pattern: str
    why: str = ""
    severity: str = "fail"


@dataclass(frozen=True)
class RequiredPattern:
    """A log line that must appear (at least ``min_count`` times): proof that something ran.

    A ``fail`` pattern with too few matching lines fails the ``logs`` check; ``warn`` reports it.
    """

    name: str
    pattern: str
    why: str = ""
    severity: str = "fail"
    min_count: int = 1


@dataclass(frozen=True)
class LogMatch:
    """Every line of a server log matching one pattern: how many, and the first of them.

    ``kind`` is ``forbidden`` or ``required``; a required pattern's ``need`` is its
    ``min_count`` and ``missing`` says it matched fewer lines (``first_line`` 0: none).
    """

    name: str
    severity: str
    count: int
    first_line: int
    text: str
    why: str = ""
    kind: str = "forbidden"
    need: int = 0

    @property
    def missing(self) -> bool:
        return self.kind == "required" and self.count < self.need

    def describe(self) -> str:
        if self.missing:
            return f"{self.name}: required line missing ({self.count} of at least {self.need})"
        more = f" (+{self.count - 1} more)" if self.count > 1 else ""
        return f"{self.name}: line {self.first_line}: {self.text}{more}"


@dataclass(frozen=True)
class Question:
    """A question with one known answer (the answer must appear as a whole number/word)."""

    prompt: str
    answer: str


@dataclass(frozen=True)
class Checks:
    """The ``[checks]`` tables: prompts and thresholds."""

    request_timeout: float
    chat_extra: Mapping[str, Any]
    prompts: tuple[str, ...]
    chat_prompt: str
    serve_max_new_tokens: int
    questions: tuple[Question, ...]
    question_max_tokens: int
    spec_enabled: bool
    min_accept_length: float
    speed_prompt: str
    speed_max_new_tokens: int
    min_decode_tok_s: float
    forbidden: tuple[ForbiddenPattern, ...]
    required: tuple[RequiredPattern, ...] = ()


@dataclass(frozen=True)
class Scenario:
    """One smoke scenario (``smoke/NAME.toml``)."""

    path: Path
    name: str
    description: str
    target: str | None
    accelerator: str
    port: int
    load_timeout: float
    model_path: Path | None
    model_mount: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    container: Profile  # the engine's run profile, less the model mount (added at run time)
    checks: Checks

    @property
    def gpus_needed(self) -> int:
        """GPUs the launch arguments need: tensor parallel x data parallel."""
        tp = _flag_int(self.args, ("--tp", "--tp-size"), 1)
        dp = _flag_int(self.args, ("--dp", "--dp-size"), 1)
        # With DP attention sglang's data-parallel ranks live inside the TP group.
        if "--enable-dp-attention" in self.args:
            dp = 1
        return tp * dp

    def launch_args(self, port: int) -> list[str]:
        """The launch arguments with ``<port>`` and ``<model>`` filled in."""
        values = {"port": str(port), "model": self.model_mount}
        return [re.sub(r"<([a-z_]+)>", lambda m: values[m.group(1)], a) for a in self.args]

    def container_command(self, port: int) -> list[str]:
        """What the container runs: ``python3 -m sglang.launch_server`` and the arguments.

        Exactly what follows the image in ``docker run IMAGE python3 -m sglang.launch_server
        ...``; it relies on no ENTRYPOINT in the image.
        """
        return [*self.command, *self.launch_args(port)]


def _flag_int(args: Sequence[str], names: Sequence[str], default: int) -> int:
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args):
                value = args[i + 1]
            elif a.startswith(n + "="):
                value = a.split("=", 1)[1]
            else:
                continue
            try:
                return int(value)
            except ValueError:
                return default
    return default


def load_scenario(path: Path | str) -> Scenario:
    """Load and validate one scenario file."""
    path = Path(path)
    return parse_scenario(
        read_toml(path, "scenario", "ls smoke/ for the scenarios that exist"), path
    )


def parse_scenario(data: Mapping[str, Any], path: Path) -> Scenario:
    """Validate a scenario's TOML data (``path`` names the file in errors, resolves paths)."""
    top = _Table(dict(data), path, "")
    sc = top.table("scenario")
    name = sc.get("name", "str", path.stem)
    # The name becomes a folder under build/smoke/: "../../srv/x" or "/srv/x" must not steer
    # where the report goes. Refused here, before anything is written.
    confined(path.parent, name, "'scenario.name'", str(path))
    if "/" in name or "\\" in name or name.startswith("."):
        raise ConfigError(
            f"{path}: 'scenario.name' {name!r} must be a plain name (it names a report folder)",
            f"fix 'scenario.name' in {path}",
        )
    description = sc.get("description", "str", "")
    target = sc.get("target", "str", None)
    accelerator = sc.get("accelerator", "str", "rocm")
    if accelerator not in ACCELERATORS:
        raise ConfigError(
            f"{path}: 'scenario.accelerator' must be one of {', '.join(ACCELERATORS)}, "
            f"not {accelerator!r}",
            f"fix {path}",
        )
    port = sc.get("port", "int", DEFAULT_PORT)
    if not 0 < port < 65536:
        raise ConfigError(f"{path}: 'scenario.port' {port} is not a TCP port", f"fix {path}")
    load_timeout = sc.number("load_timeout", "float", DEFAULT_LOAD_TIMEOUT)
    sc.done()

    mt = top.table("model")
    raw_model = mt.get("path", "str", None)
    model_path = (path.parent / raw_model).resolve() if raw_model else None
    model_mount = mt.get("mount", "str", "/model")
    if not model_mount.startswith("/"):
        raise ConfigError(
            f"{path}: 'model.mount' must be an absolute path in the container",
            f"fix {path}",
        )
    mt.done()

    la = top.table("launch")
    command = la.get("command", "strs", DEFAULT_COMMAND)
    args = la.get("args", "strs")
    la.done()
    if not command:
        raise ConfigError(f"{path}: 'launch.command' is empty", f"fix {path}")
    for a in args:
        for ph in re.findall(r"<([^<>\s]+)>", a):
            if ph not in PLACEHOLDERS:
                raise ConfigError(
                    f"{path}: unknown placeholder <{ph}> in 'launch.args'",
                    "known placeholders: <port>, <model>",
                )
    if "<port>" not in args:
        raise ConfigError(
            f"{path}: 'launch.args' must pass the port as <port> (e.g. --port <port>)",
            f'add "--port", "<port>" to launch.args in {path}',
        )

    ct = top.table("container")
    env_tbl = ct.get("env", "table", {})
    env: list[tuple[str, str]] = []
    for k, v in env_tbl.items():
        if isinstance(v, bool) or not isinstance(v, str | int | float):
            raise ConfigError(
                f"{path}: 'container.env.{k}' must be a string or number", f"fix {path}"
            )
        env.append((k, str(v)))
    from sglforge.engine.containers import Profile

    container = Profile(
        devices=ct.get("devices", "strs", ()),
        group_add=ct.get("group_add", "strs", ()),
        ipc_mode=_ipc_mode(ct, path),
        shm_size=_shm_size(ct, path),
        security_opt=ct.get("security_opt", "strs", ()),
        cap_add=ct.get("cap_add", "strs", ()),
        nofile=ct.number("nofile", "int", None),
        network_mode=ct.get("network_mode", "str", "host"),
        env=dict(env),
    )
    ct.done()
    if container.network_mode != "host":
        # The runner reaches the server on 127.0.0.1:<port>, which only host networking gives.
        raise ConfigError(
            f"{path}: 'container.network_mode' must be \"host\" (the runner talks to 127.0.0.1)",
            f"fix {path}",
        )

    checks = _parse_checks(top.table("checks"), path)
    top.done()
    return Scenario(
        path=path,
        name=name,
        description=description,
        target=target,
        accelerator=accelerator,
        port=port,
        load_timeout=load_timeout,
        model_path=model_path,
        model_mount=model_mount,
        command=tuple(command),
        args=tuple(args),
        container=container,
        checks=checks,
    )


_SIZE = re.compile(r"^[0-9]+(?:\.[0-9]+)?\s*[bkmgBKMG]?[bB]?$")


def _shm_size(ct: _Table, path: Path) -> str | None:
    """``shm_size`` as Docker reads it (``64g``, ``512m``, bytes): checked before any run."""
    value = ct.get("shm_size", "str", None)
    if value is not None and not (_SIZE.match(value) and float(re.sub(r"[^0-9.]", "", value)) > 0):
        raise ct._bad("shm_size", 'a size such as "64g", "512m" or "1073741824"')
    return value


def _ipc_mode(ct: _Table, path: Path) -> str | None:
    value = ct.get("ipc_mode", "str", None)
    if value is not None and not (
        value in ("host", "private", "shareable", "none", "") or value.startswith("container:")
    ):
        raise ct._bad("ipc_mode", '"host", "private", "shareable", "none" or "container:NAME"')
    return value


def _parse_checks(ch: _Table, path: Path) -> Checks:
    request_timeout = ch.number("request_timeout", "float", 300.0)
    chat_extra = ch.get("chat_extra", "table", {})

    sv = ch.table("serves")
    prompts = sv.get("prompts", "strs")
    chat_prompt = sv.get("chat_prompt", "str")
    serve_max = sv.number("max_new_tokens", "int", 32)
    sv.done()
    if not prompts:
        raise ConfigError(f"{path}: 'checks.serves.prompts' is empty", f"fix {path}")

    ar = ch.table("arithmetic")
    questions = []
    for i, q in enumerate(ar.get("questions", "tables", [])):
        qt = _Table(q, path, f"checks.arithmetic.questions[{i}]")
        questions.append(Question(qt.get("prompt", "str"), qt.get("answer", "str")))
        qt.done()
    question_max = ar.number("max_tokens", "int", 64)
    ar.done()

    sp = ch.table("spec")
    spec_enabled = sp.get("enabled", "bool", True)
    min_accept = sp.number("min_accept_length", "float", DEFAULT_ACCEPT_LENGTH, strict=False)
    sp.done()

    sd = ch.table("speed")
    speed_prompt = sd.get("prompt", "str")
    speed_max = sd.number("max_new_tokens", "int", 256)
    min_tok_s = sd.number("min_decode_tok_s", "float", strict=False)
    sd.done()
    if speed_max < 8:
        raise ConfigError(
            f"{path}: 'checks.speed.max_new_tokens' must be at least 8 to measure decoding",
            f"fix {path}",
        )

    lg = ch.table("logs")
    forbidden = [
        ForbiddenPattern(*_log_pattern(path, "forbidden", i, f))
        for i, f in enumerate(lg.get("forbidden", "tables", []))
    ]
    required: list[RequiredPattern] = []
    for i, r in enumerate(lg.get("required", "tables", [])):
        rt = _Table(r, path, f"checks.logs.required[{i}]")
        min_count = rt.number("min_count", "int", 1)
        required.append(RequiredPattern(*_log_pattern(path, "required", i, r, rt), min_count))
    names = [p.name for p in forbidden] + [p.name for p in required]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(
            f"{path}: log pattern name {twice[0]!r} is used twice in [checks.logs]",
            f"give each forbidden and required pattern its own name in {path}",
        )
    lg.done()
    ch.done()
    return Checks(
        request_timeout=request_timeout,
        chat_extra=chat_extra,
        prompts=prompts,
        chat_prompt=chat_prompt,
        serve_max_new_tokens=serve_max,
        questions=tuple(questions),
        question_max_tokens=question_max,
        spec_enabled=spec_enabled,
        min_accept_length=min_accept,
        speed_prompt=speed_prompt,
        speed_max_new_tokens=speed_max,
        min_decode_tok_s=min_tok_s,
        forbidden=tuple(forbidden),
        required=tuple(required),
    )


def _log_pattern(
    path: Path, kind: str, i: int, data: Any, table: _Table | None = None
) -> tuple[str, str, str, str]:
    """(name, pattern, why, severity) of ``checks.logs.<kind>[i]``, validated."""
    where = f"checks.logs.{kind}[{i}]"
    t = table or _Table(data, path, where)
    name, pattern = t.get("name", "str"), t.get("pattern", "str")
    why, severity = t.get("why", "str", ""), t.get("severity", "str", "fail")
    t.done()
    if severity not in SEVERITIES:
        raise ConfigError(
            f'{path}: \'{where}.severity\' must be "fail" or "warn", not {severity!r}',
            f"fix {where}.severity ({name}) in {path}",
        )
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ConfigError(
            f"{path}: {kind} log pattern {name!r} is not a valid regular expression: {exc}",
            f"fix {where}.pattern in {path}",
        ) from None
    return name, pattern, why, severity


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Check:
    """One check's outcome: measured ``value`` against ``threshold``."""

    name: str
    passed: bool
    value: Value = None
    threshold: Value = None
    detail: str = ""
    skipped: bool = False
    seconds: float = 0.0


@dataclass(frozen=True)
class SmokeReport:
    """What a smoke run found. ``verdict`` is ``passed``, ``failed`` or ``cannot-run``.

    ``image_digest`` is the registry digest when the image has one, else its image ID (both
    ``sha256:...``); ``figures`` holds the measured numbers (``ready_s``, ``decode_tok_s``,
    ``spec_accept_length_server``/``_requests``, ``exit_to_verdict_s`` after a crash...).
    """

    passed: bool
    verdict: str
    checks: tuple[Check, ...]
    image: str
    image_digest: str | None
    image_id: str | None
    scenario: str
    scenario_path: Path
    figures: Mapping[str, Value]
    log_path: Path | None
    report_dir: Path | None
    exit_code: int | None = None
    log_tail: tuple[str, ...] = ()
    reason: str = ""
    started_at: str = ""
    duration_s: float = 0.0
    warnings: tuple[LogMatch, ...] = ()
    run_id: str = ""
    required: tuple[LogMatch, ...] = ()  # one per required pattern, found or missing

    @property
    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if not c.passed and not c.skipped]

    @property
    def warning_count(self) -> int:
        """Log lines that matched a ``warn`` pattern, plus one per missing ``warn`` line."""
        return sum(1 if w.missing else w.count for w in self.warnings)


# --------------------------------------------------------------------------- preflight


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
        exe = shutil.which(cmd[0]) or (
            f"/opt/rocm/bin/{cmd[0]}" if os.access(f"/opt/rocm/bin/{cmd[0]}", os.X_OK) else None
        )
        if not exe:
            problems.append(f"{cmd[0]} not found")
            continue
        try:
            proc = subprocess.run([exe, *cmd[1:]], capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            problems.append(f"{name}: {exc}")
            continue
        if proc.returncode != 0:
            last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            problems.append(f"{name} exited {proc.returncode}: {last[0]}")
            continue
        try:
            archs = parse(proc.stdout)
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
    root: Path, scenario: Scenario, labels: Mapping[str, str]
) -> tuple[str | None, str]:
    """The GPU arch the image needs and where that came from (image label, then target)."""
    from_label = labels.get(LABEL_GPU_ARCH)
    from_target = None
    target = scenario.target or labels.get(LABEL_TARGET)
    if target:
        try:
            from sglforge.targets import load_targets

            from_target = load_targets(root).resolve(target).gpu_arch
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


def preflight(
    scenario: Scenario,
    *,
    image: str,
    image_found: bool,
    model_path: Path | None,
    port: int,
    gpus: GpuInventory | None,
    arch: tuple[str | None, str],
    exists: Callable[[str], bool] = os.path.exists,
    port_busy: Callable[[int], bool] = port_in_use,
) -> list[Check]:
    """The checks that decide whether this host can run ``scenario`` at all."""
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
        missing = [d for d in scenario.container.devices if not exists(d)]
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
        inv = gpus or GpuInventory((), "none", "not probed")
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
    if model_path is None:
        out.append(
            Check("preflight.model", False, None, "a folder", "no model path: pass --model PATH")
        )
    else:
        ok = model_path.is_dir()
        out.append(
            Check(
                "preflight.model",
                ok,
                str(model_path),
                "a folder",
                "" if ok else f"{model_path} is not a folder on this host (pass --model PATH)",
            )
        )
    busy = port_busy(port)
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


# --------------------------------------------------------------------------- HTTP


class HttpError(Exception):
    """A request to the server failed (connection, status, or an unreadable answer)."""


def _request(
    url: str, body: Mapping[str, Any] | None = None, timeout: float = 30.0
) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json"} if data else {}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read() if exc.fp else b""
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise HttpError(f"{url}: {getattr(exc, 'reason', exc)}") from exc


def _json(url: str, body: Mapping[str, Any] | None = None, timeout: float = 30.0) -> Any:
    status, raw = _request(url, body, timeout)
    if status != 200:
        raise HttpError(f"{url}: HTTP {status}: {printable(raw[:200].decode(errors='replace'))}")
    try:
        return json.loads(raw)
    except ValueError as exc:
        shown = printable(raw[:200].decode(errors="replace"))
        raise HttpError(f"{url}: not JSON: {shown}") from exc


def _stream(
    url: str, body: Mapping[str, Any], timeout: float
) -> list[tuple[float, dict[str, Any]]]:
    """POST a streaming ``/generate``; (arrival time, chunk) for every ``data:`` event."""
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    chunks: list[tuple[float, dict[str, Any]]] = []
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            for line in resp:
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    break
                chunks.append((time.monotonic(), json.loads(payload)))
    except urllib.error.HTTPError as exc:
        raise HttpError(f"{url}: HTTP {exc.code}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise HttpError(f"{url}: {getattr(exc, 'reason', exc)}") from exc
    return chunks


# --------------------------------------------------------------------------- checks


def strip_reasoning(text: str) -> str:
    """The answer part of a reasoning model's output (``<think>...</think>`` removed)."""
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.S)
    return text.split("</think>")[-1]


def answer_matches(text: str, answer: str) -> bool:
    """True when ``answer`` appears in ``text`` as a whole number or word."""
    pattern = rf"(?<![\w.]){re.escape(answer)}(?![\w]|\.\d)"
    return re.search(pattern, strip_reasoning(text)) is not None


def decode_speed(chunks: Sequence[tuple[float, Mapping[str, Any]]]) -> tuple[float, int]:
    """Single-stream decode tokens/s from streamed chunks, and the tokens generated.

    Counts tokens after the first chunk (prefill's token) over the time after it, so the
    prompt's prefill time does not dilute the decode speed.
    """
    timed = [(t, int((c.get("meta_info") or {}).get("completion_tokens") or 0)) for t, c in chunks]
    if len(timed) < 2:
        return 0.0, timed[-1][1] if timed else 0
    (t0, n0), (t1, n1) = timed[0], timed[-1]
    if t1 <= t0 or n1 <= n0:
        return 0.0, n1
    return (n1 - n0) / (t1 - t0), n1


def accept_length_from_meta(metas: Iterable[Mapping[str, Any]]) -> tuple[float | None, str]:
    """Accept length over ``/generate`` responses: verify-step weighted mean, and detail.

    Uses ``spec_accept_length`` when the server reports it, else ``completion_tokens /
    spec_verify_ct`` (older servers); None when no response carries speculative statistics.
    """
    tokens = 0.0
    steps = 0
    seen = 0
    for m in metas:
        verify = m.get("spec_verify_ct")
        if verify is None:
            continue
        seen += 1
        verify = int(verify)
        if verify <= 0:
            continue
        length = m.get("spec_accept_length")
        if length is None:
            length = int(m.get("completion_tokens") or 0) / verify
        tokens += float(length) * verify
        steps += verify
    if not seen:
        return None, "no spec_verify_ct in any /generate meta_info: speculative decoding is off"
    if not steps:
        return 0.0, f"{seen} responses, none with a verify step"
    return tokens / steps, f"{steps} verify steps over {seen} responses"


def accept_length_from_server_info(info: Mapping[str, Any]) -> float | None:
    """Mean ``avg_spec_accept_length`` over ``internal_states`` (None when not reported)."""
    values = []
    for state in info.get("internal_states") or []:
        if isinstance(state, Mapping) and state.get("avg_spec_accept_length") is not None:
            values.append(float(state["avg_spec_accept_length"]))
    if not values and info.get("avg_spec_accept_length") is not None:
        values.append(float(info["avg_spec_accept_length"]))
    return sum(values) / len(values) if values else None


def _scan(
    path: Path, patterns: Sequence[ForbiddenPattern | RequiredPattern]
) -> tuple[dict[str, int], dict[str, tuple[int, str]]]:
    """Per pattern name: how many lines of the log match, and the first (number, text)."""
    compiled = [(p, re.compile(p.pattern)) for p in patterns]
    first: dict[str, tuple[int, str]] = {}
    counts: dict[str, int] = {}
    try:
        fh = open(path, encoding="utf-8", errors="replace", newline="\n")
    except OSError:
        return counts, first
    with fh:
        for n, line in enumerate(fh, 1):
            for p, rx in compiled:
                if rx.search(line):
                    counts[p.name] = counts.get(p.name, 0) + 1
                    # Server output is untrusted: control characters are shown escaped.
                    first.setdefault(p.name, (n, printable(line.strip()[:200])))
    return counts, first


def scan_log(path: Path, patterns: Sequence[ForbiddenPattern]) -> list[LogMatch]:
    """One :class:`LogMatch` per pattern that matched any line of the log, in pattern order."""
    counts, first = _scan(path, patterns)
    return [
        LogMatch(p.name, p.severity, counts[p.name], *first[p.name], why=p.why)
        for p in patterns
        if p.name in counts
    ]


def scan_required(path: Path, patterns: Sequence[RequiredPattern]) -> list[LogMatch]:
    """One :class:`LogMatch` per required pattern, found or not (``missing``), in order."""
    counts, first = _scan(path, patterns)
    return [
        LogMatch(
            p.name,
            p.severity,
            counts.get(p.name, 0),
            *first.get(p.name, (0, "")),
            why=p.why,
            kind="required",
            need=p.min_count,
        )
        for p in patterns
    ]


def logs_check(
    matches: Sequence[LogMatch], patterns: int, required: Sequence[LogMatch] = ()
) -> Check:
    """The ``logs`` check: fails on a ``fail`` match or a missing ``fail`` required line;
    ``warn`` ones are only counted."""
    missing = [r for r in required if r.missing]
    fails = [m for m in (*missing, *matches) if m.severity == "fail"]
    warns = [m for m in matches if m.severity == "warn"]
    missing_warns = [r for r in missing if r.severity == "warn"]
    detail = "; ".join(m.describe() for m in fails[:5]) or f"{patterns + len(required)} patterns"
    if warns:
        detail += f"; {sum(w.count for w in warns)} warning line(s): " + ", ".join(
            f"{w.name} x{w.count}" for w in warns
        )
    if missing_warns:
        detail += "; required line(s) missing (warn): " + ", ".join(r.name for r in missing_warns)
    found = [r for r in required if not r.missing]
    if found:
        detail += "; required found: " + ", ".join(f"{r.name} x{r.count}" for r in found)
    value = sum(1 if m.missing else m.count for m in fails)
    return Check("logs", not fails, value, 0, detail)


def _timed(name: str, fn: Callable[[], Check]) -> Check:
    started = time.monotonic()
    try:
        check = fn()
    except HttpError as exc:
        check = Check(name, False, None, None, f"{HTTP_FAILED}{exc}")
    return replace(check, seconds=round(time.monotonic() - started, 3))


class _Session:
    """The checks of one running server, collecting figures and ``meta_info`` as they go."""

    def __init__(self, scenario: Scenario, port: int) -> None:
        self.s = scenario
        self.c = scenario.checks
        self.base = f"http://127.0.0.1:{port}"
        self.metas: list[dict[str, Any]] = []
        self.figures: dict[str, Value] = {}

    def _generate(self, prompt: str, max_new_tokens: int) -> dict[str, Any]:
        body = {
            "text": prompt,
            "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens},
        }
        out = _json(f"{self.base}/generate", body, self.c.request_timeout)
        if isinstance(out, list):
            out = out[0]
        self.metas.append(out.get("meta_info") or {})
        return out

    def _chat(self, model: str, prompt: str, max_tokens: int) -> str:
        body = {
            **dict(self.c.chat_extra),
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0,
            "max_tokens": max_tokens,
        }
        out = _json(f"{self.base}/v1/chat/completions", body, self.c.request_timeout)
        msg = (out.get("choices") or [{}])[0].get("message") or {}
        return str(msg.get("content") or "")

    def model_name(self) -> str:
        try:
            data = _json(f"{self.base}/v1/models", timeout=30).get("data") or []
            return str(data[0]["id"]) if data else "default"
        except (HttpError, KeyError, TypeError, AttributeError):
            return "default"

    def serves(self) -> Check:
        empty: list[str] = []
        for p in self.c.prompts:
            text = str(self._generate(p, self.c.serve_max_new_tokens).get("text") or "")
            if not text.strip():
                empty.append(f"/generate {p[:40]!r}")
        chat = self._chat(self.model_name(), self.c.chat_prompt, self.c.serve_max_new_tokens)
        if not strip_reasoning(chat).strip():
            empty.append(f"chat {self.c.chat_prompt[:40]!r}")
        total = len(self.c.prompts) + 1
        return Check(
            "serves",
            not empty,
            total - len(empty),
            total,
            "empty output from " + "; ".join(empty) if empty else "",
        )

    def arithmetic(self) -> Check:
        model = self.model_name()
        wrong: list[str] = []
        for q in self.c.questions:
            text = self._chat(model, q.prompt, self.c.question_max_tokens)
            if not answer_matches(text, q.answer):
                shown = strip_reasoning(text).strip().replace("\n", " ")[:60]
                wrong.append(f"{q.prompt[:40]!r} -> {shown!r} (want {q.answer})")
        total = len(self.c.questions)
        return Check("arithmetic", not wrong, total - len(wrong), total, "; ".join(wrong))

    def speed(self) -> Check:
        body = {
            "text": self.c.speed_prompt,
            "stream": True,
            "sampling_params": {
                "temperature": 0,
                "max_new_tokens": self.c.speed_max_new_tokens,
                "ignore_eos": True,
            },
        }
        chunks = _stream(f"{self.base}/generate", body, self.c.request_timeout)
        if chunks:
            self.metas.append(chunks[-1][1].get("meta_info") or {})
        tok_s, tokens = decode_speed(chunks)
        self.figures["decode_tok_s"] = round(tok_s, 2)
        self.figures["decode_tokens"] = tokens
        ok = tok_s >= self.c.min_decode_tok_s
        return Check(
            "decode-speed",
            ok,
            round(tok_s, 2),
            self.c.min_decode_tok_s,
            f"{tokens} tokens, single stream, {len(chunks)} chunks",
        )

    def spec_requests(self) -> Check:
        value, detail = accept_length_from_meta(self.metas)
        if value is not None:
            self.figures["spec_accept_length_requests"] = round(value, 3)
        ok = value is not None and value >= self.c.min_accept_length
        return Check(
            "spec-accept.requests",
            ok,
            None if value is None else round(value, 3),
            self.c.min_accept_length,
            detail,
        )

    def spec_server(self) -> Check:
        source = "/server_info"
        status, raw = _request(f"{self.base}/server_info", None, 30)
        if status == 404:
            source = "/get_server_info"
            status, raw = _request(f"{self.base}/get_server_info", None, 30)
        if status != 200:
            raise HttpError(f"{self.base}{source}: HTTP {status}")
        try:
            info = json.loads(raw)
        except ValueError as exc:
            raise HttpError(f"{self.base}{source}: not JSON") from exc
        value = accept_length_from_server_info(info)
        if value is not None:
            self.figures["spec_accept_length_server"] = round(value, 3)
        if info.get("version"):
            self.figures["sglang_version"] = str(info["version"])
        ok = value is not None and value >= self.c.min_accept_length
        detail = f"avg_spec_accept_length from {source}"
        if value is None:
            detail = (
                f"no avg_spec_accept_length in {source} internal_states (sglang reports it "
                "once --decode-log-interval decode batches, 40 by default, have run)"
            )
        return Check(
            "spec-accept.server",
            ok,
            None if value is None else round(value, 3),
            self.c.min_accept_length,
            detail,
        )


# --------------------------------------------------------------------------- runner

CHECK_ORDER = (
    "ready",
    "serves",
    "arithmetic",
    "decode-speed",
    "spec-accept.requests",
    "spec-accept.server",
    "stays-up",
    "logs",
)


def _stamp() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")


def new_report_dir(root: Path, scenario: str) -> tuple[Path, str]:
    """A fresh ``build/smoke/<scenario>-<UTC stamp>-<run id>`` folder, and the run id.

    The run id is random and the folder is created exclusively, so two runs of one scenario in
    the same second never share (or overwrite) a report folder.
    """
    parent = work_dir(root, "smoke")
    for _ in range(100):
        run_id = uuid.uuid4().hex[:8]
        folder = confined(parent, f"{scenario}-{_stamp()}-{run_id}", "report folder", scenario)
        try:
            folder.mkdir(exist_ok=False)
        except FileExistsError:
            continue
        return folder, run_id
    raise SmokeError(
        f"{parent}: could not create a new report folder for {scenario}",
        "pass --log-dir DIR",
    )


def run_smoke(
    root: Path,
    image: str,
    scenario_path: Path | str,
    model: Path | str | None = None,
    port: int | None = None,
    log_dir: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    load_timeout: float | None = None,
    labels: Mapping[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
    gpus: GpuInventory | None = None,
) -> SmokeReport:
    """Run the scenario against ``image``; the report says passed, failed or cannot-run.

    A failing or dying server is a report, never an exception; a bad scenario raises
    ConfigError and a missing engine EngineUnavailable. Ctrl-C/SIGTERM propagate (as
    KeyboardInterrupt) after the container is removed. ``env`` and ``labels`` add to the
    container's; ``gpus`` replaces probing the host (for callers that already know).
    """
    from sglforge.engine import containers
    from sglforge.engine import images as engine_images

    say = progress or (lambda _m: None)
    t_start = time.monotonic()
    started_at = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    scenario = load_scenario(scenario_path)
    port = port or scenario.port
    timeout = float(load_timeout if load_timeout is not None else scenario.load_timeout)
    if not (math.isfinite(timeout) and timeout > 0):
        raise ConfigError(
            f"--load-timeout {timeout!r}: must be a finite number of seconds greater than 0"
        )
    model_path = Path(model).resolve() if model else scenario.model_path
    if log_dir:
        report_dir, run_id = check_output_dir(log_dir, "--log-dir"), uuid.uuid4().hex[:8]
    else:
        report_dir, run_id = new_report_dir(root, scenario.name)
    log_path = report_dir / "server.log"

    reaped = containers.reap_orphans("smoke")
    if reaped:
        say(f"removed {len(reaped)} container(s) left by a killed run: {', '.join(reaped)}")
    info = engine_images.inspect(image)
    labels_of_image = dict(info.labels) if info else {}
    if scenario.accelerator == "rocm" and gpus is None:
        say("preflight: probing GPUs (rocminfo / amd-smi / KFD topology)")
        gpus = detect_gpus()
    arch = expected_arch(root, scenario, labels_of_image)
    checks = preflight(
        scenario,
        image=image,
        image_found=info is not None,
        model_path=model_path,
        port=port,
        gpus=gpus,
        arch=arch,
    )
    figures: dict[str, Value] = {}
    if gpus is not None and gpus.archs:
        figures["gpus"] = len(gpus.archs)
        figures["gpu_arch"] = ",".join(sorted(set(gpus.archs)))
    common: dict[str, Any] = dict(
        image=image,
        image_digest=(info.digest or info.id) if info else None,
        image_id=info.id if info else None,
        scenario=scenario.name,
        scenario_path=scenario.path,
        report_dir=report_dir,
        started_at=started_at,
        run_id=run_id,
    )

    def finish(**kw: Any) -> SmokeReport:
        all_checks = tuple(kw.pop("checks"))
        cannot = any(not c.passed and c.name.startswith("preflight.") for c in all_checks)
        cannot = cannot or kw.pop("cannot_run", False)
        passed = not cannot and all(c.passed for c in all_checks)
        verdict = "cannot-run" if cannot else ("passed" if passed else "failed")
        fig = {**figures, **kw.pop("figures", {})}
        if kw.get("warnings"):
            fig["log_warnings"] = sum(w.count for w in kw["warnings"])
        crash_at = kw.pop("crash_at", None)
        if crash_at is not None:
            fig["exit_to_verdict_s"] = round(time.time() - crash_at, 3)
        report = SmokeReport(
            passed=passed,
            verdict=verdict,
            checks=all_checks,
            figures=fig,
            duration_s=round(time.monotonic() - t_start, 3),
            **common,
            **kw,
        )
        atomic_write(report_dir / "report.json", json.dumps(report_dict(report), indent=2) + "\n")
        return report

    if any(not c.passed for c in checks):
        bad = [c.name for c in checks if not c.passed]
        return finish(
            checks=checks,
            log_path=None,
            reason=f"preflight: {', '.join(bad)} failed",
        )

    assert model_path is not None  # preflight.model passed
    profile = replace(
        scenario.container,
        mounts=(containers.Mount(str(model_path), scenario.model_mount, read_only=True),),
        env={**scenario.container.env, **dict(env or {})},
    )
    session = _Session(scenario, port)
    warnings: tuple[LogMatch, ...] = ()
    required: tuple[LogMatch, ...] = ()
    exit_code: int | None = None
    tail: tuple[str, ...] = ()
    crash_at: float | None = None
    reason = ""
    live: list[Check] = []
    say(f"starting {image} ({scenario.name}) on 127.0.0.1:{port}; log: {log_path}")
    try:
        # The launch command is the container's command, with any image ENTRYPOINT cleared:
        # release images have none (CMD ["/bin/bash"]), and a drop-in image must not need one.
        with containers.running(
            image,
            entrypoint=(),
            command=scenario.container_command(port),
            profile=profile,
            log_path=log_path,
            labels={"io.sglforge.smoke": scenario.name, **dict(labels or {})},
        ) as box:
            ready = _wait_ready(box, port, timeout, say)
            live.append(ready)
            if ready.passed:
                figures["ready_s"] = ready.value
                say(f"ready after {ready.value} s; running checks")
                for name, fn in (
                    ("serves", session.serves),
                    ("arithmetic", session.arithmetic),
                    ("decode-speed", session.speed),
                    ("spec-accept.requests", session.spec_requests),
                    ("spec-accept.server", session.spec_server),
                ):
                    if name.startswith("spec-") and not scenario.checks.spec_enabled:
                        continue
                    if box.exited.is_set():
                        live.append(
                            Check(
                                name, False, None, None, "not run: the server exited", skipped=True
                            )
                        )
                        continue
                    say(f"check {name}")
                    check = _timed(name, fn)
                    live.append(check)
                    if check.detail.startswith(HTTP_FAILED):
                        # A refused or cut connection usually means the server just died; the
                        # engine reports the exit a moment later, so give it that moment.
                        box.wait_exit(EXIT_GRACE_S)
                if box.wait_exit(0.05):
                    live.append(
                        Check(
                            "stays-up",
                            False,
                            box.exit_code,
                            "running",
                            "the server exited during the checks",
                        )
                    )
                else:
                    live.append(Check("stays-up", True, "running", "running"))
            if box.exited.is_set():
                exit_code = box.exit_code
                crash_at = box.finished_at() or box.noticed_exit_at
                box.drain_logs()
                reason = f"the server exited with code {exit_code}"
            elif not ready.passed:
                reason = ready.detail
            if not all(c.passed for c in live):
                tail = tuple(box.tail(LOG_TAIL_LINES))
        # The container is gone: the log stream has reached its end, scan all of it.
        matches = scan_log(log_path, scenario.checks.forbidden)
        required = tuple(scan_required(log_path, scenario.checks.required))
        warnings = tuple(m for m in matches if m.severity == "warn")
        warnings += tuple(r for r in required if r.severity == "warn" and r.missing)
        live.append(logs_check(matches, len(scenario.checks.forbidden), required))
        if not reason and not all(c.passed for c in live):
            reason = "failed: " + ", ".join(c.name for c in live if not c.passed)
        if not all(c.passed for c in live) and not tail:
            tail = tuple(containers.tail_lines(log_path, LOG_TAIL_LINES))
    except SmokeError as exc:
        # The container would not start: the host cannot run this scenario as configured.
        return finish(
            checks=[*checks, Check("start", False, None, None, exc.message)],
            log_path=log_path,
            cannot_run=True,
            reason=exc.message,
        )
    ran = {c.name for c in live}
    for name in CHECK_ORDER:
        if name not in ran and not (name.startswith("spec-") and not scenario.checks.spec_enabled):
            live.append(
                Check(
                    name, False, None, None, "not run: the server never became ready", skipped=True
                )
            )
    order = {n: i for i, n in enumerate(CHECK_ORDER)}
    live.sort(key=lambda c: order.get(c.name, len(order)))
    return finish(
        checks=[*checks, *live],
        figures=session.figures,
        log_path=log_path,
        exit_code=exit_code,
        log_tail=tail,
        reason=reason,
        crash_at=crash_at,
        warnings=warnings,
        required=required,
    )


def _wait_ready(box: Any, port: int, timeout: float, say: Callable[[str], None]) -> Check:
    """Poll ``GET /health_generate`` until 200, the container exits, or ``timeout`` passes."""
    url = f"http://127.0.0.1:{port}/health_generate"
    started = time.monotonic()
    deadline = started + timeout
    next_note = started + 30
    while True:
        if box.exited.is_set():
            return Check(
                "ready",
                False,
                None,
                timeout,
                f"the server exited with code {box.exit_code} after "
                f"{time.monotonic() - started:.1f} s, before it was ready",
            )
        try:
            status, _ = _request(
                url, None, timeout=min(10.0, max(0.5, deadline - time.monotonic()))
            )
            if status == 200:
                return Check("ready", True, round(time.monotonic() - started, 2), timeout)
        except HttpError:
            pass  # not listening yet: sglang opens its port only once the model is loaded
        now = time.monotonic()
        if now >= deadline:
            return Check(
                "ready",
                False,
                None,
                timeout,
                f"not ready after {timeout:g} s (the scenario's load timeout)",
            )
        if now >= next_note:
            say(f"still loading after {now - started:.0f} s (timeout {timeout:g} s)")
            next_note = now + 30
        # Waiting on the exit event (not sleeping) is what makes a crash visible at once; the
        # poll interval only bounds how late readiness is seen (tight at first, then relaxed
        # for the many minutes a large model loads).
        interval = 0.1 if now - started < 30 else 1.0
        box.wait_exit(min(interval, max(0.0, deadline - now)))


# --------------------------------------------------------------------------- reports


def report_dict(report: SmokeReport) -> dict[str, Any]:
    """The report as JSON-ready data (``passed``, ``verdict``, ``checks`` first)."""
    data = asdict(report)
    out: dict[str, Any] = {"passed": report.passed, "verdict": report.verdict}
    out["checks"] = [dict(c) for c in data.pop("checks")]
    for k, v in data.items():
        if k in out:
            continue
        out[k] = str(v) if isinstance(v, Path) else (list(v) if isinstance(v, tuple) else v)
    out["figures"] = dict(report.figures)
    out["warning_count"] = report.warning_count
    return out


def _fmt(v: Value) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def table_rows(report: SmokeReport) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the human table (one row per check)."""
    rows = []
    for c in report.checks:
        result = "skip" if c.skipped else ("ok" if c.passed else "FAIL")
        rows.append([c.name, result, _fmt(c.value), _fmt(c.threshold), c.detail[:100]])
    return ["check", "result", "value", "threshold", "detail"], rows


def junit_suite(report: SmokeReport) -> reports.Suite:
    """The run as one JUnit suite: a case ``smoke.<check>`` per check, facts as properties."""
    props: dict[str, object] = {
        "image": report.image,
        "image_digest": report.image_digest,
        "image_id": report.image_id,
        "scenario": report.scenario,
        "verdict": report.verdict,
        "exit_code": report.exit_code,
        "run_id": report.run_id or None,
        "warnings": report.warning_count,
    }
    props.update({f"figure.{k}": v for k, v in report.figures.items()})
    cases = []
    for c in report.checks:
        props[f"check.{c.name}.value"] = _fmt(c.value)
        props[f"check.{c.name}.threshold"] = _fmt(c.threshold)
        output = ""
        if c.name == "logs" and (report.warnings or report.required):
            # JUnit has no warning outcome: a passing case with the lines, counts as properties.
            if report.warnings:
                props["logs.warnings"] = report.warning_count
            for r in report.required:
                props[f"logs.required.{r.name}"] = f"{r.count}/{r.need}"
            output = "\n".join([*_warning_lines(report), *_required_lines(report)])
        if c.skipped:
            case = reports.Case(
                f"smoke.{c.name}", reports.SKIPPED, c.detail or "not run", seconds=c.seconds
            )
        elif not c.passed:
            message = f"{c.name}: value {_fmt(c.value)}, threshold {_fmt(c.threshold)}"
            case = reports.Case(
                f"smoke.{c.name}",
                reports.FAILED,
                message + (f": {c.detail}" if c.detail else ""),
                f"{message}\n{c.detail}",
                c.seconds,
            )
        else:
            case = reports.Case(f"smoke.{c.name}", seconds=c.seconds)
        cases.append(replace(case, output=output))
    return reports.Suite(
        name=f"sglforge smoke {report.scenario}",
        classname=f"sglforge.smoke.{report.scenario}",
        cases=tuple(cases),
        properties=props,
        seconds=report.duration_s,
        timestamp=report.started_at,
        output="\n".join(report.log_tail),
    )


def junit_xml(report: SmokeReport) -> str:
    """JUnit XML (the schema Jenkins' xUnit plugin validates) of one smoke run."""
    return reports.junit_xml([junit_suite(report)], "sglforge smoke")


def _warning_lines(report: SmokeReport) -> list[str]:
    return [f"WARNING {w.describe()}" + (f" -- {w.why}" if w.why else "") for w in report.warnings]


def _required_lines(report: SmokeReport) -> list[str]:
    out = []
    for r in report.required:
        state = ("MISSING" if r.severity == "fail" else "MISSING (warn)") if r.missing else "FOUND"
        out.append(f"REQUIRED {state} {r.describe()}" + (f" -- {r.why}" if r.why else ""))
    return out


def markdown(report: SmokeReport) -> str:
    """A markdown summary (for ``$GITHUB_STEP_SUMMARY``)."""
    icon = {"passed": "PASSED", "failed": "FAILED", "cannot-run": "CANNOT RUN"}[report.verdict]
    if report.warnings:
        icon += f" with {report.warning_count} warning line(s)"
    lines = [
        f"### sglforge smoke `{report.scenario}`: {icon}",
        "",
        f"Image `{report.image}`" + (f" (`{report.image_digest}`)" if report.image_digest else ""),
        "",
    ]
    if report.reason:
        lines += [f"> {report.reason}", ""]
    headers, rows = table_rows(report)
    lines += reports.md_table(headers, rows)
    if report.warnings:
        rows = []
        for w in report.warnings:
            first = f"line {w.first_line}: `{w.text[:120]}`" if w.first_line else w.describe()
            rows.append([w.name, str(w.count), first, w.why])
        lines += ["", *reports.md_table(["warning", "lines", "first", "why"], rows)]
    if report.required:
        rows = []
        for req in report.required:
            result = ("FAIL" if req.severity == "fail" else "warn") if req.missing else "ok"
            first = f"line {req.first_line}: `{req.text[:120]}`" if req.first_line else "-"
            rows.append([req.name, result, f"{req.count} (need {req.need})", first, req.why])
        headers = ["required line", "result", "lines", "first", "why"]
        lines += ["", *reports.md_table(headers, rows)]
    if report.figures:
        figures = [[k, _fmt(v)] for k, v in report.figures.items()]
        lines += ["", *reports.md_table(["figure", "value"], figures)]
    if report.log_tail:
        lines += ["", "<details><summary>last server log lines</summary>", "", "```"]
        lines += list(report.log_tail)
        lines += ["```", "", "</details>"]
    return "\n".join(lines) + "\n"


def append_step_summary(
    report: SmokeReport, environ: Mapping[str, str] = os.environ
) -> Path | None:
    """Append the markdown summary to ``$GITHUB_STEP_SUMMARY`` when set; the file or None."""
    target = environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    path = Path(target)
    # The runner's summary file collects every step's output: append to it, never replace it.
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(markdown(report) + "\n")
    return path


def write_junit(report: SmokeReport, path: Path) -> None:
    """Write the JUnit XML report to ``path``."""
    atomic_write(Path(path), junit_xml(report))


__all__ = [
    "Check",
    "ForbiddenPattern",
    "GpuInventory",
    "LogMatch",
    "RequiredPattern",
    "Scenario",
    "SmokeReport",
    "append_step_summary",
    "detect_gpus",
    "junit_xml",
    "load_scenario",
    "logs_check",
    "markdown",
    "new_report_dir",
    "preflight",
    "report_dict",
    "run_smoke",
    "scan_log",
    "scan_required",
    "table_rows",
    "write_junit",
]
