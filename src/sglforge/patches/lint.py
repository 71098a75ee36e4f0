"""Static checks of the queue: series vs files, metadata, and the diffs themselves."""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from sglforge.errors import ConfigError
from sglforge.queue.series import (
    GIT_LINE,
    LINE_BREAKS,
    NEEDS_DETAIL,
    STATUSES,
    TRAILERS,
    Patch,
    SeriesEntry,
    line_heads,
    parse_patch,
    read_series,
    scan_text,
    trailer_problem,
)
from sglforge.transactions import recover_transactions

PATCH_SUFFIXES = (".patch", ".diff")


@dataclass(frozen=True)
class Finding:
    file: str  # relative to the project root
    line: int
    code: str
    message: str
    severity: str = "error"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.code}: {self.message}"


def lint_queue(
    root: Path, aiter_configs: Path | None = None, aiter_repo: Path | None = None
) -> list[Finding]:
    """Every problem found in ``root/patches``, in file and line order.

    ``aiter_configs`` (a copy of the base's ``aiter/configs`` folder) also checks config items
    against the base's own table: its columns and its keys. Every item's CSV is checked against
    the sha256 of the upstream file it names; ``aiter_repo`` (an aiter clone) also against that
    commit's own file.
    """
    recover_transactions(root / "patches")
    series_rel = "patches/series"
    try:
        entries = read_series(root)
    except ConfigError as exc:
        if exc.line is not None:
            return [Finding(exc.file or series_rel, exc.line, "bad-series", exc.reason)]
        return [Finding(series_rel, 0, "bad-series", exc.message)]
    findings, seen = _series_findings(root, entries)
    pin_version = _pin_version(root)
    changes = _Changes()
    for i, e in enumerate(entries, 1):
        path = root / "patches" / e.name
        if not path.is_file() or seen.get(e.name) != e.line:
            continue
        patch = parse_patch(path, i)
        rel = f"patches/{e.name}"
        findings.extend(lint_patch(patch, rel))
        findings.extend(_placement_findings(patch, rel, e.line, seen, pin_version))
        first = changes.same_as(patch)
        if first:
            findings.append(Finding(rel, 1, "duplicate-change", f"same change as {first}"))
    findings.extend(_config_findings(root, aiter_configs, aiter_repo))
    return sorted(findings, key=lambda f: (f.file, f.line, f.code))


def _series_findings(
    root: Path, entries: tuple[SeriesEntry, ...]
) -> tuple[list[Finding], dict[str, int]]:
    """The series against the folder: duplicate, missing and orphan patches; and each listed
    name's first line."""
    pdir = root / "patches"
    series_rel = "patches/series"
    findings: list[Finding] = []
    if not (pdir / "series").exists():
        findings.append(Finding(series_rel, 0, "series-missing", "patches/series does not exist"))
    seen: dict[str, int] = {}
    for e in entries:
        if e.name in seen:
            findings.append(
                Finding(
                    series_rel,
                    e.line,
                    "duplicate-entry",
                    f"{e.name} is listed twice (first on line {seen[e.name]})",
                )
            )
            continue
        seen[e.name] = e.line
        if not (pdir / e.name).is_file():
            findings.append(
                Finding(series_rel, e.line, "missing-patch", f"{e.name} is listed but not there")
            )
    for f in sorted(pdir.iterdir()) if pdir.is_dir() else []:
        if f.is_file() and f.name.endswith(PATCH_SUFFIXES) and f.name not in seen:
            findings.append(
                Finding(
                    f"patches/{f.name}",
                    0,
                    "orphan-patch",
                    "patch file is not listed in patches/series",
                )
            )
    return findings, seen


