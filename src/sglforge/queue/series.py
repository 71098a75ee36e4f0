"""Reading the queue on disk: the series file, patch files with their trailers, and the pin."""

from __future__ import annotations

import email.parser
import email.policy
import hashlib
import re
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from sglforge.errors import ConfigError
from sglforge.queue.configs import ConfigItem, load_items
from sglforge.transactions import recover_transactions
from sglforge.urls import scrub_secrets, secrets_in
from sglforge.util import (
    atomic_write,
    confined,
    decode_exact,
    encode_exact,
    one_line,
    sha256_bytes,
)

STATUSES = (
    "Pending",
    "Submitted",
    "Backport",
    "Denied",
    "Inactive-Upstream",
    "Inappropriate",
)
TRAILERS = (
    "Upstream-Status",
    "Applies-To",
    "Upstream-Fixed-In",
    "Origin",
    "Bug",
    "Forwarded",
    "Depends-On",
    "Retired",
    "Fixes-Scan",  # KIND WHERE: a scan finding this patch fixes (sglforge.scan.findings)
)
NEEDS_DETAIL = ("Submitted", "Backport", "Inappropriate")  # Status [detail]
# Every character ``str.splitlines`` ends a line at. A trailer is one line of the patch file
# (git splits on ``\n`` alone); a value holding any of these could read as two lines to some
# reader, so a second trailer (a ``Fixes-Scan:`` nobody set) could hide inside the first.
# tests/unit/test_trailer_integrity.py checks this against splitlines over all of Unicode.
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
PIN_KEYS = {"url", "ref", "commit", "sources"}

_TRAILER_RE = re.compile(r"^(?P<key>[A-Za-z][A-Za-z-]*):\s*(?P<value>.*\S)?\s*$")
_DIFF_START = re.compile(r"^(diff --git |--- |Index: )", re.M)
# Line patterns start with a newline (see line_heads): a literal first lets the regex engine
# skip to candidates at C speed, where a MULTILINE ``^`` tries every character.
_FILE_RE = re.compile(r"\ndiff --git a/(?P<a>\S+) b/(?P<b>\S+)")
GIT_LINE = re.compile(r"\n(diff --git[^\n]*)")  # a literal first: C-speed scanning
_NON_SPACE = re.compile(r"\S")
_PLUS_FILE = re.compile(r"\n\+\+\+ (?:b/)?(\S+)")


@dataclass(frozen=True)
class Pin:
    """The pinned upstream: ``url``, tag ``ref``, and the commit it resolved to."""

    url: str
    ref: str
    commit: str | None = None
    sources: dict[str, dict[str, str]] = field(default_factory=dict)
    path: Path | None = None

    @property
    def version(self) -> Version | None:
        return ref_version(self.ref)


