"""``patches import`` refuses a change the queue holds already (issue 45, U7): the same diff
under another name or with other trailers, or the same ``Origin:`` URL; ``--force`` imports
it anyway. Real git repositories in temporary folders; a URL served on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

from test_queue_verbs import cli, format_patch, project, scratch, series, served, upstream

__all__ = ["project", "scratch", "served", "upstream"]  # the fixtures, shared


def test_the_same_change_twice_is_refused_naming_the_patch(
    project: Path, scratch: Path, tmp_path: Path, served: tuple[str, Path]
) -> None:
    text = format_patch(scratch, "python/pkg/b.py", 20, "b FIXED", "pkg: fix b")
    first = tmp_path / "b.patch"
    first.write_text(text)
    assert cli(project, "patches", "import", str(first))[0] == 0
    before = series(project)
    # the same file again; the same diff under another name with another subject
    again = tmp_path / "other-name.patch"
    again.write_text(text.replace("pkg: fix b", "pkg: b, once more"))
    for path in (first, again):
        code, out, err = cli(project, "patches", "import", str(path), "--json")
        assert code == 1, err
        doc = json.loads(out)["error"]
        assert "patches/0002-b.patch holds the same change" in doc["message"]
        assert "--force" in doc["hint"]
    # the same pull request URL twice, its content changed since: the same Origin
    base, folder = served
    (folder / "4243.patch").write_text(format_patch(scratch, "python/pkg/c.py", 7, "c", "c"))
    assert cli(project, "patches", "import", f"{base}/4243.patch")[0] == 0
    (folder / "4243.patch").write_text(format_patch(scratch, "python/pkg/c.py", 8, "c2", "c"))
    code, _, err = cli(project, "patches", "import", f"{base}/4243.patch")
    assert code == 1 and f"the same Origin: {base}/4243.patch" in err, err
    assert series(project) == [*before, "0003-c.patch"]
    # --force: taken as asked
    code, _, err = cli(project, "patches", "import", str(again), "--force")
    assert code == 0, err
    assert len(series(project)) == len(before) + 2
