"""The verbs quilt and StGit users reach for: patches import FILE|URL|COMMIT, drop, rename,
reorder, new with its trailers, and lint's warnings for what a reviewer would ask about.
Real git repositories in temporary folders; URLs served on 127.0.0.1."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from sglforge.cli import main
from sglforge.queue.series import load_queue, parse_patch
from synthetic import commit, edit, git, make_project, make_upstream

ONE = [("fix-a", "python/pkg/a.py", 5, "a line 5 FIXED", "")]


def cli(root: Path, *args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, ["--root", str(root), *args])
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stdout, res.stderr


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    return make_upstream(tmp_path)


@pytest.fixture
def project(tmp_path: Path, upstream: Path) -> Path:
    return make_project(tmp_path, upstream, ONE)


def format_patch(repo: Path, rel: str, line: int, new: str, subject: str) -> str:
    """A format-patch text of one change made on a scratch clone's HEAD (then undone)."""
    edit(repo, rel, line, new)
    commit(repo, f"{subject}\n\nWhy: a user's fix.")
    text = git(repo, "format-patch", "-1", "--stdout", "HEAD") + "\n"
    git(repo, "reset", "-q", "--hard", "HEAD^")
    return text


@pytest.fixture
def scratch(tmp_path: Path, upstream: Path) -> Path:
    path = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(upstream), str(path))
    git(path, "checkout", "-q", "v1.0")
    return path


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(base URL, folder) of a web server on 127.0.0.1 serving the folder."""
    folder = tmp_path / "www"
    folder.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw) -> None:  # type: ignore[no-untyped-def]
            super().__init__(*a, directory=str(folder), **kw)

        def log_message(self, *_a) -> None:  # type: ignore[no-untyped-def]
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", folder
    finally:
        server.shutdown()
        server.server_close()


def series(root: Path) -> list[str]:
    return [e.name for e in load_queue(root).entries]


def trailer(root: Path, name: str, key: str) -> str | None:
    return parse_patch(root / "patches" / name).trailer(key)


def test_import_a_file_a_plain_diff_and_a_series_of_commits(
    project: Path, scratch: Path, tmp_path: Path
) -> None:
    one = tmp_path / "b.patch"
    one.write_text(format_patch(scratch, "python/pkg/b.py", 20, "b FIXED", "pkg: fix b"))
    code, out, err = cli(project, "patches", "import", str(one))
    assert code == 0, err
    assert series(project) == ["0001-fix-a.patch", "0002-b.patch"]  # the file's name
    assert trailer(project, "0002-b.patch", "Upstream-Status") == "Pending"
    assert trailer(project, "0002-b.patch", "Applies-To") == ">=1.0"
    assert "next: sglforge patches check" in out
    # a plain `git diff` (no mail headers): authored by the user, git am can apply it
    edit(scratch, "python/pkg/c.py", 10, "c FIXED")
    plain = tmp_path / "fix-c.diff"
    plain.write_text(git(scratch, "diff") + "\n")
    git(scratch, "checkout", "-q", "--", ".")
    code, out, err = cli(project, "patches", "import", str(plain), "--status", "Denied")
    assert code == 0, err
    assert trailer(project, "0003-fix-c.patch", "Upstream-Status") == "Denied"
    assert "sglforge tests" in parse_patch(project / "patches" / "0003-fix-c.patch").author
    # several commits in one file (a pull request's .patch): one patch each, in order
    edit(scratch, "python/pkg/g.py", 3, "g 3")
    commit(scratch, "pkg: g part one\n\nFirst.")
    edit(scratch, "python/pkg/g.py", 20, "g 20")
    commit(scratch, "pkg: g part two\n\nSecond.")
    mbox = tmp_path / "pr.patch"
    mbox.write_text(git(scratch, "format-patch", "-2", "--stdout", "HEAD") + "\n")
    code, out, err = cli(project, "patches", "import", str(mbox))
    assert code == 0, err
    assert series(project)[-2:] == ["0004-pkg-g-part-one.patch", "0005-pkg-g-part-two.patch"]
    # what was imported applies, and lint finds no errors in it
    code, out, err = cli(project, "patches", "apply")
    assert code == 0, err
    assert cli(project, "patches", "lint")[0] == 0


def test_import_keeps_the_file_s_own_trailers_and_name(
    project: Path, scratch: Path, tmp_path: Path
) -> None:
    """N2: a file's own Upstream-Status / Applies-To / name are kept (and said), an option
    overrides only what it names; a long subject is cut at a word's end."""
    text = format_patch(scratch, "python/pkg/b.py", 20, "b FIXED", "pkg: fix b")
    text = text.replace(
        "Why: a user's fix.",
        "Why: a user's fix.\n\nUpstream-Status: Backport [1.1]\nApplies-To: >=0.9,<1.1",
    )
    (tmp_path / "q").mkdir()
    mine = tmp_path / "q" / "0002-glm-draft.patch"
    mine.write_text(text)
    code, out, err = cli(project, "patches", "import", str(mine))
    assert code == 0, err
    assert series(project) == ["0001-fix-a.patch", "0002-glm-draft.patch"]
    assert trailer(project, "0002-glm-draft.patch", "Upstream-Status") == "Backport [1.1]"
    assert trailer(project, "0002-glm-draft.patch", "Applies-To") == ">=0.9,<1.1"
    assert "kept its own Upstream-Status: Backport [1.1]  (--status overrides)" in out
    assert "kept its own Applies-To: >=0.9,<1.1  (--applies-to overrides)" in out
    assert "kept the file's name" in out
    # an option overrides the trailer it names and only that one; --name the name (the same
    # change again: --force, as import refuses a change the queue holds)
    other = tmp_path / "pr-7.patch"
    other.write_text(text)
    code, out, err = cli(
        project, "patches", "import", str(other), "--status", "Pending", "--name", "mine", "--force"
    )
    assert code == 0, err
    assert series(project)[-1] == "0003-mine.patch"
    assert trailer(project, "0003-mine.patch", "Upstream-Status") == "Pending"
    assert trailer(project, "0003-mine.patch", "Applies-To") == ">=0.9,<1.1"
    assert "kept the file's name" not in out and "Upstream-Status" not in out
    code, out, err = cli(project, "patches", "import", str(other), "--json", "--force")
    assert code == 0, err
    assert json.loads(out)["kept"] == {
        "0004-pr-7.patch": ["Upstream-Status: Backport [1.1]", "Applies-To: >=0.9,<1.1", "name"]
    }


