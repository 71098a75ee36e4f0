"""``sglforge publish`` and ``inspect`` against a real engine and real local registries.

The images are built from a synthetic upstream on the stand-in base (TEST DOUBLES, see
tests/standin/) and smoke-tested with the CPU stand-in scenario; the registries are Debian's
``docker-registry`` on 127.0.0.1 (tests/standin/registry.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from click.testing import CliRunner, Result

from helpers_build import STANDIN_REPO, make_build_project
from junit_schema import assert_valid_junit
from sglforge.cli import main
from sglforge.engine import images as engine_images
from sglforge.engine import registry as reg
from sglforge.engine.errors import RegistryAuthRefused
from sglforge.queue.series import load_queue
from standin.base import ensure_sglang_base
from standin.registry import Registry, free_port, start_registry

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
CHANGELOG = "# Changelog\n\n## [Unreleased]\n\n### Added\n- Something.\n"
# Its own repository per session: other sessions' build tests tag sglforge/sglang:... on the
# same engine, and a shared tag could move under a running publish.
REPOSITORY = f"sglforge-test/publish-{uuid.uuid4().hex[:8]}"


class Project:
    """A tmp sglforge project with a queue, a stand-in base, a smoke scenario, a CHANGELOG."""

    def __init__(self, tmp: Path, labels: dict[str, str]) -> None:
        built = make_build_project(tmp)
        ensure_sglang_base(tag=f"{STANDIN_REPO}:v0.5.14-rocm700-mi35x", files=built.base_files())
        self.root = built.root
        self.upstream = built.upstream
        self.labels = labels
        (self.root / "CHANGELOG.md").write_text(CHANGELOG)
        targets = self.root / "images" / "targets.toml"
        text = targets.read_text()
        assert 'repository = "sglforge/sglang"' in text
        targets.write_text(text.replace('"sglforge/sglang"', f'"{REPOSITORY}"', 1))
        self.write_scenario("standin-cpu.toml")

    def write_scenario(
        self, name: str, min_tok_s: float | None = None, bench: bool = False
    ) -> Path:
        """The CPU stand-in scenario, aimed at target mi355x so publish finds it (its [bench]
        tables left out unless ``bench``: tests/docker/test_bench.py covers that step)."""
        text = (REPO / "smoke" / "standin-cpu.toml").read_text()
        if not bench:
            start = text.index("\n[bench]\n")
            text = text[:start] + text[text.index("\n# The same log patterns", start) :]
        text = text.replace(
            '"../tests/standin/model"', json.dumps(str(REPO / "tests/standin/model"))
        )
        text = text.replace("[scenario]\n", '[scenario]\ntarget = "mi355x"\n', 1)
        if min_tok_s is not None:
            assert "min_decode_tok_s = 50.0" in text
            text = text.replace("min_decode_tok_s = 50.0", f"min_decode_tok_s = {min_tok_s}")
        path = self.root / "smoke" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        return path

    def publish(
        self, registry: str, *extra: str, env: dict[str, str] | None = None, verbose: bool = False
    ) -> Result:
        # --json: the document on stdout, the steps as plain lines on stderr; -v adds detail
        args = [*(["-v"] if verbose else []), "--root", str(self.root), "publish"]
        args += ["--target", "mi355x"]
        args += ["--registry", registry, "--upstream", str(self.upstream), "--offline"]
        args += ["--port", str(free_port()), "--retries", "1", "--backoff", "0.2", "--json"]
        # The CPU stand-in scenario is published as what it is (tests/docker/test_bench.py
        # checks that without the flag it is refused for a GPU target).
        args += ["--allow-standin"]
        for k, v in self.labels.items():
            args += ["--label", f"{k}={v}"]
        return CliRunner().invoke(main, [*args, *extra], env=env, catch_exceptions=False)

    def entries(self) -> int:
        # one fork release per queue: ## [v0.5.14-<n>]
        return (self.root / "CHANGELOG.md").read_text().count("## [v0.5.14-")


def doc(result: Result) -> dict[str, Any]:
    """The --json document publish printed on stdout."""
    try:
        return json.loads(result.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"publish printed no JSON (exit {result.exit_code}):\n{result.output}")


def _err(out: dict[str, Any]) -> str:
    """A failed publish's error, message and hint (the --json error object)."""
    err = out["error"]
    assert set(err) == {"code", "message", "hint"} and out["ok"] is False, err
    assert out["exit_code"] == err["code"]
    return f"{err['message']}\n{err['hint'] or ''}"


