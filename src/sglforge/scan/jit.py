"""Kind ``cuda-only-jit``: CUDA-only headers a JIT kernel includes when built for ROCm.

sglang compiles its JIT kernels at run time (``load_jit``: each ``cuda_files`` source is
``#include``d into a generated translation unit, compiled with the tree's
``include/`` on the include path). On ROCm that build defines ``-DUSE_ROCM`` and an fp8 flag
(``_get_default_target_flags``: python/sglang/jit_kernel/utils.py:377-390 at v0.5.14,
python/sglang/jit_kernel/utils/arch.py:74-88 at v0.5.16, python/sglang/kernels/jit/utils/
arch.py:131-145 at v0.5.23; tests/integration/test_scan.py runs that function of each of these
releases and compares) and hipcc predefines the HIP platform macros.

Every source of the JIT tree is preprocessed as its own translation unit with those macros by
a real C preprocessor (``pcpp``: ``#if``/``#elif``/``#else`` nesting, ``defined``, macro
expressions and project headers followed through the include path), and every ``#include``
that stays active and names a CUDA-only header is reported at the line of the directive.
System headers are not opened: a CUDA-only header is missing on ROCm by definition, the
others (the C++ library, hip/, tvm/ffi, dlpack) do not change which lines are active.

The preprocessor sees each file's directives only (``directives_only``): code lines cannot
define a macro, open a conditional or include a file, so they are blanked (line numbers kept)
before pcpp lexes them; that is 90 % of its work gone, and each file is read and filtered once
per scan (``Files``). Which files a unit read, with their git blob ids, is what the scan cache
(``scan.cache``) keys a unit's result on.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

# The JIT kernel trees of sglang releases, relative to the tree (the git repository's root):
# jit_kernel/ up to 0.5.16, kernels/jit/ from 0.5.17 on. Each has csrc/ (the kernel sources
# load_jit names) and include/ (DEFAULT_INCLUDE).
JIT_ROOTS = ("python/sglang/jit_kernel", "python/sglang/kernels/jit")
SOURCE_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc", ".cxx", ".inl")

# What the ROCm JIT build defines for gfx950 (MI355X): sglang's _get_default_target_flags
# (see the module docstring) ...
SGLANG_ROCM_FLAGS = {"USE_ROCM": "1", "HIP_FP8_TYPE_E4M3": "1"}
# ... and what hipcc (clang in HIP mode) predefines; __CUDACC__ and __CUDA_ARCH__ stay
# undefined, as they are on ROCm.
HIPCC_HOST = {
    "__HIP_PLATFORM_AMD__": "1",
    "__HIP_PLATFORM_HCC__": "1",
    "__HIPCC__": "1",
    "__HIP__": "1",
    "__clang__": "1",
    "__cplusplus": "202002L",
}
# The device pass of the same compile (hipcc runs one per offload target).
HIPCC_DEVICE = {**HIPCC_HOST, "__HIP_DEVICE_COMPILE__": "1", "__gfx950__": "1"}

# Headers that exist only in a CUDA toolkit (or CUDA-only libraries shipped with it).
CUDA_ONLY_EXACT = frozenset(
    {
        "cuda.h",
        "cuda_runtime.h",
        "cuda_runtime_api.h",
        "cooperative_groups.h",
        "cuda_fp8.h",
        "cuda_fp16.h",
        "cuda_bf16.h",
        "cuda_fp4.h",
        "cuda_fp6.h",
        "cuda_pipeline.h",
        "cuda_pipeline_primitives.h",
        "cuda_awbarrier.h",
        "cuda_awbarrier_primitives.h",
        "cudaTypedefs.h",
        "cuda_profiler_api.h",
        "device_launch_parameters.h",
        "mma.h",
        "nvrtc.h",
        "nvml.h",
        "cublas_v2.h",
        "cublasLt.h",
        "curand.h",
        "curand_kernel.h",
        "cusparse.h",
        "cufft.h",
    }
)
CUDA_ONLY_PREFIXES = ("cub/", "cuda/", "cooperative_groups/", "cute/", "cutlass/", "nvtx3/", "crt/")


def is_cuda_only(header: str) -> bool:
    name = header.strip()
    return name in CUDA_ONLY_EXACT or name.startswith(CUDA_ONLY_PREFIXES)


@dataclass(frozen=True)
class JitTree:
    """One JIT kernel tree of a release: its folder and include path, relative to the tree."""

    rel: str  # e.g. python/sglang/jit_kernel

    def sources(self, tree: Path) -> list[str]:
        """Every C/C++/CUDA source under csrc/ and include/, relative to the tree, sorted."""
        out = []
        for sub in ("csrc", "include"):
            base = tree / self.rel / sub
            for path in sorted(base.rglob("*")) if base.is_dir() else ():
                if path.suffix in SOURCE_SUFFIXES and path.is_file():
                    out.append(path.relative_to(tree).as_posix())
        return out


def jit_trees(tree: Path) -> list[JitTree]:
    """The JIT kernel trees this release has (none when it has no JIT kernels)."""
    return [JitTree(rel) for rel in JIT_ROOTS if (tree / rel / "csrc").is_dir()]


# One C/C++ lexical element the directive filter must not look inside: comments (blanked),
# string and character literals (kept). A raw string literal spanning lines keeps the file whole.
_LEXEMES = re.compile(
    r"""(?P<block>/\*.*?\*/|/\*.*\Z)"""
    r"""|(?P<line>//(?:[^\n\\]|\\.)*)"""
    r"""|(?P<raw>R"(?P<delim>[^()\\\s"]{0,16})\(.*?\)(?P=delim)")"""
    r"""|(?P<str>"(?:[^"\\\n]|\\.)*")"""
    r"""|(?P<chr>'(?:[^'\\\n]|\\[^\n][^'\n]{0,8})')""",
    re.S,
)


