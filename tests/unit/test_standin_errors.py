"""A stand-in base that cannot be built says so as the project's BuildError (exit 6), in one or
two lines naming the image, file or wheel and what to run next, with a step's whole output kept
in a log the hint names (architecture review 5, 5.2 item 10). No Docker: the failing steps run
for real where they can (pip with no index, a debootstrap on PATH that fails, an sdist without
the tokenizer), and a fake Docker client stands in for the engine where they cannot."""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from sglforge import index, tryout
from sglforge.errors import EXIT_BUILD, BuildError
from sglforge.progress import Progress
from sglforge.standin import base


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in cache of the test's own, and pip with no index (it fails at once, offline)."""
    folder = tmp_path / "standin-cache"
    monkeypatch.setenv("SGLFORGE_STANDIN_CACHE", str(folder))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    return folder


class _Images:
    def __init__(self, build_log: list[dict[str, str]]) -> None:
        self.build_log = build_log
        self.removed: list[str] = []

    def build(self, **kwargs: Any) -> None:
        raise docker.errors.BuildError("The command returned a non-zero code: 1", self.build_log)

    def get(self, tag: str) -> None:
        raise docker.errors.ImageNotFound(tag)

    def remove(self, tag: str, force: bool = False) -> None:
        self.removed.append(tag)


class _Containers:
    def run(self, image: str, cmd: list[str], **kwargs: Any) -> None:
        err = (
            b"Traceback (most recent call last):\nModuleNotFoundError: No module named 'pybase64'\n"
        )
        raise docker.errors.ContainerError(None, 1, cmd, image, err)


class _Api:
    def import_image_from_file(self, *args: Any, **kwargs: Any) -> None:
        pass  # an engine that answers but tags nothing


class FakeEngine:
    """The Docker SDK's client, as far as the stand-in's builder reaches it: every build fails."""

    def __init__(self, build_log: list[dict[str, str]] | None = None) -> None:
        self.images = _Images(build_log or [])
        self.containers = _Containers()
        self.api = _Api()


def pip_download_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BuildError:
    with pytest.raises(BuildError) as caught:
        base.build_tool_wheels()
    return caught.value


