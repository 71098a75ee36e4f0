"""Stand-in base images: TEST DOUBLES, never published as GPU images.

The tests build them, and so does ``sglforge tryout`` (the walk-through on a machine without a
GPU). The real base images (``lmsysorg/sglang:v0.5.14-rocm700-mi35x``) are tens of gigabytes
and cannot be pulled here, so the tests build replicas with no network access inside Docker:

- ``sglforge-standin/debian:bookworm-python3``: Debian bookworm (debootstrap minbase plus
  python3, pip and git) imported as an image.
- ``sglforge-standin/sglang:v{version}-rocm700-mi35x``: a REPLICA of the sglang ROCm release
  image of that version, built the way upstream's ``docker/rocm.Dockerfile`` builds the real
  one, from the released code: the repository at ``/sgl-workspace/sglang`` (a git checkout
  at tag ``v{version}`` whose ``python/`` is the PyPI wheel's tree), installed with pip's
  real editable install (``pip install -e "python[all_hip]"``: a setuptools editable finder,
  setuptools-scm writing ``sglang/_version.py``), ``WORKDIR /sgl-workspace``,
  ``CMD ["/bin/bash"]``, upstream's runtime ENV.

The replica also carries aiter as the release images do: a checkout at
``/sgl-workspace/aiter`` installed editable the way ``docker/rocm.Dockerfile`` installs it
(``pip install --config-settings editable_mode=compat -e .``), its python tree and tuned-config
CSVs taken from the real ``amd-aiter`` wheel on PyPI (:func:`aiter_tree`).

Where the replica differs from the real image, on purpose: no torch/ROCm and no
dependencies in the pyproject; aiter (when present) without its compiled kernels, its
``aiter_meta/`` sources, or a ``setup.py`` build (see :func:`aiter_tree`);
``sglang/__init__.py`` trimmed (its imports need torch);
``sglang/launch_server.py`` is the stand-in server (``sglforge/data/standin/server.py``) so that
``python3 -m sglang.launch_server`` reaches it exactly as it would reach the real one;
Python 3.11 (Debian's) instead of 3.10. Tests that would fail if a difference mattered:
tests/docker/test_release_replica.py::test_the_trimmed_package_root_does_not_matter (a root
that imports torch, as the released one does, changes nothing for the probe, the build or its
self-check); tests/unit/test_selfcheck.py parses the in-image scripts as Python 3.10;
tests/docker/test_infra.py checks the install layout (finder, ``_version.py`` from the tag,
the WORKDIR namespace shadow) is upstream's.

A replica built with ``bench=True`` (tag suffix ``-bench``) also carries what the release image's
``python3 -m sglang.bench_serving`` imports, as the release image does (:func:`bench_deps`:
read from that release's wheel, its ``Requires-Dist`` and the modules bench_serving reaches,
with the versions the release pins where it pins one; :mod:`sglforge.standin.benchdeps`),
plus a small tokenizer for the stand-in model: GPT-2's, as the
``openai-whisper`` 20230124 source release on PyPI ships it (``whisper/assets/gpt2/``, byte for
byte), at :data:`STANDIN_TOKENIZER`. Differences from the release image, on purpose: torch is
the CPU build (the machine's ``torch==2.13.0+cpu`` wheel; the release pins 2.11 for ROCm), and
``torchvision`` is a STUB (:data:`TORCHVISION_STUB`): PyPI's torchvision wheels link the CUDA
torch, and ``sglang/srt/utils/common.py:92`` imports ``torchvision.io.decode_jpeg`` at import
time (and transformers 5.8.1 then imports a few more names): only those names are there, and
calling any function raises; the text datasets never decode an image. The test that would
fail if either mattered is the bench run itself (tests/docker/test_bench.py runs the real
bench_serving in the replica end to end). Where the release's bench_serving imports aiter at
import time on every platform (0.5.23: ``sglang/srt/layers/quantization/quark/utils.py:19-28``,
a ``try``/``except ImportError`` reached through ``srt/configs/model_config.py:34``), the
bench base also carries a SHIM (:data:`AITER_SHIM`, found by
:func:`sglforge.standin.benchdeps.import_sites`): aiter without ROCm raises RuntimeError from
its ROCm probe, where upstream's guard expects ImportError; the shim raises ImportError while
no ROCm is present, so sglang takes its own fallback (tests/unit/test_standin_benchdeps.py).
A bench base is refused at its build when ``python3 -m sglang.bench_serving --help`` does
not run in it (:func:`_check_bench_client`; issue 45, U19).

This module talks to the Docker SDK itself (it was the tests' builder, moved as it was): the
one place outside ``sglforge.engine`` that does.

Both carry ``io.sglforge.standin=1`` and a content-hash label; they are built once and reused
while the tag still carries the expected hash. They are deliberately NOT labelled
``io.sglforge.test=1`` so that the session cleanup keeps them for the next session; the
debootstrap result and the downloaded wheels are cached too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath

import docker
import docker.errors

from sglforge import git
from sglforge.errors import BuildError, LocalDiskError

# The stand-in sglang server: a program copied into the image, shipped as package data.
SERVER_PY = Path(__file__).resolve().parents[1] / "data" / "standin" / "server.py"

DEBIAN_TAG = "sglforge-standin/debian:bookworm-python3"
SGLANG_REPO = "sglforge-standin/sglang"
DEFAULT_SGLANG_VERSION = "0.5.14"

# Where the editable install lives in the release images, and where Debian's python3 looks for
# packages pip installs as root (the release images install sglang the same way).
WORKSPACE = "/sgl-workspace/sglang"
PACKAGE_DIR = f"{WORKSPACE}/python/sglang"
SITE_PACKAGES = "/usr/local/lib/python3.11/dist-packages"
AITER_WORKSPACE = "/sgl-workspace/aiter"
# The only amd-aiter release PyPI has (a pure-Python wheel with aiter/configs/*.csv).
AITER_VERSION = "0.1.7.post2.dev18"

# The build back-end of the editable install, pinned so the replica is reproducible; pip
# takes them from the build context (the build has no network).
BUILD_TOOLS = (
    "setuptools==84.2.1",
    "setuptools-scm==10.3.4",
    "vcs-versioning==2.6.0",
    "packaging==26.4",
    "wheel==0.48.0",
)
# The runtime ENV of upstream's docker/rocm.Dockerfile (final stage, gfx950 flavour).
RELEASE_ENV = {
    "GPU_ARCH": "gfx950",
    "GPU_ARCH_LIST": "gfx950",
    "PYTORCH_ROCM_ARCH": "gfx942;gfx950;gfx1250",
    "SGLANG_DISABLE_CUDNN_CHECK": "1",
    "HIP_FORCE_DEV_KERNARG": "1",
    "HSA_NO_SCRATCH_RECLAIM": "1",
    "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1",
    "SGLANG_INT4_WEIGHT": "0",
    "SGLANG_MOE_PADDING": "1",
    "SGLANG_ROCM_DISABLE_LINEARQUANT": "0",
    "SGLANG_ROCM_FUSED_DECODE_MLA": "1",
    "SGLANG_SET_CPU_AFFINITY": "1",
    "SGLANG_USE_AITER": "1",
    "SGLANG_USE_ROCM700A": "1",
    "NCCL_MIN_NCHANNELS": "112",
    "ROCM_QUICK_REDUCE_QUANTIZATION": "INT8",
    "TORCHINDUCTOR_MAX_AUTOTUNE": "1",
    "TORCHINDUCTOR_MAX_AUTOTUNE_POINTWISE": "1",
}

# What the release's bench_serving imports comes from the release itself, per version
# (bench_deps: its Requires-Dist and the modules bench_serving reaches; issue 45, U19).
# The small tokenizer: GPT-2's, shipped in openai-whisper's 20230124 source release.
TOKENIZER_SDIST = ("openai-whisper", "20230124")
TOKENIZER_MEMBER = "openai-whisper-20230124/whisper/assets/gpt2/"
STANDIN_TOKENIZER = "/opt/sglforge-standin/tokenizer"
_RAISES = (
    "def __getattr__(name):\n"
    '    if name.startswith("__"):\n'
    "        raise AttributeError(name)\n\n"
    "    def unavailable(*args, **kwargs):\n"
    '        raise NotImplementedError(f"sglforge replica: torchvision is a stub ({name})")\n\n'
    "    return unavailable\n"
)
# The STUB torchvision: the names sglang (srt/utils/common.py:92) and transformers 5.8.1
# (image_utils.py:54-56, image_processing_backends.py:74) import at import time; every function
# raises when called. Text benchmarks never call one.
TORCHVISION_STUB = {
    "__init__.py": (
        '"""STUB torchvision, sglforge replica (TEST DOUBLE): PyPI has only CUDA builds of\n'
        "torchvision and the replica's torch is the CPU build. Only what sglang and transformers\n"
        'import at import time is here; calling anything raises."""\n'
    ),
    "io.py": (
        "import enum\n\n\n"
        "class ImageReadMode(enum.Enum):\n"
        "    UNCHANGED = 0\n    GRAY = 1\n    GRAY_ALPHA = 2\n    RGB = 3\n    RGB_ALPHA = 4\n\n\n"
        + _RAISES
    ),
    "transforms/__init__.py": (
        "import enum\n\n\n"
        "class InterpolationMode(enum.Enum):\n"
        '    NEAREST = "nearest"\n    NEAREST_EXACT = "nearest-exact"\n'
        '    BILINEAR = "bilinear"\n    BICUBIC = "bicubic"\n    BOX = "box"\n'
        '    HAMMING = "hamming"\n    LANCZOS = "lanczos"\n'
    ),
    "transforms/functional.py": (
        "from torchvision.transforms import InterpolationMode  # noqa: F401\n\n\n" + _RAISES
    ),
    "transforms/v2/__init__.py": "",
    "transforms/v2/functional.py": (
        "from torchvision.transforms import InterpolationMode  # noqa: F401\n\n\n" + _RAISES
    ),
}