def _blank(match: re.Match[str]) -> str:
    if match.lastgroup in ("block", "line"):
        # a comment is whitespace; its newlines stay (line numbers) and so do line splices
        return re.sub(r"[^\n]", " ", match.group(0))
    return match.group(0)


def directives_only(text: str) -> str:
    """``text`` with every line that is not part of a preprocessing directive blanked and
    comments turned into spaces, line numbers kept: what the preprocessor acts on, unchanged
    (code lines define no macro and open no conditional or include)."""
    if any(m.lastgroup == "raw" and "\n" in m.group(0) for m in _LEXEMES.finditer(text)):
        return text  # a multi-line raw string could hold a line starting with '#'
    masked = _LEXEMES.sub(_blank, text).split("\n")
    out: list[str] = []
    i = 0
    while i < len(masked):
        j = i  # the physical lines of one logical line (backslash-newline splices)
        while j + 1 < len(masked) and masked[j].rstrip("\r").endswith("\\"):
            j += 1
        keep = masked[i].lstrip(" \t\f\v").startswith("#")
        out.extend(masked[i : j + 1] if keep else [""] * (j + 1 - i))
        i = j + 1
    return "\n".join(out)


def blob_id(data: bytes) -> str:
    """The git blob id of ``data`` (what ``git hash-object`` prints)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Files:
    """The files one scan reads, each read and filtered once: text for the preprocessor and
    git blob id (None: absent) by absolute path. ``directives=False`` hands the preprocessor
    whole files (what the filter is tested against)."""

    def __init__(self, directives: bool = True) -> None:
        self._read: dict[str, tuple[str, str] | None] = {}
        self._filter = directives

    def _load(self, path: str) -> tuple[str, str] | None:
        if path not in self._read:
            try:
                with open(path, "rb") as fh:
                    raw = fh.read()
            except OSError:  # absent, a folder, unreadable: not a file pcpp can open
                self._read[path] = None
            else:
                # as pcpp opens a file: universal newlines, a BOM dropped
                text = raw.decode("utf-8", errors="replace").removeprefix("\ufeff")
                text = text.replace("\r\n", "\n").replace("\r", "\n")
                self._read[path] = (directives_only(text) if self._filter else text, blob_id(raw))
        return self._read[path]

    def text(self, path: str) -> str:
        """The directives of ``path``; OSError when it is not a file."""
        got = self._load(path)
        if got is None:
            raise FileNotFoundError(path)
        return got[0]

    def blob(self, path: str) -> str | None:
        got = self._load(path)
        return None if got is None else got[1]


@dataclass(frozen=True)
class CudaInclude:
    """An active ``#include`` of a CUDA-only header, seen while preprocessing ``unit``."""

    file: str  # the file holding the directive, relative to the tree
    line: int
    header: str
    unit: str  # the translation unit it was reached from


