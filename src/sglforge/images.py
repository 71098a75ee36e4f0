"""Build targets: ``images/targets.toml`` loaded into frozen dataclasses.

Owns the target vocabulary of ``sglforge build``: GPU families (mi355x = gfx950, mi300x =
gfx942), the ROCm flavours upstream publishes release images for (rocm700, rocm720), the
base image template following upstream's tag naming (``lmsysorg/sglang:v0.5.14-rocm700-mi35x``),
runtime environment defaults, and the repository built images are tagged in. Unknown keys
are rejected with the key and the file named.
"""

from __future__ import annotations

import re
import string
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglforge.errors import ConfigError

TARGETS_FILE = Path("images") / "targets.toml"
TEMPLATE_FIELDS = frozenset({"version", "rocm", "gpu_arch", "target"})
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Rocm:
    """A ROCm flavour as upstream names it in image tags (``rocm700``)."""

    name: str
    version: str
    gpu_arch_suffix: str


@dataclass(frozen=True)
class Target:
    """A GPU family and the ROCm flavours it is built for (the first is the default)."""

    name: str
    description: str
    gpu_arch: str
    rocm: tuple[str, ...]
    base: str
    env: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class BuildTarget:
    """One target at one ROCm flavour: what a single image is built for."""

    target: Target
    rocm: Rocm
    repository: str
    workspace: str

    @property
    def name(self) -> str:
        return self.target.name

    @property
    def gpu_arch(self) -> str:
        return self.target.gpu_arch

    @property
    def key(self) -> str:
        """``mi355x-rocm700``: the unambiguous spelling of this target."""
        return f"{self.target.name}-{self.rocm.name}"

    @property
    def env(self) -> dict[str, str]:
        return dict(self.target.env)

    @property
    def source_gpu_arch(self) -> str:
        """The GPU_ARCH build argument of upstream's docker/rocm.Dockerfile."""
        return self.target.gpu_arch + self.rocm.gpu_arch_suffix

    def base_image(self, version: str) -> str:
        """The release image of sglang ``version`` for this target."""
        return self.target.base.format(
            version=version.removeprefix("v"),
            rocm=self.rocm.name,
            gpu_arch=self.target.gpu_arch,
            target=self.target.name,
        )

    def image_tag(self, version: str, queue_hash: str) -> str:
        """The immutable, content-derived tag (without the repository)."""
        return f"v{version.removeprefix('v')}-{self.rocm.name}-{self.target.name}-q{queue_hash[:8]}"

    def image_ref(self, version: str, queue_hash: str) -> str:
        return f"{self.repository}:{self.image_tag(version, queue_hash)}"


@dataclass(frozen=True)
class Targets:
    """Every target of one ``targets.toml``."""

    path: Path
    repository: str
    workspace: str
    rocm: tuple[Rocm, ...]
    targets: tuple[Target, ...]

    def names(self) -> list[str]:
        """Every spelling ``resolve`` accepts: ``mi355x`` and ``mi355x-rocm700`` etc."""
        out: list[str] = []
        for t in self.targets:
            out.append(t.name)
            out.extend(f"{t.name}-{r}" for r in t.rocm)
        return out

    def resolve(self, spec: str) -> BuildTarget:
        """``mi355x`` (default ROCm) or ``mi355x-rocm720``; ConfigError naming known ones."""
        by_name = {t.name: t for t in self.targets}
        rocms = {r.name: r for r in self.rocm}
        target = by_name.get(spec)
        rocm_name = target.rocm[0] if target else None
        if target is None and "-" in spec:
            name, _, rocm_name = spec.rpartition("-")
            target = by_name.get(name)
            if target is not None and rocm_name not in target.rocm:
                target = None
        if target is None or rocm_name is None:
            known = ", ".join(self.names())
            raise ConfigError(
                f"unknown target {spec!r} (known in {self.path}: {known})",
                "sglforge build --target mi355x",
            )
        return BuildTarget(target, rocms[rocm_name], self.repository, self.workspace)


def load_targets(root: Path) -> Targets:
    """Load and validate ``<root>/images/targets.toml``."""
    path = Path(root) / TARGETS_FILE
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: no targets file",
            "copy images/ from the sglforge repository into the project root",
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}", f"fix {path}") from None
    return parse_targets(data, path)