def _placement_findings(
    patch: Patch, rel: str, line: int, seen: dict[str, int], pin_version: Version | None
) -> list[Finding]:
    """Where the patch sits in the queue: excluded at the pin, or depending on a patch that is
    missing or comes later."""
    out: list[Finding] = []
    if pin_version is not None and patch.applies_at(pin_version) is False:
        out.append(
            Finding(
                rel,
                1,
                "excluded-at-pin",
                f"Applies-To {patch.applies_to} excludes the pinned {pin_version}: the "
                "patch is never applied (retire it, or fix Applies-To)",
                "warning",
            )
        )
    for dep in patch.depends_on:
        if dep not in seen:
            code, why = "unknown-dependency", "which is not in patches/series"
        elif seen[dep] > line:
            code, why = "dependency-order", "which comes later in patches/series"
        else:
            continue
        out.append(
            Finding(rel, _line_of(patch, r"^Depends-On:"), code, f"Depends-On names {dep}, {why}")
        )
    return out


def _config_findings(
    root: Path, aiter_configs: Path | None, aiter_repo: Path | None = None
) -> list[Finding]:
    from sglforge.queue import configs

    try:
        items = configs.load_items(root)
        base = configs.base_tables_from_dir(aiter_configs) if aiter_configs else None
    except ConfigError as exc:
        m = re.match(r"(.+?):(\d+): (.*)", exc.message)
        if m:
            return [Finding(m.group(1), int(m.group(2)), "bad-config", m.group(3))]
        return [Finding(configs.CONFIGS_DIR, 0, "bad-config", exc.message)]
    findings = [Finding(*f) for f in configs.item_findings(items, base)]
    findings += [Finding(*f) for f in configs.upstream_findings(items, root, aiter_repo)]
    if base is not None:
        findings += [
            Finding(i.meta_file, 1, "config-upstreamed", "the base's aiter carries every row")
            for i in items
            if configs.upstreamed(i, base)
        ]
    return findings


def lint_patch(patch: Patch, rel: str) -> list[Finding]:
    """Findings for one patch file (metadata and diff)."""
    # The patch is read once (``parse_patch``) and its diff walked line by line: a 40 MB
    # patch costs its own size in memory, not a list of a million lines.
    out = _status_findings(patch, rel) + _field_findings(patch, rel)
    out += _trailer_findings(patch, rel)
    if not patch.has_diff():
        lines = max(1, len(patch.header.splitlines()))
        return [*out, Finding(rel, lines, "empty-patch", "no diff in this patch")]
    return out + _diff_findings(patch, rel)


def _status_findings(patch: Patch, rel: str) -> list[Finding]:
    """The subject and the ``Upstream-Status:`` trailer."""
    out: list[Finding] = []
    if not patch.subject:
        out.append(Finding(rel, 1, "missing-subject", "no Subject: header (or first line)"))
    status = patch.upstream_status
    if not status:
        out.append(
            Finding(
                rel,
                max(1, patch.header.count("\n")),
                "missing-status",
                "no Upstream-Status: trailer (Pending, Submitted [where], Backport [ver], "
                "Denied, Inactive-Upstream, Inappropriate [reason])",
            )
        )
        return out
    m = re.match(r"^([A-Za-z-]+)\s*(\[(.*)\])?\s*$", status)
    n = _line_of(patch, r"^Upstream-Status:")
    if not m or m.group(1) not in STATUSES:
        out.append(
            Finding(
                rel,
                n,
                "invalid-status",
                f"Upstream-Status {status!r} is not one of {', '.join(STATUSES)}",
            )
        )
    elif m.group(1) in NEEDS_DETAIL and not (m.group(3) or "").strip():
        out.append(
            Finding(rel, n, "invalid-status", f"Upstream-Status {m.group(1)} needs a [detail]")
        )
    return out


