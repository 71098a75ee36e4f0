"""The PyPI upstream source without pip or git: parsing sources (a wheel read as the store
imports it: tests/integration/test_index.py)."""

from __future__ import annotations

import pytest

from sglforge import git, pypi
from sglforge.errors import ConfigError


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


def test_blob_sha_is_gits() -> None:
    # `printf 'hello\n' | git hash-object --stdin`
    # (the id the store's import skips blobs it holds by)
    assert git.blob_id(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"
