"""Build targets: ``images/targets.toml`` loaded into frozen dataclasses.

Owns the target vocabulary of ``sglforge build``: GPU families (mi355x = gfx950, mi300x =
gfx942), the ROCm flavours upstream publishes release images for (rocm700, rocm720, rocm724),
the base image patterns following upstream's tag naming, chosen by sglang version range
(``lmsysorg/sglang:v0.5.14-rocm700-mi35x``; from 0.5.15 the dated
``lmsysorg/sglang-rocm:v0.5.16-rocm720-mi35x-20260728``), picking the newest ``{date}`` of a
tag list, runtime environment defaults, the repository built images are tagged in, and the
device one GPU of the family is (``[targets.NAME.device]``: what sglang's model construction is
shown when it runs without the GPU, see ``sglforge.construct``).
Unknown keys are rejected with the key and the file named.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from sglforge.config import Table, read_toml
from sglforge.defaults import project_file
from sglforge.errors import ConfigError
from sglforge.util import non_ascii_note, one_line

TARGETS_FILE = Path("images") / "targets.toml"
# LLVM's AMDGPU processor names: gfx + 3 or 4 digits (gfx942, gfx950, gfx1100), or 2-3 digits
# and a stepping letter (gfx90a). The ones sglang's docker/rocm.Dockerfile builds stages for,
# and the smoke preflight compares with rocminfo, are the MI300 and MI355 families.
_GFX = re.compile(r"^gfx(?:\d{3,4}|\d{2,3}[a-f])$")
KNOWN_GFX = ("gfx942", "gfx950")


def check_gpu_arch(value: str, path: Path, where: str) -> str:
    """``value`` if it is an AMD GPU name; ConfigError naming the key and the closest known
    name otherwise (``gfx95`` is a typo, not a GPU)."""
    import difflib

    if _GFX.match(value):
        return value
    near = difflib.get_close_matches(value, KNOWN_GFX, n=1, cutoff=0.5)
    raise ConfigError(
        f"{path}: {where} {value!r} is not an AMD GPU name (gfxNNN, as rocminfo prints it)"
        + (f"; did you mean {near[0]!r}?" if near else ""),
        f"fix {where} in {path}: gfx950 for MI355X, gfx942 for MI300X",
    )


TEMPLATE_FIELDS = frozenset({"version", "rocm", "gpu_arch", "target", "date"})
DATE_FIELD = "{date}"
# Upstream's dated tags end in the build day, YYYYMMDD (v0.5.16-rocm720-mi35x-20260728).
DATE_RX = r"(?P<date>\d{8})"
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Rocm:
    """A ROCm flavour as upstream names it in image tags (``rocm700``)."""

    name: str
    version: str
    gpu_arch_suffix: str


@dataclass(frozen=True)
class BasePattern:
    """Where upstream publishes the release images of a range of sglang versions."""

    versions: str  # a PEP 440 specifier ("" = every version)
    template: str  # placeholders: {version} {rocm} {gpu_arch} {target} and {date}
    rocm: tuple[str, ...]  # the ROCm flavours published under it

    @property
    def dated(self) -> bool:
        """True when the tag ends in a build date that must be looked up in a tag list."""
        return DATE_FIELD in self.template

    def contains(self, version: str) -> bool:
        """Whether sglang ``version`` falls in this pattern's range.

        A pre-, post- or dev release counts as its release (0.5.17rc0 and 0.5.17.post1 as
        0.5.17): upstream names their images the same way, so ``>=0.5.17`` includes them.
        """
        release = Version(Version(version).base_version)
        return SpecifierSet(self.versions).contains(release, prereleases=True)


@dataclass(frozen=True)
class Device:
    """One GPU of a target's family as the software on it sees it, and how many a node holds."""

    gfx: str  # rocminfo's name, torch's gcnArchName (gfx950)
    name: str  # the marketing name torch reports (AMD Instinct MI355X)
    cu_num: int  # compute units (multi_processor_count; aiter's cu_num)
    memory_gib: int  # memory of one GPU
    count: int  # GPUs per node

    @property
    def capability(self) -> tuple[int, int]:
        """torch's (major, minor) on ROCm: gfx9 4 2 -> (9, 4), gfx11 0 0 -> (11, 0)."""
        digits = self.gfx.removeprefix("gfx")
        return int(digits[:-2]), int(digits[-2], 16)


