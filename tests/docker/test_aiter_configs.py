"""Config items on the replica of sglang's 0.5.14 ROCm release image (a TEST DOUBLE carrying the
real ``amd-aiter`` wheel's tree at ``/sgl-workspace/aiter``, tests/standin/base.py).

What this proves (issue 13, "Done when"): the queue's config item lints against the base's own
tables, builds into the folder aiter merges from (file, manifest and label agree on its
sha256), is refused when it duplicates a key of the base (exit 6 naming the key and the file),
shows in ``sglforge inspect``, and the stand-in smoke of smoke/standin-cpu-aiter.toml passes its
required aiter lines on our image and fails them on the bare base (exit 1). The stand-in server
prints aiter's real merge and lookup lines from the merged CSVs (tests/standin/server.py).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import tarfile
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest
from click.testing import CliRunner

from pipelines import build_at as build_image
from pipelines import smoke_at
from real_project import copy_real_project
from sglforge import smoke
from sglforge.build import MANIFEST_PATH, BuildResult
from sglforge.cli import main
from sglforge.queue.configs import load_items
from standin.base import aiter_wheel, ensure_sglang_base
from standin.registry import free_port

pytestmark = [pytest.mark.docker, pytest.mark.pypi]

UPSTREAM = "pypi:sglang>=0.5.14,<=0.5.14"
REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "smoke" / "standin-cpu-aiter.toml"
CONFIGS = "/sgl-workspace/aiter/aiter/configs"
ITEM = "glm52-mxfp4-moe-gfx950"
INSTALLED = f"{CONFIGS}/model_configs/sglforge_glm52_mxfp4_moe_gfx950_tuned_fmoe.csv"


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLFORGE_OFFLINE", "1")
    monkeypatch.delenv("SGLFORGE_UPSTREAM", raising=False)


@pytest.fixture(scope="module")
def replica(docker_client: docker.DockerClient) -> str:
    return ensure_sglang_base("0.5.14", client=docker_client)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = copy_real_project(tmp_path_factory.mktemp("aiter") / "project")
    repo = f"sglforge-test/aiter-{uuid.uuid4().hex[:8]}"
    text = (root / "images" / "targets.toml").read_text()
    (root / "images" / "targets.toml").write_text(
        text.replace('repository = "sglforge/sglang"', f'repository = "{repo}"')
    )
    return root


@pytest.fixture(scope="module")
def built(
    project: Path, replica: str, docker_client: docker.DockerClient, docker_labels: dict[str, str]
) -> Iterator[BuildResult]:
    result = build_image(project, base_image=replica, upstream=UPSTREAM, labels=docker_labels)
    yield result
    for ref in (result.image, *result.tags):
        try:
            docker_client.images.remove(ref, force=True)
        except docker.errors.NotFound:
            pass


def run_in(client: docker.DockerClient, image: str, labels: dict[str, str], *cmd: str) -> bytes:
    """Output of ``cmd`` run in a throwaway container of ``image`` (no network)."""
    out = client.containers.run(
        image, list(cmd), labels=labels, remove=True, network_mode="none", entrypoint=[]
    )
    return out if isinstance(out, bytes) else b""


def copy_out(client: docker.DockerClient, image: str, labels: dict[str, str], dest: Path) -> Path:
    """The image's ``aiter/configs`` folder copied to ``dest`` (``docker cp``)."""
    container = client.containers.create(image, ["true"], labels=labels)
    try:
        stream, _ = container.get_archive(CONFIGS)
        data = b"".join(stream)
    finally:
        container.remove(force=True)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")
    return dest / "configs"


