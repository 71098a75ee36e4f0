"""Help for oneself: `sglforge doctor` (read-only), `sglforge cache info|prune`, `sglforge
patches prune`, and a `--version` worth pasting into a bug report."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from sglforge.cli import main
from sglforge.doctor import check_gpus, parse_amd_smi, parse_rocminfo
from synthetic import edit, make_project, make_upstream

NAMES = {
    "python",
    "git",
    "engine",
    "buildx",
    "registry login",
    "devices",
    "gpus",
    "cache",
}


def cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, list(args), env=env)
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stdout, res.stderr


def tree(path: Path) -> dict[str, float]:
    return {str(p): p.lstat().st_mtime for p in path.rglob("*")} if path.exists() else {}


def test_doctor_reports_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sglforge_cache: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    before = (tree(tmp_path), tree(sglforge_cache))
    code, out, err = cli("doctor", "--json")
    doc = json.loads(out)
    names = {c["name"] for c in doc["checks"]}
    assert NAMES <= names, names
    assert doc["ok"] is all(c["status"] != "fail" for c in doc["checks"])
    assert code == (0 if doc["ok"] else 1)
    assert (tree(tmp_path), tree(sglforge_cache)) == before
    # no engine: the engine check fails, says how to get one, and doctor exits 1 (its own
    # process: a failed connection leaves a socket to the garbage collector)
    import sys

    res = subprocess.run(
        [sys.executable, "-m", "sglforge", "doctor"],
        capture_output=True,
        text=True,
        env={**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"},
    )
    assert res.returncode == 1, res.stdout + res.stderr
    assert "FAIL" in res.stdout and "next (engine):" in res.stdout


def rocminfo_line(label: str, value: str, indent: int) -> str:
    """A line as rocminfo prints it: printLabelStr's "%s%-*s%-*s\\n" with kLabelFieldSize
    25, kValueFieldSize 35 and 2 spaces per indent level (ROCm/rocminfo rocminfo.cc at
    026828a8, printLabelStr and DisplayAgentInfo: agents at level 1, ISA names deeper)."""
    return f"{' ' * 2 * indent}{label:<25}{value:<35}"


def test_gpus_from_rocminfo_and_amd_smi() -> None:
    lines = ["*******", "Agent 1", "*******"]
    lines.append(rocminfo_line("Name:", "AMD EPYC 9575F 64-Core Processor", 1))
    lines.append(rocminfo_line("Device Type:", "CPU", 1))
    for n in range(8):
        lines += ["*******", f"Agent {n + 2}", "*******"]
        lines.append(rocminfo_line("Name:", "gfx950", 1))
        lines.append(rocminfo_line("Marketing Name:", "AMD Instinct MI355X", 1))
        lines.append(rocminfo_line("Name:", "amdgcn-amd-amdhsa--gfx950:sramecc+:xnack-", 2))
    text = "\n".join(lines) + "\n"
    assert parse_rocminfo(text) == ["gfx950"] * 8

    def rocminfo(*cmd: str) -> tuple[int, str]:
        return (0, text) if cmd[0] == "rocminfo" else (127, "")

    check = check_gpus(rocminfo)
    assert check.status == "ok" and check.detail == "8 x gfx950 (rocminfo)"
    # amd-smi static --asic --json: asic.target_graphics_version (amd-smi's own key)
    smi = json.dumps(
        [{"gpu": i, "asic": {"target_graphics_version": "gfx942"}} for i in range(2)]
        + [{"gpu": 2, "asic": {"target_graphics_version": "gfx942:sramecc+:xnack-"}}]
    )
    assert parse_amd_smi(smi) == ["gfx942"] * 3

    def only_smi(*cmd: str) -> tuple[int, str]:
        return (127, "") if cmd[0] == "rocminfo" else (0, smi)

    assert check_gpus(only_smi).detail == "3 x gfx942 (amd-smi)"
    nothing = check_gpus(lambda *cmd: (127, ""))
    assert nothing.status == "info" and "no ROCm here" in nothing.detail


def bare(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    return path


def age(path: Path, days: float) -> None:
    when = time.time() - days * 86400
    for p in [path, *path.rglob("*")]:
        os.utime(p, (when, when), follow_symlinks=False)


def test_cache_info_and_prune(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("SGLFORGE_CACHE", str(cache))
    (cache / "upstream").mkdir(parents=True)
    project = cache / "pypi" / "pypi-demo"
    project.mkdir(parents=True)
    old_history = bare(project / "history-f1-old.git")
    new_history = bare(project / "releases-f2.git")
    wheels = project / "wheels"
    wheels.mkdir()
    (wheels / "demo-1.0-py3-none-any.whl").write_bytes(b"w" * 4096)
    borrower = bare(cache / "upstream" / "borrows-old.git")
    (borrower / "objects" / "info" / "alternates").write_text(f"{old_history}/objects\n")
    stale = bare(cache / "upstream" / "stale.git")
    fresh = bare(cache / "upstream" / "fresh.git")
    shared = tmp_path / "someone-elses"
    bare(shared / "keep.git")
    (cache / "pypi" / "pypi-shared").symlink_to(shared, target_is_directory=True)
    for p in (old_history, wheels, stale):
        age(p, 60)
    age(shared, 60)

    code, out, err = cli("cache", "info", "--json")
    listed = {Path(e["path"]).name for e in json.loads(out)["entries"]}
    assert code == 0 and listed == {
        "history-f1-old.git",
        "releases-f2.git",
        "wheels",
        "borrows-old.git",
        "stale.git",
        "fresh.git",
    }
    # dry run: nothing goes
    code, out, err = cli("cache", "prune", "--older-than", "30", "--dry-run")
    assert code == 0 and "would remove" in out and old_history.is_dir() and stale.is_dir()
    code, out, err = cli("cache", "prune", "--older-than", "30", "--json")
    gone = {Path(e["path"]).name for e in json.loads(out)["removed"]}
    # the old history, the stale mirror, and the mirror borrowing the history's objects
    assert gone == {"history-f1-old.git", "stale.git", "borrows-old.git"}
    assert not old_history.exists() and not stale.exists() and not borrower.exists()
    assert fresh.is_dir() and new_history.is_dir() and wheels.is_dir()
    assert (shared / "keep.git").is_dir()  # a symlinked folder is never followed
    code, out, err = cli("cache", "prune", "--older-than", "30", "--wheels")
    assert not wheels.exists() and "1 entry" in out


def test_cache_info_text_tells_entries_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """N15: a mirror is named by the upstream it mirrors (credentials never shown, one of the
    cache's own histories by its place in the cache), wheels and histories by project."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("SGLFORGE_CACHE", str(cache))
    for name in ("pypi-sglang", "pypi-amd-aiter"):
        (cache / "pypi" / name / "wheels").mkdir(parents=True)
        (cache / "pypi" / name / "wheels" / "x.whl").write_bytes(b"w" * 2048)
    history = bare(cache / "pypi" / "pypi-sglang" / "releases-f2.git")
    remotes = {
        "a.git": "https://bob:s3cret-pw@git.example/sgl/sglang.git",
        "b.git": str(history),
        "c.git": "/srv/clones/sglang",
    }
    for name, url in remotes.items():
        repo = bare(cache / "upstream" / name)
        subprocess.run(["git", "-C", str(repo), "remote", "add", "origin", url], check=True)
    bare(cache / "upstream" / "no-remote.git")
    code, out, err = cli("cache", "info")
    assert code == 0, err
    named = [line.split()[-1] for line in out.splitlines()[3:]]
    assert sorted(named) == sorted(
        [
            "pypi-sglang/wheels",
            "pypi-amd-aiter/wheels",
            "pypi-sglang/releases-f2.git",
            "https://***@git.example/sgl/sglang.git",
            "pypi/pypi-sglang/releases-f2.git",
            "/srv/clones/sglang",
            "no-remote.git",
        ]
    ), out
    assert "s3cret" not in out and " of" in out.splitlines()[1]


def test_patches_prune_keeps_unsaved_work(tmp_path: Path) -> None:
    root = make_project(
        tmp_path, make_upstream(tmp_path), [("fix-a", "python/pkg/a.py", 5, "A", "")]
    )
    for ref in ("v1.0", "v1.1"):
        assert cli("--root", str(root), "patches", "apply", "--ref", ref)[0] == 0
    wt = root / "build" / "worktrees"
    edit(wt / "v1.1", "python/pkg/b.py", 3, "unsaved")
    code, out, err = cli("--root", str(root), "patches", "prune")
    assert code == 0 and "kept" in out and "uncommitted changes" in out
    assert (wt / "v1.1").is_dir() and (wt / "v1.0").is_dir()
    subprocess.run(["git", "-C", str(wt / "v1.1"), "checkout", "-q", "--", "."], check=True)
    code, out, err = cli("--root", str(root), "patches", "prune", "--dry-run")
    assert "would remove" in out and (wt / "v1.1").is_dir()
    code, out, err = cli("--root", str(root), "patches", "prune", "--json")
    doc = json.loads(out)
    assert [(w["ref"], w["removed"]) for w in doc["worktrees"]] == [("v1.0", False), ("v1.1", True)]
    assert not (wt / "v1.1").exists() and (wt / "v1.0").is_dir()
    # the ref applies again afterwards (its branch and worktree entry went cleanly)
    assert cli("--root", str(root), "patches", "apply", "--ref", "v1.1")[0] == 0


def test_version_is_worth_pasting() -> None:
    code, out, err = cli("--version")
    assert code == 0 and out.startswith("sglforge, version ")
    for key in ("sglang pin: v", "python: ", "docker SDK: ", "engine: "):
        assert key in out, out
