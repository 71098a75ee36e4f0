"""New objects written straight into a repository as one pack (pack v2 with its v2 index).

What a released wheel holds is already deflate-compressed, and a git pack stores each object
zlib-compressed: a zlib stream is a raw deflate stream between a two-byte header and the
adler32 of the data. So a wheel's member goes into the pack as its own compressed bytes, with
no second compression (``git fast-import`` spent two thirds of an import compressing again
what the wheel had compressed, and hashed every file a second time with the slower
collision-detecting SHA-1). The formats are git's own, documented in git's
``Documentation/gitformat-pack.txt``; ``git fsck`` and ``git verify-pack`` accept what this
writes (tests/integration/test_git_queries.py holds that).

A pack is written beside its final name, fsynced, and renamed in before its index (git finds
packs by their index), so a kill leaves at most a temporary file, never a half pack git reads.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import types
import zlib
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path

from sglforge.errors import disk_error


def _fast_zlib() -> types.ModuleType:
    """ISA-L's inflate and checksums: zlib's API and results at twice the speed (pyproject's
    ``isal``); zlib itself where that is not installed."""
    try:
        from isal import isal_zlib
    except ImportError:  # pragma: no cover - a platform without its wheel
        return zlib
    return isal_zlib


fast_zlib = _fast_zlib()
# what a broken deflate stream raises, from either
INFLATE_ERRORS: tuple[type[Exception], ...] = tuple({zlib.error, fast_zlib.error})

COMMIT, TREE, BLOB = 1, 2, 3
_NAMES = {COMMIT: b"commit", TREE: b"tree", BLOB: b"blob"}
TREE_MODE = "40000"
# A folder of a tree being built: names to subfolders or to (mode, blob id).
_Folder = dict[str, "_Folder | tuple[str, bytes]"]
# 0x78 0x01: deflate with a 32 KiB window, no preset dictionary (a raw deflate stream of any
# zip member fits it: deflate's distances never exceed 32 KiB).
_ZLIB_HEADER = b"\x78\x01"


def object_id(kind: int, data: bytes) -> bytes:
    """git's (SHA-1) object id of an object of ``kind`` with these bytes, as 20 bytes."""
    h = hashlib.sha1(b"%s %d\0" % (_NAMES[kind], len(data)), usedforsecurity=False)
    h.update(data)
    return h.digest()


def _entry_header(kind: int, size: int) -> bytes:
    out = bytearray()
    byte = (kind << 4) | (size & 0x0F)
    size >>= 4
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)