# The torchvision release paired with the replica's torch 2.13 (the stub's recorded version).
TORCHVISION_STUB_VERSION = "0.28.0"

# The CPU replica's aiter SHIM (TEST DOUBLE), installed only in a bench base whose release's
# bench_serving imports aiter at import time on every platform (benchdeps.import_sites; 0.5.23:
# sglang/srt/layers/quantization/quark/utils.py:19-28, reached through srt/configs/
# model_config.py:34 and srt/layers/quantization/__init__.py:44). No release image has it.
AITER_SHIM_MODULE = "sglforge_standin_aiter"
AITER_SHIM_PY = '''"""SHIM of sglforge's CPU stand-in (TEST DOUBLE); no release image has it.

aiter is installed here as in the release images (/sgl-workspace/aiter), but this image has no
ROCm. Importing aiter runs its ROCm probe (amd-aiter 0.1.7.post2.dev18: aiter/__init__.py:50 ->
aiter/jit/utils/cpp_extension.py:173 get_hip_version(): hipconfig, else RuntimeError "ROCm
version file not found"). sglang 0.5.23 imports aiter at import time on every platform inside
`try: ... except ImportError:` (sglang/srt/layers/quantization/quark/utils.py:19-28), reached
from sglang.bench_serving: upstream's own code expects an aiter that cannot load to raise
ImportError. While no ROCm is present (no hipconfig, no ROCM_HOME/ROCM_PATH, no /opt/rocm),
this finder turns that RuntimeError into ImportError, and sglang takes its own fallback. Any
other error, and every import on a machine with ROCm, is left as it is.
"""

import importlib.abc
import os
import shutil
import sys


def _rocm_present():
    homes = [os.environ.get("ROCM_HOME"), os.environ.get("ROCM_PATH"), "/opt/rocm"]
    return bool(shutil.which("hipconfig") or any(h and os.path.isdir(h) for h in homes))


class _Loader(importlib.abc.Loader):
    def __init__(self, inner):
        self._inner = inner

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        try:
            self._inner.exec_module(module)
        except RuntimeError as exc:
            for name in [n for n in sys.modules if n.startswith("aiter.")]:
                del sys.modules[name]
            raise ImportError(
                f"sglforge CPU stand-in: aiter cannot load without ROCm ({exc})", name="aiter"
            ) from exc


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "aiter" or _rocm_present():
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


sys.meta_path.insert(0, _Finder())
'''
AITER_SHIM = {
    f"{AITER_SHIM_MODULE}.py": AITER_SHIM_PY,
    # a .pth line starting with "import" runs at every interpreter start (site.py)
    "sglforge-standin-aiter.pth": f"import {AITER_SHIM_MODULE}\n",
}

