"""The kernel scan's speed-ups hold its answers: the directive filter gives the preprocessor's
own verdict on sources that would fool a line filter, and the scan cache serves a unit only
while every file it read (and the defines) is unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglforge import cache as user_cache
from sglforge.scan import cache
from sglforge.scan.jit import DEFAULT_PASSES, Files, JitTree, directives_only, unit_scan
from sglforge.scan.jit_findings import includes
from sglforge.scan.jit_findings import unit_scan as cached_scan

ROOT = "python/sglang/jit_kernel"

# Sources where what looks like a directive is not one, or the reverse.
TRICKY = {
    "block-comment": "/* old:\n#include <cuda.h>\n*/\n#include <cuda_fp8.h>\n",
    "comment-before-hash": (
        "/* a */ #include <cuda_bf16.h>\nint x; /* open\n#include <cuda.h>\n*/\n"
    ),
    "code-line-spliced": "int y = 1 + \\\n#include <cuda.h>\n2;\n#include <cuda_fp4.h>\n",
    "string-holds-comment": (
        'const char* s = "/*";\n#include <cub/cub.cuh>\nconst char* t = "*/";\n'
    ),
    "raw-string": 'auto r = R"x(\n#include <cuda.h>\n)x";\n#include <cuda_pipeline.h>\n',
    "digit-separator": "int big = 1'000'000; /* x\n#include <cuda.h> */\n#include <nvrtc.h>\n",
    "spliced-directive": (
        "#if defined(USE_ROCM) && \\\n  defined(__CUDACC__)\n#else\n#include <cuda.h>\n#endif\n"
    ),
    "guard-in-define": (
        "#define NEED_CUDA \\\n  0\n#if NEED_CUDA\n#include <cuda.h>\n#endif\n"
        "#ifdef __HIPCC__ /* hip\n  build */\n#include <curand.h>\n#endif\n"
    ),
    "directive-opens-comment": (
        "#include <cuda_fp16.h> /* the half\ntype */\nint z;\n#include <cufft.h>\n"
    ),
}


def tree_with(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / ROOT / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path.resolve()


def found(tree: Path, unit: str, files: Files, passes=DEFAULT_PASSES) -> list[tuple[str, int, str]]:
    got = unit_scan(tree, JitTree(ROOT), f"{ROOT}/{unit}", passes, files)
    return [(Path(c.file).name, c.line, c.header) for c in got.found]


@pytest.mark.parametrize("case", sorted(TRICKY))
def test_the_directive_filter_keeps_the_preprocessors_verdict(tmp_path: Path, case: str) -> None:
    tree = tree_with(tmp_path, {"csrc/k.cuh": TRICKY[case]})
    whole = found(tree, "csrc/k.cuh", Files(directives=False))
    assert found(tree, "csrc/k.cuh", Files()) == whole
    assert whole, "every case has an active CUDA-only include the filter must not lose"


def test_a_spliced_line_comment_is_read_as_the_compiler_reads_it(tmp_path: Path) -> None:
    # Line splices come before comments (C phase 2, then 3): the #include after a comment
    # ending in a backslash is comment. pcpp alone reads it as a directive; the filter, as
    # clang does, does not.
    tree = tree_with(tmp_path, {"csrc/k.cuh": "// note \\\n#include <cuda.h>\n#include <mma.h>\n"})
    assert found(tree, "csrc/k.cuh", Files()) == [("k.cuh", 3, "mma.h")]


def test_the_filter_keeps_line_numbers_and_drops_code() -> None:
    text = "int a;\n#define X 1\nfloat b; // #include <cuda.h>\n  # if X\n#endif\n"
    out = directives_only(text)
    assert out.split("\n") == ["", "#define X 1", "", "  # if X", "#endif", ""]


def test_a_changed_header_or_define_is_scanned_again_the_rest_is_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SGLFORGE_CACHE", str(tmp_path / "cache"))
    guard = "#pragma once\n#ifndef USE_ROCM\n#include <cuda_runtime.h>\n#endif\n"
    tree = tree_with(
        tmp_path / "t",
        {
            "include/common.cuh": guard,
            "csrc/a.cuh": '#include "common.cuh"\n#include <cuda_fp8.h>\n',
            "csrc/b.cuh": "#include <cuda_bf16.h>\n",
        },
    )
    jt = JitTree(ROOT)

    def run() -> dict[str, bool]:
        files = Files()
        return {u: cached_scan(tree, jt, f"{ROOT}/csrc/{u}", files)[1] for u in ("a.cuh", "b.cuh")}

    assert run() == {"a.cuh": False, "b.cuh": False}  # computed
    assert run() == {"a.cuh": True, "b.cuh": True}  # served
    # a's header changes (its guard is gone): only a is preprocessed again, and sees it
    (tree / ROOT / "include/common.cuh").write_text("#pragma once\n#include <cuda_runtime.h>\n")
    assert run() == {"a.cuh": False, "b.cuh": True}
    seen = includes(tree)
    assert ("python/sglang/jit_kernel/include/common.cuh", 2, "cuda_runtime.h") in seen
    # a header appearing where the preprocessor looked (next to a.cuh) is a change too
    (tree / ROOT / "csrc/common.cuh").write_text("#pragma once\n")
    assert run() == {"a.cuh": False, "b.cuh": True}
    # the defines are in the key: another pass is another entry
    key = cache.unit_key(jt, f"{ROOT}/csrc/b.cuh", "x", DEFAULT_PASSES)
    other = cache.unit_key(jt, f"{ROOT}/csrc/b.cuh", "x", ({"USE_ROCM": "1"},))
    assert key != other
    # the entries are listed (and pruned) with the rest of the user cache
    kinds = {(e.kind, e.path.name) for e in user_cache.entries()}
    assert ("scan", "units") in kinds


def test_a_damaged_entry_is_a_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLFORGE_CACHE", str(tmp_path / "cache"))
    tree = tree_with(tmp_path / "t", {"csrc/a.cuh": "#include <cuda.h>\n"})
    jt = JitTree(ROOT)
    cached_scan(tree, jt, f"{ROOT}/csrc/a.cuh", Files())
    for entry in (tmp_path / "cache" / "scan" / "units").rglob("*.json"):
        entry.write_text("{not json")
    got, hit = cached_scan(tree, jt, f"{ROOT}/csrc/a.cuh", Files())
    assert not hit and [c.header for c in got.found] == ["cuda.h"]


def test_the_device_pass_runs_when_a_file_read_tests_its_macros(tmp_path: Path) -> None:
    # the device pass is skipped only where no file read names a macro it defines otherwise
    # (__HIP_DEVICE_COMPILE__, __gfx950__): here a header tests it, so it runs and finds
    tree = tree_with(
        tmp_path,
        {
            "include/arch.cuh": (
                "#pragma once\n#if defined(__gfx950__)\n#include <cuda_fp4.h>\n#endif\n"
            ),
            "csrc/k.cuh": (
                '#include "arch.cuh"\n#ifdef __HIP_DEVICE_COMPILE__\n#include <mma.h>\n#endif\n'
            ),
            "csrc/plain.cuh": "#include <cuda.h>\n",
        },
    )
    assert found(tree, "csrc/k.cuh", Files()) == [
        ("k.cuh", 3, "mma.h"),
        ("arch.cuh", 3, "cuda_fp4.h"),
    ]
    assert found(tree, "csrc/plain.cuh", Files()) == [("plain.cuh", 1, "cuda.h")]
    host_only = found(tree, "csrc/k.cuh", Files(), DEFAULT_PASSES[:1])
    assert host_only == []
