"""Reliability of the queue side under bad input, faults and concurrency (issue 10).

One class per defect class; every test builds real git repositories in temporary folders
(tests/synthetic.py) and runs the real CLI (click's runner, or a real process where signals
or a second process matter). No mocks.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from reliability_helpers import cli, spawn, tree_digest

from sglforge.cache import upstream_mirrors
from sglforge.errors import ConfigError
from sglforge.patches.apply import worktree_path
from sglforge.util import confined
from synthetic import NO_CONFLICT, PATCHES, commit, edit, git, make_project, make_upstream


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    return make_upstream(tmp_path)


@pytest.fixture
def project(tmp_path: Path, upstream: Path) -> Path:
    return make_project(tmp_path, upstream, NO_CONFLICT)


def _journal(root: Path, ops: list[dict[str, str | None]]) -> None:
    (root / "patches" / ".sglforge-txn.json").write_text(json.dumps(ops))


# --- 1. paths derived from data stay inside their folder -----------------------------------


class TestConfinement:
    @pytest.mark.parametrize(
        "target",
        ["{home}/notes.txt", "../notes.txt", "patches/../../notes.txt", "{outside}"],
    )
    def test_a_journal_naming_a_path_outside_deletes_nothing(
        self, project: Path, git_identity: Path, tmp_path: Path, target: str
    ) -> None:
        victim = git_identity / "notes.txt" if "home" in target else tmp_path / "notes.txt"
        victim.write_text("precious\n")
        name = target.format(home=git_identity, outside=victim)
        _journal(project, [{"tmp": None, "target": name, "sha256": None}])
        code, _out, err = cli(project, "patches", "list")
        assert code == 2, err
        assert "refused before writing anything" in err and ".sglforge-txn.json" in err
        assert victim.read_text() == "precious\n"

    def test_a_journal_whose_temp_file_is_outside_moves_nothing_in(
        self, project: Path, tmp_path: Path
    ) -> None:
        outside = tmp_path / "secret.txt"
        outside.write_text("secret\n")
        before = tree_digest(project)
        _journal(project, [{"tmp": str(outside), "target": "patches/series", "sha256": None}])
        code, _out, err = cli(project, "patches", "hash")
        assert code == 2 and "temporary file" in err
        assert outside.read_text() == "secret\n"
        (project / "patches" / ".sglforge-txn.json").unlink()
        assert tree_digest(project) == before

    @pytest.mark.parametrize("entry", ["../evil.patch", "/etc/passwd", "sub/x.patch", ".."])
    def test_series_entries_outside_patches_are_refused(self, project: Path, entry: str) -> None:
        series = project / "patches" / "series"
        series.write_text(series.read_text() + entry + "\n")
        for args in (("patches", "list"), ("patches", "check")):
            code, _out, err = cli(project, *args)
            assert code == 2, err
            assert "patches/series:" in err

    def test_a_series_entry_linking_outside_is_refused(self, project: Path, tmp_path: Path) -> None:
        outside = tmp_path / "elsewhere.patch"
        shutil.copy(project / "patches" / "0001-fix-a.patch", outside)
        (project / "patches" / "0009-link.patch").symlink_to(outside)
        series = project / "patches" / "series"
        series.write_text(series.read_text() + "0009-link.patch\n")
        code, _out, err = cli(project, "patches", "list")
        assert code == 2 and "symbolic link" in err

    @pytest.mark.parametrize("bad", ["../x.py", "/etc/x.py", "python/../../x.py"])
    def test_a_patch_touching_outside_the_tree_is_refused_naming_it(
        self, project: Path, bad: str
    ) -> None:
        path = project / "patches" / "0001-fix-a.patch"
        path.write_text(
            path.read_text()
            .replace("python/pkg/a.py", bad.lstrip("/") if not bad.startswith("/") else bad[1:])
            .replace(
                "a/" + (bad[1:] if bad.startswith("/") else bad),
                ("/" if bad.startswith("/") else "a/") + bad.lstrip("/"),
            )
        )
        before = tree_digest(project)
        for args in (("patches", "list"), ("patches", "apply"), ("patches", "check")):
            code, _out, err = cli(project, *args)
            assert code == 2, (args, err)
            assert "0001-fix-a.patch" in err
        assert tree_digest(project) == before

    @pytest.mark.parametrize("ref", ["..", ".", "../..", "/abs", ".hidden", "a/../../b"])
    def test_worktrees_named_after_refs_stay_in_build_worktrees(
        self, tmp_path: Path, ref: str
    ) -> None:
        base = tmp_path / "build" / "worktrees"
        wt = worktree_path(tmp_path, ref)
        assert wt.parent == base and wt.name not in (".", "..")

    def test_upgrade_to_dot_dot_never_touches_build(self, project: Path) -> None:
        keep = project / "build" / "keep.txt"
        keep.parent.mkdir(parents=True, exist_ok=True)
        keep.write_text("mine\n")
        code, _out, err = cli(project, "upgrade", "--to", "..", "--no-build")
        assert code == 3, err
        assert keep.read_text() == "mine\n"

    @pytest.mark.parametrize(
        ("rel", "ok"),
        [
            ("a/b", True),
            ("a/../b", True),
            ("../b", False),
            ("/b", False),
            ("", False),
            ("a/../../b", False),
        ],
    )
    def test_confined_helper(self, tmp_path: Path, rel: str, ok: bool) -> None:
        if ok:
            assert confined(tmp_path, rel, "thing", "f").is_relative_to(tmp_path)
        else:
            with pytest.raises(ConfigError, match="f: thing"):
                confined(tmp_path, rel, "thing", "f")


# --- 2. data integrity: exact bytes, duplicates refused, nothing rewritten unasked -----------


def _queue_with_latin1(tmp_path: Path, upstream: Path) -> Path:
    root = make_project(tmp_path, upstream, NO_CONFLICT[:2])  # fix-a (clean), fix-b (offset)
    for p in sorted((root / "patches").glob("000*.patch")):
        raw = p.read_bytes().replace(b"Why: tests.", b"Why: caf\xe9 au lait.")
        p.write_bytes(raw)
    return root


class TestIntegrity:
    def test_non_utf8_description_survives_refresh(self, tmp_path: Path, upstream: Path) -> None:
        root = _queue_with_latin1(tmp_path, upstream)
        a, b = (root / "patches" / n for n in ("0001-fix-a.patch", "0002-fix-b.patch"))
        a_before, b_before = a.read_bytes(), b.read_bytes()
        code, _out, err = cli(root, "patches", "refresh", "--ref", "v1.1")
        assert code == 0, err
        assert a.read_bytes() == a_before  # clean at v1.1: not rewritten at all
        assert b.read_bytes() != b_before  # offset: rewritten, but its message byte for byte
        assert b"caf\xe9 au lait" in b.read_bytes() and "\ufffd".encode() not in b.read_bytes()
        head = b_before.split(b"\n---\n")[0]
        assert b.read_bytes().startswith(head)

    @pytest.mark.parametrize(
        "args",
        [
            ("patches", "list"),
            ("patches", "hash"),
            ("patches", "check"),
            ("patches", "apply"),
            ("patches", "refresh", "--ref", "v1.1", "--drop-upstreamed"),
            ("patches", "export"),
            ("upgrade", "--to", "v1.1", "--no-build"),
        ],
    )
    def test_a_duplicate_series_entry_is_refused_before_any_write(
        self, project: Path, args: tuple[str, ...]
    ) -> None:
        series = project / "patches" / "series"
        series.write_text(series.read_text() + "0004-fix-e.patch\n")
        before = tree_digest(project)
        code, _out, err = cli(project, *args)
        assert code == 2, err
        assert "listed twice" in err
        assert tree_digest(project) == before

    def test_lint_reports_the_duplicate(self, project: Path) -> None:
        series = project / "patches" / "series"
        series.write_text(series.read_text() + "0001-fix-a.patch\n")
        code, out, _err = cli(project, "patches", "lint")
        assert code == 1 and "duplicate-entry" in out

    def test_new_export_and_refresh_keep_unchanged_patches_byte_for_byte(
        self, tmp_path: Path, upstream: Path
    ) -> None:
        root = make_project(tmp_path, upstream, NO_CONFLICT[:1])
        # 0001 with a deliberate one-line context, as the real queue's 0001 has
        scratch = tmp_path / "scratch"
        git(scratch, "reset", "-q", "--hard", "v1.0")
        edit(scratch, "python/pkg/a.py", 5, "a line 5 FIXED")
        commit(scratch, "fix-a: patch python/pkg/a.py\n\nUpstream-Status: Pending")
        narrow = git(scratch, "format-patch", "-1", "-U1", "--stdout", "HEAD") + "\n"
        patch = root / "patches" / "0001-fix-a.patch"
        patch.write_text(narrow)
        code, _out, err = cli(root, "patches", "apply")
        assert code == 0, err
        code, out, err = cli(root, "patches", "export")
        assert code == 0 and "0 rewritten" in out, err
        assert patch.read_text() == narrow
        wt = root / "build" / "worktrees" / "v1.0"
        edit(wt, "python/pkg/g.py", 3, "g line 3 NEW")
        code, out, err = cli(root, "patches", "new", "fix-g-3")
        assert code == 0, err
        assert patch.read_text() == narrow
        code, _out, err = cli(root, "patches", "refresh", "--ref", "v1.1")
        assert code == 0, err
        assert patch.read_text() == narrow

    def test_a_new_patch_has_the_users_identity_and_todays_date(self, project: Path) -> None:
        code, _out, err = cli(project, "patches", "apply")
        assert code == 0, err
        edit(project / "build" / "worktrees" / "v1.0", "python/pkg/g.py", 3, "g 3 mine")
        code, out, err = cli(project, "patches", "new", "mine")
        assert code == 0, err
        name = re.search(r"patches/(\S+\.patch)", out).group(1)  # type: ignore[union-attr]
        text = (project / "patches" / name).read_text()
        assert "From: sglforge tests <tests@sglforge.invalid>" in text
        assert "sglforge@localhost" not in text and " 2000 " not in text
        assert time.strftime("%Y") in re.search(r"^Date: (.*)$", text, re.M).group(1)  # type: ignore[union-attr]


# --- 3. reading never writes ----------------------------------------------------------------


PIN_WITH_COMMENTS = """# our pin: keep this comment
url = "{url}"  # where upstream lives
ref = "v1.0"
"""


class TestReadOnly:
    @pytest.mark.parametrize(
        ("args", "codes"),
        [
            (("patches", "list"), (0,)),
            (("patches", "lint"), (0,)),
            (("patches", "hash"), (0,)),
            (("patches", "check"), (0,)),
            (("patches", "check", "--ref", "v1.1"), (0, 1)),
            (("patches", "check", "--ref", "v9.9"), (3,)),
            (("patches", "check", "--upstream", "{mirror}"), (0,)),
            (("patches", "refresh", "--ref", "v1.1", "--dry-run"), (0,)),
            (("patches", "apply"), (0,)),
        ],
    )
    def test_reading_commands_leave_every_project_file_alone(
        self, tmp_path: Path, upstream: Path, args: tuple[str, ...], codes: tuple[int, ...]
    ) -> None:
        root = make_project(tmp_path, upstream, NO_CONFLICT)
        pin = root / "patches" / "upstream.toml"
        pin.write_text(PIN_WITH_COMMENTS.format(url=upstream))
        mirror = tmp_path / "mirror"
        git(tmp_path, "clone", "-q", "--mirror", str(upstream), str(mirror))
        before = tree_digest(root)
        code, _out, err = cli(root, *(a.format(mirror=mirror) for a in args))
        assert code in codes, err
        assert tree_digest(root) == before
        assert "commit" not in pin.read_text() and "sources" not in pin.read_text()

    def test_build_dry_run_writes_no_pin(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from helpers_build import make_build_project

        monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        p = make_build_project(tmp_path)
        before = tree_digest(p.root)
        code, _out, err = cli(p.root, "build", "--upstream", str(p.upstream), "--dry-run")
        assert code == 0, err
        assert tree_digest(p.root) == before

    def test_pin_records_the_commit_and_keeps_comments(self, project: Path, upstream: Path) -> None:
        pin = project / "patches" / "upstream.toml"
        pin.write_text(PIN_WITH_COMMENTS.format(url=upstream))
        code, out, err = cli(project, "patches", "pin")
        assert code == 0, err
        text = pin.read_text()
        sha = git(upstream, "rev-parse", "v1.0^{commit}")
        assert f'commit = "{sha}"' in text
        assert "# our pin: keep this comment" in text and "# where upstream lives" in text

    def test_a_local_path_source_stays_out_of_the_pin(
        self, project: Path, tmp_path: Path, upstream: Path
    ) -> None:
        other = tmp_path / "clone"
        git(tmp_path, "clone", "-q", str(upstream), str(other))
        before = (project / "patches" / "upstream.toml").read_text()
        for args in (
            ("patches", "pin", "--upstream", str(other)),
            ("patches", "refresh", "--ref", "v1.1", "--upstream", str(other)),
        ):
            code, _out, err = cli(project, *args)
            assert code == 0, err
        text = (project / "patches" / "upstream.toml").read_text()
        assert str(other) not in text and "sources" not in text and 'ref = "v1.1"' in text
        assert before.splitlines()[0] == text.splitlines()[0]
        observed = json.loads((project / "build/upstream/observed.json").read_text())
        assert any(v["source"] == str(other) for v in observed.values())

    def test_a_moved_tag_is_still_refused_without_writing_the_pin(
        self, project: Path, upstream: Path
    ) -> None:
        assert cli(project, "patches", "check")[0] == 0
        git(upstream, "checkout", "-q", "v1.0")
        edit(upstream, "python/pkg/a.py", 1, "retagged")
        commit(upstream, "retag")
        git(upstream, "tag", "-f", "v1.0")
        code, _out, err = cli(project, "patches", "check")
        assert code == 3 and "the tag moved" in err


# --- 4. same inputs, same tag ---------------------------------------------------------------


def _hash(root: Path) -> str:
    code, out, err = cli(root, "patches", "hash")
    assert code == 0, err
    return out.strip()


class TestSameHash:
    @pytest.mark.parametrize(
        "args",
        [
            ("patches", "apply"),
            ("patches", "check", "--ref", "v1.1"),
            ("patches", "pin"),
            ("patches", "refresh", "--ref", "v1.1", "--dry-run"),
            ("patches", "export"),
        ],
    )
    def test_the_hash_is_the_same_before_and_after(
        self, project: Path, args: tuple[str, ...]
    ) -> None:
        first = _hash(project)
        if args[1] == "export":
            cli(project, "patches", "apply")
        code, _out, err = cli(project, *args)
        assert code in (0, 1), err
        assert _hash(project) == first

    def test_a_fresh_checkout_elsewhere_has_the_same_hash(
        self, project: Path, tmp_path: Path
    ) -> None:
        cli(project, "patches", "pin")
        copy = tmp_path / "elsewhere" / "project"
        shutil.copytree(project / "patches", copy / "patches")
        (copy / "patches" / "upstream.toml").write_text(
            re.sub(
                r"^commit = .*\n", "", (project / "patches/upstream.toml").read_text(), flags=re.M
            )
        )
        assert _hash(copy) == _hash(project)

    def test_content_changes_change_the_hash_and_comments_do_not(self, project: Path) -> None:
        first = _hash(project)
        series = project / "patches" / "series"
        series.write_text("# another comment\n\n" + series.read_text())
        assert _hash(project) == first
        p = project / "patches" / "0001-fix-a.patch"
        p.write_bytes(p.read_bytes() + b"\n")
        assert _hash(project) != first


# --- 5. errors are errors -------------------------------------------------------------------


class TestErrors:
    @pytest.mark.parametrize(
        "args",
        [("patches", "list"), ("patches", "check"), ("patches", "apply"), ("patches", "hash")],
    )
    def test_a_deleted_series_is_an_error(self, project: Path, args: tuple[str, ...]) -> None:
        (project / "patches" / "series").unlink()
        code, _out, err = cli(project, *args)
        assert code == 2 and "patches/series: missing" in err

    def test_lint_reports_a_deleted_series(self, project: Path) -> None:
        (project / "patches" / "series").unlink()
        code, out, _err = cli(project, "patches", "lint")
        assert code == 1 and "series-missing" in out

    @pytest.mark.parametrize(
        "args", [("patches", "check"), ("patches", "apply"), ("patches", "list")]
    )
    def test_an_invalid_applies_to_is_an_error_everywhere(
        self, project: Path, args: tuple[str, ...]
    ) -> None:
        p = project / "patches" / "0001-fix-a.patch"
        p.write_text(
            p.read_text().replace(
                "Upstream-Status: Pending", "Upstream-Status: Pending\nApplies-To: >>1.0"
            )
        )
        code, _out, err = cli(project, *args)
        assert code == 2 and "0001-fix-a.patch: Applies-To '>>1.0'" in err

    def test_a_depends_on_naming_a_missing_patch_is_a_lint_error(self, project: Path) -> None:
        p = project / "patches" / "0002-fix-b.patch"
        p.write_text(
            p.read_text().replace(
                "Upstream-Status: Pending", "Upstream-Status: Pending\nDepends-On: 0099-gone.patch"
            )
        )
        code, out, _err = cli(project, "patches", "lint")
        assert code == 1 and "unknown-dependency" in out and "0099-gone.patch" in out

    def test_check_tags_matching_nothing_names_the_tags(self, project: Path) -> None:
        code, _out, err = cli(project, "patches", "check", "--tags", ">=7")
        assert code == 2 and "matches no tag" in err and "v1.0, v1.1" in err

    @pytest.mark.parametrize("args", [("patches", "list"), ("patches", "check")])
    def test_a_non_utf8_pin_is_a_configuration_error(
        self, project: Path, args: tuple[str, ...]
    ) -> None:
        pin = project / "patches" / "upstream.toml"
        pin.write_bytes(pin.read_bytes() + b"# caf\xe9\n")
        code, _out, err = cli(project, *args)
        assert code == 2 and "upstream.toml: not UTF-8" in err


# --- 6. faults and concurrency --------------------------------------------------------------


HOLD = """
import sys, time
from pathlib import Path
from sglforge.util import project_lock
with project_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


