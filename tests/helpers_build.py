"""A synthetic sglang-like upstream and patch-queue project for the build tests and bench.

``make_build_project`` makes, in a temporary folder, a small upstream git repository laid
out like sglang (``python/sglang/...``, ``docker/rocm.Dockerfile``, ``sgl-kernel/``) tagged
``v0.5.14``, and a sglforge project whose queue is real ``git format-patch`` files: a python
fix, a JIT-kernel header fix, a new file and a deleted file. Its ``images/`` is the repo's,
with the base template pointed at the stand-in base images (TEST DOUBLES).
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from synthetic import commit, git

REPO_ROOT = Path(__file__).resolve().parents[1]
VERSION = "0.5.14"
PIN_URL = "https://github.com/sgl-project/sglang.git"
# Stand-in bases for the build tests live in their own repository so their tags never
# collide with the plain stand-in (tests/standin/base.py builds them).
STANDIN_REPO = "sglforge-standin/sglang-build"
# Files the release-image replica provides itself (its install, package root and server).
STANDIN_OWNED = (
    "python/pyproject.toml",
    "python/sglang/__init__.py",
    "python/sglang/version.py",
    "python/sglang/launch_server.py",
)

QUARK = "python/sglang/srt/layers/quantization/quark/quark.py"
CUH = "python/sglang/jit_kernel/csrc/fused_metadata_copy.cuh"
NEW_FILE = "python/sglang/srt/layers/quantization/quark/mtp_prefix.py"
OBSOLETE = "python/sglang/srt/utils/obsolete.py"
KERNEL = "sgl-kernel/csrc/moe/fused_moe.cu"


def _filler(name: str, size: int) -> str:
    # Deterministic, mostly incompressible-looking python so sizes mean something.
    out = [f'"""Synthetic module {name} (test data, not sglang code)."""\n']
    n = 0
    while sum(len(x) for x in out) < size:
        h = hashlib.sha256(f"{name}:{n}".encode()).hexdigest()
        out.append(f"CONST_{n} = '{h}'  # {h[:16]}\n")
        n += 1
    return "".join(out)


def upstream_files(n_models: int = 120) -> dict[str, str]:
    """The synthetic upstream tree at v0.5.14 (repository path -> text)."""
    files = {
        "README.md": "# sglang (synthetic test upstream)\n",
        "python/pyproject.toml": f'[project]\nname = "sglang"\nversion = "{VERSION}"\n',
        "python/sglang/__init__.py": "from sglang.version import __version__\n",
        "python/sglang/version.py": f'__version__ = "{VERSION}"\n',
        "python/sglang/launch_server.py": "raise SystemExit('synthetic')\n",
        QUARK: "\n".join(
            [
                '"""Quark quantization config (synthetic)."""',
                "",
                "def is_layer_excluded(prefix, exclude):",
                "    # Look the layer up in the exclude list as exported.",
                "    return prefix in exclude",
                "",
                *[f"HELPER_{i} = {i}" for i in range(30)],
                "",
            ]
        ),
        CUH: "\n".join(
            [
                "#pragma once",
                "#include <cuda_runtime.h>",
                "",
                *[f"// kernel line {i}" for i in range(30)],
                "",
            ]
        ),
        OBSOLETE: "def old():\n    return 1\n",
        "docker/rocm.Dockerfile": "FROM scratch AS local_src\nCOPY . /src\n",
        KERNEL: "// aot kernel\n" + "".join(f"// line {i}\n" for i in range(30)),
        "test/srt/test_quark.py": "def test_x():\n    assert True\n",
    }
    for i in range(n_models):
        files[f"python/sglang/srt/models/model_{i:03d}.py"] = _filler(f"model_{i}", 2000 + 97 * i)
    return files


@dataclass(frozen=True)
class Change:
    """One patch of the queue: a slug and an edit of the scratch checkout."""

    slug: str
    apply: Callable[[Path], None]


def _replace(rel: str, old: str, new: str) -> Callable[[Path], None]:
    def run(repo: Path) -> None:
        path = repo / rel
        text = path.read_text()
        assert old in text, f"{old!r} not in {rel}"
        path.write_text(text.replace(old, new, 1))

    return run


def _write(rel: str, text: str) -> Callable[[Path], None]:
    def run(repo: Path) -> None:
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)

    return run


def _delete(rel: str) -> Callable[[Path], None]:
    def run(repo: Path) -> None:
        (repo / rel).unlink()

    return run


DEFAULT_CHANGES = (
    Change(
        "mtp-quant-prefix",
        _replace(
            QUARK,
            "    return prefix in exclude",
            "    from sglang.srt.layers.quantization.quark.mtp_prefix import aliases\n"
            "    return any(p in exclude for p in aliases(prefix))",
        ),
    ),
    Change(
        "mtp-prefix-helper",
        _write(
            NEW_FILE,
            "def aliases(prefix):\n"
            "    # The MTP layer is built under model.decoder; exports name it layers.78.\n"
            "    return [prefix, prefix.replace('model.decoder.', 'model.layers.78.')]\n",
        ),
    ),
    Change(
        "rocm-guard-fused-metadata",
        _replace(
            CUH,
            "#include <cuda_runtime.h>",
            "#ifdef USE_ROCM\n#include <hip/hip_runtime.h>\n#else\n#include <cuda_runtime.h>\n"
            "#endif",
        ),
    ),
    Change("drop-obsolete-util", _delete(OBSOLETE)),
)
AOT_CHANGE = Change("moe-kernel-tweak", _replace(KERNEL, "// line 3\n", "// line 3 tuned\n"))


@dataclass(frozen=True)
class BuildProject:
    root: Path
    upstream: Path
    files: dict[str, str]  # the upstream tree at v0.5.14

    def base_files(self) -> dict[str, bytes]:
        """Upstream files for the stand-in base (minus those the stand-in provides)."""
        return {k: v.encode() for k, v in self.files.items() if k not in STANDIN_OWNED}


def make_build_project(
    tmp: Path,
    changes: tuple[Change, ...] = DEFAULT_CHANGES,
    base_template: str = f"{STANDIN_REPO}:v{{version}}-{{rocm}}-mi35x",
    n_models: int = 120,
    repository: str | None = None,
) -> BuildProject:
    """A synthetic upstream plus a sglforge project whose queue makes ``changes``.

    ``repository`` replaces where images are tagged: tests pass a unique one so that two
    tests (or sessions) building the same synthetic queue never share an image tag.
    """
    files = upstream_files(n_models)
    upstream = tmp / "upstream"
    upstream.mkdir(parents=True)
    git(upstream, "init", "-q", "-b", "main")
    for rel, text in files.items():
        (upstream / rel).parent.mkdir(parents=True, exist_ok=True)
        (upstream / rel).write_text(text)
    commit(upstream, f"release {VERSION}")
    git(upstream, "tag", f"v{VERSION}")

    root = tmp / "project"
    (root / "patches").mkdir(parents=True)
    (root / "patches" / "upstream.toml").write_text(f'url = "{PIN_URL}"\nref = "v{VERSION}"\n')
    shutil.copytree(REPO_ROOT / "images", root / "images")
    targets = root / "images" / "targets.toml"
    text = targets.read_text()
    for suffix in ("mi35x", "mi30x"):
        text = text.replace(
            f'base = "lmsysorg/sglang:v{{version}}-{{rocm}}-{suffix}"',
            f'base = "{base_template.replace("mi35x", suffix)}"',
        )
    if repository:
        text = text.replace('repository = "sglforge/sglang"', f'repository = "{repository}"')
    targets.write_text(text)

    scratch = tmp / "scratch"
    git(tmp, "clone", "-q", str(upstream), str(scratch))
    names = []
    for n, change in enumerate(changes, 1):
        change.apply(scratch)
        commit(scratch, f"{change.slug}\n\nWhy: build tests.\n\nUpstream-Status: Pending\n")
        text = git(scratch, "format-patch", "-1", "--stdout", "--zero-commit", "HEAD") + "\n"
        name = f"{n:04d}-{change.slug}.patch"
        (root / "patches" / name).write_text(text)
        names.append(name)
    (root / "patches" / "series").write_text("".join(f"{x}\n" for x in names))
    return BuildProject(root, upstream, files)
