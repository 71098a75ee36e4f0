"""Local images on the Docker engine: inspect, build, pull, tag, remove, probe.

Owns every image-level call sglforge makes: inspecting (one :class:`ImageInfo`, or
ImageMissing), building from an in-memory context with the engine's classic builder or from
a folder with ``docker buildx`` (the one Docker call made through the CLI: upstream's
``rocm.Dockerfile`` needs BuildKit), pulling and tagging, and running a throwaway container
in an image to read which sglang and aiter it holds (cached by image ID). Asking a registry
is :mod:`sglforge.engine.registry`'s job.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests

from sglforge.engine import LABEL, client, containers
from sglforge.engine.credentials import Credentials, auth_config, scrub
from sglforge.engine.errors import (
    BadReference,
    BuildFailed,
    EngineError,
    ImageMissing,
    RegistryAuthRefused,
    RegistryError,
)
from sglforge.engine.reference import parse, refuse_controls
from sglforge.util import atomic_write, env_seconds, raise_held, signals_held

_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
# BuildKit's plain progress: "#12 [gfx950  3/41] RUN ..." (stage name optional).
BUILDX_STEP = re.compile(r"^#\d+ \[(?:[^\]]*?\s)?(\d+)/(\d+)\] (.*)$")


@dataclass(frozen=True)
class ImageInfo:
    """What sglforge needs to know about a local image."""

    ref: str
    id: str
    repo_digests: tuple[str, ...]
    tags: tuple[str, ...]
    labels: Mapping[str, str]
    size: int
    layers: tuple[str, ...]
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] | None = None

    @property
    def digest(self) -> str | None:
        """The registry digest (``sha256:...``) when the image came from or went to one."""
        for rd in self.repo_digests:
            return rd.partition("@")[2] or None
        return None


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


@dataclass(frozen=True)
class BuildStep:
    """A progress event: the builder started step ``n`` of ``total``."""

    n: int
    total: int
    instruction: str


@dataclass(frozen=True)
class Layer:
    """One history entry of an image: the instruction and the bytes it added."""

    created_by: str
    size: int


def _api(c: docker.DockerClient | None = None) -> Any:
    return (c or client()).api


def inspect(ref: str) -> ImageInfo | None:
    """The local image ``ref`` names, or None when the engine has no such image."""
    refuse_controls(ref)
    try:
        data = _api().inspect_image(ref)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as exc:
        if exc.status_code == 404:
            return None
        if exc.status_code == 400:  # "invalid reference format": a typo, not the engine
            raise BadReference(f"image {ref}: {exc.explanation or exc}") from None
        raise EngineError(f"image {ref}: engine error: {exc.explanation or exc}") from exc
    cfg = data.get("Config") or {}
    return ImageInfo(
        ref=ref,
        id=data["Id"],
        repo_digests=tuple(data.get("RepoDigests") or ()),
        tags=tuple(data.get("RepoTags") or ()),
        labels=dict(cfg.get("Labels") or {}),
        size=int(data.get("Size") or 0),
        layers=tuple((data.get("RootFS") or {}).get("Layers") or ()),
        entrypoint=_words(cfg.get("Entrypoint")) or (),
        cmd=_words(cfg.get("Cmd")),
    )


def _words(value: object) -> tuple[str, ...] | None:
    """An image config's Entrypoint/Cmd as words (a string is the shell form's one word)."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list):
        return tuple(str(v) for v in value)
    return None


def local_tags(repository: str) -> list[str]:
    """Tags of the local images in ``repository`` (``lmsysorg/sglang``)."""
    out: set[str] = set()
    for img in _api().images(name=repository):
        for rt in img.get("RepoTags") or ():
            repo, _, tag = rt.rpartition(":")
            if repo == repository and tag:
                out.add(tag)
    return sorted(out)


def require(ref: str) -> ImageInfo:
    """The local image ``ref`` names; ImageMissing (exit 9) when the engine has none."""
    info = inspect(ref)
    if info is None:
        raise ImageMissing(
            f"{ref}: no such image in the local engine",
            f"pull it first: sglforge inspect --pull {ref} (or docker pull {ref})",
        )
    return info


