"""What a user types for an upstream or a ref: a version for its tag (pip's spelling), a typo
in the scheme named as such, a pin outside a pypi: spec named as such."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from sglforge.cli import main
from sglforge.errors import UpstreamError
from sglforge.queue.upstream import Upstream, check_source
from synthetic import make_project, make_upstream


def cli(root: Path, *args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, ["--root", str(root), *args])
    return res.exit_code, res.stdout, res.stderr


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path, make_upstream(tmp_path))


def test_a_version_names_its_tag(project: Path) -> None:
    code, out, err = cli(project, "patches", "check", "--ref", "1.1", "--ref", "v1.0", "--json")
    import json

    assert [r["ref"] for r in json.loads(out)["refs"]] == ["v1.1", "v1.0"], err
    code, out, err = cli(project, "patches", "apply", "--ref", "1.0")
    assert code == 0 and "applied at v1.0" in out, err
    assert (project / "build" / "worktrees" / "v1.0").is_dir()
    code, out, err = cli(project, "patches", "refresh", "--ref", "1.1", "--dry-run")
    assert "v1.1" in out + err and "'1.1' not found" not in err
    # a version that is no tag at all is still named as the user typed it
    code, out, err = cli(project, "patches", "check", "--ref", "9.9")
    assert code == 3 and "ref '9.9' not found" in err


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("pypy:sglang", "unknown scheme 'pypy:' (did you mean pypi:sglang?)"),
        ("pyip:sglang>=0.5", "unknown scheme 'pyip:' (did you mean pypi:sglang>=0.5?)"),
        ("htttps://github.com/x/y", "unknown scheme 'htttps:' (did you mean 'https'?)"),
        ("gti://host/repo", "unknown scheme 'gti:' (did you mean 'git'?)"),
    ],
)
def test_an_unknown_scheme_is_named(project: Path, source: str, said: str) -> None:
    code, out, err = cli(project, "patches", "check", "--upstream", source)
    assert code == 3 and said in err, err
    assert "unreachable" not in err


@pytest.mark.parametrize(
    "source",
    ["git@github.com:sgl-project/sglang.git", "github.com:sgl-project/sglang", "pypi:sglang"],
)
def test_real_sources_are_not_called_typos(source: str) -> None:
    assert check_source(source) == source


def test_a_pin_outside_the_pypi_spec_is_named(tmp_path: Path) -> None:
    cache = tmp_path / "history.git"
    subprocess.run(["git", "init", "-q", "--bare", str(cache)], check=True)
    up = Upstream("pypi:sglang>=0.5.22", "pypi:sglang", cache, python_only=True)
    with pytest.raises(UpstreamError) as err:
        up.resolve("v0.5.14")
    assert "v0.5.14 is outside pypi:sglang>=0.5.22" in err.value.message
    assert "pypi:sglang>=0.5.14" in (err.value.hint or "")
    with pytest.raises(UpstreamError) as err:  # inside the spec but missing: the usual message
        up.resolve("v0.5.23")
    assert "not found" in err.value.message


def test_hints_repeat_the_upstream_in_effect(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pasting a hint works: each names the --upstream the command was given (fix-d conflicts
    at v1.1), in apply's error, refresh's message and upgrade's NOT READY reason and report."""
    mirror = tmp_path / "mirror"
    subprocess.run(["git", "clone", "-q", str(tmp_path / "upstream"), str(mirror)], check=True)
    flag = f"--upstream {mirror}"
    code, out, err = cli(project, "patches", "apply", "--ref", "v1.1", "--upstream", str(mirror))
    # the error's hint also repeats --root (cli() passes it): pasted anywhere, same project
    root = f"--root {project.resolve()}"
    assert code == 4 and f"sglforge {root} patches refresh --ref v1.1 {flag}" in err, err
    assert f"sglforge {root} upgrade --to v1.1 {flag}" in err
    code, out, err = cli(project, "patches", "refresh", "--ref", "v1.1", "--upstream", str(mirror))
    assert code == 1 and f"sglforge patches apply --ref v1.1 {flag}" in out, out
    code, out, err = cli(
        project, "upgrade", "--to", "v1.1", "--upstream", str(mirror), "--no-build", "--json"
    )
    import json

    doc = json.loads(out)
    assert code == 1 and f"sglforge upgrade --to v1.1 {flag}" in doc["reason"], doc
    assert f"sglforge patches apply --ref v1.1 {flag}" in doc["reason"]
    # the pin's own URL needs no flag
    code, out, err = cli(project, "patches", "refresh", "--ref", "v1.1")
    assert "--upstream" not in out
    # no --root given (found by walking up from here): none added
    monkeypatch.chdir(project)
    monkeypatch.delenv("SGLFORGE_ROOT", raising=False)
    res = CliRunner().invoke(main, ["patches", "apply", "--ref", "v1.1", "--upstream", str(mirror)])
    assert res.exit_code == 4 and "sglforge patches refresh" in res.stderr
    assert "--root" not in res.stderr


def test_tags_spec_may_name_the_pin(project: Path) -> None:
    """`--tags '>=pin'` (what init's workflow runs): the pin and every later release."""
    import json

    for spec, refs in ((">=pin", ["v1.0", "v1.1"]), (">pin", ["v1.1"]), ("==pin", ["v1.0"])):
        code, out, err = cli(project, "patches", "check", "--tags", spec, "--json")
        assert [r["ref"] for r in json.loads(out)["refs"]] == refs, (spec, err)
