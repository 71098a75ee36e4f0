"""The gate's plan and protocol in the bench runner, without a server: the node profile's
file (written, read from any node, refused when it is not one), the boots a side planned
from it, the first look that stops an ABBA comparison early, the measured boot time in the
plan, and the warm-up probe recorded in the report's notes."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from pathlib import Path

import pytest

from sglforge.bench import noise as node_noise
from sglforge.bench import runner
from sglforge.bench.cost import DECLARED_BOOT, boots_a_side, planned_cost, require_passable
from sglforge.bench.stats import Block, Point, abba
from sglforge.errors import ConfigError
from sglforge.scenario.file import load_scenario

REPO = Path(__file__).resolve().parents[2]
GLM = REPO / "smoke" / "glm5-mxfp4-mtp-mi355x.toml"
FIGURE = "decode_tok_s_per_request_at_concurrency_16"


# 8 boot levels of mean 0 and standard deviation 1: a profile measures exactly the sd asked
LEVELS = (-1.5, -1.0, -0.5, 0.0, 0.0, 0.5, 1.0, 1.5)


def _speeds(rng: random.Random, level: float, boot: float) -> tuple[float, ...]:
    """64 requests around ``level`` x exp(``boot``), 0.2 % apart (a boot's spread within)."""
    return tuple(level * math.exp(boot + rng.gauss(0, 0.002)) for _ in range(64))


def _profile(tmp_path: Path, boot_sd: float, seconds: tuple[float, ...] = ()) -> Path:
    rng = random.Random(f"profile-{boot_sd}")
    blocks = [
        Block("baseline", i, _speeds(rng, 200.0, boot_sd * z), 16) for i, z in enumerate(LEVELS)
    ]
    prof = node_noise.measure(
        blocks, scenario="glm5-mxfp4-mtp-mi355x", hardware="8x AMD Instinct MI355X",
        figure=FIGURE, boot_seconds=seconds or (119.0, 90.0, *[60.0] * 6),
    )  # fmt: skip
    return node_noise.save(prof, tmp_path / "noise.json")


def _ctx(tmp_path: Path) -> runner._Ctx:
    sc = load_scenario(GLM)
    assert sc.bench is not None
    return runner._Ctx(
        root=tmp_path, scenario=sc, bench=sc.bench, port=1, model_path=None,
        report_dir=tmp_path, env={}, labels={}, say=lambda _m: None, timeout=1.0,
    )  # fmt: skip


def _boot(side: str, order: int, speeds: tuple[float, ...]) -> runner._Measured:
    p = Point(math.inf, 1.0, 1.0, 0.1, 0.2, 1.0, None, decode_tok_s=speeds)
    return runner._Measured(side, order, (), p, None, (), 60.0, 30.0)


def test_a_profile_is_written_and_read_back_from_any_node(tmp_path: Path) -> None:
    path = _profile(tmp_path, 0.01)
    doc = json.loads(path.read_text())
    assert doc["kind"] == "sglforge-bench-noise" and doc["boots"] == 8 and doc["dof"] == 7
    assert doc["shape"] == {"concurrency": 16, "requests_per_boot": 64}
    assert {"boot_sd", "within_boot_sd", "intra_batch_correlation", "hardware"} <= set(doc)
    back = node_noise.load(path)
    assert back.boot_sd == pytest.approx(doc["boot_sd"]) and back.path == str(path)
    assert back.noise().dof == 7 and back.noise().requests == 64
    # the first boot of a fresh machine (119 s) is left out of the boot time
    assert back.boot_minutes() == pytest.approx(1.0)
    for bad in ("{", "[]", json.dumps({"kind": "other"}), json.dumps({**doc, "boot_means": [1]})):
        (tmp_path / "bad.json").write_text(bad)
        with pytest.raises(ConfigError, match=r"bad\.json: not a bench noise profile"):
            node_noise.load(tmp_path / "bad.json")


def test_the_cache_keeps_one_profile_per_scenario_and_hardware(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SGLFORGE_CACHE", str(tmp_path / "cache"))
    where = node_noise.default_path("glm5 mi355x", "8x AMD Instinct MI355X")
    assert where.parent == tmp_path / "cache" / "bench-noise"
    assert where.name == "glm5-mi355x--8x-AMD-Instinct-MI355X.json"
    assert node_noise.find("glm5 mi355x", "8x AMD Instinct MI355X") is None
    node_noise.save(node_noise.load(_profile(tmp_path, 0.01)), where)
    assert node_noise.find("glm5 mi355x", "8x AMD Instinct MI355X") is not None


def test_the_boots_a_side_follow_the_measured_noise(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    quiet = runner._node_profile(ctx, _profile(tmp_path, 0.003))
    assert quiet is not None and "node profile" in ctx.notes[-1]
    assert "this node is" in ctx.notes[-1]  # measured on an MI355X, read on this machine
    per_side = boots_a_side(ctx.bench, quiet.noise())
    medium = node_noise.load(_profile(tmp_path / "m", 0.016)).noise()
    noisy = node_noise.load(_profile(tmp_path / "n", 0.04)).noise()
    # the declared plan is repeats (4); a quiet node plans fewer, a noisier one more (up to
    # [bench.gate] max_repeats, 8), a noisier still is refused before any boot
    assert per_side < ctx.bench.repeats
    assert boots_a_side(ctx.bench, None) == ctx.bench.repeats
    assert ctx.bench.repeats < boots_a_side(ctx.bench, medium) <= ctx.bench.gate.max_repeats
    require_passable(ctx.bench, GLM, medium)
    with pytest.raises(ConfigError, match="it would take") as err:
        require_passable(ctx.bench, GLM, noisy)
    assert "8 boot(s) a side ([bench.gate] max_repeats)" in err.value.message
    # a profile of another figure is not used, and the notes say so
    other = replace(node_noise.load(_profile(tmp_path, 0.003)), figure="other")
    node_noise.save(other, tmp_path / "other.json")
    assert runner._node_profile(ctx, tmp_path / "other.json") is None
    assert "measured other" in ctx.notes[-1]


def test_the_first_look_stops_an_unchanged_image_and_a_drop_early(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    ctx.bench = replace(ctx.bench, single_stream=None)
    ctx.profile = runner._node_profile(ctx, _profile(tmp_path, 0.004))
    ctx.per_side = 6
    rng = random.Random(3)
    for drop, status in ((0.0, "passed"), (0.10, "regressed")):
        boots = []
        for i, side in enumerate(abba(6)):
            level = 200.0 * (1 - drop if side == "candidate" else 1.0)
            boots.append(_boot(side, i, _speeds(rng, level, rng.gauss(0, 0.004))))
            if runner._stops_early(ctx, boots):
                break
        assert len(boots) == 4, (drop, ctx.notes[-1])
        assert f"{FIGURE} {status}" in ctx.notes[-1] and "stopped early" in ctx.notes[-1]
        (change,) = runner._changes(ctx, boots)
        assert change.status == status and not change.final and change.look == 2
        assert change.within_sd is not None  # from the 4 waves of 16 in each boot


def test_without_a_profile_the_comparison_has_one_look(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    ctx.per_side = 4
    assert runner._looks(ctx) is None  # 2 degrees of freedom at the first look: no stop


def test_the_plan_takes_the_measured_boot_time_and_the_warmup(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    declared = runner._planned(ctx, compared=True)
    assert declared.boot_source == DECLARED_BOOT and declared.parts[0].minutes_each == 2.0
    names = [p.name for p in declared.parts]
    assert "warm-up probe, discarded (the compared shape)" in names
    assert not any(n.startswith("calibration: the first probe again") for n in names)
    ctx.profile = runner._node_profile(ctx, _profile(tmp_path, 0.003, (119.0, 75.0, 66.0, 70.0)))
    measured = runner._planned(ctx, compared=True)
    assert measured.parts[0].minutes_each == pytest.approx(70.0 / 60)
    assert measured.boot_source.startswith("measured: median boot to ready of 4 boots")
    assert measured.noise_source.endswith("8x AMD Instinct MI355X")
    assert measured.as_dict()["boot_source"] == measured.boot_source
    off = planned_cost(ctx.bench, warmup=False)
    assert off.node_minutes < declared.node_minutes
    assert any(p.name.startswith("calibration") for p in off.parts)


def test_the_warmup_is_recorded_in_the_notes(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    assert runner._protocol(ctx).startswith("warm-up probe: 32 requests at concurrency 16")
    ctx.warmup = False
    assert runner._protocol(ctx) == (
        "warm-up probe: off (--no-warmup): the compared probe is each boot's first"
    )
    standin = load_scenario(REPO / "smoke" / "standin-cpu.toml").bench
    assert standin is not None and standin.speed.warmup_probe is False
    ctx.bench = standin
    assert "[bench.speed] warmup_probe = false" in runner._protocol(ctx)


def test_the_single_stream_is_calibrated_in_the_same_boots(tmp_path: Path) -> None:
    rng = random.Random(7)
    speed = [Block("baseline", i, _speeds(rng, 200.0, 0.004 * z), 16) for i, z in enumerate(LEVELS)]
    single = [Block("baseline", i, (213.0 * math.exp(0.01 * z),)) for i, z in enumerate(LEVELS)]
    prof = node_noise.measure(
        speed, scenario="s", hardware="h", figure=FIGURE,
        others={runner.SINGLE_FIGURE: single},
    )  # fmt: skip
    back = node_noise.load(node_noise.save(prof, tmp_path / "p.json"))
    its = back.noise_of(runner.SINGLE_FIGURE)
    assert its is not None and its.dof == 7 and its.requests == 1
    assert its.boot_sd == pytest.approx(0.01, rel=1e-6)
    assert back.noise_of(FIGURE) == back.noise() and back.noise_of("other") is None
    # the comparison of the single stream pools that profile (2 + 2 boots: 2 + 7 dof)
    ctx = _ctx(tmp_path)
    ctx.profile, ctx.per_side = back, 2
    boots = [
        runner._Measured(side, i, (), _boot(side, i, speed[i].samples).speed, None, (213.0,), 1, 1)
        for i, side in enumerate(abba(2))
    ]
    _, single_change = runner._changes(ctx, boots)
    assert single_change.figure == runner.SINGLE_FIGURE and single_change.dof == 9


def test_the_dry_run_plan_uses_this_nodes_cached_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SGLFORGE_CACHE", str(tmp_path / "cache"))
    sc = load_scenario(GLM)
    declared = runner.plan(sc)
    assert declared.boot_source == DECLARED_BOOT and declared.boots == 8
    hardware = node_noise.node_hardware(sc.standin)
    prof = node_noise.load(_profile(tmp_path, 0.003, (119.0, 75.0, 66.0, 70.0)))
    node_noise.save(prof, node_noise.default_path(sc.name, hardware))
    measured = runner.plan(sc)
    assert measured.boot_source.startswith("measured:") and measured.boots < declared.boots
    assert measured.node_minutes < declared.node_minutes


@pytest.mark.parametrize(
    ("printed", "names"),
    [
        ("NVIDIA H200\n", ["NVIDIA H200"]),  # nvidia-smi --query-gpu=name --format=csv,noheader
        ("NVIDIA H200\nNVIDIA H200\n", ["NVIDIA H200", "NVIDIA H200"]),
        (  # rocm-smi --showproductname --csv
            "device,Card Series,Card Model,Card Vendor,Card SKU\n"
            "card0,AMD Instinct MI355X,0x75a3,Advanced Micro Devices Inc.,MI355X\n",
            ["AMD Instinct MI355X"],
        ),
        ("", []),
    ],
)
def test_the_hardware_a_profile_is_kept_under_is_the_devices_name(
    printed: str, names: list[str]
) -> None:
    assert node_noise._gpu_names(printed) == names