def test_a_long_subject_is_cut_at_a_word_s_end() -> None:
    from sglforge.patches.export import slug

    long = "glm_moe_dsa: build the GLM-5.2 MTP draft as GlmMoeDsa instead of DeepseekV3"
    assert slug(long) == "glm-moe-dsa-build-the-glm-5-2-mtp-draft-as-glmmoedsa"
    assert slug("x" * 80) == "x" * 52
    assert slug("a-" + "b" * 60) == "a"


def test_import_a_url(project: Path, scratch: Path, served: tuple[str, Path]) -> None:
    base, folder = served
    (folder / "pull").mkdir()
    (folder / "pull" / "7.patch").write_text(
        format_patch(scratch, "python/pkg/b.py", 20, "b FIXED", "pkg: fix b upstream")
    )
    code, out, err = cli(project, "patches", "import", f"{base}/pull/7.patch", "--json")
    assert code == 0, err
    name = json.loads(out)["patches"][0]
    assert trailer(project, name, "Upstream-Status") == f"Submitted [{base}/pull/7]"
    assert trailer(project, name, "Origin") == f"{base}/pull/7.patch"
    (folder / "commit").mkdir()
    (folder / "commit" / "0123456789abcdef.patch").write_text(
        format_patch(scratch, "python/pkg/c.py", 10, "c FIXED", "pkg: fix c upstream")
    )
    code, out, err = cli(
        project, "patches", "import", f"{base}/commit/0123456789abcdef.patch", "--name", "c"
    )
    assert code == 0, err
    assert trailer(project, "0003-c.patch", "Upstream-Status") == "Backport [0123456789ab]"
    # nothing there: upstream unreachable or missing (3), nothing written
    before = series(project)
    code, out, err = cli(project, "patches", "import", f"{base}/pull/404.patch")
    assert code == 3 and "HTTP 404" in err and series(project) == before
    code, out, err = cli(project, "patches", "import", "http://127.0.0.1:1/x.patch")
    assert code == 3 and "could not fetch" in err