def _field_findings(patch: Patch, rel: str) -> list[Finding]:
    """The description, the forwarding of a Pending patch, ``Applies-To`` and
    ``Upstream-Fixed-In``."""
    out: list[Finding] = []
    if patch.subject and not patch.description.strip():
        out.append(
            Finding(
                rel,
                _line_of(patch, r"^Subject:"),
                "no-description",
                "the patch says what it changes but not why: add a description under the "
                "subject (what breaks without it, where it was seen)",
                "warning",
            )
        )
    if patch.upstream_status.split(" ", 1)[0] == "Pending" and not (
        patch.trailer("Forwarded") or patch.trailer("Bug")
    ):
        out.append(
            Finding(
                rel,
                _line_of(patch, r"^Upstream-Status:"),
                "pending-not-forwarded",
                "Pending with no Forwarded: (or Bug:) trailer: nobody upstream knows of it; "
                "send it and add `Forwarded: URL`, or say `Forwarded: not-needed` and why",
                "warning",
            )
        )
    if patch.applies_to is not None:
        try:
            SpecifierSet(patch.applies_to)
        except InvalidSpecifier:
            out.append(
                Finding(
                    rel,
                    _line_of(patch, r"^Applies-To:"),
                    "invalid-specifier",
                    f"Applies-To {patch.applies_to!r} is not a PEP 440 specifier",
                )
            )
    if patch.fixed_in is not None:
        try:
            Version(patch.fixed_in.lstrip("v"))
        except InvalidVersion:
            out.append(
                Finding(
                    rel,
                    _line_of(patch, r"^Upstream-Fixed-In:"),
                    "invalid-version",
                    f"Upstream-Fixed-In {patch.fixed_in!r} is not a version",
                )
            )
    return out


def _trailer_findings(patch: Patch, rel: str) -> list[Finding]:
    """Every trailer is one line without credentials (``trailer_problem``, the check
    ``--set`` and ``import`` make), and no line of the message hides a trailer behind a
    line break git does not split on (``Origin: x<U+2028>Fixes-Scan: ...``)."""
    out: list[Finding] = []
    for key, value in patch.trailers:
        problem = trailer_problem(value)
        if problem:
            code = "trailer-line-break" if "line break" in problem else "trailer-credential"
            n = _line_of(patch, rf"^{re.escape(key)}:")
            out.append(Finding(rel, n, code, f"{key}: {problem}"))
    keys = {k.lower() for k in TRAILERS}
    for n, line in enumerate(patch.header.split("\n"), 1):
        line = line.removesuffix("\r")
        if not any(ch in LINE_BREAKS for ch in line) or line.split(":", 1)[0] in TRAILERS:
            continue
        hidden = [p for p in line.splitlines()[1:] if p.split(":", 1)[0].strip().lower() in keys]
        if hidden:
            what = hidden[0].split(":", 1)[0].strip()
            out.append(
                Finding(
                    rel,
                    n,
                    "trailer-line-break",
                    f"a line break inside this line makes a {what}: trailer some readers "
                    "see and git does not; write one trailer per line",
                )
            )
    return out


def _diff_findings(patch: Patch, rel: str, every_line: bool = False) -> list[Finding]:
    """The diff, walked once: parse errors, unsafe paths and symlinks, binary changes git
    cannot apply, and whitespace on added lines.

    Only a few kinds of line can give a finding or change what the next lines mean (file
    headers, modes, index lines, hunk heads, binary notes, added lines ending in whitespace),
    so those are found in bulk and the lines between them are skipped; inside a symlink's
    section and just after an abbreviated index line every line is looked at. ``every_line``
    looks at each line (the reference the bulk walk is tested against).
    """
    out: list[Finding] = []
    header_lines = patch.header.count("\n")
    scan = patch.scan or scan_text(patch.body, patch.diff_start)
    if scan.error:
        out.append(Finding(rel, header_lines + scan.error_line, "unparsable-diff", scan.error))
    elif scan.sections == 0 and patch.body.find("GIT binary patch", patch.diff_start) < 0:
        out.append(Finding(rel, header_lines + 1, "empty-patch", "the diff has no file changes"))
    text, pos, end = patch.body, patch.diff_start, len(patch.body)
    walk = _DiffWalk(rel, out, _LineNumbers(text, pos, header_lines + 1))
    notable = iter(()) if every_line else _notable_lines(text, pos)
    while pos < end:
        if not (every_line or walk.link is not None or walk.index_left):
            nxt = next(notable, end)
            if nxt < pos:
                continue
            pos = nxt
            if pos >= end:
                break
        stop = text.find("\n", pos)
        stop = end if stop < 0 else stop
        walk.line(pos, text[pos:stop])
        pos = stop + 1
    return out


