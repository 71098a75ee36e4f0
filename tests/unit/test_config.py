"""One TOML reader for every sglforge file (sglforge.config): typed keys, unknown keys refused
with the closest known one offered, bad bytes and bad TOML named with the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglforge.config import Table, did_you_mean, read_toml
from sglforge.errors import ConfigError
from sglforge.smoke import load_scenario
from sglforge.targets import load_targets

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('base = "lmsysorg/sglang:v{version}-{rocm}-mi35x"', 'bsae = "x"', "did you mean 'base'"),
        ("[image]", "[imgae]", "did you mean 'image'"),
        ('repository = "sglforge/sglang"', 'repositroy = "x/y"', "did you mean 'repository'"),
        ('gpu_arch = "gfx950"', 'gpu_arch = "gfx950"\ndescriptoin = "x"', "'description'"),
    ],
)
def test_a_typo_in_targets_is_named_with_a_suggestion(tmp_path: Path, old, new, message) -> None:
    text = (REPO / "images" / "targets.toml").read_text()
    assert old in text
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "targets.toml").write_text(text.replace(old, new, 1))
    with pytest.raises(ConfigError, match="unknown key") as err:
        load_targets(tmp_path)
    assert message in str(err.value) and "targets.toml" in str(err.value)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("load_timeout = 60", "load_timout = 60", "did you mean 'load_timeout'"),
        ('accelerator = "none"', 'acelerator = "none"', "did you mean 'accelerator'"),
        ("[launch]", "[lanuch]", "did you mean 'launch'"),
    ],
)
def test_a_typo_in_a_scenario_is_named_with_a_suggestion(tmp_path: Path, old, new, message) -> None:
    text = (REPO / "smoke" / "standin-cpu.toml").read_text()
    assert old in text
    path = tmp_path / "s.toml"
    path.write_text(text.replace(old, new, 1).replace("../tests/", str(REPO / "tests") + "/"))
    with pytest.raises(ConfigError, match="unknown key") as err:
        load_scenario(path)
    assert message in str(err.value) and str(path) in str(err.value)


def test_far_off_keys_get_no_suggestion() -> None:
    assert did_you_mean("zzzz", {"base", "bases"}) == ""
    assert did_you_mean("bass", {"base", "env"}) == " (did you mean 'base'?)"


def test_typed_access_and_bad_files(tmp_path: Path) -> None:
    t = Table({"a": "x", "n": float("inf"), "b": True}, tmp_path / "f.toml", "sec")
    assert t.get("a", "str") == "x"
    with pytest.raises(ConfigError, match="'sec.n' must be a finite number"):
        t.get("n", "float")
    with pytest.raises(ConfigError, match="'sec.b' must be an integer"):
        t.get("b", "int")
    with pytest.raises(ConfigError, match="missing 'sec.c'"):
        t.get("c", "str")
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b'name = "caf\xe9"\n')
    with pytest.raises(ConfigError, match=r"not UTF-8 \(byte 0xe9 at offset 11\)"):
        read_toml(bad, "scenario")
    broken = tmp_path / "broken.toml"
    broken.write_text("name = \n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        read_toml(broken, "scenario")
    with pytest.raises(ConfigError, match="no such scenario"):
        read_toml(tmp_path / "missing.toml", "scenario")
