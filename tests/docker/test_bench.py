"""``sglforge bench`` and the publish gate against a real engine: a replica of the sglang 0.5.14
release image with what its bench_serving imports (``ensure_sglang_base(bench=True)``, the
publish project's base, shared by every test here), the stand-in server's cost model, the
release's own ``python3 -m sglang.bench_serving`` as the client, and one local registry on
127.0.0.1 for the module. Every figure here is the STAND-IN's arithmetic.

What each test shows (and what it cost on the shared 2-core machine, docs/bench.md):
- an unchanged image passes against a baseline that exists only in the registry (pulled by
  digest), and the bench's table, Mermaid charts, JUnit figures, knee search (against the cost
  model's analytic capacity) and server-counted tokens (1 + 1 boots, speed probe only);
- a 5 % slower image is refused and the compared figure moves with the server (2 + 2 boots,
  ABBA, speed probe only);
- simulated acceptance is refused, and a stand-in is refused for a GPU target (no boot);
- in a publish: the first release (--no-baseline) is recorded with its single stream (text
  prompts, the server's count, the accept length), a 10 % slower one is refused with nothing
  pushed, then published with --accept-regression (1, 1 + 1 and 1 + 1 boots, one knee probe
  each).

The single stream (2 requests a boot here) is compared in no Docker test: on this loaded
machine an unchanged image's single stream read 7-17 % below its baseline's in three of three
1 + 1 runs, far beyond the +-2 % per-boot noise the gate declares; the power study holds its
statistics. The unchanged comparison is given a node profile of the machine's own noise
(--noise-profile: 5 % a boot, as a calibration of this loaded machine would measure; one boot
a side measures no noise of its own) and so the drop its pass rules out (max_mde 0.40).

The stand-in runs on a slower clock than its default for these tests (decode 100 tok/s,
16-token outputs: the same time per request, a quarter of the steps), so that the Python
work of each step, which CPU contention stretches, is a quarter as large a share of a
request's time: on a loaded machine the boots of one image read 5-10 % apart at 400 tok/s.
"""

from __future__ import annotations

import io
import json
import math
import re
import statistics
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from click.testing import CliRunner, Result

from helpers_build import make_build_project
from junit_schema import assert_valid_junit
from sglforge.cli import main
from sglforge.engine import images as engine_images
from sglforge.engine.registry import push
from sglforge.scenario.bench import (
    GENERATED_SHARED_PREFIX,
    RANDOM_IDS_SHARED_PREFIX,
    point_args,
    single_stream_args,
)
from sglforge.smoke import load_scenario
from standin.base import ensure_sglang_base
from standin.registry import Registry, free_port, start_registry

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
CPU = REPO / "smoke" / "standin-cpu.toml"
BENCH_BASE = "sglforge-standin/sglang-bench"
BENCH_BASE_TAG = f"{BENCH_BASE}:v0.5.14-rocm700-mi35x"
# The stand-in's clock for these tests (see the module docstring): decode tok/s and outputs.
DECODE_TOK_S = 100.0
OUTPUT_LEN = 16
# Per-request jitter only: the per-boot noise is the power study's to vary (its +-2 % would
# make a 1 + 1 boot comparison fail 5 % of CI runs); the gate still declares +-2 % (boot_sd).
JITTER = ("--env", "STANDIN_JITTER=0.1")
# The knee search of the table test: 6, 12, 24 (twice the cost model's capacity), one
# bisection. 12 is just past the capacity (11.7), which a 64-request probe need not see.
SEARCH = "[bench.search]\nstart = 6.0\nmax_rate = 24.0\nsteps = 1\n\n"


