"""What a scan reports: one finding per blocker seen, with where it is and what to do."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sglforge.provenance import FIXES_SCAN

FAIL = "fail"
WARN = "warn"


@dataclass(frozen=True)
class Finding:
    """One static finding: ``file``/``line`` for source findings, ``entry`` for config ones.

    ``file`` is relative to the scanned tree (``python/sglang/...``) or names the model's
    ``config.json``; ``entry`` is what the finding is about (a kernel source sglang loads, an
    exclude entry); ``detail`` says what is wrong and ``hint`` what to do next.
    """

    kind: str
    severity: str  # FAIL or WARN
    file: str
    line: int | None
    entry: str
    detail: str
    hint: str = ""

    @property
    def key(self) -> str:
        """How a ``Fixes-Scan:`` trailer names this finding: ``KIND FILE`` for a source
        finding (no line: lines move between releases), ``KIND ENTRY`` otherwise."""
        return f"{self.kind} {self.file if self.line is not None else self.entry}"


def waived(findings: Sequence[Finding], trailers: Iterable[tuple[str, str]]) -> set[str]:
    """The keys of ``findings`` that a queue patch's ``Fixes-Scan: KIND WHERE`` trailer names
    (``trailers``: every patch's (key, value) pairs)."""
    named = {" ".join(v.split()) for k, v in trailers if k.lower() == FIXES_SCAN.lower()}
    return {f.key for f in findings if f.key in named}


def blocking(findings: Sequence[Finding], trailers: Iterable[tuple[str, str]]) -> list[Finding]:
    """The fails that block ``upgrade``/``publish``: every fail no Fixes-Scan trailer names."""
    ok = waived(findings, list(trailers))
    return [f for f in findings if f.severity == FAIL and f.key not in ok]
