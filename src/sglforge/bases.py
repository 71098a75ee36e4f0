"""Find, pin and inspect the release image an overlay starts from.

Owns the base image of ``sglforge build``: a ``{date}`` tag resolved to the newest published
one (:func:`resolve_dated`), the base checked on the engine or its registry and pulled, with
the closest existing tags named when it is missing (:func:`check_base`), and the base
inspected for the sglang it holds (:func:`inspect_base`). Also what sglforge knows about
sglang and aiter inside an image: the probes :func:`sglang_info` and :func:`aiter_configs`
run there, in a throwaway container of ``engine.containers`` (``engine/`` knows Docker only).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglforge.engine.errors import BuildFailed, ImageMissing
from sglforge.errors import BaseImageMissing, BaseImageUnreachable, BuildError, SglforgeError
from sglforge.provenance import Base
from sglforge.targets import DATE_FIELD, BuildTarget, is_dated, newest_dated_tag, tag_regex
from sglforge.util import atomic_write, work_dir

if TYPE_CHECKING:
    from sglforge.aiter_rules import AiterRule

OFFLINE_ENV = "SGLFORGE_OFFLINE"


def from_reference(base: Base) -> str:
    """The overlay's FROM: ``repo:tag@sha256:...`` when a registry digest is known (the build
    then starts from exactly the base the labels record), else the tag (an image ID is no
    valid FROM reference)."""
    if base.digest and base.digest.startswith("sha256:") and "@" not in base.ref:
        return f"{base.ref}@{base.digest}"
    return base.ref


def base_ref(bt: BuildTarget, version: str, override: str | None = None) -> str:
    """The base image of a build of ``bt`` at sglang ``version``: ``override`` (``--base-image``,
    a template) or the target's pattern, ``{version}`` filled in. The one template rule for
    build and upgrade: ``{date}`` stays, to be resolved to the newest published tag
    (:func:`resolve_base`) before anything inspects or probes the image; any other brace is
    kept as written."""
    if override:
        return override.replace("{version}", str(version))
    return bt.base_image(str(version))


def resolve_base(ref: str, bt: BuildTarget, offline: bool, say: Callable[[str], None]) -> str:
    """``ref`` with a ``{date}`` resolved to the newest dated tag (as it is, without one)."""
    return resolve_dated(ref, bt, offline, say) if is_dated(ref) else ref


def check_base(base: Base, bt: BuildTarget, offline: bool, say: Callable[[str], None]) -> Base:
    """The base with its ID/digest; BuildError naming the closest existing tags if missing.

    A ``{date}`` in the reference is first resolved to the newest dated tag, so the exact tag
    is what the labels and manifest record.
    """
    from sglforge.engine import images as eng
    from sglforge.engine import reference, registry

    if is_dated(base.ref):
        base = replace(base, ref=resolve_dated(base.ref, bt, offline, say))
    info = eng.inspect(base.ref)
    if info is not None:
        return replace(base, id=info.id, digest=info.digest)
    answer = None if offline else registry.remote_tag(base.ref)
    if answer is not None and answer.exists:
        say(f"pulling {base.ref} (not on the engine yet)")
        eng.pull(base.ref)
        info = eng.inspect(base.ref)
        if info is None:
            raise BuildError(f"pulled {base.ref} but the engine does not list it")
        return replace(base, id=info.id, digest=info.digest or answer.digest)
    ref = reference.parse(base.ref)
    known = set(eng.local_tags(ref.name))
    remote = None if offline else registry.remote_tags(ref.name)
    known |= set(remote or ())
    close = closest_tags(ref.tag, known, bt)
    listed = "on the engine" if remote is None else "on the engine or in its registry"
    found = (
        f"closest existing tags for {bt.key} {listed}: {', '.join(close)}"
        if close
        else f"no tags of {ref.name} for {bt.key} {listed}"
    )
    if answer is not None and answer.exists is None:
        # Unknown is not "missing": say so rather than send someone hunting for a typo.
        raise BaseImageUnreachable(
            f"base image {base.ref} is not on the engine and its registry did not answer "
            f"({answer.error}); {found}",
            f"docker pull {base.ref} once the registry is reachable, or pass --base-image",
        )
    where = (
        f"on the engine (offline, by --offline or ${OFFLINE_ENV}: registries not asked)"
        if offline
        else "on the engine or in its registry"
    )
    raise BaseImageMissing(
        f"base image {base.ref} does not exist {where}; {found}",
        "pass --base-image with an existing tag, or pin an upstream release that has one",
    )


def resolve_dated(pattern: str, bt: BuildTarget, offline: bool, say: Callable[[str], None]) -> str:
    """``repo:...-{date}`` as the tag with the newest date its registry (offline: engine) lists."""
    from sglforge.engine import images as eng
    from sglforge.engine import reference, registry

    ref = reference.parse(pattern)
    local = eng.local_tags(ref.name)
    remote = None if offline else registry.remote_tags(ref.name)
    if remote is None and not offline:
        say(f"the registry of {ref.name} did not list its tags; using the engine's")
    tags = local if remote is None else remote
    chosen = newest_dated_tag(ref.tag, tags)
    if chosen is not None:
        say(f"{pattern}: newest published tag is {chosen}")
        return f"{ref.name}:{chosen}"
    if offline:
        where = f"on the engine (offline, by --offline or ${OFFLINE_ENV}: registries not asked)"
    elif remote is None:
        where = "on the engine (its registry did not list tags)"
    else:
        where = "in its registry"
    close = closest_tags(ref.tag, set(local) | set(remote or ()), bt)
    found = f"closest tags: {', '.join(close)}" if close else f"{ref.name} has no tags"
    raise BaseImageMissing(
        f"no tag of {ref.name} matches {ref.tag} (any YYYYMMDD date) {where}; {found}",
        "pass --base-image with an existing tag, or pin an upstream release that has one",
    )


def closest_tags(wanted: str, known: Iterable[str], bt: BuildTarget, n: int = 5) -> list[str]:
    """The ``n`` known tags most like ``wanted``, preferring those of target ``bt``.

    Tags of the target's shape (the base pattern ``wanted`` follows; ``{date}`` is any date)
    rank by version distance first (0.5.13 is nearer to 0.5.14 than 0.5.4 is, which plain
    string similarity gets wrong), then by difflib similarity.
    """
    import difflib

    known = sorted(set(known))
    fields = {
        "rocm": "(?:" + "|".join(map(re.escape, bt.target.rocm)) + ")",
        "gpu_arch": re.escape(bt.gpu_arch),
        "target": re.escape(bt.name),
    }
    shapes = [tag_regex(b.template.rpartition(":")[2], fields) for b in bt.target.bases]
    probe = wanted.replace(DATE_FIELD, "0" * 8)
    pattern = next((rx for rx in shapes if rx.match(probe)), shapes[0])
    want = pattern.match(probe)
    want_v = _numbers(want.groupdict().get("version") if want else None)
    mine = [t for t in known if pattern.match(t)] or known

    def rank(tag: str) -> tuple[tuple[int, ...], float, int]:
        m = pattern.match(tag)
        v = _numbers(m.groupdict().get("version") if m else None)
        if want_v and v:
            width = max(len(want_v), len(v))
            a, b = want_v + (0,) * (width - len(want_v)), v + (0,) * (width - len(v))
            dist = tuple(abs(x - y) for x, y in zip(a, b, strict=True))
        else:
            dist = (1 << 30,)
        newest_first = -int((m.groupdict().get("date") if m else None) or 0)
        return dist, -difflib.SequenceMatcher(None, wanted, tag).ratio(), newest_first

    return sorted(mine, key=rank)[:n]


def _numbers(version: str | None) -> tuple[int, ...]:
    if not version:
        return ()
    m = re.match(r"v?(\d+(?:\.\d+)*)", version)
    return tuple(int(x) for x in m.group(1).split(".")) if m else ()


def dry_run_base(
    root: Path, base: Base, version: str, labels: Mapping[str, str] | None, offline: bool = False
) -> Base:
    """In a dry run, the base inspected as a real build would, with nothing pulled, no
    container and nothing written: its digest from its registry and its facts from the cache
    kept by that digest (a real build keeps them); else, when the engine has it locally, the
    engine's (``offline``: the engine's only). The plan then shows the real immutable tag (and
    the overlay's digest). Otherwise the base stays unpinned (a tag without -i)."""
    from sglforge.engine import images as eng

    digest = None if offline else registry_digest_of(base.ref)
    if digest is not None:
        known = cached_base(replace(base, digest=digest), version)
        if known is not None:
            return known
    try:
        info = eng.inspect(base.ref)
        if info is None:
            return base
        return inspect_base(root, replace(base, id=info.id, digest=info.digest), version, labels)
    except SglforgeError:
        return base


def registry_digest_of(ref: str) -> str | None:
    """The digest ``ref``'s registry serves for it (over HTTP, no engine); None when it
    cannot say (no registry in the reference, unreachable, no such tag)."""
    from sglforge.engine import distribution
    from sglforge.engine.reference import parse

    try:
        parsed = parse(ref, allow_digest=True)
        if parsed.digest:
            return parsed.digest
        return distribution.served_digest(ref, _creds_or_none(parsed.registry), timeout=5.0)
    except SglforgeError:
        return None


def login_for(ref: str) -> Any:
    """The login for the registry of image ``ref`` (or its ``registry/repository`` name);
    None when there is none or it cannot be read."""
    from sglforge.engine.reference import parse

    try:
        return _creds_or_none(parse(ref, allow_digest=True).registry)
    except SglforgeError:
        return None


def _creds_or_none(registry: str) -> Any:
    from sglforge.engine.registry import credentials

    try:
        return credentials(registry)
    except SglforgeError:
        return None


# The base's facts (its sglang and ENTRYPOINT/CMD; its aiter tables), kept in the user cache
# by the base's registry digest: a digest names the same bytes forever, so a later build of
# the same base asks no container (issue 43). A damaged entry reads as a miss.
FACTS_FOLDER = "base-facts"


def _facts_file(digest: str, what: str) -> Path:
    from sglforge.cache import cache_root

    return cache_root() / FACTS_FOLDER / f"{what}-{digest.replace(':', '-')}.json"


def cached_facts(digest: str | None, what: str) -> dict[str, Any] | None:
    """The facts ``what`` kept for registry digest ``digest``; None when none are."""
    from sglforge.util import read_json

    if not digest or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        return None
    try:
        data = read_json(_facts_file(digest, what), cap=64 << 20)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("digest") == digest else None


def keep_facts(digest: str | None, what: str, data: Mapping[str, Any]) -> None:
    """Keep ``data`` as the facts ``what`` of registry digest ``digest`` (if it is one)."""
    if digest and re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        try:
            atomic_write(_facts_file(digest, what), json.dumps({**data, "digest": digest}))
        except OSError:
            pass  # a cache that cannot be written only costs the next build a probe


def cached_base(base: Base, version: str) -> Base | None:
    """The base with its facts from the cache kept by its digest; None on a miss."""
    facts = cached_facts(base.digest, "sglang")
    if facts is None:
        return None
    try:
        return _with_facts(base, facts, version)
    except (KeyError, TypeError):
        return None


def inspect_base(root: Path, base: Base, version: str, labels: Mapping[str, str] | None) -> Base:
    """Read the sglang version and package path of the base; refuse a version mismatch.

    Read from the facts kept by the base's registry digest when there are (no container),
    else probed in a container and kept."""
    from sglforge.engine import images as eng

    facts = cached_facts(base.digest, "sglang")
    if facts is None:
        info = sglang_info(base.ref, work_dir(root, "cache"), labels=labels)
        image = eng.require(base.ref)
        facts = {
            "version": info.version,
            "path": info.path,
            "fallback_only": info.fallback_only,
            "entrypoint": list(image.entrypoint),
            "cmd": list(image.cmd) if image.cmd is not None else None,
        }
        keep_facts(base.digest, "sglang", facts)
    return _with_facts(base, facts, version)


def _with_facts(base: Base, facts: Mapping[str, Any], version: str) -> Base:
    """``base`` with its sglang facts; BuildError when they do not fit ``version``."""
    found, path = facts["version"], facts["path"]
    if found is None and facts.get("fallback_only"):
        raise BuildError(
            f"base image {base.ref}: its sglang reports only setuptools-scm's fallback version "
            "0.0.0.dev0 (no _version.py, no distribution metadata), so which release it holds "
            "is unknown",
            "pass --base-image with an sglang release image (pip install -e python in a git "
            "checkout at the release tag writes sglang/_version.py)",
        )
    if path is None:
        raise BuildError(
            f"base image {base.ref} holds no importable sglang package",
            "pass --base-image with an sglang release image",
        )
    if not _same_version(found, version):
        raise BuildError(
            f"base image {base.ref} holds sglang {found}, but the queue is pinned to {version}",
            "pass --base-image with the release image of the pinned version, or re-pin",
        )
    cmd = facts.get("cmd")
    return replace(
        base,
        sglang_version=str(found),
        package_path=str(path),
        entrypoint=tuple(str(w) for w in facts.get("entrypoint") or ()),
        cmd=tuple(str(w) for w in cmd) if isinstance(cmd, list) else None,
    )


def _same_version(a: str | None, b: str) -> bool:
    if a is None:
        return False
    from packaging.version import InvalidVersion, Version

    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a.removeprefix("v") == b.removeprefix("v")


@dataclass(frozen=True)
class SglangInfo:
    """Which sglang an image holds and where its package lives."""

    image_id: str
    version: str | None
    path: str | None
    python: str | None
    install: str | None = None  # editable-finder, editable-pth, site-packages
    version_source: str | None = None  # _version.py, metadata, version.py
    fallback_only: bool = False  # only setuptools-scm's fallback 0.0.0.dev0 was found


# Runs inside the image as `python3 -c`, from a neutral working directory and with the
# current directory taken off sys.path: in the release images' WORKDIR (/sgl-workspace) the
# repository folder `sglang` would otherwise be found first, as a namespace package.
_SGLANG_PROBE = r"""
import json, os, re, sys
sys.path[:] = [p for p in sys.path if p not in ("", ".", os.getcwd())]
import importlib.metadata as md, importlib.util
FALLBACK = "0.0.0.dev0"
out = {"python": sys.version.split()[0], "version": None, "version_source": None,
       "path": None, "install": None, "dist_version": None, "fallback_only": False}

def literal(path, pattern):
    try:
        m = re.search(pattern, open(path, encoding="utf-8").read(), re.M)
    except OSError:
        return None
    return m.group(1) if m else None

dist = None
try:
    dist = md.distribution("sglang")
except md.PackageNotFoundError:
    pass
mapped = None
if dist is not None:
    out["dist_version"] = dist.version
    for f in dist.files or ():
        name = os.path.basename(str(f))
        if name.startswith("__editable__") and name.endswith("_finder.py"):
            text = open(dist.locate_file(f), encoding="utf-8").read()
            m = re.search(r"MAPPING[^=]*=\s*(\{[^}]*\})", text)
            if m:
                import ast
                mapped = ast.literal_eval(m.group(1)).get("sglang")
                out["install"] = "editable-finder"
        elif name.startswith("__editable__") and name.endswith(".pth") and mapped is None:
            out["install"] = "editable-pth"
    direct = dist.read_text("direct_url.json")
    if direct and out["install"] is None:
        info = json.loads(direct)
        if (info.get("dir_info") or {}).get("editable"):
            out["install"] = "editable-pth"
    if out["install"] is None:
        out["install"] = "site-packages"

spec = importlib.util.find_spec("sglang")
if spec is not None and spec.origin and spec.origin.endswith("__init__.py"):
    out["path"] = os.path.dirname(os.path.realpath(spec.origin))
elif mapped:
    out["path"] = os.path.realpath(mapped)
elif spec is not None and spec.submodule_search_locations:
    out["path"] = os.path.realpath(list(spec.submodule_search_locations)[0])
    out["install"] = (out["install"] or "") + "+namespace"

candidates = []
if out["path"]:
    candidates.append(("_version.py", literal(os.path.join(out["path"], "_version.py"),
        r"^(?:__version__|version)\s*=\s*(?:\w+\s*=\s*)*[\"']([^\"']+)[\"']")))
candidates.append(("metadata", out["dist_version"]))
if out["path"]:
    candidates.append(("version.py", literal(os.path.join(out["path"], "version.py"),
        r"^__version__\s*=\s*[\"']([^\"']+)[\"']")))
for source, value in candidates:
    if value and value != FALLBACK:
        out["version"], out["version_source"] = value, source
        break
else:
    out["fallback_only"] = any(v == FALLBACK for _, v in candidates)
print("SGLFORGE-PROBE " + json.dumps(out))
"""


def sglang_info(ref: str, cache_dir: Path, labels: Mapping[str, str] | None = None) -> SglangInfo:
    """The sglang version and package path inside image ``ref`` (cached by image ID).

    Finds the distribution through ``importlib.metadata`` (editable finder, editable path
    ``.pth`` or site-packages) and the package where Python imports it from a neutral
    directory; the version comes from ``_version.py``, then the distribution metadata, and
    setuptools-scm's fallback ``0.0.0.dev0`` is never taken for a release.
    """
    from sglforge.engine import containers
    from sglforge.engine import images as eng

    info = eng.inspect(ref)
    if info is None:
        raise ImageMissing(f"image {ref} is not present on the engine", f"docker pull {ref}")
    cache = Path(cache_dir) / f"sglang-probe2-{info.id.removeprefix('sha256:')}.json"
    if cache.is_file():
        try:
            return _sglang_info(info.id, json.loads(cache.read_text()))
        except (ValueError, OSError, TypeError):
            pass  # a damaged cache entry is simply recomputed
    # Reading files rather than importing sglang: the import pulls in torch and needs far
    # longer, and _version.py is what the running server reports anyway.
    text = containers.run_python(ref, _SGLANG_PROBE, labels=labels, working_dir="/")
    line = next((ln for ln in text.splitlines() if ln.startswith("SGLFORGE-PROBE ")), None)
    if line is None:
        raise BuildFailed(
            f"image {ref}: could not read sglang's version: {_first_line(text)}",
            f"docker run --rm -w / {ref} python3 -c 'import sglang.version'",
        )
    data = json.loads(line.removeprefix("SGLFORGE-PROBE "))
    atomic_write(cache, json.dumps(data, indent=2) + "\n")
    return _sglang_info(info.id, data)


def _sglang_info(image_id: str, data: Mapping[str, Any]) -> SglangInfo:
    return SglangInfo(
        image_id,
        data.get("version"),
        data.get("path"),
        data.get("python"),
        install=data.get("install"),
        version_source=data.get("version_source"),
        fallback_only=bool(data.get("fallback_only")),
    )


# Finds aiter the way aiter finds its own tables (AITER_ROOT_DIR = two folders above aiter/jit/,
# amd-aiter aiter/jit/core.py:67) without importing it (the import needs torch and a GPU).
_AITER_PROBE = r"""
import json, os, sys
sys.path[:] = [p for p in sys.path if p not in ("", ".", os.getcwd())]
import importlib.util
out = {"root": None}
spec = importlib.util.find_spec("aiter")
if spec is not None and spec.submodule_search_locations:
    pkg = os.path.realpath(list(spec.submodule_search_locations)[0])
    out["root"] = os.path.dirname(pkg)
    configs = os.path.join(pkg, "configs")
    out["configs_dir"] = configs
    def read(path):
        try:
            return open(path, encoding="utf-8").read()
        except OSError:
            return None
    out["tuned_fmoe"] = read(os.path.join(configs, "tuned_fmoe.csv"))
    untuned = read(os.path.join(configs, "untuned_fmoe.csv"))
    out["untuned_fmoe_header"] = untuned.splitlines()[0] if untuned else None
    model = os.path.join(configs, "model_configs")
    out["model_configs"] = {}
    if os.path.isdir(model):
        for name in sorted(os.listdir(model)):
            if name.endswith(".csv") and "tuned_fmoe" in name and "untuned" not in name:
                out["model_configs"][name] = read(os.path.join(model, name))
    # Its lookup code and its commit: the checkout's .git (a folder, or a file naming one),
    # else the installed distribution's metadata.
    out["fused_moe"] = read(os.path.join(pkg, "fused_moe.py"))
    git = os.path.join(out["root"], ".git")
    if os.path.isfile(git):
        line = (read(git) or "").strip()
        if line.startswith("gitdir:"):
            git = os.path.join(out["root"], line[len("gitdir:"):].strip())
    out["git"] = {}
    head = read(os.path.join(git, "HEAD")) if os.path.isdir(git) else None
    if head is not None:
        out["git"]["HEAD"] = head
        ref = head.strip()[len("ref: "):] if head.startswith("ref: ") else None
        for name in [n for n in (ref, "packed-refs") if n]:
            text = read(os.path.join(git, name))
            if text is not None:
                out["git"][name] = text
    import importlib.metadata as md
    for dist in ("amd-aiter", "aiter"):
        try:
            found = md.distribution(dist)
        except md.PackageNotFoundError:
            continue
        out["dist"] = dist + " " + found.version
        out["direct_url"] = found.read_text("direct_url.json")
        break
print("SGLFORGE-AITER " + json.dumps(out))
"""


@dataclass(frozen=True)
class AiterTables:
    """Where a base image's aiter keeps its tuned tables, and their text, as the probe read
    them: ``tuned_fmoe.csv`` (None when absent), the header of ``untuned_fmoe.csv`` and every
    ``model_configs/*tuned_fmoe*.csv`` aiter merges after it ({file name: text})."""

    root: str
    configs_dir: str
    tuned_fmoe: str | None
    untuned_fmoe_header: str | None
    model_configs: Mapping[str, str]
    fused_moe: str | None = None  # aiter/fused_moe.py's text (its lookup rule)
    found: Mapping[str, Any] = field(default_factory=dict)  # git / dist / direct_url, raw


def aiter_configs(ref: str, labels: Mapping[str, str] | None = None) -> AiterTables | None:
    """Image ``ref``'s aiter tables (one probe container); None when the image has no aiter.

    A ``ref`` naming a registry digest (``repo:tag@sha256:...``) reads the tables kept for
    that digest when there are, and keeps them after a probe: no container the next time."""
    from sglforge.engine import containers

    digest = ref.rpartition("@")[2] if "@sha256:" in ref else None
    kept = cached_facts(digest, "aiter")
    if kept is not None:
        return aiter_tables_from(ref, kept.get("probe"))
    text = containers.run_python(ref, _AITER_PROBE, labels=labels, working_dir="/")
    line = next((ln for ln in text.splitlines() if ln.startswith("SGLFORGE-AITER ")), None)
    if line is None:
        raise BuildFailed(
            f"image {ref}: could not look for aiter: {_first_line(text)}",
            f"docker run --rm -w / {ref} python3 -c 'import importlib.util as u; "
            'print(u.find_spec("aiter"))\'',
        )
    probe = json.loads(line.removeprefix("SGLFORGE-AITER "))
    tables = aiter_tables_from(ref, probe)  # checked before it is kept
    keep_facts(digest, "aiter", {"probe": probe})
    return tables


def aiter_tables_from(ref: str, data: Any) -> AiterTables | None:
    """The probe's JSON for image ``ref`` as ``AiterTables``; None when it found no aiter."""
    if not isinstance(data, dict) or not data.get("root"):
        return None
    model_configs = data.get("model_configs") or {}
    unreadable = sorted(name for name, body in model_configs.items() if not isinstance(body, str))
    if unreadable:
        raise BuildFailed(
            f"image {ref}: aiter's {data['configs_dir']}/model_configs/{unreadable[0]} "
            "could not be read",
            f"docker run --rm {ref} ls -l {data['configs_dir']}/model_configs",
        )
    return AiterTables(
        root=str(data["root"]),
        configs_dir=str(data["configs_dir"]),
        tuned_fmoe=data.get("tuned_fmoe"),
        untuned_fmoe_header=data.get("untuned_fmoe_header"),
        model_configs=dict(model_configs),
        fused_moe=data.get("fused_moe"),
        found={k: data[k] for k in ("git", "dist", "direct_url") if data.get(k)},
    )


def aiter_rule(ref: str, tables: AiterTables) -> AiterRule:
    """The lookup rule of image ``ref``'s aiter: read from its own ``fused_moe.py``, with the
    commit its checkout (or distribution) records; a known commit's rule when the file is gone."""
    from sglforge import aiter_rules

    commit, source = aiter_rules.commit_of(tables.found, tables.root)
    where = f"image {ref}: {tables.root}/aiter/fused_moe.py"
    if tables.fused_moe is not None:
        return aiter_rules.rule_from_source(
            tables.fused_moe, commit, f"{source}; rule read from {where}", where
        )
    if commit is None:
        raise BuildFailed(
            f"{where}: not found, and the image records no aiter commit: its lookup rule is "
            "unknown",
            f"docker run --rm {ref} ls {tables.root}/aiter",
        )
    return aiter_rules.known_rule(commit, f"{source} (no fused_moe.py: sglforge's reading)")


def _first_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[0].strip() if lines else "(no output)"
