"""Smoke scenarios, preflight, check arithmetic and reports (no engine, no subprocess)."""

from __future__ import annotations

import json
import re
import tomllib
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from junit_schema import assert_valid_junit
from sglforge import config, smoke
from sglforge.cli import main
from sglforge.engine import containers
from sglforge.errors import ConfigError, SmokeError
from sglforge.provenance import LABEL_GPU_ARCH, LABEL_TARGET

ROOT = Path(__file__).resolve().parents[2]
GLM = ROOT / "smoke" / "glm5-mxfp4-mtp-mi355x.toml"
GLM_MI300X = ROOT / "smoke" / "glm5-fp8-mtp-mi300x.toml"
CPU = ROOT / "smoke" / "standin-cpu.toml"


def write(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def cpu_text() -> str:
    return CPU.read_text()


# --------------------------------------------------------------------------- scenarios


def test_the_mission_scenario_launches_glm5_with_mtp_5_1_6_on_tp8() -> None:
    s = smoke.load_scenario(GLM)
    args = s.launch_args(30555)
    joined = " ".join(args)
    for flags in (
        "--tp 8",
        "--trust-remote-code",
        "--speculative-algorithm EAGLE",
        "--speculative-num-steps 5",
        "--speculative-eagle-topk 1",
        "--speculative-num-draft-tokens 6",
        "--kv-cache-dtype fp8_e4m3",
        "--enable-aiter-allreduce-fusion",
        "--host 127.0.0.1",
        "--port 30555",
        f"--model-path {s.model_mount}",
    ):
        assert flags in joined
    assert s.command == ("python3", "-m", "sglang.launch_server")
    assert s.target == "mi355x" and s.accelerator == "rocm" and s.gpus_needed == 8
    assert s.load_timeout >= 1800
    c = s.container
    assert c.devices == ("/dev/kfd", "/dev/dri") and c.group_add == ("video",)
    assert (c.ipc_mode, c.network_mode) == ("host", "host")
    assert c.security_opt == ("seccomp=unconfined",) and c.cap_add == ("SYS_PTRACE",)
    assert c.shm_size and c.nofile and c.nofile >= 65536
    assert s.checks.min_accept_length == 2.5
    severity = {p.name: p.severity for p in s.checks.forbidden}
    assert severity == {
        "process-crash": "fail",
        "python-traceback": "warn",  # a survived one (tests/unit/test_smoke_real_logs.py)
        "weight-shape-assert": "fail",
        "bare-assertion-error": "fail",
        "tensor-size-mismatch": "fail",
        "jit-compile-failure": "fail",
        "fused-metadata-copy-fallback": "fail",
        "hip-invalid-device-function": "fail",
        "hip-no-binary": "fail",
        # the config item covers TP8's shapes (configs coverage): their fallbacks fail the run
        "aiter-moe-default-covered": "fail",
        "flydsl-heuristic-fallback-covered": "fail",
        "aiter-moe-default": "warn",
        "flydsl-heuristic-fallback": "warn",
    }
    assert s.container_command(30555)[:3] == ["python3", "-m", "sglang.launch_server"]
    assert s.container_command(30555)[3:] == s.launch_args(30555)


# Real lines, as the software cited in the scenario files prints them (values made up).
REAL_LINES = {
    "process-crash": [
        "[2026-11-30 06:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "[2026-11-30 06:00:00] Received sigquit from a child process. It usually means the child "
        "failed.",
        "[2026-11-30 06:00:00] SIGQUIT received. signum=None, frame=None. It usually means one "
        "child failed.",
        "[2026-11-30 06:00:00] Subprocess scheduler_0 (pid=3412) crashed with exit code -9. "
        "Triggering SIGQUIT for cleanup...",
    ],
    "python-traceback": [
        "[2026-11-30 06:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):"
    ],
    "weight-shape-assert": [
        "AssertionError: param.shape=torch.Size([6144, 1536]) param.dtype=torch.uint8 "
        "loaded_weight.shape=torch.Size([6144, 3072]) loaded_weight.dtype=torch.bfloat16",
        "AssertionError: param_data.shape=torch.Size([2048, 3072]) != "
        "loaded_weight.shape=torch.Size([2048, 6144])",
        "AssertionError: param_data.shape=torch.Size([4096, 3072]) "
        "loaded_weight.shape=torch.Size([4096, 6144])",
        "AssertionError: target.shape=torch.Size([2048]), loaded_weight.shape=torch.Size([4096])",
        "AssertionError: Attempted to load weight (torch.Size([4096])) into parameter "
        "(torch.Size([2048]))",
    ],
    "bare-assertion-error": ["AssertionError"],
    "tensor-size-mismatch": [
        "RuntimeError: The size of tensor a (6144) must match the size of tensor b (3072) at "
        "non-singleton dimension 1"
    ],
    "jit-compile-failure": [
        "RuntimeError: ninja exited with status 1",
        "ninja: build stopped: subcommand failed.",
        "/sgl-workspace/sglang/python/sglang/jit_kernel/csrc/elementwise/"
        "fused_metadata_copy.cuh:38:10: fatal error: 'cuda_runtime.h' file not found",
    ],
    "fused-metadata-copy-fallback": [
        "[2026-11-30 06:00:00 TP0] Failed to compile JIT fused metadata copy kernel "
        "(forward_mode=1, has_real_page_table=True, has_flashmla=False): boom",
        "Warning: Multi-backend fused metadata copy kernel not available, falling back to loop.",
        "Warning: Multi-backend fused metadata copy kernel failed with error: HIP error: "
        "invalid argument, falling back to loop.",
    ],
    "hip-invalid-device-function": ["torch.AcceleratorError: HIP error: invalid device function"],
    "hip-no-binary": [
        ":1:hip_code_object.cpp      :456 : 1885938529 us: hipErrorNoBinaryForGpu: Unable to "
        "find code object for all current devices!"
    ],
    "aiter-moe-default": [
        "[aiter] [fused_moe] using 2stage default for (256, 1, 6144, 256, 256, 8, "
        "'ActivationType.Silu', 'torch.bfloat16', 'torch.float4_e2m1fn_x2', "
        "'torch.float4_e2m1fn_x2', 'QuantType.per_1x32', True, False) ",
        "[aiter] [fused_moe] using 1stage default for (256, 1, 7168) ",
    ],
    "flydsl-heuristic-fallback": [
        "[aiter] [fused_moe] no tuned FlyDSL config for ('gfx950', 256, 1), using heuristic "
        "FlyDSL fallback (kn1='flydsl_moe1_afp4_wfp4_bf16', kn2='flydsl_moe2_afp4_wfp4_bf16')"
    ],
}
HEALTHY_LINES = [
    "[aiter] [fused_moe] using 2stage (kernelName1='a', kernelName2='b') for (256, 1, 6144) ",
    "[2026-11-30 06:00:00 TP0] Load weight end. elapsed=41.20 s, type=GlmMoeDsaForCausalLM",
    "[2026-11-30 06:00:00] The server is fired up and ready to roll!",
    "[2026-11-30 06:00:00 TP0] Decode batch, #running-req: 1, accept len: 3.40, accept rate: 0.48",
    "    assert param_data.shape == loaded_weight.shape",
]


@pytest.mark.parametrize("scenario", [GLM, GLM_MI300X, CPU], ids=lambda p: p.stem)
def test_each_log_pattern_matches_real_lines_bare_and_prefixed(scenario: Path) -> None:
    """Every pattern catches its real lines, also behind the stand-in's ``[STAND-IN]`` label."""
    patterns = {
        p.name: re.compile(p.pattern) for p in smoke.load_scenario(scenario).checks.forbidden
    }
    # The covered-shape fallbacks (TP8's) have their own test with real key lines below.
    covered = {"aiter-moe-default-covered", "flydsl-heuristic-fallback-covered"}
    assert set(patterns) - covered == set(REAL_LINES)
    for name, lines in REAL_LINES.items():
        for line in lines:
            for shown in (line, f"[STAND-IN] {line}"):
                hit = {n for n, rx in patterns.items() if rx.search(shown)}
                assert name in hit, (name, shown)
    for line in HEALTHY_LINES:
        assert not [n for n, rx in patterns.items() if rx.search(line)], line


def test_log_patterns_match_what_the_standin_prints() -> None:
    from standin import server

    patterns = {p.name: re.compile(p.pattern) for p in smoke.load_scenario(GLM).checks.forbidden}

    def names(line: str) -> set[str]:
        return {n for n, rx in patterns.items() if rx.search(f"[STAND-IN] {line}")}

    moe_default, flydsl = server.AITER_UNTUNED_LINES
    # The stand-in logs the TP8 draft's key 256/8 without gfx (the 0.1.7 wheel's and
    # 7d604afe5fa7's form): a covered shape, so the covered-fallback failures catch it as well
    # ({aiter-key ...} is written for each known aiter's key, aiter_rules.log_key).
    assert names(moe_default) == {"aiter-moe-default", "aiter-moe-default-covered"}
    assert names(flydsl) == {"flydsl-heuristic-fallback", "flydsl-heuristic-fallback-covered"}
    assert names(server.METADATA_FALLBACK_LINE) == {"fused-metadata-copy-fallback"}


def test_cpu_scenario_needs_no_devices_and_resolves_the_model_next_to_the_file() -> None:
    s = smoke.load_scenario(CPU)
    assert s.accelerator == "none" and s.container.devices == ()
    assert s.model_path == (ROOT / "tests" / "standin" / "model").resolve()
    assert (s.model_path / "config.json").is_file()


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda t: t.replace("[scenario]\n", "[scenario]\ncolour = 'red'\n"), "scenario.colour"),
        (lambda t: t + "\n[extra]\nx = 1\n", "extra"),
        (
            lambda t: t.replace("[checks.speed]\n", "[checks.speed]\nmin_tok_s = 3\n"),
            "checks.speed.min_tok_s",
        ),
        (
            lambda t: t.replace(
                'name = "python-traceback"', 'name = "python-traceback"\nlevel = "warn"'
            ),
            "checks.logs.forbidden[1].level",
        ),
    ],
)
def test_unknown_keys_are_rejected_naming_key_and_file(tmp_path: Path, edit, key: str) -> None:
    path = write(tmp_path, edit(cpu_text()))
    with pytest.raises(ConfigError) as exc:
        smoke.load_scenario(path)
    assert f"unknown key '{key}'" in exc.value.message
    assert str(path) in exc.value.message
    assert exc.value.hint and "known keys" in exc.value.hint


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        ("port = 30123", "port = 'x'", "'scenario.port' must be an integer"),
        ("port = 30123", "port = 70000", "not a TCP port"),
        ('accelerator = "none"', 'accelerator = "tpu"', "'scenario.accelerator' must be one"),
        ('"--port", "<port>",', '"--port", "30000",', "must pass the port as <port>"),
        ('"--port", "<port>",', '"--port", "<port>", "<gpu>",', "unknown placeholder <gpu>"),
        ('network_mode = "host"', 'network_mode = "bridge"', 'must be "host"'),
        ("min_decode_tok_s = 50.0", "", "missing 'checks.speed.min_decode_tok_s'"),
        (
            "pattern = 'Traceback \\(most recent call last\\)'",
            "pattern = 'Traceback ('",
            "not a valid regular expression",
        ),
        ("max_new_tokens = 256", "max_new_tokens = 4", "at least 8"),
        (
            'severity = "warn"',
            'severity = "info"',
            "'checks.logs.forbidden[1].severity' must be \"fail\" or \"warn\", not 'info'",
        ),
        (
            'severity = "warn"',
            "severity = 2",
            "'checks.logs.forbidden[1].severity' must be a string",
        ),
    ],
)
def test_bad_values_are_rejected(tmp_path: Path, old: str, new: str, needle: str) -> None:
    text = cpu_text()
    assert old in text
    path = write(tmp_path, text.replace(old, new, 1))
    with pytest.raises(ConfigError) as exc:
        smoke.load_scenario(path)
    assert needle in exc.value.message and str(path) in exc.value.message