@dataclass(frozen=True)
class Target:
    """A GPU family and the ROCm flavours it is built for (the first is the default)."""

    name: str
    description: str
    gpu_arch: str
    rocm: tuple[str, ...]
    bases: tuple[BasePattern, ...]  # the first whose range holds the version applies
    env: tuple[tuple[str, str], ...]
    device: Device | None = None  # [targets.NAME.device]; None: the file does not say


@dataclass(frozen=True)
class BuildTarget:
    """One target at one ROCm flavour: what a single image is built for."""

    target: Target
    rocm: Rocm
    repository: str
    workspace: str
    path: Path = TARGETS_FILE  # the targets file, named in errors
    source: str = ""  # [image] source: the project's repository URL for the OCI labels

    @property
    def name(self) -> str:
        return self.target.name

    @property
    def gpu_arch(self) -> str:
        return self.target.gpu_arch

    @property
    def spec(self) -> str:
        """How a person names it: ``mi355x`` on the target's default ROCm, else the key."""
        return self.name if self.default_rocm else self.key

    @property
    def default_rocm(self) -> bool:
        """True on the target's first (default) ROCm flavour."""
        return self.rocm.name == self.target.rocm[0]

    @property
    def key(self) -> str:
        """``mi355x-rocm700``: the unambiguous spelling of this target."""
        return f"{self.target.name}-{self.rocm.name}"

    @property
    def env(self) -> dict[str, str]:
        return dict(self.target.env)

    @property
    def device(self) -> Device:
        """The target's GPU (``[targets.NAME.device]``); ConfigError when the file lacks it."""
        if self.target.device is None:
            raise ConfigError(
                f"{self.path}: targets.{self.name} has no [targets.{self.name}.device] table "
                "(gfx, CU count, memory and GPU count of one node)",
                f"add it to {self.path} (see the one sglforge ships, `sglforge init`)",
            )
        return self.target.device

    @property
    def source_gpu_arch(self) -> str:
        """The GPU_ARCH build argument of upstream's docker/rocm.Dockerfile."""
        return self.target.gpu_arch + self.rocm.gpu_arch_suffix

    def base_pattern(self, version: str) -> BasePattern:
        """The base pattern whose range holds ``version``; ConfigError naming the ranges."""
        v = version.removeprefix("v")
        try:
            Version(v)
        except InvalidVersion:
            raise ConfigError(
                f"{v!r} is not a release version, so no base image of {self.key} fits",
                "pin a release tag, or pass --base-image",
            ) from None
        ranges = []
        for pattern in self.target.bases:
            if pattern.contains(v):
                if self.rocm.name not in pattern.rocm:
                    raise ConfigError(
                        f"upstream publishes no {self.rocm.name} image of sglang {v} for "
                        f"{self.name} ({pattern.template}, versions "
                        f"{pattern.versions or 'any'}: {', '.join(pattern.rocm)}; {self.path})",
                        f"sglforge build --target {self.name}-{pattern.rocm[0]}",
                    )
                return pattern
            ranges.append(pattern.versions or "any")
        raise ConfigError(
            f"no base image pattern of target {self.name} covers sglang {v} "
            f"(ranges in {self.path}: {'; '.join(ranges)})",
            f"add a [[targets.{self.name}.bases]] entry for it to {self.path}",
        )

    def base_image(self, version: str) -> str:
        """The release image of sglang ``version``; a dated one keeps ``{date}`` to resolve."""
        return self.base_pattern(version).template.format(
            version=version.removeprefix("v"),
            rocm=self.rocm.name,
            gpu_arch=self.target.gpu_arch,
            target=self.target.name,
            date=DATE_FIELD,
        )

    def image_tag(self, version: str, queue_hash: str, inputs: str | None = None) -> str:
        """The immutable, content-derived tag (without the repository).

        ``-q<queue hash>`` says which queue it holds; ``-i<inputs key>`` changes with every
        other input (the base's digest, the Dockerfile, the mode, the manifest), so the same
        queue on another base never takes over the tag. Without a known base (a dry run
        before the base was inspected) there is no inputs key and no ``-i`` part.
        """
        tag = f"v{version.removeprefix('v')}-{self.rocm.name}-{self.target.name}-q{queue_hash[:8]}"
        return f"{tag}-i{inputs[:8]}" if inputs else tag

    def image_ref(self, version: str, queue_hash: str, inputs: str | None = None) -> str:
        return f"{self.repository}:{self.image_tag(version, queue_hash, inputs)}"


