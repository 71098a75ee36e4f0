"""The stand-in server (TEST DOUBLE) parses its launch as the image's own sglang does: the
same launches, run through sglang 0.5.14's real ``ServerArgs`` (its parser and
``__post_init__``, under sglforge's construction shims, as ``sglforge scan`` runs them) and
through the stand-in reading the same release's tree, are accepted or refused alike, with the
same message, and resolve the speculative and KV settings alike (issue 41; FIDELITY-5 M3, M7).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sglforge import smoke
from standin import server

ROOT = Path(__file__).resolve().parents[2]
# GLM-5.2's shape: a DSA model (index_topk), Quark MXFP4
MODEL = ROOT / "tests" / "standin" / "model-mxfp4"
GLM = ["--model-path", str(MODEL), "--tp", "8", "--trust-remote-code"]
MTP = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "5"]
MTP += ["--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "6"]
# Flags 0.5.14 accepts that the stand-in's own parser refused (FIDELITY-5 section 2), the first
# the remedy `sglforge scan` prints (src/sglforge/scan/quant.py).
ACCEPTED = {
    "disable-shared-experts-fusion": ["--disable-shared-experts-fusion"],
    "enable-dp-attention": ["--dp", "8", "--enable-dp-attention"],
    "ep": ["--ep", "8"],
    "page-size": ["--page-size", "64"],
    "disable-overlap-schedule": ["--disable-overlap-schedule"],
    "reasoning-parser": ["--reasoning-parser", "glm45"],
    "tool-call-parser": ["--tool-call-parser", "glm45"],
    "max-total-tokens": ["--max-total-tokens", "500000"],
    "moe-runner-backend": ["--moe-runner-backend", "triton"],
    "api-key": ["--api-key", "not-a-secret"],
}
REFUSED = {
    "quantization-foo": ["--quantization", "foo"],
    "kv-fp8-e5m2-on-dsa": ["--kv-cache-dtype", "fp8_e5m2"],
    "kv-fp4-on-dsa": ["--kv-cache-dtype", "fp4_e2m1"],
    "unknown-flag": ["--no-such-flag"],
}
NORMALISED = {
    "nextn-draft-5": ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "5",
                      "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "5"],
    "eagle-lowercase": ["--speculative-algorithm", "eagle", "--speculative-num-steps", "3",
                        "--speculative-eagle-topk", "1"],
}  # fmt: skip
COMPARED = (
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "kv_cache_dtype",
    "tp_size",
    "dp_size",
    "quantization",
    "disable_shared_experts_fusion",
    "max_running_requests",
)


def _launches() -> dict[str, list[str]]:
    out = {}
    for path in sorted((ROOT / "smoke").glob("*.toml")):
        args = smoke.load_scenario(path).launch_args(30000)
        i = args.index("--model-path")
        out[f"scenario:{path.stem}"] = [*args[:i], "--model-path", str(MODEL), *args[i + 2 :]]
    out |= {f"accepts:{k}": [*GLM, *MTP, *v] for k, v in ACCEPTED.items()}
    out |= {f"refuses:{k}": [*GLM, *v] for k, v in REFUSED.items()}
    out |= {f"normalises:{k}": [*GLM, *v] for k, v in NORMALISED.items()}
    return out


# Upstream: sglang's own parser and ServerArgs.__post_init__ under the construction's shims
# (the same child `sglforge scan` runs; the target: MI355X, SGLANG_USE_AITER=1).
CHILD = r"""
import json, logging, sys
from sglforge.construct import shims
from sglforge.construct.child import _hand_in, _server_args
doc = json.loads(sys.stdin.read())
shims.install(doc["device"])
sys.path.insert(0, doc["tree"])
logging.disable(logging.WARNING)
out = {}
for name, argv in doc["launches"].items():
    try:
        _hand_in({"config": doc["config"], "launch": argv, "hf": None}, doc["device"])
        sa = _server_args(argv)
        out[name] = {k: getattr(sa, k, None) for k in doc["keys"]}
    except BaseException as e:
        out[name] = {"error": f"{type(e).__name__}: {e}"}
print("JSON" + json.dumps(out, default=str))
"""


@pytest.fixture(scope="module")
def tree() -> Path:
    """The released 0.5.14 wheel's ``sglang/`` tree (PyPI), unpacked once in the cache."""
    from sglang_release import wheel_tree

    return wheel_tree("0.5.14")


