"""sglforge upgrade on a synthetic upstream: retire, refuse on conflict, never half-done."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_gates_counting import _project, _with_items
from test_gates_counting import counted as counted  # the outside systems replaced

from crash import CRASH_EXIT, crash_command
from pipelines import upgrade_at as upgrade
from sglforge.cli import main
from sglforge.queue.series import load_queue
from synthetic import NO_CONFLICT, make_project, make_upstream, snapshot


def test_upgrade_retires_with_evidence_and_reports(tmp_path: Path) -> None:
    root = make_project(tmp_path, make_upstream(tmp_path), NO_CONFLICT)
    r = upgrade(root, "latest", build=False)
    assert r.ready and r.applied, r.reason
    actions = {p.name: p.action for p in r.patches}
    assert actions["0004-fix-e.patch"] == "retired"
    assert actions["0005-fix-f.patch"] == "retired"
    assert actions["0006-fix-g.patch"] == "retired"  # Applies-To <1.1 excludes the new pin
    q = load_queue(root)
    assert q.pin.ref == "v1.1"
    assert [p.name for p in q.patches] == [
        "0001-fix-a.patch",
        "0002-fix-b.patch",
        "0003-fix-c.patch",
    ]
    # the write-back deletes what it retired: patches/ holds the queue's files only (a
    # retired patch left beside them would be an orphan that lint flags)
    assert sorted(p.name for p in (root / "patches").glob("*.patch")) == [
        "0001-fix-a.patch",
        "0002-fix-b.patch",
        "0003-fix-c.patch",
    ]
    retired = (root / "patches/retired/0006-fix-g.patch").read_text()
    assert "Retired: v1.1: Applies-To <1.1 excludes 1.1" in retired
    data = json.loads(r.report_json.read_text())
    assert data["old_ref"] == "v1.0" and data["new_ref"] == "v1.1" and data["ready"]
    md = r.report_md.read_text()
    assert "READY TO MERGE" in md and "0005-fix-f.patch | retired" in md
    assert "Upstream pin moved from v1.0 to v1.1." in (root / "CHANGELOG.md").read_text()
    assert not (root / "build" / "upgrade" / "v1.1").exists()  # staging removed
    # a second run has nothing to do
    again = upgrade(root, "latest", build=False)
    assert again.ready and not again.applied and "already at v1.1" in again.reason


def test_conflict_changes_nothing_and_names_the_hunk(tmp_path: Path) -> None:
    root = make_project(tmp_path, make_upstream(tmp_path))
    load_queue(root)
    res = CliRunner().invoke(
        main, ["--root", str(root), "upgrade", "--to", "v1.1", "--no-build", "--json"]
    )
    before_pin = (root / "patches/upstream.toml").read_text()
    assert res.exit_code == 1, res.output
    data = json.loads(res.stdout)
    assert not data["ready"] and not data["applied"]
    assert "python/pkg/d.py hunk 1" in data["reason"]
    assert "sglforge patches apply --ref v1.1" in data["reason"]
    assert 'ref = "v1.0"' in before_pin
    assert not (root / "patches" / "retired").exists()


def test_interrupted_upgrade_is_all_old_or_all_new(tmp_path: Path) -> None:
    """A crash at each rename of the final write leaves the project as it was or exactly as
    an uninterrupted upgrade leaves it, never in between."""
    (tmp_path / "ref").mkdir()
    reference = make_project(tmp_path / "ref", make_upstream(tmp_path / "ref"), NO_CONFLICT)
    load_queue(reference)
    args = ["upgrade", "--to", "v1.1", "--no-build"]
    done = subprocess.run(
        [sys.executable, "-m", "sglforge", "--root", str(reference), *args],
        capture_output=True,
    )
    assert done.returncode == 0, done.stderr
    after = normalized(snapshot(reference), tmp_path / "ref")

    outcomes: list[str] = []
    for n in range(1, 60):
        work = tmp_path / f"run{n}"
        work.mkdir()
        root = make_project(work, make_upstream(work), NO_CONFLICT)
        load_queue(root)
        before = normalized(snapshot(root), work)
        proc = subprocess.run(crash_command(n, "--root", str(root), *args), capture_output=True)
        load_queue(root)  # what any next command does first: finish or forget the change
        now = normalized(snapshot(root), work)
        if proc.returncode == 0:
            assert now == after
            outcomes.append("finished")
            break
        assert proc.returncode == CRASH_EXIT, proc.stderr
        assert now in (before, after), f"crash after {n} rename(s) left a half-done project"
        outcomes.append("old" if now == before else "new")
    # The crash points covered the whole write: it ran to the end within the loop, and at
    # least one crash landed after the journal (rolled forward to the new state).
    assert outcomes[-1] == "finished" and "new" in outcomes, outcomes


def normalized(snap: dict, folder: Path) -> dict:
    """A project snapshot comparable across folders (the folder's path and dates taken out)."""
    out = {}
    for path, data in snap.items():
        text = data.decode("utf-8", "replace")
        text = text.replace(str(folder), "FOLDER")
        out[path] = re.sub(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2})?\S*", "DATE", text)
    return out