@dataclass(frozen=True)
class Targets:
    """Every target of one ``targets.toml``."""

    path: Path
    repository: str
    workspace: str
    rocm: tuple[Rocm, ...]
    targets: tuple[Target, ...]
    source: str = ""  # [image] source ("" = the checkout's git remote)

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
                f"unknown target {one_line(spec, 100)!r}{non_ascii_note(spec)} "
                f"(known in {self.path}: {known})",
                "sglforge build --target mi355x",
            )
        return BuildTarget(
            target, rocms[rocm_name], self.repository, self.workspace, self.path, self.source
        )


def is_dated(ref: str) -> bool:
    """Whether an image reference still holds the ``{date}`` placeholder."""
    return DATE_FIELD in ref


def tag_regex(template_tag: str, fields: Mapping[str, str] | None = None) -> re.Pattern[str]:
    """A regex for the tags a tag template names: given ``fields`` literal, the rest free.

    ``{date}`` always matches eight digits, captured as ``date``; ``{version}`` is captured as
    ``version``. ``fields`` maps placeholder names to regexes (``re.escape`` literal values).
    """
    fields = dict(fields or {})
    out, seen = [], set()
    for literal, name, _, _ in string.Formatter().parse(template_tag):
        out.append(re.escape(literal))
        if name is None:
            continue
        if name == "date":
            rx = DATE_RX if "date" not in seen else r"\d{8}"
        elif name in fields:
            rx = fields[name]
        elif name == "version" and "version" not in seen:
            rx = r"(?P<version>.+?)"
        else:
            rx = ".+?"
        seen.add(name)
        out.append(rx)
    return re.compile("^" + "".join(out) + "$")


def newest_dated_tag(pattern_tag: str, tags: Iterable[str]) -> str | None:
    """The tag matching ``pattern_tag`` (a tag holding ``{date}``) with the newest date."""
    rx = tag_regex(pattern_tag)
    dated = [(m.group("date"), t) for t in tags if (m := rx.match(t))]
    return max(dated)[1] if dated else None


def load_targets(root: Path) -> Targets:
    """Load and validate ``<root>/images/targets.toml``, else the targets sglforge ships."""
    path = project_file(root, TARGETS_FILE)
    data = read_toml(
        path, "targets file", "sglforge init (lays out images/), or reinstall sglforge"
    )
    return parse_targets(data, path)


def device_of_gfx(gfx: str, targets: Targets | None = None) -> Device:
    """The device of the first target whose GPU is ``gfx`` in ``targets`` (default: the
    targets sglforge ships); ConfigError when none says."""
    if targets is None:
        from sglforge.defaults import defaults_root

        targets = load_targets(defaults_root() or Path("."))
    for t in targets.targets:
        if t.gpu_arch == gfx and t.device is not None:
            return t.device
    raise ConfigError(
        f"{targets.path}: no target with gpu_arch = {gfx!r} and a [targets.NAME.device] table",
        f"add a [targets.NAME.device] table to {targets.path}",
    )


def parse_targets(data: Mapping[str, Any], path: Path) -> Targets:
    """Validate the parsed TOML of a targets file (``path`` names it in errors)."""
    top = Table(dict(data), path, "")
    image = top.table("image")
    # The project's repository (org.opencontainers.image.source); default: the git remote.
    source = image.get("source", "str", "")
    repository = image.get("repository", "str", "sglforge/sglang")
    workspace = image.get("workspace", "str", "/sgl-workspace/sglang")
    image.done()
    if not workspace.startswith("/"):
        raise ConfigError(f"{path}: image.workspace must be an absolute path", f"fix {path}")

    rocms: list[Rocm] = []
    for name, raw in top.table("rocm").items():
        where = f"rocm.{name}"
        _check_name(name, path, where)
        tbl = Table(raw, path, where)
        rocms.append(
            Rocm(
                name=name,
                version=tbl.get("version", "str", ""),
                gpu_arch_suffix=tbl.get("gpu_arch_suffix", "str", f"-{name}"),
            )
        )
        tbl.done()
    known_rocm = {r.name for r in rocms}

    targets: list[Target] = []
    for name, raw in top.table("targets").items():
        where = f"targets.{name}"
        _check_name(name, path, where)
        tbl = Table(raw, path, where)
        tbl.expect({"description", "gpu_arch", "rocm", "base", "bases", "env", "device"})
        gpu_arch = check_gpu_arch(tbl.get("gpu_arch", "str"), path, f"{where}.gpu_arch")
        rocm = _rocm_list(list(tbl.get("rocm", "strs")), known_rocm, path, f"{where}.rocm")
        bases = _bases(tbl.data, tuple(rocm), path, where)
        env: list[tuple[str, str]] = []
        env_tbl = tbl.table("env")
        for key, value in env_tbl.items():
            if not _ENV_NAME.match(key):
                raise ConfigError(
                    f"{path}: {where}.env: {key!r} is not an environment variable name",
                    f"fix {path}",
                )
            if not isinstance(value, str):
                raise ConfigError(f"{path}: {where}.env.{key} must be a string", f"fix {path}")
            env.append((key, value))
        targets.append(
            Target(
                name=name,
                description=tbl.get("description", "str", ""),
                gpu_arch=gpu_arch,
                rocm=tuple(rocm),
                bases=bases,
                env=tuple(env),
                device=_device(tbl, gpu_arch, where),
            )
        )
        tbl.done(also={"base", "bases"})
    top.done()
    if not targets:
        raise ConfigError(f"{path}: no [targets.NAME] tables", f"add a target to {path}")
    return Targets(path, repository, workspace, tuple(rocms), tuple(targets), source)