MANAGED = "io.sglforge.managed"
STANDIN = "io.sglforge.standin"
HASH_LABEL = "io.sglforge.standin.hash"

# Bump when the recipe changes so cached images and tarballs are rebuilt.
RECIPE = "replica-v2"
DEBIAN_SUITE = "bookworm"
# pip and git: the replica installs sglang the way the release images do (pip's editable
# install, setuptools-scm reading the version from the git tag).
DEBIAN_INCLUDE = ("python3", "python3-pip", "git")
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


def cache_dir() -> Path:
    """The folder holding the debootstrap tarball: ``$SGLFORGE_STANDIN_CACHE``, else
    ``/var/cache/sglforge/standin`` (outside any checkout so CI can keep it), else the shared
    cache's ``standin/`` folder."""
    from sglforge.cache import cache_root

    given = os.environ.get("SGLFORGE_STANDIN_CACHE")
    candidates = [Path(given)] if given else []
    candidates += [Path("/var/cache/sglforge/standin"), cache_root() / "standin"]
    for path in candidates:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(path, os.W_OK):
            return path
    raise LocalDiskError(
        f"no writable stand-in cache folder: {', '.join(map(str, candidates))}",
        "make one writable, or name another: SGLFORGE_STANDIN_CACHE=/a/writable/folder",
    )


