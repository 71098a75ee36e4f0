"""Repositories, refs and commits: names resolved, tags, ancestry, blobs and archives."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from sglforge.errors import ConfigError, UpstreamError
from sglforge.git._process import GitFailed, GitResult, _not_found, _repo, _run
from sglforge.util import encode_exact


def version() -> str | None:
    """The installed git's version (``2.39.5``); None when git cannot be run."""
    try:
        res = _run(Path(os.sep), "version", check=False, identity=False)
    except (ConfigError, OSError):
        return None
    if res.status != 0:
        return None
    return res.stdout.removeprefix("git version ").strip()


def is_repository(path: Path | str) -> bool:
    """Whether ``path`` is inside a usable git repository (a worktree whose repository was
    deleted is not)."""
    if not Path(path).is_dir():
        return False
    return _run(path, "rev-parse", "--git-dir", check=False, identity=False).status == 0


def in_work_tree(path: Path | str) -> bool:
    """Whether ``path`` is inside a git work tree (not a bare repository, not outside git)."""
    res = _run(path, "rev-parse", "--is-inside-work-tree", check=False, identity=False)
    return res.status == 0 and res.stdout.strip() == "true"


def init(path: Path, bare: bool = False, head: str | None = None) -> None:
    """A new repository at ``path`` (``git init``); ``head`` names the branch HEAD points at."""
    path.mkdir(parents=True, exist_ok=True)
    branch = head.removeprefix("refs/heads/") if head else ""
    first = [f"--initial-branch={branch}"] if head and branch != head else []
    _run(path, "init", "-q", *(["--bare"] if bare else []), *first, identity=False)
    if head and not first:
        _run(path, "symbolic-ref", "HEAD", head)


def current_branch(path: Path | str) -> str:
    """The branch HEAD is on (``main``), even before its first commit; '' when detached."""
    res = _run(path, "symbolic-ref", "--short", "-q", "HEAD", check=False, identity=False)
    return res.stdout.strip() if res.status == 0 else ""


def head(path: Path | str) -> str:
    """The commit HEAD names; GitFailed when there is none yet."""
    return commit_id(path, "HEAD")


def has_head(path: Path | str) -> bool:
    """Whether HEAD names a commit (false in a repository with no commit yet)."""
    return _run(path, "rev-parse", "--verify", "-q", "HEAD", check=False).status == 0


def _peeled(repo: Path | str, rev: str, kind: str) -> str | None:
    """The id of the ``kind`` (``commit``, ``tree``) ``rev`` names, peeled through tags; None
    when it names none. One ``git rev-parse`` (GitPython's object reader starts two
    ``cat-file`` helpers for the same answer)."""
    res = _run(
        repo, "rev-parse", "--verify", "-q", "--end-of-options", f"{rev}^{{{kind}}}", check=False
    )
    return res.stdout.strip() if res.status == 0 and res.stdout.strip() else None


def _peeled_or_refused(repo: Path | str, rev: str, kind: str) -> str:
    found = _peeled(repo, rev, kind)
    if found is None:
        said = GitResult(128, "", f"fatal: {rev!r} names no {kind}")
        raise GitFailed(("rev-parse", rev), said, repo)
    return found


def commit_id(repo: Path | str, rev: str) -> str:
    """The full SHA of the commit ``rev`` names; GitFailed naming ``rev`` when it names none."""
    return _peeled_or_refused(repo, rev, "commit")


def tree(repo: Path | str, rev: str) -> str:
    """The SHA of the tree of the commit (or tag) ``rev``; GitFailed naming ``rev`` else."""
    return _peeled_or_refused(repo, rev, "tree")


def has_tree(repo: Path | str, rev: str) -> bool:
    """Whether ``rev`` (a tag, a branch, a SHA) names a commit or tree held in ``repo``."""
    return (
        _run(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{tree}}", check=False).status == 0
    )


def branch_exists(repo: Path | str, branch: str) -> bool:
    return (
        _run(repo, "rev-parse", "--verify", "-q", f"refs/heads/{branch}", check=False).status == 0
    )


def valid_branch_name(repo: Path | str, name: str) -> bool:
    """Whether git accepts ``name`` as a new branch's name."""
    return _run(repo, "check-ref-format", "--branch", name, check=False).status == 0


def checkout(repo: Path | str, rev: str = "HEAD", new_branch: str | None = None) -> None:
    """Switch the user's work tree to ``rev`` (with ``new_branch``: to a new branch made at
    ``rev``); the work tree's uncommitted changes come along, as with ``git checkout``."""
    _run(repo, "checkout", "-q", *(["-b", new_branch] if new_branch else []), rev, identity=False)


def delete_branch(repo: Path | str, branch: str) -> None:
    _run(repo, "branch", "-D", branch, check=False)


def set_ref(repo: Path | str, name: str, rev: str) -> None:
    """Point the ref ``name`` at the commit ``rev`` names."""
    _run(repo, "update-ref", name, f"{rev}^{{commit}}")


def resolve(repo: Path, ref: str) -> str:
    """The full commit SHA ``ref`` names in ``repo`` (a tag first, then an upstream branch,
    then any name git knows); UpstreamError naming ``ref`` when none."""
    for cand in (f"refs/tags/{ref}", f"refs/remotes/origin/{ref}", ref):
        found = _peeled(repo, cand, "commit")
        if found is not None:
            return found
    raise UpstreamError(
        f"ref {ref!r} not found in upstream {repo}",
        "run `sglforge upstream tags` to list known tags, or fetch with the right --upstream",
    )


