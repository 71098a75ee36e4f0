"""Issue 12, section 2: long work shows progress on stderr; stdout stays the result.

Every test runs the real command line (``python3 -m sglforge``) in a subprocess. Under a
pseudo-terminal (``pty``) as stderr a bar is redrawn in place (carriage returns); with stderr a
pipe there is one plain line per step; ``--json`` keeps stdout pure JSON and stderr plain lines;
``-q`` prints nothing on success. The byte-level test downloads wheels from a PyPI stand-in
on 127.0.0.1 (``$SGLFORGE_PYPI_URL``), which sglforge.pypi reads through PyPI's JSON API.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import pty
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from synthetic import make_project, make_upstream

SRC = Path(__file__).resolve().parents[2] / "src"


def run(
    args: list[str], cwd: Path, *, tty: bool, extra_env: dict[str, str] | None = None
) -> tuple[int, str, bytes]:
    """(exit code, stdout, stderr bytes) of ``python3 -m sglforge ARGS``; stderr is a pty
    when ``tty``, else a pipe. stdout is always a pipe (it carries the result)."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "120", "TERM": "xterm"}
    env.update(extra_env or {})
    out_path = cwd / ".stdout"
    with open(out_path, "wb") as out:
        if tty:
            master, slave = pty.openpty()
            proc = subprocess.Popen(
                [sys.executable, "-m", "sglforge", *args],
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=slave,
            )
            os.close(slave)
            err = b""
            while True:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                err += chunk
            os.close(master)
            code = proc.wait(timeout=120)
        else:
            res = subprocess.run(
                [sys.executable, "-m", "sglforge", *args],
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.PIPE,
                timeout=120,
                check=False,
            )
            code, err = res.returncode, res.stderr
    return code, out_path.read_text(), err


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path, make_upstream(tmp_path))


CHECK = ["patches", "check", "--tags", ">=1.0"]


def test_check_draws_a_bar_on_a_terminal(project: Path) -> None:
    code, out, err = run(CHECK, project, tty=True)
    assert code == 1, err  # the synthetic queue conflicts at v1.1: problems found
    assert "v1.1" in out
    # the per-ref task is redrawn in place and ends full
    assert b"\r" in err and b"\x1b[K" in err, err
    assert b"check [" in err and b"100%  2/2" in err, err
    # plain per-step lines are for pipes, not for terminals
    assert b"check 1/2" not in err, err


def test_check_prints_plain_lines_without_a_terminal(project: Path) -> None:
    code, out, err = run(CHECK, project, tty=False)
    assert code == 1, err
    text = err.decode()
    assert "\r" not in text and "\x1b" not in text, text
    steps = [ln for ln in text.splitlines() if ln.startswith("check ")]
    # refs are checked in parallel: either may finish first
    assert [s.split()[1] for s in steps] == ["1/2", "2/2"], text
    assert {s.split()[2] for s in steps} == {"v1.0", "v1.1"}, text


def test_apply_reports_each_patch(project: Path) -> None:
    code, _out, err = run(["patches", "apply", "--ref", "v1.0"], project, tty=False)
    assert code == 0, err
    lines = [ln for ln in err.decode().splitlines() if ln.startswith("apply at v1.0 ")]
    assert lines[0] == "apply at v1.0 1/8 0001-fix-a.patch", err
    assert len(lines) == 8, err


def test_json_keeps_stdout_pure_and_progress_plain_on_stderr(project: Path) -> None:
    """Under --json (the workflow init writes runs publish --json) stdout is the document
    alone and stderr still shows the work, as plain lines on a terminal too: no bar, no
    colour, so a CI log never looks hung. -q --json: errors only."""
    for tty in (True, False):
        code, out, err = run([*CHECK, "--json"], project, tty=tty)
        assert code == 1, err
        doc = json.loads(out)  # nothing but the document on stdout
        assert doc["schema"] == 1 and doc["ok"] is False
        text = err.decode().replace("\r\n", "\n")  # a terminal's own line ends
        assert "\r" not in text and "\x1b" not in text, text
        steps = [ln for ln in text.splitlines() if ln.startswith("check ")]
        assert [s.split()[1] for s in steps] == ["1/2", "2/2"], text
        code, out, err = run(["-q", *CHECK, "--json"], project, tty=tty)
        assert code == 1 and json.loads(out)["ok"] is False
        assert err == b"", err


def test_quiet_prints_nothing_on_success(project: Path) -> None:
    code, out, err = run(["-q", "patches", "check", "--ref", "v1.0"], project, tty=True)
    assert code == 0, err
    assert err == b"", err
    assert "v1.0" in out  # the result itself still goes to stdout


def test_quiet_still_prints_errors(project: Path) -> None:
    code, _out, err = run(["-q", "patches", "check", "--ref", "no-such-ref"], project, tty=False)
    assert code == 3, err
    assert err.decode().startswith("error: "), err


