"""The built image's self-check: Python in the image imports the patched files, nothing else.

An overlay that lands beside the package Python really imports (as happened with a base
probed from the release images' WORKDIR) builds fine and carries labels that say "patched".
So after every build the image is run (no network), from its own WORKDIR and from ``/``,
and the import system is asked, without executing any package, where each patched module
resolves: it must be the file the build put there, with the manifest's sha256, and an
unpatched sibling module (``sglang.srt.server_args``) must still resolve. Data files under
the package (JIT kernel headers) are looked up in their package's search path the same way.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from sglforge.errors import BuildError

SIBLING = "sglang.srt.server_args"
PACKAGE_ROOT = ("python", "sglang")

# Runs inside the image: `python3 -c SCRIPT REQUEST_JSON`. sys.path is left as Python sets
# it for `python3 -m sglang.launch_server` (the working directory first), and the walk asks
# sys.meta_path the way the import system does, one dotted component at a time, without
# running any __init__.py (the real one imports torch).
_SCRIPT = r"""
import hashlib, importlib.util, json, os, sys
req = json.loads(sys.argv[1])

def find(name):
    # importlib's own steps for `import name`, minus running any module: each parent package
    # is created from its spec and put in sys.modules (namespace packages compute their
    # path from there), then the children are looked up in the parent's __path__.
    path, spec = None, None
    parts = name.split(".")
    for i in range(len(parts)):
        full = ".".join(parts[: i + 1])
        spec = None
        for finder in sys.meta_path:
            fs = getattr(finder, "find_spec", None)
            if fs is None:
                continue
            try:
                spec = fs(full, path)
            except Exception:
                spec = None
            if spec is not None:
                break
        if spec is None:
            return None
        if i < len(parts) - 1:
            if spec.submodule_search_locations is None:
                return None
            if full not in sys.modules:
                sys.modules[full] = importlib.util.module_from_spec(spec)
            path = sys.modules[full].__path__
    return spec

def digest(path):
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError:
        return None

out = []
for item in req:
    found = None
    if item["module"]:
        spec = find(item["module"])
        if spec is not None and spec.origin and os.path.isfile(spec.origin):
            found = spec.origin
    elif item["package"]:
        spec = find(item["package"])
        if spec is not None and spec.submodule_search_locations is not None:
            for loc in spec.submodule_search_locations:
                if os.path.exists(os.path.join(loc, item["name"])):
                    found = os.path.join(loc, item["name"])
                    break
    elif os.path.exists(item["dest"]):
        found = item["dest"]
    real = os.path.realpath(found) if found else None
    out.append({"path": item["path"], "found": real, "sha256": digest(real) if real else None})
