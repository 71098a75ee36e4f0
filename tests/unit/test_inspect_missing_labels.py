"""D33 (issue 31): an image carrying some of sglforge's labels but not all is not reported as
having none: ``inspect`` names exactly the required labels it lacks; an image with none of
them (``io.sglforge.managed`` alone is the engine's mark on everything it creates) is "not
built by sglforge"."""

from __future__ import annotations

import pytest

from sglforge.cli.inspect import prov_json, render_provenance
from sglforge.provenance import (
    LABEL_MANAGED,
    LABEL_MODE,
    LABEL_PATCHES,
    LABEL_QUEUE,
    LABEL_TARGET,
    REQUIRED_LABELS,
    provenance_from,
)

FULL = {LABEL_QUEUE: "a" * 64, LABEL_PATCHES: "0001-x.patch", LABEL_TARGET: "mi355x"}
MANIFEST = {"schema": "sglforge.manifest/1", "image": "i", "target": "mi355x",
            "queue": {"hash": "a" * 64, "patches": []}}  # fmt: skip


@pytest.mark.parametrize(
    "missing",
    [
        (LABEL_QUEUE,),  # the red team's image: target and patches, no queue-hash
        (LABEL_PATCHES,),
        (LABEL_TARGET,),
        (LABEL_QUEUE, LABEL_PATCHES),
        (LABEL_QUEUE, LABEL_TARGET),
        (LABEL_PATCHES, LABEL_TARGET),
    ],
)
def test_the_missing_labels_are_named(missing: tuple[str, ...]) -> None:
    labels = {k: v for k, v in FULL.items() if k not in missing}
    labels["io.sglforge.queue"] = "x"  # an unknown label of ours counts for nothing
    prov = provenance_from("rt-hostile:nohash", labels, None)
    assert prov.is_sglforge_image and prov.missing_labels == missing
    text = render_provenance(prov)
    assert "no io.sglforge.* labels" not in text and "not built by sglforge" not in text
    first = text.splitlines()[0]
    assert first.startswith(f"labels    INCOMPLETE: missing {', '.join(missing)} ")
    for present in set(REQUIRED_LABELS) - set(missing):
        assert present not in first
    assert prov_json(prov)["missing_labels"] == list(missing)


def test_a_manifest_does_not_hide_missing_labels() -> None:
    prov = provenance_from("img", {LABEL_TARGET: "mi355x"}, MANIFEST)
    assert prov.queue_hash == "a" * 64  # the manifest says it
    assert prov.missing_labels == (LABEL_QUEUE, LABEL_PATCHES)
    assert "INCOMPLETE: missing io.sglforge.queue-hash, io.sglforge.patches" in (
        render_provenance(prov)
    )


def test_complete_and_foreign_images() -> None:
    full = provenance_from("img", {**FULL, LABEL_MODE: "overlay"}, None)
    assert full.missing_labels == () and "INCOMPLETE" not in render_provenance(full)
    for foreign in ({}, {LABEL_MANAGED: "1"}, {LABEL_MANAGED: "1", "io.sglforge.test": "1"}):
        prov = provenance_from("debian", foreign, None)
        assert not prov.is_sglforge_image
        text = render_provenance(prov)
        assert text.startswith("debian: not built by sglforge (none of the labels")
        assert LABEL_QUEUE in text and "/opt/sglforge/manifest.json" in text
    # one label of the image contract is enough to be held to all of them
    mode_only = provenance_from("img", {LABEL_MODE: "overlay"}, None)
    assert mode_only.is_sglforge_image and mode_only.missing_labels == REQUIRED_LABELS


@pytest.mark.parametrize(
    "labels",
    [
        {LABEL_TARGET: "mi355x", LABEL_PATCHES: "2", "io.sglforge.queue": "x"},  # REDTEAM-5
        {LABEL_QUEUE: "a" * 64},
        {LABEL_PATCHES: "0001-x.patch"},
    ],
)
def test_an_incomplete_image_shows_no_empty_fields(labels: dict[str, str]) -> None:
    """F19 (issue 42): a field whose label is missing reads ``?``, not ``( = ) from``."""
    text = render_provenance(provenance_from("rt5-hostile:nohash", labels, None))
    for empty in ("( = )", "(, )", "  build", "queue     (", "from \n", "sglang  "):
        assert empty not in text, (empty, text)
    assert "from ?" in text and "? build" in text
