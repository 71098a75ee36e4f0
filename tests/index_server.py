"""Package indexes on 127.0.0.1 for tests: one folder of wheels served in each standard shape.

TEST DOUBLES of real indexes, built from the specifications, not from any server's code:

- ``simple-json``: PEP 691 JSON only (``/simple/<project>/`` answers
  ``application/vnd.pypi.simple.v1+json`` whatever the Accept header);
- ``simple-html``: PEP 503 HTML only (devpi, Nexus, a folder behind a web server);
- ``simple``: both, chosen by the Accept header as PEP 691 describes (PyPI);
- ``legacy-json``: only PyPI's legacy JSON API, ``/pypi/<project>/json`` (no simple pages);

each with file URLs relative to the page (``relative=True``, as bandersnatch mirrors write them)
or absolute. Faults to inject: ``auth=(user, password)`` (HTTP basic), ``wrong_sha256`` (the
listed digest is not the file's), ``fail_first`` (that many 500s before the first success),
``delay`` (seconds before each answer), ``trickle`` (file bodies sent a few bytes a second),
``no_sha256`` (no digests listed), ``yanked`` (versions listed as yanked) and
``redirect_files_to`` (file requests redirected to another server's base URL); ``shuffle``
lists the files in a seeded random order.
"""

from __future__ import annotations

import base64
import hashlib
import html
import http.server
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class IndexServer:
    folder: Path
    shape: str = "simple"
    relative: bool = True
    auth: tuple[str, str] | None = None
    wrong_sha256: bool = False
    no_sha256: bool = False
    fail_first: int = 0
    delay: float = 0.0
    trickle: bool = False
    yanked: tuple[str, ...] = ()
    redirect_files_to: str | None = None
    shuffle: int | None = None  # list the files in an order shuffled with this seed
    host: str = "127.0.0.1"
    requests: list[str] = field(default_factory=list)
    auth_headers: list[str | None] = field(default_factory=list)
    port: int = 0

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url(self, with_auth: bool = True) -> str:
        """The index URL as a user would configure it (pip's ``index-url``)."""
        userinfo = f"{self.auth[0]}:{self.auth[1]}@" if self.auth and with_auth else ""
        root = "" if self.shape == "legacy-json" else "/simple"
        return f"http://{userinfo}{self.host}:{self.port}{root}"


def _files(server: IndexServer, project: str) -> list[Path]:
    found = sorted(p for p in server.folder.glob("*.whl") if p.name.split("-")[0] == project)
    if server.shuffle is not None:
        import random

        random.Random(server.shuffle).shuffle(found)
    return found


def _version(path: Path) -> str:
    return path.name.split("-")[1]


def _sha(path: Path, server: IndexServer) -> str:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return ("0" * 64) if server.wrong_sha256 else digest


def _file_url(server: IndexServer, page_depth: int, name: str) -> str:
    if server.relative:
        return "../" * page_depth + f"files/{name}"
    return f"{server.base}/files/{name}"


def _simple_json(server: IndexServer, project: str) -> bytes:
    files = []
    for p in _files(server, project):
        entry: dict[str, object] = {
            "filename": p.name,
            "url": _file_url(server, 2, p.name),
            "hashes": {} if server.no_sha256 else {"sha256": _sha(p, server)},
            "size": p.stat().st_size,
        }
        if _version(p) in server.yanked:
            entry["yanked"] = "withdrawn for tests"
        files.append(entry)
    doc = {"meta": {"api-version": "1.1"}, "name": project, "files": files, "versions": []}
    return json.dumps(doc).encode()


def _simple_html(server: IndexServer, project: str) -> bytes:
    links = []
    for p in _files(server, project):
        href = _file_url(server, 2, p.name)
        if not server.no_sha256:
            href += f"#sha256={_sha(p, server)}"
        yanked = ' data-yanked="withdrawn"' if _version(p) in server.yanked else ""
        links.append(f'<a href="{html.escape(href)}"{yanked}>{html.escape(p.name)}</a><br/>')
    return (
        "<!DOCTYPE html><html><head><title>Links for {0}</title></head><body>"
        "<h1>Links for {0}</h1>{1}</body></html>".format(project, "".join(links))
    ).encode()


def _legacy_json(server: IndexServer, project: str) -> bytes:
    releases: dict[str, list[dict[str, object]]] = {}
    for p in _files(server, project):
        releases.setdefault(_version(p), []).append(
            {
                "filename": p.name,
                # relative to /pypi/<project>/json, as the mirror here writes them
                "url": _file_url(server, 2, p.name),
                "packagetype": "bdist_wheel",
                "digests": {} if server.no_sha256 else {"sha256": _sha(p, server)},
                "size": p.stat().st_size,
                "yanked": _version(p) in server.yanked,
            }
        )
    return json.dumps({"info": {"name": project}, "releases": releases}).encode()


@contextmanager
def serve(server: IndexServer) -> Iterator[IndexServer]:
    """Run ``server`` on a free port of its host until the block ends."""
    failures = {"left": server.fail_first}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, code: int, body: bytes, ctype: str = "text/plain") -> None:
            try:
                self._send_now(code, body, ctype)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a deadline test): nothing to report

        def _send_now(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if server.trickle and self.path.startswith("/files/"):
                for i in range(0, len(body), 4):
                    self.wfile.write(body[i : i + 4])
                    self.wfile.flush()
                    time.sleep(0.5)
            else:
                self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            server.requests.append(self.path)
            server.auth_headers.append(self.headers.get("Authorization"))
            if server.delay:
                time.sleep(server.delay)
            if failures["left"] > 0:
                failures["left"] -= 1
                self._send(500, b"temporary failure")
                return
            if server.auth:
                want = base64.b64encode(f"{server.auth[0]}:{server.auth[1]}".encode()).decode()
                if self.headers.get("Authorization") != f"Basic {want}":
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="index"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
            parts = [p for p in self.path.split("?")[0].split("/") if p]
            accept = self.headers.get("Accept", "")
            if len(parts) == 2 and parts[0] == "files":
                if server.redirect_files_to:
                    self.send_response(302)
                    self.send_header("Location", f"{server.redirect_files_to}/files/{parts[1]}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                path = server.folder / parts[1]
                if path.is_file():
                    self._send(200, path.read_bytes(), "application/octet-stream")
                    return
            elif len(parts) == 2 and parts[0] == "simple" and _files(server, parts[1]):
                project = parts[1]
                json_ok = "application/vnd.pypi.simple.v1+json" in accept
                if server.shape == "simple-json" or (server.shape == "simple" and json_ok):
                    self._send(
                        200, _simple_json(server, project), "application/vnd.pypi.simple.v1+json"
                    )
                    return
                if server.shape in ("simple-html", "simple"):
                    self._send(200, _simple_html(server, project), "text/html; charset=utf-8")
                    return
            elif (
                len(parts) == 3
                and parts[0] == "pypi"
                and parts[2] == "json"
                and server.shape == "legacy-json"
                and _files(server, parts[1])
            ):
                self._send(200, _legacy_json(server, parts[1]), "application/json")
                return
            self._send(404, b"not found")

        def log_message(self, *_args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer((server.host, 0), Handler)
    httpd.daemon_threads = True
    server.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()
