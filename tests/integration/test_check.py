"""The check matrix on a real synthetic upstream: every status, and the JSON shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipelines import open_project
from sglforge.cache import upstream_mirrors
from sglforge.cli import main
from sglforge.patches.check import check_refs
from synthetic import commit, edit, git, make_project, make_upstream


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path, make_upstream(tmp_path))


def statuses(report, ref: str) -> dict[str, str]:
    (r,) = [r for r in report.refs if r.ref == ref]
    return {p.name: p.status for p in r.patches}


def test_every_status_at_the_next_release(project: Path) -> None:
    report = check_refs(open_project(project), ["v1.0", "v1.1"])
    assert set(statuses(report, "v1.0").values()) == {"clean"}
    assert statuses(report, "v1.1") == {
        "0001-fix-a.patch": "clean",
        "0002-fix-b.patch": "offset",
        "0003-fix-c.patch": "three-way",
        "0004-fix-d.patch": "conflict",
        "0005-fix-e.patch": "upstreamed",
        "0006-fix-f.patch": "upstreamed",
        "0007-fix-g.patch": "skipped",
        "0008-fix-d-more.patch": "skipped",
    }
    details = {p.name: p for p in report.refs[1].patches}
    assert "python/pkg/d.py hunk 1" in details["0004-fix-d.patch"].detail
    assert details["0004-fix-d.patch"].hunks == ("python/pkg/d.py hunk 1 (@@ -7,7 @@)",)
    assert "moved" in details["0006-fix-f.patch"].detail
    assert "python/pkg/kernels/jit/f.cuh" in details["0006-fix-f.patch"].detail
    assert "Applies-To <1.1" in details["0007-fix-g.patch"].detail
    assert "0004-fix-d.patch" in details["0008-fix-d-more.patch"].detail
    assert "offset 3" in details["0002-fix-b.patch"].detail
    assert not report.ok


def test_check_touches_no_worktree(project: Path) -> None:
    check_refs(open_project(project), ["v1.1"])
    assert not (project / "build" / "worktrees").exists()
    assert not list((project / "build" / "tmp").glob("index-*"))


def test_patch_id_finds_a_change_merged_then_edited(tmp_path: Path) -> None:
    upstream = make_upstream(tmp_path)
    root = make_project(tmp_path, upstream, [("fix-a", "python/pkg/a.py", 5, "a line 5 X", "")])
    # Upstream merges the identical change, then edits the lines around it: the patch no
    # longer reverse-applies, but its patch-id matches the upstream commit.
    git(upstream, "checkout", "-q", "-b", "later", "v1.1")
    edit(upstream, "python/pkg/a.py", 5, "a line 5 X")
    sha = commit(upstream, "same fix as the queue")
    edit(upstream, "python/pkg/a.py", 4, "a line 4 reworded")
    edit(upstream, "python/pkg/a.py", 6, "a line 6 reworded")
    commit(upstream, "reword")
    git(upstream, "tag", "v1.2")
    report = check_refs(open_project(root), ["v1.2"])
    (st,) = report.refs[0].patches
    assert st.status == "upstreamed"
    assert sha[:12] in st.detail and "patch-id" in st.detail


def test_fixed_in_is_the_last_resort(tmp_path: Path) -> None:
    upstream = make_upstream(tmp_path)
    root = make_project(
        tmp_path, upstream, [("fix-d", "python/pkg/d.py", 10, "d fix", "Upstream-Fixed-In: 1.1\n")]
    )
    (st,) = check_refs(open_project(root), ["v1.1"]).refs[0].patches
    assert st.status == "upstreamed"
    assert "Upstream-Fixed-In 1.1" in st.detail


def test_cli_json_matrix_and_exit_code(project: Path) -> None:
    res = CliRunner().invoke(
        main,
        ["--root", str(project), "patches", "check", "--ref", "v1.0", "--ref", "v1.1", "--json"],
    )
    assert res.exit_code == 1, res.output  # a conflict is a problem found
    data = json.loads(res.stdout)
    assert [r["ref"] for r in data["refs"]] == ["v1.0", "v1.1"]
    first = data["refs"][0]
    assert len(first["commit"]) == 40
    assert first["patches"][0] == {
        **first["patches"][0],
        "name": "0001-fix-a.patch",
        "status": "clean",
    }
    assert "detail" in first["patches"][0]


def test_tags_spec_selects_releases(project: Path) -> None:
    res = CliRunner().invoke(
        main, ["--root", str(project), "patches", "check", "--tags", ">=1.0", "--json"]
    )
    assert [r["ref"] for r in json.loads(res.stdout)["refs"]] == ["v1.0", "v1.1"]


def test_whole_series_fast_path_reports_offsets_per_patch(tmp_path: Path) -> None:
    from synthetic import PATCHES

    upstream = make_upstream(tmp_path)
    keep = [p for p in PATCHES if p[0] in ("fix-a", "fix-b", "fix-c")][:2]
    keep.append(("fix-b-again", "python/pkg/b.py", 25, "b line 25 FIXED", ""))
    root = make_project(tmp_path, upstream, keep)
    report = check_refs(open_project(root), ["v1.1"])
    got = {p.name: (p.status, p.detail) for p in report.refs[0].patches}
    assert got == {
        "0001-fix-a.patch": ("clean", ""),
        "0002-fix-b.patch": ("offset", "hunk 1 at line 20 (offset 3)"),
        "0003-fix-b-again.patch": ("offset", "hunk 1 at line 25 (offset 3)"),
    }


def test_remote_upstream_is_a_partial_clone(tmp_path: Path) -> None:
    """A URL upstream is cached without blobs; the ones a check needs come on demand."""
    upstream = make_upstream(tmp_path)
    git(upstream, "config", "uploadpack.allowFilter", "true")
    git(upstream, "config", "uploadpack.allowAnySHA1InWant", "true")
    root = make_project(tmp_path, upstream)
    toml = root / "patches" / "upstream.toml"
    toml.write_text(toml.read_text().replace(f'"{upstream}"', f'"file://{upstream}"'))
    report = check_refs(open_project(root), ["v1.1"])
    assert statuses(report, "v1.1")["0002-fix-b.patch"] == "offset"
    (cache,) = upstream_mirrors().glob("*.git")
    missing = git(cache, "rev-list", "--objects", "--all", "--missing=print")
    assert any(line.startswith("?") for line in missing.splitlines()), "no blob was left out"


def test_without_refs_the_pin_is_checked(project: Path) -> None:
    report = check_refs(open_project(project), [])
    assert [r.ref for r in report.refs] == ["v1.0"]