@dataclass(frozen=True)
class Patch:
    """One patch file of the queue with its metadata and what it touches."""

    index: int
    name: str
    path: Path
    subject: str
    author: str
    date: str
    description: str
    trailers: tuple[tuple[str, str], ...]
    header: str  # everything before the diff, byte for byte
    body: str  # the whole file as shown; the diff is its tail from ``diff_start``
    diff_start: int
    files: tuple[str, ...]
    added: int
    removed: int
    kind: str
    sha256: str
    text: str = ""  # the whole file, every byte kept (``util.decode_exact``): what git sees
    # Every path the diff names on either side: ``files`` has the new names, a rename or copy
    # also reads its old one (git needs it in the index to apply the patch).
    paths: tuple[str, ...] = ()
    scan: DiffScan | None = None  # the diff's one counting pass (``scan_text``), kept for lint
    # Its ``diff --git`` lines, found once by ``parse_patch`` (lint's duplicate check reads
    # them too); None when the Patch was made otherwise.
    git_lines: tuple[str, ...] | None = None

    @property
    def diff(self) -> str:
        """The diff (a copy made on each use: a 40 MB patch is kept in memory once, as
        ``body``; readers that only scan it use ``diff_lines``)."""
        return self.body[self.diff_start :]

    def has_diff(self) -> bool:
        """Whether the diff holds anything but whitespace (without copying it)."""
        return _NON_SPACE.search(self.body, self.diff_start) is not None

    def diff_lines(self) -> Iterator[str]:
        """The diff's lines, one at a time, without copying the diff."""
        return iter_lines(self.body, self.diff_start)

    def trailer(self, key: str) -> str | None:
        for k, v in self.trailers:
            if k.lower() == key.lower():
                return v
        return None

    @property
    def upstream_status(self) -> str:
        return self.trailer("Upstream-Status") or ""

    @property
    def applies_to(self) -> str | None:
        return self.trailer("Applies-To")

    @property
    def fixed_in(self) -> str | None:
        return self.trailer("Upstream-Fixed-In")

    @property
    def depends_on(self) -> tuple[str, ...]:
        value = self.trailer("Depends-On") or ""
        return tuple(v for v in re.split(r"[,\s]+", value) if v)

    def applies_at(self, version: Version | None) -> bool | None:
        """True/False when Applies-To decides for ``version``; None when it cannot tell."""
        spec = self.applies_to
        if not spec:
            return True
        if version is None:
            return None
        try:
            return SpecifierSet(spec).contains(version, prereleases=True)
        except InvalidSpecifier:
            return None


@dataclass(frozen=True)
class SeriesEntry:
    name: str
    line: int


@dataclass(frozen=True)
class Queue:
    root: Path
    pin: Pin
    entries: tuple[SeriesEntry, ...]
    patches: tuple[Patch, ...]
    hash: str
    configs: tuple[ConfigItem, ...] = ()
    # patches/ as it stood just before it was read (``queue_stamp``): what a later check under
    # the project lock compares, without reading the queue again
    stamp: tuple[tuple[str, int, int], ...] = ()

    @property
    def patches_dir(self) -> Path:
        return self.root / "patches"

    def by_name(self, name: str) -> Patch:
        for p in self.patches:
            if p.name == name:
                return p
        raise ConfigError(f"patches/series: no patch named {name!r}", "sglforge patches list")


def ref_version(ref: str | None) -> Version | None:
    """The PEP 440 version a tag names (``v0.5.14`` -> 0.5.14), or None."""
    if not ref:
        return None
    text = ref.rsplit("/", 1)[-1]
    text = re.sub(r"^(?:release-|sglang-)?v?", "", text)
    try:
        return Version(text)
    except InvalidVersion:
        return None


def classify(paths: tuple[str, ...] | list[str]) -> str:
    """The rebuild kind of a patch, from the paths it touches (the most demanding wins)."""
    rank = {k: i for i, k in enumerate(("other", "python", "jit-kernel", "build", "aot-kernel"))}
    best = None
    for path in paths:
        kind = _classify_one(path)
        if best is None or rank[kind] > rank[best]:
            best = kind
    return best or "other"


def _classify_one(path: str) -> str:
    p = path.lower()
    name = p.rsplit("/", 1)[-1]
    if "/jit_kernel/" in f"/{p}" or "/kernels/jit/" in f"/{p}":
        return "jit-kernel"
    if p.startswith("sgl-kernel/") or "/kernels/aot/" in f"/{p}" or "/csrc/" in f"/{p}":
        return "aot-kernel"
    if (
        "dockerfile" in name
        or name in {"setup.py", "setup.cfg", "pyproject.toml", "cmakelists.txt", "makefile"}
        or p.startswith("docker/")
        or name.endswith((".cmake", "requirements.txt"))
    ):
        return "build"
    if p.endswith((".py", ".pyi")):
        return "python"
    return "other"