def test_missing_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such scenario"):
        smoke.load_scenario(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match="invalid TOML"):
        smoke.load_scenario(write(tmp_path, "[scenario\n"))


def test_gpus_needed_reads_tp_and_dp() -> None:
    s = smoke.load_scenario(CPU)
    from dataclasses import replace

    assert replace(s, args=("--tp-size", "4", "--dp", "2", "--port", "<port>")).gpus_needed == 8
    assert replace(s, args=("--tp=4", "--port", "<port>")).gpus_needed == 4
    dpa = ("--tp", "8", "--dp", "8", "--enable-dp-attention", "--port", "<port>")
    assert replace(s, args=dpa).gpus_needed == 8


# --------------------------------------------------------------------------- preflight

ROCMINFO = """\
ROCk module version 6.12.12 is loaded
=====================
HSA Agents
==========
*******
Agent 1
*******
  Name:                    AMD EPYC 9575F 64-Core Processor
  Uuid:                    CPU-XX
  Marketing Name:          AMD EPYC 9575F 64-Core Processor
  Vendor Name:             CPU
  Device Type:             CPU
*******
Agent 2
*******
  Name:                    gfx950
  Uuid:                    GPU-5d1c3e0a6f1b2c3d
  Marketing Name:          AMD Instinct MI355X
  Vendor Name:             AMD
  Device Type:             GPU
  ISA Info:
    ISA 1
      Name:                    amdgcn-amd-amdhsa--gfx950:sramecc+:xnack-
*******
Agent 3
*******
  Name:                    gfx950
  Marketing Name:          AMD Instinct MI355X
  Device Type:             GPU
"""


