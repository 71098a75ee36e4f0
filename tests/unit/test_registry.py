"""Engine helpers that need no engine: references, error kinds, credentials, the token flow."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from sglforge.engine.credentials import PASSWORD_ENV, USER_ENV, Credentials, credentials
from sglforge.engine.errors import BadReference, CredentialsUnusable, RegistryAuthRefused
from sglforge.engine.reference import ImageRef, is_loopback, parse
from sglforge.engine.registry import classify
from sglforge.errors import EXIT_NO_IMAGE, EXIT_PUBLISH, EXIT_USAGE, ConfigError, ImageNotFound

SECRET = "pw-Zq8!never-print"


def test_parse_splits_registry_port_repository_and_tag() -> None:
    ref = parse("127.0.0.1:5000/sglforge/sglang:v0.5.14-rocm700-mi355x", require_registry=True)
    assert ref == ImageRef("127.0.0.1:5000", "sglforge/sglang", "v0.5.14-rocm700-mi355x")
    assert ref.name == "127.0.0.1:5000/sglforge/sglang"
    assert parse("localhost:5000/a/b").tag == "latest"
    assert str(parse("ghcr.io/org/sglang:x")) == "ghcr.io/org/sglang:x"
    with pytest.raises(BadReference, match="no registry host"):
        parse("sglforge/sglang:x", require_registry=True)
    with pytest.raises(BadReference, match="digest reference"):
        parse("127.0.0.1:5000/a@sha256:" + "0" * 64)
    pinned = parse("127.0.0.1:5000/a:v1@sha256:" + "0" * 64, allow_digest=True)
    assert pinned.digest == "sha256:" + "0" * 64 and pinned.tag == "v1"
    with pytest.raises(BadReference, match="must be lowercase"):
        parse("127.0.0.1:5000/Team/x:y")


def test_docker_hub_is_the_default_registry_and_name_is_the_engines_spelling() -> None:
    """One type: ``repository`` is the path at the registry, ``name`` what the engine shows."""
    r = parse("lmsysorg/sglang:v0.5.14-rocm700-mi35x")
    assert (r.registry, r.repository, r.name, r.tag) == (
        "docker.io",
        "lmsysorg/sglang",
        "lmsysorg/sglang",
        "v0.5.14-rocm700-mi35x",
    )
    debian = parse("debian")
    assert (debian.repository, debian.name, debian.tag) == ("library/debian", "debian", "latest")
    assert debian.base_url == "https://registry-1.docker.io"
    assert parse("127.0.0.2:5000/x").base_url == "http://127.0.0.2:5000"


def test_bad_references_are_usage_errors_and_never_echo_credentials() -> None:
    with pytest.raises(ConfigError) as info:
        parse("u:pw-secret@127.0.0.1:5000/x:y")
    assert "pw-secret" not in str(info.value) and info.value.exit_code == EXIT_USAGE


def test_engine_error_kinds_keep_the_documented_exit_codes() -> None:
    from sglforge.engine import errors

    assert issubclass(errors.ImageMissing, ImageNotFound)
    assert errors.ImageMissing("x").exit_code == EXIT_NO_IMAGE
    assert errors.PushFailed("x").exit_code == EXIT_PUBLISH
    assert errors.BuildFailed("x").exit_code == 6 and errors.ContainerFailed("x").exit_code == 7
    assert errors.EngineError("x").exit_code == 5


def test_loopback_registries_are_recognised() -> None:
    assert is_loopback("127.0.0.1:5000") and is_loopback("localhost:5000")
    assert is_loopback("[::1]:5000") and parse("127.0.0.9:5000/x:y").is_loopback
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
    with pytest.raises(CredentialsUnusable, match=PASSWORD_ENV) as info:
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
    the token service answer 401, which must be a RegistryAuthRefused naming the registry."""
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
        refused = "token service refused the credentials"
        with pytest.raises(RegistryAuthRefused, match=refused) as err:
            reg.check_login(address, Credentials("u", "wrong-password"))
        assert "wrong-password" not in str(err.value)
        assert "docker login" in str(err.value)
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    "given", ["ghcr.io/your-org", "ghcr.io/YOUR-ORG", "ghcr.io/Your_Org/sglang", "quay.io/yourorg"]
)
def test_a_copied_placeholder_says_to_replace_it(given: str) -> None:
    """N12: the documentation's namespace placeholder, pasted in any spelling, is refused
    as a placeholder (not as "must be lowercase"), at parse time, before any build."""
    from sglforge.engine.reference import check_registry

    with pytest.raises(BadReference) as err:
        check_registry(given)
    assert "placeholder" in err.value.message and "replace it" in (err.value.hint or "")
    assert "lowercase" in (err.value.hint or "")


def test_the_readme_s_registry_placeholder_is_lowercase_and_refused_as_one() -> None:
    import re

    from sglforge.engine.reference import PLACEHOLDERS, check_registry

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    m = re.search(r"^REGISTRY=(\S+)", readme, re.M)
    assert m is not None
    value = m.group(1)
    assert value == value.lower() and value.rsplit("/", 1)[-1] in PLACEHOLDERS
    with pytest.raises(BadReference, match="placeholder"):
        check_registry(value)
    assert check_registry("ghcr.io/my-team") == "ghcr.io/my-team"
