"""Issue 19: no token leaves in a URL. Whether it sits in the userinfo, the query or the
fragment of the project's git remote, of ``[image] source`` or of the pinned upstream, the OCI
labels and the manifest a build would write hold none of it (one scrubber: sglforge.urls).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from reliability_helpers import cli

from helpers_build import make_build_project
from sglforge.build import fork_labels
from sglforge.engine.credentials import scrub as registry_scrub
from sglforge.provenance import OCI, UpstreamFacts
from sglforge.urls import scrub, scrub_text

SECRET = "QSECRET77tok"

REMOTES = [
    (f"https://github.com/org/repo.git?token={SECRET}", "https://github.com/org/repo"),
    (f"https://github.com/org/repo.git#{SECRET}", "https://github.com/org/repo"),
    (f"https://github.com/org/repo?a=1&access_token={SECRET}#x", "https://github.com/org/repo"),
    (f"https://bob:{SECRET}@github.com/org/repo.git", "https://github.com/org/repo"),
    (f"https://{SECRET}@github.com/org/repo.git?x=1", "https://github.com/org/repo"),
    (f"ssh://git:{SECRET}@git.example.com:2222/org/repo.git", "https://git.example.com/org/repo"),
    (f"git@github.com:org/repo.git?token={SECRET}", "https://github.com/org/repo"),
    (f"https://oauth2:{SECRET}%40x@gitlab.example.com/g/r.git", "https://gitlab.example.com/g/r"),
]


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.mark.parametrize(("remote", "label"), REMOTES)
def test_the_source_label_of_a_remote_holds_no_token(
    tmp_path: Path, remote: str, label: str
) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "f").write_text("x\n")
    git(tmp_path, "add", "f")
    git(tmp_path, "commit", "-q", "-m", "start")
    git(tmp_path, "remote", "add", "origin", remote)
    labels = fork_labels(tmp_path)
    assert labels[f"{OCI}.source"] == label
    # [image] source given by hand goes through the same scrubber.
    assert SECRET not in json.dumps(fork_labels(tmp_path, remote))


@pytest.mark.parametrize(
    ("url", "clean"),
    [
        (f"https://u:{SECRET}@h.example/p/q?t={SECRET}#{SECRET}", "https://h.example/p/q"),
        (f"http://{SECRET}@127.0.0.1:8080/simple/", "http://127.0.0.1:8080/simple/"),
        (f"http://[::1]:5000/v2/?token={SECRET}", "http://[::1]:5000/v2/"),
        (f"http://u:{SECRET}@[::1/x", "http://[::1/x"),  # unparsable netloc
        (f"/srv/git/upstream?{SECRET}", "/srv/git/upstream"),
        ("pypi:sglang>=9", "pypi:sglang>=9"),
    ],
)
def test_scrub_keeps_scheme_host_and_path_only(url: str, clean: str) -> None:
    assert scrub(url) == clean
    if "://" in url:  # in a message: every scheme URL is scrubbed, registry errors too
        text = f"could not fetch {url}: 500; next: retry {url}"
        assert SECRET not in scrub_text(text) and SECRET not in registry_scrub(text, None)


def test_upstream_facts_shown_in_labels_and_manifest_are_scrubbed() -> None:
    facts = UpstreamFacts(
        url=f"https://x:{SECRET}@github.com/sgl-project/sglang.git?t={SECRET}",
        source=f"mirror https://github.com/m/sglang.git?token={SECRET}",
        ref="v0.5.14",
        commit="0" * 40,
        revision="0" * 40,
    )
    assert SECRET not in json.dumps(facts.__dict__)
    assert facts.url == "https://github.com/sgl-project/sglang.git"


def test_a_dry_run_build_prints_no_token_from_the_remote(tmp_path: Path) -> None:
    project = make_build_project(tmp_path)
    git(project.root, "init", "-q")
    git(project.root, "add", "-A")
    git(project.root, "commit", "-q", "-m", "project")
    git(project.root, "remote", "add", "origin", f"https://github.com/org/fork.git?token={SECRET}")
    code, out, err = cli(
        project.root,
        "build",
        "--dry-run",
        "--offline",
        "--upstream",
        str(project.upstream),
        "--json",
    )
    assert code == 0, (out, err)
    assert SECRET not in out + err
    assert "https://github.com/org/fork" in out
