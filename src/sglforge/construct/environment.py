"""The environment a construction runs in: the target node's, never this host's.

sglang and aiter read environment variables at import and decide shapes from them:
``SGLANG_USE_AITER`` turns on aiter's padded MoE weights (0.5.14
``srt/layers/quantization/quark/quark_w4a4_mxfp4_moe.py:34``, ``srt/layers/moe/utils.py:532-572``),
so the same launch has another ``inter_dim`` with and without it. The construction answers
for the node, so its variables are the ones a container of the release image sees there, in
the order they override each other:

1. the release image's own ``ENV``: read from the base image's config when sglforge has the
   image (``--base-image``, a build's base), else the list upstream's ``docker/rocm.Dockerfile``
   sets (:data:`sglforge.standin.base.RELEASE_ENV`, the replica's; its ``GPU_ARCH`` and
   ``GPU_ARCH_LIST`` are the target's ``gpu_arch``). From an image's config, variables that
   name paths inside the image (``PATH``, ``LD_LIBRARY_PATH``, a value starting with ``/``)
   are left out: they mean nothing on this host;
2. the target's runtime defaults (``images/targets.toml`` ``[targets.NAME.env]``), which the
   overlay image bakes in;
3. the scenario's ``[container.env]`` (``docker run -e``).

Credentials (:data:`sglforge.construct.sandbox.SECRET`) are never taken, whatever the source;
the report names them as left out. :class:`TargetEnv` says where each layer came from, for the
reports (``scan`` and ``configs coverage``, text and ``--json``).

The versions of the image's packages that a decision reads and the shims must state (triton's:
0.5.14 picks the DSA page size from it, ``srt/layers/attention/dsa/utils.py:43-54``, 64 from
Triton 3.5, else 1) come from the image too (:func:`image_facts`: its own ``importlib.metadata``,
in a container with no network). Without the image they are :data:`ASSUMED`, and the report says
so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sglforge.scenario.file import Scenario
    from sglforge.targets import BuildTarget

# Package versions the shims state when the image's own are not known (the report says so).
ASSUMED = {"triton": "3.4.0"}
# From an image's config: variables that describe the image's own file system or shell.
IMAGE_ONLY = frozenset(
    {"PATH", "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "PYTHONHOME", "HOME", "TMPDIR"}
)


@dataclass(frozen=True)
class TargetEnv:
    """The variables a construction child gets from the target, and where they came from."""

    variables: tuple[tuple[str, str], ...]
    sources: tuple[str, ...]  # each layer, in the order applied
    left_out: tuple[str, ...] = ()  # names not taken (credentials), never their values
    # the image's package versions the shims state (triton), and where they came from
    packages: tuple[tuple[str, str], ...] = tuple(sorted(ASSUMED.items()))
    packages_source: str = "assumed: the image's own are not known here"

    def as_dict(self) -> dict[str, str]:
        return dict(self.variables)

    def describe(self) -> str:
        """One line for a report: how many variables and from where."""
        from sglforge.construct.sandbox import isolation

        line = f"{len(self.variables)} variable(s) from {'; then '.join(self.sources)}"
        if self.left_out:
            line += f" (left out as credentials: {', '.join(self.left_out)})"
        shown = ", ".join(f"{n} {v}" for n, v in self.packages)
        line += f"; packages {shown} ({self.packages_source})"
        fence = isolation()
        if fence.network is not None:
            line += f"; the construction had the host's network ({fence.network})"
        return line

    def to_dict(self) -> dict[str, Any]:
        from sglforge.construct.sandbox import isolation

        return {
            "variables": self.as_dict(),
            "sources": list(self.sources),
            "left_out": list(self.left_out),
            "packages": dict(self.packages),
            "packages_source": self.packages_source,
            "isolation": isolation().describe(),
        }


def release_env(gfx: str) -> dict[str, str]:
    """The runtime ``ENV`` of upstream's release image for ``gfx`` (the replica's list)."""
    from sglforge.standin.base import RELEASE_ENV

    return {**RELEASE_ENV, "GPU_ARCH": gfx, "GPU_ARCH_LIST": gfx}


def image_env(entries: Iterable[str]) -> dict[str, str]:
    """An image config's ``Env`` (``NAME=value`` strings) less what names its own paths."""
    out = {}
    for entry in entries:
        name, eq, value = entry.partition("=")
        if eq and name not in IMAGE_ONLY and not value.startswith("/"):
            out[name] = value
    return out


