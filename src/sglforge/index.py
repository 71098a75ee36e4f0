"""The package index pip would read: its configuration, any standard index shape, checked
downloads.

**Configuration** is pip's own: what ``pip config list`` reports, the ``pip.conf`` files,
``$PIP_CONFIG_FILE`` and the ``PIP_*`` variables merged as pip merges them (read here on Linux
for pip 22-26, by pip's own loader or command elsewhere), with ``$SGLFORGE_PYPI_URL`` taking
precedence over pip's ``index-url``. A user who has configured pip has configured sglforge:
``index-url``, ``extra-index-url``, ``find-links``, ``no-index``, ``cert``, ``client-cert`` and
``proxy`` are honoured; credentials come from the URL or from ``~/.netrc`` (requests reads it,
as pip does). Values are taken as ``pip download`` takes them (pip's
``ConfigOptionParser._get_ordered_configuration_items``): the ``PIP_*`` variables over a file's
``[download]`` section over ``[global]``; an empty value is no value. A configuration file pip
would refuse is refused, naming it.

**Index shapes.** Each index URL is read as a simple repository (PEP 691 JSON and PEP 503 HTML
pages, content-negotiated; a ``file://`` index or a plain folder of archives too), and, when it
has no simple page for the project, through the legacy JSON API (``<base>/pypi/<project>/json``).
Pages are parsed by ``pypi-simple`` (chosen over more parsing of our own: it is maintained,
implements both simple APIs, resolves every URL against the page it came from and reads
PEP 592 yanking and hash fragments). The legacy JSON answer is ours to read, and each of its
URLs is resolved against its page too.

**Integrity.** A download is streamed to a temporary file beside its destination, hashed as it
arrives and renamed in only when the sha256 matches the index's; a file the index gives no
sha256 for is taken with a loud warning, and the digest computed here is what the caller
records. Every wait has a deadline: a per-read timeout and an overall one per request, so a
server that trickles bytes is cut off too. 5xx answers, 429 and connection resets are retried
with backoff. Credentials in an index URL never reach a message (``sglforge.urls``).
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import math
import os
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

from packaging.utils import canonicalize_name

from sglforge.errors import LocalDiskError, UpstreamError
from sglforge.urls import shown
from sglforge.util import abort_response as _abort
from sglforge.util import deadline as _deadline
from sglforge.util import one_line, run_probe

INDEX_ENV = "SGLFORGE_PYPI_URL"
TIMEOUT_ENV = "SGLFORGE_PIP_TIMEOUT"
DEFAULT_INDEX = "https://pypi.org/simple"
# An index page larger than this is refused (PyPI's largest project pages are a few MB).
PAGE_CAP = 64 << 20
# pip's keys sglforge honours, as `pip config list` spells them
_KEYS = ("index-url", "extra-index-url", "find-links", "no-index", "cert", "client-cert", "proxy")
_SECTION_ORDER = ("global", "download", ":env:")  # later wins, as in pip download


@dataclass(frozen=True)
class Index:
    """One place packages are listed: an index URL (simple or legacy JSON) or a find-links
    location. ``origin`` says where it was configured, for messages."""

    url: str
    origin: str
    find_links: bool = False

    @property
    def shown(self) -> str:
        return shown(self.url)


@dataclass(frozen=True)
class IndexConfig:
    indexes: tuple[Index, ...]
    verify: str | bool = True
    client_cert: str | None = None
    proxy: str | None = None

    def describe(self) -> str:
        """The indexes as a message names them (never with credentials)."""
        return ", ".join(ix.shown for ix in self.indexes) or "no index (pip's no-index is set)"

    def explain(self) -> str:
        """The indexes with where each was configured (``-v``), never with credentials."""
        return ", ".join(
            f"{ix.shown} (from {ix.origin or 'pip config'})" for ix in self.indexes
        ) or ("no index (pip's no-index is set)")


@dataclass(frozen=True)
class File:
    """One distribution file an index lists."""

    filename: str
    url: str
    sha256: str  # '' when the index gives none
    yanked: bool
    index: Index
    size: int | None = None


@dataclass
class _Memo:
    config: dict[tuple[str, ...], IndexConfig] = field(default_factory=dict)
    pages: dict[tuple[Index, str], list[File]] = field(default_factory=dict)
    # one session per configuration and thread: its TLS context (the CA bundle read once)
    # and its open connections serve the pages and the download after them
    sessions: dict[tuple[IndexConfig, int], Any] = field(default_factory=dict)


_MEMO = _Memo()


def timeouts() -> tuple[float, float]:
    """(seconds to wait for one read, seconds one request may take in all)."""
    raw = os.environ.get(TIMEOUT_ENV, "30")
    try:
        each = float(raw)
    except ValueError:
        each = 30.0
    if not math.isfinite(each) or each <= 0:
        each = 30.0 if not math.isfinite(each) or math.isnan(each) else 1.0
    each = min(max(each, 1.0), 3600.0)
    return each, each * 20


# --- configuration ---------------------------------------------------------------------------


def _pip_config_here() -> dict[str, str] | None:
    """What ``pip config list`` reports, read by pip's own configuration loader in this
    process (the command's code minus a second interpreter and pip's command line: half
    a second before the first download); None when this pip does not offer it."""
    if "PIP_ISOLATED" in os.environ:
        return None  # pip's options read it; the command itself decides what it means
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from pip._internal.configuration import Configuration

            loaded = Configuration(isolated=False)
            loaded.load()
            return _flat(loaded.items())
    except Exception:  # noqa: BLE001 - another pip, a broken config: ask the command
        return None


def _flat(items: Any) -> dict[str, str]:
    """``Configuration.items()`` as ``{"section.key": value}``, whichever shape this pip
    gives: pip < 25.2 yields ``(key, value)`` merged already; pip >= 25.2 yields
    ``(file, {key: value})`` per file in precedence order, later files winning (as its
    option parser pools them)."""
    out: dict[str, str] = {}
    for key, value in items:
        if isinstance(value, dict):
            out.update((str(k), str(v)) for k, v in value.items())
        else:
            out[str(key)] = str(value)
    return out


# pip's own configuration loader costs a third of a second in imports (its exceptions, logging
# and rich) before the first byte is fetched; on Linux the files and their precedence are read
# here as pip 22.0-26.2 reads them, which tests/integration/test_index_pip_config.py compares
# with the installed pip and with the newest pip's wheel. Cited from pip's
# src/pip/_internal/configuration.py (get_configuration_files, iter_config_files,
# _load_config_files, _construct_parser, _normalized_keys, get_environ_vars; OVERRIDE_ORDER =
# GLOBAL, USER, SITE, ENV, ENV_VAR) and src/pip/_internal/utils/appdirs.py (site_config_dirs:
# $XDG_CONFIG_DIRS or /etc/xdg, then /etc; user_config_dir: $XDG_CONFIG_HOME or ~/.config).
_PIP_READ = (22, 26)  # the pip majors this reader mirrors; any other pip is asked itself


class _Unreadable(Exception):
    """A pip configuration file pip itself would refuse."""


def _pip_config_read() -> dict[str, str] | None:
    """What pip's loader gives (``_pip_config_here``), without importing it: the merged
    ``{"section.key": value}`` of pip's configuration files and ``PIP_*`` variables. None
    where this reader is not pip's (another platform or pip, isolated mode, a
    ``$PIP_CONFIG_FILE`` naming one of the standard files): the caller asks pip."""
    if sys.platform != "linux" or "PIP_ISOLATED" in os.environ:
        return None
    try:
        import pip

        major = int(str(pip.__version__).split(".")[0])
    except Exception:  # noqa: BLE001 - no pip, or a version this reader cannot tell
        return None
    if not _PIP_READ[0] <= major <= _PIP_READ[1]:
        return None
    env_file = os.environ.get("PIP_CONFIG_FILE")
    xdg_dirs = os.environ.get("XDG_CONFIG_DIRS", "")
    xdg_dirs = xdg_dirs if xdg_dirs.strip() else "/etc/xdg"
    xdg_home = os.environ.get("XDG_CONFIG_HOME", "")
    xdg_home = xdg_home if xdg_home.strip() else os.path.expanduser("~/.config")
    glob = [os.path.join(d, "pip", "pip.conf") for d in xdg_dirs.split(os.pathsep)]
    glob.append("/etc/pip.conf")
    user = [os.path.join(os.path.expanduser("~"), ".pip", "pip.conf")]
    user.append(os.path.join(xdg_home, "pip", "pip.conf"))
    site = [os.path.join(sys.prefix, "pip.conf")]
    if env_file is not None and env_file in (*glob, *user, *site):
        return None  # one file in two places: pip versions disagree on its precedence
    files: list[str] = []
    if env_file != os.devnull:
        files += glob
        if not (env_file and os.path.exists(env_file)):
            files += user
        files += site
        files += [env_file] if env_file is not None else []
    out: dict[str, str] = {}
    for fname in files:
        out.update(_pip_conf_file(fname))
    for key, val in os.environ.items():
        if key.startswith("PIP_") and key[4:].lower() not in ("version", "help"):
            out[":env:." + _pip_name(key[4:])] = val
    return out


def _pip_name(name: str) -> str:
    name = name.lower().replace("_", "-")
    return name[2:] if name.startswith("--") else name


def _pip_conf_file(fname: str) -> dict[str, str]:
    """One configuration file's ``{"section.key": value}`` as pip parses it (RawConfigParser,
    the locale's encoding); {} when it does not exist."""
    if not os.path.exists(fname):
        return {}
    import configparser
    import locale

    parser = configparser.RawConfigParser()
    encoding = locale.getpreferredencoding(False)
    try:
        parser.read(fname, encoding=encoding)
    except UnicodeDecodeError:
        raise _Unreadable(f"{fname}: it holds characters that are not {encoding}") from None
    except configparser.Error as exc:
        raise _Unreadable(f"{fname}: {one_line(str(exc))}") from None
    return {
        f"{section}.{_pip_name(name)}": value
        for section in parser.sections()
        for name, value in parser.items(section)
    }