def debootstrap_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BuildError:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "debootstrap"
    # argv: --variant --include SUITE ROOTFS MIRROR; it logs where the real one logs
    script.write_text(
        '#!/bin/sh\nlog="$4/debootstrap/debootstrap.log"\nmkdir -p "$4/debootstrap"\n'
        'echo "I: Retrieving InRelease" > "$log"\n'
        'echo "E: Failed getting release file $5/dists/$3/InRelease" >> "$log"\n'
        "exit 1\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("SGLFORGE_DEBIAN_MIRROR", "http://127.0.0.1:9/debian")
    with pytest.raises(BuildError) as caught:
        base.ensure_debian_base(FakeEngine())
    return caught.value


def docker_import_tags_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BuildError:
    tarball = base.cache_dir() / f"debian-{base.DEBIAN_SUITE}-{base._debian_hash()}.tar"
    tarball.write_bytes(b"")  # debootstrap's result, made earlier
    with pytest.raises(BuildError) as caught:
        base.ensure_debian_base(FakeEngine())
    return caught.value


def docker_build_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BuildError:
    # the build tools as an earlier download left them: one wheel each
    key = hashlib.sha256(repr(base.BUILD_TOOLS).encode()).hexdigest()[:12]
    tools = base.cache_dir() / f"build-tools-{key}"
    tools.mkdir(parents=True)
    for i in range(len(base.BUILD_TOOLS)):
        (tools / f"tool{i}-1.0-py3-none-any.whl").write_bytes(b"")
    # the released tree, small: the real one (a git checkout of the wheel) takes 15 s to make
    monkeypatch.setattr(base, "replica_tree", lambda version, dest, *a: _tree(dest))
    recipe = base._Recipe("0.5.14", b"# server\n", {}, False, None, False, "FROM scratch\n")
    log = [
        {"stream": "Step 1/9 : FROM sglforge-standin/debian:bookworm-python3\n"},
        {"stream": "Step 7/9 : RUN pip install -e python[all_hip]\n"},
        {"error": "The command '/bin/sh -c pip install' returned a non-zero code: 1"},
    ]
    engine = FakeEngine(log)
    with pytest.raises(BuildError) as caught:
        base._build_replica(engine, "sglforge-test/replica:v0.5.14", recipe, "0" * 16)
    return caught.value


def _tree(dest: Path) -> Path:
    (dest / "python" / "sglang").mkdir(parents=True)
    (dest / "python" / "sglang" / "__init__.py").write_text("")
    return dest


def bench_client_cannot_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BuildError:
    engine = FakeEngine()
    with pytest.raises(BuildError) as caught:
        base._check_bench_client(engine, "sglforge-test/replica:v0.5.14-bench")
    assert engine.images.removed == ["sglforge-test/replica:v0.5.14-bench"]
    return caught.value


def tokenizer_sdist_not_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BuildError:
    monkeypatch.setattr(index, "files", lambda project: [])  # the index's answer
    with pytest.raises(BuildError) as caught:
        base.standin_tokenizer(tmp_path / "tokenizer")
    return caught.value


def tokenizer_member_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BuildError:
    name, version = base.TOKENIZER_SDIST
    sdist = base.cache_dir() / f"sdist-{name}-{version}" / f"{name}-{version}.tar.gz"
    sdist.parent.mkdir(parents=True)
    with tarfile.open(sdist, "w:gz") as tf:  # the release, without whisper/assets/gpt2/
        info = tarfile.TarInfo(f"{name}-{version}/setup.py")
        info.size = 3
        tf.addfile(info, io.BytesIO(b"# \n"))
    with pytest.raises(BuildError) as caught:
        base.standin_tokenizer(tmp_path / "tokenizer")
    return caught.value


Case = Callable[[Path, pytest.MonkeyPatch], BuildError]
CASES: dict[str, tuple[Case, tuple[str, ...], str | None]] = {
    # case: (how it fails, what the message names, the log holding the whole output)
    "pip download": (
        pip_download_fails,
        ("pip download of setuptools", "build-tools-", "No matching distribution found"),
        "$ ",
    ),
    "debootstrap": (
        debootstrap_fails,
        (base.DEBIAN_TAG, "http://127.0.0.1:9/debian", "E: Failed getting release file"),
        "I: Retrieving InRelease",
    ),
    "docker import": (docker_import_tags_nothing, (base.DEBIAN_TAG, ".tar", base.HASH_LABEL), None),
    "docker build": (
        docker_build_fails,
        ("docker build sglforge-test/replica:v0.5.14", "returned a non-zero code: 1"),
        "Step 7/9 : RUN pip install",
    ),
    "bench client": (
        bench_client_cannot_start,
        ("sglforge-test/replica:v0.5.14-bench", "No module named 'pybase64'", "removed"),
        None,
    ),
    "sdist not listed": (tokenizer_sdist_not_listed, ("openai-whisper-20230124.tar.gz",), None),
    "sdist member": (
        tokenizer_member_missing,
        ("openai-whisper-20230124.tar.gz", "whisper/assets/gpt2/"),
        None,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_failed_standin_build_is_a_build_error_naming_what_and_what_next(
    case: str, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fails, named, logged = CASES[case]
    err = fails(tmp_path, monkeypatch)
    assert err.exit_code == EXIT_BUILD
    assert isinstance(err, BuildError) and not isinstance(err, RuntimeError)
    lines = str(err).splitlines()
    assert len(lines) == 2 and lines[1].startswith("  next: "), str(err)
    assert err.hint and err.message == lines[0]
    for text in named:
        assert text in err.message, (text, err.message)
    if logged is not None:  # the whole output is kept, and the hint names where
        log = Path(err.hint.rsplit("the whole output: ", 1)[1])
        assert log.parent == cache / "logs"
        assert logged in log.read_text()


def test_tryout_catches_the_standin_build_error_and_keeps_its_output(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the replica's build fails at its first download (pip with no index)
    monkeypatch.setattr(base, "replica_ready", lambda *a, **kw: False)
    monkeypatch.setattr(base, "ensure_sglang_base", lambda *a, **kw: base.build_tool_wheels())
    with pytest.raises(BuildError) as caught:
        tryout._base("0.5.14", False, Progress(), tmp_path)
    err = caught.value
    assert err.message.startswith("stand-in base sglforge-standin/sglang:v0.5.14-rocm700-mi35x ")
    assert "pip download of setuptools" in err.message
    assert "sglforge tryout" in (err.hint or "")
    kept = (tmp_path / "base-build.log").read_text()
    assert kept.startswith("BuildError: pip download of") and "the whole output: " in kept
