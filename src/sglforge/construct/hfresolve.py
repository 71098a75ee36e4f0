"""A checkpoint's config.json resolved by transformers' own configuration classes (parent side).

sglang reads the checkpoint's config through ``transformers.AutoConfig`` at the version its
release pins (the ``Requires-Dist`` of its wheel: 0.5.14 asks ``transformers==5.8.1``, 0.5.23
``transformers==5.19.0``). The sglang construction child cannot hold the real transformers (its
modelling modules need the real torch), so the configuration is resolved first, in a separate
config-only child (:mod:`sglforge.construct.configchild`, run with ``python -I -S``: no
site-packages, no torch), from real wheels: that transformers and the closure of its
``Requires-Dist`` taken from the package index the way the construction's other real packages
are (:mod:`sglforge.construct.packages`: sha256 checked, cached, unpacked once). Left out of the
closure, because reading a configuration never imports them (the config child runs without
them): :data:`NOT_FOR_CONFIG`.

The child's answer (``to_dict()``, the class's aliases and properties) is cached by
(transformers version, the config child's code, config.json content) and handed to the sglang
child, which presents it to sglang as the config object (``construct.hfconfig.resolved``). A
config transformers' own class cannot read here (``trust_remote_code``, a model type it does
not know) or an environment that cannot be had falls back to sglforge's own reading of
config.json (``hfconfig.HFConfig``), and the construction says so
(``Construction.config_source``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from sglforge.errors import SglforgeError

if TYPE_CHECKING:
    from sglforge.construct.environment import TargetEnv

CHILD_TIMEOUT = 300  # seconds: importing transformers and reading a few configs
# transformers' and huggingface_hub's requirements that reading a configuration never imports:
# the ``transformers``/``hf`` command lines (typer), the Xet transfer backend (hf-xet, a
# download client) and fsspec file systems (remote files). The config child runs without them.
NOT_FOR_CONFIG = frozenset({"typer", "hf-xet", "fsspec"})


@dataclass(frozen=True)
class Environment:
    """The real wheels the config child imports, or why there are none."""

    transformers: str | None  # the version, None when it could not be had
    paths: tuple[Path, ...]
    missing: str | None = None  # why not


def _cache_root() -> Path:
    from sglforge import cache

    return cache.pypi_cache() / "construct-config"


def _requires(folder: Path) -> list[Requirement]:
    """The unconditional ``Requires-Dist`` of the wheel unpacked in ``folder``."""
    from sglforge.construct.packages import requires_dist

    return [
        req
        for meta in folder.glob("*.dist-info/METADATA")
        for req in requires_dist(meta.read_text(errors="replace"))
    ]


def _version(folder: Path, project: str) -> Version | None:
    from sglforge.construct.packages import _compatible

    return _compatible(folder.name + ".whl", project)


@functools.lru_cache(maxsize=8)
def _closure_of(requirement: str, release: str) -> tuple[Path, ...]:
    return closure(Requirement(requirement), release)  # once per process and requirement


def closure(root: Requirement, release: str) -> tuple[Path, ...]:
    """``root`` and the closure of its requirements (less :data:`NOT_FOR_CONFIG`), each the
    wheel sglang ``release``'s lock names, else the newest cached or indexed one for this
    interpreter satisfying every specifier seen (then locked: ``construct.lock``)."""
    from sglforge.construct.packages import obtain

    specs: dict[str, SpecifierSet] = {}
    chosen: dict[str, Path] = {}
    pending = [root]
    while pending:
        req = pending.pop()
        name = canonicalize_name(req.name)
        if name in NOT_FOR_CONFIG:
            continue
        specs[name] = specs.get(name, SpecifierSet()) & req.specifier
        if name in chosen:
            have = _version(chosen[name], name)
            if have is not None and specs[name].contains(have, prereleases=True):
                continue
        want = Requirement(f"{name}{specs[name]}")
        chosen[name] = obtain(name, want, release)
        pending.extend(_requires(chosen[name]))
    return tuple(chosen[n] for n in sorted(chosen))


def environment(tree: Path) -> Environment:
    """The transformers the release in ``tree`` requires, with its closure."""
    from sglforge.construct.packages import release_version, requirements

    version = release_version(tree)
    if version is None:
        return Environment(None, (), f"{tree}: no sglang/_version.py, so no pinned transformers")
    try:
        req = requirements(version).get("transformers")
    except (SglforgeError, OSError, StopIteration, zipfile.BadZipFile) as exc:
        return Environment(None, (), f"sglang {version}'s requirements: {exc}")
    if req is None:
        return Environment(None, (), f"sglang {version}'s wheel requires no transformers")
    from sglforge.construct.lock import LockMismatch

    try:
        paths = _closure_of(str(req), version)
    except LockMismatch:
        raise  # other bytes than the locked ones: never a fallback
    except (SglforgeError, OSError) as exc:
        return Environment(None, (), f"{req}: {str(exc).splitlines()[0]}")
    found = next((p for p in paths if p.name.startswith("transformers-")), None)
    got = _version(found, "transformers") if found is not None else None
    return Environment(str(got) if got else None, paths)


@functools.cache
def _reader() -> str:
    """The config child's own code: a record another version of it wrote is another key (a
    stale reading is never served to a newer child)."""
    return hashlib.sha256(Path(__file__).with_name("configchild.py").read_bytes()).hexdigest()


def _key(transformers: str, config: Mapping[str, Any]) -> str:
    text = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"transformers=={transformers}\0{_reader()}\0{text}".encode()).hexdigest()


def _write(path: Path, value: Any) -> None:
    from sglforge.cachekey import write_sealed

    write_sealed(path, "config-child", path.name, {"record": value})  # a hint, never a verdict


def _cached(path: Path) -> dict[str, Any] | None:
    """The config child's cached record at ``path``: sealed by this machine and an object
    (``sglforge.cachekey.read_sealed``); anything else a miss (F6, F11)."""
    from sglforge.cachekey import read_sealed

    doc = read_sealed(path, "config-child", path.name)
    record = doc.get("record") if doc is not None else None
    return record if isinstance(record, dict) else None


def resolve(
    env: Environment, configs: Mapping[str, Mapping[str, Any]], target: TargetEnv | None = None
) -> dict[str, Any]:
    """By id: transformers' own reading of each config (the config child's record), or
    ``{"fallback": reason}``. Cached by (transformers version, reader, config.json); the
    child runs fenced (:mod:`sglforge.construct.sandbox`) with ``target``'s variables."""
    if env.transformers is None:
        return {i: {"fallback": f"no transformers: {env.missing}"} for i in configs}
    keys = {i: _key(env.transformers, c) for i, c in configs.items()}
    out: dict[str, Any] = {}
    todo: dict[str, Mapping[str, Any]] = {}
    for i, config in configs.items():
        path = _cache_root() / f"transformers-{env.transformers}" / f"{keys[i]}.json"
        record = _cached(path)
        if record is not None:
            out[i] = record
        else:
            todo[keys[i]] = config
    if todo:
        got = _run(env, todo, target)
        got = got if isinstance(got, dict) else {}
        for key, record in got.items():
            if isinstance(record, dict) and "error" not in record:  # a refusal is not cached
                _write(_cache_root() / f"transformers-{env.transformers}" / f"{key}.json", record)
        for i in configs:
            if i not in out:
                out[i] = got.get(keys[i])
    for i, record in out.items():
        if not isinstance(record, dict):  # a child's answer of another shape
            out[i] = {"fallback": "the config child answered no record for it"}
        elif "error" in record:
            last = (str(record["error"]).strip().splitlines() or ["(no message)"])[-1]
            out[i] = {"fallback": f"transformers {env.transformers} refused it: {last}"}
    return out


def _run(
    env: Environment, configs: Mapping[str, Mapping[str, Any]], target: TargetEnv | None
) -> dict[str, Any]:
    from sglforge.construct import sandbox

    script = Path(__file__).with_name("configchild.py")
    stdin = json.dumps({"paths": [str(p) for p in env.paths], "configs": dict(configs)})
    got = sandbox.run(
        [sys.executable, "-I", "-S", str(script)],
        stdin,
        timeout=CHILD_TIMEOUT,
        prefix="sglforge-config-",
        target=target.as_dict() if target is not None else {},
    )
    if got.timed_out:
        why = f"the config child took over {CHILD_TIMEOUT} s"
        return {k: {"fallback": why} for k in configs}
    if got.doc is None:
        why = f"transformers {env.transformers} could not be imported: {got.tail}"
        return {k: {"fallback": why} for k in configs}
    return got.doc
