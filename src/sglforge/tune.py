"""``sglforge configs tune``: close a launch's tuned-table misses with aiter's own tuner.

On the GPU node, for one image and one scenario:

1. the coverage of the scenario's launch against the image's own aiter tables (items already
   installed in the image count as the image's) gives the missing keys;
2. they are written as aiter's untuned CSV (:func:`sglforge.coverage.untuned_csv`);
3. aiter's tuner runs inside the image, in a container with the scenario's profile (GPU devices
   and all) and the work folder mounted: ``python3 <aiter>/csrc/ck_gemm_moe_2stages_codegen/
   gemm_moe_tune.py -i untuned_fmoe.csv -o tuned_fmoe.csv``, plus ``--compare
   --update_improved`` when that tuner's ``--help`` lists them, plus the caller's arguments;
4. the tuner's rows for exactly the missing keys become a config item, the rows as the tuner
   wrote them (lines copied, never edited), ``upstream-status = "Pending"``, stamped with the
   image and its digest, aiter's version and commit, gfx, cu_num, the tuner's arguments, the
   sha256 of its input and output, and each row's time (``us``) as tuned.

Where a number is not known it is not written: the tuner's output has no "before" time per row
(aiter's tuner compares against its previous table with ``--compare``, not against the
heuristic), so ``time-before`` records the heuristic as not measured.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglforge import coverage
from sglforge.errors import ConfigError, SmokeError
from sglforge.queue.configs import CONFIGS_DIR, key_of
from sglforge.util import atomic_write

if TYPE_CHECKING:
    from sglforge.coverage import Coverage
    from sglforge.scenario.file import Scenario

TUNER = "csrc/ck_gemm_moe_2stages_codegen/gemm_moe_tune.py"
WORK = "/sglforge-tune"
TUNE_TIMEOUT = 6 * 3600  # seconds: JIT builds plus the search, per call
KEY = tuple(coverage.UNTUNED_HEADER.split(","))  # aiter's untuned key: what the tuner keys on

_FACTS = r"""
import json, os, sys, importlib.metadata as md
sys.path[:] = [p for p in sys.path if p not in ("", ".", os.getcwd())]
import importlib.util
spec = importlib.util.find_spec("aiter")
root = os.path.dirname(os.path.realpath(list(spec.submodule_search_locations)[0]))
commit = None
head = os.path.join(root, ".git", "HEAD")
if os.path.isfile(head):
    ref = open(head).read().strip()
    if ref.startswith("ref: "):
        p = os.path.join(root, ".git", ref[5:])
        commit = open(p).read().strip() if os.path.isfile(p) else None
    else:
        commit = ref
version = None
for name in ("amd-aiter", "aiter"):
    try:
        version = md.version(name)
        break
    except md.PackageNotFoundError:
        pass
