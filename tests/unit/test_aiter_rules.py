"""Each aiter's own lookup rule, read from its code, and what it decides for the README launch.

The rules come from three aiters' ``aiter/fused_moe.py``: ROCm/aiter 7d604afe5fa7 (sglang PR
#28249's pin, 2026-06-15, the candidate for v0.5.14) and 9127c94a18e4 (first pinned by sglang PR
#29816, 2026-07-01), shipped under tests/data/aiter with their blob ids, and the amd-aiter
0.1.7.post2.dev18 wheel (the default test replica's aiter; from PyPI, cached like every wheel).
Each test cites the lines it rests on and fails when they stop saying it.
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

import aiter_data
from sglforge import aiter_rules, coverage
from sglforge.errors import ConfigError
from sglforge.queue.configs import base_tables, load_items

REPO = Path(__file__).resolve().parents[2]
A_7D6 = "7d604afe5fa7efba63c0dce323b95d9daf2db112"
A_912 = "9127c94a18e4398e1eba91f6639e910f0994ad02"
FUSED = "aiter/fused_moe.py"


def lines(commit: str) -> list[str]:
    return aiter_data.blob(commit, FUSED).decode().splitlines()


def wheel_fused_moe() -> str:
    from standin.base import aiter_wheel

    with zipfile.ZipFile(aiter_wheel()) as zf:
        return zf.read(FUSED).decode()


def read(commit: str) -> aiter_rules.AiterRule:
    return aiter_rules.rule_from_source(
        aiter_data.blob(commit, FUSED).decode(), commit, "test", f"{commit[:12]}:{FUSED}"
    )


# (commit, line, text) each rule difference rests on.
CITED = [
    # 7d604afe5fa7: the index starts with cu_num (no gfx) and the key tuple with it.
    (A_7D6, 981, "_INDEX_COLS = ["),
    (A_7D6, 982, '"cu_num",'),
    (A_7D6, 1074, "keys = ("),
    (A_7D6, 1075, "cu_num,"),
    (A_7D6, 788, "_PADDED_M_TIERS = [32768, 131072]"),
    (A_7D6, 793, "return nextPow2(M)"),
    (A_7D6, 415, "get_padded_M(M),"),
    (A_7D6, 1137, "keys_fb = (keys[0], fallback_tier) + keys[2:]"),
    # 9127c94a18e4: gfx first (aiter PR #3703), gfx from cu_num for rows without it.
    (A_912, 1065, "_INDEX_COLS = ["),
    (A_912, 1066, '"gfx",'),
    (A_912, 1086, 'df["gfx"] = df["cu_num"].map(gfx_from_cu_num)'),
    (A_912, 1176, "keys = ("),
    (A_912, 1177, "gfx,"),
    (A_912, 855, "_PADDED_M_TIERS = [32768, 131072]"),
    (A_912, 860, "return nextPow2(M)"),
    (A_912, 482, "get_padded_M(M),"),
    (A_912, 1242, "keys_fb = keys[:2] + (fallback_tier,) + keys[3:]"),
]


def test_the_cited_lines_of_both_commits() -> None:
    got = {c: lines(c) for c in (A_7D6, A_912)}
    for commit, line, text in CITED:
        assert text in got[commit][line - 1], f"{commit[:12]}:{line} is {got[commit][line - 1]!r}"


def test_each_known_rule_is_what_its_commit_s_code_says() -> None:
    for commit, known in aiter_rules.KNOWN.items():
        assert replace(read(commit), source="") == replace(known, source="")
    old, new = read(A_7D6), read(A_912)
    assert new.key == ("gfx", *old.key)  # the one difference in the key
    assert not old.gfx_from_cu and new.gfx_from_cu
    assert old.buckets == new.buckets == aiter_rules.Buckets(1, None, (32768, 131072))
    # A commit sglforge has not read is refused by name, not guessed.
    with pytest.raises(ConfigError, match="has not read its lookup rule"):
        aiter_rules.known_rule("e4048607a535", "test")
    assert aiter_rules.known_rule("7d604af", "x").key == old.key


@pytest.mark.pypi  # the amd-aiter wheel, from the cache or PyPI
def test_the_0_1_7_wheel_pads_1_to_16_and_caps_at_1024() -> None:
    text = wheel_fused_moe()
    src = text.splitlines()
    # amd-aiter 0.1.7.post2.dev18 aiter/fused_moe.py:484-492 and :527-543.
    assert src[483] == "def get_padded_M(M):"
    assert src[485:487] == ["    if M >= 1 and M <= 16:", "        padded_m = 16"]
    assert src[490] == "        padded_m = 1024"
    assert "set_index(" in src[526] and '"cu_num",' in src[528]
    rule = aiter_rules.rule_from_source(text, None, "test", "wheel")
    assert rule.key == aiter_rules.KNOWN[A_7D6].key
    assert rule.buckets == aiter_rules.Buckets(16, 1024, ())
    assert [rule.buckets(m) for m in (1, 2, 8, 16, 17, 1000, 1024, 16384)] == [
        16,
        16,
        16,
        16,
        32,
        1024,
        1024,
        1024,
    ]
    assert not (rule.act_fallback or rule.skips_tagged or rule.tier_fallback)


def test_a_bucket_form_sglforge_does_not_know_is_refused() -> None:
    text = lines(A_912)
    body = "\n".join(text).replace("return nextPow2(M)", "return nextPow2(M + 1)", 1)
    with pytest.raises(ConfigError, match="not a form sglforge knows"):
        aiter_rules.rule_from_source(body, None, "test", "edited")
    body = "\n".join(text).replace(
        '"cu_num",\n        "token",', '"cu_num",\n        "xyz",\n        "token",', 1
    )
    with pytest.raises(ConfigError, match="'xyz'"):
        aiter_rules.rule_from_source(body, None, "test", "edited")


def main_misses(rule: aiter_rules.AiterRule, flat_readable: bool) -> list[int]:
    """The README launch's main-model tokens (257/9, inter_dim 256 at TP8) no row answers, on
    a base that has no GLM-5 fp4 rows of its own plus the queue's item."""
    (item,) = load_items(REPO)
    drop = () if flat_readable else ("flat", "xbf16")
    header = ",".join(c for c in item.columns if c not in drop) + "\n"
    untuned = "token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type"
    base = base_tables("/a/configs", "tuned_fmoe", header, untuned, {})
    tables, _ = coverage.merged_tables(replace(base, aiter=rule), [item])
    # Decode at the CUDA-graph sizes and prefill up to the 16384 chunk: every count 1..16384.
    asked = sorted({rule.buckets(m) for m in range(1, 16385)})
    from test_coverage import FP4

    return [
        t
        for t in asked
        if coverage._answer(FP4, t, tables, "gfx950", 256, rule)[0] == coverage.MISS
    ]


