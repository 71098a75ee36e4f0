"""aiter's lookup rules as sglforge.coverage applies them, and the citations they rest on.

The rules (bucket, key, tagged rows, gfx from cu_num, act_type fallback, tier fallback, the
``AITER_CONFIG_FMOE`` replace trap) are exercised on small tables built here. The last test
reads ROCm/aiter at 9127c94a18e4 (the rule coverage applies when no base's aiter is read;
tests/unit/test_aiter_rules.py reads each base's) and fails if
the cited lines no longer say what coverage.py relies on: from a clone when one is present
(``$SGLFORGE_AITER_REPO`` or the search tool's mirror), else from the copies shipped under
tests/data/aiter with their blob ids (``tests/aiter_data.py``), so it runs in CI too.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
from pathlib import Path

import pytest

import aiter_data
from sglforge import coverage
from sglforge.queue.configs import base_tables, load_items

REPO = Path(__file__).resolve().parents[2]
AITER_COMMIT = "9127c94a18e4398e1eba91f6639e910f0994ad02"
UNTUNED = (
    "token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type,"
    "use_g1u1,doweight_stage1"
)
FP4 = coverage.Shape(
    model_dim=6144,
    inter_dim=256,
    expert=257,
    topk=9,
    act_type="ActivationType.Silu",
    dtype="torch.bfloat16",
    q_dtype_a="torch.float4_e2m1fn_x2",
    q_dtype_w="torch.float4_e2m1fn_x2",
    q_type="QuantType.per_1x32",
    use_g1u1=1,
    doweight_stage1=0,
)


def test_token_buckets_are_aiter_s_get_padded_m() -> None:
    from sglforge.aiter_rules import default_rule

    padded_m = default_rule().buckets
    assert [padded_m(m) for m in (0, 1, 2, 3, 5, 16, 17, 1000, 1025, 32767)] == [
        1,
        1,
        2,
        4,
        8,
        16,
        32,
        1024,
        2048,
        32768,
    ]
    assert [padded_m(m) for m in (32768, 100000, 131072, 500000)] == [
        32768,
        32768,
        131072,
        131072,
    ]
    decode, prefill = coverage.token_buckets(
        {
            "capture_bs": [1, 2, 3, 8],
            "tokens_per_bs": {"target_verify": 6},
            "chunked_prefill_size": 100,
        }
    )
    assert decode == [8, 16, 32, 64]  # 6, 12, 18, 48 tokens
    assert prefill == [1, 2, 4, 8, 16, 32, 64, 128]


def row(**over: str) -> dict[str, str]:
    base = dict(
        gfx="gfx950",
        cu_num="256",
        token="1",
        model_dim="6144",
        inter_dim="256",
        expert="257",
        topk="9",
        act_type="ActivationType.Silu",
        dtype="torch.bfloat16",
        q_dtype_a="torch.float4_e2m1fn_x2",
        q_dtype_w="torch.float4_e2m1fn_x2",
        q_type="QuantType.per_1x32",
        use_g1u1="1",
        doweight_stage1="0",
        block_m="32",
        ksplit="0",
        kernelName1="k1",
        kernelName2="k2",
        us="1.0",
        _tag="",
    )
    base.update(over)
    return base


def answer(rows: list[dict[str, str]], token: int) -> tuple[str, str | None]:
    table = coverage._table("t.csv", coverage.TUNED_BASE, rows)
    return coverage._answer(FP4, token, [table], "gfx950", 256)


def test_the_lookup_key_and_its_fallbacks() -> None:
    assert answer([row(token="2")], 2) == ("tuned-base", "t.csv")
    assert answer([row(token="2")], 4)[0] == "miss"
    assert answer([row(expert="256", topk="8")], 1)[0] == "miss"  # fusion decides the key
    assert answer([row(inter_dim="512")], 1)[0] == "miss"  # TP decides inter_dim
    assert answer([row(_tag="flydsl_fallback")], 1)[0] == "miss"  # tagged: not a tuned row
    assert answer([row(gfx="", cu_num="256")], 1)[0] == "tuned-base"  # gfx from cu_num
    assert answer([row(gfx="gfx942")], 1)[0] == "miss"
    assert answer([row(cu_num="304", gfx="")], 1)[0] == "miss"  # MI300X's CU count
    assert answer([row(act_type="ActivationType.Gelu")], 1)[0] == "tuned-base"  # act fallback
    assert answer([row(use_g1u1="True", token="1.0")], 1)[0] == "tuned-base"
    assert answer([row(q_type="QuantType.per_1x128")], 1)[0] == "miss"
    # The largest tier falls back to the smaller one when it has no row.
    assert answer([row(token="32768")], 131072) == ("tuned-base", "t.csv")
    assert answer([row(token="131072")], 32768)[0] == "miss"


def table_text(rows: list[dict[str, str]]) -> str:
    columns = load_items(REPO)[0].columns  # the item's own columns: every row fits
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, restval="0", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def test_aiter_config_fmoe_replaces_the_merge_so_items_go_unread(tmp_path: Path) -> None:
    root = tmp_path / "project"
    shutil.copytree(REPO / "patches" / "configs", root / "patches" / "configs")
    items = load_items(root)
    model = {"dsv3_fp4_tuned_fmoe.csv": table_text([row(expert="33")])}
    base = base_tables("/a/configs", "tuned_fmoe", table_text([]), UNTUNED, model)
    tables, notes = coverage.merged_tables(base, items)
    assert [t.name for t in tables] == [
        "aiter/configs/tuned_fmoe.csv",
        "aiter/configs/model_configs/dsv3_fp4_tuned_fmoe.csv",
        "patches/configs/glm52-mxfp4-moe-gfx950.csv",
    ]
    assert notes == []
    assert coverage._answer(FP4, 1, tables, "gfx950", 256) == (
        "tuned-item",
        "patches/configs/glm52-mxfp4-moe-gfx950.csv",
    )
    env = {"AITER_CONFIG_FMOE": "/sgl-workspace/aiter/aiter/configs/tuned_fmoe.csv"}
    tables, notes = coverage.merged_tables(base, items, env)
    assert [t.name for t in tables] == ["aiter/configs/tuned_fmoe.csv"]
    assert "AITER_CONFIG_FMOE" in notes[0]
    assert coverage._answer(FP4, 1, tables, "gfx950", 256)[0] == "miss"


# (file, line, text the line holds) for every aiter line coverage.py cites.
CITED = [
    ("aiter/fused_moe.py", 251, "def get_inter_dim(w1_shape, w2_shape):"),
    ("aiter/fused_moe.py", 253, "E, model_dim, inter_dim = w2_shape"),
    ("aiter/fused_moe.py", 255, "int4_war = model_dim // w1_shape[-1]"),
    ("aiter/fused_moe.py", 388, "M, topk = topk_ids.shape"),
    ("aiter/fused_moe.py", 395, "isG1U1 = inter_dim != w1.shape[1]"),
    ("aiter/fused_moe.py", 407, "q_dtype_w = w1.dtype"),
    ("aiter/fused_moe.py", 408, "q_dtype_a = w1.dtype if w1.dtype != torch.uint32"),
    ("aiter/fused_moe.py", 855, "_PADDED_M_TIERS = [32768, 131072]"),
    ("aiter/fused_moe.py", 858, "def get_padded_M(M):"),
    ("aiter/fused_moe.py", 860, "return nextPow2(M)"),
    ("aiter/fused_moe.py", 1065, "_INDEX_COLS = ["),
    ("aiter/fused_moe.py", 1086, 'df["gfx"] = df["cu_num"].map(gfx_from_cu_num)'),
    ("aiter/fused_moe.py", 1102, 'df = df[df["_tag"].fillna("") == ""]'),
    ("aiter/fused_moe.py", 1175, "topk -= int(is_ep)"),
    ("aiter/fused_moe.py", 1234, "result = primary.get(keys, None)"),
    ("aiter/fused_moe.py", 1236, "result = fallback.get(keys_disabled, None)"),
    ("aiter/fused_moe.py", 1238, "if result is None and token > _PADDED_M_TIERS[0]:"),
    ("aiter/jit/core.py", 235, '_FILL_DEFAULTS = {"xbf16": 0, "run_1stage": 0, "ksplit": 0}'),
    ("aiter/jit/core.py", 354, 'for p in model_config_dir.glob(f"*{tuned_file_name}*.csv")'),
    ("aiter/jit/core.py", 355, 'if (p.is_file() and "untuned" not in p.name)'),
    ("aiter/jit/core.py", 368, "config_file = self.update_config_files(config_env_file"),
]


def test_the_cited_aiter_lines_say_what_coverage_relies_on() -> None:
    files: dict[str, list[str]] = {}
    for path, line, text in CITED:
        if path not in files:
            files[path] = aiter_data.blob(AITER_COMMIT, path).decode().splitlines()
        assert text in files[path][line - 1], f"{path}:{line} is now {files[path][line - 1]!r}"
    index = files["aiter/fused_moe.py"][1065:1080]
    assert [ln.strip().strip('",') for ln in index] == [
        "gfx",
        "cu_num",
        "token",
        "model_dim",
        "inter_dim",
        "expert",
        "topk",
        "act_type",
        "dtype",
        "q_dtype_a",
        "q_dtype_w",
        "q_type",
        "use_g1u1",
        "doweight_stage1",
        "]",
    ]
    # Nothing GLM-5 fp4 in that commit's tables: the base covers none of GLM-5.2's MXFP4 MoE.
    names = aiter_data.names(AITER_COMMIT, "aiter/configs/model_configs")
    assert names and not any("glm5_fp4" in name for name in names)


def lookup(model: str, status: str, tokens: tuple[int, ...] = (1, 2)) -> coverage.Lookup:
    return coverage.Lookup(
        model, ("model.layers.3.mlp.experts",), FP4, tokens, status, None, model == "main"
    )


def test_the_gate_fails_on_hot_misses_unless_the_scenario_accepts_them(tmp_path: Path) -> None:
    from sglforge.scenario.file import load_scenario

    cov = coverage.Coverage(
        "gfx950",
        256,
        "tree",
        (),
        (lookup("main", "miss"), lookup("draft", "miss"), lookup("main", "tuned-item", (4,))),
    )
    g = coverage.gate(cov)
    assert not g.passed and len(g.failing) == 1  # the draft's miss is not hot
    assert g.summary() == "main model_dim 6144 inter_dim 256 expert 257 topk 9 tokens 1,2"
    text = (REPO / "smoke" / "glm5-mxfp4-mtp-mi355x.toml").read_text()
    accept = (
        '\n[[coverage.accept]]\nmodel = "main"\nexpert = 257\ntopk = 9\ninter_dim = 256\n'
        'tokens = [1, 2]\nreason = "decode at batch 1 runs FLAT kernels; measured fine"\n'
    )
    path = tmp_path / "s.toml"
    path.write_text(text + accept)
    scenario = load_scenario(path)
    g = coverage.gate(cov, scenario.accepted_misses)
    assert g.passed and g.accepted[0][1].startswith("decode at batch 1")
    assert g.to_dict()["accepted"][0]["reason"] == scenario.accepted_misses[0].reason
    # Naming fewer tokens than miss, or another shape, accepts nothing.
    path.write_text(text + accept.replace("tokens = [1, 2]", "tokens = [1]"))
    assert not coverage.gate(cov, load_scenario(path).accepted_misses).passed
    path.write_text(text + accept.replace("inter_dim = 256", "inter_dim = 512"))
    assert not coverage.gate(cov, load_scenario(path).accepted_misses).passed
    # A reason is required, and unknown keys are refused, naming the file.
    from sglforge.errors import ConfigError

    for bad, says in (
        (
            accept.replace(
                'reason = "decode at batch 1 runs FLAT kernels; measured fine"', 'reason = ""'
            ),
            "reason",
        ),
        (accept + "why = 1\n", "why"),
        (accept.replace('model = "main"', 'model = "both"'), "model"),
    ):
        path.write_text(text + bad)
        with pytest.raises(ConfigError, match=says):
            load_scenario(path)


def test_the_command_s_bad_inputs_get_one_line_errors(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from sglforge.cli import main

    root = tmp_path / "project"
    for part in ("patches", "images", "smoke"):
        shutil.copytree(REPO / part, root / part)
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "tuned_fmoe.csv").write_text(table_text([]))
    model = REPO / "tests" / "standin" / "model-mxfp4"
    scenario = REPO / "smoke" / "glm5-mxfp4-mtp-mi355x.toml"
    base = ["--root", str(root), "configs", "coverage", "--model", str(model)]
    base += ["--scenario", str(scenario)]
    res = CliRunner().invoke(main, base)  # neither table source
    assert res.exit_code == 2 and "exactly one of --base-image" in res.output
    res = CliRunner().invoke(main, [*base, "--aiter-configs", str(configs)])  # no patched tree
    assert res.exit_code == 2
    assert "no patched sglang tree of the pin v0.5.14" in res.output
    # the hint repeats the --root given (cli.common.with_root)
    assert re.search(r"sglforge (--root \S+ )?patches apply", res.output), res.output
    res = CliRunner().invoke(
        main, [*base, "--aiter-configs", str(configs), "--sglang", str(tmp_path)]
    )
    assert res.exit_code == 2 and "not a sglang release's python/ folder" in res.output
    bad = tmp_path / "bad-model"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    args = ["--root", str(root), "configs", "coverage", "--model", str(bad)]
    args += [
        "--scenario",
        str(scenario),
        "--aiter-configs",
        str(configs),
        "--sglang",
        str(tmp_path),
    ]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2 and "config.json: not JSON" in res.output


def test_the_gate_s_record_names_the_aiter_whose_rule_it_applied() -> None:
    import dataclasses

    from sglforge import aiter_rules
    from sglforge.release import Release, from_dict, to_dict

    A_7D6 = "7d604afe5fa7efba63c0dce323b95d9daf2db112"
    rule = aiter_rules.known_rule(A_7D6, "git metadata of the checkout /base/aiter")
    cov = coverage.Coverage("gfx950", 256, "tree", (), (lookup("main", "miss"),), aiter=rule)
    record = coverage.gate(cov).to_dict()
    assert record["aiter"]["commit"] == A_7D6
    assert record["aiter"]["source"] == "git metadata of the checkout /base/aiter"
    assert record["aiter"]["key"][0] == "cu_num"  # its rule, not the default's
    # without a base: the default rule, and the record says it was not read from one
    default = coverage.gate(dataclasses.replace(cov, aiter=aiter_rules.default_rule())).to_dict()
    assert "not read from a base" in default["aiter"]["source"]
    # the publish's release record keeps the gate's record as it is (publish.py run.coverage)
    release = Release(
        version="v0.5.14-rocm700-mi355x-q1234abcd",
        date="2026-12-01",
        target="mi355x",
        image="reg/sglang:v0.5.14-rocm700-mi355x-q1234abcd",
        digest="sha256:" + "0" * 64,
        references=(),
        upstream_url="https://github.com/sgl-project/sglang",
        upstream_ref="v0.5.14",
        upstream_commit="0" * 40,
        upstream_version="0.5.14",
        queue_hash="1234abcd",
        patches=(),
        smoke=None,
        coverage=record,
    )
    assert from_dict(to_dict(release)).coverage == record