def _failed(what: str, output: str, log_name: str, hint: str) -> BuildError:
    """A BuildError for a step of a stand-in's build: ``what`` and the last line of the step's
    ``output`` on one line; the whole output kept in ``cache_dir()/logs/LOG_NAME.log`` (named
    in the hint), since a message is one or two lines."""
    from sglforge.errors import SglforgeError
    from sglforge.util import atomic_write

    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    last = lines[-1][:300] if lines else "no output"
    log = cache_dir() / "logs" / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', log_name)}.log"
    try:
        atomic_write(log, output)
    except (OSError, SglforgeError):
        return BuildError(f"{what}: {last}", hint)
    return BuildError(f"{what}: {last}", f"{hint}; the whole output: {log}")


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    # Several pytest sessions (and the suite's xdist workers) share one machine and one engine:
    # build each double once. One lock per name, so different doubles build side by side.
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
    with open(cache_dir() / f".{safe}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _say(message: str) -> None:
    """A step line through the reporter the command line installed (silent in tests)."""
    from sglforge import progress

    progress.current().info(message)


def needs_debootstrap(client: docker.DockerClient | None = None) -> bool:
    """Whether building the Debian stand-in would run debootstrap (root, a few minutes)."""
    digest = _debian_hash()
    if _image_with_hash(_client(client), DEBIAN_TAG, digest):
        return False
    return not (cache_dir() / f"debian-{DEBIAN_SUITE}-{digest}.tar").is_file()


def replica_ready(
    version: str = DEFAULT_SGLANG_VERSION,
    tag: str | None = None,
    *,
    bench: bool = False,
    client: docker.DockerClient | None = None,
) -> bool:
    """Whether the default replica (the stand-in server, aiter from the wheel) of ``version``
    is built and current; builds nothing (it may download the release wheel)."""
    client = _client(client)
    if not _image_with_hash(client, DEBIAN_TAG, _debian_hash()):
        return False
    tag = tag or f"{SGLANG_REPO}:v{version}-rocm700-mi35x" + ("-bench" if bench else "")
    deps, sites = (bench_deps(version), aiter_import_sites(version)) if bench else ((), ())
    dockerfile = _replica_dockerfile(DEBIAN_TAG, True, deps, sites)
    recipe = _Recipe(
        version, SERVER_PY.read_bytes(), {}, True, None, bench, dockerfile, deps, sites
    )
    return _image_with_hash(client, tag, recipe.digest(client.images.get(DEBIAN_TAG).id))


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
                    return str(fields.get("URIs", "").split()[0])
        else:
            for line in text.splitlines():
                words = re.sub(r"\[[^]]*\]", "", line).split()
                if len(words) >= 3 and words[0] == "deb" and words[2] == DEBIAN_SUITE:
                    return words[1]
    return "http://deb.debian.org/debian"


def _debian_hash() -> str:
    recipe: dict[str, object] = {
        "recipe": RECIPE,
        "suite": DEBIAN_SUITE,
        "include": DEBIAN_INCLUDE,
        "trim": TRIM,
    }
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
        _say(f"debootstrap {DEBIAN_SUITE} minbase from {cmd[-1]} (once; a few minutes)")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            log = rootfs / "debootstrap" / "debootstrap.log"
            raise _failed(
                f"debootstrap {DEBIAN_SUITE} (the stand-in {DEBIAN_TAG}) from {cmd[-1]} "
                f"failed ({proc.returncode})",
                log.read_text() if log.is_file() else proc.stderr,
                f"debootstrap-{DEBIAN_SUITE}",
                f"check the mirror answers: curl -fsI {cmd[-1]}/dists/{DEBIAN_SUITE}/Release "
                "(another: SGLFORGE_DEBIAN_MIRROR=URL), then run again",
            )
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
            raise BuildError(
                f"docker import of {tarball} did not produce {DEBIAN_TAG} "
                f"labelled {HASH_LABEL}={digest}",
                f"docker image inspect {DEBIAN_TAG}; rm {tarball} to take it afresh, "
                "then run again",
            )
        return DEBIAN_TAG


def release_wheel(version: str) -> Path:
    """sglang ``version``'s released wheel, in the cache sglforge's own ``pypi:sglang``
    upstream uses (one download, sha256 checked, serves both)."""
    return _pypi_wheel("sglang", version)


def aiter_wheel(version: str = AITER_VERSION) -> Path:
    """The ``amd-aiter`` wheel from PyPI, in the same cache."""
    return _pypi_wheel("amd-aiter", version)


def _pypi_wheel(project: str, version: str) -> Path:
    from sglforge import cache, pypi

    return Path(pypi.wheel(cache.pypi_cache(), project, version))


AITER_PYPROJECT = """\
# sglforge TEST DOUBLE: aiter's checkout installed editable without building its kernels.
# Upstream's setup.py needs torch and the ROCm compilers (it JIT/AOT-builds kernels); the
# replica has neither, so this file packages the same python tree with plain setuptools.
[build-system]
requires = ["setuptools>=61.0"]
build-backend = "setuptools.build_meta"

[project]
name = "amd-aiter"
version = "{version}"
requires-python = ">=3.8"
dependencies = []

[tool.setuptools.packages.find]
where = ["."]
include = ["aiter*"]

[tool.setuptools.package-data]
"*" = ["*.csv", "*.json", "*.txt", "*.md", "*.h", "*.cu", "*.cuh", "*.py"]
"""


def aiter_tree(dest: Path, version: str = AITER_VERSION) -> Path:
    """aiter's repository as ``/sgl-workspace/aiter`` holds it, from the PyPI wheel.

    ``aiter/`` (python code, ``aiter/configs/*.csv``, ``aiter/configs/model_configs/``) is the
    wheel's, byte for byte. Liberties: the wheel's ``aiter_meta/`` (C++/HIP sources, assembly
    kernels, 3rdparty, 170 MB) is left out and ``pyproject.toml`` replaces upstream's
    ``setup.py`` (which needs torch and hipcc). Neither matters to sglforge, which only reads
    and adds tuned-config CSVs under ``aiter/configs/``:
    tests/docker/test_aiter_configs.py::test_replica_aiter_is_the_wheels checks that the
    installed tree resolves to ``/sgl-workspace/aiter/aiter`` and that its configs are the
    wheel's bytes.
    """
    with zipfile.ZipFile(aiter_wheel(version)) as zf:
        for info in zf.infolist():
            if info.is_dir() or info.filename.split("/", 1)[0] != "aiter":
                continue
            target = dest / info.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(info))
    (dest / "pyproject.toml").write_text(AITER_PYPROJECT.format(version=version))
    return dest


# A ROCm/aiter a release image may build: 9127c94a18e4, pinned by sglang PR #29816 (after the
# v0.5.14 release; which aiter 0.5.14's image builds is not established, see
# docs/aiter-tuned-configs.md, "The image's aiter").
RELEASE_AITER_COMMIT = "9127c94a18e4398e1eba91f6639e910f0994ad02"
AITER_MIRROR = Path("/work/.mirror/ROCm+aiter/repo")


def aiter_clone() -> Path | None:
    """A ROCm/aiter clone to take a commit's tree from (``$SGLFORGE_AITER_REPO``, else the
    search tool's mirror), or None."""
    given = os.environ.get("SGLFORGE_AITER_REPO")
    path = Path(given) if given else AITER_MIRROR
    return path if path.is_dir() else None


def aiter_tree_at(dest: Path, commit: str, repo: Path | None = None) -> Path:
    """aiter's repository at ``commit`` as ``/sgl-workspace/aiter`` holds it: its ``aiter/``
    folder (python code and ``aiter/configs``), byte for byte, from a clone.

    Liberties as :func:`aiter_tree`: ``csrc/``, ``hsa/``, ``3rdparty/`` and the kernels' sources
    are left out and ``pyproject.toml`` replaces ``setup.py``; the version is ``0.0.0+g<commit>``.
    """
    import tarfile

    repo = repo or aiter_clone()
    if repo is None:
        raise FileNotFoundError("no ROCm/aiter clone: set SGLFORGE_AITER_REPO")
    with tempfile.TemporaryDirectory(prefix="sglforge-aiter-") as tmp:
        git.archive(repo, commit, "aiter", Path(tmp) / "aiter.tar")
        data = (Path(tmp) / "aiter.tar").read_bytes()
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")
    (dest / "pyproject.toml").write_text(AITER_PYPROJECT.format(version=f"0.0.0+g{commit[:9]}"))
    return dest


