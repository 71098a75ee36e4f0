"""Stand-in base images for the Docker tests: TEST DOUBLES, never published.

The real base images (``lmsysorg/sglang:v0.5.14-rocm700-mi35x``) are tens of gigabytes and cannot
be pulled here, so the tests build two small doubles with no network access inside Docker:

- ``sglforge-standin/debian:bookworm-python3``: Debian bookworm (debootstrap minbase plus
  python3) imported as an image.
- ``sglforge-standin/sglang:v{version}-rocm700-mi35x``: FROM the Debian double, a fake sglang
  laid out like the ROCm release images, which install sglang editable from
  ``/sgl-workspace/sglang``: repository path ``python/sglang/x.py`` lives at
  ``/sgl-workspace/sglang/python/sglang/x.py``. ``python3 -m sglang.launch_server`` runs the
  stand-in HTTP server (``tests/standin/server.py``).

Both carry ``io.sglforge.standin=1`` and a content-hash label; they are built once and reused
while the tag still carries the expected hash. They are deliberately NOT labelled
``io.sglforge.test=1`` so that the session cleanup keeps them for the next session; the
debootstrap result is also cached as a tarball so re-importing takes seconds.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import docker
import docker.errors

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVER_PY = Path(__file__).with_name("server.py")

DEBIAN_TAG = "sglforge-standin/debian:bookworm-python3"
SGLANG_REPO = "sglforge-standin/sglang"
DEFAULT_SGLANG_VERSION = "0.5.14"

# Where the editable install lives in the release images, and where Debian's python3 looks for
# packages pip installs as root (the release images install sglang the same way).
WORKSPACE = "/sgl-workspace/sglang"
PACKAGE_DIR = f"{WORKSPACE}/python/sglang"
SITE_PACKAGES = "/usr/local/lib/python3.11/dist-packages"

MANAGED = "io.sglforge.managed"
STANDIN = "io.sglforge.standin"
HASH_LABEL = "io.sglforge.standin.hash"
TEST = "io.sglforge.test"
SESSION = "io.sglforge.test.session"

# Bump when the recipe changes so cached images and tarballs are rebuilt.
RECIPE = "standin-v1"
DEBIAN_SUITE = "bookworm"
DEBIAN_INCLUDE = ("python3",)
# Trimmed after debootstrap: nothing in the tests reads docs, man pages, locales or apt lists.
TRIM = (
    "var/lib/apt/lists",
    "var/cache/apt",
    "var/log",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "usr/share/lintian",
    "usr/share/common-licenses",
)
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
    "PYTHONUNBUFFERED": "1",
}


def object_labels(session: str | None = None) -> dict[str, str]:
    """Labels every image and container a test creates must carry (plus an optional session)."""
    labels = {MANAGED: "1", TEST: "1"}
    if session:
        labels[SESSION] = session
    return labels


def new_session_id() -> str:
    """A short id that tags one pytest session's objects (so cleanup spares other sessions)."""
    return uuid.uuid4().hex[:12]


def cache_dir() -> Path:
    """The folder holding the debootstrap tarball: ``$SGLFORGE_STANDIN_CACHE``, else
    ``/var/cache/sglforge/standin`` (outside the repo so CI can keep it), else ``build/standin``."""
    given = os.environ.get("SGLFORGE_STANDIN_CACHE")
    candidates = [Path(given)] if given else []
    candidates += [Path("/var/cache/sglforge/standin"), REPO_ROOT / "build" / "standin"]
    for path in candidates:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(path, os.W_OK):
            return path
    raise RuntimeError(f"no writable stand-in cache folder among {candidates}")


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    # Several pytest sessions may share one machine and one engine: build each double once.
    with open(cache_dir() / f".{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _client(client: docker.DockerClient | None) -> docker.DockerClient:
    return client if client is not None else docker.from_env(timeout=600)


def _image_with_hash(client: docker.DockerClient, tag: str, digest: str) -> bool:
    try:
        image = client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return (image.labels or {}).get(HASH_LABEL) == digest


def debian_mirror() -> str:
    """The Debian mirror apt uses here (``$SGLFORGE_DEBIAN_MIRROR`` overrides)."""
    given = os.environ.get("SGLFORGE_DEBIAN_MIRROR")
    if given:
        return given
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.suffix == ".sources":
            # deb822 stanzas: URIs / Suites fields.
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"(?m)^(\w[\w-]*):\s*(.*)$", stanza))
                if DEBIAN_SUITE in fields.get("Suites", "").split():
                    return fields.get("URIs", "").split()[0]
        else:
            for line in text.splitlines():
                words = re.sub(r"\[[^]]*\]", "", line).split()
                if len(words) >= 3 and words[0] == "deb" and words[2] == DEBIAN_SUITE:
                    return words[1]
    return "http://deb.debian.org/debian"