class _LineNumbers:
    """The line number of an offset of ``text``, counted only when a finding needs one (most
    lines a walk looks at give none: counting a 40 MB diff's newlines was a pass of its own).
    Offsets are asked in increasing order, so each count starts where the last one ended."""

    def __init__(self, text: str, start: int, first: int) -> None:
        self.text, self.pos, self.n = text, start, first

    def __call__(self, at: int) -> int:
        self.n += self.text.count("\n", self.pos, at)
        self.pos = at
        return self.n


# Lines of a diff that can give a finding or change the walk's state, found by their start.
_NOTABLE = re.compile(
    r"\n(?:diff --git |--- |\+\+\+ |new file mode |new mode |index |@@|Binary files )"
)
_RARE_SPACE = "\x0b\x0c\x1c\x1d\x1e\x1f"  # the ASCII whitespace besides " \t\r\n"
_TRAILING_SPACE = re.compile(r"[^\S\n](?=\n|\Z)")
# _TRAILING_SPACE for ASCII text without _RARE_SPACE: each tail's first character and a regex
_ASCII_TAILS = tuple((t[0], re.compile(re.escape(t))) for t in (" \n", "\t\n", "\r\n"))


def _notable_lines(text: str, start: int) -> Iterator[int]:
    """The offsets, in order, of the lines from ``start`` a walk must look at (a superset)."""
    found = {start}
    found.update(m.start() + 1 for m in _NOTABLE.finditer(text, start))
    if text.isascii() and not any(c in text for c in _RARE_SPACE):
        # A regex with a literal prefix scans faster than str.find for these two-character
        # tails (a third of the time on a 40 MB diff); a set of first characters would not.
        ends = [
            m.start()
            for first, tail in _ASCII_TAILS
            if first in text  # one memchr, where a two-character search is a scan
            for m in tail.finditer(text, start)
        ]
        if text[-1:] in (" ", "\t", "\r"):  # a last line with no newline
            ends.append(len(text) - 1)
    else:
        ends = [m.start() for m in _TRAILING_SPACE.finditer(text, start)]
    for at in ends:
        line = text.rfind("\n", start, at) + 1 or start
        if text.startswith("+", line) and not text.startswith("+++", line):
            found.add(max(line, start))
    return iter(sorted(found))


class _DiffWalk:
    """The state of one walk over a diff's lines, and the findings it adds to ``out``."""

    def __init__(self, rel: str, out: list[Finding], number: _LineNumbers) -> None:
        self.rel, self.out, self.number = rel, out, number
        self.link: str | None = None  # the path of the file section when it is a symlink
        self.section_path, self.in_hunk = "", False
        self.index_line, self.index_left = 0, 0  # an abbreviated index line, lines left

    def line(self, at: int, body: str) -> None:
        """The line ``body`` starting at offset ``at`` of the diff."""
        rel, out, number = self.rel, self.out, self.number
        if self.index_left:
            self.index_left -= 1
            if "GIT binary patch" in body:
                self.index_left = 0
                out.append(
                    Finding(
                        rel,
                        self.index_line,
                        "binary-without-full-index",
                        "binary patch without full index (make it with --full-index)",
                    )
                )
        if self.link is not None and self.in_hunk and body.startswith("+"):
            out.extend(_symlink_findings(rel, number(at), self.link, body[1:]))
            return
        m = _GIT_HEADER.match(body)
        if m:
            self.section_path, self.link, self.in_hunk = m.group(2), None, False
            for p in (m.group(1), m.group(2)):
                if p.startswith("/") or ".." in p.split("/"):
                    out.append(
                        Finding(rel, number(at), "unsafe-path", f"path {p!r} leaves the tree")
                    )
            return
        m = _FILE_HEADER.match(body)
        if m and m.group(1) != "/dev/null":
            p = m.group(1)[2:] if m.group(1).startswith(("a/", "b/")) else m.group(1)
            if m.group(1).startswith("/") or ".." in p.split("/"):
                out.append(
                    Finding(rel, number(at), "unsafe-path", f"path {m.group(1)!r} leaves the tree")
                )
            return
        if _LINK_MODE.match(body):
            self.link = self.section_path  # git stores a symlink as its target, one line
        elif body.startswith("@@"):
            self.in_hunk = True
        if body.startswith("index ") and _SHORT_INDEX.match(body):
            self.index_line, self.index_left = number(at), 4
        if body.startswith("Binary files ") and body.endswith(" differ"):
            out.append(
                Finding(
                    rel,
                    number(at),
                    "binary-without-data",
                    "binary change without data (make it with --binary --full-index)",
                )
            )
        if body.startswith("+") and not body.startswith("+++"):
            if body.endswith("\r"):
                out.append(Finding(rel, number(at), "crlf", "added line ends with CRLF"))
            elif body != body.rstrip():
                out.append(
                    Finding(
                        rel, number(at), "trailing-whitespace", "added line ends with whitespace"
                    )
                )


