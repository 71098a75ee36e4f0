"""Issue 10: credentials are never printed. A planted secret is looked for in every output
channel (stdout, stderr, --json, the JUnit file, the step summary, every file under build/)
across commands and paths: userinfo in --registry or an image reference is refused at parse
time (exit 2) without being echoed; a refused password from the environment (exit 8) is not
shown either."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from reliability_helpers import cli, empty_project

from junit_schema import assert_valid_junit
from sglforge.engine.reference import check_registry, parse
from sglforge.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
SECRET = "pl4nted-S3cret-7f1e"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return empty_project(tmp_path / "proj")


def scan(root: Path, *texts: str) -> None:
    """The secret is in none of ``texts`` nor any file under ``root`` (reports, logs, build/)."""
    for text in texts:
        assert SECRET not in text, text
    for path in root.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


REGISTRIES = [
    f"user:{SECRET}@127.0.0.1:5000",
    f"user:{SECRET}@127.0.0.1:5000/team",
    f"https://user:{SECRET}@ghcr.io/org",
    f"http://{SECRET}@localhost:5000",
    f"{SECRET}@registry.example.com",
    f"user:{SECRET}@[::1]:5000",
]


@pytest.mark.parametrize("registry", REGISTRIES)
@pytest.mark.parametrize("extra", [[], ["--dry-run"], ["--skip-smoke"]])
def test_publish_refuses_userinfo_at_parse_time_unshown(
    project: Path, tmp_path: Path, registry: str, extra: list[str]
) -> None:
    junit, summary, step = tmp_path / "p.xml", tmp_path / "s.md", tmp_path / "step.md"
    code, out, err = cli(
        project,
        "publish",
        "--registry",
        registry,
        "--json",
        "--junit",
        str(junit),
        "--summary",
        str(summary),
        *extra,
        env={"GITHUB_STEP_SUMMARY": str(step)},
    )
    assert code == 2, (out, err)
    assert "credentials" in err and "not shown" in err
    scan(tmp_path, out, err)
    # Refused before anything ran: no build, no report.
    assert not (project / "build").exists() and not junit.exists()


@pytest.mark.parametrize(
    "image",
    [
        f"user:{SECRET}@127.0.0.1:5000/sglforge/sglang:v1",
        f"https://u:{SECRET}@ghcr.io/org/sglang:latest",
        f"{SECRET}@localhost:5000/x:y",
    ],
)
@pytest.mark.parametrize("pull", [[], ["--pull"], ["--json"]])
def test_inspect_refuses_userinfo_unshown(
    project: Path, tmp_path: Path, image: str, pull: list[str]
) -> None:
    code, out, err = cli(project, "inspect", *pull, image)
    assert code == 2, (out, err)
    scan(tmp_path, out, err)


def test_the_core_parsers_never_echo_it() -> None:
    for text in REGISTRIES:
        with pytest.raises(ConfigError) as exc:
            check_registry(text)
        assert SECRET not in str(exc.value)
        with pytest.raises(ConfigError) as exc:
            parse(text.split("://")[-1] + "/x:y")
        assert SECRET not in str(exc.value)


@pytest.mark.docker
@pytest.mark.registry
def test_a_refused_password_from_the_environment_is_never_printed(
    project: Path, tmp_path: Path, registry
) -> None:
    """SGLFORGE_REGISTRY_PASSWORD wrong: exit 8 before the build, the password nowhere."""
    reg = registry("alice", "the-right-one")
    junit, summary = tmp_path / "p.xml", tmp_path / "s.md"
    code, out, err = cli(
        project,
        "publish",
        "--registry",
        reg.address,
        "--skip-smoke",
        "--json",
        "--junit",
        str(junit),
        "--summary",
        str(summary),
        env={"SGLFORGE_REGISTRY_USER": "alice", "SGLFORGE_REGISTRY_PASSWORD": SECRET},
    )
    assert code == 8, (out, err)
    assert "refused" in err and json.loads(out)["exit_code"] == 8
    assert junit.is_file() and summary.is_file()  # the reports say why, without the secret
    assert_valid_junit(junit)
    scan(tmp_path, out, err)
