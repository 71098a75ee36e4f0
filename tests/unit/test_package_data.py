"""The defaults a wheel ships are the repository's own top-level files, and a project's own
files override them."""

from __future__ import annotations

import tomllib
from pathlib import Path

from sglforge.build import _overlay_template
from sglforge.defaults import defaults_root, project_file, smoke_dir
from sglforge.targets import load_targets

REPO = Path(__file__).resolve().parents[2]
PREFIX = "sglforge/data/project/"
# What a project may leave out, plus what `sglforge init` copies: all of it ships.
SHIPPED = (
    "images/*",
    "smoke/*.toml",
    "tests/standin/model/*",
    "patches/upstream.toml",
    "patches/series",
    "patches/*.patch",
    "patches/configs/*",
)


def test_every_default_file_is_mapped_into_the_wheel_at_its_own_path() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    mapping = config["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    for src, dest in mapping.items():
        assert dest == PREFIX + src, f"{src} is shipped under another path: {dest}"
    shipped = {
        f.relative_to(REPO).as_posix()
        for src in mapping
        for f in ([REPO / src] if (REPO / src).is_file() else (REPO / src).rglob("*"))
        if f.is_file()
    }
    expected = {p.relative_to(REPO).as_posix() for pattern in SHIPPED for p in REPO.glob(pattern)}
    assert expected <= shipped
    # every shipped scenario's model folder inside the repository ships with it
    for path in REPO.glob("smoke/*.toml"):
        model = tomllib.loads(path.read_text()).get("model", {}).get("path", "")
        folder = (path.parent / model).resolve() if model else None
        if folder and folder.is_relative_to(REPO) and folder.is_dir():
            for f in folder.rglob("*"):
                assert not f.is_file() or f.relative_to(REPO).as_posix() in shipped, f


def test_a_project_without_images_or_smoke_uses_the_defaults(tmp_path: Path) -> None:
    (tmp_path / "patches").mkdir()
    shipped = defaults_root()
    assert shipped is not None  # in a checkout: the top-level folders themselves
    assert load_targets(tmp_path).path == shipped / "images" / "targets.toml"
    assert _overlay_template(tmp_path) == (shipped / "images" / "overlay.Dockerfile").read_text()
    assert smoke_dir(tmp_path) == shipped / "smoke"


def test_the_project_s_own_files_win(tmp_path: Path) -> None:
    (tmp_path / "images").mkdir()
    own = (
        (REPO / "images" / "targets.toml")
        .read_text()
        .replace('repository = "sglforge/sglang"', 'repository = "acme/sglang"')
    )
    assert own != (REPO / "images" / "targets.toml").read_text()
    (tmp_path / "images" / "targets.toml").write_text(own)
    (tmp_path / "images" / "overlay.Dockerfile").write_text("FROM {{BASE}}\n")
    (tmp_path / "smoke").mkdir()
    (tmp_path / "smoke" / "mine.toml").write_text("[scenario]\n")
    assert load_targets(tmp_path).repository == "acme/sglang"
    assert _overlay_template(tmp_path) == "FROM {{BASE}}\n"
    assert smoke_dir(tmp_path) == tmp_path / "smoke"
    assert project_file(tmp_path, "images/none.toml") == tmp_path / "images" / "none.toml"
