"""Queue edits quilt and StGit users reach for: import, drop, rename, reorder.

Each edit is one all-or-nothing change of ``patches/`` (``transactions``) under the project
lock. The series keeps its comments and each entry its own line (options, comments): an edit
only changes which entry sits in which slot. Patches are never rewritten except for the trailers
an edit is about (``Retired:`` on drop, ``Depends-On:`` naming a renamed patch).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from sglforge import git
from sglforge.errors import ConfigError, NothingToDo, PatchError, UpstreamError
from sglforge.project import Project
from sglforge.queue.series import (
    Patch,
    Queue,
    SeriesEntry,
    check_trailers,
    parse_patch,
    ref_version,
    safe_entry,
    split_patch,
    trailer_problem,
    validate_patch,
)
from sglforge.transactions import commit_files
from sglforge.urls import scrub, scrub_secrets, scrub_text, secrets_in, shown
from sglforge.util import confined, one_line, project_lock, read_exact

# git format-patch's mbox separator: one per commit in a file (a pull request's .patch).
_MBOX_FROM = re.compile(r"^From [0-9a-f]{40} Mon Sep 17 00:00:00 2001$", re.M)


@dataclass(frozen=True)
class Edited:
    """What a queue edit did: the patches it wrote or moved, and the series after it."""

    action: str
    patches: tuple[str, ...]
    series: tuple[str, ...]
    detail: str = ""
    # import: what each added patch kept of its own (its trailers, its file's name), so the
    # user sees that no option overrode it; {patch: ["Upstream-Status: ...", "name"]}
    kept: dict[str, tuple[str, ...]] | None = None


# ---- trailers


def set_trailers(text: str, trailers: dict[str, str]) -> str:
    """``text`` (a format-patch file) with each trailer set: an existing one replaced in
    place, a new one added after the description (before format-patch's ``---``)."""
    header, diff = split_patch(text)
    for key, value in trailers.items():
        # the one writer of trailer lines checks every value (issue 42, F2/F3): credentials
        # taken out, and no line break but the one that ends it (a forged second trailer)
        value = scrub_secrets(value)
        problem = trailer_problem(value)
        if problem:
            raise ConfigError(
                f"{key}: {one_line(value)}: {problem}; nothing was written",
                "give it as one line of text",
            )
        line = f"{key}: {value}"
        pattern = re.compile(rf"^{re.escape(key)}:.*$", re.M | re.I)
        body_end = _body_end(header)
        if pattern.search(header[:body_end]):
            header = pattern.sub(line.replace("\\", "\\\\"), header, count=1)
            continue
        before = header[:body_end].rstrip("\n")
        last = before.rsplit("\n", 1)[-1]
        sep = "\n" if re.match(r"^[A-Za-z][A-Za-z-]*: ", last) and "\n\n" in before else "\n\n"
        header = before + sep + line + "\n" + header[body_end:].lstrip("\n")
    return header + diff


def _body_end(header: str) -> int:
    """Where the description ends in a header: format-patch's ``---`` line, else the end."""
    m = re.search(r"^---[ \t]*$", header, re.M)
    return m.start() if m else len(header)


# ---- finding patches


def find_entry(queue: Queue, name: str) -> SeriesEntry:
    """The series entry ``name`` means (``find_in``)."""
    return find_in(queue.entries, name)


def find_in(entries: Sequence[SeriesEntry], name: str) -> SeriesEntry:
    """The series entry ``name`` means, one meaning for every verb: a bare number (``3``) is
    the entry at that ``#`` of ``patches list``; a zero-padded one (``0003``) the number in a
    file's name; else the file name, without ``.patch``, or its slug (``fix-foo`` for
    ``0003-fix-foo.patch``)."""
    import difflib

    if name.isdigit() and not name.startswith("0"):
        if 1 <= int(name) <= len(entries):
            return entries[int(name) - 1]
        raise ConfigError(
            f"no patch #{name} in patches/series: it has {len(entries)} (a bare number is the "
            "# of `patches list`; 0003 is the number in a file's name)",
            "sglforge patches list",
        )
    for e in entries:
        stem = e.name.removesuffix(".patch")
        number, _, slug_part = stem.partition("-")
        if name in (e.name, stem, slug_part) or (
            name.isdigit() and number.isdigit() and int(name) == int(number)
        ):
            return e
    names = [e.name for e in entries]
    near = difflib.get_close_matches(name, names, n=3, cutoff=0.4)
    raise ConfigError(
        f"no patch {name!r} in patches/series"
        + (f"; did you mean {', '.join(near)}?" if near else ""),
        "sglforge patches list",
    )


def _series_text(root: Path, order: list[str], renamed: dict[str, str] | None = None) -> str:
    """patches/series with its entries in ``order``: entry lines keep their own text (options,
    comments) and move between the entry slots; comments and blank lines stay in place."""
    renamed = renamed or {}
    path = root / "patches" / "series"
    lines = read_exact(path).splitlines() if path.exists() else []
    entry_text: dict[str, str] = {}
    slots: list[int] = []
    for n, line in enumerate(lines):
        word = line.split("#", 1)[0].strip()
        if word:
            name = word.split()[0]
            new = renamed.get(name, name)
            entry_text[new] = line.replace(name, new, 1)
            slots.append(n)
    out = list(lines)
    for slot, name in zip(slots, order, strict=False):
        out[slot] = entry_text.get(name, name)
    for slot in reversed(slots[len(order) :]):
        del out[slot]
    out += [entry_text.get(name, name) for name in order[len(slots) :]]
    return "\n".join(out) + "\n"


def _names(queue: Queue) -> list[str]:
    return [e.name for e in queue.entries]


# ---- import


def import_patches(
    project: Project,
    source: str,
    name: str | None = None,
    trailers: dict[str, str] | None = None,
    force: bool = False,
) -> Edited:
    """Add the patch(es) ``source`` names to the end of the queue: a file, an http(s) URL (an
    upstream pull request's ``.patch``, a commit's), or a commit of the upstream repository.

    ``Origin``, ``Upstream-Status`` and ``Applies-To`` are filled in from where it came from
    (a commit of upstream: ``Backport [first release holding it]``, Applies-To below it; a
    URL: ``Submitted [URL]``; a file: Pending) where the patch does not carry its own, and
    ``trailers`` (the options) win over both. A file holding one patch keeps its file's name
    (renumbered to the end of the queue) unless ``name`` is given. A change the queue holds
    already (the same diff, or the same ``Origin:``) is refused unless ``force``.
    """
    given = check_trailers(dict(trailers or {}))
    said = shown(source)
    with project_lock(project.root):
        queue = project.fresh_queue()
        texts, found = _fetch(project, queue, source)
        # every trailer is committed and carried into images: no URL keeps a credential
        recorded = {k: scrub_text(v, record=True) for k, v in {**found, **given}.items()}
        files: dict[Path, str | bytes | None] = {}
        names = _names(queue)
        added: list[str] = []
        kept: dict[str, tuple[str, ...]] = {}
        own_name = _file_name(source) if len(texts) == 1 and not name else None
        for i, text in enumerate(texts):
            text = _scrubbed_trailers(text)
            own = own_trailers(text, (*recorded, *TRAILER_KEYS))
            text = set_trailers(
                text, {k: v for k, v in recorded.items() if k in given or k not in own}
            )
            header, diff = split_patch(text)
            if not diff.strip():
                raise PatchError(
                    f"{said}: no diff in it (part {i + 1}): not a patch",
                    "pass a `git format-patch` file, a pull request's .patch URL or a commit",
                )
            parsed = _parsed(text, said)
            _one_line_trailers(parsed, f"{said} (part {i + 1})" if len(texts) > 1 else said)
            if not force:
                _refuse_held(queue, parsed, said)
            subject = parsed.subject or Path(scrub(source)).stem
            wanted = name if name and len(texts) == 1 else own_name or subject
            new = _numbered(names, wanted)
            kept[new] = tuple(f"{k}: {v}" for k, v in own.items() if k not in given) + (
                ("name",) if own_name else ()
            )
            path = confined(project.root / "patches", new, "new patch", said)
            if path.exists():
                raise ConfigError(
                    f"patches/{new} exists already (not in the series)",
                    "move it away or pass --name; `sglforge patches lint` lists orphans",
                )
            files[path] = text
            names.append(new)
            added.append(new)
        files[project.root / "patches" / "series"] = _series_text(project.root, names)
        commit_files(project.root / "patches", files)
    return Edited("import", tuple(added), tuple(names), said, kept)


# The trailers import fills in when a patch lacks them (and reports when it kept its own).
TRAILER_KEYS = ("Upstream-Status", "Origin", "Applies-To")


def own_trailers(text: str, keys: tuple[str, ...]) -> dict[str, str]:
    """The trailers among ``keys`` that ``text`` (a format-patch file) already carries in
    its description, by their spelling in ``keys``, in that order."""
    header, _diff = split_patch(text)
    body = header[: _body_end(header)]
    found: dict[str, str] = {}
    for key in keys:
        m = re.search(rf"^{re.escape(key)}:[ \t]*(.*?)[ \t]*$", body, re.M | re.I)
        if m and key not in found:
            found[key] = m.group(1)
    return found


def _scrubbed_trailers(text: str) -> str:
    """``text`` with the credentials taken out of its trailer lines (a patch may arrive
    with ``Origin: https://user:token@...``); every other byte kept."""
    header, diff = split_patch(text)
    end = _body_end(header)
    lines = header[:end].split("\n")
    for n, line in enumerate(lines):
        if re.match(r"^[A-Za-z][A-Za-z-]*:", line) and secrets_in(line):
            lines[n] = scrub_secrets(line)
    return "\n".join(lines) + header[end:] + diff


def _one_line_trailers(patch: Patch, said: str) -> None:
    """ConfigError (nothing written) for a trailer of ``patch`` holding a line break."""
    for key, value in patch.trailers:
        problem = trailer_problem(value)
        if problem:
            raise ConfigError(
                f"{said}: its {key}: trailer is refused: {problem}; nothing was written",
                "fix that line of the patch, then import it again",
            )


def _file_name(source: str) -> str | None:
    """The name a patch file gives its patch: its stem without a leading ``NNNN-`` (the
    queue's or format-patch's number; the patch is renumbered to the end of the queue);
    None for a URL, a commit, or a name with nothing left."""
    if re.match(r"^https?://", source):
        return None
    path = Path(source).expanduser()
    if not path.is_file():
        return None
    stem = re.sub(r"\.(patch|diff|mbox)$", "", path.name)
    stem = re.sub(r"^\d{4}-", "", stem)
    return stem or None


def _refuse_held(queue: Queue, new: Patch, said: str) -> None:
    """NothingToDo (exit 1) naming the queue's patch when ``new`` is a change it holds
    already: the same diff (lint's duplicate-change key, like git's patch-id) or the same
    ``Origin:``; quilt refuses a patch already in the series too (issue 45, U7)."""
    from sglforge.patches.lint import _change_key

    key, origin = _change_key(new), new.trailer("Origin")
    for patch in queue.patches:
        if key and _change_key(patch) == key:
            why = "the same change"
        elif origin and patch.trailer("Origin") == origin:
            why = f"the same Origin: {origin}"
        else:
            continue
        raise NothingToDo(
            f"{said}: patches/{patch.name} holds {why}; nothing was imported",
            "pass --force to import it again, or `sglforge patches drop` the old one first",
        )


def _parsed(text: str, source: str) -> Patch:
    """``text`` parsed and validated as the queue's patches are (paths stay in the tree, a
    valid Applies-To), through a scratch file since parse_patch reads files. A refusal names
    ``source`` (the user's file or URL) and "the upstream tree", not the scratch file and the
    stand-in root the check uses."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="sglforge-import-") as tmp:
        path = Path(tmp) / "import.patch"
        path.write_text(text, encoding="utf-8")
        try:
            patch = parse_patch(path)
            validate_patch(patch)
        except ConfigError as exc:
            raise ConfigError(
                _renamed(exc.message, tmp, source), _renamed(exc.hint or "", tmp, source) or None
            ) from None
        return patch


def _renamed(text: str, tmp: str, source: str) -> str:
    from sglforge.queue.series import _TREE

    for scratch in (f"{tmp}/import.patch", "patches/import.patch", "import.patch"):
        text = text.replace(scratch, source)
    return text.replace(str(_TREE), "the upstream tree")


def _numbered(names: list[str], wanted: str) -> str:
    from sglforge.patches.export import slug

    if wanted.endswith(".patch") and re.match(r"^\d{4}-", wanted) and safe_entry(wanted):
        return wanted
    numbers = [int(m.group(1)) for n in names if (m := re.match(r"(\d{4})-", n))]
    return f"{max(numbers, default=0) + 1:04d}-{slug(wanted.removesuffix('.patch'))}.patch"


def _fetch(project: Project, queue: Queue, source: str) -> tuple[list[str], dict[str, str]]:
    """(patch texts, trailers) for a file, an http(s) URL or an upstream commit."""
    pin_version = ref_version(queue.pin.ref)
    at_pin = {"Applies-To": f">={pin_version}"} if pin_version else {}
    if re.match(r"^https?://", source):
        text = _download(source)
        # recorded without userinfo, query or fragment (a committed file: sglforge.urls)
        origin = scrub(source)
        m = re.search(r"/commit/([0-9a-f]{7,40})(?:\.patch)?$", origin)
        status = f"Backport [{m.group(1)[:12]}]" if m else f"Submitted [{_pr_url(origin)}]"
        return _split_mbox(text), {"Origin": origin, "Upstream-Status": status, **at_pin}
    path = Path(source).expanduser()
    if path.is_file():
        text = read_exact(path)
        if not re.match(r"^(From |From:|Subject:)", text):
            text = _mail_from_diff(project.root, path.stem, text)
        return _split_mbox(text), {"Upstream-Status": "Pending", **at_pin}
    looks_like_file = "/" in source or source.endswith((".patch", ".diff", ".mbox"))
    if not looks_like_file and re.fullmatch(r"[A-Za-z0-9._-]+", source):
        try:
            return _from_commit(project, source)
        except UpstreamError as exc:
            raise UpstreamError(f"{source!r}: no such file, and {exc.message}", exc.hint) from None
    raise ConfigError(
        f"{source!r}: no such file, and not a URL or a commit",
        "pass a patch file, https://github.com/sgl-project/sglang/pull/N.patch, or a commit",
    )


def _pr_url(url: str) -> str:
    return re.sub(r"\.(patch|diff)$", "", url)


# A patch URL's answer larger than this is refused (a pull request's .patch is kilobytes; the
# largest queue patch sglforge has seen is 50 MB), and the whole download has a deadline.
PATCH_CAP = 64 << 20
_READS_PER_DOWNLOAD = 4  # the overall deadline, in per-read timeouts ($SGLFORGE_PIP_TIMEOUT)


def _download(url: str, cap: int = PATCH_CAP) -> str:
    """The body of ``url``, streamed with a size cap, a per-read timeout and an overall
    deadline (a server trickling bytes is cut off too)."""
    import time

    import requests

    from sglforge.index import timeouts
    from sglforge.util import abort_response, deadline

    each, _ = timeouts()
    total = each * _READS_PER_DOWNLOAD
    where = shown(url)
    started = time.monotonic()
    res = _headers_within(url, each, total, where)
    left = max(total - (time.monotonic() - started), 0.1)
    with res, deadline(left, lambda: abort_response(res)) as fired:
        if res.status_code != 200:
            raise UpstreamError(
                f"{where}: HTTP {res.status_code}",
                "check the address (a pull request's patch is "
                "https://github.com/ORG/REPO/pull/N.patch)",
            )
        chunks: list[bytes] = []
        size = 0
        try:
            for chunk in res.iter_content(1 << 16):
                size += len(chunk)
                if size > cap:
                    raise UpstreamError(
                        f"{where}: the answer is larger than {cap >> 20} MiB: not a patch "
                        "sglforge imports; nothing was written",
                        "check the address, or download it and pass the file",
                    )
                chunks.append(chunk)
        except (requests.RequestException, OSError, AttributeError, ValueError) as exc:
            if not fired.is_set():
                raise UpstreamError(
                    f"{where}: the answer broke off ({type(exc).__name__}); nothing was written",
                    "retry, or download it and pass the file",
                ) from None
        if fired.is_set():
            raise _late(where, total)
    return b"".join(chunks).decode("utf-8", errors="replace")


def _headers_within(url: str, each: float, total: float, where: str) -> Any:
    """The response to ``url`` once its headers are in, within the whole download's
    deadline: a server sending one header line at a time (each inside the per-read timeout)
    is cut off too (F12). The request runs in a thread; one given up on is closed when it
    answers."""
    import threading

    import requests

    got: dict[str, Any] = {}
    lock = threading.Lock()

    def fetch() -> None:
        try:
            answer: dict[str, Any] = {"res": requests.get(url, timeout=each, stream=True)}
        except Exception as exc:  # noqa: BLE001 - said below, as any failure to fetch
            answer = {"error": exc}
        with lock:
            if got.get("abandoned") and "res" in answer:
                answer["res"].close()
            else:
                got.update(answer)

    worker = threading.Thread(target=fetch, name="sglforge-import-fetch", daemon=True)
    worker.start()
    worker.join(total)
    with lock:
        if not got:
            got["abandoned"] = True
            raise _late(where, total)
    if "error" in got:
        raise UpstreamError(
            f"{where}: could not fetch it ({type(got['error']).__name__})",
            "check the address, or download it and pass the file",
        ) from None
    return got["res"]


def _late(where: str, total: float) -> UpstreamError:
    from sglforge.index import TIMEOUT_ENV

    return UpstreamError(
        f"{where}: no complete answer within {total:g} s; nothing was written",
        f"check the network, or download it and pass the file; ${TIMEOUT_ENV}=SECONDS "
        f"sets the per-read wait (a download may take {_READS_PER_DOWNLOAD}x)",
    )


def _split_mbox(text: str) -> list[str]:
    starts = [m.start() for m in _MBOX_FROM.finditer(text)]
    if len(starts) <= 1:
        return [text]
    return [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)], strict=True)]


def _mail_from_diff(root: Path, stem: str, diff: str) -> str:
    """A plain diff (``git diff`` output) as a format-patch file git am can apply, authored
    by the user."""
    import time

    from sglforge.patches.export import author_ident

    who, email, _when = author_ident(root)
    date = time.strftime("%a, %d %b %Y %H:%M:%S %z")
    subject = stem.replace("-", " ").replace("_", " ")
    return (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        f"From: {who} <{email}>\nDate: {date}\nSubject: [PATCH] {subject}\n\n---\n" + diff
    )


def _from_commit(project: Project, commit: str) -> tuple[list[str], dict[str, str]]:
    from sglforge.patches.export import format_commit

    up = project.upstream
    sha = up.resolve(commit)
    text = format_commit(up.cache, sha)
    released = _first_release(up.cache, sha)
    trailers = {"Origin": f"{scrub(project.queue.pin.url)}, commit {sha}"}
    if released is not None:
        trailers["Upstream-Status"] = f"Backport [{released}]"
        trailers["Upstream-Fixed-In"] = str(released)
        trailers["Applies-To"] = f"<{released}"
    else:
        trailers["Upstream-Status"] = f"Backport [{sha[:12]}]"
    return [text], trailers


def _first_release(cache: Path, sha: str) -> Version | None:
    versions = []
    for tag in git.tags_containing(cache, sha):
        try:
            v = Version(tag.removeprefix("v"))
        except InvalidVersion:
            continue
        if not v.is_prerelease:
            versions.append(v)
    return min(versions, default=None)


# ---- drop, rename, reorder


def drop_patch(project: Project, name: str, reason: str) -> Edited:
    """Move patch ``name`` out of the series into ``patches/retired/`` with a ``Retired:``
    line giving ``reason``; refused when another patch says it depends on it."""
    if not reason.strip() or "\n" in reason:
        raise ConfigError("--reason: one line saying why the patch goes", "--reason 'why'")
    with project_lock(project.root):
        queue = project.fresh_queue()
        entry = find_entry(queue, name)
        needing = [p.name for p in queue.patches if entry.name in p.depends_on]
        if needing:
            raise ConfigError(
                f"{', '.join(needing)} say Depends-On: {entry.name}; nothing was changed",
                "drop those first, or edit their Depends-On: lines",
            )
        patch = next(p for p in queue.patches if p.name == entry.name)
        retired = confined(project.root / "patches" / "retired", entry.name, "retired", name)
        if retired.exists():
            raise ConfigError(
                f"patches/retired/{entry.name} exists already; nothing was changed",
                "rename the patch first (sglforge patches rename)",
            )
        text = set_trailers(patch.text, {"Retired": f"dropped: {reason.strip()}"})
        order = [n for n in _names(queue) if n != entry.name]
        commit_files(
            project.root / "patches",
            {
                retired: text,
                patch.path: None,
                project.root / "patches" / "series": _series_text(project.root, order),
            },
        )
    return Edited("drop", (entry.name,), tuple(order), f"patches/retired/{entry.name}")


def rename_patch(project: Project, name: str, new: str) -> Edited:
    """Rename patch ``name`` to ``new`` (its number kept unless ``new`` has one), in the
    series and in every ``Depends-On:`` naming it."""
    from sglforge.patches.export import slug

    with project_lock(project.root):
        queue = project.fresh_queue()
        entry = find_entry(queue, name)
        number = re.match(r"^(\d{4})-", entry.name)
        stem = new.removesuffix(".patch")
        if re.match(r"^\d{4}-", stem):
            target = f"{stem[:5]}{slug(stem[5:])}.patch"
        elif number:
            target = f"{number.group(1)}-{slug(stem)}.patch"
        else:
            target = f"{slug(stem)}.patch"
        if not safe_entry(target):
            raise ConfigError(f"{new!r}: not a file name", "sglforge patches rename OLD NEW")
        path = confined(project.root / "patches", target, "new name", name)
        if target == entry.name:
            return Edited("rename", (target,), tuple(_names(queue)), "unchanged")
        if path.exists():
            raise ConfigError(f"patches/{target} exists already; nothing was changed", "")
        files: dict[Path, str | bytes | None] = {}
        old_patch = next(p for p in queue.patches if p.name == entry.name)
        files[path] = old_patch.text
        files[old_patch.path] = None
        for p in queue.patches:
            if entry.name in p.depends_on:
                deps = ", ".join(target if d == entry.name else d for d in p.depends_on)
                text = set_trailers(p.text, {"Depends-On": deps})
                files[p.path] = text
        order = [target if n == entry.name else n for n in _names(queue)]
        files[project.root / "patches" / "series"] = _series_text(
            project.root, order, {entry.name: target}
        )
        commit_files(project.root / "patches", files)
    return Edited("rename", (entry.name, target), tuple(order))


def reorder_patch(
    project: Project,
    name: str,
    before: str | None = None,
    after: str | None = None,
    first: bool = False,
    last: bool = False,
    renumber: bool = False,
    force: bool = False,
) -> Edited:
    """Move patch ``name`` in the series (``before``/``after`` another, ``first``, ``last``);
    refused when a Depends-On would then name a later patch. With ``renumber`` every file's
    ``NNNN-`` becomes its place in the series (renamed as ``rename`` does: the series and
    every Depends-On follow); ``renumber`` alone only renumbers. An order under which a patch
    stops applying at the pin is refused, unless ``force``: then it is written and the note
    says which patch no longer applies and how to mend it (StGit's float, quilt's edit of
    the series)."""
    wheres = sum((before is not None, after is not None, first, last))
    if wheres > 1 or (wheres == 0 and not renumber):
        raise ConfigError(
            "say where: one of --before NAME, --after NAME, --first, --last (or only --renumber)",
            "sglforge patches reorder NAME --before OTHER",
        )
    with project_lock(project.root):
        queue = project.fresh_queue()
        moving = find_entry(queue, name).name
        order = [n for n in _names(queue) if n != moving]
        if wheres == 0:
            order = _names(queue)
        elif first:
            order.insert(0, moving)
        elif last:
            order.append(moving)
        else:
            other = find_entry(queue, before or after or "").name
            if other == moving:
                raise ConfigError(f"{moving} cannot move next to itself", "")
            at = order.index(other) + (1 if after else 0)
            order.insert(at, moving)
        position = {n: i for i, n in enumerate(order)}
        for p in queue.patches:
            late = [d for d in p.depends_on if d in position and position[d] > position[p.name]]
            if late:
                raise ConfigError(
                    f"{p.name} says Depends-On: {', '.join(late)}, which would then come after "
                    "it; nothing was changed",
                    "move the dependency too, or edit the Depends-On: line",
                )
        renamed = _numbers_in_order(order) if renumber else {}
        if order == _names(queue) and not renamed:
            return Edited("reorder", (moving,), tuple(order), "unchanged")
        stuck = None
        if order != _names(queue):
            stuck = _cannot_apply(project, queue, order, moving)
        if stuck is not None and not force:
            raise stuck[1]
        moved = next(p for p in queue.patches if p.name == moving)
        shared = [
            p.name for p in queue.patches if p.name != moving and set(p.files) & set(moved.files)
        ]
        files = _renamed_files(project, queue, renamed)
        order = [renamed.get(n, n) for n in order]
        moving = renamed.get(moving, moving)
        files[project.root / "patches" / "series"] = _series_text(project.root, order, renamed)
        commit_files(project.root / "patches", files)
    note = (
        f"touches files {', '.join(shared)} also change: `sglforge patches check` tells "
        "whether the queue still applies"
        if shared
        else ""
    )
    if renamed:
        note = "; ".join(
            x for x in (note, f"moved; {len(renamed)} file(s) renamed to their place") if x
        )
    if stuck is not None:
        note = "; ".join(x for x in (_forced_note(stuck, renamed), note) if x)
    return Edited("reorder", (moving,), tuple(order), note)


def _forced_note(stuck: tuple[str, PatchError], renamed: Mapping[str, str]) -> str:
    """What ``reorder --force`` wrote anyway: the refusal's first line, the patch under its
    new name, and how the stack mends it."""
    name = renamed.get(stuck[0], stuck[0])
    what = stuck[1].message.removesuffix("; patches/series was not changed")
    for old, new in renamed.items():
        what = what.replace(old, new)
    return (
        f"moved anyway (--force): {what}; `sglforge patches goto {name}` stops on it: "
        "resolve, `git am --continue`, then `sglforge patches export`"
    )


def _cannot_apply(
    project: Project, queue: Queue, order: list[str], moving: str
) -> tuple[str, PatchError] | None:
    """(the patch, the refusal) when a patch that applies at the pin in the series as it
    stands would not in ``order`` (issue 45, U14), else None: the new series is tried at the
    pin as ``patches check`` tries it (``git apply --cached`` on a private index, the bytes
    ``git am`` gets in ``apply``), and the old one only when the new one fails."""
    from sglforge.patches.check import CONFLICT, check_ref
    from sglforge.util import scratch_dir

    def conflicts(names: Sequence[str]) -> dict[str, Any]:
        by_name = {p.name: p for p in queue.patches}
        patches = tuple(
            dataclasses.replace(by_name[n], index=i) for i, n in enumerate(names) if n in by_name
        )
        tried = dataclasses.replace(queue, patches=patches)
        pin, commit = queue.pin.ref, project.pin_commit()
        report = check_ref(
            tried, project.upstream, pin, commit, commit, scratch_dir(project.root, "tmp")
        )
        return {st.name: st for st in report.patches if st.status == CONFLICT}

    new = conflicts(order)
    if not new:
        return None
    old = conflicts(_names(queue))
    fresh = [name for name in new if name not in old]
    if not fresh:
        return None  # the series does not apply at the pin as it stands either: not this move
    name = fresh[0]
    st = new[name]
    where = st.hunks[0] if st.hunks else st.detail.removeprefix("does not apply: ")
    fix, why = _order_fix(queue, _names(queue), order, name, moving)
    return name, PatchError(
        f"{name} would not apply at {queue.pin.ref} in that order: {where}{why}; "
        "patches/series was not changed",
        f"{fix} (or the same reorder with --force, to mend {name} by hand)",
    )


def _order_fix(
    queue: Queue, before: list[str], after: list[str], stuck: str, moving: str
) -> tuple[str, str]:
    """(the next command, why) for a patch ``stuck`` that stops applying when the series goes
    from ``before`` to ``after``: a patch sharing its files that swapped sides with it (every
    swapped pair holds ``moving``, which moved one way)."""
    files = set(queue.by_name(stuck).files)
    swapped = [
        other
        for other in after
        if other != stuck
        and files & set(queue.by_name(other).files)
        and (before.index(other) < before.index(stuck)) != (after.index(other) < after.index(stuck))
    ]
    if not swapped:
        return f"sglforge patches check --ref {queue.pin.ref}   (the queue as it stands)", ""
    was = before.index(swapped[0]) < before.index(stuck)  # stuck was written on top of it
    other = swapped[-1] if was else swapped[0]  # the nearest place that keeps every pair
    why = f" (it was written {'on top of' if was else 'before'} {other})"
    if moving == stuck:
        return f"sglforge patches reorder {stuck} {'--after' if was else '--before'} {other}", why
    return f"sglforge patches reorder {other} {'--before' if was else '--after'} {stuck}", why


def _numbers_in_order(order: list[str]) -> dict[str, str]:
    """old name -> ``NNNN-rest`` for each entry whose number is not its place in ``order``."""
    out: dict[str, str] = {}
    for place, name in enumerate(order, 1):
        rest = re.sub(r"^\d{4}-", "", name)
        new = f"{place:04d}-{rest}"
        if new != name:
            out[name] = new
    targets = [out.get(n, n) for n in order]
    if len(set(targets)) != len(targets):
        raise ConfigError(
            "renumbering would give two patches one name; nothing was changed",
            "rename one of them first: sglforge patches rename NAME NEW",
        )
    return out


def _renamed_files(
    project: Project, queue: Queue, renamed: dict[str, str]
) -> dict[Path, str | bytes | None]:
    """The files a set of renames writes: each patch under its new name (old one removed),
    each ``Depends-On`` naming a renamed patch rewritten."""
    files: dict[Path, str | bytes | None] = {}
    if not renamed:
        return files
    for p in queue.patches:
        text = p.text
        if any(d in renamed for d in p.depends_on):
            deps = ", ".join(renamed.get(d, d) for d in p.depends_on)
            text = set_trailers(text, {"Depends-On": deps})
        new = renamed.get(p.name)
        if new is not None:
            files.setdefault(p.path, None)
            target = confined(project.root / "patches", new, "new name", p.name)
            files[target] = text
        elif text != p.text:
            files[p.path] = text
    return files


__all__ = [
    "Edited",
    "check_trailers",
    "drop_patch",
    "find_entry",
    "import_patches",
    "rename_patch",
    "reorder_patch",
    "set_trailers",
]
