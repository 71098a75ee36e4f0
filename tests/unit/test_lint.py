"""patches lint and the queue reader on hand-written bad inputs (no subprocess)."""

from __future__ import annotations

from pathlib import Path

import pytest

from patch_texts import guard_patch
from patch_texts import queue_project as project
from sglforge.errors import ConfigError
from sglforge.patches.lint import lint_queue
from sglforge.queue.series import classify, load_pin, load_queue, parse_patch, ref_version

GOOD = guard_patch(
    "Upstream-Status: Backport [v0.5.15]\n"
    "Applies-To: >=0.5.10,<0.5.15\n"
    "Upstream-Fixed-In: 0.5.15\n",
    signature=True,
)


def codes(root: Path) -> list[tuple[str, int, str]]:
    return [(f.file, f.line, f.code) for f in lint_queue(root)]


def test_good_patch_is_clean_and_parsed(tmp_path: Path) -> None:
    root = project(tmp_path, {"0001-guard.patch": GOOD})
    assert codes(root) == []
    p = load_queue(root).patches[0]
    assert p.subject == "Guard the include"
    assert p.upstream_status == "Backport [v0.5.15]"
    assert p.applies_to == ">=0.5.10,<0.5.15"
    assert p.fixed_in == "0.5.15"
    assert p.files == ("python/x.cuh",)
    assert (p.added, p.removed) == (1, 0)  # the "-- " signature is not a removed line
    assert p.description == "Fails to compile on ROCm."


def test_series_problems_name_file_and_line(tmp_path: Path) -> None:
    root = project(
        tmp_path,
        {"0001-guard.patch": GOOD, "0002-orphan.patch": GOOD.replace("+b", "+z")},
        series="# queue\n0001-guard.patch\n\n0001-guard.patch\n0003-missing.patch\n",
    )
    assert codes(root) == [
        ("patches/0002-orphan.patch", 0, "orphan-patch"),
        ("patches/series", 4, "duplicate-entry"),
        ("patches/series", 5, "missing-patch"),
    ]
    with pytest.raises(ConfigError, match=r"patches/series:4: 0001-guard.patch is listed twice"):
        load_queue(root)
    (root / "patches" / "series").write_text("0001-guard.patch\n0003-missing.patch\n")
    with pytest.raises(ConfigError, match=r"patches/series:2: 0003-missing.patch does not exist"):
        load_queue(root)