def trailer_problem(value: str) -> str | None:
    """Why ``value`` cannot be a trailer's value (a line break inside it, a credential), or
    None: the one check ``--set``, ``import``, ``export`` and lint all make."""
    brk = next((ch for ch in value if ch in LINE_BREAKS), None)
    if brk is not None:
        return f"it holds a line break (U+{ord(brk):04X}); a trailer is one line"
    if secrets_in(value):
        return "it holds a credential (userinfo, a token or a signature); it would be committed"
    return None


def check_trailers(trailers: dict[str, str]) -> dict[str, str]:
    """``trailers`` (Upstream-Status, Applies-To, Origin, ...) validated as lint would, their
    credentials taken out (the values are committed); ConfigError naming the option
    otherwise, before anything is written."""
    trailers = {key: scrub_secrets(value) for key, value in trailers.items()}
    for key, value in trailers.items():
        problem = "it is empty" if not value.strip() else trailer_problem(value)
        if problem:
            raise ConfigError(
                f"{key}: {one_line(value)}: {problem}; nothing was written",
                "one line, without userinfo or tokens (credential helpers hold those)",
            )
    status = trailers.get("Upstream-Status")
    if status is not None:
        m = re.match(r"^([A-Za-z-]+)\s*(\[(.*)\])?\s*$", status)
        if not m or m.group(1) not in STATUSES:
            raise ConfigError(
                f"--status {status!r}: not one of {', '.join(STATUSES)}",
                "e.g. --status 'Backport [0.5.15]' or --status 'Submitted [URL]'",
            )
        if m.group(1) in NEEDS_DETAIL and not (m.group(3) or "").strip():
            raise ConfigError(
                f"--status {status!r}: {m.group(1)} needs a [detail]",
                f"e.g. --status '{m.group(1)} [...]'",
            )
    spec = trailers.get("Applies-To")
    if spec is not None:
        try:
            SpecifierSet(spec)
        except InvalidSpecifier:
            raise ConfigError(
                f"--applies-to {spec!r}: not a PEP 440 specifier",
                "e.g. --applies-to '>=0.5.10,<0.5.15'",
            ) from None
    return trailers


def split_patch(text: str) -> tuple[str, str]:
    """Split a patch into its header (mail headers, description, diffstat) and its diff."""
    start = diff_start(text)
    return text[:start], text[start:]


def diff_start(text: str) -> int:
    """Where the diff begins in a patch's text (its length when there is none)."""
    m = _GIT_DIFF_START.search(text) or _DIFF_START.search(text)
    return m.start() if m else len(text)


_GIT_DIFF_START = re.compile(r"^diff --git ", re.M)


def line_heads(rx: re.Pattern[str], text: str, start: int = 0) -> Iterator[re.Match[str]]:
    """Matches of ``rx``, a pattern starting with a newline, at each line start from
    ``start`` (the line at ``start`` included): ``^`` with re.M, at C speed."""
    if start > 0 and text[start - 1] == "\n":
        yield from rx.finditer(text, start - 1)
        return
    eol = text.find("\n", start)
    eol = len(text) if eol < 0 else eol
    m = rx.match("\n" + text[start:eol])
    if m:
        yield m
    yield from rx.finditer(text, eol)


def iter_lines(text: str, start: int = 0) -> Iterator[str]:
    """The lines of ``text`` from ``start`` (without their ``\n``), one slice at a time."""
    end = len(text)
    while start < end:
        stop = text.find("\n", start)
        if stop < 0:
            yield text[start:]
            return
        yield text[start:stop]
        start = stop + 1


_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


@dataclass(frozen=True)
class DiffScan:
    """What one pass over a diff's lines found: file sections, lines added and removed, and
    the first structural problem (a hunk shorter or longer than its header says)."""

    sections: int
    added: int
    removed: int
    error: str = ""
    error_line: int = 0  # 1-based, within the diff


