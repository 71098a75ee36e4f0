"""The nightly upstream watch parses and calls only commands and options that exist."""

from __future__ import annotations

import click
from test_workflows import load, options_of, resolve, run_scripts, sglforge_calls


def test_upstream_watch_parses_and_calls_upgrade() -> None:
    wf = load("upstream-watch.yml")
    assert "schedule" in wf["on"] and "workflow_dispatch" in wf["on"]
    job = wf["jobs"]["upgrade"]
    calls = [c for s in run_scripts(wf) for c in sglforge_calls(s)]
    upgrade_calls = [c for c in calls if c[:1] == ["upgrade"]]
    assert upgrade_calls, "the watch must run sglforge upgrade"
    for words in calls:
        cmd, rest, chain = resolve(words)
        assert not isinstance(cmd, click.Group)
        known = set().union(*(options_of(c) for c in chain))
        for opt in [w for w in rest if w.startswith("--")]:
            assert opt in known, f"`sglforge {' '.join(words)}`: no option {opt}"
    assert all("--publish" not in c for c in upgrade_calls)  # the watch never publishes
    assert any("--to" in c for c in upgrade_calls)
    scripts = "\n".join(run_scripts(wf))
    assert "gh pr create" in scripts and "gh pr edit" in scripts  # one PR, updated
    assert "exit 1" in scripts  # fails with the report when not ready
    assert any(str(s.get("uses", "")).startswith("actions/upload-artifact") for s in job["steps"])