@pytest.fixture(scope="module")
def upstream(tree: Path) -> dict[str, dict]:
    """0.5.14's verdict on every launch; kept in the cache under a key of everything it
    depends on (the wheel, the launches, the config, this child, sglforge's construction)."""
    from sglforge import cache

    construct = sorted((ROOT / "src" / "sglforge" / "construct").glob("*.py"))
    key = hashlib.sha256(
        json.dumps([tree.name, CHILD, _launches(), COMPARED, (MODEL / "config.json").read_text(),
                    [f.read_text() for f in construct]]).encode()
    ).hexdigest()[:32]  # fmt: skip
    kept = cache.cache_root() / "test-oracles" / f"standin-launch-{key}.json"
    if kept.is_file():
        return dict(json.loads(kept.read_text()))
    found = _run_upstream(tree)
    kept.parent.mkdir(parents=True, exist_ok=True)
    tmp = kept.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(found))
    os.replace(tmp, kept)
    return found


def _run_upstream(tree: Path) -> dict[str, dict]:
    from sglforge.construct.packages import install

    real = install(tree)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *map(str, real.paths)])
    env["SGLANG_USE_AITER"] = "1"
    device = {"gfx": "gfx950", "name": "AMD Instinct MI355X", "cu_num": 256,
              "memory_gib": 288, "count": 8, "capability": [9, 5]}  # fmt: skip
    doc = {"device": device, "tree": str(tree), "launches": _launches(), "keys": COMPARED,
           "config": json.loads((MODEL / "config.json").read_text())}  # fmt: skip
    with tempfile.TemporaryDirectory() as cwd:
        done = subprocess.run(
            [sys.executable, "-c", CHILD],
            input=json.dumps(doc),
            capture_output=True,
            text=True,
            cwd=cwd,
            env=env,
            timeout=600,
        )
    lines = [x for x in done.stdout.splitlines() if x.startswith("JSON")]
    assert lines, done.stderr[-3000:]
    return dict(json.loads(lines[-1][4:]))


def _standin(launch: server.Launch, argv: list[str]) -> dict:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = launch.parse(argv)
    except SystemExit:
        message = err.getvalue().strip().splitlines()[-1]
        return {"error": message.split("error: ", 1)[1]}
    except (AssertionError, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {k: getattr(args, k, None) for k in COMPARED}


def test_the_standin_reads_its_parser_from_the_image_s_tree(tree: Path, tmp_path: Path) -> None:
    launch = server.Launch(str(tree / "sglang"))
    assert launch.server_args is not None and len(launch.parser._actions) > 400
    # the double installed as a tree's launch_server.py finds the tree it sits in
    package = tmp_path / "sglang"
    package.mkdir()
    (package / "srt").symlink_to(tree / "sglang" / "srt")
    (package / "launch_server.py").write_text(Path(server.__file__).read_text())
    probe = "import launch_server as s; print(s.image_package())"
    found = subprocess.run(
        [sys.executable, "-c", probe], cwd=package, capture_output=True, text=True
    )
    assert found.stdout.strip() == str(package), found.stderr


def test_standin_and_0_5_14_accept_and_refuse_alike(tree: Path, upstream: dict) -> None:
    launch = server.Launch(str(tree / "sglang"))
    ours = {name: _standin(launch, argv) for name, argv in _launches().items()}
    for name, theirs in upstream.items():
        mine = ours[name]
        if "error" in theirs:
            # upstream's argparse errors come back as "sglang's launch parser: <argparse's>"
            want = theirs["error"].split("sglang's launch parser: ", 1)[-1]
            assert "error" in mine and want.endswith(mine["error"]), (name, theirs, mine)
        else:
            assert mine == theirs, name
    refused = {n for n, v in upstream.items() if "error" in v}
    assert refused == {f"refuses:{k}" for k in REFUSED}
    assert upstream["normalises:nextn-draft-5"]["speculative_algorithm"] == "EAGLE"
    assert upstream["normalises:nextn-draft-5"]["speculative_num_draft_tokens"] == 6


def test_server_info_has_the_real_server_s_keys(tree: Path) -> None:
    """Against ``/server_info`` of a real 0.5.14 server (H200, tests/data/h200-run/logs/): the
    same top-level keys (ServerArgs' fields and the scheduler's info); each state's keys are the
    real state's (the real one also holds ``__post_init__``'s private fields)."""
    real = json.loads((ROOT / "tests/data/h200-run/logs/boot01-server_info.json").read_text())
    argv = ["--model-path", str(MODEL), "--port", "0", *MTP, "--enable-metrics"]
    args = server.Launch(str(tree / "sglang")).parse(argv)
    httpd = server.make_server(args, frozenset(), {})
    try:
        handler = server.make_handler(httpd.engine)
        info = json.loads(json.dumps(handler.server_info(handler), default=str))  # type: ignore[arg-type]
    finally:
        httpd.server_close()
    assert set(info) == set(real)
    (state,) = info["internal_states"]
    assert set(state) <= set(real["internal_states"][0]) | {"avg_spec_accept_length"}
