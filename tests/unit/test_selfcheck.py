"""How the build's in-image self-check reads a result (pure functions; the in-image part runs
in tests/docker/test_release_replica.py and test_build.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglforge import selfcheck
from sglforge.errors import BuildError

WS = "/sgl-workspace/sglang"
NEXTN = "python/sglang/srt/models/deepseek_nextn.py"
CUH = "python/sglang/jit_kernel/csrc/elementwise/fused_metadata_copy.cuh"
SHA = "a" * 64


@pytest.mark.parametrize(
    ("path", "module", "package", "name"),
    [
        (NEXTN, "sglang.srt.models.deepseek_nextn", None, ""),
        ("python/sglang/srt/layers/__init__.py", "sglang.srt.layers", None, ""),
        (CUH, None, "sglang.jit_kernel.csrc.elementwise", "fused_metadata_copy.cuh"),
        # Not importable names: looked up as plain paths.
        ("python/sglang/jit_kernel/csrc/fast-hadamard-transform/x.cu", None, None, ""),
        ("python/pyproject.toml", None, None, ""),
        ("sgl-kernel/csrc/moe/x.cu", None, None, ""),
    ],
)
def test_how_each_file_is_looked_up(path, module, package, name) -> None:
    e = selfcheck.expectation(path, f"{WS}/{path}", SHA)
    assert (e.module, e.package, e.name) == (module, package, name)


def test_the_unpatched_sibling_is_checked_when_the_tree_has_it(tmp_path: Path) -> None:
    sibling = tmp_path / "python/sglang/srt/server_args.py"
    sibling.parent.mkdir(parents=True)
    sibling.write_text("X = 1\n")
    got = selfcheck.expectations([(NEXTN, f"{WS}/{NEXTN}", SHA)], [], tmp_path)
    assert [e.module for e in got] == ["sglang.srt.models.deepseek_nextn", selfcheck.SIBLING]
    assert got[1].dest == ""  # anywhere, as long as it is the released file
    assert selfcheck.expectations([], [], tmp_path / "empty") == []


def _answer(**found: tuple[str | None, str | None]) -> dict:
    return {
        "cwd": "/sgl-workspace",
        "results": [{"path": p, "found": f, "sha256": s} for p, (f, s) in found.items()],
    }


def test_every_kind_of_wrong_answer_is_a_finding() -> None:
    expected = [
        selfcheck.expectation(NEXTN, f"{WS}/{NEXTN}", SHA),
        selfcheck.expectation(CUH, f"{WS}/{CUH}", SHA),
        selfcheck.expectation("python/sglang/srt/gone.py", None, None),
        selfcheck.expectation("python/sglang/srt/server_args.py", "", "b" * 64),
    ]
    good = {
        NEXTN: (f"{WS}/{NEXTN}", SHA),
        CUH: (f"{WS}/{CUH}", SHA),
        "python/sglang/srt/gone.py": (None, None),
        "python/sglang/srt/server_args.py": ("/elsewhere/server_args.py", "b" * 64),
    }
    assert selfcheck.findings(expected, _answer(**good)) == []
    cases = {
        # the overlay landed beside the package (the namespace-shadow defect)
        NEXTN: (None, None),
        # resolves somewhere else than where the build wrote it
        CUH: ("/sgl-workspace/sglang/jit_kernel/csrc/elementwise/fused_metadata_copy.cuh", SHA),
        # deleted by the queue but still importable
        "python/sglang/srt/gone.py": (f"{WS}/python/sglang/srt/gone.py", "c" * 64),
        # the released sibling no longer resolves
        "python/sglang/srt/server_args.py": (None, None),
    }
    for path, wrong in cases.items():
        found = selfcheck.findings(expected, _answer(**{**good, path: wrong}))
        assert [f.path for f in found] == [path], found
        assert found[0].cwd == "/sgl-workspace"
    stale = selfcheck.findings(expected, _answer(**{**good, NEXTN: (f"{WS}/{NEXTN}", "d" * 64)}))
    assert "sha256 dddddddddddd" in stale[0].problem and "aaaaaaaaaaaa" in stale[0].problem


def test_failure_names_the_file_and_counts_the_rest() -> None:
    found = [
        selfcheck.Finding(NEXTN, "/", "module sglang.srt.models.deepseek_nextn does not resolve"),
        selfcheck.Finding(CUH, "/", "x"),
    ]
    err = selfcheck.failure("img:1", found)
    assert isinstance(err, BuildError) and err.exit_code == 6
    assert "deepseek_nextn" in err.message and "(and 1 more)" in err.message


@pytest.mark.parametrize("script", ["probe", "selfcheck"])
def test_in_image_scripts_parse_as_the_release_images_python(script: str) -> None:
    """The replica runs Python 3.11; the rocm700/rocm720 release images run 3.10 (rocm724
    3.12). The scripts sglforge runs inside them must be valid Python 3.10."""
    import ast

    from sglforge.bases import _SGLANG_PROBE

    code = _SGLANG_PROBE if script == "probe" else selfcheck._SCRIPT
    ast.parse(code, feature_version=(3, 10))
