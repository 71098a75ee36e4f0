"""The stand-in bench base's client requirements come from the release's own wheel (issue 45,
U19): the modules bench_serving reaches through module-level imports, spelled as its
Requires-Dist spells them; a guarded or deferred import is not followed. Wheels are written
here as the release's are laid out (sglang/..., sglang-V.dist-info/METADATA)."""

from __future__ import annotations

import ast
import sys
import zipfile
from pathlib import Path

import pytest

from sglforge.standin.base import AITER_SHIM, AITER_SHIM_MODULE
from sglforge.standin.benchdeps import CPU_TORCH, bench_client, bench_requirements, import_sites

METADATA = """\
Metadata-Version: 2.4
Name: sglang
Version: {version}
Requires-Dist: aiohttp
Requires-Dist: msgspec
Requires-Dist: openai==2.8.0
Requires-Dist: pyzmq>=25.1.2
Requires-Dist: sentencepiece==0.2.1
Requires-Dist: requests<1
Requires-Dist: torch==2.14.1
Requires-Dist: torchvision
Requires-Dist: av==16.1.0; sys_platform == "linux" and platform_machine == "aarch64"
Requires-Dist: flashinfer_python[cu13]==0.7.2
Requires-Dist: apache-tvm-ffi==0.1.11
Requires-Dist: pytest; extra == "test"
"""

MODULES = {
    "sglang/__init__.py": "import torch_only_in_the_root\n",
    "sglang/bench_serving.py": (
        "from sglang.benchmark.serving import *  # noqa\n"
        "from sglang.benchmark.serving import cli_main\n"
    ),
    "sglang/benchmark/__init__.py": "",
    "sglang/benchmark/serving.py": (
        "import asyncio, json\n"
        "import aiohttp\n"
        "import msgspec\n"
        "from . import utils\n"
        "from ..srt import common\n"
        "try:\n    import flashinfer\nexcept ImportError:\n    pass\n"
        "if False:\n    import av\n"
        # a platform switch: followed, installed only what the release requires
        "if _is_cuda:\n    import cuda_only_thing\nelse:\n    import tvm_ffi\n"
        "def later():\n    import pytest\n"
        "def cli_main():\n    pass\n"
    ),
    "sglang/benchmark/utils.py": "import requests\nfrom PIL import Image\n",
    "sglang/srt/__init__.py": "",
    "sglang/srt/common.py": "import torch\nimport torchvision\nimport zmq.asyncio\nimport openai\n",
    "sglang/srt/unreached.py": "import sentencepiece\n",
}


def wheel(tmp_path: Path, version: str = "0.5.99", more: str = "") -> Path:
    path = tmp_path / f"sglang-{version}-py3-none-any.whl"
    modules = {**MODULES, "sglang/srt/common.py": MODULES["sglang/srt/common.py"] + more}
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in modules.items():
            zf.writestr(name, text)
        zf.writestr(f"sglang-{version}.dist-info/METADATA", METADATA.format(version=version))
    return path


def test_requirements_follow_the_release_metadata_and_bench_serving_s_imports(
    tmp_path: Path,
) -> None:
    reqs = bench_requirements(wheel(tmp_path))
    assert reqs == (
        "aiohttp==3.14.5",  # unpinned by the release: the version the replica was benched with
        "apache-tvm-ffi==0.1.11",  # import tvm_ffi under an if, required by the release
        "msgspec",  # unpinned, unknown here: pip's choice
        "openai==2.8.0",  # the release's pin
        "pillow==13.0.0",  # import PIL, not in Requires-Dist: the known version
        "pyzmq==27.3.0",  # a range the known version satisfies
        "requests<1",  # a range the known version does not satisfy: the release's range
        CPU_TORCH,  # the CPU replica's torch, whatever the release pins
    )
    # not followed: the package root (trimmed in the replica), try/if/def imports, a module
    # nothing reaches (sentencepiece); not installed: torchvision (the stub), the stdlib
    for absent in (
        "torch_only_in_the_root",
        "flashinfer",
        "av",
        "pytest",
        "sentencepiece",
        "cuda_only_thing",
    ):
        assert not any(r.startswith(absent) for r in reqs), absent
    assert not any(r.startswith("torchvision") for r in reqs)


def test_a_new_import_in_a_release_is_installed_without_editing_a_list(tmp_path: Path) -> None:
    assert "xxhash" not in bench_requirements(wheel(tmp_path))
    assert "xxhash" in bench_requirements(wheel(tmp_path, more="import xxhash\n"))


