"""Issue 31 (E1, E2): no credential in a URL reaches a file sglforge writes, a line it prints
or a label. One rule (``urls.scrub``: scheme, host, port and path only) for the trailers
``patches import URL`` records, the pin ``init --upstream URL`` writes, and the headers
``patches list`` and ``upstream tags`` print. Real git repositories, a web server on 127.0.0.1.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from sglforge.cli import main
from sglforge.init import init_project, recorded_upstream
from sglforge.urls import scrub, scrub_text
from synthetic import commit, edit, git, make_project, make_upstream

SECRET = "QTOK9secret"
# Every place a token rides in a URL (userinfo, a user-only token, the common query names of
# GitHub, GitLab, S3, GCS and Azure signed URLs, the fragment), including percent-encoding.
CARRIERS = [
    f"bob:{SECRET}@HOST/p/x.patch",
    f"{SECRET}@HOST/p/x.patch",
    f"oauth2:{SECRET}%40x@HOST/p/x.patch",
    f"HOST/p/x.patch?token={SECRET}",
    f"HOST/p/x.patch?access_token={SECRET}&a=1",
    f"HOST/p/x.patch?private_token={SECRET}",
    f"HOST/p/x.patch?sig={SECRET}",
    f"HOST/p/x.patch?signature={SECRET}",
    f"HOST/p/x.patch?X-Amz-Algorithm=AWS4&X-Amz-Credential=a%2F{SECRET}&X-Amz-Signature={SECRET}",
    f"HOST/p/x.patch?X-Goog-Signature={SECRET}",
    f"HOST/p/x.patch?sv=2021&sp=r&sig={SECRET}",  # Azure SAS
    f"HOST/p/x.patch#{SECRET}",
    f"u:{SECRET}@HOST/p/x.patch?token={SECRET}#{SECRET}",
]


@pytest.mark.parametrize("carrier", CARRIERS)
def test_the_record_form_of_a_url_keeps_no_secret(carrier: str) -> None:
    url = "https://" + carrier.replace("HOST", "git.example.com:8443")
    assert scrub(url) == "https://git.example.com:8443/p/x.patch"
    line = f"Upstream-Status: Submitted [{url}]"
    assert scrub_text(line, record=True) == (
        "Upstream-Status: Submitted [https://git.example.com:8443/p/x.patch]"
    )


def cli(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, list(args))
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stdout, res.stderr


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    folder = tmp_path / "www"
    folder.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw) -> None:  # type: ignore[no-untyped-def]
            super().__init__(*a, directory=str(folder), **kw)

        def log_message(self, *_a) -> None:  # type: ignore[no-untyped-def]
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", folder
    finally:
        server.shutdown()
        server.server_close()


def _patch_text(tmp_path: Path, upstream: Path, n: int) -> str:
    scratch = tmp_path / f"work{n}"
    git(tmp_path, "clone", "-q", str(upstream), str(scratch))
    git(scratch, "checkout", "-q", "v1.0")
    edit(scratch, "python/pkg/b.py", 3 + n, f"b FIXED {n}")
    commit(scratch, f"pkg: fix b {n}\n\nWhy: a user's fix.")
    return git(scratch, "format-patch", "-1", "--stdout", "HEAD") + "\n"


def test_patches_import_url_records_and_prints_no_credential(
    tmp_path: Path, served: tuple[str, Path]
) -> None:
    host, folder = served
    upstream = make_upstream(tmp_path)
    project = make_project(tmp_path, upstream, [])
    (folder / "pull").mkdir()
    urls = [
        f"http://bob:{SECRET}@{host}/pull/1.patch?token={SECRET}#frag",
        f"http://{SECRET}@{host}/pull/2.patch",
        f"http://{host}/pull/3.patch?private_token={SECRET}&X-Amz-Signature={SECRET}",
        f"http://{host}/commit/0123456789abcdef.patch?access_token={SECRET}",
    ]
    for n, url in enumerate(urls, 1):
        name = url.split("/")[-1].split(".")[0]
        (folder / url.split("/")[-2] / f"{name}.patch").parent.mkdir(exist_ok=True)
        (folder / url.split("/")[-2] / f"{name}.patch").write_text(
            _patch_text(tmp_path, upstream, n)
        )
        args = ["--root", str(project), "patches", "import", url]
        if n == 2:  # an --origin given by hand goes through the same rule
            args += ["--origin", f"https://x:{SECRET}@example.com/pr/2?sig={SECRET}"]
        code, out, err = cli(*args)
        assert code == 0, err
        assert SECRET not in out + err
        code, out, err = cli(*args[:-2] if n == 2 else args, "--json")
        assert SECRET not in out + err  # a second import of the same URL: text or refusal
    written = "".join(p.read_text() for p in (project / "patches").glob("*.patch"))
    assert SECRET not in written and "frag" not in written
    assert f"Origin: http://{host}/pull/1.patch\n" in written
    assert f"Upstream-Status: Submitted [http://{host}/pull/1]\n" in written
    assert "Origin: https://example.com/pr/2\n" in written
    assert "Upstream-Status: Backport [0123456789ab]" in written  # the commit is still seen
    # an error names the URL without its secrets too
    code, out, err = cli(
        "--root",
        str(project),
        "patches",
        "import",
        f"http://u:{SECRET}@{host}/none.patch?token={SECRET}",
    )
    assert code == 3 and "HTTP 404" in err and SECRET not in out + err


@pytest.mark.parametrize(
    "given",
    [
        f"https://bob:{SECRET}@127.0.0.1:5603/sgl/sglang.git?token={SECRET}",
        f"https://{SECRET}@github.com/sgl-project/sglang.git",
        f"https://gitlab.example.com/sgl/sglang.git?private_token={SECRET}",
        f"ssh://git:{SECRET}@git.example.com:2222/sgl/sglang.git",
    ],
)
def test_init_stores_a_credentialed_upstream_without_its_credentials(
    tmp_path: Path, given: str
) -> None:
    dest = tmp_path / "p"
    code, out, err = cli("init", "--no-git", "--upstream", given, str(dest))
    assert code == 0, err
    assert SECRET not in out + err
    assert "credential helper" in out  # says how git gets them instead
    pin = (dest / "patches" / "upstream.toml").read_text()
    assert SECRET not in pin and f'url = "{scrub(given)}"' in pin
    code, out, err = cli("--root", str(dest), "patches", "list")
    assert code == 0 and SECRET not in out + err, err
    code, out, err = cli("--root", str(dest), "init", "--json", "--no-git", str(tmp_path / "q"))
    assert SECRET not in out + err


def test_an_upstream_without_credentials_is_kept_and_a_hand_edited_one_is_never_shown(
    tmp_path: Path,
) -> None:
    for plain in (
        "https://github.com/sgl-project/sglang",
        "ssh://git@git.example.com/sgl/sglang.git",  # a login name is no secret
        "git@github.com:sgl-project/sglang.git",
        "pypi:sglang>=0.5",
    ):
        assert recorded_upstream(plain) == (plain, "")
    dest = tmp_path / "p"
    init_project(dest)
    pin = dest / "patches" / "upstream.toml"
    text = pin.read_text().replace(
        'url = "pypi:sglang"', f'url = "https://u:{SECRET}@h.example/s.git?t={SECRET}"'
    )
    pin.write_text(text)
    for args in (["patches", "list"], ["patches", "list", "--json"]):
        code, out, err = cli("--root", str(dest), *args)
        assert SECRET not in out + err, out
    assert json.loads(cli("--root", str(dest), "patches", "list", "--json")[1])["pin"]["url"] == (
        "https://***@h.example/s.git?***"
    )
