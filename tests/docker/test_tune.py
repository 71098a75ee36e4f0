"""`sglforge configs tune` on the replica of 0.5.14's release image, with a STAND-IN tuner.

The image is the replica (tests/standin/base.py: the real amd-aiter wheel's tree at
/sgl-workspace/aiter) plus tests/standin/tuner.py installed where aiter's tuner lives
(``csrc/ck_gemm_moe_2stages_codegen/gemm_moe_tune.py``): a TEST DOUBLE, **no real tuning runs**;
its kernel names say STANDIN and its times are made up. What is proven: the tuner's input is
exactly the launch's missing keys (from the coverage of sglang 0.5.14+queue's own
construction), the tuner runs inside the image in a container that is removed afterwards, it
is given ``--compare --update_improved`` because its ``--help`` lists them, and its rows become
a Pending item, unchanged, stamped with the image digest, gfx, cu_num and the tuner's arguments,
which lint accepts and coverage then counts as hits.
"""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import replace
from pathlib import Path

import docker
import pytest

from real_project import copy_real_project
from sglforge import coverage
from sglforge.overlay_configs import base_aiter
from sglforge.queue.configs import base_tables_from_dir, load_items, upstream_findings
from sglforge.tune import TuneRequest, tune
from standin.base import ensure_sglang_base

pytestmark = [pytest.mark.docker, pytest.mark.pypi]

REPO = Path(__file__).resolve().parents[2]
TUNER_AT = "/sgl-workspace/aiter/csrc/ck_gemm_moe_2stages_codegen/gemm_moe_tune.py"