def repo_digests(image: str, ref: str) -> tuple[str, ...]:
    """Digests the local ``image`` has in the repository of ``ref`` (its RepoDigests)."""
    info = inspect(image)
    name = parse(ref).name
    if info is None:
        return ()
    return tuple(d for repo, _, d in (e.partition("@") for e in info.repo_digests) if repo == name)


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
    info = inspect(ref)
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
    text = run_python(ref, _SGLANG_PROBE, labels=labels, working_dir="/")
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


PROBE_TIMEOUT_ENV = "SGLFORGE_PROBE_TIMEOUT"


def run_python(
    ref: str,
    code: str,
    labels: Mapping[str, str] | None = None,
    timeout: float | None = None,
    *,
    args: Sequence[str] = (),
    working_dir: str | None = None,
) -> str:
    """Run ``python3 -c CODE ARGS`` in a throwaway container (no network); its output.

    ``working_dir`` overrides the image's WORKDIR (None keeps it). The run has one overall
    deadline, ``timeout`` (default ``$SGLFORGE_PROBE_TIMEOUT``, 120 s): a python3 that hangs
    is a BuildFailed naming the image, and its container is removed.
    """
    if timeout is None:
        timeout = env_seconds(PROBE_TIMEOUT_ENV, 120.0)
    c = client()
    all_labels = {LABEL: "1", "io.sglforge.role": "probe", **(labels or {})}
    # Named up front: a Ctrl-C between the engine creating it and `create` returning still
    # leaves a name to remove it by.
    name = f"sglforge-probe-{uuid.uuid4().hex[:12]}"
    container = None
    try:
        container = c.containers.create(
            ref,
            entrypoint=["python3", "-c", code],
            command=list(args),
            name=name,
            working_dir=working_dir,
            network_mode="none",
            labels=all_labels,
            detach=True,
        )
        container.start()
        try:
            result = container.wait(timeout=timeout)
        except requests.exceptions.RequestException:  # the engine's wait timed out
            raise BuildFailed(
                f"image {ref}: python3 did not finish within {timeout:g} s (a probe sglforge "
                "runs in it: python3 -c ...); its container was removed",
                f"check the image: docker run --rm --entrypoint python3 {ref} -c 'print(1)'; "
                f"or set {PROBE_TIMEOUT_ENV}=SECONDS",
            ) from None
        output = container.logs(stdout=True, stderr=True).decode(errors="replace")
    except docker.errors.DockerException as exc:
        raise BuildFailed(f"image {ref}: could not run python3 in it: {exc}") from exc
    finally:
        with signals_held() as arrived:
            containers.remove_named(container.id if container is not None else name, name)
        raise_held(arrived)
    if int(result.get("StatusCode", 1)) != 0:
        raise BuildFailed(
            f"image {ref}: python3 exited with {result.get('StatusCode')}: {_last_line(output)}",
            f"docker run --rm --entrypoint python3 {ref} --version",
        )
    return output