def test_parse_rocminfo_lists_gpu_agents_only() -> None:
    assert smoke.parse_rocminfo(ROCMINFO) == ["gfx950", "gfx950"]
    assert smoke.parse_rocminfo("") == []


def test_parse_amd_smi_old_list_and_new_wrapped_forms() -> None:
    old = [
        {"gpu": i, "asic": {"market_name": "MI300X", "target_graphics_version": "gfx942"}}
        for i in range(2)
    ]
    new = {"gpu_data": [{"gpu": 0, "asic": {"target_graphics_version": "gfx950"}}]}
    assert smoke.parse_amd_smi(json.dumps(old)) == ["gfx942", "gfx942"]
    assert smoke.parse_amd_smi(json.dumps(new)) == ["gfx950"]
    with pytest.raises(ValueError):
        smoke.parse_amd_smi("amd-smi: not json")


def test_kfd_topology(tmp_path: Path) -> None:
    assert smoke.gfx_from_target_version(90500) == "gfx950"
    assert smoke.gfx_from_target_version(90402) == "gfx942"
    assert smoke.gfx_from_target_version(90010) == "gfx90a"
    assert smoke.gfx_from_target_version(0) is None
    for n, version in enumerate([0, 90500, 90500]):
        node = tmp_path / str(n)
        node.mkdir()
        (node / "properties").write_text(f"cpu_cores_count 8\ngfx_target_version {version}\n")
    assert smoke.read_kfd_topology(tmp_path) == ["gfx950", "gfx950"]
    assert smoke.read_kfd_topology(tmp_path / "absent") == []


def _preflight(scenario: smoke.Scenario, **kw: object) -> dict[str, smoke.Check]:
    args: dict[str, object] = dict(
        image="img",
        image_found=True,
        model_path=ROOT,
        port=30000,
        gpus=smoke.GpuInventory(("gfx950",) * 8, "rocminfo"),
        arch=("gfx950", "target mi355x"),
        exists=lambda _p: True,
        port_busy=lambda _p: False,
    )
    args.update(kw)
    from sglforge.smoke.preflight import Host

    host = Host(
        gpus=args.pop("gpus"),  # type: ignore[arg-type]
        exists=args.pop("exists"),  # type: ignore[arg-type]
        port_busy=args.pop("port_busy"),  # type: ignore[arg-type]
    )
    return {c.name: c for c in smoke.preflight(scenario, host=host, **args)}  # type: ignore[arg-type]


def test_preflight_passes_on_a_matching_host() -> None:
    checks = _preflight(smoke.load_scenario(GLM))
    assert all(c.passed for c in checks.values()), checks
    assert set(checks) == {
        "preflight.image",
        "preflight.devices",
        "preflight.gpu-arch",
        "preflight.gpu-count",
        "preflight.model",
        "preflight.port",
    }


def test_preflight_names_each_reason_it_cannot_run(tmp_path: Path) -> None:
    s = smoke.load_scenario(GLM)
    wrong_arch = _preflight(s, gpus=smoke.GpuInventory(("gfx942",) * 8, "amd-smi"))
    assert not wrong_arch["preflight.gpu-arch"].passed
    assert "gfx942" in wrong_arch["preflight.gpu-arch"].detail
    few = _preflight(s, gpus=smoke.GpuInventory(("gfx950",) * 4, "rocminfo"))
    assert not few["preflight.gpu-count"].passed and few["preflight.gpu-count"].value == 4
    none = _preflight(s, gpus=smoke.GpuInventory((), "none", "rocminfo not found"))
    assert "rocminfo not found" in none["preflight.gpu-arch"].detail
    devices = _preflight(s, exists=lambda p: p != "/dev/kfd")
    assert devices["preflight.devices"].value == "/dev/kfd missing"
    unknown = _preflight(s, arch=(None, "no label"))
    assert "cannot tell" in unknown["preflight.gpu-arch"].detail
    model = _preflight(s, model_path=tmp_path / "no-model")
    assert not model["preflight.model"].passed and "--model" in model["preflight.model"].detail
    assert not _preflight(s, model_path=None)["preflight.model"].passed
    assert not _preflight(s, port_busy=lambda _p: True)["preflight.port"].passed
    assert not _preflight(s, image_found=False)["preflight.image"].passed


