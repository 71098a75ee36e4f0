"""Patch 0001 does what it claims on the real v0.5.14 header: ROCm gets the HIP runtime header.

How: the header is taken from sglang 0.5.14's released wheel (via sglforge.pypi), the queue is
applied with ``git apply``, and the C preprocessor runs on the header alone, with
``-nostdinc`` and a folder of stub headers (TEST DOUBLES) for every ``#include <...>`` it
names. The two runtime stubs each leave a marker in the output, so the output says which one
the header picked, with and without ``-DUSE_ROCM`` (what sglang's JIT loader passes on HIP).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from sglang_release import release_tree

pytestmark = pytest.mark.pypi

HEADER = "python/sglang/jit_kernel/csrc/elementwise/fused_metadata_copy.cuh"
CUDA_MARK = "sglforge_stub_picked_cuda_runtime"
HIP_MARK = "sglforge_stub_picked_hip_runtime"


def _preprocessor() -> list[str]:
    if shutil.which("cpp"):
        return ["cpp"]
    if shutil.which("gcc"):
        return ["gcc", "-E"]
    pytest.fail("no C preprocessor: install one (`apt-get install cpp`)", pytrace=False)


def _stubs(header: Path, folder: Path) -> Path:
    for name in re.findall(r"^\s*#\s*include\s*<([^>]+)>", header.read_text(), re.M):
        stub = folder / name
        stub.parent.mkdir(parents=True, exist_ok=True)
        stub.write_text("/* stub header (test double) */\n")
    (folder / "cuda_runtime.h").write_text(f"int {CUDA_MARK};\n")
    (folder / "hip").mkdir(exist_ok=True)
    (folder / "hip" / "hip_runtime.h").write_text(f"int {HIP_MARK};\n")
    return folder


def runtime_picked(header: Path, stubs: Path, *defines: str) -> set[str]:
    """Which runtime stub(s) the preprocessed header pulled in."""
    res = subprocess.run(
        [*_preprocessor(), "-nostdinc", "-x", "c++", "-P", "-I", str(stubs), *defines, str(header)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    return {name for name, mark in (("cuda", CUDA_MARK), ("hip", HIP_MARK)) if mark in res.stdout}


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("v0.5.14")
    return {
        "stock": release_tree(base / "stock", "0.5.14", patched=False),
        "patched": release_tree(base / "patched", "0.5.14", patched=True),
    }


def test_patched_header_includes_hip_runtime_on_rocm(
    trees: dict[str, Path], tmp_path: Path
) -> None:
    header = trees["patched"] / HEADER
    stubs = _stubs(header, tmp_path / "stubs")
    assert runtime_picked(header, stubs, "-DUSE_ROCM") == {"hip"}


def test_patched_header_still_includes_cuda_runtime_on_cuda(
    trees: dict[str, Path], tmp_path: Path
) -> None:
    header = trees["patched"] / HEADER
    stubs = _stubs(header, tmp_path / "stubs")
    assert runtime_picked(header, stubs) == {"cuda"}


def test_stock_header_includes_cuda_runtime_even_on_rocm(
    trees: dict[str, Path], tmp_path: Path
) -> None:
    # The bug the patch fixes: without it, a ROCm build asks for cuda_runtime.h.
    header = trees["stock"] / HEADER
    stubs = _stubs(header, tmp_path / "stubs")
    assert runtime_picked(header, stubs, "-DUSE_ROCM") == {"cuda"}


def test_the_patch_changes_nothing_else_in_the_header(trees: dict[str, Path]) -> None:
    stock = (trees["stock"] / HEADER).read_text().splitlines()
    patched = (trees["patched"] / HEADER).read_text().splitlines()
    added = [line for line in patched if line not in stock]
    assert added == ["#ifndef USE_ROCM", "#else", "#include <hip/hip_runtime.h>", "#endif"]
    assert [line for line in stock if line not in patched] == []
