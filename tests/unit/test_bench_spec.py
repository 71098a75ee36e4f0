"""The bench's parts without an engine: the [bench] table, the flags, the knee, the server's
hit rate, the paired comparison, the outputs; and the stand-in's cost model in-process."""

from __future__ import annotations

import json
import threading
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from junit_schema import assert_valid_junit
from sglforge.bench import report as bench_report
from sglforge.bench.stats import (
    Block,
    Point,
    capacity,
    compare,
    hit_rate,
    knee,
    metric_sums,
    point_from_result,
    quantile_upper_bound,
)
from sglforge.errors import ConfigError
from sglforge.reports import bench as bench_view
from sglforge.scenario.bench import (
    GENERATED_SHARED_PREFIX,
    RANDOM_IDS_SHARED_PREFIX,
    Knee,
    choose_dataset,
    point_args,
    single_stream_args,
)
from sglforge.smoke import load_scenario
from standin import server

ROOT = Path(__file__).resolve().parents[2]
CPU = ROOT / "smoke" / "standin-cpu.toml"
GLM = ROOT / "smoke" / "glm5-mxfp4-mtp-tp4dp2-mi355x.toml"


def _scenario(tmp_path: Path, bench: str) -> Path:
    text = CPU.read_text()
    start = text.index("\n[bench]\n")
    text = text[:start] + "\n" + bench + text[text.index("\n# The same log patterns", start) :]
    text = text.replace('"../tests/standin/model"', json.dumps(str(ROOT / "tests/standin/model")))
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


def test_the_case_study_workload_gives_the_declared_hit_with_either_dataset() -> None:
    b = load_scenario(GLM).bench
    assert b is not None
    assert (b.input_len, b.output_len, b.prefix_hit) == (20000, 1000, 0.6)
    assert b.knee == Knee(5.0, 1.0) and b.single_stream is not None
    assert (b.single_stream.input_len, b.single_stream.output_len) == (10000, 1500)
    # 12400 / 20000 x 31/32 ~ 0.60 in the field notes; exactly 0.6 with the rounded length.
    assert b.gsp_lengths() == (12387, 7613)
    assert abs(b.expected_hit(GENERATED_SHARED_PREFIX) - 0.6) < 1e-3
    args = point_args(b, RANDOM_IDS_SHARED_PREFIX, 2.4, port=1, tokenizer="/m", output_file="o")
    assert args[args.index("--random-shared-prefix-len") + 1] == "12000"
    assert "--tokenize-prompt" in args and "--flush-cache" in args
    gsp = point_args(b, GENERATED_SHARED_PREFIX, 2.4, port=1, tokenizer="/m", output_file="o")
    assert gsp[gsp.index("--gsp-system-prompt-len") + 1] == "12387"
    assert (
        gsp[gsp.index("--num-prompts") + 1] == "64"
        and gsp[gsp.index("--request-rate") + 1] == "2.4"
    )
    speed = point_args(
        b,
        GENERATED_SHARED_PREFIX,
        float("inf"),
        port=1,
        tokenizer="/m",
        output_file="o",
        num_prompts=b.speed.num_prompts,
        concurrency=b.speed.concurrency,
    )  # fmt: skip
    assert speed[speed.index("--request-rate") + 1] == "inf"
    assert speed[speed.index("--max-concurrency") + 1] == "16"
    assert b.repeats == 4 and b.search is not None
    single = single_stream_args(b, port=1, tokenizer="/m", output_file="o", dataset_path="/d.jsonl")
    # Text prompts through the chat template: 0.5.14's random-ids ignores the flag.
    assert single[single.index("--dataset-name") + 1] == "custom"
    assert single[single.index("--dataset-path") + 1] == "/d.jsonl"
    assert single[single.index("--sharegpt-output-len") + 1] == "1500"
    assert (
        "--apply-chat-template" in single and single[single.index("--max-concurrency") + 1] == "1"
    )


