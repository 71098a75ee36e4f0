"""A work tree (``git am`` sessions, changes, commits) and the worktrees of a shared
repository."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from sglforge.git._process import GitResult, _run


def am(wt: Path, patches: Sequence[Path] = (), text: str | None = None) -> GitResult:
    """``git am --3way`` of ``patches`` (files, in order) or of one patch's ``text``: one
    commit each. On a conflict git stops with markers in the worktree; the result says so."""
    args = ["am", "--3way", "--keep-cr", "--quiet", *(str(p) for p in patches)]
    return _run(wt, *args, stdin=text, check=False)


def am_in_progress(wt: Path) -> bool:
    """Whether a ``git am`` session is stopped in ``wt`` (waiting for --continue or --abort)."""
    return _rebase_apply(wt).exists()


def am_abort(wt: Path) -> None:
    """End a stopped ``git am`` session, returning to where it started; no session left."""
    _run(wt, "am", "--abort", check=False)
    shutil.rmtree(_rebase_apply(wt), ignore_errors=True)


def am_quit(wt: Path) -> None:
    """End a stopped ``git am`` session keeping the commits it made, and drop whatever the
    stopped patch left in the work tree (its conflict, its new files)."""
    _run(wt, "am", "--quit", check=False)
    _run(wt, "reset", "-q", "--hard", "HEAD", check=False)
    _run(wt, "clean", "-fdq", check=False)


def _rebase_apply(wt: Path) -> Path:
    where = Path(_run(wt, "rev-parse", "--git-path", "rebase-apply").stdout)
    return where if where.is_absolute() else wt / where


def uncommitted(wt: Path | str, *paths: str) -> list[str]:
    """The files with uncommitted changes, untracked ones included (under ``paths`` only, when
    given), as ``git status`` names them. Read-only: git takes no optional lock and writes no
    refreshed index (the worktree's records may be another project's)."""
    listing = _run(
        wt, "--no-optional-locks", "status", "--porcelain", "--untracked-files=normal", "--", *paths
    ).stdout
    return [line[3:] for line in listing.splitlines() if line]


def untracked(wt: Path) -> list[str]:
    """The untracked files and folders of ``wt`` (a folder once, ending in ``/``)."""
    listing = _run(
        wt, "status", "--porcelain", "-z", "--untracked-files=normal", check=False, strip=False
    ).stdout
    return [e[3:] for e in listing.split("\0") if e.startswith("?? ")]


def unmerged(wt: Path) -> list[str]:
    """The files a stopped merge or ``git am`` left in conflict."""
    res = _run(wt, "diff", "--name-only", "-z", "--diff-filter=U", check=False, strip=False)
    return [f for f in res.stdout.split("\0") if f]


def staged_gitlinks(wt: Path) -> list[str]:
    """Staged submodule entries (mode 160000): what a patch cannot carry."""
    res = _run(wt, "diff", "--cached", "--raw", "-z", "--no-renames", check=False, strip=False)
    fields = res.stdout.split("\0")
    return [fields[i + 1] for i in range(0, len(fields) - 1, 2) if " 160000 " in fields[i]]


def user_identity(cwd: Path) -> GitResult:
    """The user's own ``GIT_AUTHOR_IDENT`` (``Name <email> 1700000000 +0100``), never
    sglforge's fixed one; a result whose status and stderr say when git knows none."""
    return _run(cwd, "var", "GIT_AUTHOR_IDENT", identity=False, check=False)


def commit_all(
    wt: Path | str,
    message: str,
    paths: Sequence[str] = (),
    author: tuple[str, str, str] | None = None,
    own_identity: bool = False,
) -> bool:
    """Stage every change (under ``paths``, when given) and commit it; False, and no commit,
    when nothing differs from HEAD. ``author`` is (name, email, date); ``own_identity``
    commits as the user's git config says, not as sglforge. GitFailed when git refuses."""
    identity = not own_identity
    _run(wt, "add", "-A", *(["--", *paths] if paths else []), identity=identity)
    if _run(wt, "diff", "--cached", "--quiet", check=False).status == 0:
        return False
    env = {}
    if author:
        env = {"GIT_AUTHOR_NAME": author[0], "GIT_AUTHOR_EMAIL": author[1]}
        env["GIT_AUTHOR_DATE"] = author[2]
    _run(wt, "commit", "-q", "-m", message, env=env, identity=identity)
    return True


def snapshot_folder(folder: Path | str, message: str, tag: str, who: dict[str, str]) -> None:
    """A new repository in ``folder`` holding its files as one commit on ``main``, tagged
    ``tag``; ``who`` is the author and committer (names, emails, dates) so that the same
    files always give the same commit (a release image's checkout, rebuilt by a replica)."""
    env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, **who}
    _run(folder, "init", "-q", "-b", "main", env=env)
    _run(folder, "add", "-A", env=env)
    _run(folder, "commit", "-q", "-m", message, env=env)
    _run(folder, "tag", tag, env=env)


def amend_all(wt: Path | str, exclude: Sequence[str] = ()) -> bool:
    """Stage every change of ``wt`` (staged, unstaged, untracked; not the untracked paths
    matching an ``exclude`` glob) into its HEAD commit, its author and message kept; False,
    and HEAD untouched, when nothing differs from HEAD."""
    _run(wt, "add", "-A", "--", ".", *(f":(exclude,glob){g}" for g in exclude))
    if _run(wt, "diff", "--cached", "--quiet", check=False).status == 0:
        return False
    _run(wt, "commit", "-q", "--amend", "--no-edit", "--allow-empty")
    return True


def move_branch(wt: Path | str, commit: str) -> None:
    """The worktree's branch and files put back at ``commit`` (an ancestor of HEAD, a clean
    work tree: what ``patches pop`` takes off is in patch files already)."""
    _run(wt, "reset", "-q", "--keep", commit)