def scan_diff(lines: Iterable[str]) -> DiffScan:
    """Count and check a diff in one streaming pass (no per-line objects kept)."""
    sections = plus_files = added = removed = old = new = 0
    n = 0
    for n, line in enumerate(lines, 1):  # noqa: B007 - n is used after the loop
        if old > 0 or new > 0:
            tag = line[:1]
            if tag == "\\":
                continue
            if tag in (" ", "") and old > 0 and new > 0:
                old, new = old - 1, new - 1
            elif tag == "-" and old > 0:
                old, removed = old - 1, removed + 1
            elif tag == "+" and new > 0:
                new, added = new - 1, added + 1
            else:
                return DiffScan(
                    sections or plus_files,
                    added,
                    removed,
                    f"hunk is shorter than its @@ header says (line {n})",
                    n,
                )
            continue
        if line.startswith("diff --git "):
            sections += 1
        elif line.startswith("+++ "):
            plus_files += 1
        else:
            m = _HUNK.match(line)
            if m:
                old = int(m.group(1)) if m.group(1) is not None else 1
                new = int(m.group(2)) if m.group(2) is not None else 1
    if old > 0 or new > 0:
        return DiffScan(
            sections or plus_files,
            added,
            removed,
            f"hunk is shorter than its @@ header says (line {n})",
            n,
        )
    return DiffScan(sections or plus_files, added, removed)


# The fast path of ``scan_text``: the next line that matters outside a hunk, and K whole lines.
_OUTSIDE = re.compile(r"^(?:diff --git |\+\+\+ |@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@)", re.M)
_BAD_TAG = re.compile(r"\n[^+\- \\\n]")


def _lines_end(text: str, pos: int, k: int) -> int:
    """The offset just past ``k`` whole lines from ``pos`` (-1 when the text ends first).

    ``k`` characters hold at most ``k`` newlines, so counting the next ``k`` characters'
    newlines never overshoots: each count is C speed and the lines still wanted shrink.
    """
    end = len(text)
    while k > 32:
        c = text.count("\n", pos, pos + k)
        if pos + k >= end:
            return -1 if c < k else pos + k
        pos, k = pos + k, k - c
    for _ in range(k):
        stop = text.find("\n", pos)
        if stop < 0:
            return -1
        pos = stop + 1
    return pos


def scan_text(text: str, start: int = 0) -> DiffScan:
    """``scan_diff`` of ``text[start:]``, at C speed on well-formed diffs.

    Outside hunks only file headers and ``@@`` lines count, so a regex finds the next one. A
    hunk with counts (old, new) holds at least max(old, new) lines, each of which lowers one
    count or both ("\\" lines lower none), and a count never goes below zero in a valid hunk:
    so the next max(old, new) lines are counted by their first characters in bulk, and the
    step repeats while a count is left. Anything else (a line no hunk can hold, a count that
    would go negative, a text ending inside a hunk) is left to ``scan_diff``'s line-by-line
    walk, which says where the diff breaks.
    """
    sections = plus_files = added = removed = 0
    pos, end = start, len(text)
    while pos < end:
        m = _OUTSIDE.search(text, pos)
        if m is None:
            break
        head = m.group(0)
        pos = text.find("\n", m.start())
        pos = end if pos < 0 else pos + 1
        if head.startswith("diff --git "):
            sections += 1
            continue
        if head.startswith("+++ "):
            plus_files += 1
            continue
        old = int(m.group(1)) if m.group(1) is not None else 1
        new = int(m.group(2)) if m.group(2) is not None else 1
        while old > 0 or new > 0:
            k = max(old, new)
            stop = _lines_end(text, pos, k)
            if stop < 0 or text[pos] not in "+- \\\n":
                return scan_diff(iter_lines(text, start))
            plus = (text[pos] == "+") + text.count("\n+", pos, stop)
            minus = slash = 0
            if plus < k:  # not a run of added lines (a new file's hunk): every tag counted
                if _BAD_TAG.search(text, pos, stop):
                    return scan_diff(iter_lines(text, start))
                minus = (text[pos] == "-") + text.count("\n-", pos, stop)
                slash = (text[pos] == "\\") + text.count("\n\\", pos, stop)
            context = k - plus - minus - slash  # " " and empty lines
            old, new = old - context - minus, new - context - plus
            if old < 0 or new < 0:
                return scan_diff(iter_lines(text, start))
            added, removed, pos = added + plus, removed + minus, stop
    return DiffScan(sections or plus_files, added, removed)


