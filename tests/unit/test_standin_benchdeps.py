"""The stand-in bench base's client requirements come from the release's own wheel (issue 45,
U19): the modules bench_serving reaches through module-level imports, spelled as its
Requires-Dist spells them; a guarded or deferred import is not followed. Wheels are written
here as the release's are laid out (sglang/..., sglang-V.dist-info/METADATA)."""

from __future__ import annotations

import zipfile
from pathlib import Path

from sglforge.standin.benchdeps import CPU_TORCH, bench_requirements

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