def test_verbose_shows_each_git_command(project: Path) -> None:
    code, _out, err = run(["-v", "patches", "check", "--ref", "v1.0"], project, tty=False)
    assert code == 0, err
    assert "git -c http.lowSpeedLimit=1000" in err.decode() and " fetch --progress" in err.decode()
    code, _out, err = run(["patches", "check", "--ref", "v1.0"], project, tty=False)
    assert "git " not in err.decode(), err


def test_quiet_and_verbose_exclude_each_other(project: Path) -> None:
    code, _out, err = run(["-q", "-v", "patches", "list"], project, tty=False)
    assert code == 2 and b"exclude each other" in err, err


# --- bytes: wheels from a PyPI stand-in ---------------------------------------------------

WHEEL_BYTES = 600_000


def _wheel(folder: Path, version: str) -> Path:
    """A pure wheel of project ``demo`` whose payload does not compress (so the download
    really is WHEEL_BYTES-ish long)."""
    path = folder / f"demo-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("demo/__init__.py", f"__version__ = {version!r}\n")
        zf.writestr("demo/blob.bin", hashlib.shake_256(version.encode()).digest(WHEEL_BYTES))
        zf.writestr(f"demo-{version}.dist-info/METADATA", f"Name: demo\nVersion: {version}\n")
    return path


@pytest.fixture
def pypi_standin(tmp_path: Path) -> Iterator[str]:
    """An index on 127.0.0.1 answering ``GET /pypi/demo/json`` and serving the files.

    The document has the keys sglforge.pypi reads from PyPI's JSON API
    (https://docs.pypi.org/api/json/: ``releases`` -> version -> files with ``filename``,
    ``url``, ``packagetype``, ``digests.sha256``, ``yanked``), and files come with a
    Content-Length, as PyPI's CDN sends them. It differs from PyPI in holding nothing else.
    """
    files = tmp_path / "files"
    files.mkdir()
    wheels = [_wheel(files, v) for v in ("0.1", "0.2")]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            host = f"http://127.0.0.1:{self.server.server_address[1]}"
            if self.path == "/pypi/demo/json":
                releases = {
                    w.name.split("-")[1]: [
                        {
                            "filename": w.name,
                            "url": f"{host}/files/{w.name}",
                            "packagetype": "bdist_wheel",
                            "digests": {"sha256": hashlib.sha256(w.read_bytes()).hexdigest()},
                            "yanked": False,
                        }
                    ]
                    for w in wheels
                }
                body = json.dumps({"info": {"name": "demo"}, "releases": releases}).encode()
            elif self.path.startswith("/files/") and (files / self.path[7:]).is_file():
                body = (files / self.path[7:]).read_bytes()
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _pypi_project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "patches").mkdir(parents=True)
    (root / "patches" / "series").write_text("")
    (root / "patches" / "upstream.toml").write_text('url = "pypi:demo>=0.1"\nref = "v0.2"\n')
    return root


def test_wheel_downloads_draw_byte_bars_on_a_terminal(tmp_path: Path, pypi_standin: str) -> None:
    root = _pypi_project(tmp_path)
    env = {"SGLFORGE_PYPI_URL": pypi_standin, "SGLFORGE_CACHE": str(tmp_path / "cache")}
    code, out, err = run(["patches", "check", "--tags", ">=0.1"], root, tty=True, extra_env=env)
    assert code == 0, err
    assert "v0.1" in out and "v0.2" in out
    text = err.decode()
    assert "\r" in text, text
    # lazily: the pin's release when upstream is opened, then the one check asks for
    assert text.index("importing 1 release(s): 0.2") < text.index("importing 1 release(s): 0.1")
    for version in ("0.1", "0.2"):
        assert f"wheel 1/1 demo-{version}-py3-none-any.whl [" in text, text
    # the byte counter reached the whole file (the size is the Content-Length)
    assert "100%  60" in text and " kB/60" in text, text
    assert "pypi:demo releases [" in text and "100%  1/1" in text, text
    # a second run downloads nothing
    code, _out, err = run(["patches", "check", "--tags", ">=0.1"], root, tty=True, extra_env=env)
    assert code == 0 and b"wheel " not in err, err


def test_wheel_downloads_are_plain_lines_without_a_terminal(
    tmp_path: Path, pypi_standin: str
) -> None:
    root = _pypi_project(tmp_path)
    env = {"SGLFORGE_PYPI_URL": pypi_standin, "SGLFORGE_CACHE": str(tmp_path / "cache")}
    code, _out, err = run(["patches", "check", "--tags", ">=0.1"], root, tty=False, extra_env=env)
    assert code == 0, err
    text = err.decode()
    assert "\r" not in text, text
    lines = text.splitlines()
    assert any(ln.startswith("wheel 1/1 demo-0.2-py3-none-any.whl (60") for ln in lines), text
    assert any(ln.startswith("wheel 1/1 demo-0.1-py3-none-any.whl: 60") for ln in lines), text
    assert "pypi:demo releases 1/1 v0.1" in lines, text