def test_replica_aiter_is_the_wheels(replica: str, docker_client, docker_labels) -> None:
    probe = (
        "import importlib.util, hashlib, pathlib; "
        "spec = importlib.util.find_spec('aiter'); "
        "root = pathlib.Path(list(spec.submodule_search_locations)[0]); print(root); "
        "[print(p.relative_to(root), hashlib.sha256(p.read_bytes()).hexdigest()) "
        "for p in sorted((root / 'configs').rglob('*.csv'))]"
    )
    lines = run_in(docker_client, replica, docker_labels, "python3", "-c", probe).decode()
    first, *rest = lines.splitlines()
    assert first == "/sgl-workspace/aiter/aiter"
    in_image = dict(line.split(" ", 1) for line in rest)
    with zipfile.ZipFile(aiter_wheel()) as zf:
        wheel = {
            n.removeprefix("aiter/"): hashlib.sha256(zf.read(n)).hexdigest()
            for n in zf.namelist()
            if n.startswith("aiter/configs/") and n.endswith(".csv")
        }
    assert in_image == wheel and "configs/tuned_fmoe.csv" in in_image


def test_the_item_lints_against_the_base_s_own_tables(
    tmp_path: Path, project: Path, replica: str, docker_client, docker_labels
) -> None:
    configs = copy_out(docker_client, replica, docker_labels, tmp_path / "base")
    res = CliRunner().invoke(
        main, ["--root", str(project), "patches", "lint", "--aiter-configs", str(configs)]
    )
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["--root", str(project), "patches", "lint", "--json"])
    assert res.exit_code == 0, res.output


def test_the_item_is_built_where_aiter_merges_from(
    built: BuildResult, project: Path, docker_client, docker_labels
) -> None:
    (item,) = [i for i in load_items(project) if i.name == ITEM]
    label = built.labels[f"io.sglforge.config.{ITEM}"]
    assert label == f"{INSTALLED} sha256:{item.sha256}"
    manifest = json.loads(run_in(docker_client, built.image, docker_labels, "cat", MANIFEST_PATH))
    (entry,) = manifest["configs"]
    assert (entry["name"], entry["installed"], entry["sha256"]) == (ITEM, INSTALLED, item.sha256)
    installed = run_in(docker_client, built.image, docker_labels, "cat", INSTALLED)
    assert hashlib.sha256(installed).hexdigest() == entry["installed_sha256"]
    # The rows are ours, in the base's columns (the wheel's table has no gfx column).
    base_header = run_in(
        docker_client, built.image, docker_labels, "head", "-1", f"{CONFIGS}/tuned_fmoe.csv"
    )
    rows = list(csv.DictReader(io.StringIO(installed.decode())))
    assert installed.decode().splitlines()[0] == base_header.decode().strip()
    # Every row of the item but the 13 FLAT ones (the wheel's aiter has no flat/xbf16 column:
    # left out, never edited), value for value.
    kept = [r for r in item.records() if r["flat"] in ("0", "0.0")]
    assert len(rows) == len(kept) == 96 - 13
    assert rows == [{c: r[c] for c in rows[0]} for r in kept]
    # aiter's own table is untouched: the item sits beside it, never replaces it.
    digest = f"sha256sum {CONFIGS}/tuned_fmoe.csv {CONFIGS}/model_configs/*"
    ours = run_in(docker_client, built.image, docker_labels, "sh", "-c", digest).decode()
    base = run_in(docker_client, built.base, docker_labels, "sh", "-c", digest).decode()
    assert set(base.splitlines()) < set(ours.splitlines())
    assert {line.split()[-1] for line in ours.splitlines()} - {
        line.split()[-1] for line in base.splitlines()
    } == {INSTALLED}


def test_inspect_shows_the_item(built: BuildResult) -> None:
    res = CliRunner().invoke(main, ["inspect", built.image])
    assert res.exit_code == 0, res.output
    assert "config item" in res.output and ITEM in res.output and INSTALLED in res.output
    assert "Submitted [ROCm/aiter#4344]" in res.output
    res = CliRunner().invoke(main, ["inspect", "--json", built.image])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["configs"][0]["name"] == ITEM