@pytest.mark.pypi  # the amd-aiter wheel, from the cache or PyPI
def test_the_readme_launch_s_misses_at_2_4_8_are_the_base_s_aiter_s_decision() -> None:
    # The item's rows for 257/9 at inter_dim 256 and tokens 2, 4, 8 are FLAT rows (flat=1,
    # xbf16=1): a base whose tables have no flat column leaves them out of the image.
    (item,) = load_items(REPO)
    flat = sorted(
        int(r["token"])
        for r in item.records()
        if r["flat"] == "1" and (r["expert"], r["inter_dim"]) == ("257", "256")
    )
    assert flat == [2, 4, 8]
    a0 = aiter_rules.KNOWN[A_912]
    # 9127c94a18e4 asks 2, 4 and 8 (next power of two): real misses without the flat rows,
    # none with them.
    assert main_misses(a0, flat_readable=False) == [2, 4, 8]
    assert main_misses(a0, flat_readable=True) == []
    # 7d604afe5fa7 buckets the same way: the same answer (its key has no gfx).
    assert main_misses(aiter_rules.KNOWN[A_7D6], flat_readable=False) == [2, 4, 8]
    # The 0.1.7 wheel never asks 2, 4 or 8 (1..16 -> 16): no miss, though the rows are gone.
    wheel = aiter_rules.rule_from_source(wheel_fused_moe(), None, "test", "wheel")
    assert main_misses(wheel, flat_readable=False) == []


