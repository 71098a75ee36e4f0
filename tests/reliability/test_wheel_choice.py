"""Issue 31 (determinism): the same index gives the same wheel, whatever order its pages list
the files in. Among wheels of equal rank (several CPython tags, several manylinux levels) the
choice is a total order: a pure wheel, then the first file name. A package index on 127.0.0.1
(tests/index_server.py, a TEST DOUBLE) lists the same folder in shuffled orders, in each shape.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from index_server import IndexServer, serve
from sglforge import index, pypi

NAMES = [
    "fakeglang-1.0-cp311-cp311-manylinux_2_28_x86_64.whl",
    "fakeglang-1.0-cp310-cp310-manylinux_2_28_x86_64.whl",
    "fakeglang-1.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "fakeglang-1.0-cp310-cp310-manylinux_2_28_aarch64.whl",
    "fakeglang-2.0-cp311-cp311-manylinux_2_28_x86_64.whl",
    "fakeglang-2.0-py3-none-any.whl",
    "fakeglang-2.0-cp310-cp310-manylinux_2_28_x86_64.whl",
    "fakeglang-3.0-cp39-cp39-manylinux_2_28_x86_64.whl",
    "fakeglang-3.0-cp310-abi3-manylinux_2_28_x86_64.whl",
    "fakeglang-3.0-cp313-cp313-musllinux_1_2_x86_64.whl",
]
CHOSEN = {
    "1.0": "fakeglang-1.0-cp310-cp310-manylinux_2_28_x86_64.whl",
    "2.0": "fakeglang-2.0-py3-none-any.whl",
    "3.0": "fakeglang-3.0-cp310-abi3-manylinux_2_28_x86_64.whl",
}


@pytest.mark.parametrize("shape", ["simple-json", "simple-html", "legacy-json"])
def test_the_wheel_chosen_does_not_depend_on_the_listing_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: str
) -> None:
    folder = tmp_path / "wheels"
    folder.mkdir()
    for n, name in enumerate(NAMES):
        (folder / name).write_bytes(b"wheel %d" % n)
    monkeypatch.delenv("PIP_NO_INDEX", raising=False)
    monkeypatch.setenv("SGLFORGE_PIP_TIMEOUT", "5")
    seen = []
    for seed in (None, 1, 2):
        with serve(IndexServer(folder, shape=shape, shuffle=seed)) as server:
            monkeypatch.setenv(index.INDEX_ENV, server.url())
            index.forget()
            listed = [f.filename for f in index.files("fakeglang")]
            chosen = {str(v): r.file.filename for v, r in pypi.releases("fakeglang").items()}
        index.forget()
        seen.append(listed)
        assert chosen == CHOSEN, (seed, listed)
    assert len({tuple(s) for s in seen}) > 1  # the orders really differed
