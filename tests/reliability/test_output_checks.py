"""Issue 10: everything checkable is checked before long work. Output paths that cannot be
written (--junit, --summary, --changelog, --log-dir, $GITHUB_STEP_SUMMARY) and registry
references that cannot be pushed to are exit 2 at once, before any build or smoke run."""

from __future__ import annotations

from pathlib import Path

import pytest
from reliability_helpers import cli, empty_project

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = empty_project(tmp_path / "proj")
    (root / "smoke").mkdir()
    text = (REPO / "smoke" / "standin-cpu.toml").read_text()
    (root / "smoke" / "cpu.toml").write_text(text.replace("../tests/standin/model", "."))
    (root / "a-file").write_text("not a folder\n")
    (root / "a-folder").mkdir()
    return root


def unwritable(root: Path) -> list[str]:
    """Paths no one can write a file at, root included (permission bits do not stop root)."""
    return [
        str(root / "a-folder"),  # a folder, not a file
        str(root / "a-file" / "report.xml"),  # under a regular file
        "/dev/null/report.xml",  # under a device
        "/proc/sglforge-report.xml",  # procfs takes no new files
    ]


@pytest.mark.parametrize("option", ["--junit", "--summary", "--changelog"])
@pytest.mark.parametrize("index", range(4))
def test_publish_output_paths_are_checked_first(project: Path, option: str, index: int) -> None:
    bad = unwritable(project)[index]
    code, out, err = cli(project, "publish", "--registry", "127.0.0.1:1", option, bad)
    assert code == 2, (out, err)
    assert option in err and ("cannot write" in err or "is a directory" in err)
    assert not (project / "build").exists()  # nothing built, applied or logged


@pytest.mark.parametrize("index", range(4))
def test_smoke_junit_and_step_summary_are_checked_first(project: Path, index: int) -> None:
    bad = unwritable(project)[index]
    scenario = str(project / "smoke" / "cpu.toml")
    code, _, err = cli(project, "smoke", "--image", "x:1", "--scenario", scenario, "--junit", bad)
    assert code == 2 and "--junit" in err, err
    code, _, err = cli(
        project, "smoke", "--image", "x:1", "--scenario", scenario, env={"GITHUB_STEP_SUMMARY": bad}
    )
    assert code == 2 and "GITHUB_STEP_SUMMARY" in err, err
    assert not (project / "build" / "smoke").exists()


@pytest.mark.parametrize("bad", ["a-file", "a-file/sub", "/dev/null/logs", "/proc/sglforge-logs"])
def test_smoke_log_dir_is_checked_first(project: Path, bad: str) -> None:
    path = bad if bad.startswith("/") else str(project / bad)
    scenario = str(project / "smoke" / "cpu.toml")
    code, _, err = cli(
        project, "smoke", "--image", "x:1", "--scenario", scenario, "--log-dir", path
    )
    assert code == 2 and "--log-dir" in err, err


def test_a_writable_new_path_is_left_as_it_was(project: Path) -> None:
    from sglforge.util import check_output_dir, check_output_file

    target = project / "deep" / "er" / "report.xml"
    assert check_output_file(target, "--junit") == target and not target.exists()
    existing = project / "a-file"
    check_output_file(existing, "--summary")
    assert existing.read_text() == "not a folder\n"  # appended nothing, truncated nothing
    assert check_output_dir(project / "logs" / "x", "--log-dir").is_dir()
    assert list((project / "logs" / "x").iterdir()) == []


BAD_REGISTRIES = [
    ("127.0.0.1:5000/Team", "must be lowercase"),
    ("ghcr.io/ORG/x", "must be lowercase"),
    ("127.0.0.1:0", "not a TCP port"),
    ("127.0.0.1:70000", "not a TCP port"),
    ("127.0.0.1:abc", "not a registry host"),
    ("registry", "not a registry host"),
    ("", "empty"),
    ("ghcr.io/org//x", "not a valid name"),
    ("ghcr.io/or$g", "not a valid name"),
    ("ghcr.io/-org", "not a valid name"),
]


@pytest.mark.parametrize(("registry", "why"), BAD_REGISTRIES)
def test_registry_reference_is_validated_at_parse_time(
    project: Path, registry: str, why: str
) -> None:
    code, out, err = cli(project, "publish", "--registry", registry, "--skip-smoke")
    assert code == 2, (out, err)
    assert why in err and "--registry" in err
    assert not (project / "build").exists()


@pytest.mark.parametrize(
    "registry", ["127.0.0.1:5000", "localhost:5000/team", "ghcr.io/org", "[::1]:5000/a-b/c_d.e"]
)
def test_good_registry_references_pass(registry: str) -> None:
    from sglforge.engine.reference import check_registry

    assert check_registry(registry) == registry
