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
from dataclasses import dataclass, replace
from pathlib import Path

from sglforge import coverage
from sglforge.errors import ConfigError, SmokeError
from sglforge.patches.configs import CONFIGS_DIR, key_of
from sglforge.util import atomic_write

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


def tune(
    root: Path,
    image: str,
    model_dir: Path,
    scenario_path: Path,
    name: str,
    *,
    tree: Path | None = None,
    tuner_args: Sequence[str] = (),
    labels: Mapping[str, str] | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> Tuned:
    """Tune the misses of ``scenario_path``'s launch inside ``image``; write item ``name``."""
    from sglforge.engine import containers
    from sglforge.engine import images as eng
    from sglforge.overlay_configs import base_aiter
    from sglforge.smoke.scenario import load_scenario

    if not name.replace("-", "").isalnum() or name != name.lower():
        raise ConfigError(f"item name {name!r}: lowercase letters, digits and dashes only")
    meta_rel = f"{CONFIGS_DIR}/{name}.toml"
    if (root / meta_rel).exists():
        raise ConfigError(f"{meta_rel} exists already", "pick another --name, or remove it first")
    scenario = load_scenario(scenario_path)
    base = base_aiter(image, labels)
    if base is None:
        raise ConfigError(f"image {image} has no aiter: nothing to tune with")
    gfx = scenario.target and _gfx(root, scenario.target) or "gfx950"
    cov = coverage.coverage(
        tree or coverage.default_tree(root),
        model_dir,
        scenario.args,
        base,
        (),
        gfx=gfx,
        env=scenario.container.env,
    )
    untuned = coverage.untuned_csv(cov)
    asked = untuned.decode().strip().splitlines()[1:]
    if not asked:
        raise ConfigError(
            f"{scenario_path.name} on {image}: no tuned-table miss, nothing to tune",
            "sglforge configs coverage --base-image IMAGE ... lists the lookups",
        )
    work = root / "build" / "tune" / name
    work.mkdir(parents=True, exist_ok=True)
    atomic_write(work / "untuned_fmoe.csv", untuned)
    (work / "tuned_fmoe.csv").unlink(missing_ok=True)
    facts = json.loads(
        next(
            ln.removeprefix("SGLFORGE-TUNE ")
            for ln in containers.run_python(
                image, _FACTS, labels=labels, working_dir="/"
            ).splitlines()
            if ln.startswith("SGLFORGE-TUNE ")
        )
    )
    tuner = f"{facts['root']}/{TUNER}"
    profile = replace(
        scenario.container,
        mounts=(*scenario.container.mounts, containers.Mount(str(work), WORK, read_only=False)),
    )

    def run(args: Sequence[str], log: str, timeout: float) -> int:
        with containers.running(
            image,
            entrypoint=["python3", tuner],
            command=list(args),
            profile=profile,
            log_path=work / log,
            role="tune",
            labels=labels,
        ) as c:
            if not c.wait_exit(timeout):
                raise SmokeError(f"aiter's tuner did not finish within {timeout:g} s: {work / log}")
            c.drain_logs()
            return c.exit_code if c.exit_code is not None else -1

    run(["--help"], "tuner-help.log", 600)
    helptext = (work / "tuner-help.log").read_text(errors="replace")
    extra = [f for f in ("--compare", "--update_improved") if f in helptext]
    args = ["-i", f"{WORK}/untuned_fmoe.csv", "-o", f"{WORK}/tuned_fmoe.csv", *extra]
    args += list(tuner_args)
    say(f"tune: {len(asked)} missing key(s) -> python3 {tuner} {' '.join(args)}")
    code = run(args, "tuner.log", TUNE_TIMEOUT)
    out = work / "tuned_fmoe.csv"
    if code != 0 or not out.is_file():
        raise SmokeError(
            f"aiter's tuner exited {code} in {image} without {out.name}",
            f"read {work / 'tuner.log'}",
        )
    data = out.read_bytes()
    text = data.decode()
    lines = text.splitlines()
    header = next(csv.reader([lines[0]]))
    wanted = {key_of(dict(zip(KEY, ln.split(","), strict=True)), KEY) for ln in asked}
    kept, found = [lines[0]], set()
    for line in lines[1:]:
        row = dict(zip(header, next(csv.reader([line])), strict=False))
        key = key_of(row, KEY)
        if key in wanted and key not in found:
            kept.append(line)  # the tuner's line as written
            found.add(key)
    item_csv = ("\n".join(kept) + "\n").encode()
    rows = list(csv.DictReader(io.StringIO(item_csv.decode())))
    csv_rel = f"{CONFIGS_DIR}/{name}.csv"
    info = eng.inspect(image)
    digest = (info.digest if info else None) or (info.id if info else "")
    meta = _meta(
        name=name,
        image=image,
        digest=digest or "",
        facts=facts,
        gfx=cov.gfx,
        cu_num=cov.cu_num,
        tuner=f"python3 {tuner} {' '.join(args)}",
        untuned_sha=hashlib.sha256(untuned).hexdigest(),
        output_sha=hashlib.sha256(data).hexdigest(),
        rows=rows,
        target=scenario.target or "mi355x",
        scenario=scenario_path.name,
    )
    atomic_write(root / csv_rel, item_csv)
    atomic_write(root / meta_rel, meta)
    return Tuned(name, csv_rel, meta_rel, len(rows), len(asked), len(asked) - len(found), str(work))


def _gfx(root: Path, target: str) -> str | None:
    from sglforge.targets import load_targets

    try:
        return load_targets(root).resolve(target).gpu_arch
    except ConfigError:
        return None


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a TOML basic string is a JSON string for these characters


def _meta(
    *,
    name: str,
    image: str,
    digest: str,
    facts: Mapping[str, str | None],
    gfx: str,
    cu_num: int,
    tuner: str,
    untuned_sha: str,
    output_sha: str,
    rows: Sequence[Mapping[str, str]],
    target: str,
    scenario: str,
) -> str:
    times = []
    for r in rows:
        t, i, e, k, us = (r.get(c) for c in ("token", "inter_dim", "expert", "topk", "us"))
        times.append(f"  {_toml_str(f'token {t} inter_dim {i} expert {e} topk {k}: us {us}')},")
    lines = [
        "# A config item tuned by `sglforge configs tune` (not copied from upstream).",
        "[config]",
        'tool = "aiter"',
        'table = "tuned_fmoe"',
        f"target = {_toml_str(target)}",
        f"gfx = {_toml_str(gfx)}",
        'upstream-status = "Pending"',
        "origin = "
        + _toml_str(
            f"tuned by sglforge configs tune in {image} ({digest}) for {scenario}: aiter "
            f"{facts.get('version')} at {facts.get('commit') or 'unknown commit'}"
        ),
        "description = "
        + _toml_str(
            f"aiter tuned fused-MoE rows for the lookups {scenario} missed on {image}, as "
            "aiter's own tuner wrote them (rows copied, never edited)."
        ),
        f"tuned-image = {_toml_str(image)}",
        f"tuned-image-digest = {_toml_str(digest)}",
        f"tuned-aiter-version = {_toml_str(str(facts.get('version')))}",
        f"tuned-aiter-commit = {_toml_str(str(facts.get('commit')))}",
        f"tuned-gfx = {_toml_str(gfx)}",
        f"tuned-cu-num = {cu_num}",
        f"tuned-args = {_toml_str(tuner)}",
        f"tuned-input-sha256 = {_toml_str(untuned_sha)}",
        f"tuned-output-sha256 = {_toml_str(output_sha)}",
        'time-before = "not measured (the heuristic kernels are not timed by aiter\'s tuner)"',
        "time-after = [",
        *times,
        "]",
    ]
    return "\n".join(lines) + "\n"