@contextlib.contextmanager
def _hold_lock(root: Path, seconds: float = 30) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the project's lock for the duration."""
    with subprocess.Popen(
        [sys.executable, "-c", HOLD, str(root), str(seconds)], stdout=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
            yield proc
        finally:
            proc.kill()


class TestFaults:
    @pytest.mark.parametrize(
        "args",
        [
            ("patches", "apply"),
            ("patches", "refresh", "--ref", "v1.1"),
            ("upgrade", "--to", "v1.1", "--no-build"),
        ],
    )
    def test_a_second_writer_is_refused_with_a_clear_message(
        self, project: Path, args: tuple[str, ...]
    ) -> None:
        with _hold_lock(project) as holder:
            before = tree_digest(project)
            code, _out, err = cli(project, *args, env={"SGLFORGE_LOCK_WAIT": "0.3"})
            assert code == 75, err
            assert f"pid {holder.pid}" in err and "index.lock" not in err
            assert tree_digest(project) == before

    def test_two_refreshes_at_once_lose_nothing(self, project: Path) -> None:
        procs = [
            spawn(project, "patches", "refresh", "--ref", "v1.1", "--drop-upstreamed")
            for _ in range(2)
        ]
        results = [p.communicate(timeout=120) for p in procs]
        assert sorted(p.returncode for p in procs) == [0, 0], results
        changelog = (project / "CHANGELOG.md").read_text()
        assert changelog.count("Upstream pin moved from v1.0 to v1.1") == 1
        assert 'ref = "v1.1"' in (project / "patches/upstream.toml").read_text()

    def test_a_shared_upstream_cache_serves_two_projects(
        self, tmp_path: Path, upstream: Path
    ) -> None:
        # every project uses the mirror in the user cache ($SGLFORGE_CACHE)
        a = make_project(tmp_path / "a", upstream, NO_CONFLICT)
        b = make_project(tmp_path / "b", upstream, NO_CONFLICT)
        for root in (a, b, a):
            code, _out, err = cli(root, "patches", "apply")
            assert code == 0, err

    def test_a_copied_cache_serves_a_second_project(self, tmp_path: Path, upstream: Path) -> None:
        a = make_project(tmp_path / "a", upstream, NO_CONFLICT)
        b = make_project(tmp_path / "b", upstream, NO_CONFLICT)
        assert cli(a, "patches", "apply")[0] == 0
        shutil.copytree(a / "build", b / "build", symlinks=True)
        code, _out, err = cli(b, "patches", "apply", "--force")
        assert code == 0, err
        assert cli(a, "patches", "apply")[0] == 0

    def test_a_deleted_cache_is_rebuilt(self, project: Path) -> None:
        assert cli(project, "patches", "check")[0] == 0
        shutil.rmtree(upstream_mirrors())
        assert cli(project, "patches", "check")[0] == 0
        assert cli(project, "patches", "apply")[0] == 0
        shutil.rmtree(upstream_mirrors())
        code, _out, err = cli(project, "patches", "apply")
        assert code == 4 and "no longer exists" in err and "not a git repository" not in err
        code, _out, err = cli(project, "patches", "apply", "--force")
        assert code == 0, err

    @pytest.mark.parametrize(("sig", "rc"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
    def test_a_signal_while_waiting_cleans_up_and_exits_like_ctrl_c(
        self, project: Path, sig: signal.Signals, rc: int
    ) -> None:
        with _hold_lock(project):
            proc = spawn(project, "patches", "apply", env={"SGLFORGE_LOCK_WAIT": "60"})
            time.sleep(2.0)
            proc.send_signal(sig)
            _out, err = proc.communicate(timeout=30)
        assert proc.returncode == rc, err
        assert "Traceback" not in err and "interrupted" in err
        assert not list((project / "build").glob("tmp/index-*"))

    @pytest.mark.parametrize("delay", [0.05, 0.15, 0.25])
    def test_ctrl_c_while_starting_prints_no_traceback(self, project: Path, delay: float) -> None:
        proc = spawn(project, "patches", "list")
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
        if "Traceback" in err and "sglforge" not in err.split("Traceback", 1)[-1]:
            # The signal landed before any code of ours could run: while CPython imported
            # `site` or runpy looked for the module (the faster start-up makes that window a
            # larger share of 0.05 s). CPython's own report, naming no sglforge frame; from
            # sglforge's first statement on (__main__.py), a signal ends it quietly.
            return
        assert "Traceback" not in err, err
        # 130: our handler; -SIGINT: the signal came before Python itself was up (a loaded
        # machine), which the shell also reports as 130; 0: the command was already done
        assert proc.returncode in (0, 130, -signal.SIGINT), err

    def test_leftover_private_indexes_of_a_dead_run_are_swept(self, project: Path) -> None:
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        tmp = project / "build" / "tmp"
        tmp.mkdir(parents=True)
        (tmp / f"index-{dead.pid}-abc.tmp").write_text("x")
        assert cli(project, "patches", "check")[0] == 0
        assert not list(tmp.glob("index-*"))

    def test_an_upstream_that_never_answers_times_out_saying_what_it_waited_for(
        self, project: Path
    ) -> None:
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(5)
        port = server.getsockname()[1]
        accepted: list[socket.socket] = []
        t = threading.Thread(target=lambda: accepted.append(server.accept()[0]), daemon=True)
        t.start()
        try:
            started = time.monotonic()
            code, _out, err = cli(
                project,
                "patches",
                "check",
                "--upstream",
                f"http://127.0.0.1:{port}/sglang.git",
                env={"SGLFORGE_GIT_TIMEOUT": "2"},
            )
            assert code == 3, err
            assert "within 2 s while fetching" in err
            assert time.monotonic() - started < 30
        finally:
            for s in accepted:
                s.close()
            server.close()

    def test_an_unreachable_package_index_is_reported_as_unreachable(self, project: Path) -> None:
        env = {
            "PIP_CONFIG_FILE": os.devnull,
            "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
            "PIP_EXTRA_INDEX_URL": "",
            "PIP_FIND_LINKS": "",
            "PIP_NO_INDEX": "",
        }
        code, _out, err = cli(project, "patches", "check", "--upstream", "pypi:sglang", env=env)
        assert code == 3, err
        assert "unreachable" in err and "no release found" not in err

    def test_an_upstream_folder_that_is_not_a_repository_says_so(
        self, project: Path, tmp_path: Path
    ) -> None:
        folder = tmp_path / "some-folder"
        folder.mkdir()
        (folder / "README").write_text("not git\n")
        code, _out, err = cli(project, "patches", "check", "--upstream", str(folder))
        assert code == 3 and "is not a git repository" in err


# --- 7. apply messages ----------------------------------------------------------------------


class TestApplyMessages:
    @pytest.mark.parametrize("crlf", [True, False])
    def test_check_and_apply_give_one_verdict(
        self, tmp_path: Path, upstream: Path, crlf: bool
    ) -> None:
        root = make_project(tmp_path, upstream, NO_CONFLICT[:1])
        p = root / "patches" / "0001-fix-a.patch"
        if crlf:
            p.write_bytes(p.read_bytes().replace(b"\n", b"\r\n"))
        code_check, out, err = cli(root, "patches", "check")
        code_apply, _o, err_apply = cli(root, "patches", "apply")
        assert (code_check == 0) == (code_apply == 0) == (not crlf), (out, err, err_apply)
        if crlf:
            assert "CRLF" in out and "0001-fix-a.patch" in err_apply

    def test_a_conflict_names_patch_and_hunk_and_suggests_am_continue(
        self, tmp_path: Path, upstream: Path
    ) -> None:
        root = make_project(tmp_path, upstream, PATCHES[:4])
        code, _out, err = cli(root, "patches", "apply", "--ref", "v1.1")
        assert code == 4
        assert "0004-fix-d.patch" in err and "python/pkg/d.py hunk 1" in err
        assert "am --continue" in err

    def test_a_failure_without_conflict_shows_gits_reason_and_no_am_continue(
        self, tmp_path: Path, upstream: Path
    ) -> None:
        root = make_project(tmp_path, upstream, NO_CONFLICT[:1])
        p = root / "patches" / "0001-fix-a.patch"
        text = p.read_text()
        text = re.sub(r"^index \S+", "index 1234567..89abcde", text, flags=re.M)
        p.write_text(text.replace(" a line 4", " a line 4 not upstream"))
        code, _out, err = cli(root, "patches", "apply")
        assert code == 4, err
        assert "0001-fix-a.patch" in err and "git am:" in err
        assert "am --continue" not in err
        wt = root / "build" / "worktrees" / "v1.0"
        rebase = git(wt, "rev-parse", "--git-path", "rebase-apply")
        assert not (wt / rebase).exists()