@dataclass(frozen=True)
class Image:
    """What sglforge read of the release image itself: its config's ``Env`` and the versions
    of the packages in :data:`ASSUMED` it holds (those it lacks are left out)."""

    ref: str
    env: tuple[str, ...]
    packages: tuple[tuple[str, str], ...] = ()


def target_env(
    gfx: str,
    target: BuildTarget | None = None,
    scenario: Scenario | None = None,
    base: Image | None = None,
) -> TargetEnv:
    """The node's environment for a construction: ``base`` is the release image when sglforge
    has it (its ``Env`` and packages), else the replica's list for ``gfx``; then the target's
    defaults and the scenario's ``[container.env]``."""
    layers: list[tuple[str, Mapping[str, str]]] = []
    if base is not None:
        layers.append((f"the ENV of image {base.ref}", image_env(base.env)))
    else:
        layers.append(
            (
                f"the release image's ENV (upstream's docker/rocm.Dockerfile, {gfx})",
                release_env(gfx),
            )
        )
    if target is not None and target.env:
        layers.append((f"{target.path.name} [targets.{target.name}.env]", target.env))
    if scenario is not None and scenario.container.env:
        layers.append((f"{scenario.path} [container.env]", scenario.container.env))
    env = overlay(layers)
    if base is None:
        return env
    from dataclasses import replace

    found = dict(base.packages)
    lacking = sorted(set(ASSUMED) - found.keys())
    source = f"read from image {base.ref}" if found else ""
    if lacking:
        source += ("; " if source else "") + (
            f"assumed: image {base.ref} holds no {', '.join(lacking)}"
        )
    known = {**ASSUMED, **found}
    return replace(env, packages=tuple(sorted(known.items())), packages_source=source)


def overlay(layers: Iterable[tuple[str, Mapping[str, str]]]) -> TargetEnv:
    """``layers`` (source, variables) applied in order; credentials left out by name."""
    from sglforge.construct.sandbox import SECRET

    merged: dict[str, str] = {}
    sources, left_out = [], set()
    for source, variables in layers:
        sources.append(source)
        for name, value in variables.items():
            if SECRET.search(name):
                left_out.add(name)
            else:
                merged[name] = str(value)
    return TargetEnv(tuple(sorted(merged.items())), tuple(sources), tuple(sorted(left_out)))


def default_env(gfx: str) -> TargetEnv:
    """The release image's environment alone (no target defaults, no scenario)."""
    return target_env(gfx)


# Runs in the image (python3 -c, no network): the versions of the packages named on argv.
_PACKAGES_PROBE = """
import importlib.metadata as m, json, sys
out = {}
for name in sys.argv[1:]:
    try:
        out[name] = m.version(name)
    except m.PackageNotFoundError:
        pass
print(json.dumps(out))
"""


def image_facts(ref: str) -> Image | None:
    """The release image ``ref`` as sglforge can read it here (its config's ``Env``, and the
    versions of :data:`ASSUMED`'s packages from its own metadata), or None when the engine
    does not have it (the replica's list and the assumed versions are used then)."""
    import json

    from sglforge.engine import containers, images
    from sglforge.errors import SglforgeError

    try:
        info = images.inspect(ref)
        if info is None:
            return None
        out = containers.run_python(ref, _PACKAGES_PROBE, args=sorted(ASSUMED))
        found = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    except (SglforgeError, ValueError, IndexError):
        return None
    packages = tuple(sorted((str(k), str(v)) for k, v in dict(found).items() if k in ASSUMED))
    return Image(ref, info.env, packages)