def build_tool_wheels() -> Path:
    """The build back-end pip needs for the editable install, as wheels (no network in Docker)."""
    folder = (
        cache_dir() / f"build-tools-{hashlib.sha256(repr(BUILD_TOOLS).encode()).hexdigest()[:12]}"
    )

    def complete() -> bool:
        return folder.is_dir() and len(list(folder.glob("*.whl"))) >= len(BUILD_TOOLS)

    if complete():
        return folder
    with _locked("build-tools"):
        if complete():  # made by another process while this one waited for the lock
            return folder
        partial = folder.with_name(folder.name + ".part")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        _pip_download(partial, list(BUILD_TOOLS), deps=False)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(partial, folder)
    return folder


def bench_deps(version: str) -> tuple[str, ...]:
    """What the replica of sglang ``version`` installs for its bench client, read from the
    release wheel (:func:`sglforge.standin.benchdeps.bench_requirements`)."""
    return _bench_client(version)[0]


def aiter_import_sites(version: str) -> tuple[str, ...]:
    """Where sglang ``version``'s bench_serving imports aiter at import time on every platform
    (``path:line`` in the release wheel; :func:`sglforge.standin.benchdeps.import_sites`): a
    bench base of a release with any carries :data:`AITER_SHIM`."""
    return _bench_client(version)[1]