def parse_patch(path: Path, index: int = 0) -> Patch:
    """Parse one patch file; raises ConfigError when it cannot be read at all."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})", "sglforge patches lint") from exc
    digest = sha256_bytes(raw)
    # One copy of the text when it is UTF-8 (nearly always): what is shown and what git gets
    # are then the same string. Otherwise a shown copy (U+FFFD) and an exact one.
    try:
        text = exact = raw.decode("utf-8")
    except UnicodeDecodeError:
        text, exact = raw.decode("utf-8", errors="replace"), decode_exact(raw)
    del raw
    start = diff_start(text)
    header = text[:start]
    subject, author, date, body = _mail_fields(header)
    description, trailers = _split_trailers(body)
    files: list[str] = []
    paths: list[str] = []
    git_lines = tuple(m.group(1) for m in line_heads(GIT_LINE, text, start))
    for line in git_lines:
        m = _FILE_RE.match("\n" + line)
        if m is None:
            continue
        files.append(m.group("b") if m.group("b") != "/dev/null" else m.group("a"))
        paths += [x for x in (m.group("a"), m.group("b")) if x != "/dev/null"]
    if not files:
        for m in line_heads(_PLUS_FILE, text, start):
            if m.group(1) != "/dev/null":
                files.append(m.group(1))
    scan = scan_text(text, start)
    added, removed = scan.added, scan.removed
    if scan.error:  # not a well-formed diff: count what looks like added/removed lines
        added, removed = _count(iter_lines(text, start))
    uniq = tuple(dict.fromkeys(files))
    return Patch(
        index=index,
        name=path.name,
        path=path,
        subject=subject,
        author=author,
        date=date,
        description=description,
        trailers=tuple(trailers),
        header=header,
        body=text,
        diff_start=start,
        files=uniq,
        paths=tuple(dict.fromkeys([*paths, *uniq])),
        added=added,
        removed=removed,
        kind=classify(uniq),
        sha256=digest,
        text=exact,
        scan=scan,
        git_lines=git_lines,
    )


def _count(lines: Iterable[str]) -> tuple[int, int]:
    """Lines that look added and removed in a malformed diff (the well-formed are counted by
    hunk lengths in ``scan_diff``, where a format-patch "-- " signature is no line)."""
    added = removed = 0
    in_hunk = False
    for line in lines:
        if line.startswith("@@"):
            in_hunk = True
        elif line.startswith("diff --git ") or line == "-- ":
            in_hunk = False
        elif in_hunk and line.startswith("+"):
            added += 1
        elif in_hunk and line.startswith("-"):
            removed += 1
    return added, removed


def _mail_fields(header: str) -> tuple[str, str, str, str]:
    lines = header.splitlines(keepends=True)
    if lines and lines[0].startswith("From ") and not lines[0].startswith("From:"):
        lines = lines[1:]  # the mbox separator line
    text = "".join(lines)
    if not re.match(r"^[A-Za-z-]+:", text):
        # A plain description (quilt style): first line is the subject.
        body = text.strip("\n")
        first, _, rest = body.partition("\n")
        return first.strip(), "", "", _strip_stat(rest)
    msg = email.parser.Parser(policy=email.policy.compat32).parsestr(text)
    subject = " ".join((msg.get("Subject") or "").split())
    subject = re.sub(r"^\[PATCH[^\]]*\]\s*", "", subject)
    payload = msg.get_payload()
    body = payload if isinstance(payload, str) else ""
    return subject, msg.get("From") or "", msg.get("Date") or "", _strip_stat(body)


def _strip_stat(body: str) -> str:
    # format-patch puts "---" then a diffstat between the message and the diff.
    parts = re.split(r"^---\s*$", body, maxsplit=1, flags=re.M)
    return parts[0].strip("\n")


def _split_trailers(body: str) -> tuple[str, list[tuple[str, str]]]:
    trailers: list[tuple[str, str]] = []
    desc_lines: list[str] = []
    # Lines end at ``\n`` only, as git reads them: a value holding another line break
    # (``\r``, U+2028) stays one trailer, which lint then refuses (``trailer_problem``).
    for line in body.split("\n"):
        line = line.removesuffix("\r")
        m = _TRAILER_RE.match(line)
        if (
            m
            and m.group("key") in TRAILERS
            or (m and m.group("key") in {"Signed-off-by", "Reviewed-by", "Co-authored-by"})
        ):
            trailers.append((m.group("key"), (m.group("value") or "").strip()))
        else:
            desc_lines.append(line)
    return "\n".join(desc_lines).strip("\n"), trailers


def read_series(root: Path) -> tuple[SeriesEntry, ...]:
    """Entries of ``patches/series`` (quilt format: ``#`` comments and blank lines ignored)."""
    path = root / "patches" / "series"
    if not path.exists():
        return ()  # load_queue refuses a missing series; lint reports it
    try:
        text_all = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"patches/series: not UTF-8 text (byte {exc.start})", "rewrite patches/series"
        ) from None
    entries = []
    for n, line in enumerate(text_all.splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        # quilt allows options after the name (e.g. -p1); the name is the first word.
        name = text.split()[0]
        if not safe_entry(name):
            raise ConfigError.at(
                "patches/series",
                n,
                f"{name!r} is not a file name inside patches/ "
                "(no folders, no '..', no absolute paths)",
                "move the patch into patches/ and list it by its file name",
            )
        confined(root / "patches", name, "series entry", "patches/series", n)
        entries.append(SeriesEntry(name, n))
    return tuple(entries)


def safe_entry(name: str) -> bool:
    """A series entry names a file directly inside patches/ (so nothing outside is touched)."""
    return bool(name) and "/" not in name and "\\" not in name and name not in (".", "..")


def load_pin(root: Path) -> Pin:
    """The pin from ``patches/upstream.toml``, validated."""
    path = root / "patches" / "upstream.toml"
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {exc.start}); TOML files are UTF-8", f"fix {path}"
        ) from None
    except FileNotFoundError as exc:
        raise ConfigError(
            f"{path}: missing (the upstream pin)",
            'create it with url = "..." and ref = "vX.Y.Z"',
        ) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}", f"fix {path}") from exc
    unknown = set(data) - PIN_KEYS
    if unknown:
        raise ConfigError(
            f"{path}: unknown key {sorted(unknown)[0]!r} (known: {', '.join(sorted(PIN_KEYS))})",
            f"fix {path}",
        )
    for key in ("url", "ref"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise ConfigError(f"{path}: {key!r} must be a non-empty string", f"fix {path}")
    commit = data.get("commit")
    if commit is not None and not re.fullmatch(r"[0-9a-f]{40}", str(commit)):
        raise ConfigError(
            f"{path}: 'commit' must be a full 40-hex SHA, got {commit!r}", f"fix {path}"
        )
    sources = data.get("sources", {})
    if not isinstance(sources, dict):
        raise ConfigError(f"{path}: 'sources' must be a table", f"fix {path}")
    for name, entry in sources.items():
        if not isinstance(entry, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in entry.items()
        ):
            raise ConfigError(
                f"{path}: [sources.{name!r}] must be a table of strings (ref, tree)",
                f"fix or delete [sources.{name!r}] in {path}",
            )
    for key in ("url", "ref", "commit"):
        if key in data and not isinstance(data[key], str):
            raise ConfigError(f"{path}: {key!r} must be a string", f"fix {path}")
    return Pin(url=data["url"], ref=data["ref"], commit=commit, sources=sources, path=path)


PIN_HEADER = (
    "# The pinned upstream sglang. `commit` is recorded by the commands that move or record the\n"
    "# pin (refresh, upgrade, `sglforge patches pin`) and enforced from then on.\n"
)


def render_pin(pin: Pin, old_text: str | None = None) -> str:
    """The TOML text of ``pin``; with ``old_text``, that file edited in place (comments and
    layout kept, through tomlkit) rather than written anew."""
    import tomlkit

    doc = tomlkit.parse(old_text) if old_text else tomlkit.parse(PIN_HEADER)
    doc["url"] = pin.url
    doc["ref"] = pin.ref
    if pin.commit:
        doc["commit"] = pin.commit
    elif "commit" in doc:
        del doc["commit"]
    if pin.sources:
        sources = doc.get("sources")
        if sources is None:
            sources = tomlkit.table(is_super_table=True)
            doc["sources"] = sources
        for name in list(sources):
            if name not in pin.sources:
                del sources[name]
        for name in sorted(pin.sources):
            entry = sources.get(name)
            if entry is None:
                entry = tomlkit.table()
                sources[name] = entry
            for k in list(entry):
                if k not in pin.sources[name]:
                    del entry[k]
            for k, v in sorted(pin.sources[name].items()):
                entry[k] = str(v)
    elif "sources" in doc:
        del doc["sources"]
    return tomlkit.dumps(doc)


def save_pin(root: Path, pin: Pin) -> None:
    """Rewrite ``patches/upstream.toml`` for ``pin``, keeping its comments.

    Only the commands that move or record the pin call this (refresh, upgrade,
    ``patches pin``); everything else reads it.
    """
    path = root / "patches" / "upstream.toml"
    old = path.read_text(encoding="utf-8") if path.exists() else None
    atomic_write(path, render_pin(pin, old))


HASH_FORMAT = "sglforge-queue 2"


def queue_hash(pin: Pin, patches: Iterable[Patch], root: Path) -> str:
    """Fingerprint of the queue's content: upstream (url, tag), series order, patch bytes.

    The bytes are those ``parse_patch`` read (``Patch.text`` encodes back to them), so the
    hash names exactly the patches the queue holds, even when a file changed since.

    Only content counts, so the hash is the same before and after any command: the pinned
    commit is left out because it is not another input but what the tag resolves to, and a
    tag that moves is refused (``pinned_commit``); nor do [sources], comments or blank lines
    of the series count. The images built from the queue are tagged with it (q<hash>).
    """
    h = hashlib.sha256()
    h.update(f"{HASH_FORMAT}\nurl={pin.url}\nref={pin.ref}\n".encode())
    for p in patches:
        data = encode_exact(p.text)
        h.update(f"patch {p.name} {len(data)}\n".encode())
        h.update(data)
    # Config items (patches/configs/NAME.toml + NAME.csv) are queue content too; a queue
    # without them hashes as before.
    configs = root / "patches" / "configs"
    for path in sorted(configs.glob("*.toml")) if configs.is_dir() else []:
        for part in (path, path.with_suffix(".csv")):
            data = part.read_bytes() if part.is_file() else b"<missing>"
            h.update(f"config {part.name} {len(data)}\n".encode())
            h.update(data)
    return h.hexdigest()


def queue_stamp(root: Path) -> tuple[tuple[str, int, int], ...]:
    """Every file under ``patches/`` with its modification time (ns) and size: equal stamps
    mean nothing there was written, renamed or removed in between (read from the folder, not
    the files)."""
    base = root / "patches"
    out = []
    for path in sorted(base.rglob("*")) if base.is_dir() else ():
        try:
            st = path.lstat()
        except OSError:
            continue
        out.append((path.relative_to(base).as_posix(), st.st_mtime_ns, st.st_size))
    return tuple(out)


def load_queue(root: Path) -> Queue:
    """The queue at ``root``, validated before any command acts on it.

    Refused as a ConfigError (exit 2) by every command that reads the queue, before anything
    is written: a missing ``patches/series``, an entry listed twice or whose file is missing,
    a patch touching a path outside the tree (``../x``, ``/etc/x``), an Applies-To that is
    not a PEP 440 specifier. ``sglforge patches lint`` reports the same as findings.
    """
    recover_transactions(root / "patches")
    stamp = queue_stamp(root)
    pin = load_pin(root)
    if not (root / "patches" / "series").is_file():
        raise ConfigError(
            "patches/series: missing (the queue's order); an empty queue is an empty file",
            "restore it (`git checkout -- patches/series`), or create it empty",
        )
    entries = read_series(root)
    seen: dict[str, int] = {}
    for e in entries:
        if e.name in seen:
            raise ConfigError(
                f"patches/series:{e.line}: {e.name} is listed twice (first on line "
                f"{seen[e.name]}); nothing was changed",
                "remove the duplicate line from patches/series",
            )
        seen[e.name] = e.line
    patches = []
    for i, e in enumerate(entries, 1):
        path = root / "patches" / e.name
        if not path.is_file():
            raise ConfigError(
                f"patches/series:{e.line}: {e.name} does not exist",
                "sglforge patches lint (then fix patches/series)",
            )
        patch = parse_patch(path, i)
        validate_patch(patch)
        patches.append(patch)
    return Queue(
        root=root,
        pin=pin,
        entries=entries,
        patches=tuple(patches),
        hash=queue_hash(pin, patches, root),
        configs=load_items(root),
        stamp=stamp,
    )


_PATHS = (  # newline-first, for line_heads; re.M for the ``$``
    re.compile(r"\ndiff --git (\S+) (\S+)$", re.M),
    re.compile(r"\n(?:---|\+\+\+) (\S+)"),
    re.compile(r"\n(?:rename|copy) (?:from|to) (.+)$", re.M),
)


def diff_paths(diff: str, start: int = 0) -> list[str]:
    """Every path a diff (``diff[start:]``) names: both sides of ``diff --git``,
    ``---``/``+++``, renames."""
    found: list[str] = []
    for m in line_heads(_PATHS[0], diff, start):
        found += [_side(m.group(1)), _side(m.group(2))]
    for m in line_heads(_PATHS[1], diff, start):
        if m.group(1) != "/dev/null":
            found.append(_side(m.group(1)))
    for m in line_heads(_PATHS[2], diff, start):
        found.append(m.group(1))
    return list(dict.fromkeys(found))


def _side(path: str) -> str:
    """A diff's path without its ``a/`` or ``b/``."""
    return path[2:] if path.startswith(("a/", "b/")) else path


_TREE = Path("/sglforge-upstream-tree")  # a stand-in root: only the lexical check matters


def validate_patch(patch: Patch) -> None:
    """Refuse (ConfigError) what no command should act on: paths leaving the tree, a broken
    Applies-To. The same mechanism as every other data-derived path (``util.confined``)."""
    where = f"patches/{patch.name}"
    for path in diff_paths(patch.body, patch.diff_start):
        if path.startswith("/") or ".." in path.split("/"):
            confined(_TREE, path, "path in the diff", where)
    if patch.applies_to is not None:
        try:
            SpecifierSet(patch.applies_to)
        except InvalidSpecifier:
            raise ConfigError(
                f"{where}: Applies-To {patch.applies_to!r} is not a PEP 440 specifier "
                "(so where the patch applies is unknown)",
                f"fix the Applies-To: trailer of {where}, e.g. Applies-To: >=0.5.10,<0.5.15",
            ) from None