def test_the_dataset_is_the_releases_own_choice() -> None:
    assert choose_dataset(["random", RANDOM_IDS_SHARED_PREFIX, GENERATED_SHARED_PREFIX]) == (
        RANDOM_IDS_SHARED_PREFIX
    )
    assert choose_dataset(["sharegpt", "random-ids", GENERATED_SHARED_PREFIX]) == (
        GENERATED_SHARED_PREFIX
    )
    with pytest.raises(ConfigError, match="neither random-ids-shared-prefix"):
        choose_dataset(["sharegpt"])


HEAD = "[bench]\ninput_len = 10\noutput_len = 4\n"


@pytest.mark.parametrize(
    ("bench", "message"),
    [
        (HEAD, "request_rates"),
        (HEAD + "request_rates = [0]\n", "request rates above 0"),
        (
            HEAD + "request_rates = [1]\nprefix_cache_hit = 1.2\n",
            "fraction",
        ),
        (HEAD + "request_rates = [1]\nrepeat = 3\n", "repeat"),
        (
            HEAD + "request_rates = [1]\n[bench.knee]\nttft = 1\n",
            "ttft",
        ),
        (
            HEAD + "request_rates = [1]\nprompts_per_group = 1\n",
            "at least 2",
        ),
        (
            HEAD + "[bench.search]\nstart = 4\nmax_rate = 2\n",
            "at least start",
        ),
        (HEAD + "request_rates = [1]\n[bench.gate]\nmax_mde = 0\n", "max_mde"),
        (HEAD + "request_rates = [1]\n[bench.gate]\nmax_mde = 1.5\n", "between 0 and 1"),
        (HEAD + 'request_rates = [1]\n[bench.gate]\nmax_mde = "5 %"\n', "max_mde"),
    ],
)
def test_a_bad_bench_table_is_refused_naming_the_key_and_file(
    tmp_path: Path, bench: str, message: str
) -> None:
    path = _scenario(tmp_path, bench)
    with pytest.raises(ConfigError, match=message) as exc:
        load_scenario(path)
    assert str(path) in str(exc.value)


def test_a_stand_in_scenario_says_so() -> None:
    assert load_scenario(CPU).standin and not load_scenario(GLM).standin


def _point(rate: float, tok: float, p95: float, success: float = 1.0, **kw: object) -> Point:
    return Point(rate, tok, tok / 10, p95 / 2, p95, success, 0.6, **kw)  # type: ignore[arg-type]


def test_the_knee_is_the_highest_rate_within_the_rule_below_the_first_failure() -> None:
    rule = Knee(ttft_p95_max_s=5.0, min_success=1.0)
    rows = [
        _point(0.5, 449, 0.60),
        _point(2.0, 1944, 1.05),
        _point(2.4, 2626, 2.22),
        _point(2.8, 2700, 5.5),
        _point(3.2, 2800, 4.0),  # a pass above a failure is noise, not capacity
    ]
    found = capacity(rows, rule)
    assert found is not None and (found.rate, found.point.total_tok_s) == (2.4, 2626)
    assert found.above == 2.8  # the knee lies in [2.4, 2.8)
    refused = [*rows[:2], _point(2.4, 2626, 2.22, refused="hit 0.2")]
    assert knee(refused, rule).request_rate == 2.0  # type: ignore[union-attr]
    assert knee([_point(1, 1, 9)], rule) is None
    assert knee([_point(1, 1, 1, success=0.99)], rule) is None  # every request served