def _pip_config() -> dict[str, str]:
    """What ``pip config list`` reports: ``{"global.index-url": "...", ":env:.cert": ...}``."""
    try:
        here = _pip_config_read()
    except _Unreadable as exc:
        raise UpstreamError(
            f"pip's configuration cannot be read: {exc}",
            "fix that file (`pip config debug` lists the files pip reads); pip itself refuses it",
        ) from None
    if here is not None:
        return here
    here = _pip_config_here()
    if here is not None:
        return here
    env = dict(os.environ, PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    code, out = run_probe([sys.executable, "-m", "pip", "config", "list"], 60, env)
    found: dict[str, str] = {}
    if code == 0:
        for line in out.splitlines():
            key, sep, raw = line.partition("=")
            if not sep:
                continue
            try:
                value = ast.literal_eval(raw)
            except (ValueError, SyntaxError):
                value = raw
            found[key.strip()] = str(value)
        return found
    # pip cannot be run: its environment variables at least
    for name in _KEYS:
        value = os.environ.get("PIP_" + name.upper().replace("-", "_"))
        if value is not None:
            found[f":env:.{name}"] = value
    return found


def _pick(conf: dict[str, str], key: str) -> tuple[str, str] | None:
    """(value, origin) of pip's ``key`` as pip download sees it."""
    for section in reversed(_SECTION_ORDER):
        name = f"{section}.{key}"
        if conf.get(name):  # an empty value is no value (pip's option parser drops it)
            origin = (
                f"$PIP_{key.upper().replace('-', '_')}"
                if section == ":env:"
                else f"pip config [{section}] {key}"
            )
            return conf[name], origin
    return None


def _truthy(value: str) -> bool:
    return value.strip().lower() in {"1", "true", "yes", "on"}


def config() -> IndexConfig:
    """The index configuration in force (read once per environment)."""
    names = (INDEX_ENV, "PIP_CONFIG_FILE", "HOME", "XDG_CONFIG_HOME", "VIRTUAL_ENV")
    key = tuple(
        f"{k}={v}"
        for k, v in sorted(os.environ.items())
        if k in names or k.startswith("PIP_") or k.lower().endswith("_proxy")
    )
    if key in _MEMO.config:
        return _MEMO.config[key]
    conf = _pip_config()
    indexes: list[Index] = []
    ours = os.environ.get(INDEX_ENV, "").strip()
    no_index = _pick(conf, "no-index")
    if ours:
        indexes.append(Index(ours, f"${INDEX_ENV}"))
    elif not (no_index and _truthy(no_index[0])):
        main = _pick(conf, "index-url")
        indexes.append(Index(*main) if main else Index(DEFAULT_INDEX, "pip's default index"))
    if not ours and not (no_index and _truthy(no_index[0])):
        extra = _pick(conf, "extra-index-url")
        for url in extra[0].split() if extra else []:
            indexes.append(Index(url, extra[1] if extra else ""))
    links = _pick(conf, "find-links")
    if links and not ours:
        for url in links[0].split():
            indexes.append(Index(url, links[1], find_links=True))
    cert = _pick(conf, "cert")
    client = _pick(conf, "client-cert")
    proxy = _pick(conf, "proxy")
    result = IndexConfig(
        indexes=tuple(dict.fromkeys(indexes)),
        verify=cert[0] if cert else True,
        client_cert=client[0] if client else None,
        proxy=proxy[0] if proxy else None,
    )
    _MEMO.config[key] = result
    return result


def explain() -> str:
    """The indexes in force and where each was configured (``IndexConfig.explain``)."""
    return config().explain()


def forget() -> None:
    """Drop what this process read from the indexes (tests, and a long-lived caller)."""
    _MEMO.pages.clear()
    _MEMO.config.clear()
    for http in _MEMO.sessions.values():
        http.close()
    _MEMO.sessions.clear()


# --- HTTP ------------------------------------------------------------------------------------


@contextlib.contextmanager
def _http(conf: IndexConfig) -> Iterator[Any]:
    """This thread's session for ``conf`` (``session``), made once and kept open for the
    process's later requests (``forget`` closes it)."""
    key = (conf, threading.get_ident())
    if key not in _MEMO.sessions:
        _MEMO.sessions[key] = session(conf)
    yield _MEMO.sessions[key]


def session(conf: IndexConfig) -> Any:
    """A requests session with pip's TLS and proxy settings, retrying transient faults."""
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    http = requests.Session()
    http.verify = conf.verify
    if conf.client_cert:
        http.cert = conf.client_cert
    if conf.proxy:
        http.proxies = {"http": conf.proxy, "https": conf.proxy}
    retry = Retry(
        total=4,
        connect=3,
        read=3,
        status=4,
        backoff_factor=0.5,
        status_forcelist=(429, 500, 502, 503, 504),
        allowed_methods=frozenset({"GET", "HEAD"}),
        respect_retry_after_header=True,
        raise_on_status=False,
    )
    adapter = HTTPAdapter(max_retries=retry)
    http.mount("http://", adapter)
    http.mount("https://", adapter)
    http.headers["User-Agent"] = "sglforge (pip-compatible index client)"
    return http


def _get(
    http: Any, url: str, *, accept: str, what: str, cap: int = PAGE_CAP
) -> tuple[int, str, bytes, str]:
    """(status, content type, body, final URL) of a GET, read with a size cap and a deadline."""
    import requests

    each, total = timeouts()
    try:
        res = http.get(url, headers={"Accept": accept}, timeout=each, stream=True)
    except requests.RequestException as exc:
        raise UpstreamError(
            f"the package index is unreachable: could not fetch {shown(url)} while {what}: "
            f"{type(exc).__name__}",
            "check the network or pip's index settings (`pip config list`), or set "
            f"${INDEX_ENV}=URL",
        ) from None
    with res, _deadline(total, lambda: _abort(res)) as fired:
        chunks: list[bytes] = []
        size = 0
        try:
            for chunk in res.iter_content(1 << 16):
                size += len(chunk)
                if size > cap:
                    raise UpstreamError(
                        f"{shown(url)}: the answer is larger than {cap >> 20} MiB while {what}",
                        "check the index URL: this is not an index page",
                    )
                chunks.append(chunk)
        except (requests.RequestException, OSError, AttributeError, ValueError) as exc:
            if fired.is_set():
                raise _too_slow(url, total, what) from None
            raise UpstreamError(
                f"{shown(url)}: the answer broke off while {what} ({type(exc).__name__})",
                "retry; check the network or pip's index settings (`pip config list`)",
            ) from None
        if fired.is_set():
            raise _too_slow(url, total, what)
        return res.status_code, res.headers.get("Content-Type", ""), b"".join(chunks), res.url


def _too_slow(url: str, total: float, what: str) -> UpstreamError:
    return UpstreamError(
        f"{shown(url)}: no complete answer within {total:g} s while {what}",
        f"check the network; set ${TIMEOUT_ENV}=SECONDS (per read; a request may take 20x) "
        "to wait longer",
    )


# --- listing ---------------------------------------------------------------------------------

_ACCEPT_SIMPLE = (
    "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, "
    "text/html;q=0.1"
)


def files(project: str) -> list[File]:
    """Every distribution file of ``project`` on the configured indexes, in index order.

    An index that has no page for the project is passed over; one that cannot be reached is
    an error (a silent fallback to another index could pick other bytes).
    """
    conf = config()
    name = canonicalize_name(project)
    if not conf.indexes:
        raise UpstreamError(
            f"pypi:{project}: no package index configured (pip's no-index is set)",
            f"set ${INDEX_ENV}=URL, or unset PIP_NO_INDEX / no-index in pip.conf",
        )
    from sglforge.progress import current

    found: list[File] = []
    with _http(conf) as http:
        for ix in conf.indexes:
            memo = (ix, name)
            if memo not in _MEMO.pages:
                _MEMO.pages[memo] = _list(http, ix, name, project)
                # -v: which index answered, and where that index was configured
                kind = "find-links" if ix.find_links else "index"
                current().detail(
                    f"{kind} {ix.shown} (from {ix.origin or 'pip config'}): "
                    f"{len(_MEMO.pages[memo])} files of {project}"
                )
            found.extend(_MEMO.pages[memo])
    return found


def _list(http: Any, ix: Index, name: str, project: str) -> list[File]:
    url = ix.url.strip()
    if url.startswith("file:") or "://" not in url:
        return _list_local(ix, name, project)
    if ix.find_links:
        status, ctype, body, final = _get(
            http, url, accept="text/html", what=f"reading the find-links page for {project}"
        )
        if status != 200:
            return []
        return _from_html(ix, project, body, final)
    base = url.rstrip("/")
    candidates = [f"{base}/{name}/"]
    if not base.endswith("/simple"):
        candidates.append(f"{base}/simple/{name}/")  # a root given without /simple
    for page in candidates:
        status, ctype, body, final = _get(
            http, page, accept=_ACCEPT_SIMPLE, what=f"listing the releases of {project}"
        )
        if status == 200:
            return _from_simple(ix, project, ctype, body, final)
        if status == 401 or status == 403:
            raise UpstreamError(
                f"pypi:{project}: {shown(page)} refused the request ({status})",
                "check the credentials in the index URL or ~/.netrc",
            )
        if status >= 500:
            raise UpstreamError(
                f"pypi:{project}: {shown(page)} answered {status} (after retries)",
                "retry later, or check the index",
            )
    # No simple page: the legacy JSON API (PyPI's, and mirrors serving it)
    root = base.removesuffix("/simple")
    page = f"{root}/pypi/{name}/json"
    status, ctype, body, final = _get(
        http, page, accept="application/json", what=f"listing the releases of {project}"
    )
    if status == 200:
        return _from_legacy_json(ix, project, body, final)
    if status >= 500:
        raise UpstreamError(
            f"pypi:{project}: {shown(page)} answered {status} (after retries)",
            "retry later, or check the index",
        )
    return []


def _malformed(ix: Index, project: str, url: str, exc: BaseException) -> UpstreamError:
    return UpstreamError(
        f"pypi:{project}: {shown(url)} is not a readable index page "
        f"({type(exc).__name__}: {_first_lines(exc)})",
        f"check the index configured by {ix.origin}",
    )


def _first_lines(exc: BaseException) -> str:
    """A parser's error as one line: its first lines joined (pydantic's text spans many)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return one_line("; ".join(lines[:3]), 160)


def _from_simple(ix: Index, project: str, ctype: str, body: bytes, url: str) -> list[File]:
    kind = ctype.split(";", 1)[0].strip().lower()
    if kind == "application/vnd.pypi.simple.v1+json":
        return _from_pep691(ix, project, body, url)
    from pypi_simple import ProjectPage

    try:
        if kind in ("text/html", "application/vnd.pypi.simple.v1+html", ""):
            page = ProjectPage.from_html(project, body, url)
        else:
            raise ValueError(f"content type {kind!r}")
    except Exception as exc:  # noqa: BLE001 - whatever the parser raises on bad input
        raise _malformed(ix, project, url, exc) from None
    return [_file(ix, p) for p in page.packages]


def _from_pep691(ix: Index, project: str, body: bytes, url: str) -> list[File]:
    """A PEP 691 JSON project page (read here: the parser's import alone costs a second, more
    than the page). Major API version 1; ``yanked`` a boolean or a reason (PEP 592/691)."""
    import json

    try:
        data = json.loads(body)
        meta = data.get("meta") or {}
        major = str(meta.get("api-version", "1.0")).split(".")[0]
        if major != "1":
            raise ValueError(f"api-version {meta.get('api-version')!r}, this client reads 1.x")
        entries = data["files"]
        if not isinstance(entries, list):
            raise TypeError("files is not a list")
        out: list[File] = []
        for f in entries:
            if not isinstance(f, dict) or not isinstance(f.get("filename"), str):
                raise TypeError("a file is not an object with a filename")
            if not isinstance(f.get("url"), str):
                raise TypeError(f"{f['filename']}: no url")
            hashes = f.get("hashes") if isinstance(f.get("hashes"), dict) else {}
            yanked = f.get("yanked", False)
            out.append(
                File(
                    filename=f["filename"],
                    url=urljoin(url, f["url"]),  # relative to the page (PEP 691)
                    sha256=str((hashes or {}).get("sha256", "")).lower(),
                    yanked=bool(yanked) if not isinstance(yanked, str) else True,
                    index=ix,
                    size=f["size"] if isinstance(f.get("size"), int) else None,
                )
            )
        return out
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise _malformed(ix, project, url, exc) from None


def _from_html(ix: Index, project: str, body: bytes, url: str) -> list[File]:
    from pypi_simple import ProjectPage

    try:
        page = ProjectPage.from_html(project, body, url)
    except Exception as exc:  # noqa: BLE001
        raise _malformed(ix, project, url, exc) from None
    want = canonicalize_name(project)
    return [
        _file(ix, p) for p in page.packages if p.project and canonicalize_name(p.project) == want
    ]


def _file(ix: Index, pkg: Any) -> File:
    digests = pkg.digests or {}
    return File(
        filename=pkg.filename,
        url=pkg.url,
        sha256=str(digests.get("sha256", "")).lower(),
        yanked=bool(pkg.is_yanked),
        index=ix,
        size=pkg.size,
    )


def _from_legacy_json(ix: Index, project: str, body: bytes, url: str) -> list[File]:
    import json

    try:
        data = json.loads(body)
        releases = data["releases"]
        if not isinstance(releases, dict):
            raise TypeError("releases is not an object")
        out: list[File] = []
        for entries in releases.values():
            for f in entries or []:
                if not isinstance(f, dict) or not isinstance(f.get("filename"), str):
                    raise TypeError("a release file is not an object with a filename")
                digests = f.get("digests") if isinstance(f.get("digests"), dict) else {}
                out.append(
                    File(
                        filename=f["filename"],
                        # relative to the page it came from (bandersnatch mirrors, proxies)
                        url=urljoin(url, str(f.get("url", ""))),
                        sha256=str((digests or {}).get("sha256", "")).lower(),
                        yanked=bool(f.get("yanked")),
                        index=ix,
                        size=f["size"] if isinstance(f.get("size"), int) else None,
                    )
                )
        return out
    except (ValueError, KeyError, TypeError) as exc:
        raise _malformed(ix, project, url, exc) from None


def _local_path(url: str) -> Path:
    if url.startswith("file:"):
        return Path(unquote(urlsplit(url).path))
    return Path(url).expanduser()


def _list_local(ix: Index, name: str, project: str) -> list[File]:
    """A folder: an index root holding ``<project>/index.html`` (or files), or a find-links
    folder of archives."""
    root = _local_path(ix.url)
    folder = root if ix.find_links else root / name
    page = folder / "index.html"
    if page.is_file():
        return _from_html(ix, project, page.read_bytes(), folder.resolve().as_uri() + "/")
    if not folder.is_dir():
        return []
    want = canonicalize_name(project)
    out = []
    for path in sorted(folder.iterdir()):
        if not path.is_file() or not path.name.endswith((".whl", ".tar.gz", ".zip")):
            continue
        head = path.name.split("-", 1)[0]
        if canonicalize_name(head) != want:
            continue
        out.append(File(path.name, path.resolve().as_uri(), "", False, ix, path.stat().st_size))
    return out


# --- download --------------------------------------------------------------------------------


def download(
    file: File,
    dest: Path,
    *,
    what: str,
    on_bytes: Callable[[int, int | None], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> str:
    """Download ``file`` to ``dest`` (temporary file, checked, renamed in); its sha256.

    ``on_bytes(n, total)`` sees the bytes as they arrive. A sha256 mismatch is an error and
    leaves nothing behind; a file without an index sha256 is taken after ``warn``.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".download-{os.getpid()}-{threading.get_ident()}-{dest.name}")
    digest = hashlib.sha256()
    try:
        if file.url.startswith("file:"):
            _copy_local(file, tmp, digest, on_bytes)
        else:
            _fetch(file, tmp, digest, what, on_bytes)
        got = digest.hexdigest()
        if file.sha256 and got != file.sha256:
            raise UpstreamError(
                f"{what}: {file.filename} does not match the index's sha256 "
                f"(index {file.sha256[:16]}..., got {got[:16]}...); nothing was kept",
                f"retry; if it persists the index ({file.index.shown}) serves other bytes "
                "than it lists: tell its operator",
            )
        if not file.sha256 and not file.url.startswith("file:") and warn:
            warn(
                f"{file.index.shown} gives no sha256 for {file.filename}: taken unverified; "
                f"its sha256 {got} is recorded and checked on every use"
            )
        os.replace(tmp, dest)
        return got
    except OSError as exc:
        import errno

        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES):
            raise LocalDiskError(
                f"cannot write {dest.parent}: {os.strerror(exc.errno or 0)} while {what}",
                "free space there, or point $SGLFORGE_CACHE at another disk",
            ) from None
        raise UpstreamError(f"{what}: {file.filename}: {exc}", "retry") from None
    finally:
        # a mismatch, an error or a signal: no temporary file is left behind
        with contextlib.suppress(OSError):
            tmp.unlink()


