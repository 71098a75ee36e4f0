"""Issue 31 (E5-E9): what comes from outside is read bounded and checked for its shape.

One bounded JSON reader (``util.loads_bounded`` / ``util.read_json``: a size cap before
parsing, a nesting cap) under model configs, release records, smoke reports and registry
answers; every download has a size cap and an overall deadline (``patches import URL``, the
registry's manifests, config blobs and tag lists); a wrong-shape record is a clear error or
"no release record", never exit 70. Stand-in servers on 127.0.0.1 with real sockets.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from reliability_helpers import cli

from sglforge import coverage, inspect, release
from sglforge.engine import registry
from sglforge.errors import ConfigError, SglforgeError
from sglforge.scan import read_model_config
from sglforge.util import JSON_CAP, JsonRefused, loads_bounded, read_json
from synthetic import make_project, make_upstream

DEEP = [
    '{"a":' * 100_000 + "1" + "}" * 100_000,  # E7: past the parser's recursion limit
    "[" * 100_000 + "]" * 100_000,
    '{"a":[' * 40 + "1" + "]}" * 40,  # 80 levels: parses, still refused
    "[" * 65 + "]" * 65,
]


@pytest.mark.parametrize("text", DEEP, ids=["dict-1e5", "list-1e5", "mixed-80", "list-65"])
def test_deep_json_is_refused_in_one_line(text: str) -> None:
    with pytest.raises(JsonRefused, match=r"^nested deeper than 64 levels$"):
        loads_bounded(text)


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"\xff\xfe{}", "not JSON"),
        (b'{"a": ', "not JSON"),
        (b" " * (JSON_CAP + 1), "larger than 16 MiB"),
    ],
    ids=["utf8", "truncated", "large"],
)
def test_unreadable_json_is_refused_in_one_line(data: bytes, said: str) -> None:
    with pytest.raises(JsonRefused) as got:
        loads_bounded(data)
    assert said in str(got.value) and "\n" not in str(got.value)
    assert loads_bounded("[" * 64 + "]" * 64) is not None  # the cap itself is readable


def test_a_huge_file_is_refused_before_it_is_read_whole(tmp_path: Path) -> None:
    huge = tmp_path / "config.json"
    with open(huge, "wb") as fh:
        fh.truncate(1 << 30)  # 1 GiB, sparse
    with pytest.raises(JsonRefused, match="larger than 16 MiB"):
        read_json(huge)


@pytest.mark.parametrize("reader", [read_model_config, coverage.read_model])
@pytest.mark.parametrize(
    "content",
    [DEEP[0].encode(), DEEP[2].encode(), b"\xff", None],  # None: 1 GiB of zeros
    ids=["deep", "deep-80", "utf8", "1GiB"],
)
def test_every_model_config_reader_refuses_hostile_configs_with_exit_2(
    tmp_path: Path, reader: Callable[[Path], object], content: bytes | None
) -> None:
    path = tmp_path / "config.json"
    if content is None:
        with open(path, "wb") as fh:
            fh.truncate(1 << 30)
    else:
        path.write_bytes(content)
    with pytest.raises(ConfigError) as got:
        reader(tmp_path)
    assert got.value.exit_code == 2 and str(path) in got.value.message


# --- release records: of every shape ---------------------------------------------------------


@pytest.mark.parametrize(
    "record",
    ["[1, 2, 3]", '"a string"', "5", "null", '{"version": []}', '{"smoke": "x"}', DEEP[0]],
    ids=["list", "string", "number", "null", "version-list", "smoke-string", "deep"],
)
def test_a_release_record_of_any_shape_is_a_clear_error(tmp_path: Path, record: str) -> None:
    path = tmp_path / "0.1.json"
    path.write_text(record)
    with pytest.raises(ConfigError, match="release record"):
        release.load_record(path)
    labels = {release.LABEL_RELEASE: record, release.LABEL_RELEASE_FOR: "sha256:x"}
    with pytest.raises(ConfigError, match="not a valid release record"):
        release.record_from_labels(labels, "sha256:x")


# --- a hostile registry ---------------------------------------------------------------------

CONFIG_DIGEST = "sha256:" + "c" * 64


class _Hostile(BaseHTTPRequestHandler):
    mode = ""
    sent = 0

    def _send(self, body: bytes, length: int | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.endswith("/tags/list?n=1000"):
            if self.mode == "tags-list":
                return self._send(b"[1, 2]")
            return self._send(b'{"tags": ["v1", "v1-release", 5]}')
        if "/blobs/" in self.path:
            labels: object = {"a": "b"}
            if self.mode == "labels-list":
                labels = [1, 2]
            return self._send(json.dumps({"config": {"Labels": labels}}).encode())
        if self.mode == "huge":  # E9: 2 GiB announced, zeros for as long as anyone reads
            self.send_response(200)
            self.send_header("Content-Length", str(2 << 30))
            self.end_headers()
            try:
                while True:
                    self.wfile.write(b" " * (1 << 16))
                    type(self).sent += 1 << 16
            except OSError:
                return
        if self.mode == "trickle":
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            try:
                while True:
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.2)
            except OSError:
                return
        bodies = {
            "list": b"[1, 2, 3]",
            "notdict": b'{"manifests": [1, "x"]}',
            "deep": DEEP[0].encode(),
            "html": b"<html>",
        }
        default = json.dumps({"config": {"digest": CONFIG_DIGEST}}).encode()
        self._send(bodies.get(self.mode, default))

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hostile() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("mode", ["list", "notdict", "labels-list", "deep", "html", "huge"])
def test_a_hostile_release_record_is_no_release_record(
    hostile: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _Hostile.mode, _Hostile.sent = mode, 0
    ref = f"{hostile}/rt/sglang:v1-release"
    started = time.monotonic()
    with pytest.raises(SglforgeError) as got:
        registry.registry_labels(ref)
    assert ref in got.value.message and "\n" not in got.value.message
    if mode == "huge":  # stopped at the cap, not after 2 GiB
        assert "larger than 4 MiB" in got.value.message
        assert _Hostile.sent < 64 << 20 and time.monotonic() - started < 20
    # what inspect does with it: no release record, and the other records still count
    labels = {"org.opencontainers.image.ref.name": "v1"}
    assert inspect._registry_record(f"{hostile}/rt/sglang", "sha256:x", labels) is None
    assert release.registry_records(f"{hostile}/rt/sglang") == []


def test_a_registry_that_trickles_is_cut_off(hostile: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _Hostile.mode = "trickle"
    monkeypatch.setattr(registry, "READ_DEADLINE", 2.0)
    started = time.monotonic()
    with pytest.raises(SglforgeError, match="no complete answer within"):
        registry.registry_labels(f"{hostile}/rt/sglang:v1")
    assert time.monotonic() - started < 10


def test_a_wrong_shape_tag_list_is_no_tag_list(hostile: str) -> None:
    _Hostile.mode = "tags-list"
    assert registry.remote_tags(f"{hostile}/rt/sglang") is None
    _Hostile.mode = ""
    assert registry.remote_tags(f"{hostile}/rt/sglang") == ["v1", "v1-release"]


# --- patches import URL: size cap and overall deadline (E5, E6) ------------------------------


class _Patches(BaseHTTPRequestHandler):
    sent = 0

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.startswith("/slowhead"):  # F12: a header line every 0.3 s, for ever
            try:
                self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                while True:
                    self.wfile.write(b"X-Slow: 1\r\n")
                    self.wfile.flush()
                    time.sleep(0.3)
            except OSError:
                return
        self.send_response(200)
        self.send_header("Content-Length", str(2 << 30))
        self.end_headers()
        try:
            if self.path.startswith("/huge"):
                while True:
                    self.wfile.write(b"a" * (1 << 16))
                    type(self).sent += 1 << 16
            while True:  # /trickle: 64 bytes every 0.3 s, for ever
                self.wfile.write(b"b" * 64)
                self.wfile.flush()
                time.sleep(0.3)
        except OSError:
            return

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def patch_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Patches)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_patches_import_url_has_a_size_cap_and_a_deadline(
    tmp_path: Path, patch_server: str
) -> None:
    project = make_project(tmp_path, make_upstream(tmp_path), [])
    series = (project / "patches" / "series").read_text()
    _Patches.sent = 0
    code, out, err = cli(project, "patches", "import", f"{patch_server}/huge.patch")
    assert code == 3 and "larger than 64 MiB" in err and "nothing was written" in err, err
    assert _Patches.sent < 128 << 20
    env = {"SGLFORGE_PIP_TIMEOUT": "1"}  # per read; the whole download may take 4x
    # a trickled body (E6) and trickled headers (F12): the deadline covers both
    for path in ("trickle.patch", "slowhead.patch"):
        started = time.monotonic()
        code, out, err = cli(project, "patches", "import", f"{patch_server}/{path}", env=env)
        assert code == 3 and "no complete answer within 4 s" in err, (path, err)
        assert time.monotonic() - started < 15, path
    assert (project / "patches" / "series").read_text() == series
    assert sorted(os.listdir(project / "patches")) == ["series", "upstream.toml"]
