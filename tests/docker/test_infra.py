"""The Docker test infrastructure works: stand-in bases, local registries, cleanup."""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import docker
import docker.errors
import pytest

from standin.base import (
    DEBIAN_TAG,
    MANAGED,
    PACKAGE_DIR,
    SERVER_PY,
    SESSION,
    STANDIN,
    cleanup,
    ensure_sglang_base,
    object_labels,
)

pytestmark = pytest.mark.docker

MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
PLACEHOLDER_SERVER = 'import sys\nprint("placeholder stand-in server", sys.argv[1:])\n'


def run_python(
    client: docker.DockerClient,
    image: str,
    code: str,
    labels: dict[str, str],
    workdir: str | None = None,
) -> str:
    """Run ``python3 -c code`` in a throwaway container without network; its output."""
    out = client.containers.run(
        image,
        ["python3", "-c", code],
        working_dir=workdir,
        network_mode="none",
        labels=labels,
        remove=True,
    )
    return out.decode()


def small_image(client: docker.DockerClient, base: str, labels: dict[str, str]) -> str:
    """Build a one-layer image FROM ``base`` (unique content); its id."""
    dockerfile = f"FROM {base}\nRUN echo {uuid.uuid4().hex} > /marker\n"
    image, _ = client.images.build(
        fileobj=io.BytesIO(dockerfile.encode()), labels=labels, network_mode="none", rm=True
    )
    return str(image.id)


def push(client: docker.DockerClient, ref: str, auth_config: dict[str, str] | None) -> str:
    """Push ``ref``; the manifest digest the engine reports, or RuntimeError with its error."""
    repo, tag = ref.rsplit(":", 1)
    digest = None
    for line in client.images.push(repo, tag, stream=True, decode=True, auth_config=auth_config):
        if "error" in line:
            raise RuntimeError(line["error"])
        digest = line.get("aux", {}).get("Digest", digest)
    assert digest, f"push of {ref} reported no digest"
    return str(digest)


@pytest.fixture
def server_py(tmp_path: Path) -> Path:
    """The stand-in server if written yet, else a placeholder (this file's tests only)."""
    if SERVER_PY.is_file():
        return SERVER_PY
    placeholder = tmp_path / "server.py"
    placeholder.write_text(PLACEHOLDER_SERVER)
    return placeholder


def test_debian_base_runs_python3(docker_client, standin_base, docker_labels):
    assert standin_base == DEBIAN_TAG
    labels = docker_client.images.get(standin_base).labels
    assert labels[STANDIN] == "1" and labels[MANAGED] == "1"
    out = run_python(
        docker_client,
        standin_base,
        "import sys, sysconfig; print(sys.version_info[:2], sysconfig.get_platform())",
        docker_labels,
    )
    assert out.strip() == "(3, 11) linux-x86_64"


def test_debian_base_has_no_network(docker_client, standin_base, docker_labels):
    out = run_python(
        docker_client,
        standin_base,
        "import socket; print(sorted(n for _, n in socket.if_nameindex()))",
        docker_labels,
    )
    assert out.strip() == "['lo']"


@pytest.mark.parametrize("version", ["0.5.14", "0.5.13"])
def test_sglang_base_reports_version_and_path(docker_client, docker_labels, server_py, version):
    tag = ensure_sglang_base(version, server_py=server_py, client=docker_client)
    if server_py == SERVER_PY:
        assert tag == f"sglforge-standin/sglang:v{version}-rocm700-mi35x"
    image = docker_client.images.get(tag)
    assert image.labels[STANDIN] == "1"
    assert image.labels["io.sglforge.standin.sglang-version"] == version
    code = (
        "import json, importlib.metadata as md, os, sglang, sglang.launch_server as ls;"
        "print(json.dumps([sglang.__version__, md.version('sglang'),"
        " os.path.dirname(sglang.__file__), open(ls.__file__).read()]))"
    )
    got = json.loads(run_python(docker_client, tag, code, docker_labels, workdir="/"))
    assert got == [version, version, PACKAGE_DIR, server_py.read_text()]
    # As in the release images: setuptools-scm wrote _version.py from the git tag, pip's
    # editable install is a finder module (not a path .pth), and from the WORKDIR the
    # repository folder shadows the package as a namespace package.
    layout = (
        "import glob, json, importlib.metadata as md, sglang;"
        "d = md.distribution('sglang');"
        "print(json.dumps([open('/sgl-workspace/sglang/python/sglang/_version.py').read(),"
        " json.loads(d.read_text('direct_url.json')),"
        " sorted(str(f) for f in d.files if str(f).startswith('__editable__')),"
        " sglang.__file__, list(sglang.__path__)]))"
    )
    version_py, direct, editable, init, path = json.loads(
        run_python(docker_client, tag, layout, docker_labels)
    )
    assert f"__version__ = version = '{version}'" in version_py
    assert direct == {"url": "file:///sgl-workspace/sglang/python", "dir_info": {"editable": True}}
    mangled = version.replace(".", "_")
    assert f"__editable___sglang_{mangled}_finder.py" in editable
    assert init is None and path == ["/sgl-workspace/sglang"]
    cfg = docker_client.api.inspect_image(tag)["Config"]
    assert (cfg["WorkingDir"], cfg["Cmd"], cfg["Entrypoint"]) == (
        "/sgl-workspace",
        ["/bin/bash"],
        None,
    )


