"""A CI log of ``publish --json`` (stderr only) states the outcome (issue 45, U12): each
gate's verdict, the bench's comparison, and whether and where the image was published."""

from __future__ import annotations

from pathlib import Path

from gate_records import bench_gate
from sglforge.cli.publish import outcome_lines
from sglforge.gates.result import failed, passed, skipped
from sglforge.publish import PublishResult

IMM = "127.0.0.1:5000/ns/sglang:v0.5.14-rocm700-mi355x-q1234abcd"


def result(**kw: object) -> PublishResult:
    base: dict[str, object] = dict(
        target="mi355x-rocm700",
        registry="127.0.0.1:5000",
        image="ns/sglang:v0.5.14-rocm700-mi355x-q1234abcd",
        immutable=IMM,
        friendly=(),
        scenario="smoke/x.toml",
        dry_run=False,
        skip_smoke=False,
    )
    return PublishResult(**{**base, **kw})  # type: ignore[arg-type]


def test_a_published_release_names_each_gate_the_comparison_and_the_digest(
    tmp_path: Path,
) -> None:
    from test_bench_outputs import _change, _report

    compared = _report(tmp_path, changes=(_change(0.995),))  # a drop inside the noise
    r = result(
        gates=(
            skipped("scan", "not a ROCm scenario"),
            passed("smoke", "passed"),
            bench_gate(compared),
        ),
        digest="sha256:77ea",
        pushed=(IMM, IMM.rsplit(":", 1)[0] + ":latest-mi355x"),
    )
    lines = outcome_lines(r)
    assert lines[0] == "gate scan: skipped: not a ROCm scenario"
    assert lines[1] == "gate smoke: passed" and lines[2] == "gate bench: passed"
    assert any("no significant drop" in ln and ln.startswith("bench vs baseline:") for ln in lines)
    assert lines[-1] == f"publish mi355x-rocm700: published {IMM}@sha256:77ea; moved latest-mi355x"


def test_an_uncompared_bench_is_said_once(tmp_path: Path) -> None:
    from test_bench_outputs import _report

    why = "no earlier release of mi355x in R; --no-baseline: first release"
    alone = _report(tmp_path, baseline=None, changes=(), no_baseline=why)
    r = result(gates=(bench_gate(alone, unevaluated=why),), digest="sha256:77ea", pushed=(IMM,))
    assert [ln for ln in outcome_lines(r) if "comparison" in ln] == [
        f"bench comparison: NOT RUN ({why})"
    ]


def test_a_refused_publish_says_not_published_with_its_exit_code() -> None:
    r = result(
        gates=(failed("bench", "FAILED: knee output tok/s dropped", "bench failed: ...", 1),),
        error="bench failed: ...",
        exit_code=1,
    )
    assert outcome_lines(r) == [
        "gate bench: FAILED: knee output tok/s dropped",
        "publish mi355x-rocm700: NOT published (exit 1)",
    ]


def test_a_dry_run_says_nothing_was_done() -> None:
    assert outcome_lines(result(dry_run=True)) == ["publish mi355x-rocm700: dry run, nothing done"]


def test_the_stand_in_line_names_only_what_ran() -> None:
    from sglforge.cli.publish import render

    def line(*gates: object) -> str:
        r = result(standin=True, gates=gates, digest="sha256:77ea", pushed=(IMM,))
        return next(ln for ln in render(r).splitlines() if ln.startswith("STAND-IN"))

    smoke = passed("smoke", "passed")
    assert "the smoke ran" in line(smoke, skipped("bench", "the scenario has no [bench] table"))
    assert "the smoke and bench ran" in line(smoke, passed("bench", "passed"))
