"""Validate JUnit files against the schema Jenkins' xUnit plugin uses (``junit-10.xsd``).

The schema is not copied into this repository: it is read from ``../shared/schemas/`` next
to the checkout, or from ``$SGLFORGE_JUNIT_XSD``. A missing schema fails the test with that
hint (skipping would hide a report CI tools cannot read).
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

import pytest
import xmlschema

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "schemas" / "junit-10.xsd"


@cache
def _schema() -> xmlschema.XMLSchema10:
    path = Path(os.environ.get("SGLFORGE_JUNIT_XSD") or DEFAULT)
    if not path.is_file():
        pytest.fail(f"{path}: no junit-10.xsd; set SGLFORGE_JUNIT_XSD to the xUnit plugin's copy")
    return xmlschema.XMLSchema10(str(path))


def assert_valid_junit(xml: str | Path) -> None:
    """Fail with the schema's own reason when ``xml`` (text or a file) is not valid JUnit."""
    text = Path(xml).read_text() if isinstance(xml, Path) else xml
    errors = [str(e.reason or e) for e in _schema().iter_errors(text)]
    assert not errors, "\n".join(errors)
