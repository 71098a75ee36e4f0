"""What a scan reports: one finding per blocker seen, with where it is and what to do."""

from __future__ import annotations

from dataclasses import dataclass

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
        """How a ``Fixes-Scan:`` trailer names this finding: ``kind:file:line`` or
        ``kind:entry``."""
        if self.line is not None:
            return f"{self.kind}:{self.file}:{self.line}"
        return f"{self.kind}:{self.entry}"