def _preprocessor_class() -> type:
    from pcpp import Preprocessor
    from pcpp.parser import Action, OutputDirective

    class _Pass(Preprocessor):  # type: ignore[misc]
        """A pcpp pass that records active includes of CUDA-only headers and opens only the
        project's own headers (found on the include path or next to the including file)."""

        def __init__(
            self, tree: Path, include: Path, macros: Mapping[str, str], files: Files
        ) -> None:
            super().__init__()
            self.tree = tree
            self.files = files
            self.opened: set[str] = set()  # every path probed, found or not
            self.found: list[tuple[str, int, str]] = []
            self.errors: list[str] = []
            self.add_path(str(include))
            for name, value in macros.items():
                self.define(f"{name} {value}")

        def on_file_open(self, is_system_include, includepath):  # type: ignore[no-untyped-def]
            self.opened.add(includepath)
            return io.StringIO(self.files.text(includepath))

        def on_include_not_found(self, is_malformed, is_system_include, curdir, includepath):  # type: ignore[no-untyped-def]
            self._record(includepath)
            raise OutputDirective(Action.IgnoreAndRemove)

        def include(self, tokens, original_line):  # type: ignore[no-untyped-def]
            toks = self.tokenstrip(list(tokens))
            if toks and toks[0].value != "<" and toks[0].type != self.t_STRING:
                toks = self.tokenstrip(self.expand_macros(toks))
            if toks and toks[0].value == "<":
                self._include_name = "".join(t.value for t in toks[1:] if t.value != ">")
            elif toks and toks[0].type == self.t_STRING:
                self._include_name = toks[0].value[1:-1]
            else:
                self._include_name = ""
            if is_cuda_only(self._include_name):
                # Never opened, even if a folder on the path had one: missing on ROCm.
                self._record(self._include_name)
                return iter(())
            return super().include(tokens, original_line)

        def _record(self, header: str) -> None:
            if not is_cuda_only(header) or self.lastdirective is None:
                return
            src = os.path.abspath(self.lastdirective.source)
            try:
                rel = Path(src).relative_to(self.tree).as_posix()
            except ValueError:
                rel = src
            self.found.append((rel, int(self.lastdirective.lineno), header))

        def on_directive_unknown(self, directive, toks, ifpassthru, precedingtoks):  # type: ignore[no-untyped-def]
            # An active #error/#warning is noted, not printed: the kernel refuses this
            # configuration itself (the scan reports includes, not refusals).
            if directive.value in ("error", "warning"):
                self.errors.append(f"{directive.source}:{directive.lineno}: #{directive.value}")
                return True
            return super().on_directive_unknown(directive, toks, ifpassthru, precedingtoks)

        def on_error(self, file, line, msg):  # type: ignore[no-untyped-def]
            self.errors.append(f"{file}:{line}: {msg}")

    return _Pass


# The ROCm passes of one JIT build: hipcc's host pass and its gfx950 device pass.
DEFAULT_PASSES: tuple[Mapping[str, str], ...] = (
    HIPCC_HOST | SGLANG_ROCM_FLAGS,
    HIPCC_DEVICE | SGLANG_ROCM_FLAGS,
)


@dataclass(frozen=True)
class UnitScan:
    """What preprocessing one translation unit found, and what it read to find it."""

    found: tuple[CudaInclude, ...]
    errors: tuple[str, ...]
    # every file the preprocessor opened or probed, relative to the tree, with its git blob
    # id (None: it was probed and absent); the unit itself included
    reads: tuple[tuple[str, str | None], ...]


def _rel(tree: Path, path: str) -> str:
    try:
        return Path(os.path.abspath(path)).relative_to(tree).as_posix()
    except ValueError:
        return os.path.abspath(path)


def unit_scan(
    tree: Path,
    jit: JitTree,
    unit: str,
    passes: Iterable[Mapping[str, str]] = (),
    files: Files | None = None,
) -> UnitScan:
    """Preprocess translation unit ``unit`` (relative to ``tree``) in each ROCm pass (host and
    device by default): its active CUDA-only includes, the preprocessor's errors, the reads."""
    tree = tree.resolve()
    files = files if files is not None else Files()
    cls = _preprocessor_class()
    found: dict[tuple[str, int, str], CudaInclude] = {}
    errors: list[str] = []
    path = str(tree / unit)
    opened = {path}
    text = files.text(path)
    done: list[tuple[Mapping[str, str], set[str]]] = []  # each pass run, with what it read
    for macros in tuple(passes) or DEFAULT_PASSES:
        if any(_same_outcome(ran, read, macros, files) for ran, read in done):
            continue
        pp = cls(tree, tree / jit.rel / "include", macros, files)
        pp.parse(text, path)
        pp.write(io.StringIO())
        done.append((macros, pp.opened | {path}))
        opened |= pp.opened
        for file, line, header in pp.found:
            found.setdefault((file, line, header), CudaInclude(file, line, header, unit))
        errors.extend(e for e in pp.errors if e not in errors)
    reads = sorted((_rel(tree, p), files.blob(p)) for p in opened)
    return UnitScan(
        tuple(sorted(found.values(), key=lambda c: (c.file, c.line))), tuple(errors), tuple(reads)
    )


def _same_outcome(
    ran: Mapping[str, str], read: set[str], macros: Mapping[str, str], files: Files
) -> bool:
    """Whether a pass with ``macros`` must find what the pass with ``ran`` found: no macro
    they define differently is named in a file that pass read (nor in a value of either), so
    every directive evaluates alike and the same files are read. Hipcc's device pass differs
    from its host pass by ``__HIP_DEVICE_COMPILE__`` and ``__gfx950__`` only, which most
    kernels never test: their second pass is skipped."""
    differ = {n for n in ran.keys() | macros.keys() if ran.get(n) != macros.get(n)}
    values = " ".join([*ran.values(), *macros.values()])
    texts = [files.text(p) for p in read if files.blob(p) is not None]
    return not any(n in t for n in differ for t in [values, *texts])