def test_a_probe_passes_only_when_its_p95_is_bounded_with_confidence() -> None:
    # MLPerf-style: the p95 upper bound at 95 % needs 59 requests; 32 cannot pass.
    assert quantile_upper_bound([0.1] * 58) is None and quantile_upper_bound([0.1] * 59) == 0.1
    assert quantile_upper_bound([0.1] * 32) is None
    fast = [0.5] * 63 + [0.9]
    assert quantile_upper_bound(fast) == 0.9
    rule = Knee(ttft_p95_max_s=1.0, min_success=1.0)
    small = _point(1, 10, 0.5, ttfts=(0.5,) * 32, ttft_p95_upper_s=None)
    big = _point(1, 10, 0.5, ttfts=tuple(fast), ttft_p95_upper_s=0.9)
    slow_tail = _point(1, 10, 0.6, ttfts=(0.5,) * 60 + (1.5,) * 4, ttft_p95_upper_s=1.5)
    assert not small.within(rule) and big.within(rule) and not slow_tail.within(rule)


def test_hit_rate_comes_from_the_servers_counters() -> None:
    before = metric_sums(
        'sglang:prompt_tokens_total{model_name="m"} 100.0\n'
        'sglang:cached_tokens_total{cache_source="device",model_name="m"} 10.0\n'
    )
    after = metric_sums(
        "# HELP sglang:prompt_tokens Number of prefill tokens processed.\n"
        'sglang:prompt_tokens_total{model_name="m"} 1100.0\n'
        'sglang:cached_tokens_total{cache_source="device",model_name="m"} 410.0\n'
        'sglang:cached_tokens_total{cache_source="host",model_name="m"} 200.0\n'
        'sglang:cache_hit_rate{model_name="m"} 0.9\n'
    )
    assert hit_rate(before, after) == pytest.approx(0.6)
    assert hit_rate(after, after) is None


def test_a_point_reads_bench_servings_jsonl_fields() -> None:
    result = {
        "completed": 31,
        "errors": [""] * 31 + ["timeout"],
        "total_throughput": 2626.0,
        "output_throughput": 125.0,
        "median_ttft_ms": 810.0,
        "p95_ttft_ms": 2220.0,
        "accept_length": 3.48,
        "mean_tpot_ms": 4.7,
    }
    p = point_from_result(2.4, result, 0.6)
    assert (p.ttft_p50_s, p.ttft_p95_s, p.success_rate) == (0.81, 2.22, 31 / 32)
    assert p.accept_length == 3.48 and p.cache_hit_rate == 0.6
    # --output-details: per-request TTFTs and decode speeds (failed requests left out), and
    # what the server counted.
    details = {
        **result,
        "duration": 10.0,
        "output_lens": [5, 3, 0],
        "ttfts": [0.2, 0.3, 0.0],
        "itls": [[0.1, 0.1, 0.1, 0.1], [0.25, 0.25], []],
        "errors": ["", "", "timeout"],
    }
    d = point_from_result(2.4, details, 0.6, (20010.0, 1000.0))
    assert d.ttfts == (0.2, 0.3) and d.decode_tok_s == pytest.approx((10.0, 4.0))
    assert d.sustained_rps == 3.1 and (d.input_tokens, d.output_tokens) == (20010.0, 1000.0)


def _report(tmp_path: Path, **kw: object) -> bench_report.BenchReport:
    rows = (_point(1, 500, 0.2), _point(2, 900, 0.6), _point(4, 950, 7.0))
    run = bench_report.ImageRun(
        "img:new", "sha256:1", rows, rows[1], bench_report.SingleStream(213.0, 3.4)
    )
    base = dict(
        scenario="s",
        scenario_path=tmp_path / "s.toml",
        hardware="standin-cpu",
        dataset=GENERATED_SHARED_PREFIX,
        expected_hit=0.6,
        knee_rule=Knee(5.0, 1.0),
        run=run,
        baseline=None,
        changes=(),
        refused=(),
        report_dir=tmp_path,
        started_at="2026-12-01T00:00:00+00:00",
        duration_s=1.0,
        repeats=1,
    )
    base.update(kw)
    return bench_report.BenchReport(**base)  # type: ignore[arg-type]


