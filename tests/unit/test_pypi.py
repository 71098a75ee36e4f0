"""The PyPI upstream source without pip or git: parsing sources and reading wheels."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from sglforge import git, pypi
from sglforge.errors import ConfigError, UpstreamError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("pypi:sglang", ("sglang", "")),
        ("pypi:sglang>=0.5.10,<=0.5.23", ("sglang", ">=0.5.10,<=0.5.23")),
        ("  pypi:sglang >= 0.5.10, <= 0.5.23 ", ("sglang", ">=0.5.10,<=0.5.23")),
        ("pypi:sglang==0.5.14", ("sglang", "==0.5.14")),
        ("pypi:my-project.x~=1.2", ("my-project.x", "~=1.2")),
    ],
)
def test_parse_source_recognises_pypi_sources(text: str, expected: tuple[str, str]) -> None:
    assert pypi.parse_source(text) == expected


@pytest.mark.parametrize(
    "text",
    ["https://github.com/sgl-project/sglang", "/srv/sglang", "../sglang", "sglang", "pypi"],
)
def test_parse_source_leaves_urls_and_paths_alone(text: str) -> None:
    assert pypi.parse_source(text) is None


@pytest.mark.parametrize("text", ["pypi:", "pypi:sglang>>0.5", "pypi:sglang=0.5", "pypi:-x"])
def test_parse_source_rejects_malformed_pypi_sources(text: str) -> None:
    with pytest.raises(ConfigError) as err:
        pypi.parse_source(text)
    assert err.value.hint and "pypi:sglang" in err.value.hint


def _wheel(path: Path, entries: dict[str, tuple[bytes, int]]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, (data, mode) in entries.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = mode << 16
            zf.writestr(info, data)
    return path


def test_wheel_files_keep_only_the_package_sources(tmp_path: Path) -> None:
    wheel = _wheel(
        tmp_path / "sglang-1.0-cp311-cp311-manylinux_2_34_x86_64.whl",
        {
            "sglang/__init__.py": (b"x = 1\n", 0o100644),
            "sglang/tool.sh": (b"#!/bin/sh\n", 0o100755),
            "sglang/srt/grpc/_core.cpython-311-x86_64-linux-gnu.so": (b"\x7fELF", 0o100755),
            "sglang/jit/k.cuh": (b"#pragma once\n", 0o100644),
            "sglang/__pycache__/x.cpython-311.pyc": (b"junk", 0o100644),
            "sglang-1.0.dist-info/METADATA": (b"Name: sglang\n", 0o100644),
            "tools/get_version_tag.py": (b"pass\n", 0o100644),
        },
    )
    files = pypi._wheel_files(wheel, "sglang")
    assert files == {
        "python/sglang/__init__.py": ("100644", b"x = 1\n"),
        "python/sglang/tool.sh": ("100755", b"#!/bin/sh\n"),
        "python/sglang/jit/k.cuh": ("100644", b"#pragma once\n"),
    }


def test_wheel_without_the_package_folder_is_an_upstream_error(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "other-1.0-py3-none-any.whl", {"other/x.py": (b"", 0o100644)})
    with pytest.raises(UpstreamError, match="no sglang/ package folder"):
        pypi._wheel_files(wheel, "sglang")


def test_unreadable_wheel_names_the_file_and_how_to_recover(tmp_path: Path) -> None:
    wheel = tmp_path / "sglang-1.0-py3-none-any.whl"
    wheel.write_bytes(b"not a zip")
    with pytest.raises(UpstreamError) as err:
        pypi._wheel_files(wheel, "sglang")
    # removed from the cache, so the next run downloads it again (issue 42)
    assert str(wheel) in err.value.message and "removed from the cache" in err.value.message
    assert not wheel.exists()


def test_blob_sha_is_gits() -> None:
    # `printf 'hello\n' | git hash-object --stdin`
    # (the id the store's import skips blobs it holds by)
    assert git.blob_id(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"