@pytest.fixture(scope="module")
def image(docker_client: docker.DockerClient, docker_labels: dict[str, str]) -> str:
    replica = ensure_sglang_base("0.5.14", client=docker_client)
    files = {
        "Dockerfile": f"FROM {replica}\nCOPY tuner.py {TUNER_AT}\n".encode(),
        "tuner.py": (REPO / "tests" / "standin" / "tuner.py").read_bytes(),
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    built, _ = docker_client.images.build(
        fileobj=buf, custom_context=True, labels=docker_labels, rm=True, network_mode="none"
    )
    return str(built.id)


def test_tune_turns_the_standin_tuner_s_rows_into_a_pending_item(
    tmp_path: Path, image: str, docker_labels: dict[str, str], docker_client: docker.DockerClient
) -> None:
    from sglang_release import release_tree

    root = copy_real_project(tmp_path / "project")
    for f in (root / "patches" / "configs").iterdir():
        f.unlink()  # no item: every GLM-5.2 lookup misses on the replica's aiter
    tree = release_tree(tmp_path / "sglang", "0.5.14", patched=True) / "python"
    scenario = root / "smoke" / "standin-cpu-aiter.toml"
    model = REPO / "tests" / "standin" / "model-mxfp4"
    req = TuneRequest(image, model, scenario, "glm52-tp4-standin", tree=tree, labels=docker_labels)
    out = tune(root, req)
    # The tuner's containers (role "tune", this session's labels) are gone (the engine is shared:
    # only ours are looked at).
    ours = [f"{k}={v}" for k, v in docker_labels.items()] + ["io.sglforge.role=tune"]
    assert docker_client.containers.list(all=True, filters={"label": ours}) == []
    work = Path(out.work)
    untuned = (work / "untuned_fmoe.csv").read_text().splitlines()
    assert untuned[0] == coverage.UNTUNED_HEADER
    # TP4: main 257/9 and draft 256/8 at inter_dim 512, at the token buckets the replica's
    # aiter asks (the amd-aiter 0.1.7 wheel: 1..16 tokens look up 16, capped at 1024;
    # tests/unit/test_aiter_rules.py cites its lines): 7 buckets each.
    tokens = sorted({int(row.split(",")[0]) for row in untuned[1:]})
    assert tokens == [16, 32, 64, 128, 256, 512, 1024], tokens
    assert out.asked == len(untuned) - 1 == 14 and out.rows == 14 and out.not_tuned == 0
    log = (work / "tuner.log").read_text()
    assert "STAND-IN tuner: 14 key(s)" in log
    (item,) = load_items(root)
    # The tuner's lines, unchanged (header included), and nothing else.
    tuned = (work / "tuned_fmoe.csv").read_text().splitlines()
    assert (root / item.csv_file).read_text().splitlines() == tuned
    assert item.upstream_status == "Pending" and item.upstream is None
    assert item.tuned is not None
    assert item.tuned["tuned-gfx"] == "gfx950" and item.tuned["tuned-cu-num"] == 256
    assert "--compare --update_improved" in str(item.tuned["tuned-args"])
    assert str(item.tuned["tuned-image-digest"]).startswith("sha256:")
    assert upstream_findings([item], root) == []  # a tuned item is verified by its stamp
    meta = (root / item.meta_file).read_text()
    assert "time-before" in meta and "us 2.00" in meta
    # With the item the same launch now hits on the replica's tables (items as installed).
    configs = tmp_path / "configs"
    (configs / "model_configs").mkdir(parents=True)
    raw = docker_client.containers.create(image, labels=docker_labels)
    try:
        bits, _ = raw.get_archive("/sgl-workspace/aiter/aiter/configs")
        with tarfile.open(fileobj=io.BytesIO(b"".join(bits))) as tar:
            tar.extractall(tmp_path / "x", filter="data")
    finally:
        raw.remove(force=True)
    # ...looked up by the replica's own aiter rule (its key and token buckets)
    probed = base_aiter(image, docker_labels)
    assert probed is not None
    base = replace(base_tables_from_dir(tmp_path / "x" / "configs"), aiter=probed.aiter)
    cov = coverage.coverage(tree, model, load_scenario_args(scenario), base, load_items(root))
    assert cov.misses == 0, json.dumps(cov.to_dict()["lookups"])[:2000]


def load_scenario_args(path: Path) -> tuple[str, ...]:
    from sglforge.scenario.file import load_scenario

    return load_scenario(path).args


@pytest.mark.parametrize(
    "scenario", ["glm5-mxfp4-mtp-mi355x.toml", "glm5-mxfp4-mtp-tp4dp2-mi355x.toml"]
)
def test_coverage_of_the_glm52_launches_on_the_0_5_14_replica(
    tmp_path: Path, docker_client: docker.DockerClient, scenario: str
) -> None:
    # The replica's aiter is the 0.1.7 wheel (no GLM-5 table, no flat column): the FLAT rows of
    # the queue's item are left out there. The lookup rule is the replica's own aiter's, read
    # from its fused_moe.py: 1..16 -> 16, capped at 1024 (fused_moe.py:484-492), so the FLAT
    # rows at 2, 4 and 8 are never asked and only those at 16 and 32 miss.
    import subprocess
    import sys

    from sglang_release import release_tree

    replica = ensure_sglang_base("0.5.14", client=docker_client)
    tree = release_tree(tmp_path / "sglang", "0.5.14", patched=True) / "python"
    proc = subprocess.run(
        [sys.executable, "-m", "sglforge", "--root", str(REPO), "configs", "coverage"]
        + ["--model", str(REPO / "tests" / "standin" / "model-mxfp4")]
        + ["--scenario", str(REPO / "smoke" / scenario), "--base-image", replica]
        + ["--sglang", str(tree), "--json"],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "PYTHONPATH": str(REPO / "src")},
        timeout=900,
    )
    doc = json.loads(proc.stdout)
    missed = {
        (x["model"], x["expert"], x["topk"], x["inter_dim"], t)
        for x in doc["lookups"]
        if x["status"] == "miss"
        for t in x["tokens"]
    }
    flat = set()
    (item,) = load_items(REPO)
    for r in item.records():
        if r["flat"] == "1":
            key = (int(r["expert"]), int(r["topk"]), int(r["inter_dim"]), int(r["token"]))
            flat.add(key)
    inter = 256 if "tp4" not in scenario else 512
    asked = {(x["model"], t) for x in doc["lookups"] for t in x["tokens"]}
    assert min(t for _, t in asked) == 16 and max(t for _, t in asked) == 1024
    assert doc["aiter"]["commit"] is None and "records no commit" in doc["aiter"]["source"]
    expected = {
        ("main" if e == 257 else "draft", e, k, i, t)
        for e, k, i, t in flat
        if i == inter and ("main" if e == 257 else "draft", t) in asked
    }
    assert missed == expected, sorted(missed ^ expected)
    assert proc.returncode == (1 if any(m[0] == "main" for m in missed) else 0), proc.stderr
    print(scenario, "misses", doc["misses"], "hot", doc["hot_misses"], sorted(missed))


