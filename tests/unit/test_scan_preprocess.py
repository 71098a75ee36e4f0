"""cuda-only-jit's preprocessor pass on synthetic JIT trees: nested #if/#elif/#else, defined(),
macro values, guards defined in project headers, comments and #if 0 (regular expressions over
the lines would get every one of these wrong in one direction or the other)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglforge.scan.jit import JitTree, is_cuda_only, jit_trees, unit_scan

ROOT = "python/sglang/jit_kernel"


def tree_with(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / ROOT / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def active(tree: Path, unit: str = "csrc/k.cuh") -> list[tuple[str, int, str]]:
    found = unit_scan(tree, JitTree(ROOT), f"{ROOT}/{unit}").found
    return [(Path(c.file).name, c.line, c.header) for c in found]


# (source, the CUDA-only includes that stay active on ROCm: (line, header))
CASES: dict[str, tuple[str, list[tuple[int, str]]]] = {
    "unguarded": ("#pragma once\n#include <cuda_runtime.h>\n", [(2, "cuda_runtime.h")]),
    "ifndef-else": (
        "#ifndef USE_ROCM\n#include <cuda_runtime.h>\n#else\n"
        "#include <hip/hip_runtime.h>\n#endif\n",
        [],
    ),
    "elif-chain-rocm-first": (
        "#if defined(USE_ROCM)\n#include <hip/hip_fp8.h>\n#elif defined(__CUDACC__)\n"
        "#include <cuda_fp8.h>\n#else\n#include <cuda.h>\n#endif\n",
        [],
    ),
    "elif-chain-falls-through": (
        # ROCm defines neither of the first two: the #else branch is the one compiled.
        "#if defined(__CUDACC__)\n#include <cuda_fp8.h>\n#elif defined(__NVCC__)\n"
        "#include <cuda.h>\n#else\n#include <cooperative_groups.h>\n#endif\n",
        [(6, "cooperative_groups.h")],
    ),
    "nested-value-test": (
        # HIP_FP8_TYPE_E4M3 is 1 on gfx950, FNUZ undefined (0): the inner #elif is taken.
        "#ifdef USE_ROCM\n#if HIP_FP8_TYPE_FNUZ\n#include <hip/fnuz.h>\n#elif HIP_FP8_TYPE_E4M3\n"
        "#include <cuda_fp8.h>\n#else\n#include <cuda_bf16.h>\n#endif\n#endif\n",
        [(5, "cuda_fp8.h")],
    ),
    "nested-inactive-outer": (
        "#ifndef USE_ROCM\n#if 1\n#include <cub/cub.cuh>\n#elif 1\n#include <cuda.h>\n#endif\n"
        "#endif\n",
        [],
    ),
    "not-both-platforms": (
        "#if !defined(__HIP_PLATFORM_AMD__) && !defined(USE_ROCM)\n#include <cuda/ptx>\n#endif\n",
        [],
    ),
    "comment-and-if0": (
        "// #include <cuda.h>\n/* #include <cuda_runtime.h> */\n#if 0\n#include <cuda_fp16.h>\n"
        "#endif\n#include <cstdint>\n",
        [],
    ),
    "host-pass-only": (
        # The device pass defines __HIP_DEVICE_COMPILE__; the host pass still compiles it.
        "#ifdef __HIP_DEVICE_COMPILE__\n#include <hip/hip_runtime.h>\n#else\n"
        "#include <cuda_runtime_api.h>\n#endif\n",
        [(4, "cuda_runtime_api.h")],
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_guards_are_evaluated_by_the_preprocessor(tmp_path: Path, case: str) -> None:
    source, expected = CASES[case]
    tree = tree_with(tmp_path, {"csrc/k.cuh": source})
    assert active(tree) == [("k.cuh", line, header) for line, header in expected]


def test_a_guard_macro_defined_in_a_project_header_is_followed(tmp_path: Path) -> None:
    tree = tree_with(
        tmp_path,
        {
            "include/sgl_kernel/platform.h": "#pragma once\n#ifdef USE_ROCM\n#define SGL_ROCM 1\n"
            "#endif\n",
            "include/sgl_kernel/bad.cuh": "#pragma once\n\n#include <cuda_bf16.h>\n",
            "csrc/k.cuh": "#include <sgl_kernel/platform.h>\n#if !SGL_ROCM\n"
            "#include <cub/cub.cuh>\n#endif\n#include <sgl_kernel/bad.cuh>\n",
        },
    )
    # the header's own line is reported, reached from the kernel that includes it
    assert active(tree) == [("bad.cuh", 3, "cuda_bf16.h")]


def test_an_include_inside_a_guarded_header_include_is_not_reached(tmp_path: Path) -> None:
    tree = tree_with(
        tmp_path,
        {
            "include/sgl_kernel/cuda_only.cuh": "#pragma once\n#include <cooperative_groups.h>\n",
            "csrc/k.cuh": "#ifndef USE_ROCM\n#include <sgl_kernel/cuda_only.cuh>\n#endif\n",
        },
    )
    assert active(tree) == []


def test_cuda_only_headers_and_others() -> None:
    for h in ("cuda_runtime.h", "cuda.h", "cooperative_groups.h", "cuda_fp8.h", "cub/cub.cuh"):
        assert is_cuda_only(h), h
    for h in ("hip/hip_runtime.h", "cstdint", "sgl_kernel/utils.cuh", "tvm/ffi/function.h"):
        assert not is_cuda_only(h), h


def test_the_jit_trees_of_both_layouts_are_found(tmp_path: Path) -> None:
    for rel in ("python/sglang/jit_kernel", "python/sglang/kernels/jit"):
        (tmp_path / rel / "csrc").mkdir(parents=True)
    assert [j.rel for j in jit_trees(tmp_path)] == [
        "python/sglang/jit_kernel",
        "python/sglang/kernels/jit",
    ]
