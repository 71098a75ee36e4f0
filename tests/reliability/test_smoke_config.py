"""Issue 10, smoke side: a scenario's data can neither steer a write outside its folder nor
pass a value Docker or the runner would choke on later; each is exit 2 naming file and key,
before anything is written."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from reliability_helpers import cli

from sglforge import smoke
from sglforge.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
CPU = REPO / "smoke" / "standin-cpu.toml"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A checkout-shaped folder: patches/ (so --root finds it), smoke/, a model folder."""
    root = tmp_path / "proj"
    (root / "patches").mkdir(parents=True)
    (root / "patches" / "series").write_text("")
    (root / "smoke").mkdir()
    shutil.copytree(REPO / "tests" / "standin" / "model", root / "model")
    return root


def scenario(project: Path, edit: dict[str, str] | None = None, name: str = "s.toml") -> Path:
    """The stand-in scenario with ``edit`` (regex -> replacement) applied, in ``project``."""
    text = CPU.read_text().replace('path = "../tests/standin/model"', 'path = "../model"')
    for pattern, repl in (edit or {}).items():
        text, n = re.subn(pattern, repl, text, count=1, flags=re.M)
        assert n == 1, pattern
    path = project / "smoke" / name
    path.write_text(text)
    return path


def outside_untouched(project: Path, before: set[Path]) -> None:
    now = {p for p in project.parent.rglob("*")}
    # Only the project's own work area may have appeared.
    new = {p for p in now - before if "build" not in p.relative_to(project.parent).parts}
    assert not new, new


# --------------------------------------------------------------------------- confinement

HOSTILE_NAMES = [
    "../../../../srv/x",
    "/srv/x",
    "../x",
    "a/../../b",
    "sub/dir",
    "..",
    ".hidden",
    "x\\..\\..\\y",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_scenario_name_is_refused_before_any_write(project: Path, name: str) -> None:
    path = scenario(project, {r'^name = ".*"$': "name = " + json.dumps(name).replace("\\", "\\\\")})
    before = set(project.parent.rglob("*"))
    with pytest.raises(ConfigError) as err:
        smoke.load_scenario(path)
    assert str(path) in err.value.message and "scenario.name" in err.value.message
    code, out, errtext = cli(project, "smoke", "--image", "x:1", "--scenario", str(path))
    assert code == 2, (out, errtext)
    assert "scenario.name" in errtext
    outside_untouched(project, before)
    assert not (project / "build" / "smoke").exists() or not any(
        (project / "build" / "smoke").iterdir()
    )


def test_a_plain_name_still_names_the_report_folder(project: Path) -> None:
    path = scenario(project, {r'^name = ".*"$': 'name = "glm5.2_mtp-ok"'})
    assert smoke.load_scenario(path).name == "glm5.2_mtp-ok"
    folder, _ = smoke.new_report_dir(project, "glm5.2_mtp-ok")
    assert folder.parent == project / "build" / "smoke"


def test_release_record_names_stay_in_their_folder(tmp_path: Path) -> None:
    from sglforge.release import record_path, releases_dir

    for version in ("../../../etc/x", "/srv/x", "..", "a/b", "v0.5.14-rocm700-mi355x-q1"):
        path = record_path(tmp_path, version)
        assert path.parent == releases_dir(tmp_path), version


# --------------------------------------------------------------------------- values

BAD_VALUES = [
    ("scenario.load_timeout", r"^load_timeout = .*$", "load_timeout = -5"),
    ("scenario.load_timeout", r"^load_timeout = .*$", "load_timeout = 0"),
    ("scenario.load_timeout", r"^load_timeout = .*$", "load_timeout = nan"),
    ("scenario.load_timeout", r"^load_timeout = .*$", "load_timeout = inf"),
    ("scenario.load_timeout", r"^load_timeout = .*$", "load_timeout = -inf"),
    ("container.shm_size", r"^shm_size = .*$", 'shm_size = "lots"'),
    ("container.shm_size", r"^shm_size = .*$", 'shm_size = "-1g"'),
    ("container.shm_size", r"^shm_size = .*$", 'shm_size = "0"'),
    ("container.nofile", r"^nofile = .*$", "nofile = -1"),
    ("container.ipc_mode", r"^ipc_mode = .*$", 'ipc_mode = "bogus"'),
    ("checks.request_timeout", r"^request_timeout = .*$", "request_timeout = nan"),
    ("checks.request_timeout", r"^request_timeout = .*$", "request_timeout = -1"),
    ("checks.serves.max_new_tokens", r"^max_new_tokens = 16$", "max_new_tokens = 0"),
    ("checks.arithmetic.max_tokens", r"^max_tokens = .*$", "max_tokens = -3"),
    ("checks.spec.min_accept_length", r"^min_accept_length = .*$", "min_accept_length = nan"),
]


@pytest.mark.parametrize(("key", "pattern", "line"), BAD_VALUES)
def test_bad_values_are_exit_2_naming_file_and_key(
    project: Path, key: str, pattern: str, line: str
) -> None:
    path = scenario(project, {pattern: line})
    with pytest.raises(ConfigError) as err:
        smoke.load_scenario(path)
    assert str(path) in err.value.message and f"'{key}'" in err.value.message
    code, _, errtext = cli(project, "smoke", "--image", "x:1", "--scenario", str(path))
    assert code == 2 and key in errtext and str(path) in errtext
    assert not (project / "build" / "smoke").exists()


@pytest.mark.parametrize("raw", [b"caf\xe9", b"\xff\xfe", b"\x80"])
def test_non_utf8_scenario_is_exit_2_naming_file_and_byte(project: Path, raw: bytes) -> None:
    path = project / "smoke" / "bad.toml"
    path.write_bytes(CPU.read_bytes().replace(b"Stand-in", b"Stand-in " + raw, 1))
    with pytest.raises(ConfigError, match=r"not UTF-8 \(byte 0x"):
        smoke.load_scenario(path)
    code, _, errtext = cli(project, "smoke", "--image", "x:1", "--scenario", str(path))
    assert code == 2 and str(path) in errtext and "not UTF-8" in errtext


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_load_timeout_option_is_checked(project: Path, value: str) -> None:
    path = scenario(project)
    code, _, errtext = cli(
        project, "smoke", "--image", "x:1", "--scenario", str(path), "--load-timeout", value
    )
    assert code == 2 and "--load-timeout" in errtext, errtext
    assert not (project / "build" / "smoke").exists()