def test_a_checkout_s_commit_and_rule_are_read_next_to_its_configs(tmp_path: Path) -> None:
    root = tmp_path / "aiter"
    (root / "aiter" / "configs").mkdir(parents=True)
    (root / "aiter" / "fused_moe.py").write_bytes(aiter_data.blob(A_7D6, FUSED))
    (root / ".git" / "refs" / "heads").mkdir(parents=True)
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / ".git" / "packed-refs").write_text(f"{A_7D6} refs/heads/main\n")
    rule = aiter_rules.rule_of_dir(root / "aiter" / "configs")
    assert rule.commit == A_7D6 and "git metadata" in rule.source
    assert "gfx" not in rule.key
    named = aiter_rules.rule_of_dir(root / "aiter" / "configs", "abc1234")
    assert named.commit == "abc1234" and "--aiter-commit" in named.source
    (root / "aiter" / "fused_moe.py").unlink()
    assert aiter_rules.rule_of_dir(root / "aiter" / "configs", A_7D6[:12]).key == rule.key
    assert "not read from a base" in aiter_rules.rule_of_dir(root / "aiter" / "configs").source


def test_an_image_s_commit_comes_from_its_checkout_else_its_distribution() -> None:
    git = {"HEAD": f"{A_912}\n"}
    assert aiter_rules.commit_of({"git": git}, "/sgl-workspace/aiter")[0] == A_912
    dist = {"dist": "amd-aiter 0.1.17.dev110+g9127c94a1"}
    assert aiter_rules.commit_of(dist, "/x") == (
        "9127c94a1",
        "the installed distribution's version (amd-aiter 0.1.17.dev110+g9127c94a1)",
    )
    commit, source = aiter_rules.commit_of({"dist": "amd-aiter 0.1.7.post2.dev18"}, "/x")
    assert commit is None and "records no commit" in source


# aiter's lookup log lines: the key tuple formatted by Python, in the commit's column order
# (``keys = (`` above) -- 7d604afe5fa7 aiter/fused_moe.py:1254 and :1487, 9127c94a18e4 :1361
# and :1583.
LOGGED = [
    (A_7D6, 1254, "{'default' if cfg is None else tag} for {keys} \""),
    (A_7D6, 1487, 'f"[fused_moe] no tuned FlyDSL config for {keys}, "'),
    (A_912, 1361, "{'default' if cfg is None else tag} for {keys} \""),
    (A_912, 1583, 'f"[fused_moe] no tuned FlyDSL config for {keys}, "'),
]


class _Silu:  # aiter's ActivationType.Silu as its repr prints inside the key tuple
    def __repr__(self) -> str:
        return "<ActivationType.Silu: 0>"


def logged_key(commit: str, **values: object) -> str:
    """The key tuple as ``commit``'s aiter logs it: its ``keys = (...)`` names, in order, with
    the lookup's values (``str(dtype)`` and friends are strings there), formatted by Python."""
    text = lines(commit)
    start = next(i for i, t in enumerate(text) if t.strip() == "keys = (")
    names = []
    for t in text[start + 1 :]:
        if t.strip() == ")":
            break
        names.append(t.strip().rstrip(",").removeprefix("str(").removesuffix(")"))
    fill = {
        "activation": _Silu(),
        "dtype": "torch.bfloat16",
        "q_dtype_a": "torch.float4_e2m1fn_x2",
        "q_dtype_w": "torch.float4_e2m1fn_x2",
        "q_type": "QuantType.per_1x32",
        "use_g1u1": True,
        "doweight_stage1": False,
    }
    return f"{tuple(values.get(n, fill.get(n)) for n in names)}"