def test_cpu_scenario_preflight_skips_gpu_checks() -> None:
    checks = _preflight(smoke.load_scenario(CPU), gpus=None, arch=(None, "none"))
    assert set(checks) == {"preflight.image", "preflight.model", "preflight.port"}


def test_expected_arch_from_label_then_targets_and_conflicts() -> None:
    from sglforge.project import Project

    project = Project(ROOT)  # its targets, read once
    s = smoke.load_scenario(GLM)
    assert smoke.expected_arch(project, s, {})[0] == "gfx950"
    assert smoke.expected_arch(project, s, {LABEL_GPU_ARCH: "gfx950"})[0] == "gfx950"
    arch, why = smoke.expected_arch(project, s, {LABEL_GPU_ARCH: "gfx942"})
    assert arch is None and "gfx942" in why and "gfx950" in why
    cpu = smoke.load_scenario(CPU)
    assert smoke.expected_arch(project, cpu, {LABEL_TARGET: "mi300x"})[0] == "gfx942"
    assert smoke.expected_arch(project, cpu, {})[0] is None


# --------------------------------------------------------------------------- measurements


def test_answer_matching_ignores_reasoning_and_partial_numbers() -> None:
    assert smoke.answer_matches("The answer is 42.", "42")
    assert smoke.answer_matches("<think>40 + 2 is 42? or 43</think>\n42", "42")
    assert not smoke.answer_matches("<think>it is 42</think> It is 43.", "42")
    assert not smoke.answer_matches("1420", "42")
    assert not smoke.answer_matches("4.42", "42")
    assert not smoke.answer_matches("42.5", "42")


def test_decode_speed_excludes_the_prefill_token() -> None:
    chunks = [(10.0, {"meta_info": {"completion_tokens": 1}})]
    chunks += [(10.0 + i, {"meta_info": {"completion_tokens": 1 + 3 * i}}) for i in range(1, 5)]
    tok_s, tokens = smoke.decode_speed(chunks)
    assert tokens == 13 and tok_s == pytest.approx(3.0)
    assert smoke.decode_speed([]) == (0.0, 0)


def test_accept_length_from_meta_new_and_old_servers() -> None:
    new = [
        {"spec_verify_ct": 10, "spec_accept_length": 3.0, "completion_tokens": 31},
        {"spec_verify_ct": 30, "spec_accept_length": 4.0, "completion_tokens": 121},
    ]
    assert smoke.accept_length_from_meta(new)[0] == pytest.approx(3.75)
    old = [{"spec_verify_ct": 20, "completion_tokens": 60}]
    assert smoke.accept_length_from_meta(old)[0] == pytest.approx(3.0)
    value, detail = smoke.accept_length_from_meta([{"completion_tokens": 8}])
    assert value is None and "off" in detail


def test_accept_length_from_server_info() -> None:
    info = {"internal_states": [{"avg_spec_accept_length": 3.0}, {"avg_spec_accept_length": 4.0}]}
    assert smoke.accept_length_from_server_info(info) == pytest.approx(3.5)
    assert smoke.accept_length_from_server_info({"internal_states": [{}]}) is None
    assert smoke.accept_length_from_server_info({"avg_spec_accept_length": 2.0}) == 2.0


def test_scan_log_counts_each_pattern_with_its_severity(tmp_path: Path) -> None:
    s = smoke.load_scenario(GLM)
    log = tmp_path / "server.log"
    moe = "[aiter] [fused_moe] using 1stage default for (1,) "
    log.write_text(f"ok\n{moe}\nfine\n{moe}\n{moe}\n")
    (match,) = smoke.scan_log(log, s.checks.forbidden)
    assert match == smoke.LogMatch("aiter-moe-default", "warn", 3, 2, moe.strip(), why=match.why)
    check = smoke.logs_check([match], len(s.checks.forbidden))
    assert check.passed and check.value == 0
    assert "3 warning line(s): aiter-moe-default x3" in check.detail
    log.write_text(f"{moe}\nAssertionError\n")
    matches = smoke.scan_log(log, s.checks.forbidden)
    assert [(m.name, m.severity) for m in matches] == [
        ("bare-assertion-error", "fail"),
        ("aiter-moe-default", "warn"),
    ]
    check = smoke.logs_check(matches, 10)
    assert not check.passed and check.value == 1
    assert check.detail.startswith("bare-assertion-error: line 2: AssertionError")
    assert smoke.scan_log(tmp_path / "missing.log", s.checks.forbidden) == []


def test_severity_defaults_to_fail(tmp_path: Path) -> None:
    text = cpu_text().replace('severity = "warn"\n', "")
    s = smoke.load_scenario(write(tmp_path, text))
    assert {p.severity for p in s.checks.forbidden} == {"fail"}


def test_report_folders_are_unique_within_one_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(smoke.runner, "_stamp", lambda: "20261130T060000Z")
    first, id1 = smoke.new_report_dir(tmp_path, "standin-cpu")
    second, id2 = smoke.new_report_dir(tmp_path, "standin-cpu")
    assert first != second and id1 != id2 and first.is_dir() and second.is_dir()
    assert first.name == f"standin-cpu-20261130T060000Z-{id1}"
    # Should two runs ever draw the same id, the second one draws again rather than share.
    ids = iter(["a" * 32, "a" * 32, "b" * 32, *["c" * 32] * 200])
    monkeypatch.setattr(smoke.runner.uuid, "uuid4", lambda: type("U", (), {"hex": next(ids)})())
    third, _ = smoke.new_report_dir(tmp_path, "standin-cpu")
    fourth, id4 = smoke.new_report_dir(tmp_path, "standin-cpu")
    assert third != fourth and id4 == "b" * 8
    with pytest.raises(SmokeError):  # never loops for ever: all ids taken -> an error
        for _ in range(3):
            smoke.new_report_dir(tmp_path, "standin-cpu")