def test_outputs_carry_the_table_the_contract_and_the_stand_in_label(tmp_path: Path) -> None:
    change = compare(
        "single_stream_decode_tok_s",
        [
            Block("baseline", 0, (200.0, 201.0)),
            Block("candidate", 1, (180.0, 179.0)),
            Block("candidate", 2, (181.0, 180.0)),
            Block("baseline", 3, (199.0, 200.0)),
        ],
        boot_sd=0.0115,
    )
    report = _report(
        tmp_path, changes=(change,), baseline=bench_report.ImageRun("img:old", None, (), None, None)
    )
    doc = bench_report.report_dict(report)
    assert {"schema", "ok", "sweep", "knee", "single_stream", "baseline", "regression"} <= set(doc)
    assert doc["schema"] == 1 and doc["ok"] is False and doc["hardware"] == "standin-cpu"
    assert set(doc["sweep"][0]) >= {
        "request_rate",
        "total_tok_s",
        "output_tok_s",
        "ttft_p50_s",
        "ttft_p95_s",
        "success_rate",
        "cache_hit_rate",
    }
    assert doc["knee"]["request_rate"] == 2 and doc["knee"]["total_tok_s"] == 900
    assert doc["knee"]["output_tok_s"] == 90 and doc["knee"]["failed_at"] is None
    assert doc["comparison"]["ran"] is True and doc["comparison"]["conclusive"] is True
    assert doc["single_stream"]["decode_tok_s"] == 213.0
    assert doc["single_stream"]["accept_length"] == 3.4
    assert doc["regression"]["regressed"] is True
    text = "\n".join(bench_view.text(report))
    assert "STAND-IN" in text and "2 (knee)" in text and "REGRESSION" in text
    md = bench_view.markdown(report)
    assert "| offered RPS | sustained RPS | output tok/s/node |" in md
    assert "| 2 (knee) | 0.00 | 90 |" in md and "total tok/s (in+out)" in md
    xml = bench_view.junit_xml(report)
    assert_valid_junit(xml)
    cases = {c.get("name"): c for c in ET.fromstring(xml.split("\n", 1)[1]).iter("testcase")}
    assert cases["bench.vs-baseline.single_stream_decode_tok_s"].find("failure") is not None
    assert cases["bench.rate-4"].find("skipped") is not None
    svg = bench_view.svg(report)
    root = ET.fromstring(svg)  # well-formed
    assert "standin-cpu" not in svg or "STAND-IN" in svg
    texts = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
    # Axes with ticks (0..4 RPS, 0..100 tok/s), a legend, the knee marked.
    assert {"0", "1", "2", "3", "4"} <= set(texts) and "100" in texts
    assert {"output tok/s/node", "TTFT p95", "knee"} <= set(texts)
    assert any(t.startswith("knee 2 RPS") for t in texts)
    alone = bench_report.report_dict(_report(tmp_path, no_baseline="first release"))
    assert alone["comparison"] == {"ran": False, "conclusive": False, "reason": "first release"}
    alone_xml = bench_view.junit_xml(_report(tmp_path, no_baseline="first release"))
    assert "first release" in alone_xml and "bench.vs-baseline" in alone_xml
    accepted = bench_report.report_dict(
        _report(tmp_path, changes=(change,), accepted_regression="known: new kernel")
    )
    assert accepted["ok"] is True and accepted["regression"]["accepted"] == "known: new kernel"


def _serve(env: dict[str, str], *flags: str):
    args = server.build_parser().parse_args(
        [
            "--model-path",
            str(ROOT / "tests/standin/model"),
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            *flags,
        ]
    )
    httpd = server.make_server(args, frozenset(), env)
    threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    httpd.engine.status = "Up"  # type: ignore[attr-defined]
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


def _post(url: str, body: dict) -> tuple[int, bytes]:
    req = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()


