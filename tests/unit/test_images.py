"""images/targets.toml: the shipped targets, and every way a targets file is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglforge.errors import ConfigError
from sglforge.images import load_targets

REPO_ROOT = Path(__file__).resolve().parents[2]

GOOD = """\
[image]
repository = "example/sglang"

[rocm.rocm700]
version = "7.0.0"
gpu_arch_suffix = ""

[rocm.rocm720]
version = "7.2.0"

[targets.mi355x]
gpu_arch = "gfx950"
rocm = ["rocm700", "rocm720"]
base = "lmsysorg/sglang:v{version}-{rocm}-mi35x"
"""


def write_targets(tmp_path: Path, text: str) -> Path:
    (tmp_path / "images").mkdir(exist_ok=True)
    (tmp_path / "images" / "targets.toml").write_text(text)
    return tmp_path


def test_shipped_targets_follow_upstream_naming() -> None:
    targets = load_targets(REPO_ROOT)
    mi355 = targets.resolve("mi355x")
    assert (mi355.gpu_arch, mi355.rocm.name) == ("gfx950", "rocm700")
    assert mi355.base_image("0.5.14") == "lmsysorg/sglang:v0.5.14-rocm700-mi35x"
    assert mi355.base_image("v0.5.14") == "lmsysorg/sglang:v0.5.14-rocm700-mi35x"
    mi300 = targets.resolve("mi300x-rocm720")
    assert (mi300.gpu_arch, mi300.key) == ("gfx942", "mi300x-rocm720")
    assert mi300.base_image("0.5.14") == "lmsysorg/sglang:v0.5.14-rocm720-mi30x"
    # upstream's docker/rocm.Dockerfile names its stages gfx950 and gfx950-rocm720
    assert mi355.source_gpu_arch == "gfx950"
    assert targets.resolve("mi355x-rocm720").source_gpu_arch == "gfx950-rocm720"
    assert mi355.image_ref("0.5.14", "ab" * 32) == (
        "sglforge/sglang:v0.5.14-rocm700-mi355x-qabababab"
    )
    assert mi355.env["SGLANG_USE_AITER"] == "1"
    assert set(targets.names()) >= {"mi355x", "mi300x", "mi355x-rocm720", "mi300x-rocm700"}


def test_unknown_target_lists_the_known_ones() -> None:
    targets = load_targets(REPO_ROOT)
    for bad in ("mi250x", "mi355x-rocm999", "mi355x-", "MI355X"):
        with pytest.raises(ConfigError) as err:
            targets.resolve(bad)
        assert repr(bad) in err.value.message
        assert "mi355x, mi355x-rocm700, mi355x-rocm720, mi300x" in err.value.message
        assert "targets.toml" in err.value.message


def test_good_file_with_defaults(tmp_path: Path) -> None:
    targets = load_targets(write_targets(tmp_path, GOOD))
    t = targets.resolve("mi355x-rocm720")
    assert t.rocm.gpu_arch_suffix == "-rocm720"  # defaults to "-<name>"
    assert t.repository == "example/sglang"
    assert t.workspace == "/sgl-workspace/sglang"
    assert t.env == {}


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("colour = 1\n" + GOOD, "unknown key 'colour'"),
        (GOOD.replace('repository = "example/sglang"', 'repo = "x"'), "unknown key 'image.repo'"),
        (GOOD + "[rocm.rocm800]\nversoin = '8'\n", "unknown key 'rocm.rocm800.versoin'"),
        (GOOD + "arch = 'x'\n", "unknown key 'targets.mi355x.arch'"),
        (GOOD.replace('"rocm700", "rocm720"', '"rocm700", "rocm710"'), "'rocm710'"),
        (GOOD.replace("{rocm}-mi35x", "{rocm}-{family}"), "unknown placeholder(s) family"),
        (GOOD.replace('gpu_arch = "gfx950"\n', ""), "targets.mi355x.gpu_arch is required"),
        (GOOD.replace('["rocm700", "rocm720"]', "[]"), "non-empty list"),
        (GOOD.replace("[targets.mi355x]", "[targets.MI-355]"), "lower-case"),
        (GOOD + "[targets.mi355x.env]\n'BAD NAME' = '1'\n", "not an environment variable"),
        (GOOD + "[targets.mi355x.env]\nX = 1\n", "targets.mi355x.env.X must be a string"),
        ('[image]\nrepository = "x"\n', "no [targets.NAME] tables"),
        ("[image\n", "invalid TOML"),
    ],
)
def test_bad_files_are_refused_naming_key_and_file(tmp_path: Path, text: str, needle: str) -> None:
    root = write_targets(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_targets(root)
    assert needle in err.value.message
    assert str(root / "images" / "targets.toml") in err.value.message


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_targets(tmp_path)
    assert str(tmp_path / "images" / "targets.toml") in err.value.message
    assert err.value.hint
