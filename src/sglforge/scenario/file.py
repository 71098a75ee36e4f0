"""Smoke scenarios: ``smoke/*.toml`` read into frozen dataclasses (unknown keys refused
naming key and file), with the launch line, container profile and checks they describe.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglforge.config import Table as _Table
from sglforge.config import read_toml
from sglforge.errors import ConfigError
from sglforge.util import confined

if TYPE_CHECKING:
    from sglforge.engine.profile import Profile
    from sglforge.scenario.bench import Bench
from sglforge.scenario.constants import (
    ACCELERATORS,
    DEFAULT_ACCEPT_LENGTH,
    DEFAULT_COMMAND,
    DEFAULT_LOAD_TIMEOUT,
    DEFAULT_PORT,
    PLACEHOLDERS,
    SEVERITIES,
)


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
class AcceptedMiss:
    """A tuned-table miss a target accepts (``[[coverage.accept]]``): which lookup, and why."""

    model: str  # "main" or "draft"
    expert: int
    topk: int
    inter_dim: int
    reason: str
    tokens: tuple[int, ...] = ()  # empty: every token of that shape


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
    bench: Bench | None = None  # the [bench] table: the serving workload `sglforge bench` runs
    accepted_misses: tuple[AcceptedMiss, ...] = ()  # [[coverage.accept]]: misses the gate allows
    runtime: str = "docker"  # [scenario] runtime: "docker" or "process" (smoke.runtime)
    python: tuple[str, ...] = ()  # [scenario] python: the process runtime's interpreter words

    @property
    def standin(self) -> bool:
        """A scenario with ``accelerator = "none"`` runs on no GPU: a stand-in, never a GPU run."""
        return self.accelerator == "none"

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
    runtime, python = _parse_runtime(sc, path)
    sc.done()

    model_path, model_mount = _parse_model(top.table("model"), path)
    command, args = _parse_launch(top.table("launch"), path)
    container = _parse_container(top.table("container"), path)

    checks = _parse_checks(top.table("checks"), path)
    from sglforge.scenario.bench import parse_bench

    bench = parse_bench(top.table("bench"), path)
    accepted = _parse_coverage(top.table("coverage"), path)
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
        command=command,
        args=args,
        container=container,
        checks=checks,
        bench=bench,
        accepted_misses=accepted,
        runtime=runtime,
        python=python,
    )


def _parse_runtime(sc: _Table, path: Path) -> tuple[str, tuple[str, ...]]:
    """``runtime`` ("docker", the default, or "process") and ``python`` (the process
    runtime's interpreter, or a prefix ending in one: a string split as a shell does)."""
    import shlex

    runtime = sc.get("runtime", "str", "docker")
    if runtime not in ("docker", "process"):
        raise ConfigError(
            f'{path}: \'scenario.runtime\' must be "docker" or "process", not {runtime!r}',
            f"fix {path}",
        )
    python = sc.get("python", "str", "")
    try:
        words = tuple(shlex.split(python))
    except ValueError as exc:
        raise ConfigError(f"{path}: 'scenario.python' {python!r}: {exc}", f"fix {path}") from None
    return runtime, words


def _parse_model(mt: _Table, path: Path) -> tuple[Path | None, str]:
    """``[model]``: the host path (relative to the scenario file) and the mount point."""
    raw_model = mt.get("path", "str", None)
    model_path = (path.parent / raw_model).resolve() if raw_model else None
    model_mount = mt.get("mount", "str", "/model")
    if not model_mount.startswith("/"):
        raise ConfigError(
            f"{path}: 'model.mount' must be an absolute path in the container",
            f"fix {path}",
        )
    mt.done()
    return model_path, model_mount


def _parse_launch(la: _Table, path: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``[launch]``: the command and its arguments, placeholders checked."""
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
    return tuple(command), tuple(args)


def _parse_container(ct: _Table, path: Path) -> Profile:
    """``[container]``: the engine's run profile (host networking only)."""
    env_tbl = ct.get("env", "table", {})
    env: list[tuple[str, str]] = []
    for k, v in env_tbl.items():
        if isinstance(v, bool) or not isinstance(v, str | int | float):
            raise ConfigError(
                f"{path}: 'container.env.{k}' must be a string or number", f"fix {path}"
            )
        env.append((k, str(v)))
    from sglforge.engine.profile import Profile

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
    return container


def _parse_coverage(cv: _Table, path: Path) -> tuple[AcceptedMiss, ...]:
    """``[[coverage.accept]]``: model, expert, topk, inter_dim, reason (required), tokens."""
    out = []
    for n, raw in enumerate(cv.get("accept", "tables", [])):
        t = _Table(raw, path, f"coverage.accept[{n}]")
        model = t.get("model", "str")
        if model not in ("main", "draft"):
            raise t._bad("model", '"main" or "draft"')
        miss = AcceptedMiss(
            model=model,
            expert=t.number("expert", "int"),
            topk=t.number("topk", "int"),
            inter_dim=t.number("inter_dim", "int"),
            reason=t.get("reason", "str").strip(),
            tokens=tuple(int(x) for x in t.get("tokens", "ints", ())),
        )
        if not miss.reason:
            raise t._bad("reason", "a non-empty reason (why this miss is acceptable)")
        t.done()
        out.append(miss)
    cv.done()
    return tuple(out)


_SIZE = re.compile(r"^[0-9]+(?:\.[0-9]+)?\s*[bkmgBKMG]?[bB]?$")


def _shm_size(ct: _Table, path: Path) -> str | None:
    """``shm_size`` as Docker reads it (``64g``, ``512m``, bytes): checked before any run."""
    value: str | None = ct.get("shm_size", "str", None)
    if value is not None and not (_SIZE.match(value) and float(re.sub(r"[^0-9.]", "", value)) > 0):
        raise ct._bad("shm_size", 'a size such as "64g", "512m" or "1073741824"')
    return value


def _ipc_mode(ct: _Table, path: Path) -> str | None:
    value: str | None = ct.get("ipc_mode", "str", None)
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
        from sglforge.aiter_rules import expand_log_keys, log_rules

        # {aiter-key col=value ...}: aiter's logged key, in each known rule's column order
        pattern = expand_log_keys(pattern, log_rules(None))
        re.compile(pattern)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {kind} log pattern {name!r}: {exc.message}") from None
    except re.error as exc:
        raise ConfigError(
            f"{path}: {kind} log pattern {name!r} is not a valid regular expression: {exc}",
            f"fix {where}.pattern in {path}",
        ) from None
    return name, pattern, why, severity


# --------------------------------------------------------------------------- results


def scenario_path(root: Path, given: str | Path) -> Path:
    """The scenario file ``given`` names: a path to one, or a bare NAME for
    ``smoke/NAME.toml`` (the project's smoke/, else the scenarios sglforge ships).
    ConfigError listing the known names (the closest first) otherwise."""
    import difflib

    from sglforge.defaults import smoke_dir

    path = Path(given)
    if path.is_file():
        return path
    if not path.is_absolute() and (Path(root) / path).is_file():
        return Path(root) / path
    folder = smoke_dir(root)
    name = path.name.removesuffix(".toml")
    candidate = folder / f"{name}.toml"
    if len(path.parts) == 1 and candidate.is_file():
        return candidate
    known = sorted(p.stem for p in folder.glob("*.toml"))
    near = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    raise ConfigError(
        f"no smoke scenario {str(given)!r}"
        + (f"; did you mean {', '.join(near)}?" if near else "")
        + f" (known in {folder}: {', '.join(known) or 'none'})",
        "pass --scenario NAME or a file; copy one of those to serve another model",
    )


# --- a target's scenario, and the run line it gives -------------------------------------


def find_scenario(root: Path, target: str, target_key: str | None = None) -> Path:
    """The ``smoke/*.toml`` whose ``target`` names this target; ConfigError if none or many."""
    from sglforge.defaults import smoke_dir

    folder = smoke_dir(root)  # the project's smoke/, else the scenarios sglforge ships
    names = {target, target_key} - {None}
    found: list[Path] = []
    for path in sorted(folder.glob("*.toml")):
        data = read_toml(path, "smoke scenario")
        table = data.get("scenario")
        wanted = table.get("target") if isinstance(table, dict) else data.get("target")
        wanted_list = wanted if isinstance(wanted, list) else [wanted]
        if any(w in names for w in wanted_list):
            found.append(path)
    if not found:
        raise ConfigError(
            f"no smoke scenario in {folder} has target = {target!r}",
            "add one, or pass --scenario FILE (or --skip-smoke in an emergency)",
        )
    if len(found) > 1:
        exact = [p for p in found if target_key and _target_of(p) == target_key]
        if len(exact) == 1:
            return exact[0]
        listed = ", ".join(p.name for p in found)
        raise ConfigError(
            f"several smoke scenarios name target {target!r}: {listed}",
            "pick one with --scenario FILE",
        )
    return found[0]


def _target_of(path: Path) -> object:
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    table = data.get("scenario")
    return table.get("target") if isinstance(table, dict) else data.get("target")


def run_line(sc: Scenario, image: str, model: str | Path | None = None) -> str:
    """The one ``docker run`` line serving ``image`` the way the smoke scenario launched it."""
    import shlex

    c = sc.container
    words = ["docker", "run", "--rm", "-it"]
    for dev in c.devices:
        words += ["--device", dev]
    for group in c.group_add:
        words += ["--group-add", group]
    if c.ipc_mode:
        words += ["--ipc", c.ipc_mode]
    if c.shm_size:
        words += ["--shm-size", c.shm_size]
    for opt in c.security_opt:
        words += ["--security-opt", opt]
    for cap in c.cap_add:
        words += ["--cap-add", cap]
    if c.nofile:
        words += ["--ulimit", f"nofile={c.nofile}:{c.nofile}"]
    if c.network_mode:
        words += ["--network", c.network_mode]
    host_model = str(model or sc.model_path or "/path/to/model")
    words += ["-v", f"{host_model}:{sc.model_mount}:ro"]
    words.append(image)
    # No entrypoint (the release images' run contract): the command names the server.
    words += ["python3", "-m", "sglang.launch_server", *sc.launch_args(sc.port)]
    return " ".join(shlex.quote(w) for w in words)