class PackWriter:
    """Objects added one at a time to a new pack of ``repo``; ``have`` names objects (hex ids)
    the repository holds already, never written again. Use it through ``new_pack``."""

    def __init__(self, repo: Path, have: Collection[str] = ()) -> None:
        self.folder = Path(repo) / "objects" / "pack"
        self.folder.mkdir(parents=True, exist_ok=True)
        self._have = have
        self._tmp = self.folder / f"tmp_pack_sglforge_{os.getpid()}"
        self._fh = open(self._tmp, "w+b")  # noqa: SIM115 - closed by finish/abort
        self._fh.write(b"PACK" + struct.pack(">II", 2, 0))  # the count is filled in at the end
        self._entries: dict[bytes, tuple[int, int]] = {}  # id -> (offset, crc32 of entry)
        self.written = 0

    def add(self, kind: int, data: bytes, deflated: bytes | None = None) -> bytes:
        """Add an object; its id (20 bytes). ``deflated`` is ``data`` compressed as a raw
        deflate stream (a zip member's bytes), stored as it is instead of compressing again."""
        oid = object_id(kind, data)
        if oid in self._entries or oid.hex() in self._have:
            return oid
        if deflated is None:
            body = zlib.compress(data, 1)
        else:
            body = _ZLIB_HEADER + deflated + struct.pack(">I", fast_zlib.adler32(data))
        head = _entry_header(kind, len(data))
        offset = self._fh.tell()
        self._fh.write(head)
        self._fh.write(body)
        self._entries[oid] = (offset, fast_zlib.crc32(body, fast_zlib.crc32(head)))
        self.written += 1
        return oid

    def add_tree(self, files: Mapping[str, tuple[str, bytes]]) -> bytes:
        """The tree of ``files`` ({path: (mode, blob id)}, every blob added or held already)
        and its subtrees, added; the root tree's id. ValueError for a path that is both a
        file and a folder (no git tree holds that)."""
        root: _Folder = {}
        for path, entry in files.items():
            *dirs, name = path.split("/")
            node = root
            for d in dirs:
                sub = node.setdefault(d, {})
                if not isinstance(sub, dict):
                    raise ValueError(f"{path}: {d} is a file and a folder")
                node = sub
            if isinstance(node.get(name), dict):
                raise ValueError(f"{path}: a file and a folder")
            node[name] = entry
        return self._tree(root)

    def _tree(self, node: _Folder) -> bytes:
        entries: list[tuple[str, str, bytes]] = []
        for name, child in node.items():
            if isinstance(child, dict):
                entries.append((name, TREE_MODE, self._tree(child)))
            else:
                entries.append((name, child[0], child[1]))
        # git orders a tree's entries by name, a subtree's name compared as if it ended in "/"
        entries.sort(key=lambda e: e[0].encode() + (b"/" if e[1] == TREE_MODE else b""))
        data = b"".join(b"%s %s\0%s" % (m.encode(), n.encode(), o) for n, m, o in entries)
        return self.add(TREE, data)

    def finish(self) -> Path | None:
        """Seal the pack and rename it and its index in; its path (None when every object was
        held already: no pack is left)."""
        fh = self._fh
        count = len(self._entries)
        if not count:
            self.abort()
            return None
        fh.seek(8)
        fh.write(struct.pack(">I", count))
        fh.flush()
        fh.seek(0)
        digest = hashlib.sha1(usedforsecurity=False)
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
        checksum = digest.digest()
        fh.write(checksum)
        fh.flush()
        os.fsync(fh.fileno())
        fh.close()
        name = f"pack-{checksum.hex()}"
        idx_tmp = self.folder / f"tmp_idx_sglforge_{os.getpid()}"
        with open(idx_tmp, "wb") as out:
            out.write(self._index(checksum))
            out.flush()
            os.fsync(out.fileno())
        pack = self.folder / f"{name}.pack"
        os.replace(self._tmp, pack)
        os.replace(idx_tmp, self.folder / f"{name}.idx")
        for p in (pack, self.folder / f"{name}.idx"):
            p.chmod(0o444)  # as git leaves its packs
        return pack

    def _index(self, checksum: bytes) -> bytes:
        ids = sorted(self._entries)
        fanout = [0] * 256
        for oid in ids:
            fanout[oid[0]] += 1
        total = 0
        for i in range(256):
            total += fanout[i]
            fanout[i] = total
        small: list[int] = []
        large: list[int] = []
        for oid in ids:
            offset = self._entries[oid][0]
            if offset < 0x80000000:
                small.append(offset)
            else:
                small.append(0x80000000 | len(large))
                large.append(offset)
        body = b"".join(
            (
                b"\377tOc" + struct.pack(">I", 2),
                struct.pack(">256I", *fanout),
                b"".join(ids),
                struct.pack(f">{len(ids)}I", *(self._entries[o][1] for o in ids)),
                struct.pack(f">{len(ids)}I", *small),
                struct.pack(f">{len(large)}Q", *large),
                checksum,
            )
        )
        return body + hashlib.sha1(body, usedforsecurity=False).digest()

    def abort(self) -> None:
        """Drop what was written; nothing of it stays."""
        with contextlib.suppress(OSError):
            self._fh.close()
        with contextlib.suppress(OSError):
            self._tmp.unlink()


@contextlib.contextmanager
def new_pack(repo: Path, have: Collection[str] = ()) -> Iterator[PackWriter]:
    """A ``PackWriter`` for ``repo``, sealed and renamed in when the block ends, dropped when
    it raises. A full or read-only disk is the project's disk error, naming the folder."""
    try:
        writer = PackWriter(repo, have)
    except OSError as exc:
        raise _disk(repo, exc) from None
    try:
        yield writer
        writer.finish()
    except OSError as exc:
        writer.abort()
        raise _disk(repo, exc) from None
    except BaseException:
        writer.abort()
        raise


def _disk(repo: Path, exc: OSError) -> Exception:
    from sglforge.errors import DISK_HINT, LocalDiskError

    folder = str(Path(repo) / "objects" / "pack")
    found = disk_error(exc, folder)
    return found or LocalDiskError(
        f"{folder}: cannot write a pack ({exc.strerror or exc})", DISK_HINT
    )
