"""pip's configuration as sglforge reads it is what pip reads, for the installed pip and for
the newest pip on the index (a different ``Configuration.items()`` shape since pip 25.2).

Three readers are held together on the same files and variables: sglforge's own reader
(``index._pip_config_read``, no pip import), pip's loader in-process (``_pip_config_here``)
and the ``pip config list`` command. The cases are the class "which file wins": several
global directories, the legacy and the XDG user file, ``$PIP_CONFIG_FILE`` present, missing
and ``/dev/null``, the site file, key spellings, ``[DEFAULT]`` values and the ``PIP_*``
variables pip ignores. A file pip refuses is refused by both.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sglforge import index

SRC = Path(index.__file__).resolve().parents[1]
PROBE_ENV = {":env:.no-input", ":env:.disable-pip-version-check"}  # set by the probe itself

# Run under a given pip: every case's three readings as JSON, one line per case.
COMPARE = textwrap.dedent(
    """
    import json, os, sys
    import pip
    from sglforge import index
    cases = json.loads(sys.argv[1])
    for case in cases:
        os.environ.clear()
        os.environ.update(case["env"])
        sys.prefix = case["prefix"]
        row = {"pip": pip.__version__}
        try:
            row["ours"] = index._pip_config_read()
        except index._Unreadable as exc:
            row["ours"] = "refused: " + str(exc)
        try:
            from pip._internal.configuration import Configuration
            loaded = Configuration(isolated=False)
            loaded.load()
            row["pips"] = index._flat(loaded.items())
        except Exception as exc:
            row["pips"] = "refused: " + type(exc).__name__
        print(json.dumps(row))
    """
)


def write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return str(path)


def cases(tmp: Path) -> dict[str, dict]:
    """name -> {env, prefix}; every case has its own HOME and XDG folders."""
    out: dict[str, dict] = {}

    def case(name: str, env: dict[str, str] | None = None, files: dict[str, str] | None = None):
        root = tmp / name
        home, prefix = root / "home", root / "prefix"
        home.mkdir(parents=True)
        prefix.mkdir(parents=True)
        for rel, text in (files or {}).items():
            write(root / rel, text)
        base = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "XDG_CONFIG_DIRS": f"{root}/sysa:{root}/sysb",
            "XDG_CONFIG_HOME": str(root / "xdg"),
        }
        full = {**base, **{k: v.replace("{root}", str(root)) for k, v in (env or {}).items()}}
        out[name] = {"env": full, "prefix": str(prefix)}

    two_global = {
        "sysa/pip/pip.conf": "[global]\nindex-url = https://a.example/simple\ntimeout = 5\n",
        "sysb/pip/pip.conf": "[global]\nindex-url = https://b.example/simple\n",
    }
    case("global-dirs-in-order", files=two_global)
    case(
        "legacy-and-xdg-user",
        files={
            **two_global,
            "home/.pip/pip.conf": "[global]\nindex-url = https://legacy.example/simple\n"
            "proxy = http://legacy:1\n",
            "xdg/pip/pip.conf": "[global]\nindex-url = https://xdg.example/simple\n",
        },
    )
    user = {
        "home/.pip/pip.conf": "[global]\nproxy = http://user:1\n",
        "xdg/pip/pip.conf": "[download]\nindex-url = https://user.example/simple\n",
    }
    case(
        "config-file-present-skips-user",
        env={"PIP_CONFIG_FILE": "{root}/env.conf"},
        files={**two_global, **user, "env.conf": "[global]\ncert = /env/ca.pem\n"},
    )
    case(
        "config-file-missing-keeps-user",
        env={"PIP_CONFIG_FILE": "{root}/absent.conf"},
        files={**two_global, **user},
    )
    case(
        "config-file-devnull-skips-all",
        env={"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "https://env.example/simple"},
        files={**two_global, **user},
    )
    case(
        "site-over-user-env-over-all",
        env={
            "PIP_EXTRA_INDEX_URL": "file:///srv/a file:///srv/b",
            "PIP_VERSION": "1",
            "PIP_HELP": "1",
            "PIP_no_input": "1",
            "PIP_CLIENT_CERT": "/c.pem",
        },  # fmt: skip
        files={**user, "prefix/pip.conf": "[global]\nproxy = http://site:1\n"},
    )
    case(
        "spellings-and-defaults",
        env={"XDG_CONFIG_HOME": "   "},  # blank: ~/.config, as pip's platformdirs
        files={
            "home/.config/pip/pip.conf": "[DEFAULT]\ntrusted-host = t.example\n"
            "[global]\nIndex_URL = https://spelt.example/simple\n--find-links = /w\n"
            "[install]\nno-index = yes\n[freeze]\nall = 1\n",
        },
    )
    case(
        "a-broken-file",
        files={"xdg/pip/pip.conf": "[global\nindex-url = https://x.example/simple\n"},
    )
    return out


def readings(py_path: list[str], tmp: Path) -> dict[str, dict]:
    named = cases(tmp)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*py_path, str(SRC)])}
    res = subprocess.run(
        [sys.executable, "-c", COMPARE, json.dumps(list(named.values()))],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    return dict(zip(named, rows, strict=True))


def check(rows: dict[str, dict]) -> None:
    for name, row in rows.items():
        if name == "a-broken-file":
            assert str(row["ours"]).startswith("refused: "), row
            assert "pip.conf" in row["ours"], row  # the file is named
            assert str(row["pips"]).startswith("refused: "), row  # pip refuses it too
            continue
        assert row["ours"] == row["pips"], (name, row["pip"], row)
    # the cases hold what they claim, under this pip
    assert rows["global-dirs-in-order"]["ours"]["global.index-url"] == "https://b.example/simple"
    legacy = rows["legacy-and-xdg-user"]["ours"]
    assert legacy["global.index-url"] == "https://xdg.example/simple"
    assert legacy["global.proxy"] == "http://legacy:1"
    present = rows["config-file-present-skips-user"]["ours"]
    assert present["global.cert"] == "/env/ca.pem" and "global.proxy" not in present
    assert rows["config-file-missing-keeps-user"]["ours"]["global.proxy"] == "http://user:1"
    devnull = rows["config-file-devnull-skips-all"]["ours"]
    assert not [k for k in devnull if not k.startswith(":env:.")], devnull
    site = rows["site-over-user-env-over-all"]["ours"]
    assert site["global.proxy"] == "http://site:1"
    assert site[":env:.extra-index-url"] == "file:///srv/a file:///srv/b"
    assert site[":env:.no-input"] == "1" and site[":env:.client-cert"] == "/c.pem"
    assert ":env:.version" not in site and ":env:.help" not in site
    spelt = rows["spellings-and-defaults"]["ours"]
    assert spelt["global.index-url"] == "https://spelt.example/simple"
    assert spelt["global.find-links"] == "/w" and spelt["install.trusted-host"] == "t.example"


def test_our_reader_is_the_installed_pips_loader(tmp_path: Path) -> None:
    check(readings([], tmp_path))


@pytest.fixture(scope="module")
def newest_pip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The newest pip wheel on the machine's index (pip >= 25.2: the per-file shape)."""
    dest = tmp_path_factory.mktemp("pip-wheel")
    res = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
         "--no-cache-dir", "-q", "-d", str(dest), "pip>=25.2"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    wheels = sorted(dest.glob("pip-*.whl"))
    assert res.returncode == 0 and wheels, f"no pip >= 25.2 wheel from the index: {res.stderr}"
    return wheels[0]


