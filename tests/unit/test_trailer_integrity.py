"""Trailers are one line each and never carry credentials (issue 42, F2 and F3): the one
check (``series.trailer_problem``) made by ``patches header --set``, by ``import`` and by lint,
a parser that cannot be made to see a trailer nobody wrote, and the one credential scrubber
(``urls.scrub_secrets``) over several kinds of secret. No subprocess: hand-written patches."""

from __future__ import annotations

from pathlib import Path

import pytest

from patch_texts import guard_patch, queue_project
from sglforge.errors import ConfigError
from sglforge.patches.edit import import_patches
from sglforge.patches.header import edit_header, parse_sets
from sglforge.patches.lint import lint_queue
from sglforge.project import Project
from sglforge.provenance import PatchFacts
from sglforge.queue.series import LINE_BREAKS, check_trailers, load_queue, parse_patch
from sglforge.urls import scrub_secrets, scrub_text, secrets_in

FS = "Fixes-Scan: cuda-only-jit python/x.cuh"
# The character itself, then where in a value it hides a forged trailer.
BREAKS = [pytest.param(ch, id=f"U+{ord(ch):04X}") for ch in LINE_BREAKS if ch != "\n"]

# {extra}: more trailer lines, per test
PATCH = guard_patch("Upstream-Status: Pending\nForwarded: not-needed\n{extra}")

# Credentials of several kinds, each in a trailer value; none may reach the file.
SECRETS = [
    ("Origin", "http://bob:S3cretTok@127.0.0.1:5701/x.patch?token=QTOK9", "S3cretTok"),
    ("Bug", "https://ghp_SECRETTOKEN123@github.com/org/repo/issues/1", "ghp_SECRET"),
    (
        "Upstream-Status",
        "Submitted [https://u:pw@github.com/sgl-project/sglang/pull/1?access_token=ZZZ]",
        "ZZZ",
    ),
    ("Origin", "https://bucket.s3/x.patch?X-Amz-Credential=AKX&X-Amz-Signature=f00dfeed", "f00d"),
    ("Origin", "local copy, password=hunter2-SECRET", "hunter2"),
    ("Origin", "from ghp_abcdefghijklmnopqrstuv in a comment", "ghp_abc"),
]


def _project(tmp_path: Path, extra: str = "") -> Path:
    return queue_project(tmp_path, {"0001-guard.patch": PATCH.format(extra=extra)})


def test_line_breaks_are_exactly_what_splitlines_splits_on() -> None:
    """The one list is checked against Python itself over all of Unicode, so it cannot lag."""
    split = {chr(c) for c in range(0x110000) if len(f"a{chr(c)}b".splitlines()) == 2}
    assert split == set(LINE_BREAKS)


@pytest.mark.parametrize("brk", BREAKS)
def test_every_line_break_is_refused_by_set_and_import_options(brk: str) -> None:
    with pytest.raises(ConfigError, match="line break"):
        parse_sets((f"Origin=upstream{brk}{FS}",))
    with pytest.raises(ConfigError, match="line break"):
        parse_sets((f"Upstream-Status=Submitted [x{brk}{FS}]",))
    with pytest.raises(ConfigError, match="line break"):
        check_trailers({"Origin": f"upstream{brk}{FS}"})


@pytest.mark.parametrize("brk", BREAKS)
def test_a_patch_arriving_with_a_break_forges_nothing_and_is_a_lint_error(
    tmp_path: Path, brk: str
) -> None:
    root = _project(tmp_path, f"Origin: upstream{brk}{FS}\n")
    patch = parse_patch(root / "patches" / "0001-guard.patch")
    assert [k for k, _ in patch.trailers] == ["Upstream-Status", "Forwarded", "Origin"]
    found = [(f.line, f.code, f.severity) for f in lint_queue(root)]
    assert (10, "trailer-line-break", "error") in found


@pytest.mark.parametrize("brk", ["\u2028", "\r", "\x85"])
def test_a_trailer_hidden_in_a_description_line_is_a_lint_error(tmp_path: Path, brk: str) -> None:
    root = _project(tmp_path, f"Reviewed on the list.{brk}{FS}\n")
    assert "Fixes-Scan" not in dict(parse_patch(root / "patches" / "0001-guard.patch").trailers)
    assert any(f.code == "trailer-line-break" for f in lint_queue(root))


def test_crlf_patches_keep_their_trailers(tmp_path: Path) -> None:
    root = tmp_path / "p"
    _project(tmp_path)
    path = root / "patches" / "0001-guard.patch"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    assert dict(parse_patch(path).trailers)["Upstream-Status"] == "Pending"
    assert not [f for f in lint_queue(root) if f.code.startswith("trailer-")]