def _device(tbl: Table, gpu_arch: str, where: str) -> Device | None:
    """``[targets.NAME.device]``, if the target has one."""
    if "device" not in tbl.data:
        tbl.seen.add("device")
        return None
    dev = tbl.table("device")
    out = Device(
        gfx=gpu_arch,
        name=dev.get("name", "str"),
        cu_num=dev.number("cu_num", "int"),
        memory_gib=dev.number("memory_gib", "int"),
        count=dev.number("count", "int"),
    )
    dev.done()
    return out


def _rocm_list(
    value: Any, known: Iterable[str], path: Path, where: str, of_target: str | None = None
) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(r, str) for r in value):
        raise ConfigError(f"{path}: {where} must be a non-empty list of strings", f"fix {path}")
    known = list(known)
    for r in value:
        if r in known:
            continue
        if of_target:
            raise ConfigError(
                f"{path}: {where} names {r!r}, which is not in {of_target}.rocm "
                f"({', '.join(known)})",
                f"add {r!r} to {of_target}.rocm in {path}",
            )
        raise ConfigError(
            f"{path}: {where} names {r!r}, which has no [rocm.{r}] table "
            f"(known: {', '.join(sorted(known)) or 'none'})",
            f"add [rocm.{r}] to {path}",
        )
    return list(value)


def _bases(
    tbl: Mapping[str, Any], rocm: tuple[str, ...], path: Path, where: str
) -> tuple[BasePattern, ...]:
    # Either one `base` for every version (the first form of this file) or `bases`, a list of
    # {versions, base, rocm} tables tried in order.
    if "base" in tbl and "bases" in tbl:
        raise ConfigError(
            f"{path}: {where} has both base and bases; keep one", f"remove one from {path}"
        )
    if "base" in tbl:
        template = tbl["base"]
        if not isinstance(template, str):
            raise ConfigError(f"{path}: {where}.base must be a string", f"fix {path}")
        _check_template(template, path, f"{where}.base")
        return (BasePattern("", template, rocm),)
    if "bases" not in tbl:
        raise ConfigError(
            f"{path}: {where}.base (or a [[{where}.bases]] list) is required",
            f"add it to {path}",
        )
    raw = tbl["bases"]
    if not isinstance(raw, list) or not raw:
        raise ConfigError(
            f"{path}: {where}.bases must be a non-empty list of tables ([[{where}.bases]])",
            f"fix {path}",
        )
    out: list[BasePattern] = []
    for n, item in enumerate(raw):
        at = f"{where}.bases[{n}]"
        entry = Table(item, path, at)
        versions = entry.get("versions", "str")
        try:
            SpecifierSet(versions)
        except InvalidSpecifier:
            raise ConfigError(
                f"{path}: {at}.versions {versions!r} is not a PEP 440 specifier "
                "(e.g. '>=0.5.15,<0.5.17')",
                f"fix {path}",
            ) from None
        template = entry.get("base", "str")
        _check_template(template, path, f"{at}.base")
        flavours = rocm
        if "rocm" in entry.data:
            flavours = tuple(
                _rocm_list(list(entry.get("rocm", "strs")), rocm, path, f"{at}.rocm", where)
            )
        entry.done()
        out.append(BasePattern(versions, template, flavours))
    return tuple(out)


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
    tag = template.rpartition("/")[2].partition(":")[2]
    if DATE_FIELD in template and (DATE_FIELD not in tag or template.count(DATE_FIELD) > 1):
        # A date is looked up in one repository's tag list, so it belongs in the tag, once.
        raise ConfigError(
            f"{path}: {where}: {{date}} may appear once, in the tag (after the last ':')",
            f"fix {path}",
        )