def test_import_an_upstream_commit(project: Path, upstream: Path) -> None:
    """A commit of upstream: Backport [the first release holding it], needed below it."""
    sha = git(upstream, "log", "-1", "--format=%H", "--grep", "fix e the same way")
    code, out, err = cli(project, "patches", "import", sha[:10])
    assert code == 0, err
    name = series(project)[-1]
    assert name == "0002-fix-e-the-same-way.patch"
    assert trailer(project, name, "Upstream-Status") == "Backport [1.1]"
    assert trailer(project, name, "Applies-To") == "<1.1"
    assert trailer(project, name, "Upstream-Fixed-In") == "1.1"
    assert trailer(project, name, "Origin") == f"{upstream}, commit {sha}"
    code, out, err = cli(project, "patches", "check", "--ref", "v1.0", "--ref", "v1.1", "--json")
    statuses = {r["ref"]: r["patches"][-1]["status"] for r in json.loads(out)["refs"]}
    assert statuses["v1.0"] == "clean" and statuses["v1.1"] in ("upstreamed", "skipped")


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["nope.patch"], 2, "no such file, and not a URL or a commit"),
        (["deadbeef00"], 3, "not found"),
        (["{empty}"], 4, "not a patch"),
        (["{patch}", "--status", "Upstreamed"], 2, "--status 'Upstreamed': not one of"),
        (["{patch}", "--status", "Backport"], 2, "Backport needs a [detail]"),
        (["{patch}", "--applies-to", ">>1"], 2, "not a PEP 440 specifier"),
    ],
)
def test_import_refuses_what_it_cannot_use(
    project: Path, scratch: Path, tmp_path: Path, args: list[str], code: int, said: str
) -> None:
    (tmp_path / "empty.patch").write_text("Subject: [PATCH] nothing\n\njust words\n")
    (tmp_path / "ok.patch").write_text(format_patch(scratch, "python/pkg/b.py", 2, "b", "b"))
    fill = {"{empty}": str(tmp_path / "empty.patch"), "{patch}": str(tmp_path / "ok.patch")}
    before = sorted((project / "patches").iterdir())
    got, out, err = cli(project, "patches", "import", *[fill.get(a, a) for a in args])
    assert got == code and said in err, err
    assert sorted((project / "patches").iterdir()) == before


def test_drop_rename_reorder(tmp_path: Path, upstream: Path) -> None:
    root = make_project(
        tmp_path,
        upstream,
        [
            ("fix-a", "python/pkg/a.py", 5, "a FIXED", ""),
            ("fix-b", "python/pkg/b.py", 5, "b FIXED", ""),
            ("fix-c", "python/pkg/c.py", 5, "c FIXED", "Depends-On: 0002-fix-b.patch\n"),
        ],
    )
    # rename: number kept, Depends-On lines follow, the series' comment stays
    code, out, err = cli(root, "patches", "rename", "fix-b", "better-b")
    assert code == 0, err
    assert series(root) == ["0001-fix-a.patch", "0002-better-b.patch", "0003-fix-c.patch"]
    assert trailer(root, "0003-fix-c.patch", "Depends-On") == "0002-better-b.patch"
    assert (root / "patches" / "series").read_text().startswith("# the queue\n")
    assert not (root / "patches" / "0002-fix-b.patch").exists()
    # the lock says which command held it (a busy message quotes this), global flags aside
    (lock,) = (root / "build" / "locks").glob("project-*.lock")
    assert lock.read_text().endswith("(sglforge patches rename)\n"), lock.read_text()
    # reorder: every way of saying where; a Depends-On never names a later patch
    assert cli(root, "patches", "reorder", "3", "--first")[0] == 2  # needs 0002 first
    assert cli(root, "patches", "reorder", "1", "--last")[0] == 0
    assert series(root) == ["0002-better-b.patch", "0003-fix-c.patch", "0001-fix-a.patch"]
    assert cli(root, "patches", "reorder", "0001", "--before", "0003")[0] == 0
    assert series(root) == ["0002-better-b.patch", "0001-fix-a.patch", "0003-fix-c.patch"]
    assert cli(root, "patches", "reorder", "fix-a", "--after", "fix-c")[0] == 0
    assert series(root)[-1] == "0001-fix-a.patch"
    code, out, err = cli(root, "patches", "reorder", "fix-a")
    assert code == 2 and "one of --before" in err
    code, out, err = cli(root, "patches", "reorder", "fix-z", "--first")
    assert code == 2 and "no patch 'fix-z'" in err
    # drop: refused while another depends on it; else kept under retired/ with the reason
    code, out, err = cli(root, "patches", "drop", "0002", "--reason", "upstream took it")
    assert code == 2 and "0003-fix-c.patch say Depends-On" in err
    code, out, err = cli(root, "patches", "drop", "fix-a", "--reason", "superseded by 0003")
    assert code == 0, err
    kept = root / "patches" / "retired" / "0001-fix-a.patch"
    assert parse_patch(kept).trailer("Retired") == "dropped: superseded by 0003"
    assert "0001-fix-a.patch" not in series(root)
    assert not (root / "patches" / "0001-fix-a.patch").exists()
    assert cli(root, "patches", "lint")[0] == 0
    assert cli(root, "patches", "apply")[0] == 0