def build(
    context: bytes,
    tag: str,
    log_path: Path,
    labels: Mapping[str, str] | None = None,
    progress: Callable[[BuildStep], None] | None = None,
) -> str:
    """Build a plain-tar ``context`` (holding ``Dockerfile``) as ``tag``; the image ID.

    The engine's classic builder runs the steps; every line goes to ``log_path`` and each
    ``Step n/m`` to ``progress``. A failing step raises BuildFailed naming it, with the
    last lines of its output.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    image_id: str | None = None
    step: BuildStep | None = None
    tail: list[str] = []
    failure: str | None = None
    with open(log_path, "w", encoding="utf-8") as log:
        log.write(f"# sglforge build {tag} {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
        try:
            stream = _api().build(
                fileobj=io.BytesIO(context),
                custom_context=True,
                tag=tag,
                labels=dict(labels or {}),
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
                # RUN steps of an overlay never need the network.
                network_mode="none",
            )
            for event in stream:
                if "stream" in event:
                    for line in str(event["stream"]).splitlines():
                        log.write(line + "\n")
                        m = _STEP.match(line.strip())
                        if m:
                            step = BuildStep(int(m.group(1)), int(m.group(2)), m.group(3))
                            tail = []
                            if progress is not None:
                                progress(step)
                        elif line.strip():
                            tail = (tail + [line.rstrip()])[-20:]
                elif "aux" in event and isinstance(event["aux"], dict):
                    image_id = event["aux"].get("ID") or image_id
                elif "error" in event and failure is None:
                    # Read on to the end of the stream: that releases the engine connection.
                    failure = str(event.get("error", "")).strip()
                    log.write(f"ERROR: {failure}\n")
        except docker.errors.BuildError as exc:
            raise _step_failed(tag, step, str(exc), tail, log_path) from exc
        except docker.errors.APIError as exc:
            log.write(f"ERROR: {exc}\n")
            raise _step_failed(tag, step, str(exc.explanation or exc), tail, log_path) from exc
    if failure is not None:
        raise _step_failed(tag, step, failure, tail, log_path)
    if image_id is None:
        found = inspect(tag)
        if found is None:
            raise BuildFailed(f"build of {tag} produced no image", f"see {log_path}")
        image_id = found.id
    return image_id


def _step_failed(
    tag: str, step: BuildStep | None, message: str, tail: list[str], log_path: Path
) -> BuildFailed:
    where = f"step {step.n}/{step.total} ({step.instruction})" if step else "before the first step"
    last = "\n".join(f"    {ln}" for ln in tail[-8:])
    text = f"build of {tag} failed at {where}: {_first_line(message)}"
    if last:
        text += f"\n  last output:\n{last}"
    return BuildFailed(text, f"full log: {log_path}")


def buildx(
    args: Sequence[str],
    image: str,
    log_path: Path,
    progress: Callable[[BuildStep], None] | None = None,
) -> ImageInfo:
    """Run ``docker ARGS`` (a ``buildx build ... --load`` of ``image``); the image built.

    Every line goes to ``log_path`` and each BuildKit step to ``progress``. BuildFailed when
    buildx is not installed, when a step fails (naming it, with its last lines), or when the
    image is not on the engine afterwards.
    """
    docker_cli = shutil.which("docker")
    if (
        docker_cli is None
        or subprocess.run([docker_cli, "buildx", "version"], capture_output=True).returncode
    ):
        raise BuildFailed(
            "source mode needs `docker buildx` (upstream's rocm.Dockerfile uses BuildKit "
            "heredocs, which the engine's classic builder cannot run), and it is not installed",
            "install the buildx plugin (Debian: apt-get install docker-buildx), "
            "or use --mode overlay when no patch needs compiling",
        )
    cmd = [docker_cli, *args]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    tail: list[str] = []
    step: BuildStep | None = None
    with open(log_path, "w", encoding="utf-8") as log:
        log.write("# " + " ".join(["docker", *args]) + "\n")
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            tail = (tail + [line.rstrip()])[-20:]
            m = BUILDX_STEP.match(line.strip())
            if m and progress is not None:
                step = BuildStep(int(m.group(1)), int(m.group(2)), m.group(3))
                progress(step)
        rc = proc.wait()
    if rc != 0:
        where = f"step {step.n}/{step.total} ({step.instruction})" if step else "the start"
        last = "\n".join(f"    {ln}" for ln in tail[-8:])
        raise BuildFailed(
            f"docker buildx build of {image} failed at {where}\n  last output:\n{last}",
            f"full log: {log_path}",
        )
    info = inspect(image)
    if info is None:
        raise BuildFailed(
            f"docker buildx finished but {image} is not on the engine", f"full log: {log_path}"
        )
    return info


def pull(ref: str, creds: Credentials | None = None) -> ImageInfo:
    """Pull ``ref`` through the engine, reading every event; the image pulled.

    ``creds`` default to the login for its registry (environment or Docker config).
    ImageMissing when the registry has no such tag, RegistryError for other failures.
    """
    r = parse(ref)
    auth = creds.auth_config() if creds else auth_config(r.registry)
    error: str | None = None
    try:
        events = _api().pull(r.name, tag=r.tag, stream=True, decode=True, auth_config=auth)
        for event in events:  # read to the end, as in push
            if isinstance(event, dict) and ("error" in event or "errorDetail" in event):
                error = error or scrub(str(event.get("error")), creds)
    except docker.errors.APIError as exc:
        text = scrub(str(exc.explanation or exc), creds)
        if exc.status_code == 404 or re.search(r"manifest unknown|not found", text, re.I):
            raise ImageMissing(f"pull {ref}: {text}", f"check the tag: docker pull {ref}") from None
        if exc.status_code in (401, 403) or re.search(r"unauthorized|denied", text, re.I):
            raise RegistryAuthRefused(f"pull {ref}: {text}", f"docker login {r.registry}") from None
        raise RegistryError(f"pull {ref}: {text}", f"docker pull {ref}") from None
    if error:
        if re.search(r"manifest unknown|not found|does not exist", error, re.I):
            raise ImageMissing(f"pull {ref}: {error}", f"check the tag: docker pull {ref}")
        raise RegistryError(f"pull {ref}: {error}", f"check the registry: docker pull {ref}")
    info = inspect(ref)
    if info is None:
        raise EngineError(f"pull {ref}: the engine has no image after the pull")
    return info


def tag(image: str, ref: str) -> None:
    """Point ``ref`` at ``image`` (moving it if it existed)."""
    r = parse(ref)
    try:
        ok = _api().tag(image, r.name, r.tag, force=True)
    except docker.errors.APIError as exc:
        raise EngineError(f"could not tag {image} as {ref}: {exc.explanation or exc}") from None
    if not ok:
        raise EngineError(f"could not tag {image} as {ref}: the engine refused")


def remove(ref: str, force: bool = True) -> bool:
    """Remove a local image; False when it was not there."""
    try:
        _api().remove_image(ref, force=force)
    except docker.errors.ImageNotFound:
        return False
    except docker.errors.APIError as exc:
        if exc.status_code == 404:
            return False
        raise EngineError(f"could not remove image {ref}: {exc.explanation or exc}") from exc
    return True


def history(ref: str) -> list[Layer]:
    """The image's history, oldest first: each instruction and the bytes it added."""
    try:
        rows = _api().history(ref)
    except docker.errors.APIError as exc:
        raise EngineError(f"image {ref}: no history: {exc.explanation or exc}") from exc
    return [Layer(str(r.get("CreatedBy", "")), int(r.get("Size") or 0)) for r in reversed(rows)]