@pytest.fixture(scope="module")
def bench_base(docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The publish project's bench-capable replica (the synthetic upstream's files in the
    release's tree): the bench tests run it too, so one such image serves the module."""
    built = make_build_project(
        tmp_path_factory.mktemp("bench-base"),
        base_template=f"{BENCH_BASE}:v{{version}}-{{rocm}}-mi35x",
        repository=f"sglforge-test/bench-{uuid.uuid4().hex[:8]}",
    )
    return ensure_sglang_base(
        tag=BENCH_BASE_TAG, files=built.base_files(), bench=True, client=docker_client
    )


@pytest.fixture(scope="module")
def bench_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """One registry for the module: the baseline's layers, pushed once, are mounted by the
    publish test's pushes instead of compressed and uploaded again."""
    try:
        reg = start_registry(tmp_path_factory.mktemp("bench-registry"))
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield reg
    finally:
        reg.stop()


@pytest.fixture(scope="module")
def registry_baseline(
    bench_base: str,
    bench_registry: Registry,
    docker_client: docker.DockerClient,
    docker_labels: dict[str, str],
) -> tuple[str, str]:
    """An unchanged copy of the base that exists only in the registry: pushed, then removed
    here, and named by digest as publish's last-release lookup names it; (ref, digest).
    Shared by the module's comparisons (the first one pulls it)."""
    baseline = _derived(docker_client, bench_base, "STANDIN_ROLE=baseline", docker_labels)
    remote = f"{bench_registry.address}/sglforge-test/bench-base:v1"
    engine_images.tag(baseline, remote)
    digest = push(remote, None, attempts=1).digest
    engine_images.remove(remote)
    engine_images.remove(baseline)
    against = f"{bench_registry.address}/sglforge-test/bench-base@{digest}"
    assert engine_images.inspect(against) is None
    return against, digest


def _derived(client: docker.DockerClient, base: str, env: str, labels: dict[str, str]) -> str:
    """``base`` plus one ENV line (e.g. an injected slowdown), labelled for cleanup."""
    tag = f"sglforge-test/bench-{uuid.uuid4().hex[:8]}:x"
    dockerfile = f"FROM {base}\nENV {env}\n".encode()
    client.images.build(fileobj=io.BytesIO(dockerfile), tag=tag, labels=labels, rm=True)
    return tag


def _noise_profile(tmp: Path, sd: float) -> Path:
    """A node profile of the stand-in scenario's compared figure: 10 boots spread ``sd``."""
    from sglforge.bench import noise as node_noise

    z = (-1.5, -1.0, -0.5, -0.25, 0.0, 0.0, 0.25, 0.5, 1.0, 1.5)
    scale = sd / statistics.stdev(z)
    prof = node_noise.Profile(
        scenario="standin-cpu", hardware="standin-cpu (this loaded test machine)",
        figure="decode_tok_s_per_request_at_concurrency_2", concurrency=2, requests=64,
        boot_means=tuple(math.log(90.0) + scale * x for x in z), within_sd=None,
        correlation=None,
    )  # fmt: skip
    return node_noise.save(prof, tmp / "noise-profile.json")


def _scenario(
    tmp: Path,
    bench: dict[str, str] | None = None,
    target: str | None = None,
    *,
    search: str = "",
    single_stream: bool = True,
) -> Path:
    """The CPU stand-in scenario with the model path made absolute, [bench] keys replaced,
    ``search`` (a [bench.search] table) instead of the rate list, and the single stream
    left out when not wanted (it is the table test's to show)."""
    text = CPU.read_text().replace(
        '"../tests/standin/model"', json.dumps(str(REPO / "tests/standin/model"))
    )
    # the slower clock: decode 100 tok/s, 16-token outputs (same time per request)
    text = text.replace(
        "[container.env]\n", f'[container.env]\nSTANDIN_DECODE_TOK_S = "{DECODE_TOK_S:g}"\n', 1
    )
    bench = {"output_len": str(OUTPUT_LEN), **(bench or {})}
    for key, value in bench.items():
        text, n = re.subn(rf"(?m)^{re.escape(key)} = .*$", f"{key} = {value}", text, count=1)
        assert n == 1, key
    if search:
        text, n = re.subn(r"(?m)^request_rates = .*\n", "", text, count=1)
        assert n == 1
        text = text.replace("[bench.knee]\n", search + "[bench.knee]\n", 1)
    if not single_stream:
        text, n = re.subn(r"\[bench\.single_stream\]\n(?:\w.*\n)+", "", text, count=1)
        assert n == 1
    if target:
        text = text.replace("[scenario]\n", f'[scenario]\ntarget = "{target}"\n', 1)
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "standin-cpu.toml"
    path.write_text(text)
    return path


def _bench(*args: str, env: dict[str, str] | None = None) -> tuple[Result, dict[str, Any]]:
    result = CliRunner().invoke(main, ["bench", *args, "--json"], env=env, catch_exceptions=False)
    try:
        return result, json.loads(result.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"bench printed no JSON (exit {result.exit_code}):\n{result.output}")


def _analytic_capacity(scenario: Path) -> float:
    """Requests per second the stand-in's cost model serves at most (all slots busy).

    Each request holds one of ``--max-running-requests`` slots for its prefill (20 us per
    uncached token) and its decode (output / the scenario's STANDIN_DECODE_TOK_S, times
    1 + 0.05 per other running request): capacity = slots / time per request.
    """
    sc = load_scenario(scenario)
    b = sc.bench
    assert b is not None
    slots = int(sc.args[sc.args.index("--max-running-requests") + 1])
    uncached = b.input_len * (1 - b.prefix_hit)
    tok_s = float(sc.container.env.get("STANDIN_DECODE_TOK_S", "400"))
    seconds = uncached * 20e-6 + b.output_len / tok_s * (1 + 0.05 * (slots - 1))
    return slots / seconds


def test_an_unchanged_image_passes_against_a_registry_only_baseline_with_the_table_and_knee(
    bench_base: str, registry_baseline: tuple[str, str], tmp_path: Path
) -> None:
    """One comparison (1 + 1 boots) shows what a bench writes and that an unchanged candidate
    passes against a baseline pulled by digest from a registry."""
    against, digest = registry_baseline
    # This machine's own per-boot noise, declared as the gate asks of a node: unchanged 1 + 1
    # pairs here read 3-10 % apart under the suite's load (+-2 %, the GPU scenarios' figure,
    # would refuse some of them as drops: the noise was declared falsely, not the gate wrong).
    # The loaded machine's own per-boot noise, declared, and the drop a pass of 1 + 1 boots
    # can then rule out: its minimum detectable effect was 20 % when the suite took 25 minutes
    # and 33 % once it took 16 (more work beside the bench: the requests' own spread doubled),
    # so the bound is 40 %. This test holds the path (a registry-only baseline, the table, the
    # knee); the power study holds the statistics.
    scenario = _scenario(tmp_path, {"max_mde": "0.40"}, search=SEARCH, single_stream=False)
    profile = _noise_profile(tmp_path, 0.05)
    out = tmp_path / "out"
    junit = tmp_path / "bench.xml"
    summary = tmp_path / "summary.md"
    result, doc = _bench(
        "--image", bench_base, "--against", against, "--scenario", str(scenario),
        "--port", str(free_port()), "--report-dir", str(out), "--junit", str(junit), *JITTER,
        "--noise-profile", str(profile), env={"GITHUB_STEP_SUMMARY": str(summary)},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert doc["schema"] == 1 and doc["ok"] is True and doc["hardware"] == "standin-cpu"
    # The baseline existed only in the registry: pulled by digest, compared, and unchanged.
    assert doc["baseline"]["digest"] == digest
    assert doc["comparison"] == {"ran": True, "conclusive": True, "reason": None}
    changes = {c["figure"]: c for c in doc["regression"]["changes"]}
    speed = changes["decode_tok_s_per_request_at_concurrency_2"]
    # a plan from a node profile runs whole ABBA blocks: one block is 2 boots a side
    assert speed["status"] == "passed" and speed["boots"] == {"baseline": 2, "candidate": 2}
    # the noise used names its source and carries its degrees of freedom: the profile's 9, pooled
    # with the block's own 2, or the block's 2 alone when its spread overrules the profile (a
    # machine loaded beside the suite spreads the stand-in's boots far beyond the declared 5 %)
    source = speed["noise_source"]
    dof = {"the node profile": 9, "the node profile pooled with the boots' own spread": 11}
    assert speed["boot_sd_dof"] == dof.get(source, 2), speed
    assert source in dof or source.startswith(
        "the boots' own spread (the node profile overruled"
    ), speed
    assert abs(speed["delta"]) < speed["minimum_detectable_effect"], speed
    assert set(changes) == {"decode_tok_s_per_request_at_concurrency_2"}
    # sglang 0.5.14's own bench_serving has no random-ids-shared-prefix: its --help decided.
    help_text = (out / "help.log").read_text()
    assert "generated-shared-prefix" in help_text and "random-ids-shared-prefix" not in help_text
    assert doc["dataset"] == "generated-shared-prefix"
    # Every flag sglforge passes is one the released bench_serving declares.
    b = load_scenario(_scenario(tmp_path / "flags", search=SEARCH)).bench
    assert b is not None
    kw = {"port": 1, "tokenizer": "/t", "output_file": "o"}
    for args in (
        point_args(b, GENERATED_SHARED_PREFIX, 3.0, **kw),  # type: ignore[arg-type]
        point_args(b, RANDOM_IDS_SHARED_PREFIX, 3.0, **kw),  # type: ignore[arg-type]
        single_stream_args(b, dataset_path="/d", **kw),  # type: ignore[arg-type]
    ):
        flags = {a for a in args if a.startswith("--")}
        known = flags - {"--random-shared-prefix-len"}  # newer trees only (the other dataset)
        assert {f for f in known if f not in help_text} == set()
    rates = [p["request_rate"] for p in doc["sweep"]]
    for p in doc["sweep"] + doc["speed_points"]:
        assert p["success_rate"] == 1.0 and p["refused"] is None
        # measured on the server, within the scenario's tolerance of the declared 60 %
        assert abs(p["cache_hit_rate"] - doc["expected_cache_hit_rate"]) <= 0.1
        # the input the server counted is the declared one (a point 2 % off is refused)
        assert abs(p["input_tokens_server"] / 400 - 1) <= 0.02
    # The knee is searched: 6, 12, 24, then one bisection (below 6 on a machine too loaded
    # for 6). Against the cost model's analytic capacity mu: a probe of N requests offered at
    # lambda > mu ends with a backlog of about N (1 - mu / lambda), which waits backlog / mu;
    # the rule (TTFT p95 bounded at 95 %: with 64 requests, the largest TTFT) sees it only
    # past the limit L, so a probe passes up to lambda = mu / (1 - L mu / N), 14.3 RPS here
    # (docs/bench.md: a probe's reach). Twice the capacity always fails.
    capacity = _analytic_capacity(scenario)
    reach = capacity / (1 - 1.0 * capacity / 64)
    knee = doc["knee"]
    assert len(rates) <= 4 and 0 < knee["request_rate"] <= reach and capacity < 12
    assert knee["failed_at"] is not None and knee["request_rate"] < knee["failed_at"]
    assert knee["failed_at"] <= 2 * capacity + 1
    assert knee["output_tok_s"] < knee["total_tok_s"]  # output only; the total is labelled so
    assert doc["speed"]["output_tok_s"] > 0
    assert doc["cost"]["planned"]["node_minutes"] > 0 and doc["cost"]["spent_node_minutes"] > 0
    assert len(doc["cost"]["boot_seconds"]) == 4  # one ABBA block: 2 boots a side
    # GSP lengths are text targets: calibrated once on the server's count, then kept.
    calibrated = [n for n in doc["notes"] if "calibrated generated-shared-prefix" in n]
    assert len(calibrated) == 1, doc["notes"]
    assert doc["single_stream"] is None  # the publish test shows it
    svg = (out / "chart.svg").read_text()
    assert svg.startswith("<svg") and "STAND-IN" in svg
    header = "| offered RPS | sustained RPS | output tok/s/node |"
    md = summary.read_text()
    assert header in (out / "bench.md").read_text() and header in md
    # the step summary's chart is Mermaid (GitHub renders it), with the sweep's own numbers
    bars = re.search(r'(?m)^\s*bar (?:"[^"]*" )?\[(.*)\]$', md)
    assert bars and [float(x) for x in bars.group(1).split(",")] == [
        p["output_tok_s"] for p in doc["sweep"]
    ]
    assert "| decode_tok_s_per_request_at_concurrency_2 |" in md
    assert_valid_junit(junit)
    xml = junit.read_text()
    assert 'name="bench.knee"' in xml and 'name="figure.bench.knee.request_rate"' in xml
    server_log = next(out.glob("candidate-1.server.log")).read_text()
    assert '"enable_metrics": true' in server_log and "Cache flushed" in server_log
    # The generated-shared-prefix dataset is generated once and reused from the cache.
    assert list((out / "home" / ".cache" / "sglang" / "benchmark").glob("gen_shared_prefix_*"))


def test_a_slower_image_is_refused_and_the_compared_figure_moves_with_the_server(
    bench_base: str,
    registry_baseline: tuple[str, str],
    tmp_path: Path,
    docker_client: docker.DockerClient,
    docker_labels: dict[str, str],
) -> None:
    """2 + 2 boots (ABBA) of a 5 % slower image against the same registry baseline: refused,
    and the per-request decode tok/s moved about as the server did (-4.8 %)."""
    against, digest = registry_baseline
    slow = _derived(docker_client, bench_base, "STANDIN_SLOWDOWN=1.05", docker_labels)
    scenario = _scenario(tmp_path, {"request_rates": "[4]", "repeats": "2"}, single_stream=False)
    result, doc = _bench(
        "--image", slow, "--against", against, "--scenario", str(scenario),
        "--port", str(free_port()), *JITTER,
    )  # fmt: skip
    # Refused: exit 1, nothing ok. On a quiet machine the speed figure is `regressed`; on a
    # loaded shared one the boots can spread so far that 2 + 2 cannot tell, and the gate says
    # `inconclusive`, which refuses too (it is never a pass).
    assert result.exit_code == 1, result.output
    assert doc["ok"] is False and doc["comparison"]["ran"] is True
    assert doc["baseline"]["digest"] == digest
    (speed,) = doc["regression"]["changes"]
    assert speed["figure"] == "decode_tok_s_per_request_at_concurrency_2"
    assert speed["status"] in ("regressed", "inconclusive"), speed
    # 5 % slower costs 1 - 1/1.05 = 4.8 % of speed: within two points of it when the boots
    # agree within the declared noise (regressed); when they do not (inconclusive: a loaded
    # machine), the gate itself says the figure is not that precise, and refuses anyway.
    assert speed["delta"] < 0, speed
    if speed["status"] == "regressed":
        assert -0.068 <= speed["delta"] <= -0.028, speed
    assert speed["boots"] == {"baseline": 2, "candidate": 2} and speed["requests"]["baseline"] >= 64
    # no node profile: the boots' own spread with t at 2 degrees of freedom (issue 40), so the
    # detectable drop is a few times that spread, whatever the spread was under the suite's load
    # (0.4-1.9 % a boot on a quiet machine, 9.3 % once under CI's load)
    assert speed["boot_sd_dof"] == 2, speed
    assert 2 * speed["boot_sd"] <= speed["minimum_detectable_effect"] <= 6 * speed["boot_sd"], speed
    # what to run next, naming the option (more boots when inconclusive, or accept the drop)
    assert "--accept-regression REASON" in doc["next"], doc["next"]


def test_simulated_acceptance_is_refused(bench_base: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["bench", "--image", bench_base, "--scenario", str(_scenario(tmp_path))],
        env={"SGLANG_SIMULATE_ACC_LEN": "3.61"},
    )
    assert result.exit_code == 2, result.output
    assert "SGLANG_SIMULATE_ACC_LEN is set" in result.output


class BenchProject:
    """A publish project on a bench-capable replica, its CPU stand-in scenario aimed at mi355x."""

    def __init__(self, tmp: Path, client: docker.DockerClient, labels: dict[str, str]) -> None:
        self.repository = f"sglforge-test/bench-{uuid.uuid4().hex[:8]}"
        built = make_build_project(
            tmp,
            base_template=f"{BENCH_BASE}:v{{version}}-{{rocm}}-mi35x",
            repository=self.repository,
        )
        self.base = ensure_sglang_base(
            tag=BENCH_BASE_TAG, files=built.base_files(), bench=True, client=client
        )
        self.root, self.upstream, self.labels = built.root, built.upstream, labels
        (self.root / "CHANGELOG.md").write_text("# Changelog\n\n## [Unreleased]\n")
        (self.root / "smoke").mkdir(exist_ok=True)
        # One rate, 1 + 1 boots: here the gate's place in a publish (refuse, accept, record)
        # is what is shown; the first release also runs the single stream (see drop_single).
        self.scenario = self.write_scenario(single_stream=True)

    def write_scenario(self, *, single_stream: bool) -> Path:
        return _scenario(
            self.root / "smoke",
            {"request_rates": "[4]", "repeats": "1"},
            target="mi355x",
            single_stream=single_stream,
        )

    def publish(self, registry: str, *extra: str) -> tuple[Result, dict[str, Any]]:
        args = ["--root", str(self.root), "publish", "--target", "mi355x"]
        args += ["--registry", registry, "--upstream", str(self.upstream), "--offline"]
        args += ["--port", str(free_port()), "--retries", "1", "--backoff", "0.2", "--json"]
        for k, v in self.labels.items():
            args += ["--label", f"{k}={v}"]
        result = CliRunner().invoke(main, [*args, *extra], catch_exceptions=False)
        try:
            return result, json.loads(result.stdout)
        except json.JSONDecodeError:
            pytest.fail(f"publish printed no JSON (exit {result.exit_code}):\n{result.output}")


def test_publish_refuses_a_stand_in_for_a_gpu_target(
    tmp_path: Path, registry: Any, docker_labels: dict[str, str]
) -> None:
    built = make_build_project(tmp_path, repository=f"sglforge-test/b-{uuid.uuid4().hex[:8]}")
    scenario = _scenario(tmp_path, target="mi355x")
    reg = registry()
    result = CliRunner().invoke(
        main,
        ["--root", str(built.root), "publish", "--target", "mi355x", "--registry", reg.address,
         "--upstream", str(built.upstream), "--offline", "--scenario", str(scenario)],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "stand-in scenario" in result.output and "--allow-standin" in result.output
    assert not (built.root / "build" / "releases").exists()


def test_publish_gates_on_a_regression_against_the_last_release(
    tmp_path: Path,
    bench_base: str,
    bench_registry: Registry,
    docker_client: docker.DockerClient,
    docker_labels: dict[str, str],
) -> None:
    project = BenchProject(tmp_path / "p", docker_client, docker_labels)
    assert project.base == bench_base
    reg = bench_registry
    first, out = project.publish(reg.address, "--allow-standin", "--no-baseline", "the first")
    assert first.exit_code == 0, first.output
    assert out["standin"] is True and out["tested"] is False
    assert out["bench"]["hardware"] == "standin-cpu" and out["bench"]["baseline"] is None
    # no last release: the comparison is not evaluated, and every output says why
    assert out["bench"]["comparison"]["evaluated"] is False
    assert "no earlier release" in out["bench"]["comparison"]["why"]
    (gate,) = [g for g in out["gates"] if g["name"] == "bench"]
    assert gate["ok"] and "comparison not evaluated" in gate["detail"]
    record = json.loads(Path(out["release_record"]).read_text())
    assert record["smoke"]["hardware"] == "standin-cpu" and record["tested"] is False
    assert record["smoke"]["bench"]["knee"]["request_rate"] == 4
    changelog = (project.root / "CHANGELOG.md").read_text()
    assert "STAND-IN" in changelog and "bench (stand-in): knee 4 RPS" in changelog
    # The single stream: text prompts, the server's count of them, the accept length.
    single = out["bench"]["single_stream"]
    assert 0.75 * DECODE_TOK_S < single["decode_tok_s"] < 1.1 * DECODE_TOK_S  # 1 stream
    # raw prompts (chat_template = false: GPT-2 has none): STANDIN_RAW_ACCEPT_LENGTH 2.4
    assert 2.0 < single["accept_length"] < 2.5
    assert single["input_tokens_server"] == 200
    project.write_scenario(single_stream=False)  # the comparisons below: speed probe only

    # The same queue on a base whose server is 10 % slower: another image, compared with the
    # first release (pulled from the registry by digest), refused; nothing pushed.
    slow = _derived(docker_client, project.base, "STANDIN_SLOWDOWN=1.10", docker_labels)
    # A new queue (another immutable tag) on it: one patch's message changes.
    patch = sorted((project.root / "patches").glob("0001-*.patch"))[0]
    patch.write_text(patch.read_text().replace("Why: build tests.", "Why: build tests, v2.", 1))
    second, out2 = project.publish(reg.address, "--allow-standin", "--base-image", slow)
    assert second.exit_code == 1, second.output
    assert out2["pushed"] == [] and "bench failed" in out2["error"]["message"]
    regression = out2["bench"]["regression"]
    # Refused as a drop, or as inconclusive (1 + 1 boots and no node profile measure no noise,
    # issue 40): neither is a pass, and --accept-regression REASON waives either.
    assert (regression["regressed"] or regression["inconclusive"]) is True
    assert regression["accepted"] is None
    assert out2["bench"]["baseline"]["digest"] == out["digest"]
    assert out2["bench"]["comparison"]["evaluated"] is True
    # the knee search started from the first release's (one probe at 4 RPS passed, nothing
    # failed above it): it probed 4 first
    assert "knee search: from the last release's bracket at least 4" in out2["bench"]["notes"]
    assert out2["bench"]["sweep"][0]["request_rate"] == 4
    bench_step = [s for s in out2["steps"] if s["name"] == "bench"]
    assert bench_step and bench_step[0]["ok"] is False

    third, out3 = project.publish(
        reg.address, "--allow-standin", "--base-image", slow, "--accept-regression", "known: test"
    )
    assert third.exit_code == 0, third.output
    assert out3["bench"]["regression"]["accepted"] == "known: test" and out3["pushed"]
    record3 = json.loads(Path(out3["release_record"]).read_text())
    assert record3["smoke"]["bench"]["regression"]["accepted"] == "known: test"
    assert "regression accepted: known: test" in (project.root / "CHANGELOG.md").read_text()