def test_our_reader_is_the_newest_pips_loader(newest_pip: Path, tmp_path: Path) -> None:
    rows = readings([str(newest_pip)], tmp_path)
    assert int(rows["global-dirs-in-order"]["pip"].split(".")[0]) >= 25
    check(rows)


def pip_config_list(env: dict[str, str], py_path: list[str]) -> dict[str, str]:
    env = {**env, "PYTHONPATH": os.pathsep.join(py_path)} if py_path else env
    out = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        env=env, capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    found = {}
    for line in out.splitlines():
        key, _, raw = line.partition("=")
        found[key.strip()] = str(ast.literal_eval(raw))
    return {k: v for k, v in found.items() if k not in PROBE_ENV}


@pytest.mark.parametrize("which", ["installed", "newest"])
def test_the_command_prints_what_we_read(
    which: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    py_path = [str(request.getfixturevalue("newest_pip"))] if which == "newest" else []
    conf = tmp_path / "pip.conf"
    conf.write_text(
        "[global]\nindex-url = https://mirror.example/simple\n"
        "[download]\nextra-index-url = file:///srv/a file:///srv/b\n"
        "[install]\nfind-links = /srv/wheels\n"
    )
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("PIP_PROXY", "http://proxy.example:3128")
    ours = index._pip_config_read()
    assert ours is not None
    assert {k: v for k, v in ours.items() if k not in PROBE_ENV} == pip_config_list(
        dict(os.environ), py_path
    )


def test_isolated_mode_is_left_to_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_ISOLATED", "1")
    assert index._pip_config_here() is None
    assert index._pip_config_read() is None


def test_download_takes_download_over_global_and_ignores_install_and_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As pip download's option parser: sections global, download, then the variables;
    [install] is another command's; an empty value is no value."""
    conf = tmp_path / "pip.conf"
    conf.write_text(
        "[global]\nindex-url = https://global.example/simple\nproxy = http://g:1\n"
        "[install]\nindex-url = https://install.example/simple\n"
        "[download]\nproxy =\nextra-index-url = https://dl.example/simple\n"
    )
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    monkeypatch.delenv(index.INDEX_ENV, raising=False)
    index.forget()
    try:
        got = index.config()
    finally:
        index.forget()
    urls = [ix.url for ix in got.indexes]
    assert urls[:2] == ["https://global.example/simple", "https://dl.example/simple"], urls
    assert got.proxy == "http://g:1"


def test_a_file_pip_refuses_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text("index-url = https://no-section.example/simple\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    index.forget()
    from sglforge.errors import UpstreamError

    try:
        with pytest.raises(UpstreamError) as err:
            index.config()
    finally:
        index.forget()
    assert str(conf) in err.value.message and "pip config debug" in (err.value.hint or "")
