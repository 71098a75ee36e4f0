"""Edits to CHANGELOG.md (Keep a Changelog): notes under the "Unreleased" section."""

from __future__ import annotations

import re

UNRELEASED_RE = re.compile(r"^## \[Unreleased\][^\n]*\n", re.M)


def add_unreleased(text: str, section: str, items: list[str]) -> str:
    """Return ``text`` with ``items`` added under ``### section`` of "Unreleased" (no dupes)."""
    if not items:
        return text
    m = UNRELEASED_RE.search(text)
    if not m:
        head = "# Changelog\n\n" if not text.startswith("# ") else ""
        first = re.search(r"^## ", text, re.M)
        pos = first.start() if first else len(text)
        block = "## [Unreleased]\n\n"
        text = (
            head
            + text[:pos].rstrip("\n")
            + ("\n\n" if text[:pos].strip() else "")
            + block
            + text[pos:]
        )
        m = UNRELEASED_RE.search(text)
        assert m
    start = m.end()
    nxt = re.search(r"^## ", text[start:], re.M)
    end = start + nxt.start() if nxt else len(text)
    body = text[start:end]
    sec = re.search(rf"^### {re.escape(section)}\s*\n", body, re.M)
    new_items = [f"- {i}" for i in items if f"- {i}" not in body]
    if not new_items:
        return text
    if sec:
        after = body[sec.end() :]
        stop = re.search(r"^(### |## )", after, re.M)
        insert_at = sec.end() + (stop.start() if stop else len(after))
        chunk = body[:insert_at].rstrip("\n") + "\n" + "\n".join(new_items) + "\n"
        rest = body[insert_at:]
        body = chunk + ("\n" + rest.lstrip("\n") if rest.strip() else "\n")
    else:
        body = body.rstrip("\n") + ("\n\n" if body.strip() else "\n") + f"### {section}\n"
        body += "\n".join(new_items) + "\n\n"
    return text[:start] + body + text[end:].lstrip("\n") if text[end:] else text[:start] + body
