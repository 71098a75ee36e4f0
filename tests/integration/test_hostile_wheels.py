"""Hostile wheels (issue 42, F8-F10): an encrypted member, a compression method pip cannot
read, a ``.git`` folder in any spelling git refuses, and a zip bomb spread over small members
are each refused with exit 3 naming the wheel, and the wheel is removed from the cache (it
failed the same way on every later run). Real wheels imported into a real store."""

from __future__ import annotations

import stat
import struct
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version
from test_pypi_history import PROJECT

from sglforge import pypi
from sglforge.errors import EXIT_UPSTREAM, UpstreamError

REG = stat.S_IFREG | 0o644


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    members = {f"{PROJECT}/__init__.py": b"ok = 1\n", **members}
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = REG << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
        zf.writestr(f"{PROJECT}-9.0.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    (path.parent / f"{path.name}.sha256").write_text(f"{'0' * 64}  {path.name}\n")
    return path


def _central(path: Path, name: str, *, flags: int | None = None, method: int | None = None) -> None:
    """Rewrite ``name``'s central-directory entry (what zipfile and pip read first)."""
    raw = bytearray(path.read_bytes())
    at = raw.index(b"PK\x01\x02")
    while True:
        n_len = struct.unpack_from("<H", raw, at + 28)[0]
        if raw[at + 46 : at + 46 + n_len] == name.encode():
            break
        extra, comment = struct.unpack_from("<HH", raw, at + 30)
        at = raw.index(b"PK\x01\x02", at + 46 + n_len + extra + comment)
    if flags is not None:
        struct.pack_into("<H", raw, at + 8, struct.unpack_from("<H", raw, at + 8)[0] | flags)
    if method is not None:
        struct.pack_into("<H", raw, at + 10, method)
    path.write_bytes(bytes(raw))


VICTIM = f"{PROJECT}/victim.py"
CASES = {
    # REDTEAM-5 F8: 9.0.26 encrypted, 9.0.27 AES (99), 9.0.28 deflate64 (9)
    "encrypted": ({VICTIM: b"x = 1\n"}, {"flags": 0x1}, "is encrypted"),
    "aes": ({VICTIM: b"x = 1\n"}, {"method": 99}, "compression method 99"),
    "deflate64": ({VICTIM: b"x = 1\n"}, {"method": 9}, "compression method 9"),
    # F9: each spelling git's verify_path refuses
    "dot-GIT": ({f"{PROJECT}/.GIT/config": b"[core]\n"}, {}, ".git folder"),
    "dot-Git-hook": ({f"{PROJECT}/.Git/hooks/post-checkout": b"#!/bin/sh\n"}, {}, ".git folder"),
    "git~1": ({f"{PROJECT}/git~1/config": b"[core]\n"}, {}, ".git folder"),
    "trailing-dot": ({f"{PROJECT}/sub/.git./config": b"[core]\n"}, {}, ".git folder"),
    "trailing-space": ({f"{PROJECT}/.git /config": b"[core]\n"}, {}, ".git folder"),
    "ntfs-stream": ({f"{PROJECT}/.git::$INDEX_ALLOCATION/config": b"x"}, {}, ".git folder"),
    "hfs-ignorable": ({f"{PROJECT}/.g\u200cit/config": b"[core]\n"}, {}, ".git folder"),
    "plain": ({f"{PROJECT}/.git/config": b"[core]\n"}, {}, ".git folder"),
    # F10: 2048 x 1 MiB would be 2 GiB; 40 x 1 MiB of zeros is the same shape, past the
    # 16 MiB floor of the package's ratio bound (each member alone passes the 200:1 one)
    "spread-bomb": (
        {f"{PROJECT}/bomb/b{i:04d}.py": b"# %d\n" % i + b"\0" * (1 << 20) for i in range(40)},
        {},
        "a zip bomb",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_a_hostile_wheel_is_refused_named_and_removed(tmp_path: Path, case: str) -> None:
    members, patch, said = CASES[case]
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = _wheel(wheels / f"{PROJECT}-9.0.0-py3-none-any.whl", members)
    if patch:
        _central(wheel, VICTIM, **patch)
    store = tmp_path / "store.git"
    pypi._init(store)
    with pytest.raises(UpstreamError) as err:
        pypi._import_release(store, Version("9.0.0"), wheel, PROJECT)
    message = str(err.value)
    assert err.value.exit_code == EXIT_UPSTREAM == 3
    assert wheel.name in message and said in message and "removed from the cache" in message
    assert list(wheels.iterdir()) == []  # the wheel and its checksum file
    assert pypi.tagged_versions(store) == []


def test_a_name_git_accepts_is_kept() -> None:
    for part in (".gitignore", ".github", "git", "gitx", ".git-blame", "git~2", "a.git"):
        assert not pypi.is_dotgit(part), part


@pytest.mark.parametrize("case", ["encrypted", "deflate64", "dot-GIT", "git~1", "spread-bomb"])
def test_the_constructions_packages_refuse_the_same_wheels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """A package the construction unpacks whole (transformers and its closure) is checked
    the same way before a byte is written, and removed from the cache."""
    from sglforge.construct import packages

    monkeypatch.setenv("SGLFORGE_CACHE", str(tmp_path / "cache"))
    members, patch, said = CASES[case]
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = _wheel(wheels / f"{PROJECT}-9.0.0-py3-none-any.whl", members)
    if patch:
        _central(wheel, VICTIM, **patch)
    with pytest.raises(UpstreamError) as err:
        packages._unpacked(wheel)
    assert wheel.name in str(err.value) and said in str(err.value)
    assert list(wheels.iterdir()) == []
    site = tmp_path / "cache" / "pypi" / "construct-site"
    assert not site.exists() or list(site.iterdir()) == []


@pytest.mark.parametrize(
    ("size", "hostile"),
    [
        (2_100_545, False),  # pillow 13.0.0's libXau: 2.1 MB from 9.4 KB in the real wheel
        (8 << 20, False),  # a sparse object under the floor
        ((32 << 20) + 1, True),  # past the floor at ~1000:1
        (257 << 20, True),  # past the size bound whatever its ratio
    ],
)
def test_one_members_ratio_counts_only_past_its_floor(size: int, hostile: bool) -> None:
    import zipfile

    from sglforge import pypi

    info = zipfile.ZipInfo("pkg/libs/libx.so.6")
    info.file_size, info.compress_size = size, max(size // 1000, 1)
    info.compress_type = zipfile.ZIP_DEFLATED
    if hostile:
        with pytest.raises(pypi._Hostile, match="zip bomb"):
            pypi._check_member(info, ["pkg", "libs", "libx.so.6"])
    else:
        pypi._check_member(info, ["pkg", "libs", "libx.so.6"])
