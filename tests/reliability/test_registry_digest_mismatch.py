"""D25 (issue 31): a registry, or a proxy in front of it, that answers a tag with another
digest than the pushed image's is reported as a digest mismatch naming the image and both
digests, not as "manifest unknown" (the engine looks the lied digest up and finds nothing).
A stand-in registry on 127.0.0.1 answers the engine's and sglforge's own requests with real
sockets; its lie is the ``Docker-Content-Digest`` header (or the manifest it serves)."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sglforge.engine.errors import ManifestMissing, RegistryError
from sglforge.engine.registry import DigestMismatch, verify

pytestmark = pytest.mark.docker  # the engine asks the registry (inspect_distribution)

MEDIA = "application/vnd.oci.image.manifest.v1+json"
MANIFEST = json.dumps(
    {
        "schemaVersion": 2,
        "mediaType": MEDIA,
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": "sha256:" + "c" * 64,
            "size": 2,
        },
        "layers": [],
    }
).encode()
OWN = "sha256:" + hashlib.sha256(MANIFEST).hexdigest()
LIE = "sha256:" + "f" * 64


class _Lying(BaseHTTPRequestHandler):
    header: str | None = LIE  # the Docker-Content-Digest it answers the tag with
    has_tag = True

    def _answer(self, body: bool) -> None:
        path = self.path.split("?")[0]
        if path == "/v2/":
            return self._send(200, b"{}", {"Docker-Distribution-API-Version": "registry/2.0"}, body)
        if path.endswith("/manifests/t") and self.has_tag:
            extra = {"Content-Type": MEDIA}
            if self.header:
                extra["Docker-Content-Digest"] = self.header
            return self._send(200, MANIFEST, extra, body)
        if path.endswith("/manifests/" + OWN) and self.has_tag:
            return self._send(
                200, MANIFEST, {"Content-Type": MEDIA, "Docker-Content-Digest": OWN}, body
            )
        unknown = b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}'
        self._send(404, unknown, {"Content-Type": "application/json"}, body)

    def _send(self, status: int, data: bytes, headers: dict[str, str], body: bool) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._answer(True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(False)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def registry() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Lying)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    _Lying.header, _Lying.has_tag = LIE, True


def test_a_lied_digest_header_is_a_digest_mismatch(registry: str) -> None:
    ref = f"{registry}/d25/sglang:t"
    with pytest.raises(DigestMismatch) as caught:
        verify(ref, OWN)
    text = str(caught.value)
    assert ref in text and LIE in text and OWN in text and "manifest unknown" not in text
    assert "proxy" in text  # the hint says where to look


def test_another_image_under_the_tag_is_a_digest_mismatch(registry: str) -> None:
    # an honest header for a manifest that is not the pushed one
    _Lying.header = OWN
    pushed = "sha256:" + "a" * 64
    with pytest.raises(DigestMismatch) as caught:
        verify(f"{registry}/d25/sglang:t", pushed)
    assert OWN in str(caught.value) and pushed in str(caught.value)
    # no header at all: the manifest's own sha256 is what it serves
    _Lying.header = None
    with pytest.raises(DigestMismatch) as caught:
        verify(f"{registry}/d25/sglang:t", pushed)
    assert OWN in str(caught.value) and pushed in str(caught.value)


def test_a_missing_tag_stays_manifest_unknown(registry: str) -> None:
    _Lying.has_tag = False
    with pytest.raises(ManifestMissing) as caught:
        verify(f"{registry}/d25/sglang:t", OWN)
    assert not isinstance(caught.value, DigestMismatch)


def test_an_honest_registry_is_no_mismatch(registry: str) -> None:
    # the digests agree: what fails next is the engine's own record (no local image here)
    _Lying.header = OWN
    with pytest.raises(RegistryError, match="no RepoDigest") as caught:
        verify(f"{registry}/d25/sglang:t", OWN)
    assert not isinstance(caught.value, DigestMismatch)