# --------------------------------------------------------------------------- reports


def sample_report(tmp_path: Path) -> smoke.SmokeReport:
    return smoke.SmokeReport(
        passed=False,
        verdict="failed",
        checks=(
            smoke.Check("ready", True, 12.5, 3600.0, seconds=12.5),
            smoke.Check("spec-accept.server", False, 1.3, 2.5, "avg_spec_accept_length low"),
            smoke.Check("stays-up", False, None, None, "not run", skipped=True),
        ),
        image="sglforge/sglang:v0.5.14-rocm700-mi355x-qabc",
        image_digest="sha256:" + "d" * 64,
        image_id="sha256:" + "e" * 64,
        scenario="glm5",
        scenario_path=GLM,
        figures={"decode_tok_s": 201.5, "ready_s": 12.5},
        log_path=tmp_path / "server.log",
        report_dir=tmp_path,
        log_tail=("line <one>", "line & two"),
        reason="failed: spec-accept.server",
        started_at="2026-11-30T06:00:00+00:00",
        duration_s=20.0,
    )


def test_json_has_passed_and_checks_with_value_and_threshold(tmp_path: Path) -> None:
    data = json.loads(json.dumps(smoke.report_dict(sample_report(tmp_path))))
    assert data["passed"] is False and data["verdict"] == "failed"
    assert {"name", "passed", "value", "threshold"} <= set(data["checks"][0])
    assert data["checks"][1] == {**data["checks"][1], "name": "spec-accept.server", "value": 1.3}
    assert data["figures"]["decode_tok_s"] == 201.5
    assert data["log_path"].endswith("server.log")


def test_junit_has_one_case_per_check_and_digest_and_figures(tmp_path: Path) -> None:
    report = sample_report(tmp_path)
    smoke.write_junit(report, tmp_path / "junit.xml")
    assert_valid_junit(tmp_path / "junit.xml")
    root = ET.parse(tmp_path / "junit.xml").getroot()
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    props = {p.get("name"): p.get("value") for p in suite.find("properties") or []}
    assert props["image_digest"] == report.image_digest
    assert props["figure.decode_tok_s"] == "201.5"
    cases = suite.findall("testcase")
    # Stable names: the check, never its outcome or detail; value and threshold in the message.
    assert [c.get("name") for c in cases] == [
        "smoke.ready",
        "smoke.spec-accept.server",
        "smoke.stays-up",
    ]
    failure = cases[1].find("failure")
    assert cases[0].find("failure") is None and failure is not None
    assert "value 1.3, threshold 2.5" in (failure.get("message") or "")
    assert props["check.spec-accept.server.value"] == "1.3"
    assert cases[2].find("skipped") is not None
    assert "line & two" in (suite.findtext("system-out") or "")


def test_markdown_appends_to_the_step_summary(tmp_path: Path) -> None:
    report = sample_report(tmp_path)
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    assert smoke.append_step_summary(report, {"GITHUB_STEP_SUMMARY": str(summary)}) == summary
    text = summary.read_text()
    assert text.startswith("earlier step\n")
    assert "FAILED" in text and "| spec-accept.server | FAIL | 1.3 | 2.5 |" in text
    assert smoke.append_step_summary(report, {}) is None


def test_table_rows_mark_results() -> None:
    report = sample_report(Path("/tmp"))
    headers, rows = smoke.table_rows(report)
    assert headers[:4] == ["check", "result", "value", "threshold"]
    assert [r[1] for r in rows] == ["ok", "FAIL", "skip"]


# --------------------------------------------------------------------------- container profile


def test_profile_becomes_docker_create_options() -> None:
    s = smoke.load_scenario(GLM)
    c = s.container
    profile = containers.Profile(
        devices=c.devices,
        group_add=c.group_add,
        ipc_mode=c.ipc_mode,
        shm_size=c.shm_size,
        security_opt=c.security_opt,
        cap_add=c.cap_add,
        nofile=c.nofile,
        mounts=(containers.Mount("/data/m", "/models/m"),),
        env=dict(c.env),
    )
    opts = containers.create_options(profile)
    assert opts["devices"] == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
    assert opts["group_add"] == ["video"] and opts["ipc_mode"] == "host"
    assert opts["network_mode"] == "host" and opts["security_opt"] == ["seccomp=unconfined"]
    assert opts["cap_add"] == ["SYS_PTRACE"] and opts["shm_size"] == c.shm_size
    (ulimit,) = opts["ulimits"]
    assert (ulimit.name, ulimit.soft, ulimit.hard) == ("nofile", c.nofile, c.nofile)
    (mount,) = opts["mounts"]
    assert mount["ReadOnly"] is True and mount["Source"] == "/data/m"
    assert opts["environment"]["SGLANG_USE_AITER"] == "1"
    assert "devices" not in containers.create_options(containers.Profile())


def test_engine_times_parse() -> None:
    assert containers._parse_time("0001-01-01T00:00:00Z") is None
    t = containers._parse_time("2026-11-30T06:00:01.123456789Z")
    assert t is not None and t % 60 == pytest.approx(1.123457, abs=1e-5)


# --------------------------------------------------------------------------- CLI


def test_smoke_command_is_registered_with_help() -> None:
    result = CliRunner().invoke(main, ["smoke", "--help"])
    assert result.exit_code == 0
    for option in ("--image", "--scenario", "--model", "--junit", "--json", "--port"):
        assert option in result.output


def test_scenarios_are_valid_toml_with_a_header_comment() -> None:
    for path in (GLM, CPU):
        assert path.read_text().startswith("#")
        tomllib.loads(path.read_text())


# --------------------------------------------------------------------------- warnings