def _copy_local(
    file: File, tmp: Path, digest: Any, on_bytes: Callable[[int, int | None], None] | None
) -> None:
    src = _local_path(file.url)
    if on_bytes:
        on_bytes(0, src.stat().st_size)
    with open(src, "rb") as fin, open(tmp, "wb") as fout:
        while chunk := fin.read(1 << 20):
            fout.write(chunk)
            digest.update(chunk)
            if on_bytes:
                on_bytes(len(chunk), file.size)


def _fetch(
    file: File,
    tmp: Path,
    digest: Any,
    what: str,
    on_bytes: Callable[[int, int | None], None] | None,
) -> None:
    import requests

    each, total = timeouts()
    conf = config()
    # a wheel needs more than a page: allow 20 reads' worth, and at least 1 MB/s for its size
    allowed = max(total, (file.size or 0) / 1e6)
    with _http(conf) as http:
        try:
            res = http.get(file.url, stream=True, timeout=each, auth=_same_host_auth(file))
        except requests.RequestException as exc:
            raise UpstreamError(
                f"{what}: could not fetch {shown(file.url)} ({type(exc).__name__})",
                "retry; check the network or pip's index settings (`pip config list`)",
            ) from None
        with res, _deadline(allowed, lambda: _abort(res)) as fired:
            if res.status_code != 200:
                raise UpstreamError(
                    f"{what}: {shown(file.url)} answered {res.status_code}",
                    "retry later, or check the index",
                )
            size = res.headers.get("Content-Length", "")
            known = int(size) if size.isdigit() else file.size
            if on_bytes:
                on_bytes(0, known)
            try:
                with open(tmp, "wb") as fh:
                    for chunk in res.iter_content(1 << 18):
                        fh.write(chunk)
                        digest.update(chunk)
                        if on_bytes:
                            on_bytes(len(chunk), known)
            except (requests.RequestException, AttributeError, ValueError) as exc:
                if fired.is_set():
                    raise _too_slow(file.url, allowed, what) from None
                raise UpstreamError(
                    f"{what}: the download of {file.filename} broke off ({type(exc).__name__})",
                    "retry",
                ) from None
            if fired.is_set():
                raise _too_slow(file.url, allowed, what)


def _same_host_auth(file: File) -> tuple[str, str] | None:
    """The index URL's credentials for a file on the index's own host (as pip does); a file
    elsewhere gets none, and requests drops them on a redirect to another host."""
    target, origin = urlsplit(file.url), urlsplit(file.index.url)
    if target.username or not origin.username:
        return None
    if (target.hostname, target.port, target.scheme) != (
        origin.hostname,
        origin.port,
        origin.scheme,
    ):
        return None
    return unquote(origin.username), unquote(origin.password or "")


def copy_into(src: Path, dest: Path) -> None:
    """Hard-link (else copy) ``src`` to ``dest`` through a temporary name."""
    tmp = dest.with_name(f".link-{os.getpid()}-{dest.name}")
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dest)


__all__ = [
    "DEFAULT_INDEX",
    "File",
    "INDEX_ENV",
    "Index",
    "IndexConfig",
    "LocalDiskError",
    "TIMEOUT_ENV",
    "config",
    "download",
    "files",
    "forget",
    "session",
    "timeouts",
]
