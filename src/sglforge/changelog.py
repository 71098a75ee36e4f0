"""Edits to CHANGELOG.md (Keep a Changelog): notes under "Unreleased", and releases.

A release entry is ``## [<fork version>] - <date>`` with free lines (the images, the pin)
and only Keep a Changelog's sections; releasing moves the Unreleased items into it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

UNRELEASED_RE = re.compile(r"^## \[Unreleased\][^\n]*\n", re.M)


def _with_unreleased(text: str) -> str:
    """``text`` with an (empty) Unreleased section above the releases if it had none."""
    if UNRELEASED_RE.search(text):
        return text
    head = "# Changelog\n\n" if not text.startswith("# ") else ""
    first = re.search(r"^## ", text, re.M)
    pos = first.start() if first else len(text)
    before = text[:pos].rstrip("\n") + ("\n\n" if text[:pos].strip() else "")
    return head + before + "## [Unreleased]\n\n" + text[pos:]


def add_unreleased(text: str, section: str, items: list[str]) -> str:
    """Return ``text`` with ``items`` added under ``### section`` of "Unreleased" (no dupes)."""
    if not items:
        return text
    text = _with_unreleased(text)
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


# --- release entries ------------------------------------------------------------------------

# Keep a Changelog's sections, in its order; an entry holds no others.
SECTIONS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")
_RELEASE_RE = re.compile(r"^## \[(?P<version>[^\]]+)\][^\n]*\n", re.M)


@dataclass(frozen=True)
class Entry:
    """A release entry's parts: free lines under the heading, then items per section."""

    lines: tuple[str, ...] = ()
    sections: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def parse_entry(body: str) -> Entry:
    """The parts of an entry's body (what follows its ``## [...]`` heading).

    An item is a ``- `` line with the indented lines that continue it; text under a section
    Keep a Changelog does not name is kept as items of ``Changed``.
    """
    lines: list[str] = []
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for raw in body.splitlines():
        head = re.match(r"^### (.+?)\s*$", raw)
        if head:
            name = head.group(1).strip().capitalize()
            current = name if name in SECTIONS else "Changed"
            sections.setdefault(current, [])
        elif current is None:
            if raw.strip():
                lines.append(raw)
        elif raw.startswith("- "):
            sections[current].append(raw)
        elif raw.strip() and sections[current]:
            sections[current][-1] += "\n" + raw
        elif raw.strip():
            sections[current].append("- " + raw.strip())
    return Entry(tuple(lines), {k: tuple(v) for k, v in sections.items() if v})


def render_entry(heading: str, entry: Entry) -> str:
    """``heading`` and the entry's parts, sections in Keep a Changelog's order."""
    out = [heading, ""]
    for line in entry.lines:
        out += [line, ""]
    for name in SECTIONS:
        items = entry.sections.get(name, ())
        if items:
            out += [f"### {name}", "", *items, ""]
    return "\n".join(out) + "\n"


def merge(
    old: Entry, new: Entry, key: Callable[[str], str], better: Callable[[str, str], bool]
) -> Entry:
    """``old`` with ``new``'s lines and items added (no duplicates).

    A new line with the ``key`` of an old one replaces it only when ``better(old, new)``.
    """
    lines = list(old.lines)
    for line in new.lines:
        at = next((i for i, o in enumerate(lines) if key(o) == key(line)), None)
        if at is None:
            lines.append(line)
        elif better(lines[at], line):
            lines[at] = line
    sections = {k: list(v) for k, v in old.sections.items()}
    for name, items in new.sections.items():
        have = sections.setdefault(name, [])
        have += [i for i in items if i not in have]
    return Entry(tuple(lines), {k: tuple(v) for k, v in sections.items()})


def release(
    text: str,
    version: str,
    date: str,
    entry: Entry,
    key: Callable[[str], str] = str,
    better: Callable[[str, str], bool] = lambda _old, _new: False,
) -> str:
    """``text`` with ``entry`` released as ``## [version] - date``.

    The items under Unreleased move into the release (Unreleased stays, empty). An entry for
    ``version`` that exists already (another target of the same fork release) gets the new
    lines and items merged in, keeping its date; a new one goes above the newest release.
    """
    text = _with_unreleased(text)
    m = UNRELEASED_RE.search(text)
    assert m is not None
    nxt = _RELEASE_RE.search(text, m.end())
    end = nxt.start() if nxt else len(text)
    unreleased = parse_entry(text[m.end() : end])
    # What Unreleased says about the whole project (its preamble) stays; its items move.
    kept = "".join(f"{line}\n\n" for line in unreleased.lines)
    text = text[: m.end()] + "\n" + kept + text[end:]
    entry = merge(entry, Entry((), unreleased.sections), key, better)
    for found in _RELEASE_RE.finditer(text):
        if found.group("version") == version:
            after = _RELEASE_RE.search(text, found.end())
            stop = after.start() if after else len(text)
            merged = merge(parse_entry(text[found.end() : stop]), entry, key, better)
            heading = found.group(0).rstrip("\n")
            rest = text[stop:]
            return (
                text[: found.start()]
                + render_entry(heading, merged)
                + ("\n" + rest if rest else "")
            )
    m = UNRELEASED_RE.search(text)
    assert m is not None
    nxt = _RELEASE_RE.search(text, m.end())
    at = nxt.start() if nxt else len(text)
    before = text[:at].rstrip("\n") + "\n\n"
    new = render_entry(f"## [{version}] - {date}", entry)
    return before + new + ("\n" + text[at:] if text[at:] else "")
