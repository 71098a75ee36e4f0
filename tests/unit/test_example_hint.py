"""A shipped scenario published without the example queue it needs is told where that queue
is (issue 45, U10): the scan gate's hint names `sglforge init --example glm52` when the project's
queue lacks any of that example's patches, and says nothing for any other scenario."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglforge.init import EXAMPLE_SCENARIOS, example_for

REPO = Path(__file__).resolve().parents[2]
QUEUE = {p.name for p in (REPO / "patches").glob("*.patch")}


@pytest.mark.parametrize(
    ("scenario", "queue", "example"),
    [
        ("glm5-mxfp4-mtp-mi355x", set(), "glm52"),  # a plain init
        ("glm5-mxfp4-mtp-mi355x", {sorted(QUEUE)[0], "0003-mine.patch"}, "glm52"),  # part of it
        ("glm5-mxfp4-mtp-mi355x", QUEUE | {"0003-mine.patch"}, None),  # the example's, and more
        ("standin-cpu", set(), None),
        ("my-model", set(), None),
    ],
)
def test_the_example_a_scenario_needs(scenario: str, queue: set[str], example: str | None) -> None:
    assert len(QUEUE) >= 2 and set(EXAMPLE_SCENARIOS) == {"glm52"}
    assert example_for(scenario, queue) == example
