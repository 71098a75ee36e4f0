"""Credentials never written, folders never followed (issue 42, F4, F13, F14, F15, F17): the
crash log's argv scrubbed and written 0600 into a private folder without following a planted
link; `tryout --use-registry` checked as `publish --registry` is; the try-out registry's YAML
quoted (its start never leaking a process: tests/integration/test_tryout_start.py); `init`
and `tryout` on a dangling link or a file in the path. Real files, no subprocess."""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path

import click
import pytest

from sglforge import tryout
from sglforge.cli.common import State, _crash_log
from sglforge.errors import ConfigError, LocalDiskError
from sglforge.util import write_private

TOKENS = [
    "https://bob:ghp_CRASHTOKEN1@127.0.0.1:5701/x.git?token=QQQ1",
    "--password=hunter2-SECRET",
    "https://bucket.s3/x?X-Amz-Signature=deadbeefSIG&X-Amz-Credential=AKIACRED",
    "ghp_abcdefghijklmnopqrstuvwx",
    "alice:S3cretPW@127.0.0.1:42509/crx",
]
SECRET_BITS = (
    "CRASHTOKEN1",
    "QQQ1",
    "hunter2",
    "deadbeefSIG",
    "AKIACRED",
    "ghp_abcdef",
    "S3cretPW",
)


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _crash(monkeypatch: pytest.MonkeyPatch, root: Path) -> Path | None:
    monkeypatch.setattr(sys, "argv", ["sglforge", "init", "--upstream", *TOKENS])
    ctx = click.Context(click.Command("x"), obj=State(_root=root))
    try:
        raise RuntimeError(f"boom at {TOKENS[0]}")
    except RuntimeError as exc:
        return _crash_log(ctx, exc)


def test_crash_log_argv_scrubbed_0600_in_a_private_folder(
    private_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = private_tmp / "proj"
    blocked.mkdir()
    (blocked / "build").write_text("a file where build/ would go")  # the project's logs fail
    shared = private_tmp / f"sglforge-logs-{os.getuid()}"
    shared.mkdir(mode=0o755)
    log = _crash(monkeypatch, blocked)
    assert log is not None and log.parent == shared
    text = log.read_text()
    assert "argv" in text and "init" in text
    assert not [s for s in SECRET_BITS if s in text]
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert stat.S_IMODE(shared.stat().st_mode) == 0o700


def test_crash_log_never_follows_a_planted_folder_link(
    private_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    attacker = private_tmp / "attacker"
    attacker.mkdir()
    (private_tmp / f"sglforge-logs-{os.getuid()}").symlink_to(attacker)
    blocked = private_tmp / "proj"
    blocked.mkdir()
    (blocked / "build").write_text("x")
    assert _crash(monkeypatch, blocked) is None
    assert list(attacker.iterdir()) == []


def test_write_private_replaces_a_planted_file_link_and_leaves_its_target(tmp_path: Path) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (folder / "crash.log").symlink_to(victim)
    path = write_private(folder, "crash.log", "text")
    assert victim.read_text() == "keep"
    assert not path.is_symlink() and path.read_text() == "text"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in folder.iterdir()] == ["crash.log"]


@pytest.mark.parametrize(
    "registry",
    [
        "https://alice:ghp_TRYTOKEN@127.0.0.1:42509/x?token=Q1",
        "alice:pw@127.0.0.1:5000",
        "127.0.0.1:5000/x?token=Q1",
        "127.0.0.1:5000; touch /tmp/x",
    ],
)
def test_use_registry_is_checked_as_publish_registry(tmp_path: Path, registry: str) -> None:
    with pytest.raises(ConfigError) as got:
        tryout.prepare(tmp_path / "t", registry=registry, version="0.5.14")
    assert "TRYTOKEN" not in str(got.value) and "alice:pw" not in str(got.value)
    assert not (tmp_path / "t" / "env.sh").exists()


@pytest.mark.parametrize("name", ["my #1 tryout", "try: v2", "a'b\"c", "x\\y {z}"])
def test_registry_yaml_holds_the_folder_as_it_is(tmp_path: Path, name: str) -> None:
    import yaml

    from sglforge.standin.registry import write_config

    folder = tmp_path / name
    folder.mkdir()
    config = yaml.safe_load(write_config(folder, "127.0.0.1:5000").read_text())
    assert config["storage"]["filesystem"]["rootdirectory"] == str(folder / "storage")
    assert config["http"]["addr"] == "127.0.0.1:5000"


@pytest.mark.parametrize("kind", ["dangling", "file-in-path"])
def test_init_and_tryout_name_the_folder_in_the_way(tmp_path: Path, kind: str) -> None:
    from sglforge.init import init_project

    if kind == "dangling":
        dest = tmp_path / "i10"
        dest.symlink_to(tmp_path / "missing")
    else:
        (tmp_path / "afile").write_text("x")
        dest = tmp_path / "afile" / "sub"
    with pytest.raises((LocalDiskError, ConfigError)) as got:
        init_project(dest, "pypi:sglang")
    assert str(dest.name) in str(got.value)
    if kind == "file-in-path":
        with pytest.raises(LocalDiskError, match="afile"):
            tryout.prepare(dest, version="0.5.14")


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("key (token=512, model_dim=6144, inter_dim=4096)", True),  # aiter's tuned-row key
        ("session=3 auth=0.5 sig=16,", True),
        ("https://h/x?token=512&id=9", True),
        ("token=abc123def", False),
        ("https://h/x?access_token=9f8e7d6c5b", False),
        ("password=12345678", False),  # a long run of digits may be a PIN
    ],
)
def test_a_short_number_named_like_a_credential_is_no_credential(text: str, kept: bool) -> None:
    from sglforge.urls import scrub_secrets, scrub_text

    assert (scrub_secrets(text) == text) is kept
    assert (scrub_text(text) == text) is kept or "://" in text
