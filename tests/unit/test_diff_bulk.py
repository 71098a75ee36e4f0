"""The bulk walks over a diff give what the line-by-line walks give, on every kind of line.

``scan_text`` (hunk counts at C speed) against ``scan_diff`` over each line, and lint's
``_diff_findings`` (notable lines found in bulk) against the same walk over every line, on
seeded random diffs (well-formed and broken: counts off by a few, lines no hunk can hold, a
text ending inside a hunk) and on crafted ones holding each finding the walk gives. Then the
duplicate-change check, which now hashes a diff only when its file headers equal another's.
"""

from __future__ import annotations

import random
from pathlib import Path

from sglforge.patches.lint import _Changes, _diff_findings
from sglforge.queue.series import iter_lines, parse_patch, scan_diff, scan_text

REPO = Path(__file__).resolve().parents[2]
TAGS = ["+", "-", " ", "", "\\ No newline at end of file", "x", "diff --git a/x b/x", "+++ b/y"]


def small_texts(rng: random.Random, count: int) -> list[str]:
    texts = []
    for _ in range(count):
        lines = []
        for _ in range(rng.randint(0, 12)):
            if rng.random() < 0.25:
                counts = [rng.randint(0, 4) for _ in range(4)]
                lines.append("@@ -{},{} +{},{} @@".format(*counts))
            else:
                tag = rng.choice(TAGS)
                lines.append(tag + ("a b"[: rng.randint(0, 3)] if len(tag) < 2 else ""))
        texts.append("\n".join(lines) + ("\n" if rng.random() < 0.8 else ""))
    return texts


def big_hunk(rng: random.Random) -> tuple[int, int, list[str]]:
    body: list[str] = []
    old = new = 0
    for _ in range(rng.randint(30, 300)):
        tag = rng.choices(["+", "-", " ", "", "\\"], [5, 3, 3, 1, 0.2])[0]
        if tag == "\\":
            body.append("\\ No newline at end of file")
            continue
        body.append(tag + "x" * rng.randint(0, 60) if tag else "")
        old += tag in ("-", " ", "")
        new += tag in ("+", " ", "")
    return old, new, body


def big_texts(rng: random.Random, count: int) -> list[str]:
    texts = []
    for _ in range(count):
        parts = ["diff --git a/f b/f", "--- a/f", "+++ b/f"]
        for _ in range(rng.randint(1, 3)):
            old, new, body = big_hunk(rng)
            if rng.random() < 0.2:
                old += rng.choice([-2, -1, 1, 2])
            if rng.random() < 0.1:
                body[rng.randrange(len(body))] = "junk"
            parts += [f"@@ -1,{old} +1,{new} @@", *body]
        if rng.random() < 0.3:
            parts += ["-- ", "2.39.5", ""]
        texts.append("\n".join(parts) + ("\n" if rng.random() < 0.9 else ""))
    return texts


def test_scan_text_is_scan_diff_on_small_big_broken_and_real_diffs() -> None:
    rng = random.Random(20261201)
    texts = small_texts(rng, 4000) + big_texts(rng, 600)
    texts += [p.read_text() for p in sorted((REPO / "patches").glob("*.patch"))]
    broken = 0
    for text in texts:
        expected = scan_diff(iter_lines(text))
        assert scan_text(text) == expected, text[:400]
        broken += bool(expected.error)
    assert 300 < broken < len(texts) - 300  # both kinds are well represented


HEADER = (
    "From 0 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] x\n\nbecause\n\n"
    "Upstream-Status: Pending\n---\n"
)
CRAFTED = [
    # a symlink leaving the tree, and one inside it; then an ordinary file after it
    "diff --git a/l b/l\nnew file mode 120000\nindex 0000000..1111111\n--- /dev/null\n+++ b/l\n"
    "@@ -0,0 +1 @@\n+../../../etc/passwd \n\\ No newline at end of file\n"
    "diff --git a/python/m b/python/m\nnew file mode 120000\n--- /dev/null\n+++ b/python/m\n"
    "@@ -0,0 +1 @@\n+n.py\n"
    "diff --git a/f.py b/f.py\n--- a/f.py\n+++ b/f.py\n@@ -1,2 +1,2 @@\n-a\n+a \n b\n",
    # binary with an abbreviated index (the note within 4 lines), and one without data
    "diff --git a/b.bin b/b.bin\nindex 1234567..89abcde 100644\nGIT binary patch\nliteral 3\n"
    "Kc${NkU;qF4O#l}E\n\ndiff --git a/c.bin b/c.bin\nBinary files a/c.bin and b/c.bin differ\n",
    # CRLF and every kind of trailing whitespace on added lines; not on context or removed ones
    "diff --git a/w.py b/w.py\n--- a/w.py\n+++ b/w.py\n@@ -1,3 +1,8 @@\n-x \n y \n+crlf\r\n"
    "+tab\t\n+vt\x0b\n+ideo\u3000\n+fs\x1c\n+clean\n z\n+++ not a header \n",
    # unsafe paths, in every header form, and '--- ' lines inside a hunk
    "diff --git a/../up b/../up\n--- a/../up\n+++ b//abs\n@@ -1,2 +1,2 @@\n--- a/../removed\n"
    "+x\n ctx\n",
    # a last added line with no newline, ending in a space
    "diff --git a/e.py b/e.py\n--- a/e.py\n+++ b/e.py\n@@ -0,0 +1 @@\n+end ",
]


def _patch(tmp_path: Path, name: str, diff: str) -> Path:
    path = tmp_path / name
    path.write_text(HEADER + diff, newline="")
    return path


def test_the_bulk_lint_walk_finds_what_a_walk_over_every_line_finds(tmp_path: Path) -> None:
    rng = random.Random(7)
    diffs = list(CRAFTED)
    for _ in range(300):  # crafted pieces shuffled together, with random hunks between them
        pieces = rng.sample(CRAFTED, rng.randint(1, len(CRAFTED)))
        pieces += rng.sample(big_texts(rng, 3), 2)
        rng.shuffle(pieces)
        diffs.append("".join(p if p.endswith("\n") else p + "\n" for p in pieces))
    codes: set[str] = set()
    for i, diff in enumerate(diffs):
        patch = parse_patch(_patch(tmp_path, f"{i:04d}.patch", diff))
        bulk = _diff_findings(patch, "p")
        assert bulk == _diff_findings(patch, "p", every_line=True), diff[:300]
        codes.update(f.code for f in bulk)
    assert codes >= {
        "unsafe-symlink",
        "binary-without-full-index",
        "binary-without-data",
        "crlf",
        "trailing-whitespace",
        "unsafe-path",
        "unparsable-diff",
    }


def test_a_duplicate_change_is_found_whatever_the_whitespace_and_only_then(
    tmp_path: Path,
) -> None:
    one = "diff --git a/f.py b/f.py\n--- a/f.py\n+++ b/f.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"
    spaced = one.replace("+a = 2", "+a  =\t2")
    other = one.replace("+a = 2", "+a = 3")
    elsewhere = one.replace("f.py", "g.py")
    changes = _Changes()
    names = ["1-one", "2-other", "3-elsewhere", "4-spaced", "5-one-again"]
    diffs = [one, other, elsewhere, spaced, one]
    found = [
        changes.same_as(parse_patch(_patch(tmp_path, f"{n}.patch", d)))
        for n, d in zip(names, diffs, strict=True)
    ]
    assert found == [None, None, None, "1-one.patch", "1-one.patch"]
    # A patch with no diff is never a duplicate.
    assert changes.same_as(parse_patch(_patch(tmp_path, "6-empty.patch", ""))) is None
