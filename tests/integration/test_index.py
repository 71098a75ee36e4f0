"""The index pip would read: every standard shape, configured the way users configure pip.

Each test starts a local index (``tests/index_server.py``, a TEST DOUBLE on 127.0.0.1) and
imports releases of the stand-in project ``fakeglang`` through ``sglforge.pypi``.
"""

from __future__ import annotations

import os
import stat
import subprocess
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.version import Version
from test_pypi_history import PROJECT, make_wheel

from index_server import IndexServer, serve
from sglforge import git, index, pypi
from sglforge.errors import UpstreamError
from synthetic import git as run_git

SHAPES = ["simple", "simple-json", "simple-html", "legacy-json"]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    folder = tmp_path / "wheels-on-index"
    for v in ("0.1.0", "0.2.0"):
        make_wheel(folder, v)
    return folder


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("PIP_INDEX") or name.startswith("PIP_EXTRA") or name == "NETRC":
            monkeypatch.delenv(name)
    monkeypatch.delenv(index.INDEX_ENV, raising=False)
    monkeypatch.setenv("SGLFORGE_PIP_TIMEOUT", "5")
    index.forget()
    yield
    index.forget()


def wheel_requests(server: IndexServer) -> list[str]:
    return [r for r in server.requests if r.startswith("/files/")]


def import_all(cache: Path) -> Path:
    return pypi.history(cache, PROJECT, ">=0.1")


@pytest.mark.parametrize("relative", [True, False], ids=["relative", "absolute"])
@pytest.mark.parametrize("shape", SHAPES)
def test_every_index_shape_with_relative_and_absolute_urls(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch, shape: str, relative: bool
) -> None:
    with serve(IndexServer(folder, shape=shape, relative=relative)) as server:
        monkeypatch.setenv(index.INDEX_ENV, server.url())
        repo = import_all(tmp_path / "cache")
        assert pypi.tagged_versions(repo) == ["0.1.0", "0.2.0"]
        assert sorted(wheel_requests(server)) == [
            "/files/fakeglang-0.1.0-py3-none-any.whl",
            "/files/fakeglang-0.2.0-py3-none-any.whl",
        ]


