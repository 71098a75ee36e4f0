"""Build planning without an engine: mode choice, file placement, Dockerfile, labels, context."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from pipelines import plan_at
from sglforge import bases
from sglforge.bases import closest_tags
from sglforge.build import (
    MTIME,
    buildx_command,
    choose_mode,
    context_tar,
    render_overlay_dockerfile,
    version_of,
)
from sglforge.engine.images import BUILDX_STEP
from sglforge.errors import BuildError, ConfigError
from sglforge.provenance import MANIFEST_PATH, Base, PatchFacts, UpstreamFacts
from sglforge.targets import load_targets

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = (REPO_ROOT / "images" / "overlay.Dockerfile").read_text()
QHASH = "0123456789abcdef" * 4
UP = UpstreamFacts(
    url="https://github.com/sgl-project/sglang.git",
    source="/srv/mirror/sglang",
    ref="v0.5.14",
    commit="c" * 40,
    revision="c" * 40,
)
PATCHES = (
    PatchFacts("0001-mtp-prefix.patch", "MTP prefix lookup", "a" * 64, "python"),
    PatchFacts("0002-rocm-guard.patch", "USE_ROCM guard", "b" * 64, "jit-kernel"),
)
QUARK = "python/sglang/srt/layers/quantization/quark.py"
CUH = "python/sglang/jit_kernel/fused_metadata_copy.cuh"
GONE = "python/sglang/srt/old.py"
TESTFILE = "test/srt/test_quark.py"


class FakePatch:
    """A queue entry with only the fields mode selection reads."""

    def __init__(self, name: str, kind: str) -> None:
        self.name = name
        self.kind = kind


@pytest.fixture
def target():
    return load_targets(REPO_ROOT).resolve("mi355x")


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    wt = tmp_path / "wt"
    for rel, text in {QUARK: "fixed = True\n", CUH: "#ifdef USE_ROCM\n", TESTFILE: "x\n"}.items():
        (wt / rel).parent.mkdir(parents=True, exist_ok=True)
        (wt / rel).write_text(text)
    (wt / "python/sglang/tool.sh").write_text("#!/bin/sh\n")
    (wt / "python/sglang/tool.sh").chmod(0o755)
    return wt


CHANGED = (QUARK, CUH, GONE, TESTFILE, "python/sglang/tool.sh")


def overlay(target, worktree: Path, base: Base | None = None, **kw):
    args = dict(
        target=target,
        version="0.5.14",
        mode_reason="test",
        base=base or Base("lmsysorg/sglang:v0.5.14-rocm700-mi35x", id="sha256:" + "1" * 64),
        upstream=UP,
        queue_hash=QHASH,
        patches=PATCHES,
        worktree=worktree,
        changed_files=CHANGED,
        template=TEMPLATE,
        created="2026-01-01T00:00:00Z",
    )
    args.update(kw)
    return plan_at("overlay", **args)


def test_auto_mode_overlays_python_and_jit_patches_only() -> None:
    py = [FakePatch("0001-a.patch", "python"), FakePatch("0002-b.patch", "jit-kernel")]
    assert choose_mode("auto", py)[0] == "overlay"
    assert choose_mode("auto", [])[0] == "overlay"
    mode, why = choose_mode("auto", [*py, FakePatch("0003-k.patch", "aot-kernel")])
    assert mode == "source" and "0003-k.patch is a aot-kernel patch" in why
    assert choose_mode("auto", [FakePatch("0001-d.patch", "build")])[0] == "source"
    assert choose_mode("source", py)[0] == "source"
    with pytest.raises(ConfigError, match="0003-k.patch is a aot-kernel patch"):
        choose_mode("overlay", [FakePatch("0003-k.patch", "aot-kernel")])
    with pytest.raises(ConfigError, match="unknown build mode 'fast'"):
        choose_mode("fast", py)


def test_version_of_release_tags() -> None:
    assert version_of("v0.5.14") == "0.5.14"
    assert version_of("0.5.14.post1") == "0.5.14.post1"
    assert version_of("v0.5.15rc2") == "0.5.15rc2"
    assert version_of("main") is None
    assert version_of("v0.5.14-hotfix") is None


def test_files_go_to_the_editable_checkout(target, worktree: Path) -> None:
    plan = overlay(target, worktree)
    dests = {f.path: f.dest for f in plan.files}
    assert dests[QUARK] == f"/sgl-workspace/sglang/{QUARK}"
    assert dests[TESTFILE] == f"/sgl-workspace/sglang/{TESTFILE}"
    assert plan.deleted == (f"/sgl-workspace/sglang/{GONE}",)
    assert plan.workspace_source == "assumed"
    modes = {f.path: f.mode for f in plan.files}
    assert modes["python/sglang/tool.sh"] == 0o755 and modes[QUARK] == 0o644
    # an inspected base wins over targets.toml
    inspected = overlay(
        target,
        worktree,
        Base("x:1", id="sha256:" + "1" * 64, package_path="/opt/sgl/python/sglang"),
    )
    assert {f.dest for f in inspected.files} >= {f"/opt/sgl/{QUARK}"}
    assert inspected.workspace_source == "inspected"


def test_site_packages_install_places_only_the_package(target, worktree: Path) -> None:
    base = Base("x:1", id="sha256:" + "1" * 64, package_path="/usr/lib/py/site-packages/sglang")
    plan = overlay(target, worktree, base)
    dests = {f.path: f.dest for f in plan.files}
    assert dests[QUARK] == "/usr/lib/py/site-packages/sglang/srt/layers/quantization/quark.py"
    assert TESTFILE in plan.skipped and TESTFILE not in dests


def test_labels_and_manifest(target, worktree: Path) -> None:
    plan = overlay(target, worktree, extra_labels={"io.sglforge.test": "1"})
    assert plan.inputs_key
    assert plan.image == f"sglforge/sglang:v0.5.14-rocm700-mi355x-q01234567-i{plan.inputs_key[:8]}"
    lab = plan.labels
    oci = "org.opencontainers.image."
    # upstream's repository and revision; OCI source/revision name the project (build_image)
    assert lab["io.sglforge.upstream.source"] == UP.url
    assert lab["io.sglforge.upstream.revision"] == "c" * 40
    assert oci + "source" not in lab and oci + "revision" not in lab
    assert lab[oci + "version"] == "0.5.14"
    assert lab[oci + "created"] == "2026-01-01T00:00:00Z"
    assert lab[oci + "base.name"] == "lmsysorg/sglang:v0.5.14-rocm700-mi35x"
    assert lab[oci + "base.digest"] == "sha256:" + "1" * 64
    assert lab[oci + "licenses"] == "Apache-2.0"
    assert lab[oci + "title"] and lab[oci + "description"]
    assert lab["io.sglforge.queue-hash"] == QHASH
    assert lab["io.sglforge.patches"] == "0001-mtp-prefix.patch,0002-rocm-guard.patch"
    assert (lab["io.sglforge.target"], lab["io.sglforge.gpu-arch"]) == ("mi355x", "gfx950")
    assert lab["io.sglforge.mode"] == "overlay"
    assert lab["io.sglforge.managed"] == "1" and lab["io.sglforge.test"] == "1"
    assert lab["io.sglforge.inputs"] == plan.inputs_key
    m = plan.manifest
    assert [p["sha256"] for p in m["queue"]["patches"]] == ["a" * 64, "b" * 64]
    assert m["queue"]["hash"] == QHASH
    assert m["base"] == {
        "name": "lmsysorg/sglang:v0.5.14-rocm700-mi35x",
        "digest": lab[oci + "base.digest"],
    }
    assert {f["path"] for f in m["files"]} == {QUARK, CUH, TESTFILE, "python/sglang/tool.sh"}
    assert "created" not in json.dumps(m)  # the manifest holds no timestamps


def test_inputs_key_tracks_content_not_time(target, worktree: Path) -> None:
    key = overlay(target, worktree).inputs_key
    assert key is not None
    assert overlay(target, worktree, created="2030-01-01T00:00:00Z").inputs_key == key
    assert overlay(target, worktree, extra_labels={"a": "b"}).inputs_key == key
    other_base = Base("lmsysorg/sglang:v0.5.14-rocm700-mi35x", id="sha256:" + "2" * 64)
    assert overlay(target, worktree, other_base).inputs_key != key
    assert overlay(target, worktree, queue_hash="f" * 64).inputs_key != key
    rocm720 = load_targets(REPO_ROOT).resolve("mi355x-rocm720")
    assert overlay(rocm720, worktree).inputs_key != key
    assert overlay(target, worktree, template=TEMPLATE + "# x\n").inputs_key != key
    (worktree / QUARK).write_text("fixed = False\n")
    assert overlay(target, worktree).inputs_key != key
    # without a known base (dry run) there is no key
    assert overlay(target, worktree, Base("x:1")).inputs_key is None


def test_dockerfile(target, worktree: Path) -> None:
    plan = overlay(target, worktree)
    df = plan.dockerfile
    assert "FROM lmsysorg/sglang:v0.5.14-rocm700-mi35x\n" in df
    assert df.count("COPY ") == 1 and "COPY overlay/ /\n" in df
    assert f'RUN ["rm", "-f", "--", "/sgl-workspace/sglang/{GONE}"]' in df
    # The release image's run contract is kept: no instruction touches it.
    instructions = [ln.split()[0] for ln in df.splitlines() if ln and ln[0] not in "# "]
    assert not {"ENTRYPOINT", "CMD", "WORKDIR", "USER"} & set(instructions)
    assert 'SGLANG_USE_AITER="1"' in df
    assert '"io.sglforge.queue-hash"="' + QHASH + '"' in df
    assert "{{" not in df
    bare = render_overlay_dockerfile(TEMPLATE, "b:1", target, ())
    assert "RUN " not in bare and "LABEL " not in bare
    escaped = render_overlay_dockerfile(TEMPLATE, "b:1", target, (), {"k": 'a "$HOME" b'})
    assert 'LABEL "k"="a \\"\\$HOME\\" b"' in escaped
    with pytest.raises(ConfigError, match="unknown placeholder"):
        render_overlay_dockerfile(TEMPLATE + "{{NOPE}}", "b:1", target, ())


def read_tar(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_context_holds_only_changed_files_and_is_reproducible(target, worktree: Path) -> None:
    plan = overlay(target, worktree)
    data = context_tar(plan, worktree)
    assert data == context_tar(overlay(target, worktree), worktree)
    members = read_tar(data)
    files = sorted(n for n, m in members.items() if m.isfile())
    assert files == sorted(
        ["Dockerfile", "overlay" + MANIFEST_PATH]
        + [f"overlay/sgl-workspace/sglang/{p}" for p in (QUARK, CUH, TESTFILE)]
        + ["overlay/sgl-workspace/sglang/python/sglang/tool.sh"]
    )
    assert all(m.mtime == MTIME and m.uid == 0 and m.gid == 0 for m in members.values())
    assert all(m.mode == 0o755 for m in members.values() if m.isdir())
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        manifest = json.loads(tar.extractfile("overlay" + MANIFEST_PATH).read())  # type: ignore[union-attr]
        quark = tar.extractfile(f"overlay/sgl-workspace/sglang/{QUARK}").read()  # type: ignore[union-attr]
    assert manifest == plan.manifest
    assert quark == b"fixed = True\n"
    # a file changed after planning is caught, not silently shipped
    (worktree / QUARK).write_text("changed behind our back\n")
    with pytest.raises(BuildError, match="changed while building"):
        context_tar(plan, worktree)


def test_symlink_goes_in_as_a_link(target, worktree: Path) -> None:
    (worktree / "python/sglang/link.py").symlink_to("tool.sh")
    plan = overlay(target, worktree, changed_files=(*CHANGED, "python/sglang/link.py"))
    members = read_tar(context_tar(plan, worktree))
    link = members["overlay/sgl-workspace/sglang/python/sglang/link.py"]
    assert link.issym() and link.linkname == "tool.sh"


def test_closest_tags_prefer_the_target(target) -> None:
    known = [
        "v0.5.13-rocm700-mi35x",
        "v0.5.14-rocm720-mi35x",
        "v0.5.14-rocm700-mi30x",
        "v0.5.4-rocm700-mi35x",
        "latest",
    ]
    close = closest_tags("v0.5.14-rocm700-mi35x", known, target, n=3)
    # the same version on the other ROCm flavour, then the nearest versions (not by spelling)
    assert close == ["v0.5.14-rocm720-mi35x", "v0.5.13-rocm700-mi35x", "v0.5.4-rocm700-mi35x"]
    # nothing of the target's shape: fall back to every tag
    assert closest_tags("v9", ["a", "b"], target) == ["a", "b"]


def test_source_plan_drives_upstream_dockerfile(tmp_path: Path, worktree: Path) -> None:
    t720 = load_targets(REPO_ROOT).resolve("mi300x-rocm720")
    with pytest.raises(BuildError, match="docker/rocm.Dockerfile"):
        plan_at(
            "source",
            target=t720,
            version="0.5.14",
            mode_reason="x",
            upstream=UP,
            queue_hash=QHASH,
            patches=PATCHES,
            worktree=worktree,
            changed_files=CHANGED,
        )
    (worktree / "docker").mkdir()
    (worktree / "docker/rocm.Dockerfile").write_text("FROM scratch\n")
    plan = plan_at(
        "source",
        target=t720,
        version="0.5.14",
        mode_reason="x",
        upstream=UP,
        queue_hash=QHASH,
        patches=PATCHES,
        worktree=worktree,
        changed_files=CHANGED,
        tags=("reg.example/sglang:glm",),
    )
    cmd = buildx_command(plan, "docker")
    assert cmd[:3] == ["docker", "buildx", "build"]
    assert ["--file", str(worktree / "docker/rocm.Dockerfile")] == cmd[3:5]
    assert "--load" in cmd and cmd[-1] == str(worktree)
    args = [cmd[i + 1] for i, c in enumerate(cmd) if c == "--build-arg"]
    assert {"BRANCH_TYPE=local", "GPU_ARCH=gfx942-rocm720", "SGL_BRANCH=v0.5.14"} <= set(args)
    tags = [cmd[i + 1] for i, c in enumerate(cmd) if c == "--tag"]
    assert tags == [plan.image, "reg.example/sglang:glm"]
    assert plan.inputs_key and plan.image.endswith(f"-q01234567-i{plan.inputs_key[:8]}")
    labels = [cmd[i + 1] for i, c in enumerate(cmd) if c == "--label"]
    assert "io.sglforge.mode=source" in labels
    assert plan.inputs_key and plan.labels["io.sglforge.inputs"] == plan.inputs_key


@pytest.mark.parametrize(
    ("env", "args", "want"),
    [
        (None, [], False),
        ("1", [], True),
        ("true", [], True),
        ("0", [], False),
        ("false", [], False),
        (None, ["--offline"], True),
        ("0", ["--offline"], True),
    ],
)
def test_offline_flag_is_a_bool_read_once_at_the_command_line(
    monkeypatch: pytest.MonkeyPatch, env: str | None, args: list[str], want: bool
) -> None:
    """``--offline`` / ``$SGLFORGE_OFFLINE`` is read by the option alone, into a plain bool
    (the core never reads the environment again: a request carries it)."""
    import click
    from click.testing import CliRunner

    from sglforge.cli.options import offline_option

    seen: list[object] = []

    @click.command()
    @offline_option
    def cmd(offline: object) -> None:
        seen.append(offline)

    if env is None:
        monkeypatch.delenv(bases.OFFLINE_ENV, raising=False)
    else:
        monkeypatch.setenv(bases.OFFLINE_ENV, env)
    res = CliRunner().invoke(cmd, args)
    assert res.exit_code == 0, res.output
    assert seen == [want] and type(seen[0]) is bool


def test_buildx_progress_lines() -> None:
    step = BUILDX_STEP
    m = step.match("#12 [gfx950  3/41] RUN pip install IPython")
    assert m and m.groups() == ("3", "41", "RUN pip install IPython")
    m = step.match("#7 [5/9] COPY . /src")
    assert m and m.groups() == ("5", "9", "COPY . /src")
    assert step.match("#1 [internal] load build definition from rocm.Dockerfile") is None
