"""One patch looked at (``show``) and its header trailers edited (``header``), quilt's
``header``/StGit's ``edit`` without opening an editor: values are checked as lint checks
them, and only the trailer lines change (the diff and every other byte are kept)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from sglforge.errors import ConfigError
from sglforge.patches.edit import find_entry, set_trailers
from sglforge.patches.stack import read_stack
from sglforge.project import Project
from sglforge.queue.series import (
    NEEDS_DETAIL,
    STATUSES,
    Queue,
    parse_patch,
    split_patch,
    trailer_problem,
)
from sglforge.transactions import commit_files
from sglforge.urls import scrub_secrets
from sglforge.util import encode_exact, one_line, project_lock

# The trailers `patches header --set` edits, as DEP-3 and lint know them.
KEYS = (
    "Upstream-Status",
    "Forwarded",
    "Bug",
    "Origin",
    "Applies-To",
    "Upstream-Fixed-In",
    "Depends-On",
)


@dataclass(frozen=True)
class Shown:
    """One patch: its file, metadata, place in the stack of the pin's worktree, and text."""

    name: str
    path: Path
    index: int
    subject: str
    author: str
    trailers: dict[str, str]
    files: tuple[str, ...]
    state: str
    text: str


def show_patch(project: Project, name: str) -> Shown:
    """Patch ``name`` (file name, slug or number), read only."""
    queue = project.queue
    entry = find_entry(queue, name)
    p = queue.by_name(entry.name)
    stack = read_stack(queue)
    state = next((e.state for e in stack.entries if e.name == p.name), "unapplied")
    return Shown(
        p.name, p.path, p.index, p.subject, p.author, dict(p.trailers), p.files, state, p.text
    )


@dataclass(frozen=True)
class HeaderEdit:
    name: str
    before: dict[str, str]
    after: dict[str, str]
    written: bool


def check_value(key: str, value: str) -> str:
    """``value`` for trailer ``key`` if lint would take it; ConfigError naming the option."""
    # Credentials are taken out before anything else (the value is committed, and an
    # Upstream-Status reaches the image's manifest); what is left must be one line.
    value = scrub_secrets(value)
    opt = f"--set {key}={one_line(value)}"
    problem = "it is empty" if not value.strip() else trailer_problem(value)
    if problem:
        raise ConfigError(f"{opt}: {problem}", f"e.g. --set {key}=... (one line)")
    value = value.strip()
    if key == "Upstream-Status":
        m = re.match(r"^([A-Za-z-]+)\s*(\[(.*)\])?\s*$", value)
        if not m or m.group(1) not in STATUSES:
            raise ConfigError(
                f"{opt}: not one of {', '.join(STATUSES)}",
                "e.g. --set 'Upstream-Status=Submitted [URL]'",
            )
        if m.group(1) in NEEDS_DETAIL and not (m.group(3) or "").strip():
            raise ConfigError(f"{opt}: {m.group(1)} needs a [detail]", f"e.g. '{m.group(1)} [...]'")
    elif key == "Forwarded" and value not in ("no", "not-needed") and not _url(value):
        raise ConfigError(
            f"{opt}: DEP-3 wants a URL, `no` or `not-needed`",
            "e.g. --set Forwarded=https://github.com/sgl-project/sglang/pull/123",
        )
    elif key == "Bug" and not _url(value):
        raise ConfigError(f"{opt}: a URL expected", "e.g. --set Bug=https://.../issues/45")
    elif key in ("Applies-To", "Upstream-Fixed-In"):
        _check_versions(key, value, opt)
    return value


def _url(value: str) -> bool:
    return re.match(r"^https?://[^\s/]+\S*$", value) is not None


def _check_versions(key: str, value: str, opt: str) -> None:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        if key == "Applies-To":
            SpecifierSet(value)
        else:
            Version(value)
    except (InvalidSpecifier, InvalidVersion):
        what = "a PEP 440 specifier" if key == "Applies-To" else "a version"
        raise ConfigError(f"{opt}: not {what}", "e.g. '>=0.5.10,<0.5.15' or 0.5.16") from None


def parse_sets(sets: tuple[str, ...]) -> dict[str, str]:
    """``KEY=VALUE`` options as {canonical key: checked value}."""
    out: dict[str, str] = {}
    for item in sets:
        key, eq, value = item.partition("=")
        canonical = next((k for k in KEYS if k.lower() == key.strip().lower()), None)
        if not eq or canonical is None:
            raise ConfigError(
                f"--set {item!r}: expected KEY=VALUE with KEY one of {', '.join(KEYS)}",
                "e.g. --set Forwarded=https://github.com/sgl-project/sglang/pull/123",
            )
        out[canonical] = check_value(canonical, value)
    return out


def edit_header(
    project: Project, name: str, sets: dict[str, str], unset: tuple[str, ...] = ()
) -> HeaderEdit:
    """Set (or remove) trailers of patch ``name``; the file is replaced atomically, and
    only when a line changes."""
    gone = [next((k for k in KEYS if k.lower() == u.lower()), u) for u in unset]
    unknown = [u for u in gone if u not in KEYS]
    if unknown or (not sets and not gone):
        raise ConfigError(
            f"patches header: {'unknown key ' + unknown[0] if unknown else 'nothing to set'}",
            f"--set KEY=VALUE or --unset KEY, KEY one of {', '.join(KEYS)}",
        )
    with project_lock(project.root):
        queue = project.fresh_queue()
        patch = queue.by_name(find_entry(queue, name).name)
        if "Depends-On" in sets:
            _check_depends(queue, patch.name, sets["Depends-On"])
        text = set_trailers(patch.text, sets) if sets else patch.text
        text = _unset(text, gone)
        after = parse_patch_text(patch.path, text, patch.index)
        written = text != patch.text
        if written:
            commit_files(project.root / "patches", {patch.path: text})
    project.reload()
    return HeaderEdit(patch.name, dict(patch.trailers), after, written)


def _check_depends(queue: Queue, name: str, value: str) -> None:
    """Each patch a ``Depends-On`` names comes earlier in the series (as lint wants it)."""
    names = [e.name for e in queue.entries]
    earlier = names[: names.index(name)]
    for dep in (d for d in re.split(r"[,\s]+", value) if d):
        if dep not in earlier:
            raise ConfigError(
                f"--set Depends-On={value!r}: {dep} is not a patch before {name} in patches/series",
                "name earlier patches by file name (sglforge patches list)",
            )


def _unset(text: str, keys: list[str]) -> str:
    header, diff = split_patch(text)
    cut = re.search(r"^---[ \t]*$", header, re.M)
    end = cut.start() if cut else len(header)
    body = header[:end]
    for key in keys:
        body = re.sub(rf"^{re.escape(key)}:.*\n", "", body, count=1, flags=re.M | re.I)
    return body + header[end:] + diff


def parse_patch_text(path: Path, text: str, index: int) -> dict[str, str]:
    """The trailers of ``text`` as the queue will read them, parsed from a scratch copy so
    a header the queue could not read is refused before the real file is touched."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="sglforge-header-") as tmp:
        scratch = Path(tmp) / path.name
        scratch.write_bytes(encode_exact(text))
        return dict(parse_patch(scratch, index).trailers)