def manifest_digest(registry: Registry, tag: str) -> str | None:
    status, headers, _ = registry.get(
        f"/v2/{REPOSITORY}/manifests/{tag}", accept=reg.MANIFEST_ACCEPT
    )
    if status == 404:
        return None
    assert status == 200, (status, registry.log()[-1000:])
    return {k.lower(): v for k, v in headers.items()}["docker-content-digest"]


@pytest.fixture
def project(
    tmp_path: Path, docker_client: docker.DockerClient, docker_labels: dict[str, str]
) -> Project:
    return Project(tmp_path / "p", docker_labels)


@pytest.fixture(autouse=True)
def no_ambient_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in (reg.USER_ENV, reg.PASSWORD_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker-config"))


@pytest.fixture
def old_image(
    docker_client: docker.DockerClient, docker_labels: dict[str, str], standin_base: str
) -> str:
    """A small labelled image standing for the previous release behind the friendly tags."""
    dockerfile = f"FROM {standin_base}\nLABEL io.sglforge.test.old-release={uuid.uuid4().hex}\n"
    image, _ = docker_client.images.build(
        fileobj=io.BytesIO(dockerfile.encode()), labels=docker_labels, rm=True
    )
    return str(image.id)


def seed_friendly(old: str, registry: Registry, creds: reg.Credentials | None) -> dict[str, str]:
    """Push ``old`` as the friendly tags; returns tag -> digest the registry serves."""
    out = {}
    for tag in ("v0.5.14-rocm700-mi355x", "latest-mi355x"):
        ref = registry.ref(REPOSITORY, tag)
        engine_images.tag(old, ref)
        out[tag] = reg.push(ref, creds, attempts=1).digest
        assert manifest_digest(registry, tag) == out[tag]
    return out


def test_publish_push_pull_round_trip_then_inspect_and_no_second_entry(
    project: Project,
    registry: Callable[..., Registry],
    docker_client: docker.DockerClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = f"pw-{uuid.uuid4().hex}"
    reg_auth = registry("publisher", secret)
    monkeypatch.setenv(reg.USER_ENV, "publisher")
    monkeypatch.setenv(reg.PASSWORD_ENV, secret)
    junit = project.root / "build" / "reports" / "publish.xml"
    summary = project.root / "build" / "reports" / "summary.md"

    first = project.publish(reg_auth.address, "--junit", str(junit), "--summary", str(summary))
    out = doc(first)
    assert first.exit_code == 0, first.output
    assert out["smoke_passed"] is True
    # --json: stdout the document alone (parsed above), stderr the steps as plain lines
    assert "\r" not in first.stderr and "\x1b" not in first.stderr, first.stderr[-2000:]
    assert f"push {out['pushed'][0]} ..." in first.stderr.splitlines(), first.stderr[-2000:]
    # The CPU stand-in never counts as the GPU target's smoke: published, recorded as a stand-in.
    assert out["tested"] is False and out["standin"] is True and out["hardware"] == "standin-cpu"
    immutable, *friendly = out["pushed"]
    assert immutable.startswith(f"{reg_auth.address}/{REPOSITORY}:v0.5.14-rocm700-mi355x-q")
    assert [f.rpartition(":")[2] for f in friendly] == ["v0.5.14-rocm700-mi355x", "latest-mi355x"]
    digest = out["digest"]
    for ref in out["pushed"]:  # the registry serves the pushed digest under every tag
        assert manifest_digest(reg_auth, ref.rpartition(":")[2]) == digest
    local_id = docker_client.images.get(out["image"]).id
    assert (
        f"{reg_auth.address}/{REPOSITORY}@{digest}"
        in docker_client.images.get(out["image"]).attrs["RepoDigests"]
    )
    assert project.entries() == 1
    assert (
        out["run"].startswith("docker run ")
        and f" {friendly[0]} python3 -m sglang.launch_server --model-path " in out["run"]
    )
    assert "--speculative-num-steps 5" in out["run"] and "--ipc host" in out["run"]
    assert_valid_junit(junit)
    assert 'failures="0"' in junit.read_text() and '"smoke.' in junit.read_text()
    assert "published" in summary.read_text() and digest in summary.read_text()

    # Round trip: drop every local name of the registry refs and pull one back by tag.
    for ref in out["pushed"]:
        docker_client.images.remove(ref)
    pulled = docker_client.images.pull(
        f"{reg_auth.address}/{REPOSITORY}", tag="latest-mi355x", auth_config=reg_auth.auth_config
    )
    assert pulled.id == local_id
    assert f"{reg_auth.address}/{REPOSITORY}@{digest}" in pulled.attrs["RepoDigests"]

    # Publishing the same inputs again: nothing new in CHANGELOG.md, same digest, reused build.
    second = project.publish(reg_auth.address)
    again = doc(second)
    assert second.exit_code == 0, second.output
    assert again["digest"] == digest and again["build_reused"] is True
    assert again["changelog_written"] is False
    assert project.entries() == 1

    # inspect on the pushed image: provenance from labels + manifest + the release record.
    docker_client.images.remove(friendly[1])
    shown = CliRunner().invoke(
        main,
        ["--root", str(project.root), "inspect", "--pull", friendly[1], "--json"],
        catch_exceptions=False,
    )
    assert shown.exit_code == 0, shown.output
    prov = json.loads(shown.stdout)
    queue = load_queue(project.root)
    assert prov["queue_hash"] == queue.hash
    assert [(p["name"], p["sha256"]) for p in prov["patches"]] == [
        (p.name, p.sha256) for p in queue.patches
    ]
    assert {p["upstream_status"] for p in prov["patches"]} == {"Pending"}
    assert prov["upstream"]["version"] == "0.5.14" and prov["upstream"]["ref"] == "v0.5.14"
    assert len(prov["upstream"]["commit"]) == 40
    assert (prov["target"], prov["gpu_arch"], prov["rocm"]) == ("mi355x", "gfx950", "rocm700")
    assert prov["base"]["name"] == f"{STANDIN_REPO}:v0.5.14-rocm700-mi35x"
    assert prov["base"]["digest"].startswith("sha256:")
    assert prov["manifest_found"] is True and prov["tested"] is False
    assert prov["smoke"]["hardware"] == "standin-cpu"
    assert prov["release"] == immutable.rpartition(":")[2]
    assert prov["smoke"]["figures"]["decode_tok_s"] > 50
    text = CliRunner().invoke(main, ["--root", str(project.root), "inspect", friendly[1]])
    assert "0001-mtp-quant-prefix.patch" in text.output and "decode_tok_s" in text.output
    assert "STAND-IN (standin-cpu; not a GPU run)" in text.output

    # A fresh machine rebuilds the same inputs into an image with another creation time (so
    # another digest): the published release is reused, never overwritten.
    for ref in (out["image"], *out["pushed"]):
        docker_client.images.remove(ref, force=True)
    third = project.publish(reg_auth.address, verbose=True)
    rebuilt = doc(third)
    assert third.exit_code == 0, third.output
    assert rebuilt["build_reused"] is False and rebuilt["digest"] == digest
    assert (
        "already in the registry as" in third.stderr and "smoke-testing that image" in third.stderr
    )
    assert manifest_digest(reg_auth, immutable.rpartition(":")[2]) == digest
    assert project.entries() == 1

    # The password is nowhere: output, records, CHANGELOG, logs, reports, image labels.
    for result in (first, second, third, shown, text):
        assert secret not in result.output
    for path in project.root.rglob("*"):
        if path.is_file() and ".git" not in path.parts and "worktrees" not in path.parts:
            assert secret.encode() not in path.read_bytes(), path
    assert secret not in json.dumps(docker_client.images.get(local_id).attrs)


def test_failed_smoke_pushes_nothing_and_moves_nothing(
    project: Project, registry: Callable[..., Registry]
) -> None:
    r = registry()
    slow = project.write_scenario("impossible.toml", min_tok_s=1e9)
    result = project.publish(r.address, "--scenario", str(slow))
    out = doc(result)
    assert result.exit_code == 1, result.output
    assert out["smoke_passed"] is False and out["pushed"] == [] and out["digest"] is None
    assert "decode-speed" in _err(out) and "nothing was pushed" in _err(out)
    status, _, body = r.get("/v2/_catalog")
    assert status == 200 and json.loads(body)["repositories"] == []
    assert project.entries() == 0
    assert not (project.root / "build" / "releases").exists()


def test_registry_down_gives_a_clear_error_and_friendly_tags_stay(
    project: Project, registry: Callable[..., Registry], old_image: str
) -> None:
    r = registry()
    before = seed_friendly(old_image, r, None)
    r.stop()
    result = project.publish(r.address)
    out = doc(result)
    assert result.exit_code == 8, result.output
    # Asked before the build and the smoke run: nothing ran, nothing was pushed.
    assert out["smoke_passed"] is not True and out["pushed"] == []
    assert f"registry {r.address} did not answer" in _err(out)
    assert f"curl http://{r.address}/v2/" in _err(out)
    # Back up (same storage, new port): the friendly tags still name the previous release.
    restarted = start_registry(r.folder)
    try:
        for tag, digest in before.items():
            assert manifest_digest(restarted, tag) == digest
    finally:
        restarted.stop()
    assert project.entries() == 0


def test_refused_credentials_fail_fast_and_friendly_tags_stay(
    project: Project,
    registry: Callable[..., Registry],
    old_image: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    r = registry("publisher", "right-password")
    before = seed_friendly(old_image, r, reg.Credentials("publisher", "right-password"))
    wrong = f"wrong-{uuid.uuid4().hex}"
    monkeypatch.setenv(reg.USER_ENV, "publisher")
    monkeypatch.setenv(reg.PASSWORD_ENV, wrong)
    result = project.publish(r.address)
    out = doc(result)
    assert result.exit_code == 8, result.output
    # Refused before the build and the smoke run (which take an hour on real hardware).
    assert out["smoke_passed"] is None and out["pushed"] == []
    assert "refused the credentials" in _err(out) and "'publisher'" in _err(out)
    assert reg.USER_ENV in result.output and wrong not in result.output
    for tag, digest in before.items():
        assert manifest_digest(r, tag) == digest
    status, _, body = r.get(f"/v2/{REPOSITORY}/tags/list")
    assert status == 200 and sorted(json.loads(body)["tags"]) == sorted(before)
    assert project.entries() == 0
    # Without any login the registry is refused just as early.
    monkeypatch.delenv(reg.USER_ENV)
    monkeypatch.delenv(reg.PASSWORD_ENV)
    anonymous = project.publish(r.address)
    assert anonymous.exit_code == 8 and "anonymous access" in _err(doc(anonymous))


def test_engine_push_reports_in_band_auth_errors_without_retrying(
    registry: Callable[..., Registry], old_image: str
) -> None:
    r = registry("publisher", "right-password")
    ref = r.ref(REPOSITORY, "probe")
    engine_images.tag(old_image, ref)
    slept: list[float] = []
    with pytest.raises(RegistryAuthRefused, match="refused the login of 'publisher'") as info:
        reg.push(ref, reg.Credentials("publisher", "nope-123"), attempts=4, sleep=slept.append)
    assert slept == [] and "nope-123" not in str(info.value)
    with pytest.raises(RegistryAuthRefused, match="requires a login"):
        reg.push(ref, None, attempts=4, sleep=slept.append)
    assert slept == []


def test_skip_smoke_pushes_only_the_immutable_tag_and_records_untested(
    project: Project, registry: Callable[..., Registry]
) -> None:
    r = registry()
    result = project.publish(r.address, "--skip-smoke")
    out = doc(result)
    assert result.exit_code == 0, result.output
    assert out["smoke_passed"] is None and out["tested"] is False
    assert len(out["pushed"]) == 1 and out["pushed"][0].rpartition(":")[2].startswith("v0.5.14-")
    assert manifest_digest(r, out["pushed"][0].rpartition(":")[2]) == out["digest"]
    assert manifest_digest(r, "latest-mi355x") is None
    assert manifest_digest(r, "v0.5.14-rocm700-mi355x") is None
    record = json.loads(Path(out["release_record"]).read_text())
    assert record["tested"] is False and record["smoke"] is None
    assert record["scan"] == {"not_run": "no smoke scenario (--skip-smoke)"}
    assert "**untested**" in (project.root / "CHANGELOG.md").read_text()


def test_dry_run_shows_the_plan_and_pushes_nothing(
    project: Project, registry: Callable[..., Registry]
) -> None:
    r = registry()
    result = project.publish(r.address, "--dry-run")
    out = doc(result)
    assert result.exit_code == 0, result.output
    assert out["dry_run"] is True and out["pushed"] == []
    assert out["immutable"].startswith(f"{r.address}/{REPOSITORY}:v0.5.14-rocm700-mi355x-q")
    assert [f.rpartition(":")[2] for f in out["friendly"]] == [
        "v0.5.14-rocm700-mi355x",
        "latest-mi355x",
    ]
    status, _, body = r.get("/v2/_catalog")
    assert json.loads(body)["repositories"] == []
    assert project.entries() == 0


@contextlib.contextmanager
def late_proxy(target: str, delay: float) -> Iterator[str]:
    """A TCP forwarder to ``target`` that only starts listening after ``delay`` seconds.

    Until then connections are refused, as from a registry that is restarting.
    """
    port = free_port()
    stop = threading.Event()
    host, _, tport = target.rpartition(":")
    threads: list[threading.Thread] = []

    def pipe(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def serve() -> None:
        if stop.wait(delay):
            return
        with socket.create_server(("127.0.0.1", port)) as server:
            server.settimeout(0.2)
            while not stop.is_set():
                try:
                    client, _ = server.accept()
                except TimeoutError:
                    continue
                upstream = socket.create_connection((host, int(tport)))
                for a, b in ((client, upstream), (upstream, client)):
                    t = threading.Thread(target=pipe, args=(a, b), daemon=True)
                    t.start()
                    threads.append(t)
                sockets.extend((client, upstream))

    sockets: list[socket.socket] = []
    main_thread = threading.Thread(target=serve, daemon=True)
    main_thread.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        stop.set()
        main_thread.join(timeout=5)
        for sock in sockets:
            sock.close()
        for t in threads:
            t.join(timeout=5)


def test_push_retries_a_registry_that_comes_up_late(
    registry: Callable[..., Registry], old_image: str
) -> None:
    r = registry()
    with late_proxy(r.address, delay=1.0) as address:
        ref = f"{address}/{REPOSITORY}:late"
        engine_images.tag(old_image, ref)
        notes: list[str] = []
        started = time.monotonic()
        pushed = reg.push(ref, None, attempts=5, backoff=0.5, progress=notes.append)
        assert pushed.attempts >= 2, notes  # the first attempt met a closed port
        assert any("connection refused" in n and "; retry 1/4 in 0.5s" in n for n in notes), notes
        assert time.monotonic() - started >= 0.5
        assert reg.verify(ref, pushed.digest) == pushed.digest
    assert manifest_digest(r, "late") == pushed.digest


def test_inspect_other_and_missing_images(standin_base: str, tmp_path: Path) -> None:
    other = CliRunner().invoke(main, ["--root", str(tmp_path), "inspect", standin_base])
    assert other.exit_code == 0, other.output
    assert "not built by sglforge" in other.output
    missing = CliRunner().invoke(main, ["inspect", "sglforge-test/none:missing"])
    assert missing.exit_code == 9  # no such image (issue 10), not "publish"
    assert "no such image" in missing.output and "--pull" in missing.output


def test_an_immutable_tag_holding_other_inputs_is_never_overwritten(
    project: Project, registry: Callable[..., Registry], old_image: str
) -> None:
    r = registry()
    plan = doc(project.publish(r.address, "--dry-run"))
    engine_images.tag(old_image, plan["immutable"])
    squatter = reg.push(plan["immutable"], None, attempts=1).digest
    result = project.publish(r.address)
    out = doc(result)
    assert result.exit_code == 8, result.output
    assert "never overwritten" in _err(out) and out["pushed"] == []
    assert manifest_digest(r, plan["immutable"].rpartition(":")[2]) == squatter
    assert manifest_digest(r, "latest-mi355x") is None


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_an_interrupt_after_the_push_still_records_the_release(
    project: Project,
    registry: Callable[..., Registry],
    monkeypatch: pytest.MonkeyPatch,
    signal_name: str,
) -> None:
    """Ctrl-C or SIGTERM right after the immutable tag reached the registry: the image is
    published, so its release record is still written and pushed next to it (and the CHANGELOG
    entry kept), friendly tags stay where they were, and the command ends as interrupted."""
    from sglforge import publish as publish_module
    from sglforge.errors import Terminated

    r = registry()

    def interrupted(*_args: Any, **_kwargs: Any) -> None:
        # Injected at the step after the push (moving the friendly tags), raised the way the
        # signal handlers raise it (cli/signals.py): KeyboardInterrupt, or Terminated.
        if signal_name == "SIGINT":
            raise KeyboardInterrupt
        raise Terminated("received SIGTERM")

    monkeypatch.setattr(publish_module, "_move_friendly", interrupted)
    result = project.publish(r.address)
    assert result.exit_code == {"SIGINT": 130, "SIGTERM": 143}[signal_name], result.output
    status, _, body = r.get(f"/v2/{REPOSITORY}/tags/list")
    assert status == 200, body
    tags = json.loads(body)["tags"] or []
    immutable = [t for t in tags if "-q" in t and not t.endswith("-release")]
    assert len(immutable) == 1, tags
    assert f"{immutable[0]}-release" in tags, tags  # the record went next to the image
    assert not [t for t in tags if t.startswith("latest") or t == "v0.5.14-mi355x"], tags
    assert project.entries() == 1  # the CHANGELOG entry of the published image
