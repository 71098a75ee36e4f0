"""The construction children run fenced, in the node's environment (issue 42 F1, issue 41 item 1).

Real children, real code we did not write: a sglang tree whose package (a queue patch, or the
release as given) runs code at import, and a ``transformers`` served on the config child's path.
Each writes what it sees (its whole environment, its working folder, its limits, whether it can
reach a socket on this host's loopback) to a file. Every child is started with the caller's
secrets and the host's ``SGLANG_USE_AITER=0`` in the environment; none of it may arrive, and
the target's ``SGLANG_USE_AITER=1`` must. Then each way a child can fail to answer (an error,
a timeout, a kill, a resource limit) is a ``scan-incomplete`` fail, never "nothing blocks".
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sglforge import construct, coverage
from sglforge.cli import main
from sglforge.construct import hfresolve, sandbox
from sglforge.construct.environment import target_env
from sglforge.queue.configs import base_tables_from_dir
from sglforge.scan import scan_tree
from sglforge.scan.findings import FAIL
from sglforge.scan.text import scan_text
from sglforge.targets import load_targets

REPO = Path(__file__).resolve().parents[2]
MI355X = load_targets(REPO).resolve("mi355x")
# What the caller has: secrets, and a host setting that would change the construction's shapes.
CALLER = {
    "SGLFORGE_REGISTRY_PASSWORD": "hunter2-SECRET",
    "AWS_SECRET_ACCESS_KEY": "aws-SECRET",
    "GITHUB_TOKEN": "ghp-SECRET",
    "DOCKER_AUTH_CONFIG": "docker-SECRET",
    "HF_TOKEN": "hf-SECRET",
    "MY_SERVICE_API_KEY": "key-SECRET",
    "AITER_LOG_MORE": "host",
    "HIP_VISIBLE_DEVICES": "host",
    "ROCM_PATH": "/host/rocm",
    "CUDA_VISIBLE_DEVICES": "host",
}
CONFIG = {"architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa"}


def spy(dump: Path, then: str = "") -> str:
    """Python that records what the process sees into ``dump``, then runs ``then``."""
    return (
        "import json as _j, os as _o, resource as _r, socket as _s\n"
        "def _reach(port):\n"
        "    try:\n"
        "        _s.create_connection(('127.0.0.1', port), timeout=2).close()\n"
        "        return True\n"
        "    except OSError:\n"
        "        return False\n"
        "def _creds():\n"
        "    for path in _CREDS:\n"
        "        try:\n"
        "            if 'SECRET' in open(path).read():\n"
        "                return True\n"
        "        except OSError:\n"
        "            pass\n"
        "    return False\n"
        f"_CREDS = {credential_files()!r}\n"
        "def _parent():\n"
        "    try:\n"
        "        return 'SECRET' in open(f'/proc/{_o.getppid()}/environ', 'rb').read().decode()\n"
        "    except OSError:\n"
        "        return False\n"
        f"_j.dump({{'env': dict(_o.environ), 'cwd': _o.getcwd(),"
        f" 'as': _r.getrlimit(_r.RLIMIT_AS)[0], 'fsize': _r.getrlimit(_r.RLIMIT_FSIZE)[0],"
        f" 'reach': _reach({listener_port()}), 'parent_env': _parent(), 'creds': _creds()}},"
        f" open({str(dump)!r}, 'w'))\n"
        f"{then}\n"
    )


_LISTENER: list[socket.socket] = []  # closed at exit with the test process


def listener_port() -> int:
    """A socket listening on this host's loopback for the test run (a child must not reach it)."""
    if not _LISTENER:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        _LISTENER.append(s)
    return int(_LISTENER[0].getsockname()[1])


def credential_files() -> list[str]:
    """The caller's credential files (under the tests' HOME), each holding a secret."""
    home = Path(os.environ["HOME"])
    files = [home / ".docker" / "config.json", home / ".netrc", home / ".config/gh/hosts.yml"]
    for f in files:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("auth: SECRET\n")
    return [str(f) for f in files]