@pytest.mark.parametrize(("key", "value", "secret"), SECRETS)
def test_set_scrubs_credentials_before_writing(
    tmp_path: Path, key: str, value: str, secret: str
) -> None:
    root = _project(tmp_path)
    r = edit_header(Project(root), "1", parse_sets((f"{key}={value}",)))
    text = (root / "patches" / "0001-guard.patch").read_text()
    assert secret not in text and secret not in str(r.after)
    assert not [f for f in lint_queue(root) if f.code == "trailer-credential"]
    facts = PatchFacts.of(load_queue(root).patches[0])  # what the manifest records
    assert secret not in facts.upstream_status


@pytest.mark.parametrize(("key", "value", "secret"), SECRETS)
def test_a_patch_arriving_with_credentials_is_a_lint_error_and_import_scrubs_it(
    tmp_path: Path, key: str, value: str, secret: str
) -> None:
    extra = f"{key}: {value}\n" if key != "Upstream-Status" else ""
    text = PATCH.format(extra=extra)
    if key == "Upstream-Status":
        text = text.replace("Upstream-Status: Pending", f"Upstream-Status: {value}")
    root = _project(tmp_path)
    (root / "patches" / "0001-guard.patch").write_text(text)
    assert "trailer-credential" in [f.code for f in lint_queue(root)]
    src = tmp_path / "in.patch"
    src.write_text(text)
    (root / "patches" / "0001-guard.patch").write_text(PATCH.format(extra=""))
    # the same change as 0001 (force: import refuses a change the queue holds)
    import_patches(Project(root), str(src), name="arrived", force=True)
    written = (root / "patches" / "0002-arrived.patch").read_text()
    assert secret not in written
    assert not [f for f in lint_queue(root) if f.code == "trailer-credential"]


@pytest.mark.parametrize("brk", ["\u2028", "\x0b", "\r"])
def test_import_refuses_a_patch_whose_trailer_holds_a_break(tmp_path: Path, brk: str) -> None:
    root = _project(tmp_path)
    src = tmp_path / "in.patch"
    src.write_bytes(PATCH.format(extra=f"Origin: x{brk}{FS}\n").encode())
    with pytest.raises(ConfigError, match="line break"):
        import_patches(Project(root), str(src), name="arrived")
    assert not (root / "patches" / "0002-arrived.patch").exists()


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("https://bugs.example/show_bug.cgi?id=123", "https://bugs.example/show_bug.cgi?id=123"),
        ("https://h/x.patch?id=4&token=abc", "https://h/x.patch?id=4"),
        ("https://h/x#L10", "https://h/x#L10"),
        ("https://h/x#access_token=abc", "https://h/x"),
        ("upstream, commit 0123abcd", "upstream, commit 0123abcd"),
        ("--author=me --password=pw1", "--author=me --password=***"),
        ("user:pw@host.example/path", "host.example/path"),
    ],
)
def test_the_scrubber_keeps_what_is_no_secret(text: str, kept: str) -> None:
    assert scrub_secrets(text) == kept
    assert secrets_in(text) is (text != kept)
    if text != kept:  # the message form hides at least as much
        assert "abc" not in scrub_text(text) and "pw1" not in scrub_text(text)


@pytest.mark.parametrize("brk", ["\u2028", "\r", "\x1c", "\x85"])
def test_every_trailer_writer_is_checked_at_the_root(tmp_path: Path, brk: str) -> None:
    """``set_trailers`` (drop's Retired:, rename's Depends-On:, fold's, --set's) refuses a
    value with a line break, so no verb can forge a trailer; the patch is left as it was."""
    from sglforge.patches.edit import drop_patch, set_trailers

    root = _project(tmp_path)
    before = (root / "patches" / "0001-guard.patch").read_bytes()
    with pytest.raises(ConfigError, match="line break"):
        drop_patch(Project(root), "1", f"superseded{brk}{FS}")
    assert (root / "patches" / "0001-guard.patch").read_bytes() == before
    assert not (root / "patches" / "retired").exists()
    with pytest.raises(ConfigError, match="line break"):
        set_trailers(PATCH.format(extra=""), {"Depends-On": f"0001{brk}{FS}"})
    scrubbed = set_trailers(PATCH.format(extra=""), {"Origin": "https://u:pw@h/x.patch?token=t"})
    assert "Origin: https://h/x.patch\n" in scrubbed and "pw" not in scrubbed