def managed_images(extra: Mapping[str, str] | None = None) -> list[str]:
    """IDs of the local images carrying sglforge's label (and ``extra`` labels)."""
    filters = [f"{LABEL}=1", *(f"{k}={v}" for k, v in (extra or {}).items())]
    return [img["Id"] for img in _api().images(filters={"label": filters})]


def _first_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[0].strip() if lines else "(no output)"


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "(no output)"


__all__ = [
    "BUILDX_STEP",
    "BuildStep",
    "ImageInfo",
    "Layer",
    "SglangInfo",
    "aiter_configs",
    "build",
    "buildx",
    "history",
    "inspect",
    "local_tags",
    "managed_images",
    "pull",
    "remove",
    "repo_digests",
    "require",
    "run_python",
    "sglang_info",
    "tag",
]


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
print("SGLFORGE-AITER " + json.dumps(out))
"""


def aiter_configs(ref: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Where image ``ref``'s aiter keeps its tuned tables, and their contents.

    ``{"root": None}`` when the image has no aiter. Keys otherwise: ``root``, ``configs_dir``,
    ``tuned_fmoe`` (text), ``untuned_fmoe_header``, ``model_configs`` ({name: text} of the
    ``*tuned_fmoe*`` files aiter merges).
    """
    text = run_python(ref, _AITER_PROBE, labels=labels, working_dir="/")
    line = next((ln for ln in text.splitlines() if ln.startswith("SGLFORGE-AITER ")), None)
    if line is None:
        raise BuildFailed(
            f"image {ref}: could not look for aiter: {_first_line(text)}",
            f"docker run --rm -w / {ref} python3 -c 'import importlib.util as u; "
            'print(u.find_spec("aiter"))\'',
        )
    data: dict[str, Any] = json.loads(line.removeprefix("SGLFORGE-AITER "))
    return data