def test_a_key_the_base_already_has_is_refused(
    tmp_path: Path, replica: str, docker_client, docker_labels
) -> None:
    root = copy_real_project(tmp_path / "project")
    configs = copy_out(docker_client, replica, docker_labels, tmp_path / "base")
    base_row = next(csv.DictReader(io.StringIO((configs / "tuned_fmoe.csv").read_text())))
    item_csv = root / "patches" / "configs" / f"{ITEM}.csv"
    header = item_csv.read_text().splitlines()[0].split(",")
    row = [base_row.get(c, "gfx950" if c == "gfx" else "0") for c in header]
    with item_csv.open("a", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerow(row)
    line = len(item_csv.read_text().splitlines())
    res = CliRunner().invoke(
        main, ["--root", str(root), "build", "--base-image", replica, "--upstream", UPSTREAM]
    )
    assert res.exit_code == 6, res.output
    assert f"patches/configs/{ITEM}.csv:{line}: config-base-duplicate" in res.output
    assert f"token={int(float(base_row['token']))}" in res.output
    assert f"model_dim={base_row['model_dim']}" in res.output and "tuned_fmoe.csv" in res.output


def test_the_standin_smoke_passes_with_the_item_and_fails_without(
    tmp_path: Path, built: BuildResult, replica: str, project: Path, docker_labels
) -> None:
    ours = smoke_at(
        project,
        built.image,
        SCENARIO,
        port=free_port(),
        log_dir=tmp_path / "ours",
        labels=docker_labels,
    )
    assert ours.verdict == "passed", (ours.reason, [c for c in ours.checks if not c.passed])
    found = {r.name: r.count for r in ours.required}
    assert found["aiter-merges-sglforge-configs"] == 1
    assert found["aiter-tuned-decode"] == 1 and found["aiter-tuned-prefill"] == 2
    log = (tmp_path / "ours" / "server.log").read_text()
    assert "sglforge_glm52_mxfp4_moe_gfx950_tuned_fmoe.csv" in log
    assert "using 2stage (kernelName1='flydsl_moe1_afp4_wfp4_bf16_t32x128x256_w" in log

    args = ["--root", str(project), "smoke", "--image", replica, "--scenario", str(SCENARIO)]
    args += ["--port", str(free_port()), "--log-dir", str(tmp_path / "base")]
    for key, value in docker_labels.items():
        args += ["--label", f"{key}={value}"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 1, res.output
    report = json.loads((tmp_path / "base" / "report.json").read_text())
    (logs,) = [c for c in report["checks"] if c["name"] == "logs"]
    assert not logs["passed"]
    missing = {r["name"] for r in report["required"] if r["count"] < r["need"]}
    assert missing == {
        "aiter-merges-sglforge-configs",
        "aiter-tuned-decode",
        "aiter-tuned-prefill",
    }
    # The covered shapes ran aiter's default kernel on the bare base: failures, not warnings.
    base_log = tmp_path / "base" / "server.log"
    assert "using 2stage default for (256, 16, 6144, 512, 257, 9," in base_log.read_text()
    forbidden = smoke.load_scenario(SCENARIO).checks.forbidden
    hits = {m.name: m.severity for m in smoke.scan_log(base_log, forbidden)}
    assert hits["aiter-moe-default-covered"] == "fail"


def test_upgrade_retires_an_item_the_base_s_aiter_already_carries(
    tmp_path: Path, built: BuildResult, replica: str, docker_labels
) -> None:
    from sglforge.project import Project
    from sglforge.upgrade import _retire_upstreamed_configs

    said: list[str] = []
    stage = copy_real_project(tmp_path / "stage")
    staged = Project(stage)
    # The bare replica lacks the rows: nothing retired, the item stays in the queue.
    bare = (("mi355x", replica),)
    assert _retire_upstreamed_configs(staged, bare, docker_labels, said.append) == ()
    assert (stage / "patches" / "configs" / f"{ITEM}.csv").is_file()
    # Our image's aiter merges the item's rows it can read: as a base it carries them all.
    ours = (("mi355x", built.image),)
    retired = _retire_upstreamed_configs(staged, ours, docker_labels, said.append)
    assert retired == (ITEM,)
    assert not (stage / "patches" / "configs" / f"{ITEM}.csv").exists()
    assert (stage / "patches" / "retired" / "configs" / f"{ITEM}.toml").is_file()
    assert load_items(stage) == () and "upstreamed, retired" in said[-1]
    assert staged.queue.configs == ()  # the staged project reloaded