@functools.cache
def _bench_client(version: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    # one walk of the release's modules for both (0.5.23's 500 take seconds to parse)
    from sglforge.standin.benchdeps import bench_client

    return bench_client(release_wheel(version))


def bench_wheels(deps: tuple[str, ...]) -> Path:
    """The wheels of ``deps`` (:func:`bench_deps`) and their dependencies (downloaded once)."""
    key = hashlib.sha256(repr(deps).encode()).hexdigest()[:12]
    folder = cache_dir() / f"bench-deps-{key}"
    if (folder / ".complete").is_file():
        return folder
    with _locked("bench-deps"):
        if (folder / ".complete").is_file():
            return folder
        partial = folder.with_name(folder.name + ".part")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        _pip_download(partial, list(deps), deps=True)
        (partial / ".complete").write_text("\n".join(deps) + "\n")
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(partial, folder)
    return folder


def standin_tokenizer(dest: Path) -> Path:
    """GPT-2's tokenizer files from openai-whisper's source release on PyPI, byte for byte."""
    import tarfile

    name, version = TOKENIZER_SDIST
    folder = cache_dir() / f"sdist-{name}-{version}"
    sdist = folder / f"{name}-{version}.tar.gz"
    if not sdist.is_file():
        with _locked("tokenizer"):
            if not sdist.is_file():
                # The file alone, from the index (sha256 checked): `pip download` of an sdist
                # runs its setup.py, code from the index, on this host (issue 42, F1).
                from sglforge import index

                listed = [f for f in index.files(name) if f.filename == sdist.name]
                if not listed:
                    raise BuildError(
                        f"{sdist.name} (the stand-in tokenizer's source) is not on the "
                        f"package index ({index.config().describe()})",
                        f"see what it lists: python3 -m pip index versions {name}",
                    )
                folder.mkdir(parents=True, exist_ok=True)
                index.download(listed[0], sdist, what=f"downloading {sdist.name}")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as tf:
        members = [m for m in tf.getmembers() if m.isfile() and m.name.startswith(TOKENIZER_MEMBER)]
        if not members:
            raise BuildError(
                f"{sdist}: no {TOKENIZER_MEMBER}* file in it (the stand-in tokenizer)",
                f"rm -r {folder} to download it afresh, then run again",
            )
        for member in members:
            data = tf.extractfile(member)
            assert data is not None
            (dest / member.name[len(TOKENIZER_MEMBER) :]).write_bytes(data.read())
    return dest


def _pip_download(dest: Path, requirements: list[str], deps: bool) -> None:
    _say(f"pip download {len(requirements)} requirement(s) into {dest.name}")
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary", ":all:"]
    cmd += ["--dest", str(dest), *(() if deps else ("--no-deps",)), *requirements]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        shown = ", ".join(requirements[:3]) + (
            f" and {len(requirements) - 3} more" * (len(requirements) > 3)
        )
        raise _failed(
            f"pip download of {shown} into {dest} failed ({proc.returncode})",
            f"$ {shlex.join(cmd)}\n{proc.stdout}{proc.stderr}",
            f"pip-download-{dest.name.removesuffix('.part')}",
            "the log's first line is the command: run it to see why, then run again",
        )


def _pyproject(describe: bool) -> str:
    """``python/pyproject.toml`` of the replica: upstream's build settings, no dependencies.

    The build-system, setuptools-scm table and package discovery follow upstream's
    ``python/pyproject.toml`` (read through the search tool; the wheel does not carry it). The
    dependency lists are left out on purpose: torch and the ROCm stack cannot be installed
    here, and nothing the tests run imports them. ``all_hip`` exists so the install line is
    upstream's own, ``pip install -e "python[all_hip]"``.
    """
    lines = [
        "# sglforge TEST DOUBLE: upstream's build settings for sglang's python/ folder,",
        "# without its dependencies (no torch/ROCm in the replica).",
        "[build-system]",
        'requires = ["setuptools>=61.0", "setuptools-scm>=8.0", "wheel"]',
        'build-backend = "setuptools.build_meta"',
        "",
        "[project]",
        'name = "sglang"',
        'dynamic = ["version"]',
        'requires-python = ">=3.10"',
        "dependencies = []",
        "",
        "[project.optional-dependencies]",
        "all_hip = []",
        "srt_hip = []",
        "",
        "[project.scripts]",
        'sglang = "sglang.cli.main:main"',
        "",
        "[tool.setuptools.packages.find]",
        'where = ["."]',
        'include = ["sglang*"]',
        "",
        "[tool.setuptools_scm]",
        'root = ".."',
        'version_file = "sglang/_version.py"',
    ]
    if describe:
        lines.append('git_describe_command = ["python3", "python/tools/get_version_tag.py"]')
    lines += [
        "# Allow editable installs even when .git metadata is not available.",
        'fallback_version = "0.0.0.dev0"',
        "",
    ]
    return "\n".join(lines)


TRIMMED_INIT = (
    '"""sglang package root, TRIMMED by sglforge\'s release-image replica (TEST DOUBLE).\n\n'
    "The released ``sglang/__init__.py`` imports the front-end language API, which needs torch;\n"
    "the replica has no torch, so only the version is exported. Every other file of the\n"
    "package is the released one.\n"
    '"""\n\n'
    "from sglang.version import __version__\n"
)


def replica_tree(
    version: str, dest: Path, server: bytes, files: Mapping[str, bytes] | None = None
) -> Path:
    """The sglang repository as the release image clones it: a git checkout at tag v<version>.

    ``python/`` is the released wheel's ``sglang/`` and ``tools/`` (the wheel's ``sglang/`` is
    the repository's ``python/sglang/``), with the replica's liberties: ``_version.py`` left
    for setuptools-scm to write (upstream does not track it), a trimmed ``__init__.py``, the
    stand-in server as ``launch_server.py``, and ``python/pyproject.toml`` (plus the
    ``pyproject_other.toml`` the ROCm Dockerfile copies over it). ``files`` adds or replaces
    repository paths.
    """
    wheel = release_wheel(version)
    python = dest / "python"
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            top = info.filename.split("/", 1)[0]
            if info.is_dir() or top not in ("sglang", "tools"):
                continue
            target = python / info.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(info))
            if (info.external_attr >> 16) & 0o111:
                target.chmod(0o755)
    (python / "sglang" / "_version.py").unlink(missing_ok=True)
    (python / "sglang" / "__init__.py").write_text(TRIMMED_INIT)
    (python / "sglang" / "launch_server.py").write_bytes(server)
    describe = (python / "tools" / "get_version_tag.py").is_file()
    pyproject = _pyproject(describe)
    (python / "pyproject.toml").write_text(pyproject)
    (python / "pyproject_other.toml").write_text(pyproject)
    (dest / ".gitignore").write_text("python/sglang/_version.py\n*.egg-info/\n__pycache__/\n")
    for rel, data in (files or {}).items():
        target = dest / rel.lstrip("/")
        if PurePosixPath(rel).parts[:2] == ("python", "pyproject.toml"):
            raise ValueError(f"{rel}: the replica owns python/pyproject.toml")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    who = {
        "GIT_AUTHOR_NAME": "sglforge replica",
        "GIT_AUTHOR_EMAIL": "replica@sglforge.invalid",
        "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
        "GIT_COMMITTER_NAME": "sglforge replica",
        "GIT_COMMITTER_EMAIL": "replica@sglforge.invalid",
        "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    }
    git.snapshot_folder(
        dest, f"sglang v{version} (released wheel, sglforge replica)", f"v{version}", who
    )
    return dest


_BENCH_LINES = (
    "# What sglang.bench_serving imports (see tests/standin/base.py: CPU torch, a stub\n"
    "# torchvision) and the stand-in's small tokenizer.\n"
    "COPY bench-wheels/ /tmp/sglforge-bench-wheels/\n"
    "RUN python3 -m pip install --no-cache-dir --no-index \\\n"
    "      --find-links /tmp/sglforge-bench-wheels {deps} \\\n"
    " && rm -rf /tmp/sglforge-bench-wheels\n"
    f"COPY torchvision/ {SITE_PACKAGES}/torchvision/\n"
    # the stub's version, as pip would record it: transformers >= 5.19 parses it at import
    f"RUN mkdir -p {SITE_PACKAGES}/torchvision-{TORCHVISION_STUB_VERSION}.dist-info \\\n"
    f" && printf 'Metadata-Version: 2.1\\nName: torchvision\\nVersion: "
    f"{TORCHVISION_STUB_VERSION}\\n' > "
    f"{SITE_PACKAGES}/torchvision-{TORCHVISION_STUB_VERSION}.dist-info/METADATA\n"
    f"COPY tokenizer/ {STANDIN_TOKENIZER}/\n"
)


def _shim_lines(sites: tuple[str, ...]) -> str:
    where = "".join(f"#   {site}\n" for site in sites)
    return (
        "# SHIM (TEST DOUBLE, see sglforge_standin_aiter.py): this release's bench_serving\n"
        f"# imports aiter at import time on every platform (except ImportError):\n{where}"
        f"COPY aiter-shim/ {SITE_PACKAGES}/\n"
    )


def _replica_dockerfile(
    debian: str,
    aiter: bool = False,
    bench: tuple[str, ...] = (),
    aiter_sites: tuple[str, ...] = (),
) -> str:
    """The replica's Dockerfile; ``bench``: the bench client's requirements (none: no bench);
    ``aiter_sites``: where its bench_serving imports aiter (the shim, with aiter and bench)."""
    env = " \\\n    ".join(f"{k}={v}" for k, v in RELEASE_ENV.items())
    # docker/rocm.Dockerfile clones aiter to /sgl-workspace/aiter and installs it with
    # `pip install --config-settings editable_mode=compat -e .` (a .pth pointing at the checkout).
    aiter_lines = (
        (
            f"COPY aiter/ {AITER_WORKSPACE}/\n"
            f"RUN cd {AITER_WORKSPACE} \\\n"
            " && python3 -m pip install --no-cache-dir --no-index \\\n"
            "      --find-links /tmp/sglforge-build-tools \\\n"
            "      --config-settings editable_mode=compat -e . \\\n"
            " && rm -rf /tmp/sglforge-build-tools\n"
        )
        if aiter
        else ""
    )
    # Without aiter the recipe is byte-identical to before (cached replicas stay valid).
    sglang_end = "\n" + aiter_lines if aiter else " \\\n && rm -rf /tmp/sglforge-build-tools\n"

    return (
        f"FROM {debian}\n"
        "# sglforge TEST DOUBLE of an sglang ROCm release image (docker/rocm.Dockerfile, no\n"
        "# torch/ROCm): the repository at /sgl-workspace/sglang, pip's editable install.\n"
        # The release images' Python has no PEP 668 marker; Debian's does.
        "RUN rm -f /usr/lib/python3*/EXTERNALLY-MANAGED\n"
        "WORKDIR /sgl-workspace\n"
        "COPY sglang/ /sgl-workspace/sglang/\n"
        "COPY wheels/ /tmp/sglforge-build-tools/\n"
        "RUN cd sglang \\\n"
        " && cp python/pyproject_other.toml python/pyproject.toml \\\n"
        " && python3 -m pip install --no-cache-dir --no-index \\\n"
        '      --find-links /tmp/sglforge-build-tools -e "python[all_hip]"'
        f"{sglang_end}"
        f"ENV {env}\n"
        + (_BENCH_LINES.format(deps=" ".join(f"'{d}'" for d in bench)) if bench else "")
        + (_shim_lines(aiter_sites) if aiter and bench and aiter_sites else "")
        + 'CMD ["/bin/bash"]\n'
    )


def _context_dir(
    tree: Path,
    wheels: Path,
    dockerfile: str,
    into: Path,
    aiter: bool = False,
    aiter_commit: str | None = None,
    bench: tuple[str, ...] = (),
    aiter_sites: tuple[str, ...] = (),
) -> Path:
    into.mkdir(parents=True)
    (into / "Dockerfile").write_text(dockerfile)
    shutil.copytree(tree, into / "sglang", symlinks=True)
    shutil.copytree(wheels, into / "wheels")
    if aiter and aiter_commit:
        aiter_tree_at(into / "aiter", aiter_commit)
    elif aiter:
        aiter_tree(into / "aiter")
    if bench:
        shutil.copytree(bench_wheels(bench), into / "bench-wheels")
        for rel, text in TORCHVISION_STUB.items():
            (into / "torchvision" / rel).parent.mkdir(parents=True, exist_ok=True)
            (into / "torchvision" / rel).write_text(text)
        standin_tokenizer(into / "tokenizer")
        if aiter and aiter_sites:
            (into / "aiter-shim").mkdir()
            for name, text in AITER_SHIM.items():
                (into / "aiter-shim" / name).write_text(text)
    return into


def ensure_sglang_base(
    version: str = DEFAULT_SGLANG_VERSION,
    tag: str | None = None,
    *,
    server_py: Path | None = None,
    files: Mapping[str, bytes] | None = None,
    client: docker.DockerClient | None = None,
    aiter: bool = True,
    aiter_commit: str | None = None,
    bench: bool = False,
) -> str:
    """Tag of the replica of sglang ``version``'s ROCm release image (TEST DOUBLE).

    Built the way upstream's ``docker/rocm.Dockerfile`` builds the real image, from the
    released code: the repository (the PyPI wheel's tree, see :func:`replica_tree`) at
    ``/sgl-workspace/sglang``, ``pip install -e "python[all_hip]"`` with setuptools-scm
    writing ``sglang/_version.py`` from the git tag, ``WORKDIR /sgl-workspace``,
    ``CMD ["/bin/bash"]``, upstream's runtime ENV. ``server_py`` (default
    ``sglforge/data/standin/server.py``) becomes ``sglang/launch_server.py``; ``files`` maps extra
    repository paths (``python/sglang/srt/x.py``) to contents. Pass a ``tag`` of your own
    when passing ``files``. ``aiter`` (default True, as in every release image) installs aiter
    at ``/sgl-workspace/aiter`` from the PyPI wheel, editable: the build puts the queue's config
    items where it merges them, so a replica without it cannot take the real queue.
    ``aiter=False`` gives the older aiter-less replica (default tag suffix ``-noaiter``).
    ``aiter_commit`` (e.g. :data:`RELEASE_AITER_COMMIT`, a pin of the release images) takes
    aiter's tree from a ROCm/aiter clone at that commit instead of the wheel (:func:`aiter_tree_at`;
    tag suffix ``-aiter<commit[:12]>``).
    ``bench=True`` adds what ``sglang.bench_serving`` needs and the stand-in tokenizer (default
    tag suffix ``-bench``; see the module docstring).
    """
    client = _client(client)
    suffix = "" if aiter else "-noaiter"
    if aiter and aiter_commit:
        suffix = f"-aiter{aiter_commit[:12]}"
    suffix += "-bench" if bench else ""
    tag = tag or f"{SGLANG_REPO}:v{version}-rocm700-mi35x{suffix}"
    server_path = server_py or SERVER_PY
    if not server_path.is_file():
        raise FileNotFoundError(f"{server_path}: the stand-in sglang server is missing")
    base = ensure_debian_base(client)
    deps, sites = (bench_deps(version), aiter_import_sites(version)) if bench else ((), ())
    recipe = _Recipe(
        version,
        server_path.read_bytes(),
        dict(files or {}),
        aiter,
        aiter_commit,
        bench,
        _replica_dockerfile(base, aiter, deps, sites),
        deps,
        sites,
    )
    digest = recipe.digest(client.images.get(base).id)
    with _locked(f"sglang-{tag}"):
        if _image_with_hash(client, tag, digest):
            return tag
        try:
            previous = client.images.get(tag).id
        except docker.errors.ImageNotFound:
            previous = None
        _build_replica(client, tag, recipe, digest)
        if previous:
            # The outdated double is now untagged; it stays if a container or image still uses it.
            with contextlib.suppress(docker.errors.APIError):
                client.images.remove(previous, noprune=False)
        return tag


@dataclasses.dataclass(frozen=True)
class _Recipe:
    """What a replica is built from; its digest names the build (the image's hash label)."""

    version: str
    server: bytes
    files: dict[str, bytes]
    aiter: bool
    aiter_commit: str | None
    bench: bool
    dockerfile: str
    deps: tuple[str, ...] = ()  # the bench client's requirements (bench_deps)
    aiter_sites: tuple[str, ...] = ()  # where bench_serving imports aiter (aiter_import_sites)

    def digest(self, base_id: str) -> str:
        wheel = release_wheel(self.version)
        tools = build_tool_wheels()
        h = hashlib.sha256(f"{RECIPE}\0{self.version}\0{base_id}\0{self.dockerfile}\0".encode())
        if self.aiter and self.aiter_commit:
            h.update(f"aiter@{self.aiter_commit}".encode() + AITER_PYPROJECT.encode())
        elif self.aiter:
            h.update(aiter_wheel().name.encode() + AITER_PYPROJECT.encode())
        h.update(hashlib.sha256(wheel.read_bytes()).digest() + hashlib.sha256(self.server).digest())
        for whl in sorted(tools.glob("*.whl")):
            h.update(whl.name.encode() + b"\0")
        for path, data in sorted(self.files.items()):
            h.update(f"{path}\0{len(data)}\0".encode() + data)
        if self.bench:
            h.update(f"{self.deps}{TOKENIZER_SDIST}{sorted(TORCHVISION_STUB.items())}".encode())
        if self.bench and self.aiter and self.aiter_sites:  # older recipes hash as before
            h.update(f"{self.aiter_sites}{sorted(AITER_SHIM.items())}".encode())
        return h.hexdigest()[:16]


def _build_replica(client: docker.DockerClient, tag: str, recipe: _Recipe, digest: str) -> None:
    labels = {
        MANAGED: "1",
        STANDIN: "1",
        HASH_LABEL: digest,
        "io.sglforge.standin.sglang-version": recipe.version,
        **(
            {"io.sglforge.standin.aiter-commit": recipe.aiter_commit} if recipe.aiter_commit else {}
        ),
        "org.opencontainers.image.description": (
            "sglforge test double: replica of an sglang ROCm release image "
            "(released code, upstream's install; no torch/ROCm)"
        ),
    }
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="replica-", dir=cache_dir()) as tmp:
        tree = replica_tree(recipe.version, Path(tmp) / "tree", recipe.server, recipe.files)
        context = _context_dir(
            tree,
            build_tool_wheels(),
            recipe.dockerfile,
            Path(tmp) / "context",
            recipe.aiter,
            recipe.aiter_commit,
            recipe.deps,
            recipe.aiter_sites,
        )
        _say(f"docker build {tag} (no network inside; the stand-in server as launch_server.py)")
        try:
            client.images.build(
                path=str(context),
                tag=tag,
                labels=labels,
                rm=True,
                forcerm=True,
                network_mode="none",
            )
        except docker.errors.BuildError as exc:
            log = "".join(str(x.get("stream", x.get("error", ""))) for x in exc.build_log)
            raise _failed(
                f"docker build {tag} (a stand-in) failed after {time.monotonic() - started:.0f}s",
                log or str(exc),
                f"docker-build-{tag}",
                "the failing step is the log's last; fix it, then run again",
            ) from exc
    if recipe.bench:
        _check_bench_client(client, tag)


def _check_bench_client(client: docker.DockerClient, tag: str) -> None:
    """A bench base whose ``bench_serving`` cannot start is refused at its build, not at the
    first bench (issue 45, U19): the image is removed and its last error line named."""
    _say(f"{tag}: python3 -m sglang.bench_serving --help (the bench client starts)")
    cmd = ["python3", "-m", "sglang.bench_serving", "--help"]
    try:
        client.containers.run(
            tag, cmd, remove=True, network_mode="none", labels={MANAGED: "1", STANDIN: "1"}
        )
    except docker.errors.ContainerError as exc:
        err = exc.stderr.decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else ""
        last = next((ln for ln in reversed(err.splitlines()) if ln.strip()), "no output")
        with contextlib.suppress(docker.errors.APIError):
            client.images.remove(tag, force=True)
        raise BuildError(
            f"{tag}: {' '.join(cmd)} exited {exc.exit_status}: {last.strip()} "
            "(the bench client cannot start in it: the image was removed)",
            "its dependencies come from sglforge.standin.benchdeps: report this error "
            "with `sglforge --version`",
        ) from exc
