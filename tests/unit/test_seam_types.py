"""Values that cross modules are typed: the base's aiter tables cross from the probe container
as one frozen ``AiterTables`` (``overlay_configs.base_aiter`` reads its fields), and the
manifest a build writes is a ``Manifest`` whose declared keys are the ones written."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from sglforge.bases import AiterTables, aiter_tables_from
from sglforge.engine.errors import BuildFailed
from sglforge.provenance import (
    Base,
    ImageFacts,
    Manifest,
    ManifestBase,
    ManifestUpstream,
    UpstreamFacts,
    make_manifest,
    manifest_shape_ok,
)
from sglforge.targets import load_targets

REPO_ROOT = Path(__file__).resolve().parents[2]

PROBED = {
    "root": "/opt/venv/lib/python3.10/site-packages",
    "configs_dir": "/opt/venv/lib/python3.10/site-packages/aiter/configs",
    "tuned_fmoe": "token,model_dim\n1,7168\n",
    "untuned_fmoe_header": "token,model_dim",
    "model_configs": {"a_tuned_fmoe.csv": "token,model_dim\n2,7168\n"},
}


def test_the_probe_output_becomes_frozen_tables() -> None:
    tables = aiter_tables_from("base:1", PROBED)
    assert tables == AiterTables(
        root=PROBED["root"],
        configs_dir=PROBED["configs_dir"],
        tuned_fmoe="token,model_dim\n1,7168\n",
        untuned_fmoe_header="token,model_dim",
        model_configs={"a_tuned_fmoe.csv": "token,model_dim\n2,7168\n"},
    )
    with pytest.raises(AttributeError):
        tables.root = "/elsewhere"  # type: ignore[misc]


@pytest.mark.parametrize("data", [{"root": None}, {}, None, []])
def test_no_aiter_is_none(data: object) -> None:
    assert aiter_tables_from("base:1", data) is None


def test_no_tuned_table_is_kept_as_none() -> None:
    tables = aiter_tables_from("base:1", {**PROBED, "tuned_fmoe": None, "model_configs": None})
    assert tables is not None and tables.tuned_fmoe is None and tables.model_configs == {}


def test_an_unreadable_merged_file_names_the_file_and_the_image() -> None:
    data = {**PROBED, "model_configs": {"b_tuned_fmoe.csv": None}}
    with pytest.raises(BuildFailed) as err:
        aiter_tables_from("base:1", data)
    assert "base:1" in str(err.value) and "model_configs/b_tuned_fmoe.csv" in str(err.value)


def _facts(base: Base | None, wheel: str) -> ImageFacts:
    up = UpstreamFacts(
        url="https://github.com/sgl-project/sglang",
        source="pypi:sglang" if wheel else "https://github.com/sgl-project/sglang",
        ref="v0.5.14",
        commit="a" * 40,
        revision="v0.5.14",
        wheel=wheel,
        wheel_sha256="c" * 64 if wheel else "",
    )
    return ImageFacts(
        version="0.5.14",
        target=load_targets(REPO_ROOT).resolve("mi355x"),
        mode="overlay" if base else "source",
        base=base,
        upstream=up,
        queue_hash="0" * 64,
        patches=(),
    )


def _keys(td: type) -> tuple[frozenset[str], frozenset[str]]:
    """(required keys, declared keys); read from the hints, as ``from __future__ import
    annotations`` hides ``NotRequired`` from ``__required_keys__`` before Python 3.12."""
    hints = typing.get_type_hints(td, include_extras=True)
    optional = {k for k, h in hints.items() if typing.get_origin(h) is typing.NotRequired}
    return frozenset(hints) - optional, frozenset(hints)


@pytest.mark.parametrize(
    ("base", "wheel"),
    [
        (None, ""),
        (Base("rocm/sgl-dev:x", digest="sha256:" + "d" * 64), "sglang-0.5.14-py3-none-any.whl"),
        (Base("rocm/sgl-dev:x", id="sha256:" + "e" * 64, entrypoint=("/bin/sh",)), ""),
    ],
)
def test_the_manifest_written_has_the_declared_keys(base: Base | None, wheel: str) -> None:
    manifest = make_manifest(_facts(base, wheel), image="acme/sglang:x", files=(), deleted=())
    for value, td in [
        (manifest, Manifest),
        (manifest["upstream"], ManifestUpstream),
        *([(manifest["base"], ManifestBase)] if manifest["base"] else []),
    ]:
        required, declared = _keys(td)
        assert required <= set(value) <= declared, (td.__name__, set(value))
    assert manifest_shape_ok(manifest)
