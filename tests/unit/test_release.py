"""Release records and CHANGELOG entries: diffs against the last release, idempotence."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from sglforge.errors import ConfigError
from sglforge.provenance import PatchFacts, Smoke
from sglforge.release import (
    Release,
    diff_patches,
    find_by_digest,
    from_dict,
    load_records,
    record_path,
    record_release,
    to_dict,
    write_changelog,
)

HEADER = """# Changelog

All notable changes to this project are documented here.

## [Unreleased]

### Added
- Something the tool gained.
"""

P1 = PatchFacts("0001-mtp-quant-prefix.patch", "Map MTP exclusions to decoder prefix", "a" * 64)
P2 = PatchFacts("0002-rocm-guard-fused-metadata.patch", "Guard cuda_runtime include", "b" * 64)
P3 = PatchFacts("0003-tuned-fp4-moe-configs.patch", "Ship tuned fp4 MoE configs", "c" * 64)


def make_release(version: str = "v0.5.14-rocm700-mi355x-1111", **kw: object) -> Release:
    base = Release(
        version=version,
        date="2026-11-30",
        target="mi355x",
        image=f"127.0.0.1:5000/sglforge/sglang:{version}",
        digest="sha256:" + "d" * 64,
        references=(
            f"127.0.0.1:5000/sglforge/sglang:{version}",
            "127.0.0.1:5000/sglforge/sglang:v0.5.14-rocm700-mi355x",
            "127.0.0.1:5000/sglforge/sglang:latest-mi355x",
        ),
        upstream_url="pypi:sglang",
        upstream_ref="v0.5.14",
        upstream_commit="0123456789abcdef0123",
        upstream_version="0.5.14",
        queue_hash="e" * 64,
        patches=(P1, P2),
        smoke=Smoke(True, "standin-cpu", "all checks passed", {"decode_tok_s": 213.4, "ok": 5}),
        gpu_arch="gfx950",
        published_at="2026-11-30T07:00:00Z",
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "CHANGELOG.md").write_text(HEADER)
    return tmp_path


def test_first_release_lists_every_patch_as_added_below_unreleased(root: Path) -> None:
    done = record_release(root, make_release())
    text = (root / "CHANGELOG.md").read_text()
    assert done.changelog_written and done.record_written
    # The heading is the fork's version: v<upstream version>-<n>.
    assert done.fork_version == "v0.5.14-1"
    assert text.index("## [Unreleased]") < text.index("## [v0.5.14-1] - 2026-11-30")
    entry = text[text.index("## [v0.5.14") :]
    # Unreleased items roll into the release; Unreleased stays, empty.
    assert "- Something the tool gained." in entry
    assert text[text.index("## [Unreleased]") : text.index("## [v0.5.14")].count("- ") == 0
    assert "### Added" in entry and P1.name in entry and P2.name in entry
    assert "### Removed" not in entry and "### Changed" not in entry
    assert "`v0.5.14` = `0123456789ab`" in entry
    assert "decode_tok_s 213" in entry and "smoke passed (scenario `standin-cpu`)" in entry
    assert "`127.0.0.1:5000/sglforge/sglang:latest-mi355x`" in entry


def test_publishing_the_same_release_twice_adds_one_entry(root: Path) -> None:
    record_release(root, make_release())
    before = (root / "CHANGELOG.md").read_bytes()
    record_before = record_path(root, "v0.5.14-rocm700-mi355x-1111").read_bytes()
    # Same image, a later run with slightly different figures: still the same release.
    again = record_release(
        root,
        make_release(
            date="2026-12-01",
            smoke=Smoke(True, "standin-cpu", "ok", {"decode_tok_s": 199.0}),
        ),
    )
    assert not again.changelog_written and not again.record_written
    assert (root / "CHANGELOG.md").read_bytes() == before
    assert record_path(root, "v0.5.14-rocm700-mi355x-1111").read_bytes() == record_before
    assert (root / "CHANGELOG.md").read_text().count("## [v0.5.14-1]") == 1
    assert not list(root.rglob("*.tmp"))  # atomic writes leave no temporary files


def test_second_release_lists_added_refreshed_and_dropped_patches(root: Path) -> None:
    record_release(root, make_release())
    p2_new = dataclasses.replace(P2, name="0001-rocm-guard-fused-metadata.patch", sha256="f" * 64)
    second = make_release(
        "v0.5.14-rocm700-mi355x-2222",
        digest="sha256:" + "9" * 64,
        patches=(p2_new, P3),
        queue_hash="2" * 64,
        published_at="2026-11-30T08:00:00Z",
    )
    done = record_release(root, second)
    assert done.diff.previous == "v0.5.14-rocm700-mi355x-1111"
    assert [p.name for p in done.diff.added] == [P3.name]
    assert [p.name for p in done.diff.refreshed] == [p2_new.name]  # renumbered, same slug
    assert [p.name for p in done.diff.dropped] == [P1.name]
    text = (root / "CHANGELOG.md").read_text()
    # Newest first, both below Unreleased.
    assert done.fork_version == "v0.5.14-2"
    assert text.index("## [v0.5.14-2]") < text.index("## [v0.5.14-1]")
    entry = text[text.index("## [v0.5.14-2]") : text.index("## [v0.5.14-1]")]
    assert "### Added" in entry and P3.name in entry
    assert "### Changed" in entry and "refreshed since v0.5.14-1" in entry
    assert "### Removed" in entry and f"`{P1.name}` dropped" in entry
    assert [r.version for r in load_records(root)] == [
        "v0.5.14-rocm700-mi355x-1111",
        "v0.5.14-rocm700-mi355x-2222",
    ]


def test_other_targets_do_not_count_as_the_previous_release(root: Path) -> None:
    record_release(root, make_release("v0.5.14-rocm700-mi300x-1111", target="mi300x"))
    done = record_release(root, make_release())
    assert done.diff.previous is None
    assert len(done.diff.added) == 2


def test_untested_entry_is_replaced_once_the_image_passes_smoke(root: Path) -> None:
    record_release(root, make_release(smoke=None))
    text = (root / "CHANGELOG.md").read_text()
    assert "**untested**" in text and "--skip-smoke" in text
    assert (
        json.loads(record_path(root, "v0.5.14-rocm700-mi355x-1111").read_text())["tested"] is False
    )
    done = record_release(root, make_release())
    text = (root / "CHANGELOG.md").read_text()
    assert done.changelog_written
    assert "**untested**" not in text and text.count("## [v0.5.14-1]") == 1
    assert find_by_digest(root, "sha256:" + "d" * 64).tested  # type: ignore[union-attr]
    # ...but a later untested push never downgrades a tested release.
    assert not record_release(root, make_release(smoke=None)).changelog_written
    assert "**untested**" not in (root / "CHANGELOG.md").read_text()


def test_new_references_are_merged_into_the_record(root: Path) -> None:
    record_release(root, make_release())
    other = make_release(references=("127.0.0.1:6000/sglforge/sglang:x",))
    done = record_release(root, other)
    refs = json.loads(done.record.read_text())["references"]
    assert refs[-1] == "127.0.0.1:6000/sglforge/sglang:x" and len(refs) == 4
    assert not done.changelog_written


def test_a_rebuild_pushed_elsewhere_is_the_same_release(root: Path) -> None:
    record_release(root, make_release())
    rebuilt = make_release(
        digest="sha256:" + "7" * 64,
        references=("127.0.0.1:6000/sglforge/sglang:v0.5.14-rocm700-mi355x-1111",),
        published_at="2026-12-02T00:00:00Z",
    )
    done = record_release(root, rebuilt)
    assert done.record_written and not done.changelog_written
    first = find_by_digest(root, "sha256:" + "d" * 64)
    second = find_by_digest(root, "sha256:" + "7" * 64)
    assert first == second and first is not None
    assert first.published_at == "2026-11-30T07:00:00Z" and len(first.references) == 4


def test_record_round_trips_and_rejects_garbage(root: Path) -> None:
    rel = make_release()
    assert from_dict(json.loads(json.dumps(to_dict(rel)))) == rel
    bad = record_path(root, "broken")
    bad.parent.mkdir(parents=True)
    bad.write_text(json.dumps({"version": "x"}))
    with pytest.raises(ConfigError, match="broken.json: not a valid release record"):
        load_records(root)


def test_entry_without_changelog_file_starts_one(tmp_path: Path) -> None:
    done = record_release(tmp_path, make_release())
    text = done.changelog.read_text()
    assert text.startswith("# Changelog") and "## [Unreleased]" in text
    assert text.index("## [Unreleased]") < text.index("## [v0.5.14")


def test_diff_without_previous_and_entry_figures(tmp_path: Path) -> None:
    diff = diff_patches(None, (P1,))
    assert diff.added == (P1,) and diff.previous is None
    write_changelog(
        tmp_path / "CHANGELOG.md", make_release(smoke=Smoke(False, "s", "ttft too slow")), diff
    )
    failed = (tmp_path / "CHANGELOG.md").read_text()
    assert "smoke FAILED (scenario `s`): ttft too slow" in failed


def test_changelog_keeps_its_file_mode(root: Path) -> None:
    (root / "CHANGELOG.md").chmod(0o664)
    done = record_release(root, make_release())
    assert (root / "CHANGELOG.md").stat().st_mode & 0o777 == 0o664
    assert done.record.stat().st_mode & 0o777 == 0o644


def test_targets_of_one_queue_share_a_fork_release_with_standard_sections(root: Path) -> None:
    """Keep a Changelog: one heading per fork version, only its six sections."""
    from sglforge.changelog import SECTIONS

    (root / "CHANGELOG.md").write_text(HEADER + "\n### Fixed\n- A fix someone noted.\n")
    first = record_release(root, make_release("v0.5.14-rocm700-mi300x-1111", target="mi300x"))
    second = record_release(root, make_release())
    assert first.fork_version == second.fork_version == "v0.5.14-1"
    text = (root / "CHANGELOG.md").read_text()
    assert text.count("## [v0.5.14-1] - 2026-11-30") == 1
    entry = text[text.index("## [v0.5.14-1]") :]
    assert "Image `127.0.0.1:5000/sglforge/sglang:v0.5.14-rocm700-mi300x-1111`" in entry
    assert "Image `127.0.0.1:5000/sglforge/sglang:v0.5.14-rocm700-mi355x-1111`" in entry
    assert entry.count(f"- Patch `{P1.name}`") == 1  # patches once, not once per target
    assert "- A fix someone noted." in entry and "- Something the tool gained." in entry
    headings = [line[4:] for line in text.splitlines() if line.startswith("### ")]
    assert headings and set(headings) <= set(SECTIONS)
    # A new upstream version starts again at 1.
    newer = make_release(
        "v0.5.15-rocm700-mi355x-3333",
        upstream_version="0.5.15",
        upstream_ref="v0.5.15",
        published_at="2026-12-05T00:00:00Z",
        date="2026-12-05",
    )
    assert record_release(root, newer).fork_version == "v0.5.15-1"
    text = (root / "CHANGELOG.md").read_text()
    assert text.index("## [v0.5.15-1] - 2026-12-05") < text.index("## [v0.5.14-1]")


def test_the_coverage_gate_round_trips_in_the_record() -> None:
    import dataclasses

    from sglforge.release import Release, from_dict, to_dict

    release = Release(
        version="v0.5.14-rocm700-mi355x-q1234abcd",
        date="2026-12-01",
        target="mi355x",
        image="reg/sglang:v0.5.14-rocm700-mi355x-q1234abcd",
        digest="sha256:" + "0" * 64,
        references=(),
        upstream_url="https://github.com/sgl-project/sglang",
        upstream_ref="v0.5.14",
        upstream_commit="0" * 40,
        upstream_version="0.5.14",
        queue_hash="1234abcd",
        patches=(),
        smoke=None,
    )
    assert from_dict(to_dict(release)).coverage is None  # records from before the gate
    gate = {"passed": False, "failing": [{"expert": 257, "topk": 9}], "accepted": [], "misses": 3}
    with_gate = dataclasses.replace(release, coverage=gate)
    assert from_dict(to_dict(with_gate)).coverage == gate