print("SGLFORGE-SELFCHECK " + json.dumps({"cwd": os.getcwd(), "results": out}))
"""


@dataclass(frozen=True)
class Expectation:
    """One file the build changed: where it must resolve in the image (None: deleted)."""

    path: str  # repository path, e.g. python/sglang/srt/models/deepseek_nextn.py
    dest: str | None
    sha256: str | None
    module: str | None = None  # dotted module name, for python files under the package
    package: str | None = None  # dotted package holding a data file under the package
    name: str = ""  # the data file's name inside ``package``

    def request(self) -> dict[str, str | None]:
        return {
            "path": self.path,
            "dest": self.dest,
            "module": self.module,
            "package": self.package,
            "name": self.name,
        }


@dataclass(frozen=True)
class Finding:
    """A file that does not resolve as the build says it does, from one working directory."""

    path: str
    cwd: str
    problem: str


def expectation(path: str, dest: str | None, sha256: str | None) -> Expectation:
    """How repository path ``path`` is looked up: as a module, a package data file, or a path."""
    parts = PurePosixPath(path).parts
    if parts[:2] != PACKAGE_ROOT or len(parts) < 3:
        return Expectation(path, dest, sha256)
    inner = parts[1:]  # sglang/...
    if not all(p.isidentifier() for p in inner[:-1]):
        return Expectation(path, dest, sha256)  # not importable: looked up as a path
    stem = inner[-1].removesuffix(".py")
    if inner[-1].endswith(".py") and stem.isidentifier():
        names = list(inner[:-1]) if stem == "__init__" else [*inner[:-1], stem]
        return Expectation(path, dest, sha256, module=".".join(names))
    return Expectation(path, dest, sha256, package=".".join(inner[:-1]), name=inner[-1])


def expectations(
    files: Iterable[tuple[str, str, str]], deleted: Iterable[tuple[str, str]], worktree: Path
) -> list[Expectation]:
    """The checks for a build: ``files`` are (path, dest, sha256), ``deleted`` (path, dest).

    An unpatched sibling module (``sglang.srt.server_args`` when the tree has it) is added:
    an overlay that shadows the package breaks it while the patched files still resolve.
    """
    out = [expectation(p, d, s) for p, d, s in files]
    out += [expectation(p, None, None) for p, _ in deleted]
    touched = {e.path for e in out}
    sibling = "python/" + SIBLING.replace(".", "/") + ".py"
    if sibling not in touched and (worktree / sibling).is_file():
        data = (worktree / sibling).read_bytes()
        out.append(expectation(sibling, "", hashlib.sha256(data).hexdigest()))
    return out


def findings(expected: Sequence[Expectation], answer: Mapping[str, Any]) -> list[Finding]:
    """What is wrong in one run's answer (``SGLFORGE-SELFCHECK`` JSON), per file."""
    cwd = str(answer.get("cwd", "?"))
    got: dict[str, dict[str, Any]] = {r["path"]: r for r in answer.get("results", [])}
    out: list[Finding] = []
    for e in expected:
        r = got.get(e.path, {})
        found, sha = r.get("found"), r.get("sha256")
        what = f"module {e.module}" if e.module else e.path
        if e.dest is None:
            if found:
                out.append(
                    Finding(e.path, cwd, f"{what} was deleted by the queue but resolves to {found}")
                )
        elif not found:
            out.append(Finding(e.path, cwd, f"{what} does not resolve at all"))
        elif e.dest and found != e.dest:
            out.append(Finding(e.path, cwd, f"{what} resolves to {found}, not to {e.dest}"))
        elif e.sha256 and sha != e.sha256:
            out.append(
                Finding(
                    e.path,
                    cwd,
                    f"{what} at {found} has sha256 {str(sha)[:12]}, "
                    f"the manifest says {e.sha256[:12]}",
                )
            )
    return out


def run(
    image: str,
    expected: Sequence[Expectation],
    labels: Mapping[str, str] | None = None,
) -> list[Finding]:
    """Run the check in ``image`` from its WORKDIR and from ``/``; every finding."""
    from sglforge.engine import containers

    request = json.dumps([e.request() for e in expected])
    out: list[Finding] = []
    for cwd in (None, "/"):
        text = containers.run_python(image, _SCRIPT, labels=labels, args=[request], working_dir=cwd)
        line = next((ln for ln in text.splitlines() if ln.startswith("SGLFORGE-SELFCHECK ")), "")
        if not line:
            raise BuildError(
                f"image {image}: the self-check printed no result from "
                f"{cwd or 'its WORKDIR'}: {text.strip()[-300:]}",
                f"docker run --rm --network none {image} python3 -c 'import sglang'",
            )
        out += findings(expected, json.loads(line.removeprefix("SGLFORGE-SELFCHECK ")))
    return out


def failure(image: str, found: Sequence[Finding]) -> BuildError:
    """The build error for a failed self-check, naming the first file (exit 6)."""
    first = found[0]
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return BuildError(
        f"image {image} failed its self-check from {first.cwd}: {first.problem}{more}; "
        "the image was removed",
        "sglforge build --dry-run shows where each file goes; check the base with "
        "`docker run --rm -w / BASE python3 -c 'import sglang; print(sglang.__file__)'`",
    )