print("SGLFORGE-TUNE " + json.dumps({"root": root, "commit": commit, "version": version}))
"""


@dataclass(frozen=True)
class Tuned:
    """What one tune run produced."""

    name: str
    csv_file: str  # relative to the project root
    meta_file: str
    rows: int
    asked: int  # missing keys handed to the tuner
    not_tuned: int  # missing keys the tuner returned no row for
    work: str  # the folder with the tuner's input, output and log


@dataclass(frozen=True)
class TuneRequest:
    """One ``configs tune`` run: the launch of ``scenario`` (for ``model_dir``) in ``image``."""

    image: str
    model_dir: Path
    scenario: Path
    name: str  # the config item to write: patches/configs/<name>.{csv,toml}
    tree: Path | None = None  # a release's python/ (None: the pin's worktree)
    tuner_args: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)  # on the tuner's containers


@dataclass
class _Tuning:
    """One tune run as its steps build it up."""

    root: Path
    req: TuneRequest
    say: Callable[[str], None]
    scenario: Scenario
    cov: Coverage
    untuned: bytes  # aiter's untuned CSV: exactly the missing keys
    asked: list[str]  # its data lines
    work: Path  # build/tune/<name>: the tuner's input, output and logs
    facts: dict[str, Any] = field(default_factory=dict)  # aiter's root, version and commit
    tuner_line: str = ""  # the tuner's command line as run


def tune(root: Path, req: TuneRequest, say: Callable[[str], None] = lambda _: None) -> Tuned:
    """Tune the misses of ``req``'s launch inside its image; write config item ``req.name``.

    The steps: ``_misses`` (the coverage of the launch on the image's own tables),
    ``_run_tuner`` (aiter's tuner in a container with the scenario's profile), ``_write_item``
    (the tuner's rows for exactly the missing keys, copied, and their stamp).
    """
    name = req.name
    if not name.replace("-", "").isalnum() or name != name.lower():
        raise ConfigError(f"item name {name!r}: lowercase letters, digits and dashes only")
    meta_rel = f"{CONFIGS_DIR}/{name}.toml"
    if (root / meta_rel).exists():
        raise ConfigError(f"{meta_rel} exists already", "pick another --name, or remove it first")
    run = _misses(root, req, say)
    data = _run_tuner(run)
    return _write_item(run, data)


def _misses(root: Path, req: TuneRequest, say: Callable[[str], None]) -> _Tuning:
    """The launch's lookups the image's aiter tables do not answer, as aiter's untuned CSV."""
    from sglforge.overlay_configs import base_aiter
    from sglforge.project import Project
    from sglforge.scenario.file import load_scenario

    scenario = load_scenario(req.scenario)
    base = base_aiter(req.image, req.labels)
    if base is None:
        raise ConfigError(f"image {req.image} has no aiter: nothing to tune with")
    gfx = scenario.target and _gfx(root, scenario.target) or "gfx950"
    from sglforge.construct.environment import image_facts, target_env

    cov = coverage.coverage(
        req.tree or coverage.default_tree(Project(root)),
        req.model_dir,
        scenario.args,
        base,
        (),
        gfx=gfx,
        environment=target_env(gfx, None, scenario, image_facts(req.image)),
    )
    untuned = coverage.untuned_csv(cov)
    asked = untuned.decode().strip().splitlines()[1:]
    if not asked:
        raise ConfigError(
            f"{req.scenario.name} on {req.image}: no tuned-table miss, nothing to tune",
            "sglforge configs coverage --base-image IMAGE ... lists the lookups",
        )
    work = root / "build" / "tune" / req.name
    work.mkdir(parents=True, exist_ok=True)
    atomic_write(work / "untuned_fmoe.csv", untuned)
    (work / "tuned_fmoe.csv").unlink(missing_ok=True)
    return _Tuning(root, req, say, scenario, cov, untuned, asked, work)


def _run_tuner(run: _Tuning) -> bytes:
    """aiter's own tuner on the untuned CSV, inside the image: its output file's bytes."""
    from sglforge.engine import containers

    image, work = run.req.image, run.work
    run.facts = json.loads(
        next(
            ln.removeprefix("SGLFORGE-TUNE ")
            for ln in containers.run_python(
                image, _FACTS, labels=run.req.labels, working_dir="/"
            ).splitlines()
            if ln.startswith("SGLFORGE-TUNE ")
        )
    )
    tuner = f"{run.facts['root']}/{TUNER}"
    profile = replace(
        run.scenario.container,
        mounts=(*run.scenario.container.mounts, containers.Mount(str(work), WORK, read_only=False)),
    )

    def call(args: Sequence[str], log: str, timeout: float) -> int:
        with containers.running(
            image,
            entrypoint=["python3", tuner],
            command=list(args),
            profile=profile,
            log_path=work / log,
            role="tune",
            labels=run.req.labels,
        ) as c:
            if not c.wait_exit(timeout):
                raise SmokeError(f"aiter's tuner did not finish within {timeout:g} s: {work / log}")
            c.drain_logs()
            return c.exit_code if c.exit_code is not None else -1

    call(["--help"], "tuner-help.log", 600)
    helptext = (work / "tuner-help.log").read_text(errors="replace")
    extra = [f for f in ("--compare", "--update_improved") if f in helptext]
    args = ["-i", f"{WORK}/untuned_fmoe.csv", "-o", f"{WORK}/tuned_fmoe.csv", *extra]
    args += list(run.req.tuner_args)
    run.tuner_line = f"python3 {tuner} {' '.join(args)}"
    run.say(f"tune: {len(run.asked)} missing key(s) -> {run.tuner_line}")
    code = call(args, "tuner.log", TUNE_TIMEOUT)
    out = work / "tuned_fmoe.csv"
    if code != 0 or not out.is_file():
        raise SmokeError(
            f"aiter's tuner exited {code} in {image} without {out.name}",
            f"read {work / 'tuner.log'}",
        )
    return out.read_bytes()


def _write_item(run: _Tuning, data: bytes) -> Tuned:
    """The tuner's lines for exactly the asked keys (as written, never edited) and the item's
    metadata, written as patches/configs/<name>.{csv,toml}."""
    from sglforge.engine import images as eng

    lines = data.decode().splitlines()
    header = next(csv.reader([lines[0]]))
    wanted = {key_of(dict(zip(KEY, ln.split(","), strict=True)), KEY) for ln in run.asked}
    kept, found = [lines[0]], set()
    for line in lines[1:]:
        row = dict(zip(header, next(csv.reader([line])), strict=False))
        key = key_of(row, KEY)
        if key in wanted and key not in found:
            kept.append(line)  # the tuner's line as written
            found.add(key)
    item_csv = ("\n".join(kept) + "\n").encode()
    rows = list(csv.DictReader(io.StringIO(item_csv.decode())))
    name, image = run.req.name, run.req.image
    csv_rel, meta_rel = f"{CONFIGS_DIR}/{name}.csv", f"{CONFIGS_DIR}/{name}.toml"
    info = eng.inspect(image)
    digest = (info.digest if info else None) or (info.id if info else "")
    stamp = _Stamp(
        name=name,
        image=image,
        digest=digest or "",
        facts=run.facts,
        gfx=run.cov.gfx,
        cu_num=run.cov.cu_num,
        tuner=run.tuner_line,
        untuned_sha=hashlib.sha256(run.untuned).hexdigest(),
        output_sha=hashlib.sha256(data).hexdigest(),
        target=run.scenario.target or "mi355x",
        scenario=run.req.scenario.name,
    )
    atomic_write(run.root / csv_rel, item_csv)
    atomic_write(run.root / meta_rel, _meta(stamp, rows))
    not_tuned = len(run.asked) - len(found)
    return Tuned(name, csv_rel, meta_rel, len(rows), len(run.asked), not_tuned, str(run.work))


def _gfx(root: Path, target: str) -> str | None:
    from sglforge.targets import load_targets

    try:
        return load_targets(root).resolve(target).gpu_arch
    except ConfigError:
        return None


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a TOML basic string is a JSON string for these characters


@dataclass(frozen=True)
class _Stamp:
    """Where a tuned item came from, as its metadata states it."""

    name: str
    image: str
    digest: str
    facts: Mapping[str, str | None]  # aiter's version and commit in the image
    gfx: str
    cu_num: int
    tuner: str  # the tuner's command line
    untuned_sha: str
    output_sha: str
    target: str
    scenario: str


def _meta(stamp: _Stamp, rows: Sequence[Mapping[str, str]]) -> str:
    times = []
    for r in rows:
        t, i, e, k, us = (r.get(c) for c in ("token", "inter_dim", "expert", "topk", "us"))
        times.append(f"  {_toml_str(f'token {t} inter_dim {i} expert {e} topk {k}: us {us}')},")
    lines = [
        "# A config item tuned by `sglforge configs tune` (not copied from upstream).",
        "[config]",
        'tool = "aiter"',
        'table = "tuned_fmoe"',
        f"target = {_toml_str(stamp.target)}",
        f"gfx = {_toml_str(stamp.gfx)}",
        'upstream-status = "Pending"',
        "origin = "
        + _toml_str(
            f"tuned by sglforge configs tune in {stamp.image} ({stamp.digest}) for "
            f"{stamp.scenario}: aiter {stamp.facts.get('version')} at "
            f"{stamp.facts.get('commit') or 'unknown commit'}"
        ),
        "description = "
        + _toml_str(
            f"aiter tuned fused-MoE rows for the lookups {stamp.scenario} missed on "
            f"{stamp.image}, as aiter's own tuner wrote them (rows copied, never edited)."
        ),
        f"tuned-image = {_toml_str(stamp.image)}",
        f"tuned-image-digest = {_toml_str(stamp.digest)}",
        f"tuned-aiter-version = {_toml_str(str(stamp.facts.get('version')))}",
        f"tuned-aiter-commit = {_toml_str(str(stamp.facts.get('commit')))}",
        f"tuned-gfx = {_toml_str(stamp.gfx)}",
        f"tuned-cu-num = {stamp.cu_num}",
        f"tuned-args = {_toml_str(stamp.tuner)}",
        f"tuned-input-sha256 = {_toml_str(stamp.untuned_sha)}",
        f"tuned-output-sha256 = {_toml_str(stamp.output_sha)}",
        'time-before = "not measured (the heuristic kernels are not timed by aiter\'s tuner)"',
        "time-after = [",
        *times,
        "]",
    ]
    return "\n".join(lines) + "\n"