def resolve_fixed(repo: Path, ref: str) -> str | None:
    """The commit ``ref`` names in ``repo`` when it is a name that does not move: a tag, or a
    full commit id; None otherwise (a branch moves upstream: it is fetched before use)."""
    if re.fullmatch(r"[0-9a-f]{40}", ref):
        return _peeled(repo, ref, "commit")
    return _peeled(repo, f"refs/tags/{ref}", "commit")


def resolve_many(repo: Path, refs: list[str]) -> dict[str, str]:
    """Commit SHAs of many tags and upstream branches in one call (others via ``resolve``).

    With no ``refs``, every tag and upstream branch the repository knows.
    """
    listing = _run(
        repo,
        "for-each-ref",
        "--format=%(refname)%09%(objectname)%09%(*objectname)",
        "refs/tags",
        "refs/remotes/origin",
    ).stdout
    known: dict[str, str] = {}
    for line in listing.splitlines():
        name, obj, peeled = (line.split("\t") + ["", ""])[:3]
        short = name.removeprefix("refs/tags/").removeprefix("refs/remotes/origin/")
        if name.startswith("refs/tags/") or short not in known:
            known[short] = peeled or obj
    if not refs:
        return known
    return {ref: known.get(ref) or resolve(repo, ref) for ref in refs}


def tags(repo: Path) -> list[str]:
    """Every tag name of ``repo``, sorted as ``git tag --list`` sorts them."""
    with _repo(repo) as r:
        return sorted((str(t.name) for t in r.tags), key=encode_exact)


def tags_containing(repo: Path, commit: str) -> list[str]:
    """The tags whose history holds ``commit`` (the releases that shipped it)."""
    return _run(repo, "tag", "--contains", commit).stdout.split()


def is_ancestor(repo: Path | str, a: str, b: str) -> bool:
    """Whether commit ``a`` is in the history of ``b`` (false for a name git does not know)."""
    with _repo(repo) as r:
        try:
            return r.is_ancestor(r.commit(a), r.commit(b))
        except _not_found():
            return False


def merge_base(repo: Path, a: str, b: str) -> str | None:
    """The best common ancestor of two commits; None for unrelated histories."""
    found = _run(repo, "merge-base", a, b, check=False).stdout
    return found or None


def commits_between(repo: Path | str, base: str, tip: str = "HEAD") -> list[str]:
    """The commits in ``base..tip``, oldest first."""
    return _run(repo, "rev-list", "--reverse", f"{base}..{tip}").stdout.split()


def subject(repo: Path | str, commit: str) -> str:
    """The subject line of ``commit``'s message, as ``git log --format=%s`` shows it."""
    return _run(repo, "log", "-1", "--format=%s", commit).stdout


def blob(repo: Path, commit: str, path: str) -> bytes | None:
    """The exact bytes of ``path`` at ``commit`` in ``repo`` (a bare or working clone), or None
    when the commit or the path is not there."""
    with _repo(repo) as r:
        try:
            obj = r.commit(commit).tree[path]
        except _not_found():
            return None
        if obj.type != "blob":
            return None
        return bytes(obj.data_stream.read())


def blob_id(data: bytes) -> str:
    """git's object id of a blob with these bytes (what ``git hash-object`` prints)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def blob_ids(repo: Path) -> set[str]:
    """The ids of every blob the repository holds (packed or loose)."""
    if _holds_no_object(Path(repo)):
        return set()  # a repository just made: no git process to ask
    res = _run(
        repo,
        "cat-file",
        "--batch-all-objects",
        "--batch-check=%(objectname) %(objecttype)",
        check=False,
    )
    return {line.split()[0] for line in res.stdout.splitlines() if line.endswith(" blob")}


def _holds_no_object(repo: Path) -> bool:
    """Whether a bare repository has no pack, no loose object and borrows none (alternates)."""
    objects = repo / "objects"
    try:
        names = os.listdir(objects)
        packs = os.listdir(objects / "pack") if "pack" in names else []
    except OSError:
        return False
    loose = [n for n in names if len(n) == 2]
    info = objects / "info"
    borrowed = (info / "alternates").exists() or (info / "http-alternates").exists()
    return not loose and not [n for n in packs if n.endswith(".pack")] and not borrowed


def fsck(repo: Path) -> str:
    """'' for a repository whose objects are sound, else git fsck's first complaint."""
    res = _run(repo, "fsck", "--no-dangling", "--no-progress", check=False)
    if res.status == 0:
        return ""
    lines = (res.stderr or res.stdout).strip().splitlines()
    return lines[0] if lines else "git fsck failed"


def export_files(repo: Path, commit: str, path: str, dest: Path, index: Path) -> None:
    """The files of ``path`` (a folder) at ``commit`` written by git into ``dest``
    (``dest/path/...``), through the private index file ``index`` (removed after): no HEAD,
    ref or index of ``repo`` changes."""
    try:
        _run(
            repo,
            # every file of the path, whatever sparse checkout a local repository is set to
            "-c",
            "core.sparseCheckout=false",
            f"--work-tree={dest}",
            "checkout",
            commit,
            "--",
            path,
            env={"GIT_INDEX_FILE": str(index)},
        )
    finally:
        index.unlink(missing_ok=True)
        Path(f"{index}.lock").unlink(missing_ok=True)


def archive(repo: Path, commit: str, path: str, dest: Path) -> None:
    """A tar of ``path`` (a folder) at ``commit`` written to ``dest``."""
    _run(repo, "archive", "--format=tar", "-o", str(dest), commit, path)
