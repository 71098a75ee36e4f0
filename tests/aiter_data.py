"""ROCm/aiter files the tests compare against, shipped as test data with their git blob ids.

CI reaches only package registries, never GitHub, so the aiter files that tests read (the
lines coverage.py cites, the tables a base merges, the untuned header) are kept verbatim under
``tests/data/aiter/<commit>/<path>``, and ``tests/data/aiter/blobs.toml`` records, for each, the
commit and path it was copied from and git's blob id of its bytes. ``blob()`` checks that id on
every read; with a ROCm/aiter clone present (``$SGLFORGE_AITER_REPO``, or the search tool's
mirror) it reads the commit's own blob instead and checks the shipped copy against it, so the
copy can never drift from upstream unnoticed.

Refresh or add files from a clone (run from the repository root):

    python3 tests/aiter_data.py --repo DIR COMMIT PATH [PATH ...]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "aiter"
MANIFEST = DATA / "blobs.toml"
MIRROR = Path("/work/.mirror/ROCm+aiter/repo")


@dataclass(frozen=True)
class Shipped:
    commit: str
    path: str
    blob: str

    @property
    def file(self) -> Path:
        return DATA / self.commit[:12] / self.path


def blob_id(data: bytes) -> str:
    """git's id of a blob with these bytes (``git hash-object``)."""
    import hashlib

    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def clone() -> Path | None:
    """A ROCm/aiter clone, if this machine has one."""
    given = os.environ.get("SGLFORGE_AITER_REPO")
    path = Path(given) if given else MIRROR
    return path if path.is_dir() else None


def manifest(path: Path = MANIFEST) -> dict[tuple[str, str], Shipped]:
    doc = tomllib.loads(path.read_text()) if path.is_file() else {}
    rows = [Shipped(r["commit"], r["path"], r["blob"]) for r in doc.get("file", [])]
    return {(r.commit, r.path): r for r in rows}


def trees(path: Path = MANIFEST) -> dict[tuple[str, str], tuple[str, ...]]:
    doc = tomllib.loads(path.read_text()) if path.is_file() else {}
    return {(t["commit"], t["path"]): tuple(t["names"]) for t in doc.get("tree", [])}


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=False)


def _clone_blob(repo: Path, commit: str, path: str) -> bytes | None:
    proc = _git(repo, "cat-file", "blob", f"{commit}:{path}")
    return proc.stdout if proc.returncode == 0 else None


def blob(commit: str, path: str) -> bytes:
    """The bytes of ``path`` at aiter ``commit``: the clone's, else the shipped, id-checked copy."""
    row = manifest().get((commit, path))
    repo = clone()
    upstream = _clone_blob(repo, commit, path) if repo is not None else None
    if row is not None:
        data = row.file.read_bytes()
        if blob_id(data) != row.blob:
            raise AssertionError(
                f"{row.file}: its bytes are not blob {row.blob[:12]} ({path} at {commit[:12]}); "
                f"copy it again: python3 tests/aiter_data.py --repo DIR {commit} {path}"
            )
        if upstream is not None and upstream != data:
            raise AssertionError(f"{row.file} differs from {path} at {commit[:12]} in {repo}")
        return data
    if upstream is not None:
        return upstream
    raise AssertionError(
        f"aiter {path} at {commit[:12]} is neither shipped in {MANIFEST} nor in a clone; "
        f"add it: python3 tests/aiter_data.py --repo DIR {commit} {path}"
    )


def names(commit: str, folder: str) -> tuple[str, ...]:
    """The entries of ``folder`` at ``commit`` (``git ls-tree --name-only``)."""
    repo = clone()
    shipped = trees().get((commit, folder))
    if repo is not None:
        proc = _git(repo, "ls-tree", "--name-only", commit, folder.rstrip("/") + "/")
        if proc.returncode == 0:
            listed = tuple(proc.stdout.decode().split())
            if shipped is not None and shipped != listed:
                raise AssertionError(
                    f"{MANIFEST}: the listing of {folder} at {commit[:12]} is stale"
                )
            return listed
    if shipped is None:
        raise AssertionError(f"no listing of aiter {folder} at {commit[:12]} in {MANIFEST}")
    return shipped


def shipped_under(commit: str, folder: str) -> list[str]:
    """Paths shipped for ``commit`` under ``folder``."""
    prefix = folder.rstrip("/") + "/"
    return sorted(p for (c, p) in manifest() if c == commit and p.startswith(prefix))


def _save(
    rows: dict[tuple[str, str], Shipped], listings: dict[tuple[str, str], tuple[str, ...]]
) -> None:
    lines = ["# aiter files shipped as test data: see tests/aiter_data.py", ""]
    for row in sorted(rows.values(), key=lambda r: (r.commit, r.path)):
        lines += ["[[file]]", f'commit = "{row.commit}"', f'path = "{row.path}"']
        lines += [f'blob = "{row.blob}"', ""]
    for (commit, folder), listed in sorted(listings.items()):
        lines += ["[[tree]]", f'commit = "{commit}"', f'path = "{folder}"', "names = ["]
        lines += [f'    "{n}",' for n in listed] + ["]", ""]
    tmp = MANIFEST.with_suffix(".tmp")
    tmp.write_text("\n".join(lines))
    tmp.replace(MANIFEST)


def _copy(repo: Path, commit: str, paths: list[str], listing: bool) -> None:
    rows, listings = manifest(), trees()
    for path in paths:
        if listing:
            proc = _git(repo, "ls-tree", "--name-only", commit, path.rstrip("/") + "/")
        else:
            proc = _git(repo, "cat-file", "blob", f"{commit}:{path}")
        if proc.returncode != 0:
            raise SystemExit(f"{path} is not in {commit} in {repo}")
        if listing:
            listings[(commit, path)] = tuple(proc.stdout.decode().split())
            continue
        row = Shipped(commit, path, blob_id(proc.stdout))
        row.file.parent.mkdir(parents=True, exist_ok=True)
        row.file.write_bytes(proc.stdout)
        rows[(commit, path)] = row
    _save(rows, listings)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True, help="a ROCm/aiter clone")
    parser.add_argument("--list", action="store_true", help="record folder listings instead")
    parser.add_argument("commit")
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args(argv)
    _copy(args.repo, args.commit, args.paths, listing=args.list)


if __name__ == "__main__":
    main(sys.argv[1:])