def test_the_same_release_is_the_same_commit_from_every_shape(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = set()
    for n, shape in enumerate(SHAPES):
        with serve(IndexServer(folder, shape=shape)) as server:
            monkeypatch.setenv(index.INDEX_ENV, server.url())
            index.forget()
            repo = pypi.ensure(tmp_path / f"c{n}", PROJECT, ["0.2.0"])
            seen.add(git.commit_id(repo, "v0.2.0"))
    assert len(seen) == 1


def test_pip_index_url_and_a_pip_conf_file_configure_it(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve(IndexServer(folder, shape="simple-html")) as server:
        # 1. the environment variable pip reads
        monkeypatch.setenv("PIP_INDEX_URL", server.url())
        assert index.config().indexes[0].url == server.url()
        assert index.config().indexes[0].origin == "$PIP_INDEX_URL"
        assert pypi.tagged_versions(pypi.ensure(tmp_path / "a", PROJECT, ["0.1.0"])) == ["0.1.0"]
        # 2. a pip.conf named by PIP_CONFIG_FILE
        monkeypatch.delenv("PIP_INDEX_URL")
        conf = tmp_path / "pip.conf"
        conf.write_text(f"[global]\nindex-url = {server.url()}\n")
        monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
        index.forget()
        first = index.config().indexes[0]
        assert first.url == server.url() and "[global]" in first.origin
        assert pypi.tagged_versions(pypi.ensure(tmp_path / "b", PROJECT, ["0.2.0"])) == ["0.2.0"]
        # 3. $SGLFORGE_PYPI_URL wins over pip's setting
        monkeypatch.setenv(index.INDEX_ENV, "http://127.0.0.1:9/simple")
        index.forget()
        assert index.config().indexes == (
            index.Index("http://127.0.0.1:9/simple", "$SGLFORGE_PYPI_URL"),
        )


def test_extra_index_urls_are_read_after_the_main_one(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    make_wheel(empty, "9.9.9").rename(empty / "other-9.9.9-py3-none-any.whl")
    with (
        serve(IndexServer(empty, shape="simple-json")) as main,
        serve(IndexServer(folder, shape="simple-html")) as extra,
    ):
        monkeypatch.setenv("PIP_INDEX_URL", main.url())
        monkeypatch.setenv("PIP_EXTRA_INDEX_URL", extra.url())
        assert pypi.available_versions(PROJECT, ">=0.1") == [
            pypi.Version("0.1.0"),
            pypi.Version("0.2.0"),
        ]
        assert main.requests and extra.requests


def test_a_folder_index_and_find_links(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # never asked: no-index
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    repo = pypi.ensure(tmp_path / "cache", PROJECT, ["0.2.0"])
    assert pypi.tagged_versions(repo) == ["0.2.0"]


def test_basic_auth_from_the_url_and_from_netrc(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    with serve(IndexServer(folder, shape="simple", auth=("ann", "s3cret-token"))) as server:
        monkeypatch.setenv(index.INDEX_ENV, server.url(with_auth=True))
        repo = pypi.ensure(tmp_path / "a", PROJECT, ["0.1.0"])
        assert pypi.tagged_versions(repo) == ["0.1.0"]
        # the same index, credentials from ~/.netrc instead of the URL
        netrc = tmp_path / "netrc"
        netrc.write_text("machine 127.0.0.1 login ann password s3cret-token\n")
        netrc.chmod(0o600)
        monkeypatch.setenv("NETRC", str(netrc))
        monkeypatch.setenv(index.INDEX_ENV, server.url(with_auth=False))
        index.forget()
        assert pypi.tagged_versions(pypi.ensure(tmp_path / "b", PROJECT, ["0.2.0"])) == ["0.2.0"]
        # wrong credentials: refused, and the password is in no message nor folder name
        monkeypatch.delenv("NETRC")
        monkeypatch.setenv(
            index.INDEX_ENV, server.url(with_auth=False).replace("//", "//ann:bad-pw-xyz@")
        )
        index.forget()
        with pytest.raises(UpstreamError) as err:
            pypi.ensure(tmp_path / "c", PROJECT, ["0.2.0"])
        assert "refused the request (401)" in str(err.value)
        assert "bad-pw-xyz" not in str(err.value) and "***@" in str(err.value)
    for path in tmp_path.rglob("*"):
        assert "s3cret" not in path.name and "bad-pw" not in path.name
    out = capfd.readouterr()
    assert "s3cret" not in out.out + out.err and "bad-pw" not in out.out + out.err


def test_authorization_never_follows_a_redirect_to_another_host(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve(IndexServer(folder, host="127.0.0.2")) as files_host:
        index_host = IndexServer(
            folder, auth=("ann", "s3cret-token"), relative=False, redirect_files_to=files_host.base
        )
        with serve(index_host):
            monkeypatch.setenv(index.INDEX_ENV, index_host.url(with_auth=True))
            repo = pypi.ensure(tmp_path / "cache", PROJECT, ["0.1.0"])
            assert pypi.tagged_versions(repo) == ["0.1.0"]
    assert wheel_requests(files_host) == ["/files/fakeglang-0.1.0-py3-none-any.whl"]
    assert files_host.auth_headers == [None]  # the other host never saw the credentials


def test_a_wrong_sha256_is_refused_and_leaves_nothing(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for shape in ("simple-json", "simple-html", "legacy-json"):
        with serve(IndexServer(folder, shape=shape, wrong_sha256=True)) as server:
            monkeypatch.setenv(index.INDEX_ENV, server.url())
            index.forget()
            cache = tmp_path / shape
            with pytest.raises(UpstreamError) as err:
                pypi.ensure(cache, PROJECT, ["0.1.0"])
            assert "does not match the index's sha256" in str(err.value), shape
            wheels = cache / "pypi-fakeglang" / "wheels"
            assert not wheels.exists() or not list(wheels.iterdir()), shape
            assert pypi.tagged_versions(pypi.store(cache, PROJECT)) == []


def test_no_sha256_on_the_index_is_a_loud_warning_and_recorded(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    with serve(IndexServer(folder, shape="simple-html", no_sha256=True)) as server:
        monkeypatch.setenv(index.INDEX_ENV, server.url())
        cache = tmp_path / "cache"
        pypi.ensure(cache, PROJECT, ["0.1.0"])
        err = capfd.readouterr().err
        assert "warning:" in err and "gives no sha256" in err and "unverified" in err
        wheel = cache / "pypi-fakeglang" / "wheels" / "fakeglang-0.1.0-py3-none-any.whl"
        recorded = (wheel.parent / (wheel.name + ".sha256")).read_text().split()[0]
        import hashlib

        assert recorded == hashlib.sha256(wheel.read_bytes()).hexdigest()
        # a cached wheel whose bytes changed is noticed on the next use and fetched again
        wheel.write_bytes(wheel.read_bytes() + b"tampered")
        import shutil

        shutil.rmtree(pypi.store(cache, PROJECT))
        server.requests.clear()
        pypi.ensure(cache, PROJECT, ["0.1.0"])
        assert "changed since it was downloaded" in capfd.readouterr().err
        assert wheel_requests(server) == ["/files/fakeglang-0.1.0-py3-none-any.whl"]
        assert hashlib.sha256(wheel.read_bytes()).hexdigest() == recorded


def test_a_500_then_success_is_retried(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve(IndexServer(folder, shape="simple-json", fail_first=2)) as server:
        monkeypatch.setenv(index.INDEX_ENV, server.url())
        repo = pypi.ensure(tmp_path / "cache", PROJECT, ["0.1.0"])
        assert pypi.tagged_versions(repo) == ["0.1.0"]
        assert server.requests[:3] == ["/simple/fakeglang/"] * 3


def test_a_slow_server_within_the_timeout_works_and_a_trickle_is_cut_off(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve(IndexServer(folder, shape="simple", delay=1.0)) as server:
        monkeypatch.setenv(index.INDEX_ENV, server.url())
        assert pypi.tagged_versions(pypi.ensure(tmp_path / "a", PROJECT, ["0.1.0"])) == ["0.1.0"]
    # each read gets an answer within the read timeout, but the whole never arrives in time
    monkeypatch.setenv("SGLFORGE_PIP_TIMEOUT", "1")  # per read; 20 s for the whole request
    with serve(IndexServer(folder, shape="simple", trickle=True)) as server:
        monkeypatch.setenv(index.INDEX_ENV, server.url())
        index.forget()
        started = time.monotonic()
        with pytest.raises(UpstreamError) as err:
            pypi.ensure(tmp_path / "b", PROJECT, ["0.1.0"])
        took = time.monotonic() - started
    assert "no complete answer within 20 s" in str(err.value)
    assert took < 40
    wheels = tmp_path / "b" / "pypi-fakeglang" / "wheels"
    assert not wheels.exists() or not list(wheels.iterdir())  # no temporary file left


def test_yanked_files_are_skipped_unless_asked_for_exactly(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    for shape in ("simple-json", "simple-html", "legacy-json"):
        with serve(IndexServer(folder, shape=shape, yanked=("0.2.0",))) as server:
            monkeypatch.setenv(index.INDEX_ENV, server.url())
            index.forget()
            assert pypi.available_versions(PROJECT, ">=0.1") == [pypi.Version("0.1.0")], shape
            with pytest.raises(UpstreamError) as err:
                pypi.ensure(tmp_path / f"{shape}-a", PROJECT, ["0.2.0"])
            assert "is yanked" in str(err.value)
            repo = pypi.ensure(tmp_path / f"{shape}-b", PROJECT, ["0.2.0"], exact=True)
            assert pypi.tagged_versions(repo) == ["0.2.0"]
            assert "is yanked" in capfd.readouterr().err


def test_malformed_index_answers_are_upstream_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import http.server
    import threading

    bodies = {
        "/simple/fakeglang/": (b"{not json", "application/vnd.pypi.simple.v1+json"),
        "/s2/fakeglang/": (b'{"files": 3}', "application/vnd.pypi.simple.v1+json"),
        "/s3/fakeglang/": (b"\x89PNG", "image/png"),
    }

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body, ctype = bodies.get(self.path, (b"", "text/plain"))
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_a: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        for root in ("simple", "s2", "s3"):
            monkeypatch.setenv(index.INDEX_ENV, f"http://127.0.0.1:{httpd.server_port}/{root}")
            index.forget()
            with pytest.raises(UpstreamError) as err:
                pypi.available_versions(PROJECT)
            assert "is not a readable index page" in str(err.value), root
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("value", ["inf", "nan", "-5", "abc", "1e999"])
def test_odd_timeouts_fall_back_to_sane_values(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("SGLFORGE_PIP_TIMEOUT", value)
    each, total = index.timeouts()
    assert 1 <= each <= 3600 and total == each * 20


def _hostile_wheel(path: Path, entries: list[tuple[str, bytes, int]]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = mode << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return path


def test_a_wheel_is_imported_as_pip_installs_it(tmp_path: Path) -> None:
    wheel = _hostile_wheel(
        tmp_path / "fakeglang-1.0-py3-none-any.whl",
        [
            ("fakeglang/__init__.py", b"ok = 1\n", stat.S_IFREG | 0o644),
            ("fakeglang/link", b"/etc/passwd", stat.S_IFLNK | 0o777),
            # (a .git folder refuses the whole wheel: tests/integration/test_hostile_wheels.py)
            ("fakeglang/../evil.py", b"x", stat.S_IFREG | 0o644),
            ("fakeglang/fifo", b"", stat.S_IFIFO | 0o644),
        ],
    )
    files = imported(wheel, PROJECT)
    assert sorted(files) == ["python/fakeglang/__init__.py"]


def test_zip_bombs_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pypi, "MAX_TOTAL_BYTES", 1 << 20)  # the real bound is 4 GiB
    cases = {
        "ratio": ([("fakeglang/big.py", b"\0" * (64 << 20), stat.S_IFREG | 0o644)], "zip bomb"),
        "two-ratio": (
            # each member alone under the per-member floor (32 MiB): the package's total decides
            [(f"fakeglang/m{i}.py", b"\0" * (8 << 20), stat.S_IFREG | 0o644) for i in range(3)],
            "unpacks to over",
        ),
        "total": (
            [(f"fakeglang/r{i}.py", os.urandom(400 << 10), stat.S_IFREG | 0o644) for i in range(3)],
            "unpacks to over",
        ),
    }
    for name, (entries, said) in cases.items():
        wheel = _hostile_wheel(tmp_path / f"fakeglang-1.0-py3-none-{name}.whl", entries)
        with pytest.raises(UpstreamError) as err:
            imported(wheel, PROJECT)
        assert said in str(err.value) and "removed from the cache" in str(err.value), name
        assert not wheel.exists(), name


@pytest.mark.parametrize(
    "fault", ["ok", "wrong-password", "unreachable", "server-error", "wrong-sha256", "no-sha256"]
)
def test_index_credentials_reach_no_output_of_any_command(
    tmp_path: Path, folder: Path, fault: str
) -> None:
    """A secret in PIP_INDEX_URL, through the CLI, on success and on every kind of failure:
    not on stdout, stderr, --json, in any file under the project or in any cache name."""
    import subprocess
    import sys

    secret = "tok-9f8e7d6c5b4a"
    root = tmp_path / "proj"
    (root / "patches").mkdir(parents=True)
    (root / "patches" / "series").write_text("")
    (root / "patches" / "upstream.toml").write_text(
        f'url = "pypi:{PROJECT}>=0.1"\nref = "v0.2.0"\n'
    )
    server = IndexServer(
        folder,
        auth=("ann", secret if fault != "wrong-password" else "other"),
        fail_first=100 if fault == "server-error" else 0,
        wrong_sha256=fault == "wrong-sha256",
        no_sha256=fault == "no-sha256",
    )
    with serve(server):
        url = server.url(with_auth=False).replace("//", f"//ann:{secret}@")
        if fault == "unreachable":
            url = f"http://ann:{secret}@127.0.0.1:9/simple"
        env = {
            **os.environ,
            "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"),
            "PIP_INDEX_URL": url,
            "SGLFORGE_CACHE": str(tmp_path / "cache"),
            "SGLFORGE_PIP_TIMEOUT": "2",
        }
        outputs = []
        for extra in ([], ["--json"]):
            res = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "sglforge",
                    "--root",
                    str(root),
                    "patches",
                    "check",
                    "--tags",
                    ">=0.1",
                    *extra,
                ],
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
            )
            outputs.append(res)
    expected = 0 if fault in ("ok", "no-sha256") else 3
    for res in outputs:
        assert res.returncode == expected, res.stderr
        assert secret not in res.stdout + res.stderr, (fault, res.stdout, res.stderr)
    if expected:
        assert "***@" in outputs[0].stderr or "127.0.0.1" in outputs[0].stderr
    for path in [*root.rglob("*"), *(tmp_path / "cache").rglob("*")]:
        assert secret not in path.name
        if path.is_file() and path.stat().st_size < (1 << 20):
            assert secret.encode() not in path.read_bytes(), path


def test_verbose_says_which_index_and_mirror_and_wheel(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """N17: `-v` names the index in use and where it was configured, each wheel's URL (or
    its cached file) and the mirror; the index's credentials never."""
    from click.testing import CliRunner

    from sglforge.cli import main

    secret = "tok-5e4d3c2b1a"
    root = tmp_path / "proj"
    (root / "patches").mkdir(parents=True)
    (root / "patches" / "series").write_text("")
    (root / "patches" / "upstream.toml").write_text(
        f'url = "pypi:{PROJECT}>=0.1"\nref = "v0.2.0"\n'
    )
    monkeypatch.setenv("SGLFORGE_CACHE", str(tmp_path / "cache"))
    with serve(IndexServer(folder, auth=("ann", secret))) as server:
        monkeypatch.setenv("PIP_INDEX_URL", server.url())
        args = ["--root", str(root), "-v", "patches", "check", "--tags", ">=0.1"]
        first = CliRunner().invoke(main, args)
        index.forget()
        again = CliRunner().invoke(main, args)
    assert first.exit_code == 0 and again.exit_code == 0, first.output + again.output
    err = first.stderr
    host = f"127.0.0.1:{server.port}"
    assert f"index http://***@{host}/simple (from $PIP_INDEX_URL): 2 files of {PROJECT}" in err
    assert f" {PROJECT}==0.2.0: http://***@{host}/files/" in err, err
    assert f"(index http://***@{host}/simple, from $PIP_INDEX_URL) -> " in err
    assert f"upstream pypi:{PROJECT}>=0.1: mirror " in err
    assert f"wheels from http://***@{host}/simple (from $PIP_INDEX_URL)" in err
    assert f"upstream pypi:{PROJECT}>=0.1: mirror " in again.stderr, again.stderr
    assert secret not in err + first.stdout + again.stderr + again.stdout


def imported(wheel: Path, project: str) -> dict[str, tuple[str, bytes]]:
    """repo path -> (git mode, bytes) of ``wheel`` as the store imports it (``_import_release``
    into a new store beside the wheel, read back with git)."""
    store = wheel.parent / f"{wheel.name}.store.git"
    pypi._init(store)
    pypi._import_release(store, Version("1.0"), wheel, project)
    fmt = "--format=%(objectmode) %(path)"
    listing = run_git(store, "ls-tree", "-r", fmt, "v1.0").splitlines()
    out = {}
    for line in listing:
        mode, path = line.split(" ", 1)
        blob = subprocess.run(
            ["git", "-C", str(store), "cat-file", "blob", f"v1.0:{path}"],
            capture_output=True,
            check=True,
        ).stdout
        out[path] = (mode, blob)
    return out


def _plain_wheel(path: Path, entries: dict[str, tuple[bytes, int]]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, (data, mode) in entries.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = mode << 16
            zf.writestr(info, data)
    return path


def test_wheel_files_keep_only_the_package_sources(tmp_path: Path) -> None:
    wheel = _plain_wheel(
        tmp_path / "sglang-1.0-cp311-cp311-manylinux_2_34_x86_64.whl",
        {
            "sglang/__init__.py": (b"x = 1\n", 0o100644),
            "sglang/tool.sh": (b"#!/bin/sh\n", 0o100755),
            "sglang/srt/grpc/_core.cpython-311-x86_64-linux-gnu.so": (b"\x7fELF", 0o100755),
            "sglang/jit/k.cuh": (b"#pragma once\n", 0o100644),
            "sglang/__pycache__/x.cpython-311.pyc": (b"junk", 0o100644),
            "sglang-1.0.dist-info/METADATA": (b"Name: sglang\n", 0o100644),
            "tools/get_version_tag.py": (b"pass\n", 0o100644),
        },
    )
    files = imported(wheel, "sglang")
    assert files == {
        "python/sglang/__init__.py": ("100644", b"x = 1\n"),
        "python/sglang/tool.sh": ("100755", b"#!/bin/sh\n"),
        "python/sglang/jit/k.cuh": ("100644", b"#pragma once\n"),
    }


def test_wheel_without_the_package_folder_is_an_upstream_error(tmp_path: Path) -> None:
    wheel = _plain_wheel(tmp_path / "other-1.0-py3-none-any.whl", {"other/x.py": (b"", 0o100644)})
    with pytest.raises(UpstreamError, match="no sglang/ package folder"):
        imported(wheel, "sglang")


def test_unreadable_wheel_names_the_file_and_how_to_recover(tmp_path: Path) -> None:
    wheel = tmp_path / "sglang-1.0-py3-none-any.whl"
    wheel.write_bytes(b"not a zip")
    with pytest.raises(UpstreamError) as err:
        imported(wheel, "sglang")
    # removed from the cache, so the next run downloads it again (issue 42)
    assert str(wheel) in err.value.message and "removed from the cache" in err.value.message
    assert not wheel.exists()