def test_sglang_base_extra_files_land_and_it_is_reused_until_its_content_changes(
    docker_client, docker_labels, server_py
):
    """Extra repository files land under /sgl-workspace; a base is rebuilt only when its
    content changes, and the outdated one is removed (two builds, not three: the first one
    shows where the files land)."""
    tag = "sglforge-standin/sglang:infra-reuse"

    def build(value: bytes) -> str:
        ensure_sglang_base(
            tag=tag,
            server_py=server_py,
            files={"python/sglang/srt/marker.py": value},
            client=docker_client,
        )
        return str(docker_client.images.get(tag).id)

    first = build(b"VALUE = 42\n")
    out = run_python(
        docker_client,
        tag,
        "import sglang.srt.marker as m; print(m.VALUE, m.__file__)",
        docker_labels,
        workdir="/",
    )
    assert out.split() == ["42", "/sgl-workspace/sglang/python/sglang/srt/marker.py"]
    assert build(b"VALUE = 42\n") == first
    second = build(b"VALUE = 43\n")
    assert second != first
    # The outdated double is removed, not left dangling.
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(first)
    docker_client.images.remove(tag)


@pytest.mark.registry
def test_registry_push_pull_round_trip(docker_client, standin_base, docker_labels, registry):
    reg = registry()
    image_id = small_image(docker_client, standin_base, docker_labels)
    ref = reg.ref("sglforge-test/roundtrip", "1")
    docker_client.images.get(image_id).tag(ref)
    digest = push(docker_client, ref, reg.auth_config)

    status, headers, _ = reg.get("/v2/sglforge-test/roundtrip/manifests/1", accept=MANIFEST_V2)
    assert status == 200
    assert headers["Docker-Content-Digest"] == digest

    docker_client.images.remove(ref)
    pulled = docker_client.images.pull(ref.rsplit(":", 1)[0], tag="1")
    assert pulled.id == image_id
    assert f"{ref.rsplit(':', 1)[0]}@{digest}" in pulled.attrs["RepoDigests"]


@pytest.mark.registry
def test_htpasswd_registry_refuses_anonymous_push(
    docker_client, standin_base, docker_labels, registry
):
    reg = registry("ci-user", "s3cret-pass")
    anonymous = reg.__class__(reg.address, reg.folder, reg.process)
    status, headers, _ = anonymous.get("/v2/")
    assert status == 401 and "Basic" in headers.get("Www-Authenticate", "")
    assert reg.get("/v2/")[0] == 200

    image_id = small_image(docker_client, standin_base, docker_labels)
    ref = reg.ref("sglforge-test/private", "1")
    docker_client.images.get(image_id).tag(ref)
    with pytest.raises(RuntimeError, match="(?i)auth"):
        push(docker_client, ref, None)
    with pytest.raises(RuntimeError, match="(?i)auth"):
        push(docker_client, ref, {"username": "ci-user", "password": "wrong"})
    digest = push(docker_client, ref, reg.auth_config)
    status, headers, _ = reg.get("/v2/sglforge-test/private/manifests/1", accept=MANIFEST_V2)
    assert status == 200 and headers["Docker-Content-Digest"] == digest


@pytest.mark.registry
def test_registry_stop_frees_port(registry):
    reg = registry()
    assert reg.get("/v2/")[0] == 200
    reg.stop()
    with pytest.raises(OSError):
        reg.get("/v2/")


def test_cleanup_spares_other_sessions(docker_client, standin_base):
    mine, theirs = uuid.uuid4().hex[:12], uuid.uuid4().hex[:12]
    kept = docker_client.containers.create(
        standin_base, ["true"], labels=object_labels(theirs), network_mode="none"
    )
    try:
        gone = docker_client.containers.create(
            standin_base, ["true"], labels=object_labels(mine), network_mode="none"
        )
        image_id = small_image(docker_client, standin_base, object_labels(mine))
        cleanup(docker_client, session=mine)
        with pytest.raises(docker.errors.NotFound):
            gone.reload()
        with pytest.raises(docker.errors.ImageNotFound):
            docker_client.images.get(image_id)
        kept.reload()
        assert kept.labels[SESSION] == theirs
        # The stand-in bases are a cache, not test objects: cleanup keeps them.
        docker_client.images.get(standin_base)
    finally:
        kept.remove(force=True)
