"""Reading sglforge's TOML files: one reader for every file and table.

``read_toml`` turns a file into data or a ConfigError naming it (missing, unreadable, not
UTF-8 with the offending byte, invalid TOML). ``Table`` reads one table of it with typed
access; keys nobody asked for are refused at ``done()`` with the closest known key offered
("did you mean ..."), so a typo never silently means "the default".
"""

from __future__ import annotations

import difflib
import math
import tomllib
from pathlib import Path
from typing import Any

from sglforge.errors import ConfigError

REQUIRED: Any = object()

_WANT = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "strs": "a list of strings",
    "ints": "a list of integers",
    "table": "a table",
    "tables": "a list of tables",
}


def read_toml(path: Path, what: str, hint: str | None = None) -> dict[str, Any]:
    """A TOML file's data; ConfigError (exit 2) naming the file for any reason it is unusable.

    TOML is UTF-8 by definition: other bytes are refused naming the offset, not decoded to
    replacement characters or left to crash later.
    """
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such {what}", hint or f"create {path}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
            f"a {what} is a UTF-8 TOML file",
            f"re-encode {path} as UTF-8",
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}", f"fix {path}") from None


def did_you_mean(word: str, known: list[str] | set[str] | tuple[str, ...]) -> str:
    """`` (did you mean 'x'?)`` when a known word is close to ``word``, else ``""``."""
    close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


class Table:
    """One TOML table being read: typed access, and unknown keys rejected at the end."""

    def __init__(self, data: Any, path: Path, where: str) -> None:
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: [{where}] must be a table", f"see {path}")
        self.data, self.path, self.where = data, path, where
        self.seen: set[str] = set()

    def _key(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def _bad(self, key: str, want: str) -> ConfigError:
        return ConfigError(
            f"{self.path}: '{self._key(key)}' must be {want}, not {self.data[key]!r}",
            f"fix '{self._key(key)}' in {self.path}",
        )

    def get(self, key: str, kind: str, default: Any = REQUIRED) -> Any:
        """The value of ``key`` checked to be of ``kind`` (see ``_WANT``), else ``default``."""
        self.seen.add(key)
        if key not in self.data:
            self._misspelt(key)
            if default is REQUIRED:
                raise ConfigError(
                    f"{self.path}: missing '{self._key(key)}'", f"add it to {self.path}"
                )
            return default
        v = self.data[key]
        if kind == "str" and isinstance(v, str):
            return v
        if kind == "int" and isinstance(v, int) and not isinstance(v, bool):
            return v
        if kind == "float" and isinstance(v, int | float) and not isinstance(v, bool):
            if math.isfinite(v):
                return float(v)
            raise self._bad(key, "a finite number")
        if kind == "bool" and isinstance(v, bool):
            return v
        if kind == "strs" and isinstance(v, list) and all(isinstance(x, str) for x in v):
            return tuple(v)
        if kind == "ints" and isinstance(v, list):
            if all(isinstance(x, int) and not isinstance(x, bool) for x in v):
                return tuple(v)
        if kind == "table" and isinstance(v, dict):
            return v
        if kind == "tables" and isinstance(v, list) and all(isinstance(x, dict) for x in v):
            return v
        raise self._bad(key, _WANT[kind])

    def number(
        self, key: str, kind: str, default: Any = REQUIRED, *, low: float = 0, strict: bool = True
    ) -> Any:
        """A finite int or float above ``low`` (or equal to it, with ``strict`` False)."""
        v = self.get(key, kind, default)
        if v is None or key not in self.data:
            return v
        if v < low or (strict and v == low):
            bound = f"greater than {low:g}" if strict else f"at least {low:g}"
            raise self._bad(key, f"{'an integer' if kind == 'int' else 'a number'} {bound}")
        return v

    def _misspelt(self, key: str) -> None:
        # An absent key next to an unread one that looks like it is a typo, not a default:
        # say so before a default (or a "missing" error about it) hides the real cause.
        unread = [k for k in self.data if k not in self.seen]
        close = difflib.get_close_matches(key, unread, n=1, cutoff=0.75)
        if close:
            raise ConfigError(
                f"{self.path}: unknown key '{self._key(close[0])}' (did you mean '{key}'?)",
                f"rename it to '{key}' in {self.path}",
            )

    def table(self, key: str, default: Any = None) -> Table:
        """The sub-table ``key`` (an empty one when absent and no other default is given)."""
        return Table(
            self.get(key, "table", {} if default is None else default),
            self.path,
            self._key(key),
        )

    def items(self) -> list[tuple[str, Any]]:
        """Every key and value, all counted as read (for tables keyed by names)."""
        self.seen.update(self.data)
        return list(self.data.items())

    def expect(self, keys: set[str]) -> None:
        """Refuse, now, any key outside ``keys`` (before other checks read the table)."""
        self.done(also=keys)
        self.seen.clear()

    def done(self, also: set[str] | None = None) -> None:
        """Refuse keys nobody read (``also``: keys read elsewhere), with a suggestion."""
        known = self.seen | (also or set())
        unknown = sorted(set(self.data) - known)
        if unknown:
            listed = ", ".join(sorted(known)) or "none"
            raise ConfigError(
                f"{self.path}: unknown key '{self._key(unknown[0])}'"
                f"{did_you_mean(unknown[0], known)}",
                f"known keys in [{self.where or 'top level'}]: {listed}",
            )