def parse_targets(data: Mapping[str, Any], path: Path) -> Targets:
    """Validate the parsed TOML of a targets file (``path`` names it in errors)."""
    _keys(data, {"image", "rocm", "targets"}, path, "")
    image = _table(data.get("image", {}), path, "image")
    _keys(image, {"repository", "workspace"}, path, "image")
    repository = _str(image.get("repository", "sglforge/sglang"), path, "image.repository")
    workspace = _str(image.get("workspace", "/sgl-workspace/sglang"), path, "image.workspace")
    if not workspace.startswith("/"):
        raise ConfigError(f"{path}: image.workspace must be an absolute path", f"fix {path}")

    rocms: list[Rocm] = []
    for name, raw in _table(data.get("rocm", {}), path, "rocm").items():
        where = f"rocm.{name}"
        tbl = _table(raw, path, where)
        _keys(tbl, {"version", "gpu_arch_suffix"}, path, where)
        _check_name(name, path, where)
        rocms.append(
            Rocm(
                name=name,
                version=_str(tbl.get("version", ""), path, f"{where}.version"),
                gpu_arch_suffix=_str(
                    tbl.get("gpu_arch_suffix", f"-{name}"), path, f"{where}.gpu_arch_suffix"
                ),
            )
        )
    known_rocm = {r.name for r in rocms}

    targets: list[Target] = []
    for name, raw in _table(data.get("targets", {}), path, "targets").items():
        where = f"targets.{name}"
        tbl = _table(raw, path, where)
        _keys(tbl, {"description", "gpu_arch", "rocm", "base", "env"}, path, where)
        _check_name(name, path, where)
        for req in ("gpu_arch", "rocm", "base"):
            if req not in tbl:
                raise ConfigError(f"{path}: {where}.{req} is required", f"add it to {path}")
        rocm = tbl["rocm"]
        if not isinstance(rocm, list) or not rocm or not all(isinstance(r, str) for r in rocm):
            raise ConfigError(
                f"{path}: {where}.rocm must be a non-empty list of strings", f"fix {path}"
            )
        for r in rocm:
            if r not in known_rocm:
                raise ConfigError(
                    f"{path}: {where}.rocm names {r!r}, which has no [rocm.{r}] table "
                    f"(known: {', '.join(sorted(known_rocm)) or 'none'})",
                    f"add [rocm.{r}] to {path}",
                )
        base = _str(tbl["base"], path, f"{where}.base")
        _check_template(base, path, f"{where}.base")
        env_tbl = _table(tbl.get("env", {}), path, f"{where}.env")
        env: list[tuple[str, str]] = []
        for key, value in env_tbl.items():
            if not _ENV_NAME.match(key):
                raise ConfigError(
                    f"{path}: {where}.env: {key!r} is not an environment variable name",
                    f"fix {path}",
                )
            env.append((key, _str(value, path, f"{where}.env.{key}")))
        targets.append(
            Target(
                name=name,
                description=_str(tbl.get("description", ""), path, f"{where}.description"),
                gpu_arch=_str(tbl["gpu_arch"], path, f"{where}.gpu_arch"),
                rocm=tuple(rocm),
                base=base,
                env=tuple(env),
            )
        )
    if not targets:
        raise ConfigError(f"{path}: no [targets.NAME] tables", f"add a target to {path}")
    return Targets(path, repository, workspace, tuple(rocms), tuple(targets))


def _keys(tbl: Mapping[str, Any], allowed: set[str], path: Path, where: str) -> None:
    for key in tbl:
        if key not in allowed:
            at = f"{where}.{key}" if where else key
            raise ConfigError(
                f"{path}: unknown key {at!r} (allowed here: {', '.join(sorted(allowed))})",
                f"remove or rename it in {path}",
            )


def _table(value: Any, path: Path, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: {where} must be a table", f"fix {path}")
    return value


def _str(value: Any, path: Path, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{path}: {where} must be a string", f"fix {path}")
    return value


def _check_name(name: str, path: Path, where: str) -> None:
    # Names end up in image tags and "-" separates the target from its ROCm flavour.
    if not _NAME.match(name):
        raise ConfigError(
            f"{path}: [{where}]: name must be lower-case letters, digits, '.' or '_'",
            f"rename it in {path}",
        )


def _check_template(template: str, path: Path, where: str) -> None:
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as exc:
        raise ConfigError(f"{path}: {where}: bad template: {exc}", f"fix {path}") from None
    unknown = fields - TEMPLATE_FIELDS
    if unknown:
        raise ConfigError(
            f"{path}: {where} uses unknown placeholder(s) {', '.join(sorted(unknown))} "
            f"(known: {', '.join(sorted(TEMPLATE_FIELDS))})",
            f"fix {path}",
        )
