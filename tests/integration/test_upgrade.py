"""sglforge upgrade on a synthetic upstream: retire, refuse on conflict, never half-done."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from sglforge.cli import main
from sglforge.patches.series import load_queue
from sglforge.upgrade import latest_release, upgrade
from synthetic import NO_CONFLICT, make_project, make_upstream, snapshot


def test_latest_release_parses_versions(tmp_path: Path) -> None:
    root = make_project(tmp_path, make_upstream(tmp_path), NO_CONFLICT)
    assert latest_release(root) == "v1.1"


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
        "0001-fix-a.patch", "0002-fix-b.patch", "0003-fix-c.patch"
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
    res = CliRunner().invoke(main, ["--root", str(root), "upgrade", "--to", "v1.1",
                                    "--no-build", "--json"])
    before_pin = (root / "patches/upstream.toml").read_text()
    assert res.exit_code == 1, res.output
    data = json.loads(res.output)
    assert not data["ready"] and not data["applied"]
    assert "python/pkg/d.py hunk 1" in data["reason"]
    assert "sglforge patches apply --ref v1.1" in data["reason"]
    assert 'ref = "v1.0"' in before_pin
    assert not (root / "patches" / "retired").exists()


def test_interrupted_upgrade_changes_nothing(tmp_path: Path) -> None:
    root = make_project(tmp_path, make_upstream(tmp_path), NO_CONFLICT)
    load_queue(root)
    # record the pin's commit first, so the snapshot compares like with like
    subprocess.run([sys.executable, "-m", "sglforge", "--root", str(root), "patches", "check",
                    "--ref", "v1.0"], check=True, capture_output=True)
    before = snapshot(root)
    # Kill the upgrade at many points in its run: the project is unchanged or fully upgraded.
    outcomes = set()
    for delay in (0.3, 0.6, 0.9, 1.2):
        proc = subprocess.Popen(
            [sys.executable, "-m", "sglforge", "--root", str(root), "upgrade", "--to", "v1.1",
             "--no-build"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy(),
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        load_queue(root)  # what any next command does first
        now = snapshot(root)
        if now == before:
            outcomes.add("old")
        else:
            assert load_queue(root).pin.ref == "v1.1"
            assert (root / "patches/retired/0005-fix-f.patch").exists()
            outcomes.add("new")
            break
    assert outcomes <= {"old", "new"}
    # also a crash in the middle of the final write
    (tmp_path / "two").mkdir()
    root2 = make_project(tmp_path / "two", make_upstream(tmp_path / "two"), NO_CONFLICT)
    load_queue(root2)
    env = {**os.environ, "SGLFORGE_TEST_CRASH_AFTER_RENAMES": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "sglforge", "--root", str(root2), "upgrade", "--to", "v1.1",
         "--no-build"], env=env, capture_output=True,
    )
    # The refresh inside the staging copy crashes first: the project itself is untouched.
    assert proc.returncode == 99
    assert load_queue(root2).pin.ref == "v1.0"