_GIT_HEADER = re.compile(r"diff --git a/(\S+) b/(\S+)")
_FILE_HEADER = re.compile(r"(?:---|\+\+\+) (\S+)")
_LINK_MODE = re.compile(r"(?:new file mode|new mode|index \S+) 120000$")
_SHORT_INDEX = re.compile(r"index [0-9a-f]{1,39}\.\.")


def _symlink_findings(rel: str, n: int, path: str, target: str) -> list[Finding]:
    """An ``unsafe-symlink`` finding when the symlink at ``path`` points out of the tree.

    git writes such a link into every worktree, and the build copies it into the image: a
    link to ``/etc/passwd`` or ``../../..`` is never part of a fix to sglang.
    """
    where = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if target.startswith("/") or where == ".." or where.startswith("../"):
        shown = target if len(target) <= 200 else target[:200] + "..."
        return [
            Finding(
                rel, n, "unsafe-symlink", f"symlink {path} points to {shown!r}, out of the tree"
            )
        ]
    return []


def _line_of(patch: Patch, pattern: str) -> int:
    """The line of the header (trailers live there) matching ``pattern``; 1 if none."""
    for n, line in enumerate(patch.header.split("\n"), 1):
        if re.match(pattern, line):
            return n
    return 1


def _pin_version(root: Path) -> Version | None:
    from sglforge.queue.series import load_pin, ref_version

    try:
        return ref_version(load_pin(root).ref)
    except ConfigError:
        return None


class _Changes:
    """The patches seen so far, to find one making the same change as an earlier one.

    The change key (every ``diff --git``, added and removed line, whitespace dropped) costs a
    pass over the whole diff, so it is only computed for patches whose file headers (a part
    of the key, found in bulk) equal an earlier patch's; an earlier patch's key is computed
    from its file when first needed, so no patch's text is kept.
    """

    def __init__(self) -> None:
        self._by_files: dict[tuple[str, ...], list[tuple[str, Path, str | None]]] = {}

    def same_as(self, patch: Patch) -> str | None:
        """The name of an earlier patch making the same change as ``patch``, or None."""
        if not patch.has_diff():
            return None
        lines = patch.git_lines
        if lines is None:
            lines = tuple(m.group(1) for m in line_heads(GIT_LINE, patch.body, patch.diff_start))
        files = tuple("".join(line.split()) for line in lines)
        earlier = self._by_files.setdefault(files, [])
        key = _change_key(patch) if earlier else None
        for i, (name, path, known) in enumerate(earlier):
            if known is None:
                known = _change_key(parse_patch(path))
                earlier[i] = (name, path, known)
            if key and known == key:
                return name
        earlier.append((patch.name, patch.path, key))
        return None


def _change_key(patch: Patch) -> str:
    """A key equal for two patches making the same change (like git's patch-id)."""
    if not patch.has_diff():
        return ""
    h = hashlib.sha256()
    for line in patch.diff_lines():
        if line.startswith(("diff --git", "+", "-")) and not line.startswith(("+++", "---")):
            h.update("".join(line.split()).encode() + b"\n")
    return h.hexdigest()