def warned_report(tmp_path: Path) -> smoke.SmokeReport:
    matches = (
        smoke.LogMatch(
            "aiter-moe-default",
            "warn",
            12,
            40,
            "[aiter] [fused_moe] using 2stage default for (256, 1)",
            why="no tuned MoE config",
        ),
        smoke.LogMatch("flydsl-heuristic-fallback", "warn", 3, 41, "[aiter] no tuned FlyDSL"),
    )
    report = sample_report(tmp_path)
    return smoke.SmokeReport(
        **{
            **{f: getattr(report, f) for f in report.__dataclass_fields__},
            "passed": True,
            "verdict": "passed",
            "reason": "",
            "checks": (
                smoke.Check("ready", True, 12.5, 3600.0),
                smoke.logs_check(matches, 10),
            ),
            "warnings": matches,
            "figures": {"log_warnings": 15},
            "run_id": "0123abcd",
        }
    )


def test_warnings_show_in_json_junit_and_markdown_without_failing(tmp_path: Path) -> None:
    report = warned_report(tmp_path)
    assert report.passed and report.warning_count == 15 and not report.failed_checks
    data = json.loads(json.dumps(smoke.report_dict(report)))
    assert data["warning_count"] == 15 and data["run_id"] == "0123abcd"
    assert [w["name"] for w in data["warnings"]] == [
        "aiter-moe-default",
        "flydsl-heuristic-fallback",
    ]
    assert_valid_junit(smoke.junit_xml(report))
    root = ET.fromstring(smoke.junit_xml(report).split("\n", 1)[1])
    suite = root.find("testsuite")
    assert suite is not None and suite.get("failures") == "0"
    props = {p.get("name"): p.get("value") for p in suite.find("properties") or []}
    assert props["warnings"] == "15" and props["run_id"] == "0123abcd"
    assert props["logs.warnings"] == "15"
    (logs,) = [c for c in suite.findall("testcase") if c.get("name") == "smoke.logs"]
    assert logs.find("failure") is None
    out = logs.findtext("system-out") or ""
    assert "WARNING aiter-moe-default: line 40:" in out and "(+11 more)" in out
    md = smoke.markdown(report)
    assert "PASSED with 15 warning line(s)" in md
    assert "| aiter-moe-default | 12 | line 40:" in md
    headers, rows = smoke.table_rows(report)
    (logs_row,) = [r for r in rows if r[0] == "logs"]
    assert logs_row[1] == "ok" and "15 warning line(s)" in logs_row[4]


# --------------------------------------------------------------------------- required lines

CPU_AITER = ROOT / "smoke" / "standin-cpu-aiter.toml"
TP4DP2 = ROOT / "smoke" / "glm5-mxfp4-mtp-tp4dp2-mi355x.toml"
REQUIRED = """
[[checks.logs.required]]
name = "ready-line"
pattern = 'fired up and ready'
why = "the server said so"
"""


def test_required_lines_parse_with_defaults_and_min_count(tmp_path: Path) -> None:
    text = cpu_text() + REQUIRED + REQUIRED.replace("ready-line", "twice") + "min_count = 2\n"
    s = smoke.load_scenario(write(tmp_path, text))
    assert s.checks.required == (
        smoke.RequiredPattern("ready-line", "fired up and ready", "the server said so"),
        smoke.RequiredPattern("twice", "fired up and ready", "the server said so", "fail", 2),
    )
    assert smoke.load_scenario(CPU).checks.required == ()


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ("colour = 'red'\n", "unknown key 'checks.logs.required[0].colour'"),
        ('severity = "info"\n', '\'checks.logs.required[0].severity\' must be "fail" or "warn"'),
        ("min_count = 0\n", "'checks.logs.required[0].min_count' must be an integer greater"),
        ("min_count = 1.5\n", "'checks.logs.required[0].min_count' must be an integer"),
    ],
)
def test_bad_required_lines_are_rejected_naming_file_and_key(
    tmp_path: Path, extra: str, needle: str
) -> None:
    path = write(tmp_path, cpu_text() + REQUIRED + extra)
    with pytest.raises(ConfigError) as exc:
        smoke.load_scenario(path)
    assert needle in exc.value.message and str(path) in exc.value.message


def test_a_bad_required_regex_or_a_reused_name_is_a_config_error(tmp_path: Path) -> None:
    path = write(tmp_path, cpu_text() + REQUIRED.replace("fired up and ready", "fired (up"))
    with pytest.raises(ConfigError, match="required log pattern 'ready-line' is not a valid"):
        smoke.load_scenario(path)
    path = write(tmp_path, cpu_text() + REQUIRED.replace("ready-line", "python-traceback"))
    with pytest.raises(ConfigError, match="'python-traceback' is used twice"):
        smoke.load_scenario(path)


