"""Registry helpers that need no engine: references, error kinds, credentials."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from sglforge.engine.registry import (
    PASSWORD_ENV,
    USER_ENV,
    Credentials,
    classify,
    credentials,
    is_loopback,
    parse_ref,
)
from sglforge.errors import PublishError

SECRET = "pw-Zq8!never-print"


def test_parse_ref_needs_a_registry_and_splits_port_from_tag() -> None:
    ref = parse_ref("127.0.0.1:5000/sglforge/sglang:v0.5.14-rocm700-mi355x")
    assert (ref.registry, ref.repository, ref.tag) == (
        "127.0.0.1:5000",
        "sglforge/sglang",
        "v0.5.14-rocm700-mi355x",
    )
    assert parse_ref("localhost:5000/a/b").tag == "latest"
    assert str(parse_ref("ghcr.io/org/sglang:x")) == "ghcr.io/org/sglang:x"
    with pytest.raises(PublishError, match="no registry host"):
        parse_ref("sglforge/sglang:x")
    with pytest.raises(PublishError, match="digest reference"):
        parse_ref("127.0.0.1:5000/a@sha256:" + "0" * 64)


def test_loopback_registries_are_recognised() -> None:
    assert is_loopback("127.0.0.1:5000") and is_loopback("localhost:5000")
    assert is_loopback("[::1]:5000")
    assert not is_loopback("ghcr.io") and not is_loopback("10.0.0.1:5000")


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        (
            'Get "http://127.0.0.1:5999/v2/": dial tcp 127.0.0.1:5999: connect: connection refused',
            "transient",
        ),
        ("read tcp 127.0.0.1:40000->127.0.0.1:5000: read: connection reset by peer", "transient"),
        ("received unexpected HTTP status: 503 Service Unavailable", "transient"),
        ("received unexpected HTTP status: 500 Internal Server Error", "transient"),
        ("net/http: TLS handshake timeout", "transient"),
        ("unauthorized: authentication required", "auth"),
        ("no basic auth credentials", "auth"),
        ("denied: requested access to the resource is denied", "auth"),
        ("An image does not exist locally with the tag: 127.0.0.1:5000/x", "fatal"),
        ("manifest invalid: manifest invalid", "fatal"),
    ],
)
def test_classify_retries_transient_errors_but_never_auth_errors(message: str, kind: str) -> None:
    assert classify(message) == kind


def test_password_is_not_in_repr_or_str() -> None:
    creds = Credentials("alice", SECRET, "env")
    assert SECRET not in repr(creds) and SECRET not in str(creds)
    assert "alice" in repr(creds)


def test_credentials_from_environment_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    env = {USER_ENV: "alice", PASSWORD_ENV: SECRET}
    creds = credentials("127.0.0.1:5000", env)
    assert creds is not None and creds.username == "alice" and creds.source == "env"
    with pytest.raises(PublishError, match=PASSWORD_ENV) as info:
        credentials("127.0.0.1:5000", {USER_ENV: "alice"})
    assert SECRET not in str(info.value)


def test_credentials_from_docker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    auth = base64.b64encode(f"bob:{SECRET}".encode()).decode()
    (tmp_path / "config.json").write_text(json.dumps({"auths": {"127.0.0.1:5000": {"auth": auth}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    creds = credentials("127.0.0.1:5000", {})
    assert creds is not None
    assert (creds.username, creds.password, creds.source) == ("bob", SECRET, "docker-config")
    assert credentials("127.0.0.1:6000", {}) is None
    assert creds.auth_config() == {"username": "bob", "password": SECRET}


def test_a_token_service_refusing_the_login_is_a_clear_publish_error() -> None:
    """ghcr.io-style registries: /v2/ challenges for a Bearer token; a wrong password makes
    the token service answer 401, which must be a PublishError naming the registry."""
    import http.server
    import threading

    from sglforge.engine import registry as reg

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            port = self.server.server_address[1]
            if self.path.startswith("/v2/"):
                self.send_response(401)
                self.send_header(
                    "WWW-Authenticate",
                    f'Bearer realm="http://127.0.0.1:{port}/token",service="test"',
                )
            else:
                self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    address = f"127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(PublishError, match="token service refused the credentials") as err:
            reg.check_login(address, reg.Credentials("u", "wrong-password"))
        assert "wrong-password" not in str(err.value)
        assert "docker login" in str(err.value)
    finally:
        server.shutdown()
        server.server_close()
