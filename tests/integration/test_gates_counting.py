"""A full ``publish`` and a full ``upgrade --publish`` read each input once and ask each outside
system once (issue 28; the method of ARCHITECTURE-REVIEW.md section 2.6 and its appendix).

The real command line runs on the synthetic project (tests/helpers_build.make_build_project)
with the GLM-5 scenario (its ``[bench]`` left out) and a model folder holding a config.json
with routed experts, so every gate has work: scan, build, coverage, smoke. Only the outside
systems are replaced, each by a small stand-in that counts:

- the Docker engine (``engine.images``: inspect, require, build, tag, pull, repo_digests,
  local_tags, remove) and the registry (``engine.registry``), in memory;
- the probe containers of ``bases`` (sglang's version, aiter's tables) and the self-check;
- the GPU probe (``smoke.preflight.detect_gpus``);
- the construction child (``construct.build_many``: the one child program);
- the smoke's container: ``run_smoke`` is its own ``_prepare`` and ``expected_arch`` (the smoke
  run's reads), then a passing report;
- the release records' registry side (``release.registry_records``, ``push_release_record``).

Counting wrappers call through to the real readers everywhere else (``load_scenario``,
``load_pin``, ``load_targets``, ``open_upstream``, ``git.mirror._fetch``).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import pkgutil
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import sglforge
from helpers_build import VERSION, make_build_project
from sglforge import bases, construct, selfcheck
from sglforge import coverage as coverage_module
from sglforge import scan as scan_package
from sglforge.cli import main
from sglforge.construct.built import Construction, Model, Tokens
from sglforge.engine import images, reference, registry
from sglforge.engine.images import ImageInfo
from sglforge.engine.registry import Pushed, RemoteTag
from sglforge.git import mirror
from sglforge.queue import series, upstream
from sglforge.smoke.preflight import GpuInventory
from sglforge.smoke.report import Check, SmokeReport
from sglforge.targets import Targets

# the modules (sglforge.smoke exports functions under some of these names)
preflight = importlib.import_module("sglforge.smoke.preflight")
runner = importlib.import_module("sglforge.smoke.runner")
scenario = importlib.import_module("sglforge.scenario.file")
REPO = Path(__file__).resolve().parents[2]
REGISTRY = "127.0.0.1:9/ns"


class Engine:
    """The engine and the registry, in memory: images by reference, digests by reference."""

    def __init__(self, counted: Counter[str]) -> None:
        self.counted = counted
        self.local: dict[str, ImageInfo] = {}
        self.remote: dict[str, str] = {}

    def add(self, ref: str, image_id: str) -> ImageInfo:
        info = ImageInfo(ref, image_id, (), (ref,), {}, 0, (), entrypoint=(), cmd=None)
        self.local[ref] = info
        return info

    def inspect(self, ref: str) -> ImageInfo | None:
        return self.local.get(ref)

    def require(self, ref: str) -> ImageInfo:
        return self.local[ref]

    def build(self, context: bytes, ref: str, log_path: Path, progress: Any = None) -> str:
        self.counted["engine build"] += 1
        image_id = "sha256:" + hashlib.sha256(context).hexdigest()
        self.add(ref, image_id)
        return image_id

    def tag(self, image: str, ref: str) -> None:
        source = self.local.get(image) or next(i for i in self.local.values() if i.id == image)
        self.local[ref] = source

    def repo_digests(self, image: str, ref: str) -> tuple[str, ...]:
        info = self.local.get(image)
        repo = ref.rpartition(":")[0]
        return tuple(
            digest
            for pushed, digest in self.remote.items()
            if info and pushed.rpartition(":")[0] == repo and self.local[pushed].id == info.id
        )

    def local_tags(self, repository: str) -> list[str]:
        return [r.rpartition(":")[2] for r in self.local if r.rpartition(":")[0] == repository]

    def push(self, ref: str, creds: Any = None, **_: Any) -> Pushed:
        self.counted["push"] += 1
        self.remote[ref] = "sha256:" + hashlib.sha256(self.local[ref].id.encode()).hexdigest()
        return Pushed(ref, self.remote[ref], 1)

    def digest_or_none(self, ref: str, creds: Any = None) -> str | None:
        return self.remote.get(ref)

    def digest(self, ref: str, creds: Any = None) -> str:
        return self.remote[ref]

    def verify(self, ref: str, digest: str, creds: Any = None) -> str:
        assert self.remote[ref] == digest
        return digest


def _counting(counted: Counter[str], name: str, real: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        counted[name] += 1
        return real(*args, **kwargs)

    return wrapper


def _modules() -> Iterator[Any]:
    for info in pkgutil.walk_packages(sglforge.__path__, "sglforge."):
        if info.name.endswith("__main__") or ".construct.child" in info.name:
            continue
        if info.name.startswith("sglforge.scan._harness"):
            continue
        yield importlib.import_module(info.name)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Counter[str]:
    counted: Counter[str] = Counter()
    # Counting wrappers around sglforge's own readers, wherever a module holds them by name.
    readers = {
        "scenario parsed": (scenario, "load_scenario"),
        "upstream.toml read": (series, "load_pin"),
        "targets.toml read": (sglforge.targets, "load_targets"),
        "upstream opened": (upstream, "open_upstream"),
        "registry checked": (reference, "check_registry"),
        "model config read": (scan_package, "read_model_config"),
        "model config read again": (coverage_module, "read_model"),
    }
    for name, (module, attr) in readers.items():
        real = getattr(module, attr)
        wrapped = _counting(counted, name, real)
        for held in _modules():
            if getattr(held, attr, None) is real:
                monkeypatch.setattr(held, attr, wrapped)
    monkeypatch.setattr(mirror, "_fetch", _counting(counted, "upstream fetched", mirror._fetch))
    monkeypatch.setattr(Targets, "resolve", _counting(counted, "resolve", Targets.resolve))
    _outside_systems(monkeypatch, counted)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker-config"))
    for var in (registry.USER_ENV, registry.PASSWORD_ENV, "SGLFORGE_UPSTREAM"):
        monkeypatch.delenv(var, raising=False)
    return counted


def _outside_systems(monkeypatch: pytest.MonkeyPatch, counted: Counter[str]) -> None:
    engine = Engine(counted)
    for n, version in enumerate((VERSION, "0.5.15")):
        engine.add(f"sglforge-standin/sglang-build:v{version}-rocm700-mi35x", f"sha256:{n}" * 8)
    for name, fn in {
        "inspect": engine.inspect,
        "require": engine.require,
        "build": engine.build,
        "tag": engine.tag,
        "repo_digests": engine.repo_digests,
        "local_tags": engine.local_tags,
        "remove": lambda ref, force=True: engine.local.pop(ref, None) is not None,
    }.items():
        monkeypatch.setattr(images, name, fn)
    for name, fn in {
        "credentials": lambda host: None,
        "check_login": lambda host, creds: None,
        "registry_digest_or_none": engine.digest_or_none,
        "registry_digest": engine.digest,
        "registry_labels": lambda ref, creds=None: {},
        "push": engine.push,
        "verify": engine.verify,
        "remote_tag": lambda ref: RemoteTag(ref in engine.local, None),
        "remote_tags": lambda repository, timeout=0: None,
    }.items():
        monkeypatch.setattr(registry, name, fn)

    def sglang_info(ref: str, cache_dir: Path, labels: Any = None) -> bases.SglangInfo:
        counted["sglang probe"] += 1
        version = ref.rpartition(":v")[2].split("-")[0]
        return bases.SglangInfo(
            engine.local[ref].id, version, "/sgl-workspace/sglang/python/sglang", "3.12"
        )

    def aiter_configs(ref: str, labels: Any = None) -> bases.AiterTables:
        counted["aiter probe"] += 1
        header = "cu_num,token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,"
        header += "q_dtype_w,q_type,use_g1u1,doweight_stage1,kernelName1,_tag"
        return bases.AiterTables(
            root="/sgl-workspace/aiter",
            configs_dir="/sgl-workspace/aiter/aiter/configs",
            tuned_fmoe=header + "\n",
            untuned_fmoe_header=None,
            model_configs={},
        )

    monkeypatch.setattr(bases, "sglang_info", sglang_info)
    monkeypatch.setattr(bases, "aiter_configs", aiter_configs)
    monkeypatch.setattr(selfcheck, "run", lambda image, expected, labels=None: [])

    def detect_gpus(timeout: float = 60.0) -> GpuInventory:
        counted["GPU probes"] += 1
        return GpuInventory(("gfx950",) * 8, "rocminfo")

    monkeypatch.setattr(preflight, "detect_gpus", detect_gpus)

    def construction_child(
        tree: Path, requests: Any, device: Any, env: Any = None
    ) -> dict[str, Any]:
        # construct's one child program: MoE shapes and quant decisions in one run
        counted["construction child"] += 1
        tokens: Tokens = {
            "capture_bs": [1, 2, 4],
            "chunked_prefill_size": 8192,
            "speculative": False,
            "cuda_graph_disabled": False,
            "tokens_per_bs": {"decode": 1},
        }
        model = Model("GlmMoeDsaForCausalLM", "GlmMoeDsaForCausalLM", {}, (), tokens, (), None)
        return {
            r.id: Construction(
                device, construct.literal_launch(r.launch), False, None, {"main": model}
            )
            for r in requests
        }

    monkeypatch.setattr(construct, "build_many", construction_child)

    def run_smoke(project: Any, image: str, req: Any, progress: Any = None, gpus: Any = None):
        # The smoke run's own reads (its scenario, options, report folder and the arch the
        # image needs), then the container's answer: a passing report.
        counted["smoke runs"] += 1
        assert gpus is not None, "the candidate hands the smoke its GPU facts"
        run = runner._prepare(project.root, image, req, progress)
        arch, _why = preflight.expected_arch(project, run.scenario, {})
        assert arch == "gfx950"
        return SmokeReport(
            True,
            "passed",
            (Check("serves", True),),
            image,
            None,
            None,
            run.scenario.name,
            run.scenario.path,
            {"ready_s": 1.0},
            None,
            run.report_dir,
        )

    monkeypatch.setattr(runner, "run_smoke", run_smoke)
    import sglforge.smoke as smoke_package

    monkeypatch.setattr(smoke_package, "run_smoke", run_smoke)
    import sglforge.publish as publish_module
    import sglforge.release as release_module

    monkeypatch.setattr(release_module, "registry_records", lambda *a, **k: [])
    monkeypatch.setattr(
        publish_module, "push_release_record", lambda *a, **k: f"{REGISTRY}/records:x"
    )


def _project(tmp_path: Path) -> tuple[Any, Path, Path]:
    p = make_build_project(tmp_path)
    text = (REPO / "smoke" / "glm5-mxfp4-mtp-mi355x.toml").read_text()
    # its [bench] tables left out (a bench needs a last release; its gate then says why)
    text = text[: text.index("\n[bench]\n")] + text[text.index("\n[checks]\n") :]
    (p.root / "smoke").mkdir(exist_ok=True)
    chosen = p.root / "smoke" / "glm5-mxfp4-mtp-mi355x.toml"
    chosen.write_text(text)
    model = tmp_path / "GLM-5.2"
    model.mkdir()
    config = {
        "architectures": ["GlmMoeDsaForCausalLM"],
        "n_routed_experts": 256,
        "num_experts_per_tok": 8,
        "torch_dtype": "bfloat16",
    }
    (model / "config.json").write_text(json.dumps(config))
    return p, chosen, model


def _run(root: Path, *args: str) -> dict[str, Any]:
    res = CliRunner().invoke(main, ["--root", str(root), *args], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


ONCE = {
    "scenario parsed": 1,
    "upstream.toml read": 1,
    "targets.toml read": 1,
    "upstream fetched": 1,
    "GPU probes": 1,
    "construction child": 1,
    "aiter probe": 1,
    "engine build": 1,
    "smoke runs": 1,
    "registry checked": 1,  # where --registry is read; the core takes the Registry value
    "model config read": 1,  # the candidate's, which the construction and coverage take
    "model config read again": 0,  # (coverage reading the model folder itself)
}


def test_a_full_publish_reads_and_asks_each_thing_once(
    tmp_path: Path, counted: Counter[str]
) -> None:
    p, chosen, model = _project(tmp_path)
    args = ["publish", "--upstream", str(p.upstream), "--registry", REGISTRY, "--offline"]
    doc = _run(p.root, *args, "--scenario", str(chosen), "--model", str(model), "--json")
    steps = {s["name"]: s["ok"] for s in doc["steps"]}
    assert steps["scan"] and steps["coverage"] and steps["smoke"], doc["steps"]
    assert steps["bench"] is None  # skipped, and it says why
    bench = next(g for g in doc["gates"] if g["name"] == "bench")
    assert not bench["ran"] and "no [bench] table" in bench["why"]
    assert doc["pushed"] and doc["error"] is None
    assert {k: counted[k] for k in ONCE} == ONCE, counted


def test_a_full_upgrade_with_publish_reads_and_asks_each_thing_once(
    tmp_path: Path, counted: Counter[str]
) -> None:
    from synthetic import git as run_git

    p, chosen, model = _project(tmp_path)
    run_git(p.upstream, "tag", "v0.5.15")  # the same tree, as the next release
    base = "sglforge-standin/sglang-build:v{version}-rocm700-mi35x"
    args = ["upgrade", "--to", "v0.5.15", "--upstream", str(p.upstream), "--publish"]
    args += ["--registry", REGISTRY, "--offline", "--base-image", base]
    args += ["--scenario", str(chosen), "--model", str(model), "--json"]
    doc = _run(p.root, *args)
    assert doc["ready"], doc["reason"]
    (target,) = doc["targets"]
    assert target["published"], target
    gates = {g["name"]: g for g in target["gates"]}
    assert gates["scan"]["ok"] and gates["coverage"]["ok"] and gates["smoke"]["ok"], gates
    assert not gates["bench"]["ran"]
    # upstream.toml is read once per state of the queue: the project's, the staged copy's,
    # and the staged copy's again after the refresh rewrote it (the new pin).
    once = dict(ONCE, **{"upstream.toml read": 3})
    assert {k: counted[k] for k in once} == once, counted


def _with_items(root: Path) -> None:
    """The queue gets the shipped config item (its rows are for mi355x at 0.5.12-0.5.15)."""
    import shutil

    shutil.copytree(REPO / "patches" / "configs", root / "patches" / "configs")


def test_with_config_items_the_base_s_aiter_is_probed_once(
    tmp_path: Path, counted: Counter[str]
) -> None:
    # The build's staging probes the base for its tables; the coverage gate reuses them.
    p, chosen, model = _project(tmp_path)
    _with_items(p.root)
    args = ["publish", "--upstream", str(p.upstream), "--registry", REGISTRY, "--offline"]
    doc = _run(p.root, *args, "--scenario", str(chosen), "--model", str(model), "--json")
    assert {s["name"]: s["ok"] for s in doc["steps"]}["coverage"], doc["steps"]
    assert counted["aiter probe"] == 1, counted


def test_upgrade_fills_a_dated_base_template_before_any_probe(
    tmp_path: Path, counted: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--base-image 'repo:v{version}-...-{date}'`` on a queue with config items: the base
    that retires upstreamed items is probed with {version} filled and {date} resolved to the
    newest dated tag, as the build's (ARCHITECTURE-REVIEW.md 3.2: it once got '...-{date}')."""
    from synthetic import git as run_git

    p, chosen, model = _project(tmp_path)
    _with_items(p.root)
    run_git(p.upstream, "tag", "v0.5.15")
    dated = "sglforge-standin/sglang-build:v0.5.15-rocm700-mi35x"
    images.tag(dated, f"{dated}-20260101")
    images.tag(dated, f"{dated}-20260315")
    probed: list[str] = []
    real = bases.aiter_configs
    monkeypatch.setattr(
        bases, "aiter_configs", lambda ref, labels=None: probed.append(ref) or real(ref, labels)
    )
    template = "sglforge-standin/sglang-build:v{version}-rocm700-mi35x-{date}"
    args = ["upgrade", "--to", "v0.5.15", "--upstream", str(p.upstream), "--offline"]
    args += ["--base-image", template, "--scenario", str(chosen), "--model", str(model)]
    doc = _run(p.root, *args, "--json")
    assert doc["ready"], doc["reason"]
    assert probed and set(probed) == {f"{dated}-20260315"}, probed
    (target,) = doc["targets"]
    gates = {g["name"]: g for g in target["gates"]}
    assert gates["coverage"]["ok"] and gates["smoke"]["ok"], gates
    assert not gates["bench"]["ran"] and "without --publish" in gates["bench"]["why"]