def test_the_stand_ins_prefix_cache_metrics_and_flush() -> None:
    httpd, url = _serve({"STANDIN_DECODE_TOK_S": "2000"}, "--enable-metrics")
    try:
        prefix = " ".join(f"w{i}" for i in range(64))
        metas = []
        for q in range(3):
            _, raw = _post(
                f"{url}/generate",
                {"text": f"{prefix} q{q} x", "sampling_params": {"max_new_tokens": 4}},
            )
            metas.append(json.loads(raw)["meta_info"])
        assert [m["cached_tokens"] for m in metas] == [0, 64, 64]  # whole 16-token blocks
        with urllib.request.urlopen(f"{url}/metrics") as resp:
            sums = metric_sums(resp.read().decode())
        assert sums["sglang:prompt_tokens_total"] == sum(m["prompt_tokens"] for m in metas)
        assert sums["sglang:cached_tokens_total"] == 128 and sums["sglang:num_requests_total"] == 3
        assert _post(f"{url}/flush_cache", {})[0] == 200
        _, raw = _post(
            f"{url}/generate", {"text": f"{prefix} q9 x", "sampling_params": {"max_new_tokens": 4}}
        )
        assert json.loads(raw)["meta_info"]["cached_tokens"] == 0
    finally:
        httpd.shutdown()
        httpd.server_close()
    plain, url = _serve({})
    try:
        with pytest.raises(urllib.error.HTTPError) as exc:  # /metrics only with --enable-metrics
            urllib.request.urlopen(f"{url}/metrics")
        assert exc.value.code == 404
        exc.value.close()
    finally:
        plain.shutdown()
        plain.server_close()


def test_the_stand_ins_costs_follow_the_knobs() -> None:
    cost = server.CostModel(
        {"STANDIN_PREFILL_US_PER_TOKEN": "100", "STANDIN_SLOWDOWN": "1.1"}, 100.0
    )
    assert cost.prefill(1000) == pytest.approx(0.11)
    assert cost.decode(10, 1) == pytest.approx(0.11)
    assert cost.decode(10, 3) == pytest.approx(0.11 * 1.1)  # growth 0.05 per extra request
    noisy = [
        server.CostModel({"STANDIN_NOISE": "0.02", "STANDIN_NOISE_SEED": str(s)}, 1.0).factor
        for s in range(50)
    ]
    assert all(0.98 <= f <= 1.02 for f in noisy) and len(set(noisy)) > 1
    jittery = server.CostModel({"STANDIN_JITTER": "0.1", "STANDIN_NOISE_SEED": "3"}, 100.0)
    draws = [jittery.request_factor() for _ in range(200)]
    assert all(0.9 <= f <= 1.1 for f in draws) and len(set(draws)) == 200
    assert jittery.decode(10, 1, 1.05) == pytest.approx(0.105)
    assert server.CostModel({}, 1.0).request_factor() == 1.0  # off by default
    cache = server.PrefixCache(block=4, capacity_tokens=8)

    def served(ids: list[int]) -> int:  # matched when scheduled, inserted after its prefill
        hit = cache.match(ids)
        cache.insert(ids)
        return hit

    assert cache.match([1, 2, 3, 4]) == 0  # nothing before a prefill ran
    assert served([1, 2, 3, 4, 5, 6, 7, 8]) == 0
    assert served([1, 2, 3, 4, 5, 6, 7, 8, 9]) == 8
    assert served([9, 9, 9, 9]) == 0  # evicts the oldest block (LRU)
    assert served([1, 2, 3, 4, 5]) == 0


ROCMINFO = """\
Agent 1
  Name:                    AMD EPYC 9575F
  Marketing Name:          AMD EPYC 9575F 64-Core Processor
  Device Type:             CPU
Agent 2
  Name:                    gfx950
  Marketing Name:          AMD Instinct MI355X
  Device Type:             GPU
Agent 3
  Name:                    gfx950
  Marketing Name:          AMD Instinct MI355X
  Device Type:             GPU
"""


