"""Publish helpers without an engine: references, scenario choice, reports, provenance."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from gate_records import smoke_gate
from junit_schema import assert_valid_junit
from sglforge.engine import reference
from sglforge.engine.reference import Registry
from sglforge.errors import ConfigError
from sglforge.provenance import provenance_from
from sglforge.publish import PublishResult, Step, references
from sglforge.reports.publish import STAGES, junit_xml, markdown, summary
from sglforge.scenario.file import find_scenario
from sglforge.smoke.report import Check

IMAGE = "sglforge/sglang:v0.5.14-rocm700-mi355x-q1a2b3c4d"


def test_references_immutable_first_then_friendly_tags() -> None:
    immutable, friendly = references(Registry("127.0.0.1:5000"), IMAGE, "mi355x")
    assert immutable == "127.0.0.1:5000/sglforge/sglang:v0.5.14-rocm700-mi355x-q1a2b3c4d"
    assert friendly == (
        "127.0.0.1:5000/sglforge/sglang:v0.5.14-rocm700-mi355x",
        "127.0.0.1:5000/sglforge/sglang:latest-mi355x",
    )
    # A ROCm flavour that is not the target's default gets its own latest tag.
    other = "sglforge/sglang:v0.5.14-rocm720-mi355x-q1a2b3c4d"
    _, friendly = references(Registry("ghcr.io/org/"), other, "mi355x", default_rocm=False)
    assert friendly == (
        "ghcr.io/org/sglforge/sglang:v0.5.14-rocm720-mi355x",
        "ghcr.io/org/sglforge/sglang:latest-mi355x-rocm720",
    )


def test_a_registry_is_checked_when_made_and_never_again(monkeypatch: pytest.MonkeyPatch) -> None:
    made = Registry("http://127.0.0.1:5000/")
    assert (made.prefix, made.host, str(made)) == ("127.0.0.1:5000",) * 3
    ns = Registry("ghcr.io/org")
    assert (ns.prefix, ns.host) == ("ghcr.io/org", "ghcr.io")
    with pytest.raises(ConfigError, match="--registry 'myteam': 'myteam' is not a registry host"):
        Registry("myteam")
    with pytest.raises(ConfigError, match="--registry is empty"):
        Registry(" ")
    checked: list[str] = []
    real = reference.check_registry
    monkeypatch.setattr(reference, "check_registry", lambda t: checked.append(t) or real(t))
    references(ns, IMAGE, "mi355x")
    references(ns, IMAGE, "mi300x", default_rocm=False)
    assert checked == []  # the value carries its check; the core does not repeat it
    Registry("ghcr.io/org")
    assert checked == ["ghcr.io/org"]  # (the counter counts)


def scenario(folder: Path, name: str, target: str | None) -> Path:
    path = folder / "smoke" / name
    path.parent.mkdir(exist_ok=True)
    line = f'target = "{target}"\n' if target else ""
    path.write_text(f'[scenario]\nname = "{path.stem}"\n{line}')
    return path


def test_find_scenario_by_target(tmp_path: Path) -> None:
    scenario(tmp_path, "cpu.toml", None)
    want = scenario(tmp_path, "glm.toml", "mi355x")
    scenario(tmp_path, "mi300.toml", "mi300x")
    assert find_scenario(tmp_path, "mi355x", "mi355x-rocm700") == want
    with pytest.raises(ConfigError, match="target = 'gfx1100'"):
        find_scenario(tmp_path, "gfx1100")
    scenario(tmp_path, "glm-b.toml", "mi355x")
    with pytest.raises(ConfigError, match="several smoke scenarios"):
        find_scenario(tmp_path, "mi355x")
    exact = scenario(tmp_path, "glm-720.toml", "mi355x-rocm720")
    assert find_scenario(tmp_path, "mi355x", "mi355x-rocm720") == exact


def result(**kw: object) -> PublishResult:
    base = dict(
        target="mi355x-rocm700",
        registry="127.0.0.1:5000",
        image=IMAGE,
        immutable="127.0.0.1:5000/" + IMAGE,
        friendly=("127.0.0.1:5000/sglforge/sglang:latest-mi355x",),
        scenario="smoke/x.toml",
        dry_run=False,
        skip_smoke=False,
    )
    smoke = {k: kw.pop(k) for k in ("smoke_passed", "smoke_checks") if k in kw}
    if smoke:
        # what the smoke found is its gate's record; None: it could not run
        ok = smoke.get("smoke_passed")
        checks = tuple(smoke.get("smoke_checks", ()))  # type: ignore[arg-type]
        gate = smoke_gate(bool(ok), checks, verdict="cannot-run" if ok is None else "")
        kw["gates"] = (*kw.get("gates", ()), gate)  # type: ignore[misc]
    base.update(kw)
    return PublishResult(**base)  # type: ignore[arg-type]


def test_json_document_has_the_promised_keys_and_reports_parse() -> None:
    failed = result(
        smoke_passed=False,
        smoke_checks=(
            Check("serves", True),
            Check("decode-speed", False, 12.0, 50, "12 < 50"),
        ),
        steps=(Step("build", True, 1.0, "built"), Step("smoke", False, 3.0, "failed")),
        error="smoke failed: decode-speed; nothing was pushed",
        exit_code=1,
    )
    doc = summary(failed)
    assert doc["pushed"] == [] and doc["digest"] is None and doc["smoke_passed"] is False
    assert_valid_junit(junit_xml(failed, "mi355x"))
    suite = ET.fromstring(junit_xml(failed, "mi355x").split("\n", 1)[1]).find("testsuite")
    assert suite is not None
    assert (suite.get("failures"), suite.get("tests"), suite.get("skipped")) == ("2", "13", "8")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    # Stable names; the stages the failure stopped are there, skipped.
    assert list(cases) == [
        "prepare",
        "scan",
        "build",
        "coverage",
        "smoke",
        "smoke.serves",
        "smoke.decode-speed",
        "bench",
        "push",
        "tag.version",
        "tag.latest",
        "record",
        "record-push",
    ]
    failure = cases["smoke.decode-speed"].find("failure")
    assert failure is not None
    assert failure.get("message") == "decode-speed: value 12, threshold 50: 12 < 50"
    skipped = cases["push"].find("skipped")
    assert skipped is not None and skipped.get("message") == "not reached: smoke failed"
    text = markdown(failed, "mi355x")
    # a cell's text is HTML-escaped (it renders as "12 < 50"; issue 42, F16)
    assert "failed, nothing moved" in text
    assert "| decode-speed | FAIL | 12 | 50 | 12 &lt; 50 |" in text  # the smoke's own table
    ok = result(pushed=("a", "b"), digest="sha256:" + "0" * 64, smoke_passed=True, tested=True)
    assert "published" in markdown(ok, "mi355x") and "FAIL" not in markdown(ok, "mi355x")
    assert_valid_junit(junit_xml(ok, "mi355x"))
    stopped = ET.fromstring(junit_xml(None, "mi355x", "no engine").split("\n", 1)[1])
    assert stopped.get("failures") == "1" and stopped.get("tests") == str(len(STAGES))
    assert_valid_junit(junit_xml(None, "mi355x", "no engine"))


def test_junit_names_are_stable_across_outcomes() -> None:
    """Digests, refs and errors never reach a case name; a dry run plans every stage."""
    friendly = (
        "127.0.0.1:5000/sglforge/sglang:v0.5.14-rocm700-mi355x",
        "127.0.0.1:5000/sglforge/sglang:latest-mi355x",
    )
    ok = result(
        friendly=friendly,
        pushed=("a", *friendly),
        digest="sha256:" + "1" * 64,
        smoke_passed=True,
        tested=True,
        steps=(
            Step("build", True, 1.0, "built"),
            Step("smoke", True, 2.0, "passed"),
            Step("push", True, 1.0, "127.0.0.1:5000/x@sha256:" + "1" * 64),
            Step("tag", True, 0.5, friendly[0]),
            Step("tag", False, 0.5, "registry said 500"),
            Step("record", True, 0.1, "build/releases/x.json"),
        ),
        error="registry said 500",
    )
    xml = junit_xml(ok, "mi355x")
    assert_valid_junit(xml)
    root = ET.fromstring(xml.split("\n", 1)[1])
    names = [c.get("name") for c in root.iter("testcase")]
    assert names == list(STAGES)
    (bad,) = [c for c in root.iter("testcase") if c.find("failure") is not None]
    assert bad.get("name") == "tag.latest"
    dry = junit_xml(result(dry_run=True, steps=(Step("build", None, 0, "planned"),)), "mi355x")
    assert_valid_junit(dry)
    assert [c.get("name") for c in ET.fromstring(dry.split("\n", 1)[1]).iter("testcase")] == list(
        STAGES
    )


def test_provenance_prefers_the_manifest_and_falls_back_to_labels() -> None:
    labels = {
        "io.sglforge.queue-hash": "q" * 64,
        "io.sglforge.patches": "0001-a.patch,0002-b.patch",
        "io.sglforge.target": "mi355x",
        "io.sglforge.gpu-arch": "gfx950",
        "io.sglforge.sglang-version": "0.5.14",
        "org.opencontainers.image.revision": "c" * 40,
        "org.opencontainers.image.base.name": "lmsysorg/sglang:v0.5.14-rocm700-mi35x",
        "unrelated": "x",
    }
    only_labels = provenance_from("img", labels, None)
    assert [p.name for p in only_labels.patches] == ["0001-a.patch", "0002-b.patch"]
    assert only_labels.patches[0].sha256 == "" and not only_labels.manifest_found
    assert only_labels.upstream_commit == "c" * 40 and "unrelated" not in only_labels.labels
    manifest = {
        "sglang_version": "0.5.14",
        "target": "mi355x",
        "gpu_arch": "gfx950",
        "base": {"name": "b", "digest": "sha256:" + "b" * 64},
        "upstream": {"url": "u", "ref": "v0.5.14", "commit": "d" * 40, "revision": "e" * 40},
        "queue": {
            "hash": "h" * 64,
            "patches": [{"name": "0001-a.patch", "sha256": "1" * 64, "subject": "A"}],
        },
    }
    full = provenance_from("img", labels, manifest, statuses={"1" * 64: "Backport"})
    assert full.queue_hash == "h" * 64 and full.upstream_commit == "e" * 40
    assert full.patches[0].upstream_status == "Backport" and full.base_digest.endswith("b")
    assert full.is_sglforge_image
    assert not provenance_from("debian", {}, None).is_sglforge_image


def test_the_text_view_pins_the_digest_and_shows_failed_checks() -> None:
    """Pull and run by digest (a friendly tag moves later; the port's colon is no tag); a
    smoke that failed or could not run shows its checks as `sglforge smoke` does."""
    from sglforge.cli.publish import by_digest, render

    digest = "sha256:" + "ab" * 32
    friendly = "127.0.0.1:5000/sglforge/sglang:latest-mi355x"
    done = result(
        pushed=("127.0.0.1:5000/" + IMAGE, friendly),
        digest=digest,
        smoke_passed=True,
        tested=True,
        run=f"docker run --rm -it --network host {friendly} python3 -m sglang.launch_server",
        steps=(Step("push", True, 1.0, "pushed"),),
    )
    text = render(done)
    assert f"127.0.0.1:5000/sglforge/sglang@{digest} python3 -m sglang.launch_server" in text
    assert "by digest" in text and by_digest(done) is not None
    assert by_digest(result(run="docker run x", digest=None)) is None
    cannot = result(
        smoke_passed=None,
        smoke_checks=(
            Check("preflight.devices", False, detail="/dev/kfd missing"),
            Check("preflight.gpu-arch", False, "none", "gfx950", "no GPU"),
            Check("serves", False, detail="not run", skipped=True),
        ),
        steps=(Step("smoke", False, 0.0, "cannot-run"),),
        error="smoke cannot-run",
        exit_code=7,
    )
    text = render(cannot)
    for needed in ("check", "threshold", "preflight.devices", "/dev/kfd missing", "gfx950", "skip"):
        assert needed in text, needed
    assert "threshold" not in render(done)  # a passed smoke: its figures, not a check table


def test_inspect_shows_the_newest_local_smoke_run_as_unpublished(tmp_path: Path) -> None:
    """No release record (only publish writes one): the newest `sglforge smoke` report of
    this very image ID, marked as not published."""
    import json

    from sglforge.cli.inspect import prov_json, render_provenance
    from sglforge.inspect import local_smoke
    from sglforge.provenance import Provenance

    image_id = "sha256:" + "1" * 64
    runs = [
        ("a", image_id, "2026-12-01T09:00:00Z", "failed"),
        ("b", image_id, "2026-12-01T10:00:00Z", "passed"),
        ("c", "sha256:" + "2" * 64, "2026-12-01T11:00:00Z", "passed"),  # another image
    ]
    for name, iid, at, verdict in runs:
        folder = tmp_path / "build" / "smoke" / name
        folder.mkdir(parents=True)
        doc = {"passed": verdict == "passed", "verdict": verdict, "image_id": iid}
        doc |= {"scenario": "standin-cpu", "started_at": at, "figures": {"decode_tok_s": 9.5}}
        (folder / "report.json").write_text(json.dumps(doc))
    (tmp_path / "build" / "smoke" / "broken").mkdir()
    (tmp_path / "build" / "smoke" / "broken" / "report.json").write_text("{not json")
    smoke, report, at = local_smoke(tmp_path, image_id) or (None, "", "")
    assert smoke is not None and smoke.verdict == "passed" and at == "2026-12-01T10:00:00Z"
    assert report.endswith("b/report.json")
    assert (
        local_smoke(tmp_path, "sha256:" + "3" * 64) is None and local_smoke(None, image_id) is None
    )
    p = Provenance(
        image="x:y",
        queue_hash="0" * 64,
        local_smoke=smoke,
        local_smoke_report=report,
        local_smoke_at=at,
    )
    text = render_provenance(p)
    assert (
        "NOT published" in text and "decode_tok_s" in text and "smoke figures unknown" not in text
    )
    assert prov_json(p)["local_smoke"]["published"] is False


def test_a_skipped_gate_says_so_with_its_reason_in_every_output() -> None:
    from sglforge.cli.publish import render
    from sglforge.gates import passed, skipped
    from sglforge.reports.publish import markdown

    why = "no config.json in /models/x on this host"
    gates = (
        skipped("scan", why),
        passed("coverage", "3 lookup group(s), no hot miss"),
        passed("smoke", "passed"),
        skipped("bench", "the scenario has no [bench] table"),
    )
    steps = tuple(Step(g.name, g.ok, 0.1, g.detail) for g in gates)
    done = result(gates=gates, steps=(steps[0], Step("build", True, 1.0, "built"), *steps[1:]))
    text = render(done)
    assert f"skipped: {why}" in text and "skipped: the scenario has no [bench] table" in text
    doc = summary(done)
    (scan,) = [g for g in doc["gates"] if g["name"] == "scan"]
    assert scan == {"name": "scan", "ran": False, "ok": None, "detail": f"skipped: {why}"} | {
        "why": why,
        "error": None,
    }
    assert f"- gate scan: skipped ({why})" in markdown(done, "mi355x")
    assert "- gate bench: skipped (the scenario has no [bench] table)" in markdown(done, "mi355x")
    suite = ET.fromstring(junit_xml(done, "mi355x").split("\n", 1)[1]).find("testsuite")
    assert suite is not None
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    skip = cases["scan"].find("skipped")
    assert skip is not None and why in (skip.get("message") or "")
    assert cases["coverage"].find("skipped") is None and cases["coverage"].find("failure") is None


@pytest.mark.parametrize(
    ("record", "standin", "prior"),
    [
        ({"scenario": "glm", "hardware": "gpu", "knee": {"request_rate": 2.3, "failed_at": 2.6}},
         False, (2.3, 2.6)),
        ({"scenario": "glm", "hardware": "gpu", "knee": {"request_rate": 2.3, "failed_at": None}},
         False, (2.3, None)),
        # another scenario's knee, or a stand-in's for a GPU run (and back), says nothing here
        ({"scenario": "other", "hardware": "gpu", "knee": {"request_rate": 2.3}}, False, None),
        ({"scenario": "glm", "hardware": "standin-cpu", "knee": {"request_rate": 9.0}}, False,
         None),
        ({"scenario": "glm", "hardware": "gpu", "knee": {"request_rate": 2.3}}, True, None),
        # no knee found, or not a number
        ({"scenario": "glm", "hardware": "gpu", "knee": None}, False, None),
        ({"scenario": "glm", "hardware": "gpu", "knee": {"request_rate": True}}, False, None),
        (None, False, None),
    ],
)  # fmt: skip
def test_the_search_starts_from_the_last_release_s_knee_only_when_it_is_comparable(
    record: dict[str, Any] | None, standin: bool, prior: tuple[float, float | None] | None
) -> None:
    from types import SimpleNamespace

    from sglforge.publish import _knee_prior

    run = SimpleNamespace(scenario=SimpleNamespace(name="glm"), standin=standin)
    assert _knee_prior(run, record) == prior  # type: ignore[arg-type]