def test_import_sites_find_guarded_imports_reached_on_every_platform(tmp_path: Path) -> None:
    more = (
        "try:\n    from aiter.ops import quant\nexcept ImportError:\n    quant = None\n"
        "if _is_hip:\n    import aiter\n"  # a platform switch: not on every platform
        "def later():\n    import aiter\n"
    )
    with zipfile.ZipFile(wheel(tmp_path, more=more)) as zf:
        assert import_sites(zf, "sglang.bench_serving", "aiter") == ("sglang/srt/common.py:6",)
    (tmp_path / "x").mkdir()
    with zipfile.ZipFile(wheel(tmp_path / "x", more="")) as zf:
        assert import_sites(zf, "sglang.bench_serving", "aiter") == ()


@pytest.mark.pypi
@pytest.mark.parametrize(
    ("version", "new", "sites"),
    [
        ("0.5.14", (), ()),
        # 0.5.23: sglang/benchmark/serving.py:37 imports msgspec (U19); through
        # srt/disaggregation/utils.py:24 -> configs/model_config.py:34 -> layers/quantization
        # /__init__.py:44 -> quark/... -> quark/utils.py:19-28, a guarded aiter import
        (
            "0.5.23",
            ("msgspec", "apache-tvm-ffi"),
            ("sglang/srt/layers/quantization/quark/utils.py:21",),
        ),
    ],
)
def test_the_real_releases_bench_client(
    version: str, new: tuple[str, ...], sites: tuple[str, ...]
) -> None:
    """Against the released wheels from PyPI: what each release's bench_serving needs (the
    new imports of 0.5.23 derived, not listed) and where it imports aiter on every platform;
    the one 0.5.23 site is guarded by ``except ImportError`` (what the shim raises)."""
    from sglang_release import pypi_cache, release_history

    release_history(f"=={version}")
    (path,) = (pypi_cache() / "pypi-sglang" / "wheels").glob(f"sglang-{version}-*.whl")
    reqs, found = bench_client(path)  # one walk: 0.5.23's 500 modules take seconds to parse
    assert found == sites
    for name in ("aiohttp", "transformers", "numpy", "requests", "tqdm"):
        assert any(r.startswith(name) for r in reqs), (name, reqs)
    for name in ("msgspec", "apache-tvm-ffi"):
        assert any(r.startswith(name) for r in reqs) == (name in new), (name, reqs)
    with zipfile.ZipFile(path) as zf:
        for site in sites:
            file, line = site.rsplit(":", 1)
            tree = ast.parse(zf.read(file))
            (guard,) = [
                n
                for n in tree.body
                if isinstance(n, ast.Try) and n.lineno <= int(line) <= (n.end_lineno or 0)
            ]
            assert [ast.unparse(h.type) for h in guard.handlers if h.type] == ["ImportError"]


def test_the_aiter_shim_turns_a_rocm_less_aiter_into_an_import_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shim (base.AITER_SHIM) against an aiter whose import fails as amd-aiter's does
    without ROCm (aiter/jit/utils/cpp_extension.py:94): ImportError, so the guarded import
    takes sglang's fallback; on a machine with ROCm (a hipconfig on PATH) it stands aside."""
    pkg = tmp_path / "site" / "aiter"
    (pkg / "ops").mkdir(parents=True)
    (pkg / "__init__.py").write_text('raise RuntimeError("ROCm version file not found")\n')
    (pkg / "ops" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    for var in ("ROCM_HOME", "ROCM_PATH"):
        monkeypatch.delenv(var, raising=False)
    finders = list(sys.meta_path)
    try:
        exec(compile(AITER_SHIM[f"{AITER_SHIM_MODULE}.py"], "shim", "exec"), {})
        with pytest.raises(ImportError, match="aiter cannot load without ROCm"):
            from aiter.ops import quant  # noqa: F401
        assert not [m for m in sys.modules if m == "aiter" or m.startswith("aiter.")]
        (tmp_path / "bin").mkdir()
        (tmp_path / "bin" / "hipconfig").write_text("#!/bin/sh\n")
        (tmp_path / "bin" / "hipconfig").chmod(0o755)
        with pytest.raises(RuntimeError, match="ROCm version file not found"):
            import aiter  # noqa: F401
    finally:
        sys.meta_path[:] = finders
        for name in [m for m in sys.modules if m == "aiter" or m.startswith("aiter.")]:
            del sys.modules[name]
