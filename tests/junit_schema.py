"""Validate JUnit files against the schema Jenkins' xUnit plugin uses (``junit-10.xsd``).

The schema is not copied into this repository: it is read from ``$SGLFORGE_JUNIT_XSD``, else
the team's shared folder (``../shared/schemas/`` next to the checkout, or
``/work/shared/schemas/``). A missing schema fails the test with that
hint (skipping would hide a report CI tools cannot read).
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

import pytest
import xmlschema

# Where the team's shared folder keeps it: beside this checkout, or at the workplace's root
# (CI clones the project elsewhere on the same machine).
CANDIDATES = (
    Path(__file__).resolve().parents[2] / "shared" / "schemas" / "junit-10.xsd",
    Path("/work/shared/schemas/junit-10.xsd"),
)


@cache
def _schema() -> xmlschema.XMLSchema10:
    given = os.environ.get("SGLFORGE_JUNIT_XSD")
    paths = [Path(given)] if given else list(CANDIDATES)
    for path in paths:
        if path.is_file():
            return xmlschema.XMLSchema10(str(path))
    pytest.fail(
        f"no junit-10.xsd at {', '.join(map(str, paths))}; "
        "set SGLFORGE_JUNIT_XSD to the xUnit plugin's copy"
    )


def assert_valid_junit(xml: str | Path) -> None:
    """Fail with the schema's own reason when ``xml`` (text or a file) is not valid JUnit."""
    text = Path(xml).read_text() if isinstance(xml, Path) else xml
    errors = [str(e.reason or e) for e in _schema().iter_errors(text)]
    assert not errors, "\n".join(errors)
