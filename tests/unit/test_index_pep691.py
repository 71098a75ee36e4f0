"""The PEP 691 JSON project page read by sglforge itself gives what pypi-simple (the parser
the HTML pages still go through) gives on the same page: names, resolved URLs, sha256,
yanking (a boolean or a reason) and sizes. A page that is not one is refused."""

from __future__ import annotations

import json

import pytest
from pypi_simple import ProjectPage

from sglforge import index
from sglforge.errors import UpstreamError

URL = "https://mirror.example/simple/fakeglang/"
IX = index.Index(URL.removesuffix("fakeglang/"), "test")
PAGE = {
    "meta": {"api-version": "1.1"},
    "name": "fakeglang",
    "files": [
        {
            "filename": "fakeglang-0.1.0-py3-none-any.whl",
            "url": "../../files/fakeglang-0.1.0-py3-none-any.whl",  # relative to the page
            "hashes": {"sha256": "AB" * 32},
            "size": 1234,
        },
        {
            "filename": "fakeglang-0.2.0-py3-none-any.whl",
            "url": "https://files.example/f/fakeglang-0.2.0-py3-none-any.whl#sha256=00",
            "hashes": {},
            "yanked": "broken metadata",
        },
        {
            "filename": "fakeglang-0.3.0.tar.gz",
            "url": "/packages/fakeglang-0.3.0.tar.gz",
            "hashes": {"sha256": "cd" * 32, "md5": "00"},
            "yanked": True,
        },
        {"filename": "fakeglang-0.4.0.tar.gz", "url": "x.tar.gz", "hashes": {}, "yanked": False},
    ],
}


def test_the_json_page_reads_as_pypi_simple_reads_it() -> None:
    body = json.dumps(PAGE).encode()
    mine = index._from_simple(IX, "fakeglang", "application/vnd.pypi.simple.v1+json", body, URL)
    page = ProjectPage.from_json_data(json.loads(body), URL)
    assert mine == [index._file(IX, p) for p in page.packages]
    assert [f.yanked for f in mine] == [False, True, True, False]
    assert mine[0].url == "https://mirror.example/files/fakeglang-0.1.0-py3-none-any.whl"


@pytest.mark.parametrize(
    "doc",
    [{"files": 3}, {"meta": {"api-version": "2.0"}, "files": []}, {"files": [{"url": "x"}]}, []],
)
def test_a_page_that_is_not_one_is_refused(doc: object) -> None:
    with pytest.raises(UpstreamError, match="not a readable index page"):
        index._from_simple(
            IX, "fakeglang", "application/vnd.pypi.simple.v1+json", json.dumps(doc).encode(), URL
        )