# Files are written by one worker per core (git's parallel checkout, git >= 2.32; an older git
# ignores it): writing sglang's 3,200 files is most of a first apply, and mostly the kernel's
# time, which a second core halves on a busy disk.
def _parallel_checkout() -> dict[str, str]:
    """``checkout.workers=0`` as a config entry after any the environment already gives
    (``GIT_CONFIG_COUNT``/``_KEY_n``/``_VALUE_n``, which git reads like ``-c``)."""
    raw = os.environ.get("GIT_CONFIG_COUNT", "")
    n = int(raw) if raw.isdigit() else 0
    return {
        "GIT_CONFIG_COUNT": str(n + 1),
        f"GIT_CONFIG_KEY_{n}": "checkout.workers",
        f"GIT_CONFIG_VALUE_{n}": "0",
    }


def add_worktree(
    repo: Path, path: Path, commit: str, branch: str | None = None, checkout: bool = True
) -> None:
    """A worktree of ``repo`` at ``path`` checked out at ``commit``: on ``branch`` (made or
    moved there), or detached when None. ``checkout=False`` writes no file and no index (for
    ``am_then_checkout``)."""
    at = ["-B", branch] if branch else ["--detach"]
    files = [] if checkout else ["--no-checkout"]
    _run(
        repo, "worktree", "add", "--force", *files, *at, str(path), commit, env=_parallel_checkout()
    )


def am_then_checkout(
    wt: Path, commit: str, patches: Sequence[Path], paths: Sequence[str]
) -> GitResult:
    """In a worktree added without its files (``add_worktree(..., checkout=False)``, at
    ``commit``): ``patches`` committed by ``git am --3way``, then every file written, once,
    at the last commit. ``paths`` are the files the patches name (either side of a diff).

    ``git am`` runs while only ``paths`` are in the worktree and the index holds ``commit``'s
    tree (as ``git am`` reads it: it applies to the index and to the files it changes, and
    commits the index). Checking out first and running ``git am`` after writes sglang's
    3,200 files and then reads them all again (git's racy-timestamp check hashes each file
    written in the same second as the index). A failed ``git am`` leaves nothing: the
    worktree is at ``commit`` with every file written and no session, and the result says
    why."""
    _run(wt, "read-tree", commit)
    literal = {"GIT_LITERAL_PATHSPECS": "1"}
    # the files a patch names that the tree has (a new file's name is in no tree yet)
    held = (
        _run(wt, "ls-files", "-z", "--", *paths, env=literal, strip=False).stdout if paths else ""
    )
    if held:
        _run(wt, "checkout-index", "-u", "-f", "-z", "--stdin", stdin=held)
    res = am(wt, patches)
    if res.status != 0:
        am_abort(wt)
    _run(
        wt, "reset", "-q", "--hard", "HEAD" if res.status == 0 else commit, env=_parallel_checkout()
    )
    return res


def reset_worktree(wt: Path, branch: str, commit: str) -> None:
    """An existing worktree put back on ``branch`` at ``commit``, with no other file in it."""
    _run(wt, "checkout", "--force", "-B", branch, commit, env=_parallel_checkout())
    _run(wt, "clean", "-fdq")


def remove_worktree(repo: Path, path: Path) -> None:
    """The worktree at ``path`` removed from ``repo`` (its folder too), whatever it holds."""
    _run(repo, "worktree", "remove", "--force", str(path), check=False)
    shutil.rmtree(path, ignore_errors=True)
    prune_worktrees(repo)


def prune_worktrees(repo: Path) -> None:
    """Forget the worktrees of ``repo`` whose folders are gone."""
    _run(repo, "worktree", "prune", check=False)


def worktree_branches(repo: Path) -> dict[str, Path]:
    """{branch ref: worktree folder} of the worktrees of ``repo`` that are on a branch."""
    listing = _run(repo, "worktree", "list", "--porcelain", check=False).stdout
    held: dict[str, Path] = {}
    for block in listing.split("\n\n"):
        fields = dict(line.partition(" ")[::2] for line in block.splitlines() if line)
        if fields.get("branch") and fields.get("worktree"):
            held[fields["branch"]] = Path(fields["worktree"])
    return held


def common_dir(wt: Path) -> Path | None:
    """The repository a worktree belongs to (its common git folder); None when unknown."""
    res = _run(wt, "rev-parse", "--path-format=absolute", "--git-common-dir", check=False)
    return Path(res.stdout) if res.status == 0 and res.stdout else None


def worktree_home(wt: Path) -> tuple[Path, Path] | None:
    """(the worktree folder git's records of ``wt`` name, those records) when they name
    another folder than ``wt``: the project was copied or moved with its ``build/`` (a
    worktree's ``.git`` file holds an absolute path, and its records point back at the folder
    they were made for). None when ``wt`` is not a linked worktree, or its records are its own.
    """
    dotgit = wt / ".git"
    try:
        if not dotgit.is_file():
            return None
        first = dotgit.read_text(errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return None
    if not first.startswith("gitdir:"):
        return None
    admin = Path(first[len("gitdir:") :].strip())
    admin = admin if admin.is_absolute() else wt / admin
    try:
        back = Path((admin / "gitdir").read_text(errors="replace").strip())
    except OSError:
        return None
    back = back if back.is_absolute() else admin / back
    if os.path.realpath(back.parent) == os.path.realpath(wt):
        return None
    return back.parent, admin


def repair_worktree(wt: Path) -> None:
    """Point git's records of the linked worktree ``wt`` back at it (``git worktree repair``,
    run in the worktree: for a worktree whose folder was moved)."""
    _run(wt, "worktree", "repair", identity=False)