def test_a_patch_rewritten_for_the_new_release_is_named_in_the_changelog(tmp_path: Path) -> None:
    """N21: the conflict-fix flow (upgrade stops, the conflict is resolved in the new ref's
    worktree and exported, upgrade again): CHANGELOG says the patch was rewritten for the new
    release and what it changes, not only that the pin moved."""
    from synthetic import git, lines, write

    root = make_project(
        tmp_path,
        make_upstream(tmp_path),
        [("fix-a", "python/pkg/a.py", 5, "a FIXED", ""), ("fix-d", "python/pkg/d.py", 10, "D", "")],
    )

    def cli(*args: str) -> int:
        return CliRunner().invoke(main, ["--root", str(root), *args]).exit_code

    assert cli("upgrade", "--to", "v1.1", "--no-build") == 1
    assert cli("patches", "apply", "--ref", "v1.1") == 4  # stops at fix-d
    wt = root / "build" / "worktrees" / "v1.1"
    resolved = lines("d")
    resolved[9] = "D"
    write(wt, "python/pkg/d.py", resolved)
    git(wt, "add", "python/pkg/d.py")
    git(wt, "am", "--continue")
    assert cli("patches", "export", "--ref", "v1.1") == 0
    assert cli("upgrade", "--to", "v1.1", "--no-build") == 0
    changelog = (root / "CHANGELOG.md").read_text()
    assert "Upstream pin moved from v1.0 to v1.1." in changelog
    assert (
        "Rewrote `0002-fix-d.patch` for v1.1 (it no longer applies at v1.0); it now changes "
        "`python/pkg/d.py`." in changelog
    ), changelog
    assert "0001-fix-a" not in changelog


def test_a_two_target_upgrade_retires_an_upstreamed_config_item_once(
    tmp_path: Path, counted: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two targets of one item's GPU (mi355x on two ROCm versions) whose new base's aiter
    carries every row of the queue's config item: the item is retired once, before either
    build (the base probed once), both outcomes name it, and the project's patches/ no longer
    holds it (review 5, 5.2 mend 6; the second target once saw an empty retired set)."""
    from sglforge import bases
    from synthetic import git as run_git

    item = "glm52-mxfp4-moe-gfx950"
    p, _scenario, _model = _project(tmp_path)
    _with_items(p.root)
    run_git(p.upstream, "tag", "v0.5.15")
    rows = (p.root / "patches" / "configs" / f"{item}.csv").read_text()
    real = bases.aiter_configs
    monkeypatch.setattr(
        bases,
        "aiter_configs",  # the new base's aiter merges the item's file as its own
        lambda ref, labels=None: dataclasses.replace(
            real(ref, labels), model_configs={"glm5_fp4_tuned_fmoe.csv": rows}
        ),
    )
    said: list[str] = []
    r = upgrade(
        p.root,
        "v0.5.15",
        upstream=p.upstream,
        targets=("mi355x", "mi355x-rocm720"),
        base_image="sglforge-standin/sglang-build:v{version}-rocm700-mi35x",
        offline=True,
        smoke=False,
        progress=said.append,
    )
    assert r.ready and r.applied, r.reason
    assert [t.target for t in r.targets] == ["mi355x", "mi355x-rocm720"]
    assert [t.configs for t in r.targets] == [((item, "upstreamed"),)] * 2
    assert counted["aiter probe"] == 1 and counted["engine build"] == 2, counted
    assert sum("upstreamed, retired" in line for line in said) == 1, said
    configs, retired = p.root / "patches" / "configs", p.root / "patches" / "retired" / "configs"
    assert not list(configs.glob(f"{item}.*")) and load_queue(p.root).configs == ()
    assert sorted(f.name for f in retired.iterdir()) == [f"{item}.csv", f"{item}.toml"]
    assert (retired / f"{item}.csv").read_text() == rows
    md = r.report_md.read_text()
    assert all(f"| {t} | {item} | upstreamed |" in md for t in ("mi355x", "mi355x-rocm720"))