def fake_tree(root: Path, init: str) -> Path:
    """A release's ``python/`` folder whose ``sglang/__init__.py`` is ``init``."""
    tree = root / "python"
    (tree / "sglang" / "srt").mkdir(parents=True)
    (tree / "sglang" / "__init__.py").write_text(init)
    (tree / "sglang" / "srt" / "__init__.py").write_text("")
    return tree


@pytest.fixture
def caller(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for k, v in CALLER.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("SGLANG_USE_AITER", "0")
    yield


def seen(dump: Path) -> dict[str, Any]:
    assert dump.is_file(), "the child never ran the code"
    return dict(json.loads(dump.read_text()))


def assert_fenced(got: dict[str, Any], project: Path | None = None) -> None:
    env = got["env"]
    leaked = {k for k in env if k in CALLER or CALLER.get(k) in env.values()}
    assert not leaked and not any("SECRET" in v for v in env.values()), leaked
    assert env["SGLANG_USE_AITER"] == "1", "the node's variable, not the host's 0"
    assert env["HOME"] != os.environ["HOME"] and Path(env["HOME"]).parent == Path(got["cwd"]).parent
    ours = {"HOME", "TMPDIR", "PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONDONTWRITEBYTECODE"}
    config_child = {"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TRANSFORMERS_VERBOSITY"}
    node = target_env("gfx950", MI355X).as_dict()
    assert set(env) <= {*sandbox.HOST_PASSED, *ours, *config_child, *node}, set(env)
    assert got["as"] == sandbox.MEMORY and got["fsize"] == sandbox.FILE_SIZE
    if sandbox.isolation().network is None:
        assert got["reach"] is False, "the child reached this host's loopback"
        assert got["parent_env"] is False, "the child read sglforge's environment in /proc"
    if sandbox.isolation().hides:
        assert got["creds"] is False, "the child read the caller's credential files"
    for folder in (REPO, project):
        if folder is not None:
            assert not Path(got["cwd"]).is_relative_to(folder)


def test_the_construction_child_sees_only_the_nodes_environment(
    tmp_path: Path, caller: None
) -> None:
    dump = tmp_path / "dump.json"
    tree = fake_tree(tmp_path, spy(dump))
    env = target_env("gfx950", MI355X)
    with pytest.raises(construct.ConstructionError):
        construct.build(tree, CONFIG, [], MI355X.device, env)
    assert_fenced(seen(dump))


def test_the_config_child_runs_an_index_served_transformers_fenced(
    tmp_path: Path, caller: None
) -> None:
    dump = tmp_path / "dump.json"
    wheel = tmp_path / "transformers-9.9.9.dist-info-less"
    (wheel / "transformers").mkdir(parents=True)
    (wheel / "transformers" / "__init__.py").write_text(spy(dump, "__version__ = '9.9.9'"))
    env = hfresolve.Environment("9.9.9", (wheel,))
    got = hfresolve._run(env, {"k": CONFIG}, target_env("gfx950", MI355X))
    assert "fallback" in got["k"] or "error" in got["k"]  # no AutoConfig in the fake
    assert_fenced(seen(dump))


def test_configs_coverage_runs_its_construction_fenced(tmp_path: Path, caller: None) -> None:
    dump = tmp_path / "dump.json"
    tree = fake_tree(tmp_path, spy(dump))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(CONFIG))
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "tuned_fmoe.csv").write_text("cu_num,token,model_dim,inter_dim,expert,topk\n")
    base = base_tables_from_dir(configs)
    with pytest.raises(construct.ConstructionError):
        coverage.coverage(tree, model, [], base, [], environment=target_env("gfx950", MI355X))
    assert_fenced(seen(dump))


def upstream_with_sglang(tmp: Path) -> Path:
    from synthetic import commit, git

    repo = tmp / "upstream"
    (repo / "python" / "sglang" / "srt").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    init = "".join(f"# line {i}\n" for i in range(1, 11))
    (repo / "python" / "sglang" / "__init__.py").write_text(init)
    (repo / "python" / "sglang" / "srt" / "__init__.py").write_text("")
    commit(repo, "release")
    git(repo, "tag", "v0.5.14")
    return repo