def test_reorder_renumber(tmp_path: Path, upstream: Path) -> None:
    """N21: after a reorder the numbers follow the series on --renumber (alone, or with a
    move); Depends-On lines follow the renames, and the queue still applies."""
    root = make_project(
        tmp_path,
        upstream,
        [
            ("fix-a", "python/pkg/a.py", 5, "a FIXED", ""),
            ("fix-b", "python/pkg/b.py", 5, "b FIXED", ""),
            ("fix-c", "python/pkg/c.py", 5, "c FIXED", "Depends-On: 0002-fix-b.patch\n"),
        ],
    )
    assert cli(root, "patches", "reorder", "fix-a", "--last")[0] == 0
    assert series(root) == ["0002-fix-b.patch", "0003-fix-c.patch", "0001-fix-a.patch"]
    code, out, err = cli(root, "patches", "reorder", "fix-a", "--renumber")
    assert code == 0, err
    assert series(root) == ["0001-fix-b.patch", "0002-fix-c.patch", "0003-fix-a.patch"]
    assert "3 file(s) renamed" in out
    assert trailer(root, "0002-fix-c.patch", "Depends-On") == "0001-fix-b.patch"
    names = sorted(p.name for p in (root / "patches").glob("*.patch"))
    assert names == ["0001-fix-b.patch", "0002-fix-c.patch", "0003-fix-a.patch"]
    # with a move: the moved patch gets its new place's number
    code, out, err = cli(root, "patches", "reorder", "fix-a", "--first", "--renumber", "--json")
    assert code == 0, err
    assert json.loads(out)["patches"] == ["0001-fix-a.patch"]
    assert series(root) == ["0001-fix-a.patch", "0002-fix-b.patch", "0003-fix-c.patch"]
    assert trailer(root, "0003-fix-c.patch", "Depends-On") == "0002-fix-b.patch"
    code, out, err = cli(root, "patches", "reorder", "fix-a", "--renumber")
    assert code == 0 and "nothing to change" in out
    assert cli(root, "patches", "lint")[0] == 0
    assert cli(root, "patches", "apply")[0] == 0


def test_new_takes_its_trailers(project: Path) -> None:
    assert cli(project, "patches", "apply")[0] == 0
    wt = project / "build" / "worktrees" / "v1.0"
    edit(wt, "python/pkg/b.py", 7, "b 7 FIXED")
    code, out, err = cli(project, "patches", "new", "fix-b", "--status", "Pending")
    assert code == 0 and "Upstream-Status: Pending" in out
    edit(wt, "python/pkg/c.py", 7, "c 7 FIXED")
    code, out, err = cli(
        project,
        "patches",
        "new",
        "fix-c",
        "--status",
        "Backport [1.1]",
        "--origin",
        "https://example.invalid/commit/1",
        "--applies-to",
        "<1.1",
    )
    assert code == 0, err
    name = series(project)[-1]
    assert trailer(project, name, "Upstream-Status") == "Backport [1.1]"
    assert trailer(project, name, "Origin") == "https://example.invalid/commit/1"
    assert trailer(project, name, "Applies-To") == "<1.1"
    edit(wt, "python/pkg/g.py", 7, "g 7 FIXED")
    code, out, err = cli(project, "patches", "new", "fix-g", "--status", "Submitted")
    assert code == 2 and "needs a [detail]" in err


def test_lint_warns_on_what_a_reviewer_asks(tmp_path: Path, upstream: Path) -> None:
    root = make_project(
        tmp_path,
        upstream,
        [
            ("fix-a", "python/pkg/a.py", 5, "a FIXED", ""),  # Pending, not forwarded
            ("fix-b", "python/pkg/b.py", 5, "b FIXED", "Forwarded: https://x.invalid/1\n"),
            ("fix-c", "python/pkg/c.py", 5, "c FIXED", "Bug: https://x.invalid/2\n"),
        ],
    )
    # no description at all: only a subject and the trailer
    path = root / "patches" / "0002-fix-b.patch"
    path.write_text(path.read_text().replace("Why: tests.\n\n", ""))
    code, out, err = cli(root, "patches", "lint", "--json")
    assert code == 0  # warnings only
    found = {(f["file"], f["code"]) for f in json.loads(out)["findings"]}
    assert ("patches/0001-fix-a.patch", "pending-not-forwarded") in found
    assert ("patches/0002-fix-b.patch", "no-description") in found
    assert ("patches/0002-fix-b.patch", "pending-not-forwarded") not in found
    assert ("patches/0003-fix-c.patch", "pending-not-forwarded") not in found
    assert not {c for f, c in found if f == "patches/0003-fix-c.patch"}
    code, out, err = cli(root, "patches", "lint")
    assert "lint: clean, 2 warnings" in out


def test_list_wide_shows_whole_subjects(tmp_path: Path, upstream: Path) -> None:
    long = "fix-a-with-a-subject-long-enough-to-be-cut-in-the-table-view"
    root = make_project(tmp_path, upstream, [(long, "python/pkg/a.py", 5, "A", "")])
    code, out, err = cli(root, "patches", "list")
    assert "~" in out and f"{long}: patch" not in out
    code, out, err = cli(root, "patches", "list", "--wide")
    assert code == 0 and f"{long}: patch python/pkg/a.py" in out and "~" not in out
