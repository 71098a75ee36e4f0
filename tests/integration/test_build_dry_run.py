"""``sglforge build --dry-run`` on a real synthetic upstream and queue: the plan, no engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers_build import (
    AOT_CHANGE,
    CUH,
    DEFAULT_CHANGES,
    NEW_FILE,
    OBSOLETE,
    QUARK,
    STANDIN_REPO,
    make_build_project,
)
from sglforge.cli import main


@pytest.fixture(autouse=True)
def no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    # A dry run must not need an engine: point the client at nothing.
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")


def dry_run(root: Path, upstream: Path, *args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(
        main,
        ["--root", str(root), "build", "--upstream", str(upstream), "--dry-run", *args],
    )
    return res.exit_code, res.stdout, res.stderr


def test_overlay_plan(tmp_path: Path) -> None:
    p = make_build_project(tmp_path)
    code, out, err = dry_run(p.root, p.upstream, "--json", "--tag", "reg.example/sglang:glm")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["dry_run"] is True and plan["id"] is None and plan["up_to_date"] is False
    assert plan["mode"] == "overlay" and "python" in plan["mode_reason"]
    assert plan["image"].startswith("sglforge/sglang:v0.5.14-rocm700-mi355x-q")
    assert plan["tags"] == [plan["image"], "reg.example/sglang:glm"]
    assert plan["base"] == f"{STANDIN_REPO}:v0.5.14-rocm700-mi35x"
    assert plan["base_digest"] is None
    assert set(plan["changed_files"]) == {QUARK, NEW_FILE, CUH, OBSOLETE}
    ws = "/sgl-workspace/sglang"
    assert {f["dest"] for f in plan["files"]} == {f"{ws}/{x}" for x in (QUARK, NEW_FILE, CUH)}
    assert plan["deleted"] == [f"{ws}/{OBSOLETE}"]
    assert "COPY overlay/ /" in plan["dockerfile"]
    assert plan["labels"]["io.sglforge.patches"].count(".patch") == len(DEFAULT_CHANGES)
    assert "io.sglforge.inputs" not in plan["labels"]  # unknown until the base is inspected
    # the document alone on stdout; under --json stderr still says what runs, as plain lines
    assert "\r" not in err and "\x1b" not in err, err

    code, text, err = dry_run(p.root, p.upstream)
    assert code == 0, err
    assert "applying the patch queue" in err  # progress goes to stderr without --json
    for needle in ("mode      overlay", "files that go in:", "deleted: ", "Dockerfile:", QUARK):
        assert needle in text


def test_other_target_and_rocm(tmp_path: Path) -> None:
    p = make_build_project(tmp_path)
    code, out, err = dry_run(p.root, p.upstream, "--json", "--target", "mi300x-rocm720")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["base"] == f"{STANDIN_REPO}:v0.5.14-rocm720-mi30x"
    assert plan["image"].startswith("sglforge/sglang:v0.5.14-rocm720-mi300x-q")
    assert plan["labels"]["io.sglforge.gpu-arch"] == "gfx942"


def test_unknown_target_and_forced_overlay_are_refused(tmp_path: Path) -> None:
    p = make_build_project(tmp_path, changes=(*DEFAULT_CHANGES, AOT_CHANGE))
    code, _, err = dry_run(p.root, p.upstream, "--target", "mi250")
    assert code == 2 and "unknown target 'mi250'" in err and "mi355x, " in err
    code, _, err = dry_run(p.root, p.upstream, "--mode", "overlay")
    assert code == 2 and "0005-moe-kernel-tweak.patch is a aot-kernel patch" in err
    code, out, err = dry_run(p.root, p.upstream, "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["mode"] == "source" and "0005-moe-kernel-tweak.patch" in plan["mode_reason"]
    assert plan["build_args"]["BRANCH_TYPE"] == "local"
    assert plan["build_args"]["GPU_ARCH"] == "gfx950"
    assert plan["labels"]["io.sglforge.mode"] == "source"


@pytest.mark.parametrize(
    ("given", "planned"),
    [
        (
            "mirror.example/sglang:v{version}-rocm700-mi35x",
            "mirror.example/sglang:v0.5.14-rocm700-mi35x",
        ),
        ("mirror.example/sglang:{version}", "mirror.example/sglang:0.5.14"),
        ("mirror.example/sglang:fixed", "mirror.example/sglang:fixed"),
    ],
)
def test_base_image_template_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str, planned: str
) -> None:
    """--base-image (or $SGLFORGE_BASE_IMAGE, a mirror) gets its {version} filled in."""
    p = make_build_project(tmp_path)
    code, out, err = dry_run(p.root, p.upstream, "--json", "--base-image", given)
    assert code == 0 and json.loads(out)["base"] == planned, err
    monkeypatch.setenv("SGLFORGE_BASE_IMAGE", given)
    code, out, err = dry_run(p.root, p.upstream, "--json")
    assert code == 0 and json.loads(out)["base"] == planned, err