def test_the_logged_key_is_written_for_each_aiter_s_own_column_order() -> None:
    got = {c: lines(c) for c in (A_7D6, A_912)}
    for commit, line, text in LOGGED:
        assert text in got[commit][line - 1], f"{commit[:12]}:{line} is {got[commit][line - 1]!r}"
    shape = dict(gfx="gfx950", cu_num=256, model_dim=6144, inter_dim=256, expert=257, topk=9)
    spec = " ".join(f"{k}={v}" for k, v in shape.items())
    placeholder = "using 2stage default for {aiter-key " + spec + "}"
    rules = {c: read(c) for c in (A_7D6, A_912)}
    for commit, rule in rules.items():
        other = next(r for c, r in rules.items() if c != commit)
        for token in (1, 16, 16384):
            key = logged_key(commit, token=token, **shape)
            line = f"[aiter] [fused_moe] using 2stage default for {key} "
            own = re.compile(aiter_rules.expand_log_keys(placeholder, (rule,)))
            assert own.search(line), (commit[:12], line)
            # the other commit's form does not match: the key is the rule's, not a fixed regex
            assert not re.compile(aiter_rules.expand_log_keys(placeholder, (other,))).search(line)
            # without the base's rule: every known rule's form
            both = aiter_rules.expand_log_keys(placeholder, aiter_rules.log_rules(None))
            assert re.compile(both).search(line)
            # another shape is not this key
            wrong = logged_key(commit, token=token, **(shape | {"expert": 256, "topk": 8}))
            assert not re.compile(both).search(line.replace(key, wrong))
    # 7d604afe5fa7 has no gfx column: the gfx the placeholder names is dropped from its form
    assert aiter_rules.log_key(rules[A_7D6], shape) == r"\(256, \d+, 6144, 256, 257, 9, "
    assert aiter_rules.log_key(rules[A_912], shape) == r"\('gfx950', 256, \d+, 6144, 256, 257, 9, "
    with pytest.raises(ConfigError, match="not a column aiter keys"):
        aiter_rules.log_key(rules[A_912], {"experts": "257"})


@pytest.mark.pypi  # the amd-aiter wheel the replica installs, from the cache or PyPI
def test_the_standin_server_looks_up_as_the_replica_s_aiter_does(tmp_path: Path) -> None:
    """The stand-in server (a TEST DOUBLE run in the replica) pads fused-MoE lookups by the
    image's own aiter's ``get_padded_M``: for the wheel and both release aiters, held here to
    the rule sglforge.aiter_rules reads from the same file (issue 41: the MTP verify at batch 1,
    6 tokens, asks 8 from a release aiter, 16 from the wheel)."""
    from standin import server

    sources = {"wheel": wheel_fused_moe()}
    sources |= {c[:12]: aiter_data.blob(c, FUSED).decode() for c in (A_7D6, A_912)}
    probes = sorted(
        {
            *range(1, 70),
            100,
            511,
            512,
            513,
            1000,
            1023,
            1024,
            1025,
            5000,
            16384,
            32767,
            32768,
            40000,
            131072,
            200000,
        }
    )
    for name, text in sources.items():
        (tmp_path / name / "aiter").mkdir(parents=True)
        (tmp_path / name / FUSED).write_text(text)
        padded = server.aiter_padded_m(str(tmp_path / name))
        rule = aiter_rules.rule_from_source(text, None, "test", name)
        assert [padded(m) for m in probes] == [rule.buckets(m) for m in probes], name
        assert padded(6) == (16 if name == "wheel" else 8), name
    rule = aiter_rules.rule_from_source(wheel_fused_moe(), None, "test", "wheel")
    assert server.AITER_KEY_COLUMNS == rule.key
    assert {c for c in rule.key if c not in server.AITER_INT_COLUMNS} == {
        "act_type",
        "dtype",
        "q_dtype_a",
        "q_dtype_w",
        "q_type",
    }
