"""The construction's wheels are pinned by sglforge per sglang release (issue 42 F1): locked on
first use and shown, the locked wheel chosen over a newer one, other bytes refused (exit 3) and
removed from the cache, the shipped lock never overridden by the user's."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from sglforge.construct import lock, packages
from sglforge.errors import EXIT_UPSTREAM

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache of its own (the suite's links the user's wheels), and no shipped lock."""
    monkeypatch.setenv("SGLFORGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(lock, "SHIPPED", tmp_path / "shipped")
    return tmp_path / "cache"


NAME = "sglforge_lock_probe"  # on no index: nothing here may reach one


def wheel(cache: Path, version: str, body: str = "x = 1\n") -> Path:
    """A wheel in the cache, unpacked as an earlier construction left it."""
    folder = cache / "pypi" / "pypi-sglforge-lock-probe" / "wheels"
    path = folder / f"{NAME}-{version}-py3-none-any.whl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{NAME}/__init__.py", body)
        zf.writestr(f"{NAME}-{version}.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    packages._unpacked(path)
    return path


def test_locked_on_first_use_then_held(cache: Path) -> None:
    one = wheel(cache, "1.0")
    got = packages.obtain(NAME, Requirement(NAME), "9.9.9")
    assert got.name == f"{NAME}-1.0-py3-none-any" and (got / NAME / "__init__.py").is_file()
    user = json.loads((cache / "construct-lock" / "sglang-9.9.9.json").read_text())
    assert user == {"sglang": "9.9.9", "files": {one.name: lock.sha256(one)}}
    # a newer wheel in the cache is not taken: the release's lock names 1.0
    wheel(cache, "2.0")
    again = packages.obtain(NAME, Requirement(NAME), "9.9.9")
    assert again.name == f"{NAME}-1.0-py3-none-any"
    # another release has its own lock, locked on its own first use (the newest)
    other = packages.obtain(NAME, Requirement(NAME), "9.9.10")
    assert other.name == f"{NAME}-2.0-py3-none-any"


@pytest.mark.parametrize("where", ["user", "shipped"])
def test_other_bytes_are_refused_and_removed(cache: Path, where: str) -> None:
    good = wheel(cache, "1.0")
    digest = lock.sha256(good)
    if where == "shipped":
        lock.SHIPPED.mkdir()
        (lock.SHIPPED / "sglang-9.9.9.json").write_text(json.dumps({"files": {good.name: digest}}))
    else:
        lock.check("9.9.9", good)  # locked on first use
    evil = wheel(cache, "1.0", "import os; os.environ['X'] = 'pwned'\n")
    assert lock.sha256(evil) != digest
    with pytest.raises(lock.LockMismatch) as got:
        packages.obtain(NAME, Requirement(NAME), "9.9.9")
    assert got.value.exit_code == EXIT_UPSTREAM
    assert got.value.message.startswith(f"{good.name}: sha256 ")
    assert f"not the {digest[:16]}... locked for sglang 9.9.9" in got.value.message
    assert not evil.exists(), "the bad wheel stays in the cache"


def test_the_shipped_lock_wins_over_the_users(cache: Path) -> None:
    good = wheel(cache, "1.0")
    lock.SHIPPED.mkdir()
    (lock.SHIPPED / "sglang-9.9.9.json").write_text(
        json.dumps({"files": {good.name: lock.sha256(good)}})
    )
    planted = cache / "construct-lock" / "sglang-9.9.9.json"
    planted.parent.mkdir(parents=True)
    planted.write_text(json.dumps({"files": {good.name: "0" * 64}}))
    assert lock.locked("9.9.9")[good.name] == lock.sha256(good)
    lock.check("9.9.9", good)  # no error: the shipped entry decides


def test_the_shipped_locks_name_each_release_the_suite_constructs() -> None:
    for release, transformers in (("0.5.14", "5.8.1"), ("0.5.16", "5.12.1"), ("0.5.23", "5.19.0")):
        files = json.loads(
            (REPO / "src/sglforge/data/construct-lock" / f"sglang-{release}.json").read_text()
        )["files"]
        assert f"transformers-{transformers}-py3-none-any.whl" in files
        assert all(len(sha) == 64 for sha in files.values())