def test_gpu_facts_name_the_gpus_not_the_cpu() -> None:
    from sglforge.smoke.preflight import GpuInventory, _gpu_marketing_names, node_facts

    assert _gpu_marketing_names(ROCMINFO) == ["AMD Instinct MI355X"] * 2
    assert node_facts(None) == {} and node_facts(GpuInventory((), "none")) == {}
    facts = node_facts(GpuInventory(("gfx950", "gfx950"), "kfd-sysfs"))
    assert (facts["count"], facts["gfx"]) == (2, "gfx950")


def test_a_stand_in_release_is_recorded_as_one(tmp_path: Path) -> None:
    import dataclasses

    from test_release import make_release

    from sglforge.provenance import LABEL_SMOKE_HARDWARE, Smoke
    from sglforge.release import from_dict, record_labels, record_release, to_dict

    bench = {
        "hardware": "standin-cpu",
        "knee": {"request_rate": 9.0, "total_tok_s": 5076.2, "output_tok_s": 507.6},
        "single_stream": {"decode_tok_s": 360.9, "accept_length": 3.37},
        "regression": {
            "regressed": True,
            "accepted": "known: new kernel",
            "changes": [{"figure": "single_stream_decode_tok_s", "delta": -0.09}],
        },
    }
    smoke = Smoke(True, "standin-cpu", "passed", {"decode_tok_s": 361.0}, "standin-cpu", {}, bench)
    release = make_release(smoke=smoke)
    assert release.tested is False  # a stand-in never counts as the GPU target's smoke
    assert from_dict(to_dict(release)) == release
    assert record_labels(release)[LABEL_SMOKE_HARDWARE] == "standin-cpu"
    gpu = make_release(smoke=dataclasses.replace(smoke, hardware="gpu", gpus={"count": 8}))
    assert gpu.tested is True and from_dict(to_dict(gpu)).smoke.gpus == {"count": 8}  # type: ignore[union-attr]
    (tmp_path / "CHANGELOG.md").write_text("# Changelog\n\n## [Unreleased]\n")
    record_release(tmp_path, release)
    entry = (tmp_path / "CHANGELOG.md").read_text()
    assert "smoke passed on a **STAND-IN** (standin-cpu, not a GPU run)" in entry
    assert "bench (stand-in): knee 9 RPS at 508 output tok/s/node" in entry
    assert "single_stream_decode_tok_s -9.0% vs last release" in entry
    assert "regression accepted: known: new kernel" in entry