def _debian_hash() -> str:
    recipe = {"recipe": RECIPE, "suite": DEBIAN_SUITE, "include": DEBIAN_INCLUDE, "trim": TRIM}
    recipe["env"] = BASE_ENV
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def _debootstrap_tarball(digest: str) -> Path:
    """Run debootstrap (once per recipe) and keep the trimmed root file system as a tarball."""
    tarball = cache_dir() / f"debian-{DEBIAN_SUITE}-{digest}.tar"
    if tarball.is_file():
        return tarball
    work = Path(tempfile.mkdtemp(prefix="debootstrap-", dir=cache_dir()))
    try:
        rootfs = work / "rootfs"
        cmd = [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(DEBIAN_INCLUDE)}",
            DEBIAN_SUITE,
            str(rootfs),
            debian_mirror(),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            log = rootfs / "debootstrap" / "debootstrap.log"
            tail = log.read_text()[-2000:] if log.is_file() else proc.stderr[-2000:]
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{tail}")
        for rel in TRIM:
            target = rootfs / rel
            if target.is_dir():
                for child in target.iterdir():
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child)
                    else:
                        child.unlink()
        # Docker provides /dev, /proc and /sys at run time; device nodes only get in the way.
        for rel in ("dev", "proc", "sys", "run", "tmp"):
            shutil.rmtree(rootfs / rel, ignore_errors=True)
            (rootfs / rel).mkdir(mode=0o1777 if rel == "tmp" else 0o755)
        partial = tarball.with_suffix(".tar.part")
        subprocess.run(
            ["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(partial), "."], check=True
        )
        os.replace(partial, tarball)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return tarball


def ensure_debian_base(client: docker.DockerClient | None = None) -> str:
    """Tag of the Debian bookworm + python3 stand-in (TEST DOUBLE), built on first use."""
    client = _client(client)
    digest = _debian_hash()
    with _locked("debian"):
        if _image_with_hash(client, DEBIAN_TAG, digest):
            return DEBIAN_TAG
        tarball = _debootstrap_tarball(digest)
        repo, tag = DEBIAN_TAG.rsplit(":", 1)
        changes = [f"ENV {k}={v}" for k, v in BASE_ENV.items()]
        changes += [
            f"LABEL {MANAGED}=1 {STANDIN}=1 {HASH_LABEL}={digest}",
            'LABEL org.opencontainers.image.description="sglforge test double: Debian '
            'bookworm minbase + python3"',
            'CMD ["python3"]',
        ]
        client.api.import_image_from_file(str(tarball), repository=repo, tag=tag, changes=changes)
        if not _image_with_hash(client, DEBIAN_TAG, digest):
            raise RuntimeError(f"docker import did not produce {DEBIAN_TAG} with {HASH_LABEL}")
        return DEBIAN_TAG


def _fake_sglang_files(version: str, server: bytes) -> dict[str, bytes]:
    """Files (by path inside the image) making up the fake editable sglang install."""
    init = (
        '"""sglforge TEST DOUBLE of the sglang package (not the real sglang)."""\n\n'
        "from sglang.version import __version__\n\n"
        '__all__ = ["__version__"]\n'
    )
    version_py = f'__version__ = "{version}"\n'
    dist = f"{SITE_PACKAGES}/sglang-{version}.dist-info"
    metadata = (
        f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n"
        "Summary: sglforge test double of sglang (not the real package)\n"
    )
    direct_url = json.dumps({"url": f"file://{WORKSPACE}/python", "dir_info": {"editable": True}})
    return {
        f"{PACKAGE_DIR}/__init__.py": init.encode(),
        f"{PACKAGE_DIR}/version.py": version_py.encode(),
        f"{PACKAGE_DIR}/launch_server.py": server,
        # An editable install is a .pth line pointing at the source tree, plus dist-info.
        f"{SITE_PACKAGES}/__editable__.sglang-{version}.pth": f"{WORKSPACE}/python\n".encode(),
        f"{dist}/METADATA": metadata.encode(),
        f"{dist}/INSTALLER": b"pip\n",
        f"{dist}/direct_url.json": direct_url.encode(),
        f"{dist}/top_level.txt": b"sglang\n",
    }


def _build_context(files: Mapping[str, bytes], dockerfile: str) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        entries = {"Dockerfile": dockerfile.encode()}
        entries.update({f"root{path}": data for path, data in files.items()})
        for name, data in sorted(entries.items()):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def ensure_sglang_base(
    version: str = DEFAULT_SGLANG_VERSION,
    tag: str | None = None,
    *,
    server_py: Path | None = None,
    files: Mapping[str, bytes] | None = None,
    client: docker.DockerClient | None = None,
) -> str:
    """Tag of a fake sglang ``version`` image (TEST DOUBLE) laid out like the ROCm releases.

    ``server_py`` (default ``tests/standin/server.py``) becomes ``sglang/launch_server.py``;
    ``files`` maps extra sglang repository paths (``python/sglang/srt/x.py``) to contents, placed
    under ``/sgl-workspace/sglang``. Pass a ``tag`` of your own when passing ``files``.
    """
    client = _client(client)
    tag = tag or f"{SGLANG_REPO}:v{version}-rocm700-mi35x"
    server_path = server_py or SERVER_PY
    if not server_path.is_file():
        raise FileNotFoundError(f"{server_path}: the stand-in sglang server is missing")
    content = _fake_sglang_files(version, server_path.read_bytes())
    for rel, data in (files or {}).items():
        content[f"{WORKSPACE}/{rel.lstrip('/')}"] = data
    base = ensure_debian_base(client)
    base_id = client.images.get(base).id
    dockerfile = (
        f"FROM {base}\n"
        "COPY root/ /\n"
        "ENV PYTHONUNBUFFERED=1\n"
        "WORKDIR /sgl-workspace\n"
        'CMD ["python3", "-m", "sglang.launch_server"]\n'
    )
    h = hashlib.sha256(f"{RECIPE}\0{version}\0{base_id}\0{dockerfile}\0".encode())
    for path, data in sorted(content.items()):
        h.update(f"{path}\0{len(data)}\0".encode() + data)
    digest = h.hexdigest()[:16]
    with _locked("sglang"):
        if _image_with_hash(client, tag, digest):
            return tag
        try:
            previous = client.images.get(tag).id
        except docker.errors.ImageNotFound:
            previous = None
        labels = {
            MANAGED: "1",
            STANDIN: "1",
            HASH_LABEL: digest,
            "io.sglforge.standin.sglang-version": version,
            "org.opencontainers.image.description": "sglforge test double of an sglang image",
        }
        started = time.monotonic()
        try:
            client.images.build(
                fileobj=_build_context(content, dockerfile),
                custom_context=True,
                tag=tag,
                labels=labels,
                rm=True,
                forcerm=True,
                network_mode="none",
            )
        except docker.errors.BuildError as exc:
            log = "".join(str(x.get("stream", x.get("error", ""))) for x in exc.build_log)
            raise RuntimeError(
                f"building {tag} failed after {time.monotonic() - started:.0f}s:\n{log[-2000:]}"
            ) from exc
        if previous:
            # The outdated double is now untagged; it stays if a container or image still uses it.
            with contextlib.suppress(docker.errors.APIError):
                client.images.remove(previous, noprune=False)
        return tag


def cleanup(client: docker.DockerClient, session: str | None = None) -> list[str]:
    """Remove containers then images labelled ``io.sglforge.test=1``; returns what went.

    With ``session``, remove everything of that session but, of unlabelled-session objects,
    only stopped containers and images no container uses (other sessions may be running).
    """
    removed: list[str] = []
    for container in client.containers.list(all=True, filters={"label": f"{TEST}=1"}):
        theirs = container.labels.get(SESSION)
        if session and theirs and theirs != session:
            continue
        if session and not theirs and container.status == "running":
            continue
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True, v=True)
            removed.append(f"container {container.short_id} {container.name}")
    for image in client.images.list(filters={"label": f"{TEST}=1"}):
        theirs = (image.labels or {}).get(SESSION)
        if session and theirs and theirs != session:
            continue
        force = not session or theirs == session
        for ref in image.tags or [image.id]:
            # An image in use by another session's container refuses removal: leave it.
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                client.images.remove(ref, force=force, noprune=False)
                removed.append(f"image {ref}")
    return removed