def scan_project(tmp: Path, dump: Path) -> Path:
    """A project whose one queue patch makes sglang's ``__init__`` record what it sees and
    fail, naming the ``SGLANG_USE_AITER`` it saw (so the output shows it too)."""
    from synthetic import make_project

    line = spy(dump, "raise RuntimeError('aiter=%s' % _o.environ.get('SGLANG_USE_AITER'))")
    one_line = "exec(" + repr(line) + ")"
    patch = ("dump-env", "python/sglang/__init__.py", 5, one_line, "")
    return make_project(tmp, upstream_with_sglang(tmp), [patch], base="v0.5.14")


def run_scan(root: Path, model: Path, *extra: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["--root", str(root), "scan", "--model", str(model), *extra])
    return res.exit_code, res.stdout  # the report; progress goes to stderr


def test_scan_with_a_patch_that_dumps_its_environment(
    tmp_path: Path, caller: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 42's done-when for ``scan``, and issue 41's: the same output whatever the host's
    ``SGLANG_USE_AITER``; the report names the environment; an unrun construction is a fail."""
    dump = tmp_path / "dump.json"
    root = scan_project(tmp_path, dump)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(CONFIG))
    # the host's SGLANG_USE_AITER set to 0, then unset: --json alike
    json0 = run_scan(root, model, "--json")
    assert_fenced(seen(dump), root)
    monkeypatch.delenv("SGLANG_USE_AITER")
    dump.unlink()
    assert run_scan(root, model, "--json") == json0
    code, text = run_scan(root, model)
    assert code == 1 and "nothing blocks" not in text and "aiter=1" in text, text
    # set to 1, as a user runs it: the secrets in the command's own environment from its
    # start, where a child could read them in /proc/PID/environ; the same text
    dump.unlink()
    proc = subprocess.run(
        [sys.executable, "-m", "sglforge", "--root", str(root), "scan", "--model", str(model)],
        env={**os.environ, **CALLER, "SGLANG_USE_AITER": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1 and proc.stdout == text, proc.stderr
    assert_fenced(seen(dump), root)
    assert "environment: " in text and "from the release image's ENV" in text, text
    assert "[targets.mi355x.env]" in text, text
    doc = json.loads(json0[1])
    assert doc["environment"]["variables"]["SGLANG_USE_AITER"] == "1"
    assert [f["kind"] for f in doc["findings"] if f["severity"] == FAIL] == ["scan-incomplete"]


@pytest.mark.parametrize(
    ("then", "stopped_by"),
    [
        ("raise ImportError('a patch broke sglang')", "a patch broke sglang"),
        ("_o.kill(_o.getpid(), 9)", "killed by signal 9"),
        ("import time; time.sleep(60)", "took over 1 s"),
        ("b = bytearray(16 << 30)", "MemoryError"),
        ("open(_o.path.join(_o.environ['TMPDIR'], 'big'), 'wb').write(b'x' * (2 << 20))",
         "File too large"),
    ],
    ids=["error", "killed", "timeout", "memory", "file-size"],
)  # fmt: skip
def test_a_construction_that_did_not_run_is_a_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, then: str, stopped_by: str
) -> None:
    # the timeout only where it is the case: a busy machine takes seconds to start a child
    monkeypatch.setattr(construct, "CHILD_TIMEOUT", 1 if "sleep" in then else 300)
    monkeypatch.setattr(sandbox, "FILE_SIZE", 1 << 20)  # the limit, not the disk, is tested
    dump = tmp_path / "dump.json"
    tree = fake_tree(tmp_path / "t", spy(dump, then))
    found = scan_tree(tree.parent, CONFIG, [], MI355X.device, "config.json")
    incomplete = [f for f in found if f.kind == "scan-incomplete"]
    assert [f.severity for f in incomplete] == [FAIL], found
    assert stopped_by in incomplete[0].detail, incomplete[0].detail
    assert "nothing blocks" not in scan_text(found).footer


def test_no_caller_variable_survives_the_allow_list(tmp_path: Path) -> None:
    host = {**CALLER, "PATH": "/bin", "LANG": "C.UTF-8", "SGLANG_USE_AITER": "0",
            "PYTHONPATH": "/host", "LD_PRELOAD": "/evil.so", "HOME": "/root"}  # fmt: skip
    target = {"SGLANG_USE_AITER": "1", "HF_TOKEN": "from-the-scenario", "NCCL_X": "1"}
    env = sandbox.child_env(target, tmp_path, {"PYTHONPATH": "/ours"}, host)
    assert env["PATH"] == "/bin" and env["PYTHONPATH"] == "/ours" and env["NCCL_X"] == "1"
    assert env["SGLANG_USE_AITER"] == "1" and env["HOME"] == str(tmp_path / "home")
    assert not {"HF_TOKEN", "LD_PRELOAD", *CALLER} & set(env), env
    assert sys.executable  # the children run this interpreter


def test_the_shims_state_the_images_triton(tmp_path: Path) -> None:
    """Issue 41 item 5: the triton version sglang reads (0.5.14 picks the DSA page size from
    it) is the image's when sglforge read the image, else the assumed one, said so."""
    from dataclasses import replace

    from sglforge.construct.environment import ASSUMED

    dump = tmp_path / "triton.txt"
    tree = fake_tree(
        tmp_path, f"import triton\nopen({str(dump)!r}, 'w').write(triton.__version__)\n"
    )
    node = target_env("gfx950", MI355X)
    assert dict(node.packages) == ASSUMED and "assumed" in node.packages_source
    for version in ("3.5.1", ASSUMED["triton"]):
        env = replace(node, packages=(("triton", version),))
        with pytest.raises(construct.ConstructionError):
            construct.build(tree, CONFIG, [], MI355X.device, env)
        assert dump.read_text() == version


def test_without_unshare_the_child_runs_fenced_but_networked_and_the_report_says_so(
    tmp_path: Path, caller: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where ``unshare -rn`` is not available the child keeps every other fence, and the
    environment's line in each report names the host's network and why."""
    real_which = sandbox.shutil.which
    monkeypatch.setattr(
        sandbox.shutil, "which", lambda n: None if n == "unshare" else real_which(n)
    )
    sandbox.isolation.cache_clear()
    try:
        assert sandbox.isolation().network == f"no unshare on {sys.platform}"
        described = target_env("gfx950", MI355X).describe()
        assert described.endswith(
            f"the construction had the host's network (no unshare on {sys.platform})"
        )
        dump = tmp_path / "dump.json"
        with pytest.raises(construct.ConstructionError):
            construct.build(fake_tree(tmp_path, spy(dump)), CONFIG, [], MI355X.device)
        got = seen(dump)
        assert got["reach"] is True  # the host's loopback: said, not hidden
        assert not set(got["env"]) & set(CALLER) and got["as"] == sandbox.MEMORY
        if os.getuid() != 0:  # root reads any /proc/PID/environ; a same-user child may not
            assert got["parent_env"] is False
    finally:
        sandbox.isolation.cache_clear()


def test_publishs_scan_gate_with_a_patch_that_dumps_its_environment(
    tmp_path: Path, caller: None
) -> None:
    """Issue 42's done-when for ``publish``: its scan gate (before the build) runs the queue's
    patch fenced, in the scenario's environment, and an unrun construction blocks it."""
    from sglforge.candidate import Candidate
    from sglforge.gates import scan as scan_gate
    from sglforge.project import Project
    from sglforge.scenario.file import load_scenario

    dump = tmp_path / "dump.json"
    root = scan_project(tmp_path, dump)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(CONFIG))
    project = Project(root)
    scenario = load_scenario(REPO / "smoke" / "glm5-mxfp4-mtp-mi355x.toml")
    with Candidate(project, project.target("mi355x"), scenario, model) as c:
        result = scan_gate.check(c)
    assert result.ok is False and "scan-incomplete" in result.detail, result
    assert_fenced(seen(dump), root)
    assert seen(dump)["env"]["SGLANG_USE_AITER"] == scenario.container.env["SGLANG_USE_AITER"]