@pytest.mark.parametrize(
    "scenario", ["glm5-mxfp4-mtp-mi355x.toml", "glm5-mxfp4-mtp-tp4dp2-mi355x.toml"]
)
def test_coverage_on_a_replica_with_the_release_image_s_aiter(
    tmp_path: Path, docker_client: docker.DockerClient, docker_labels: dict[str, str], scenario: str
) -> None:
    # The replica whose aiter is ROCm/aiter at 9127c94a18e4 (first pinned by sglang PR #29816,
    # after the v0.5.14 wheel; which aiter v0.5.14's image builds is not established), taken
    # from a clone: its tables read the FLAT rows and its rule (read from its fused_moe.py)
    # asks 1, 2, 4, ..., so the queue's item answers every GLM-5.2 lookup of both launches.
    import os
    import subprocess
    import sys

    from sglang_release import release_tree
    from standin.base import RELEASE_AITER_COMMIT, aiter_clone

    clone = aiter_clone()
    if clone is None:
        pytest.skip("no ROCm/aiter clone (set SGLFORGE_AITER_REPO): wheel replica only")
    replica = ensure_sglang_base("0.5.14", client=docker_client, aiter_commit=RELEASE_AITER_COMMIT)
    labels = docker_client.images.get(replica).labels
    assert labels["io.sglforge.standin.aiter-commit"] == RELEASE_AITER_COMMIT
    # Its tables are that commit's bytes.
    name = "aiter/configs/model_configs/dsv3_fp4_tuned_fmoe.csv"
    raw = docker_client.containers.create(replica, labels=docker_labels)
    try:
        bits, _ = raw.get_archive(f"/sgl-workspace/aiter/{name}")
        with tarfile.open(fileobj=io.BytesIO(b"".join(bits))) as tar:
            member = tar.extractfile(tar.getmembers()[0])
            assert member is not None
            inside = member.read()
    finally:
        raw.remove(force=True)
    upstream = subprocess.run(
        ["git", "-C", str(clone), "show", f"{RELEASE_AITER_COMMIT}:{name}"],
        capture_output=True,
        check=True,
    ).stdout
    assert inside == upstream
    tree = release_tree(tmp_path / "sglang", "0.5.14", patched=True) / "python"
    proc = subprocess.run(
        [sys.executable, "-m", "sglforge", "--root", str(REPO), "configs", "coverage"]
        + ["--model", str(REPO / "tests" / "standin" / "model-mxfp4")]
        + ["--scenario", str(REPO / "smoke" / scenario), "--base-image", replica]
        + ["--sglang", str(tree), "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["misses"] == 0 and doc["ok"]
    assert doc["aiter"]["key"][0] == "gfx" and "get_padded_M" not in doc["aiter"]["tokens"]
    assert {x["file"] for x in doc["lookups"]} == {"patches/configs/glm52-mxfp4-moe-gfx950.csv"}
    print(scenario, "lookups", sum(len(x["tokens"]) for x in doc["lookups"]), "misses 0")
