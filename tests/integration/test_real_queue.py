"""The real queue in patches/ against every sglang release from 0.5.10 to 0.5.23 (PyPI wheels).

The queue is copied into a temporary root (the wheels come from the shared user cache, see
sglang_release.py), so nothing in this checkout's patches/ or build/worktrees changes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from packaging.version import Version

from pipelines import open_project
from sglang_release import REPO_ROOT, adopt_checkout_wheels
from sglforge.patches.apply import apply_queue
from sglforge.patches.check import check_refs
from sglforge.patches.lint import lint_queue
from sglforge.queue.series import load_pin, load_queue

pytestmark = pytest.mark.pypi

UPSTREAM = "pypi:sglang>=0.5.10,<=0.5.23"
P1 = "0001-jit_kernel-guard-cuda_runtime-include-for-ROCm.patch"
P2 = "0002-glm_moe_dsa-MTP-draft-class-for-Quark-excludes.patch"
HEADER = "elementwise/fused_metadata_copy.cuh"

# release -> (patch 0001, patch 0002). 0001 is fixed upstream in 0.5.15 (same change), its
# header moved to python/sglang/kernels/jit/ in 0.5.17; 0002 is fixed upstream in 0.5.16
# (the same change: 0002 backports it) and is not meant for 0.5.10/0.5.11 (their draft routing
# and is_deepseek_dsa differ from the code the backport was written against).
EXPECTED = {
    "v0.5.10": ("clean", "skipped"),
    "v0.5.10.post1": ("clean", "skipped"),
    "v0.5.11": ("clean", "skipped"),
    "v0.5.12": ("clean", "offset"),
    "v0.5.12.post1": ("clean", "offset"),
    "v0.5.13": ("clean", "offset"),
    "v0.5.13.post1": ("clean", "offset"),
    "v0.5.14": ("clean", "clean"),
    "v0.5.15": ("upstreamed", "offset"),
    "v0.5.15.post1": ("upstreamed", "offset"),
    "v0.5.16": ("upstreamed", "upstreamed"),
    "v0.5.17": ("upstreamed", "upstreamed"),
    "v0.5.18": ("upstreamed", "upstreamed"),
    "v0.5.19": ("upstreamed", "upstreamed"),
    "v0.5.20": ("upstreamed", "upstreamed"),
    "v0.5.21": ("upstreamed", "upstreamed"),
    "v0.5.22": ("upstreamed", "upstreamed"),
    "v0.5.23": ("upstreamed", "upstreamed"),
}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("queue")
    shutil.copytree(REPO_ROOT / "patches", root / "patches")
    adopt_checkout_wheels()
    return root


def test_lint_is_clean(root: Path) -> None:
    assert lint_queue(root) == []


def test_queue_metadata(root: Path) -> None:
    q = load_queue(root)
    assert (q.pin.url, q.pin.ref) == ("https://github.com/sgl-project/sglang", "v0.5.14")
    assert [p.name for p in q.patches] == [P1, P2]
    assert [p.kind for p in q.patches] == ["jit-kernel", "python"]
    assert [(p.applies_to, p.fixed_in) for p in q.patches] == [
        (">=0.5.10,<0.5.15", "0.5.15"),
        (">=0.5.12,<0.5.16", "0.5.16"),
    ]
    assert [p.upstream_status for p in q.patches] == ["Backport [0.5.15]", "Backport [0.5.16]"]


def test_both_patches_apply_clean_at_the_pin(root: Path) -> None:
    recorded = load_pin(root).sources.get("pypi:sglang", {}).get("tree")
    applied = apply_queue(open_project(root, UPSTREAM))
    assert applied.ref == "v0.5.14" and applied.version == "0.5.14"
    assert [(p.name, p.status) for p in applied.patches] == [(P1, "clean"), (P2, "clean")]
    assert set(applied.changed_files) == {
        "python/sglang/jit_kernel/csrc/elementwise/fused_metadata_copy.cuh",
        "python/sglang/srt/configs/model_config.py",
        "python/sglang/srt/models/deepseek_nextn.py",
        "python/sglang/srt/models/glm4_moe.py",
    }
    # The wheel-built v0.5.14 has the content the committed pin records (same on any machine).
    assert recorded and load_pin(root).sources["pypi:sglang"]["tree"] == recorded


def test_sweep_over_every_release(root: Path) -> None:
    report = check_refs(open_project(root, UPSTREAM), [], tags=">=0.5.10,<=0.5.23")
    assert report.python_only
    table = {r.ref: tuple(p.status for p in r.patches) for r in report.refs}
    assert table == EXPECTED
    assert report.ok  # no conflict anywhere
    detail = {(r.ref, p.name): p.detail for r in report.refs for p in r.patches}
    for ref in ("v0.5.15", "v0.5.15.post1", "v0.5.16"):
        assert "reverse-applies" in detail[ref, P1]
    for ref in [r for r in EXPECTED if Version(r[1:]) >= Version("0.5.17")]:
        assert "moved" in detail[ref, P1]
        assert f"python/sglang/kernels/jit/csrc/{HEADER}" in detail[ref, P1]
        assert "Upstream-Fixed-In 0.5.16" in detail[ref, P2]
    for ref in ("v0.5.10", "v0.5.10.post1", "v0.5.11"):
        assert "Applies-To" in detail[ref, P2]