def test_an_unreadable_series_is_one_finding_at_its_line(tmp_path: Path) -> None:
    """The reader's error carries its file, line and reason apart (ConfigError.at): lint
    lists it where it is, without parsing the message back."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    cases = {
        "../up.patch": ("# q\n0001-guard.patch\n../up.patch\n", 3, "is not a file name"),
        "/abs.patch": ("/abs.patch\n", 1, "is not a file name"),
        "a symlink out": ("0001-guard.patch\n\nout.patch\n", 3, "through a symbolic link"),
    }
    for name, (series, line, why) in cases.items():
        root = project(tmp_path / name.replace("/", "_"), {"0001-guard.patch": GOOD}, series)
        (root / "patches" / "out.patch").symlink_to(outside / "x.patch")
        (found,) = lint_queue(root)
        assert (found.file, found.line, found.code) == ("patches/series", line, "bad-series"), name
        assert why in found.message and "patches/series:" not in found.message, found.message
        with pytest.raises(ConfigError, match=rf"^patches/series:{line}: "):
            load_queue(root)
    # no line to point at: the whole file
    root = project(tmp_path / "latin1", {"0001-guard.patch": GOOD})
    (root / "patches" / "series").write_bytes(b"0001-guard.patch \xe9\n")
    (found,) = lint_queue(root)
    assert (found.file, found.line, found.code) == ("patches/series", 0, "bad-series")
    assert "not UTF-8" in found.message


def test_metadata_problems(tmp_path: Path) -> None:
    bad = (
        GOOD.replace("Subject: [PATCH] Guard the include\n", "")
        .replace("Upstream-Status: Backport [v0.5.15]", "Upstream-Status: Maybe")
        .replace("Applies-To: >=0.5.10,<0.5.15", "Applies-To: >>0.5")
        .replace("Upstream-Fixed-In: 0.5.15", "Upstream-Fixed-In: soon")
    )
    root = project(tmp_path, {"0001-bad.patch": bad})
    found = {c for _, _, c in codes(root)}
    assert found == {"missing-subject", "invalid-status", "invalid-specifier", "invalid-version"}
    nostatus = GOOD.replace("Upstream-Status: Backport [v0.5.15]\n", "")
    root2 = project(tmp_path / "b", {"0001-x.patch": nostatus})
    assert [c for _, _, c in codes(root2)] == ["missing-status"]
    bare = GOOD.replace("Backport [v0.5.15]", "Backport")
    root3 = project(tmp_path / "c", {"0001-x.patch": bare})
    assert [(line, c) for _, line, c in codes(root3)] == [(8, "invalid-status")]


@pytest.mark.parametrize(
    ("old", "new", "code", "line"),
    [
        ("+b\n", "+b  \n", "trailing-whitespace", 21),
        ("+b\n", "+b\r\n", "crlf", 21),
        ("a/python/x.cuh b/python/x.cuh", "a/../x.cuh b/../x.cuh", "unsafe-path", 15),
        ("+++ b/python/x.cuh", "+++ /etc/x", "unsafe-path", 18),
    ],
)
def test_diff_problems(tmp_path: Path, old: str, new: str, code: str, line: int) -> None:
    root = project(tmp_path, {"0001-x.patch": GOOD.replace(old, new)})
    assert ("patches/0001-x.patch", line, code) in codes(root)


def test_malformed_empty_binary_and_duplicate(tmp_path: Path) -> None:
    malformed = GOOD.replace("@@ -1,2 +1,3 @@", "@@ -1,2 +1,9 @@")
    empty = GOOD.split("diff --git")[0]
    binary = GOOD.split("diff --git")[0] + (
        "diff --git a/python/w.bin b/python/w.bin\n"
        "index 1111111..2222222 100644\n"
        "GIT binary patch\nliteral 1\nIcmZ?d00001\n\nliteral 0\nHcmV?d00001\n\n"
    )
    root = project(
        tmp_path,
        {
            "0001-x.patch": GOOD,
            "0002-malformed.patch": malformed,
            "0003-empty.patch": empty,
            "0004-binary.patch": binary,
            "0005-again.patch": GOOD.replace("Guard the include", "Same again"),
        },
    )
    found = {(f, c) for f, _, c in codes(root)}
    assert ("patches/0002-malformed.patch", "unparsable-diff") in found
    assert ("patches/0003-empty.patch", "empty-patch") in found
    assert ("patches/0004-binary.patch", "binary-without-full-index") in found
    assert ("patches/0005-again.patch", "duplicate-change") in found


def test_kinds_follow_the_paths() -> None:
    assert classify(["python/sglang/srt/models/deepseek_nextn.py"]) == "python"
    assert classify(["python/sglang/jit_kernel/csrc/elementwise/x.cuh"]) == "jit-kernel"
    assert classify(["python/sglang/kernels/jit/x.cuh"]) == "jit-kernel"
    assert classify(["sgl-kernel/csrc/x.cu"]) == "aot-kernel"
    assert classify(["python/sglang/kernels/aot/x.cu"]) == "aot-kernel"
    assert classify(["docker/rocm.Dockerfile"]) == "build"
    assert classify(["python/pyproject.toml"]) == "build"
    assert classify(["README.md"]) == "other"
    # the most demanding kind wins
    assert classify(["python/a.py", "sgl-kernel/setup.py"]) == "aot-kernel"


def test_ref_versions() -> None:
    assert str(ref_version("v0.5.14")) == "0.5.14"
    assert str(ref_version("v0.5.10.post1")) == "0.5.10.post1"
    assert str(ref_version("refs/tags/v0.5.16")) == "0.5.16"
    assert ref_version("main") is None


def test_pin_validation(tmp_path: Path) -> None:
    root = project(tmp_path, {})
    (root / "patches" / "upstream.toml").write_text('url = "x"\nref = "v1"\ncolour = "red"\n')
    with pytest.raises(ConfigError, match="unknown key 'colour'"):
        load_pin(root)
    (root / "patches" / "upstream.toml").write_text('url = "x"\nref = "v1"\ncommit = "abc"\n')
    with pytest.raises(ConfigError, match="full 40-hex SHA"):
        load_pin(root)


def test_quilt_style_patch_without_mail_headers(tmp_path: Path) -> None:
    text = "Fix the thing\n\nUpstream-Status: Pending\n\n" + GOOD.split("\n\ndiff", 1)[0][:0]
    text += "--- a/python/x.cuh\n+++ b/python/x.cuh\n@@ -1,2 +1,3 @@\n a\n+b\n c\n"
    path = tmp_path / "q.patch"
    path.write_text(text)
    p = parse_patch(path)
    assert p.subject == "Fix the thing" and p.files == ("python/x.cuh",)


def test_a_patch_excluded_at_the_pin_is_a_warning(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from sglforge.cli import main

    root = project(tmp_path, {"0001-guard.patch": GOOD})
    (root / "patches" / "upstream.toml").write_text('url = "x"\nref = "v0.5.16"\n')
    found = lint_queue(root)
    assert [(f.code, f.severity) for f in found] == [("excluded-at-pin", "warning")]
    assert "excludes the pinned 0.5.16" in found[0].message
    res = CliRunner().invoke(main, ["--root", str(root), "patches", "lint"])
    assert res.exit_code == 0 and "1 warning" in res.output


def test_bad_series_bytes_and_bad_sources_are_configuration_errors(tmp_path: Path) -> None:
    root = project(tmp_path, {"0001-guard.patch": GOOD})
    (root / "patches" / "series").write_bytes(b"\xff\xfe0001-guard.patch\n")
    with pytest.raises(ConfigError, match="patches/series: not UTF-8"):
        load_queue(root)
    (root / "patches" / "series").write_text("0001-guard.patch\n")
    (root / "patches" / "upstream.toml").write_text(
        'url = "x"\nref = "v0.5.14"\n[sources]\nfoo = 1\n'
    )
    with pytest.raises(ConfigError, match=r"\[sources.'foo'\] must be a table of strings"):
        load_pin(root)


def test_each_patch_is_read_once_and_hashed_as_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The queue hash (the q<hash> of every image tag) is of the bytes ``parse_patch`` read,
    not of a second read (review 5, 5.2 mend 4): one read per patch file, the hash as before
    for UTF-8 and non-UTF-8 bytes alike."""
    import hashlib
    from collections import Counter

    latin = GOOD.encode().replace(b"+b", b"+\xe9b")  # not UTF-8: kept byte for byte
    root = project(tmp_path, {"0001-guard.patch": GOOD, "0002-latin.patch": ""})
    (root / "patches" / "0002-latin.patch").write_bytes(latin)
    reads: Counter[str] = Counter()
    real = Path.read_bytes

    def counting(self: Path) -> bytes:
        reads[self.name] += 1
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", counting)
    queue = load_queue(root)
    assert reads["0001-guard.patch"] == 1 and reads["0002-latin.patch"] == 1
    h = hashlib.sha256(b"sglforge-queue 2\nurl=x\nref=v0.5.14\n")
    for name, data in (("0001-guard.patch", GOOD.encode()), ("0002-latin.patch", latin)):
        h.update(f"patch {name} {len(data)}\n".encode() + data)
    assert queue.hash == h.hexdigest()