def test_simulated_acceptance_is_refused_for_smoke_and_bench(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipelines import smoke_at as run_smoke
    from sglforge.smoke.preflight import refuse_simulated_acceptance

    refuse_simulated_acceptance({"SGLANG_USE_AITER": "1"}, CPU)
    with pytest.raises(ConfigError, match="SGLANG_SIMULATE_ACC_LEN is set"):
        refuse_simulated_acceptance({"SGLANG_SIMULATE_ACC_LEN": "3.61"}, CPU)
    monkeypatch.setenv("SGLANG_SIMULATE_ACC_METHOD", "match-expected")
    with pytest.raises(ConfigError, match="SGLANG_SIMULATE_ACC_METHOD"):
        run_smoke(tmp_path, "no-such-image", CPU, log_dir=tmp_path / "log")


def test_the_upgrade_report_carries_the_bench_and_its_delta() -> None:
    from sglforge.reports.upgrade import markdown
    from sglforge.upgrade import TargetOutcome, UpgradeResult, to_dict

    bench = {
        "hardware": "gpu",
        "knee": {"request_rate": 2.4, "total_tok_s": 2626.0},
        "single_stream": {"decode_tok_s": 213.0, "accept_length": 3.5},
        "regression": {
            "regressed": False,
            "changes": [{"figure": "knee_total_tok_s", "delta": 0.012}],
        },
    }
    from gate_records import bench_gate, smoke_gate
    from sglforge.figures import BenchFigures

    # a record's figures as an earlier release wrote them (no output tok/s, no sweep)
    gates = (smoke_gate(True), bench_gate(None, figures=bench))
    target = TargetOutcome("mi355x", image="img", gates=gates)
    result = UpgradeResult("v0.5.14", "v0.5.16", None, True, True, "", (), (target,), (), {})
    text = markdown(result)
    assert "## Serving benchmark" in text
    # A record from before output tok/s: its total is labelled as the total.
    assert "- mi355x: bench: knee 2.4 RPS at 2626 total tok/s (in+out), single stream" in text
    assert "knee_total_tok_s +1.2% vs last release" in text
    kept = to_dict(result)["targets"][0]
    assert kept["bench"] == BenchFigures.from_dict(bench).as_dict() and kept["smoke_passed"]
    assert {k: v for k, v in kept["bench"].items() if k in bench} == bench


def test_a_busy_port_is_refused_before_any_container(tmp_path: Path) -> None:
    import socket

    from sglforge.bench.runner import _Ctx, _server
    from sglforge.errors import BenchError

    sc = load_scenario(CPU)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        assert sc.bench is not None
        ctx = _Ctx(tmp_path, sc, sc.bench, port, None, tmp_path, {}, {}, lambda _m: None, 1.0)
        with pytest.raises(BenchError, match="already in use"), _server(ctx, "img", "x"):
            pass


@pytest.mark.parametrize(
    ("capacity", "prior", "probes", "bracket"),
    [
        # no prior: the GLM plan, 2 and 3.2 then two bisections
        (2.5, None, [2.0, 3.2, 2.6, 2.3], (2.3, 2.6)),
        # the last release's bracket holds: two probes confirm it, no bisection
        (2.5, (2.3, 2.6), [2.3, 2.6], (2.3, 2.6)),
        # the candidate is slower: K fails, bisect below it
        (2.0, (2.3, 2.6), [2.3, 1.15, 1.725], (1.725, 2.3)),
        # the candidate is faster: F passes, climb on to max_rate, then bisect
        (3.0, (2.3, 2.6), [2.3, 2.6, 3.2, 2.9, 3.05], (2.9, 3.05)),
        # a prior without a failure above it: K, then the schedule's higher rates
        (2.5, (2.3, None), [2.3, 3.2, 2.75, 2.525], (2.3, 2.525)),
        # an unusable prior is ignored
        (2.5, (float("nan"), 2.6), [2.0, 3.2, 2.6, 2.3], (2.3, 2.6)),
    ],
    ids=["none", "confirmed", "slower", "faster", "open", "nan"],
)
def test_the_knee_search_reuses_the_last_release_s_bracket(
    capacity: float,
    prior: tuple[float, float | None] | None,
    probes: list[float],
    bracket: tuple[float, float],
) -> None:
    """A probe passes below ``capacity``; the search probes what each case says and ends in
    the bracket (last pass, first failure)."""
    from types import SimpleNamespace

    from sglforge.bench import runner

    b = load_scenario(ROOT / "smoke" / "glm5-mxfp4-mtp-mi355x.toml").bench  # TP8: start 2
    assert b is not None
    seen: list[float] = []

    def measure(rate: float) -> Point:
        seen.append(rate)
        p95 = 1.0 if rate < capacity else 9.0
        return Point(rate, 1.0, 1.0, p95 / 2, p95, 1.0, 0.6, ttft_p95_upper_s=p95)

    ctx = SimpleNamespace(bench=b, knee_prior=runner._usable_prior(prior), notes=[])
    points = runner._search(ctx, measure)  # type: ignore[arg-type]
    assert seen == probes
    passed = [p.request_rate for p in points if p.within(b.knee)]
    failed = [p.request_rate for p in points if not p.within(b.knee)]
    assert (max(passed), min(failed)) == bracket
    said = [n for n in ctx.notes if "last release's bracket" in n]
    assert bool(said) == (ctx.knee_prior is not None)
