"""Registry logins and the registry's auth handshake, on one HTTP client (requests).

Credentials come from ``SGLFORGE_REGISTRY_USER``/``SGLFORGE_REGISTRY_PASSWORD`` or the Docker
config (``~/.docker/config.json`` or ``$DOCKER_CONFIG``, credential helpers included). They
never leave this module in a printable form: the password is excluded from ``repr``, scrubbed
from messages and never put in one.

``RegistrySession`` answers a registry's 401 the way the distribution spec describes: Basic
with the login, or a token from the realm its ``WWW-Authenticate: Bearer`` challenge names
(ghcr.io, Docker Hub, Harbor), anonymous when there is no login.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from sglforge.engine.errors import (
    CredentialsUnusable,
    RegistryAuthRefused,
    RegistryUnreachable,
)
from sglforge.engine.reference import PASSWORD_ENV, USER_ENV
from sglforge.urls import scrub_text

__all__ = [
    "PASSWORD_ENV",
    "USER_ENV",
    "Credentials",
    "RegistrySession",
    "auth_config",
    "credentials",
    "login_hint",
    "scrub",
]


@dataclass(frozen=True)
class Credentials:
    """A registry login; the password is never part of ``repr``."""

    username: str
    password: str = field(repr=False)
    source: str = "env"

    def auth_config(self) -> dict[str, str]:
        """The dict the Docker SDK sends (base64 in a header, never logged by sglforge)."""
        return {"username": self.username, "password": self.password}


def login_hint(registry: str) -> str:
    return f"set {USER_ENV}/{PASSWORD_ENV} or run `docker login {registry}`"


def credentials(registry: str, env: dict[str, str] | None = None) -> Credentials | None:
    """The login for ``registry``: the environment first, then the Docker config, else None."""
    env = dict(os.environ) if env is None else env
    user, password = env.get(USER_ENV), env.get(PASSWORD_ENV)
    if user or password:
        if not (user and password):
            missing = PASSWORD_ENV if user else USER_ENV
            raise CredentialsUnusable(
                f"{USER_ENV} and {PASSWORD_ENV} must be set together ({missing} is empty)",
                f"export {missing}=... or unset both to use the Docker config",
            )
        return Credentials(user, password, "env")
    import docker.auth
    import docker.errors

    _check_docker_config(registry, env)
    try:
        config = docker.auth.load_config(config_path=None)
        found = config.resolve_authconfig(registry)
    except (docker.errors.DockerException, OSError, ValueError) as exc:
        raise CredentialsUnusable(
            f"cannot read registry credentials for {registry} from the Docker config: "
            f"{type(exc).__name__}",
            login_hint(registry),
        ) from None
    if not found:
        return None
    user = found.get("Username") or found.get("username")
    password = found.get("Password") or found.get("password")
    if user and password:
        return Credentials(user, password, "docker-config")
    return None


def _check_docker_config(registry: str, env: dict[str, str]) -> None:
    """CredentialsUnusable naming the Docker config when it cannot be what it should: the
    Docker SDK reads a broken ``config.json`` as empty, and the registry's refusal of the
    anonymous login that follows would hide the real problem."""
    import json

    folder_env = env.get("DOCKER_CONFIG")
    folder = Path(folder_env) if folder_env else Path.home() / ".docker"
    where = f"DOCKER_CONFIG={folder_env}" if folder_env else str(folder)
    fix = "fix it, or point DOCKER_CONFIG at a folder with a valid config.json; or " + (
        login_hint(registry)
    )
    if folder.exists() and not folder.is_dir():
        raise CredentialsUnusable(f"{where}: not a folder (the Docker config is a folder)", fix)
    path = folder / "config.json"
    if not path.exists():
        return
    try:
        data = json.loads(path.read_bytes())
    except OSError as exc:
        raise CredentialsUnusable(
            f"{path}: cannot read the Docker config ({exc.strerror})", fix
        ) from None
    except (ValueError, RecursionError) as exc:
        why = f"line {exc.lineno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError) else "bad"
        raise CredentialsUnusable(
            f"{path}: invalid JSON in the Docker config ({why})", fix
        ) from None
    auths = data.get("auths", {}) if isinstance(data, dict) else None
    if not isinstance(auths, dict):
        raise CredentialsUnusable(
            f'{path}: the Docker config is not a JSON object with an "auths" object', fix
        )


def auth_config(registry: str) -> dict[str, str] | None:
    """The login for ``registry`` as the Docker SDK takes it; None when none can be read."""
    try:
        creds = credentials(registry)
    except CredentialsUnusable:
        return None  # ask anonymously; the registry's answer says the rest
    return creds.auth_config() if creds else None


def scrub(message: str, creds: Credentials | None) -> str:
    """``message`` with any userinfo and the password taken out."""
    # Registries do not echo passwords, but a proxy or a URL with userinfo could; never risk it.
    message = scrub_text(message)
    if creds and creds.password:
        message = message.replace(creds.password, "***")
    return message.strip()


def _challenge(resp: requests.Response) -> tuple[str, dict[str, str]]:
    header = resp.headers.get("WWW-Authenticate", "")
    scheme, _, rest = header.partition(" ")
    return scheme.lower(), dict(re.findall(r'(\w+)="([^"]*)"', rest))


class RegistrySession:
    """HTTP calls to one registry, answering its auth challenge once per session."""

    def __init__(self, registry: str, creds: Credentials | None, timeout: float = 15.0) -> None:
        self.registry = registry
        self.creds = creds
        self.timeout = timeout
        self._http = requests.Session()
        self._authorised = False

    def __enter__(self) -> RegistrySession:
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.close()

    def request(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        """The response (any status but an unanswerable 401); RegistryUnreachable if none."""
        resp = self._send(method, url, **kwargs)
        if resp.status_code == 401 and not self._authorised:
            scheme, params = _challenge(resp)
            if scheme != "bearer" and not (scheme == "basic" and self.creds):
                return resp
            resp.close()  # a streamed answer holds its socket until closed
            if scheme == "bearer":
                token = self._token(params)
                self._http.headers["Authorization"] = f"Bearer {token}"
            elif self.creds:
                self._http.auth = (self.creds.username, self.creds.password)
            self._authorised = True
            resp = self._send(method, url, **kwargs)
        return resp

    # A registry answering 429 (toomanyrequests) or 502/503/504 is asked again, after its
    # Retry-After (at most 30 s) or 1, 2, 4 s.
    RETRY_STATUS = (429, 502, 503, 504)
    RETRIES = 3

    def _send(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        for attempt in range(self.RETRIES + 1):
            resp = self._send_once(method, url, **kwargs)
            if resp.status_code not in self.RETRY_STATUS or attempt == self.RETRIES:
                return resp
            after = resp.headers.get("Retry-After", "")
            wait = min(30.0, float(after)) if after.isdigit() else float(2**attempt)
            resp.close()
            time.sleep(wait)
        raise AssertionError("unreachable")

    def _send_once(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        try:
            return self._http.request(method, url, timeout=self.timeout, **kwargs)
        except requests.RequestException as exc:
            raise RegistryUnreachable(
                f"registry {self.registry} did not answer: {scrub(_reason(exc), self.creds)}",
                f"check that the registry is up: curl {url.split('/v2/')[0]}/v2/",
            ) from None

    def _token(self, params: dict[str, str]) -> str:
        """A token from the registry's token service (the challenge's realm)."""
        realm = params.pop("realm", "")
        if not realm:
            raise RegistryAuthRefused(
                f"registry {self.registry} asked for a bearer token without a realm"
            )
        login = (self.creds.username, self.creds.password) if self.creds else None
        hint = login_hint(self.registry)
        try:
            resp = requests.get(realm, params=params, auth=login, timeout=self.timeout)
        except requests.RequestException as exc:
            raise RegistryUnreachable(
                f"registry {self.registry}: its token service did not answer: "
                f"{scrub(_reason(exc), self.creds)}",
                hint,
            ) from None
        if resp.status_code in (401, 403):
            who = f"the login of {self.creds.username!r}" if self.creds else "anonymous access"
            raise RegistryAuthRefused(
                f"registry {self.registry}: its token service refused the credentials ({who}, "
                f"HTTP {resp.status_code})",
                hint,
            )
        if resp.status_code != 200:
            raise RegistryUnreachable(
                f"registry {self.registry}: its token service answered HTTP {resp.status_code}",
                hint,
            )
        try:
            body = resp.json()
        except ValueError:
            body = {}
        token = body.get("token") or body.get("access_token") if isinstance(body, dict) else None
        if not token:
            raise RegistryAuthRefused(
                f"registry {self.registry}: its token service returned no token", hint
            )
        return str(token)


def _reason(exc: requests.RequestException) -> str:
    # requests nests the socket error a few levels down; its innermost text is the useful one.
    inner: BaseException = exc
    while inner.args and isinstance(inner.args[0], BaseException):
        inner = inner.args[0]
    return str(getattr(inner, "reason", None) or inner)
