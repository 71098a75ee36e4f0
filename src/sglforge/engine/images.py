"""Local images on the Docker engine: inspect, build, pull, tag, remove.

Owns every image-level call sglforge makes: inspecting (one :class:`ImageInfo`, or
ImageMissing), building from an in-memory context with the engine's classic builder or from
a folder with ``docker buildx`` (the one Docker call made through the CLI: upstream's
``rocm.Dockerfile`` needs BuildKit), pulling and tagging. Running a throwaway container in an
image is :mod:`sglforge.engine.containers`'s job, asking a registry
:mod:`sglforge.engine.registry`'s.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors

from sglforge.engine import LABEL, client
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
    env: tuple[str, ...] = ()  # the config's Env, NAME=value each

    @property
    def digest(self) -> str | None:
        """The registry digest (``sha256:...``) of this image in the repository ``ref`` names,
        when it came from or went to that repository; None otherwise.

        Only that repository's entry counts: an image the engine also knows under another
        name (a local build pushed to a test registry, a base retagged for a mirror) carries
        that name's digest too, and ``ref@<that digest>`` would send a FROM or a pull to the
        other registry. An image ID or a malformed ``ref`` has no repository: None.
        """
        return next(iter(digests_in(self.repo_digests, self.ref)), None)


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
        env=tuple(str(e) for e in cfg.get("Env") or ()),
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
    if info is None:
        return ()
    return digests_in(info.repo_digests, ref)


def digests_in(entries: Sequence[str], ref: str) -> tuple[str, ...]:
    """The digests of RepoDigests ``entries`` (``name@sha256:...``) in ``ref``'s repository."""
    try:
        name = parse(ref, allow_digest=True).name
    except BadReference:
        return ()
    return tuple(d for repo, _, d in (e.partition("@") for e in entries) if repo == name and d)


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
    """Pull ``ref`` (``REPO:TAG`` or ``REPO[:TAG]@sha256:...``) through the engine, reading
    every event; the image pulled.

    A digest wins over a tag: the engine fetches that manifest (the Engine API's ``tag``
    parameter takes a digest) and the image is then named ``REPO@sha256:...``, which is what
    a runner without the image locally needs for a release it only knows by digest.
    ``creds`` default to the login for its registry (environment or Docker config); they are
    never put in a message. ImageMissing when the registry has no such tag or digest,
    RegistryAuthRefused for a refused login, RegistryError for other failures.
    """
    r = parse(ref, allow_digest=True)
    wanted = f"{r.name}@{r.digest}" if r.digest else f"{r.name}:{r.tag}"
    auth = creds.auth_config() if creds else auth_config(r.registry)
    error: str | None = None
    check = "the digest" if r.digest else "the tag"
    try:
        events = _api().pull(
            r.name, tag=r.digest or r.tag, stream=True, decode=True, auth_config=auth
        )
        for event in events:  # read to the end, as in push
            if isinstance(event, dict) and ("error" in event or "errorDetail" in event):
                error = error or scrub(str(event.get("error")), creds)
    except docker.errors.APIError as exc:
        text = scrub(str(exc.explanation or exc), creds)
        if exc.status_code == 404 or re.search(r"manifest unknown|not found", text, re.I):
            raise ImageMissing(
                f"pull {wanted}: {text}", f"check {check}: docker pull {wanted}"
            ) from None
        if exc.status_code in (401, 403) or re.search(r"unauthorized|denied", text, re.I):
            raise RegistryAuthRefused(
                f"pull {wanted}: {text}", f"docker login {r.registry}"
            ) from None
        raise RegistryError(f"pull {wanted}: {text}", f"docker pull {wanted}") from None
    if error:
        if re.search(r"manifest unknown|not found|does not exist", error, re.I):
            raise ImageMissing(f"pull {wanted}: {error}", f"check {check}: docker pull {wanted}")
        if re.search(r"unauthorized|denied|authentication required", error, re.I):
            raise RegistryAuthRefused(f"pull {wanted}: {error}", f"docker login {r.registry}")
        raise RegistryError(f"pull {wanted}: {error}", f"check the registry: docker pull {wanted}")
    info = inspect(wanted)
    if info is None:
        raise EngineError(f"pull {wanted}: the engine has no image after the pull")
    return info


def load(archive: bytes, ref: str) -> None:
    """Load a ``docker save``-format ``archive`` naming ``ref`` (every event read); BuildFailed
    naming the image when the engine refuses it (a base layer it lacks, a damaged archive)."""
    error: str | None = None
    try:
        for event in _api().load_image(archive):
            if isinstance(event, dict) and ("error" in event or "errorDetail" in event):
                error = error or str(event.get("error") or event.get("errorDetail"))
    except docker.errors.APIError as exc:
        error = str(exc.explanation or exc)
    if error is not None:
        raise BuildFailed(
            f"loading {ref} into the engine failed: {_first_line(error)}",
            "pull its base first (docker pull BASE@DIGEST), then rerun sglforge build",
        )


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


__all__ = [
    "BUILDX_STEP",
    "BuildStep",
    "ImageInfo",
    "Layer",
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
    "tag",
]
