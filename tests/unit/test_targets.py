"""images/targets.toml: the shipped targets, base patterns by version range, dated tags, and
every way a targets file is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglforge.bases import closest_tags
from sglforge.errors import ConfigError
from sglforge.targets import load_targets, newest_dated_tag, tag_regex

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


def _ranged(entry: str) -> str:
    """GOOD with its single base replaced by one [[bases]] entry holding ``entry``."""
    return GOOD.replace(
        'base = "lmsysorg/sglang:v{version}-{rocm}-mi35x"',
        "[[targets.mi355x.bases]]\n" + entry + "\n",
    )


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


def test_shipped_targets_switch_to_dated_sglang_rocm_from_0_5_15() -> None:
    targets = load_targets(REPO_ROOT)
    mi355 = targets.resolve("mi355x")
    # the pin and earlier: lmsysorg/sglang, undated
    assert mi355.base_image("0.5.13") == "lmsysorg/sglang:v0.5.13-rocm700-mi35x"
    # from 0.5.15 (post releases and release candidates included): dated sglang-rocm
    for version in ("0.5.15", "0.5.15.post1", "0.5.16", "0.5.17rc0", "0.5.18", "0.6.0"):
        assert mi355.base_image(version) == (
            f"lmsysorg/sglang-rocm:v{version}-rocm700-mi35x-{{date}}"
        )
    assert targets.resolve("mi355x-rocm720").base_image("v0.5.16") == (
        "lmsysorg/sglang-rocm:v0.5.16-rocm720-mi35x-{date}"
    )
    r724 = targets.resolve("mi355x-rocm724")
    assert r724.base_image("0.5.18") == "lmsysorg/sglang-rocm:v0.5.18-rocm724-mi35x-{date}"
    assert r724.source_gpu_arch == "gfx950-rocm724"  # upstream's Dockerfile stage name
    assert targets.resolve("mi300x-rocm724").base_image("0.5.18") == (
        "lmsysorg/sglang-rocm:v0.5.18-rocm724-mi30x-{date}"
    )


@pytest.mark.parametrize(("version", "newest"), [("0.5.14", "0.5.16"), ("0.5.16", "0.5.16")])
def test_rocm724_only_where_upstream_publishes_it(version: str, newest: str) -> None:
    r724 = load_targets(REPO_ROOT).resolve("mi355x-rocm724")
    with pytest.raises(ConfigError) as err:
        r724.base_image(version)
    msg = err.value.message
    assert f"no rocm724 image of sglang {version}" in msg
    assert "targets.toml" in msg
    assert err.value.hint == "sglforge build --target mi355x-rocm700"


def test_a_version_outside_every_range_names_the_ranges(tmp_path: Path) -> None:
    text = GOOD.replace(
        'base = "lmsysorg/sglang:v{version}-{rocm}-mi35x"',
        '[[targets.mi355x.bases]]\nversions = ">=0.5.10,<0.5.15"\n'
        'base = "lmsysorg/sglang:v{version}-{rocm}-mi35x"\n',
    )
    t = load_targets(write_targets(tmp_path, text)).resolve("mi355x")
    assert t.base_image("0.5.12") == "lmsysorg/sglang:v0.5.12-rocm700-mi35x"
    for bad, needle in (("0.5.9", "covers sglang 0.5.9"), ("main", "'main' is not a release")):
        with pytest.raises(ConfigError) as err:
            t.base_image(bad)
        assert needle in err.value.message
    with pytest.raises(ConfigError) as err:
        t.base_image("0.5.20")
    assert ">=0.5.10,<0.5.15" in err.value.message
    assert str(tmp_path / "images" / "targets.toml") in err.value.message


def test_first_matching_range_wins_and_single_base_means_every_version(tmp_path: Path) -> None:
    single = load_targets(write_targets(tmp_path, GOOD)).resolve("mi355x-rocm720")
    assert single.base_image("0.9.0") == "lmsysorg/sglang:v0.9.0-rocm720-mi35x"
    text = GOOD.replace(
        'base = "lmsysorg/sglang:v{version}-{rocm}-mi35x"',
        '[[targets.mi355x.bases]]\nversions = ">=0.5.16"\nbase = "new/x:v{version}-{date}"\n'
        '[[targets.mi355x.bases]]\nversions = ""\nbase = "old/x:v{version}"\n',
    )
    t = load_targets(write_targets(tmp_path, text)).resolve("mi355x")
    assert t.base_image("0.5.16") == "new/x:v0.5.16-{date}"
    assert t.base_image("0.5.15") == "old/x:v0.5.15"


def test_newest_date_wins_and_other_shapes_are_ignored() -> None:
    tags = [
        "v0.5.16-rocm720-mi35x-20260701",
        "v0.5.16-rocm720-mi35x-20260728",
        "v0.5.16-rocm720-mi35x-20260726",
        "v0.5.16-rocm720-mi35x-20990101-srt",  # a suffix after the date: another image
        "v0.5.16-rocm720-mi30x-20260801",  # another GPU family
        "v0.5.16-rocm724-mi35x-20260802",  # another ROCm flavour
        "v0.5.16.post1-rocm720-mi35x-20260805",  # another version
        "v0.5.16-rocm720-mi35x-2026080",  # not a YYYYMMDD date
        "v0.5.16-rocm720-mi35x",
    ]
    assert newest_dated_tag("v0.5.16-rocm720-mi35x-{date}", tags) == (
        "v0.5.16-rocm720-mi35x-20260728"
    )
    assert newest_dated_tag("v0.5.16-rocm720-mi35x-{date}", tags[4:]) is None
    assert newest_dated_tag("v0.5.16-rocm720-mi35x-{date}", []) is None
    # the placeholder matches any eight digits, and dots in the version are literal
    rx = tag_regex("v0.5.1-{date}")
    assert rx.match("v0.5.1-20260101") and not rx.match("v0x5.1-20260101")


def test_closest_tags_of_a_dated_pattern_prefer_its_shape_and_version() -> None:
    target = load_targets(REPO_ROOT).resolve("mi355x-rocm720")
    known = [
        "v0.5.15-rocm720-mi35x-20260713",
        "v0.5.18-rocm720-mi35x-20260829",
        "v0.5.16-rocm700-mi35x-20260803",
        "v0.5.16-rocm720-mi30x-20260730",
        "latest",
    ]
    close = closest_tags("v0.5.16-rocm720-mi35x-{date}", known, target, n=3)
    assert close == [
        "v0.5.16-rocm700-mi35x-20260803",
        "v0.5.15-rocm720-mi35x-20260713",
        "v0.5.18-rocm720-mi35x-20260829",
    ]


def test_unknown_target_lists_the_known_ones() -> None:
    targets = load_targets(REPO_ROOT)
    for bad in ("mi250x", "mi355x-rocm999", "mi355x-", "MI355X"):
        with pytest.raises(ConfigError) as err:
            targets.resolve(bad)
        assert repr(bad) in err.value.message
        assert "mi355x, mi355x-rocm700, mi355x-rocm720, mi355x-rocm724, mi300x" in err.value.message
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
        (GOOD.replace('gpu_arch = "gfx950"\n', ""), "missing 'targets.mi355x.gpu_arch'"),
        (GOOD.replace('["rocm700", "rocm720"]', "[]"), "non-empty list"),
        (GOOD.replace("[targets.mi355x]", "[targets.MI-355]"), "lower-case"),
        (GOOD + "[targets.mi355x.env]\n'BAD NAME' = '1'\n", "not an environment variable"),
        (GOOD + "[targets.mi355x.env]\nX = 1\n", "targets.mi355x.env.X must be a string"),
        ('[image]\nrepository = "x"\n', "no [targets.NAME] tables"),
        (GOOD.replace("base = ", "bass = "), "unknown key 'targets.mi355x.bass'"),
        (GOOD + "bases = []\n", "has both base and bases"),
        (GOOD.replace('base = "', 'bases = 1\n# "'), "must be a non-empty list of tables"),
        (_ranged('versions = "<0.5.15"\nbase = "a:v{version}"\ncolour = 1'), "bases[0].colour"),
        (_ranged('base = "a:v{version}"'), "missing 'targets.mi355x.bases[0].versions'"),
        (_ranged('versions = "<0.5.15"'), "missing 'targets.mi355x.bases[0].base'"),
        (_ranged('versions = "0.5.x"\nbase = "a:v{version}"'), "not a PEP 440 specifier"),
        (_ranged('versions = ""\nbase = "a:v{version}"\nrocm = ["rocm724"]'), "not in targets"),
        (_ranged('versions = ""\nbase = "a:v{version}"\nrocm = []'), "bases[0].rocm must be"),
        (_ranged('versions = ""\nbase = "a-{date}:v{version}"'), "{date} may appear once"),
        (_ranged('versions = ""\nbase = "a:v{version}-{date}-{date}"'), "{date} may appear once"),
        (_ranged('versions = ""\nbase = "a:v{version}-{day}"'), "unknown placeholder(s) day"),
        ("[image\n", "invalid TOML"),
    ],
)
def test_bad_files_are_refused_naming_key_and_file(tmp_path: Path, text: str, needle: str) -> None:
    root = write_targets(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_targets(root)
    assert needle in err.value.message
    assert str(root / "images" / "targets.toml") in err.value.message


def test_missing_file_names_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A project without images/ uses the shipped targets (test_package_data.py); with none
    # shipped either, the error names the file the project would add.
    import sglforge.defaults

    monkeypatch.setattr(sglforge.defaults, "defaults_root", lambda: None)
    with pytest.raises(ConfigError) as err:
        load_targets(tmp_path)
    assert str(tmp_path / "images" / "targets.toml") in err.value.message
    assert err.value.hint


@pytest.mark.parametrize(
    ("arch", "said"),
    [
        ("gfx95", "did you mean 'gfx950'?"),
        ("gfx9500", None),  # four digits: a name LLVM could have
        ("gfx942", None),
        ("gfx90a", None),
        ("gfx1100", None),
        ("GFX950", "did you mean 'gfx950'?"),
        ("mi355x", "is not an AMD GPU name"),
        ("gfx94 2", "is not an AMD GPU name"),
    ],
)
def test_gpu_arch_is_checked_like_the_keys(tmp_path: Path, arch: str, said: str | None) -> None:
    text = GOOD.replace('gpu_arch = "gfx950"', f'gpu_arch = "{arch}"')
    assert text != GOOD
    path = write_targets(tmp_path, text)
    if said is None:
        assert load_targets(path).resolve("mi355x").gpu_arch == arch
        return
    with pytest.raises(ConfigError) as err:
        load_targets(path)
    assert said in err.value.message and "targets.mi355x.gpu_arch" in err.value.message