def test_missing_required_lines_fail_or_warn_and_found_ones_show(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("x\n[aiter] hit one\ny\n[aiter] hit two\n")
    patterns = (
        smoke.RequiredPattern("hits", r"\[aiter\] hit", min_count=2),
        smoke.RequiredPattern("merge", "merge tuned file"),
        smoke.RequiredPattern("soft", "never printed", severity="warn"),
        smoke.RequiredPattern("three", "hit", min_count=3),
    )
    found = smoke.scan_required(log, patterns)
    assert [(r.name, r.count, r.first_line, r.missing) for r in found] == [
        ("hits", 2, 2, False),
        ("merge", 0, 0, True),
        ("soft", 0, 0, True),
        ("three", 2, 2, True),
    ]
    check = smoke.logs_check([], 10, found)
    assert not check.passed and check.value == 2
    assert check.detail.startswith("merge: required line missing (0 of at least 1)")
    assert "three: required line missing (2 of at least 3)" in check.detail
    assert "required line(s) missing (warn): soft" in check.detail
    assert "required found: hits x2" in check.detail
    ok = smoke.logs_check([], 10, [found[0], found[2]])
    assert ok.passed and "soft" in ok.detail
    assert smoke.scan_required(tmp_path / "none.log", patterns[:1])[0].missing


def test_required_lines_show_in_json_junit_and_markdown(tmp_path: Path) -> None:
    required = (
        smoke.LogMatch(
            "merge", "fail", 1, 7, "[aiter] merge tuned file ...", kind="required", need=1
        ),
        smoke.LogMatch("hit", "fail", 0, 0, "", why="our rows used", kind="required", need=2),
        smoke.LogMatch("soft", "warn", 0, 0, "", kind="required", need=1),
    )
    report = sample_report(tmp_path)
    report = smoke.SmokeReport(
        **{
            **{f: getattr(report, f) for f in report.__dataclass_fields__},
            "checks": (smoke.logs_check([], 3, required),),
            "required": required,
            "warnings": (required[2],),
        }
    )
    assert report.warning_count == 1 and report.failed_checks[0].name == "logs"
    data = json.loads(json.dumps(smoke.report_dict(report)))
    assert [(r["name"], r["count"], r["need"]) for r in data["required"]] == [
        ("merge", 1, 1),
        ("hit", 0, 2),
        ("soft", 0, 1),
    ]
    assert_valid_junit(smoke.junit_xml(report))
    root = ET.fromstring(smoke.junit_xml(report).split("\n", 1)[1])
    (logs,) = root.iter("testcase")
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["logs.required.merge"] == "1/1" and props["logs.required.hit"] == "0/2"
    out = logs.findtext("system-out") or ""
    assert "REQUIRED FOUND merge: line 7:" in out
    assert "REQUIRED MISSING hit: required line missing (0 of at least 2) -- our rows used" in out
    assert "REQUIRED MISSING (warn) soft" in out
    failure = logs.find("failure")
    assert failure is not None and "hit: required line missing" in (failure.get("message") or "")
    md = smoke.markdown(report)
    assert "| merge | ok | 1 (need 1) | line 7: `[aiter] merge tuned file ...` |  |" in md
    assert "| hit | FAIL | 0 (need 2) | - | our rows used |" in md
    assert "| soft | warn | 0 (need 1) | - |  |" in md
    assert "| soft | 0 | soft: required line missing (0 of at least 1) |" in md


def test_the_aiter_scenarios_require_our_table_and_fail_on_covered_fallbacks() -> None:
    item = "sglforge_glm52_mxfp4_moe_gfx950_tuned_fmoe.csv"
    merge = (
        f"[aiter] merge tuned file under model_configs/ and configs/ /a/tuned_fmoe.csv:/a/{item}"
    )
    tail = (
        "6144, 512, 256, 8, 'ActivationType.Silu', 'torch.bfloat16', 'torch.float4_e2m1fn_x2', "
        "'torch.float4_e2m1fn_x2', 'QuantType.per_1x32', True, False) "
    )
    hit = "[aiter] [fused_moe] using 2stage (kernelName1='k1', kernelName2='k2') for (256, {}, "
    default = "[aiter] [fused_moe] using 2stage default for (256, {}, "
    for path in (GLM, TP4DP2, CPU_AITER):
        s = smoke.load_scenario(path)
        (rx,) = [re.compile(r.pattern) for r in s.checks.required if "merges" in r.name]
        assert rx.search(merge) and not rx.search(merge.replace(item, "glm5_fp4_tuned_fmoe.csv"))
    s = smoke.load_scenario(TP4DP2)
    assert s.gpus_needed == 8 and "--tp 4 --dp 2" in " ".join(s.args)
    assert "--speculative-num-draft-tokens 6" in " ".join(s.args)
    # aiter 9127c94a18e4 prefixes the key with gfx (7d604afe5fa7 does not); the shapes are what
    # `sglforge configs coverage` lists (tests/integration/test_coverage_differential.py).
    act = "<ActivationType.Silu: 0>, 'torch.bfloat16', 'torch.float4_e2m1fn_x2', "
    tail = act + "'torch.float4_e2m1fn_x2', 'QuantType.per_1x32', True, False) "
    hit = "[aiter] [fused_moe] using 2stage (kernelName1='k1', kernelName2='k2') for "
    flat = "[aiter] [fused_moe] using 1stage xbf16 (kernelName1='k1', kernelName2='') for "
    default = "[aiter] [fused_moe] using 2stage default for "
    for path, inter in ((TP4DP2, 512), (GLM, 256)):
        s = smoke.load_scenario(path)

        def key(t: int, expert: int = 257, topk: int = 9, i: int = inter) -> str:
            return f"('gfx950', 256, {t}, 6144, {i}, {expert}, {topk}, " + tail

        (rx,) = [re.compile(r.pattern) for r in s.checks.required if r.name == "aiter-tuned-hit"]
        assert all(rx.search(hit + key(t)) for t in (1, 16, 64, 16384))
        assert rx.search(flat + key(2))
        assert not rx.search(default + key(16)) and not rx.search(hit + key(16, 256, 8))
        assert not rx.search(hit + key(16, i=2048))
        fails = [
            re.compile(p.pattern)
            for p in s.checks.forbidden
            if p.severity == "fail" and "covered" in p.name
        ]
        for line, covered in (
            (default + key(16), True),
            (default + key(8, 256, 8), True),
            (default + key(16, i=1024), False),
            (hit + key(16), False),
        ):
            assert any(rx.search(line) for rx in fails) is covered, line
    # The stand-in scenario (the replica's aiter 0.1.7: no gfx in the key) is handed the main
    # model's 257/9 shape and requires its hits.
    s = smoke.load_scenario(CPU_AITER)
    old = "(256, {}, 6144, 512, 257, 9, 'ActivationType.Silu', 'torch.bfloat16', "
    required = [re.compile(r.pattern) for r in s.checks.required if "tuned" in r.name]
    assert required[0].search(hit + old.format(16)) and required[1].search(hit + old.format(64))
    assert not required[0].search(hit + old.format(16).replace("257, 9", "256, 8"))


def test_the_aiter_scenarios_prompts_reach_the_covered_prefill_buckets() -> None:
    for path in (TP4DP2, CPU_AITER):
        words = {len(p.split()) for p in smoke.load_scenario(path).checks.prompts}
        # the stand-in counts words; aiter 0.1.x buckets 17..32 -> 32 and 33..64 -> 64
        assert any(17 <= w <= 32 for w in words) and any(33 <= w <= 64 for w in words), path


# --------------------------------------------------------------------------- the docs


def _schema_keys() -> set[str]:
    """Every key the scenario loader reads (recorded while it loads every shipped scenario)."""
    keys: set[str] = set()
    original = config.Table.get

    def recording(self, key, kind, default=config.REQUIRED):  # type: ignore[no-untyped-def]
        where = re.sub(r"\[\d+\]", "", self.where)
        keys.add(f"{where}.{key}" if where else key)
        return original(self, key, kind, default)

    config.Table.get = recording  # type: ignore[method-assign]
    try:
        for scenario in sorted((ROOT / "smoke").glob("*.toml")):
            smoke.load_scenario(scenario)
    finally:
        config.Table.get = original  # type: ignore[method-assign]
    return keys


def test_readme_smoke_section_documents_every_scenario_key() -> None:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Smoke scenarios")
    section = text[start : text.index("\n## ", start + 1)]
    keys = _schema_keys()
    assert "checks.logs.forbidden.severity" in keys and "launch.command" in keys
    assert "checks.logs.required.min_count" in keys
    tables = {k for k in keys if any(o.startswith(k + ".") for o in keys)}
    missing = sorted(k for k in keys - tables if f"`{k.rsplit('.', 1)[-1]}`" not in section)
    assert not missing, f"README's smoke section does not document {missing}"
    for table in {k.rsplit(".", 1)[0] for k in keys if "." in k}:
        leaf = table.rsplit(".", 1)[-1]
        assert any(f in section for f in (f"[{table}]", f"[[{table}]]", f"`{leaf}`")), table
    assert "python3 -m sglang.launch_server" in section and "ENTRYPOINT" in section
    assert '"warn"' in section and '"fail"' in section


# --------------------------------------------------------------------------- the real release


@pytest.fixture(scope="module")
def real() -> Callable[[str], list[str]]:
    """``real(path)``: the lines of a file of the released sglang 0.5.14 wheel, from PyPI."""
    from sglang_release import pypi_cache, release_history

    release_history("==0.5.14")
    (wheel,) = (pypi_cache() / "pypi-sglang" / "wheels").glob("sglang-0.5.14-*.whl")
    archive = zipfile.ZipFile(wheel)
    return lambda path: archive.read(f"sglang/{path}").decode().splitlines()


class _Shape:
    """Prints like a ``torch.Size``."""

    def __init__(self, *dims: int) -> None:
        self.dims = dims

    def __repr__(self) -> str:
        return f"torch.Size({list(self.dims)})"


class _Tensor:
    def __init__(self, *dims: int, dtype: str) -> None:
        self.shape = _Shape(*dims)
        self.dtype = dtype

    def size(self) -> _Shape:
        return self.shape


# (file, line, needle): the cited line of the real source, and what it must still say.
CITED = [
    ("srt/layers/linear.py", 274, 'f"{param.shape=} {param.dtype=} {loaded_weight.shape=}'),
    ("srt/layers/linear.py", 436, "!= loaded_weight.shape={loaded_weight.shape}"),
    ("srt/layers/linear.py", 724, "assert param_data.shape == loaded_weight.shape"),
    ("srt/layers/linear.py", 1335, 'f"{param_data.shape=} {loaded_weight.shape=}"'),
    ("srt/layers/parameter.py", 59, 'f"{target.shape=}, {loaded_weight.shape=}"'),
    ("srt/model_loader/weight_utils.py", 1313, 'f"Attempted to load weight ({loaded_weight'),
    ("srt/managers/scheduler.py", 4231, 'logger.error(f"Scheduler hit an exception: {traceback}")'),
    ("jit_kernel/fused_metadata_copy.py", 54, "Failed to compile JIT fused metadata copy kernel"),
    ("jit_kernel/csrc/elementwise/fused_metadata_copy.cuh", 38, "#include <cuda_runtime.h>"),
    (
        "srt/layers/attention/dsa_backend.py",
        2723,
        "Multi-backend fused metadata copy kernel not available, falling back to loop.",
    ),
    ("srt/layers/attention/dsa_backend.py", 2727, "kernel failed with error: {e}, falling back"),
]


@pytest.mark.pypi
@pytest.mark.parametrize(("path", "line", "needle"), CITED, ids=lambda v: str(v)[:40])
def test_cited_release_lines_say_what_the_scenarios_claim(real, path, line, needle) -> None:
    assert needle in real(path)[line - 1], f"sglang 0.5.14 {path}:{line} changed"


@pytest.mark.pypi
@pytest.mark.parametrize(
    ("path", "line"),
    [
        ("srt/layers/linear.py", 274),
        ("srt/layers/linear.py", 436),
        ("srt/layers/linear.py", 1335),
        ("srt/layers/parameter.py", 59),
        ("srt/layers/attention/dsa_backend.py", 2727),
    ],
)
def test_patterns_catch_the_release_messages_rendered(real, path: str, line: int) -> None:
    """Render the release's own f-string with made-up tensors; the scenario must catch it."""
    source = real(path)[line - 1]
    literal = re.search(r'\bf"(?:[^"\\]|\\.)*"', source)
    assert literal, source
    values = {
        "param": _Tensor(6144, 1536, dtype="torch.uint8"),
        "param_data": _Tensor(2048, 3072, dtype="torch.uint8"),
        "target": _Tensor(2048, dtype="torch.float32"),
        "loaded_weight": _Tensor(2048, 6144, dtype="torch.bfloat16"),
        "e": "HIP error: invalid argument",
    }
    message = eval(literal.group(0), {}, values)  # noqa: S307 - the release's own literal
    kind = "Warning" if message.startswith("Warning") else "AssertionError"
    rendered = message if kind == "Warning" else f"AssertionError: {message}"
    patterns = smoke.load_scenario(GLM).checks.forbidden
    hits = {p.name for p in patterns if re.search(p.pattern, rendered) and p.severity == "fail"}
    assert hits, rendered
