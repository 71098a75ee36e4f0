"""A node's noise profile: what a calibration run (``sglforge bench --calibrate``: K boots of
one image) measured of the compared figure on this node, kept as a small JSON file so that
every later comparison on the node plans its boots from it and pools it with its own spread
(``stats.compare``; the comparison's own boots overrule it when they spread beyond it).

The file records the boot-to-boot spread (sd of a boot's mean log figure, with its degrees of
freedom), the within-boot part (from the means of whole closed-loop waves), the intra-batch
correlation of the requests, the boot times, the hardware and the scenario's compared shape.
A file from any node is readable (``--noise-profile FILE``); the one found by default is the
cache's for this scenario and this hardware.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import platform
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglforge.bench.stats import Block, Noise
from sglforge.cache import cache_root
from sglforge.errors import ConfigError
from sglforge.util import atomic_write, make_dirs, run_probe

KIND = "sglforge-bench-noise"
SCHEMA = 1


def intra_batch_correlation(samples: Sequence[float], batch: int) -> float | None:
    """The intra-class correlation of the log samples grouped in whole waves of ``batch``
    (one-way ANOVA estimator; None with fewer than two waves or waves of one)."""
    if batch < 2:
        return None
    logs = [math.log(x) for x in samples]
    groups = [logs[i : i + batch] for i in range(0, len(logs) - batch + 1, batch)]
    k = len(groups)
    if k < 2:
        return None
    means = [math.fsum(g) / batch for g in groups]
    grand = math.fsum(means) / k
    between = batch * sum((m - grand) ** 2 for m in means) / (k - 1)
    within = sum((x - m) ** 2 for g, m in zip(groups, means, strict=True) for x in g)
    within /= k * (batch - 1)
    denom = between + (batch - 1) * within
    return (between - within) / denom if denom > 0 else None


@dataclass(frozen=True)
class Profile:
    """A calibration run's measurement of one figure on one node (see the module)."""

    scenario: str
    hardware: str
    figure: str
    concurrency: int
    requests: int  # per boot
    boot_means: tuple[float, ...]  # each boot's mean log figure, in boot order
    within_sd: float | None
    correlation: float | None  # mean intra-batch correlation over the boots
    boot_seconds: tuple[float, ...] = ()
    image: str = ""
    measured_at: str = ""
    warmup_probe: bool = True
    path: str = ""
    priming_boot: bool = False  # one discarded boot before the K measured ones
    # other figures measured in the same boots (the single stream): name -> (each boot's mean
    # log figure, requests a boot)
    others: tuple[tuple[str, tuple[float, ...], int], ...] = ()

    @property
    def boot_sd(self) -> float:
        return _sd(self.boot_means)

    @property
    def dof(self) -> int:
        return max(len(self.boot_means) - 1, 0)

    def noise(self) -> Noise:
        """What ``stats.compare`` and the plans use."""
        where = self.path or "a calibration run"
        return Noise(
            self.boot_sd, self.dof, self.requests, self.within_sd, f"{where}, {self.hardware}"
        )

    def noise_of(self, figure: str) -> Noise | None:
        """The noise of ``figure``: the compared one's, or another measured in the same boots
        (None when the calibration did not measure it)."""
        if figure == self.figure:
            return self.noise()
        for name, means, requests in self.others:
            if name == figure and len(means) > 1:
                where = f"{self.path or 'a calibration run'}, {self.hardware}"
                return Noise(_sd(means), len(means) - 1, requests, None, where)
        return None

    def boot_minutes(self) -> float | None:
        """The median boot to ready, in minutes, leaving out a first boot of a fresh machine
        when 3+ were timed (on the H200 it took 119 s against 56-90 s after)."""
        times = list(self.boot_seconds[1:] if len(self.boot_seconds) > 2 else self.boot_seconds)
        return statistics.median(times) / 60 if times else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": KIND,
            "schema": SCHEMA,
            "scenario": self.scenario,
            "hardware": self.hardware,
            "figure": self.figure,
            "shape": {"concurrency": self.concurrency, "requests_per_boot": self.requests},
            "boots": len(self.boot_means),
            "boot_sd": self.boot_sd,
            "dof": self.dof,
            "within_boot_sd": self.within_sd,
            "intra_batch_correlation": self.correlation,
            "boot_means": [math.exp(m) for m in self.boot_means],
            "boot_seconds": list(self.boot_seconds),
            "image": self.image,
            "measured_at": self.measured_at,
            "warmup_probe": self.warmup_probe,
            "priming_boot": self.priming_boot,
            "other_figures": {
                name: {
                    "boot_means": [math.exp(m) for m in means],
                    "boot_sd": _sd(means),
                    "requests_per_boot": requests,
                }
                for name, means, requests in self.others
            },
        }


def _sd(logs: Sequence[float]) -> float:
    """The sample standard deviation (0 for fewer than two)."""
    n = len(logs)
    if n < 2:
        return 0.0
    m = math.fsum(logs) / n
    return math.sqrt(math.fsum((x - m) ** 2 for x in logs) / (n - 1))


def measure(
    blocks: Sequence[Block],
    *,
    scenario: str,
    hardware: str,
    figure: str,
    boot_seconds: Sequence[float] = (),
    image: str = "",
    warmup_probe: bool = True,
    others: Mapping[str, Sequence[Block]] | None = None,
) -> Profile:
    """The profile of K boots of one image (ConfigError with fewer than 2); ``others``: more
    figures of the same boots (the single stream)."""
    if len(blocks) < 2:
        raise ConfigError(
            f"a noise profile needs 2 boots or more, not {len(blocks)}",
            "run: sglforge bench --calibrate K with K >= 2 (6 or more: its t quantile shrinks)",
        )
    within = [v for b in blocks if (v := b.log_var_of_mean()) is not None]
    corr = [c for b in blocks if (c := intra_batch_correlation(b.samples, b.batch)) is not None]
    return Profile(
        scenario=scenario,
        hardware=hardware,
        figure=figure,
        concurrency=blocks[0].batch,
        requests=round(statistics.fmean(len(b.samples) for b in blocks)),
        boot_means=tuple(b.log_mean() for b in blocks),
        within_sd=math.sqrt(statistics.fmean(within)) if within else None,
        correlation=statistics.fmean(corr) if corr else None,
        boot_seconds=tuple(boot_seconds),
        image=image,
        measured_at=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        warmup_probe=warmup_probe,
        others=tuple(
            (
                name,
                tuple(b.log_mean() for b in bs),
                round(statistics.fmean(len(b.samples) for b in bs)),
            )
            for name, bs in (others or {}).items()
            if len(bs) > 1 and all(b.samples for b in bs)
        ),
    )


def _bad(path: Path, what: str) -> ConfigError:
    return ConfigError(
        f"{path}: not a bench noise profile ({what})",
        "write one on the node: sglforge bench --calibrate K --image IMG --scenario S",
    )


def from_dict(doc: Mapping[str, Any], path: Path) -> Profile:
    """A profile from its JSON document (ConfigError naming the file when it is not one)."""
    if doc.get("kind") != KIND or doc.get("schema") != SCHEMA:
        raise _bad(path, f"kind {doc.get('kind')!r}, schema {doc.get('schema')!r}")
    shape = doc.get("shape")
    means = doc.get("boot_means")
    ok_means = isinstance(means, list) and len(means) >= 2
    if not ok_means or not all(isinstance(x, int | float) and x > 0 for x in means or ()):
        raise _bad(path, "boot_means must list 2 or more speeds above 0")
    if not isinstance(shape, dict) or not isinstance(shape.get("concurrency"), int):
        raise _bad(path, "shape.concurrency missing")
    within, corr = doc.get("within_boot_sd"), doc.get("intra_batch_correlation")
    times = doc.get("boot_seconds") or []
    others = doc.get("other_figures") or {}
    if not isinstance(others, dict):
        raise _bad(path, "other_figures must be an object")
    return Profile(
        scenario=str(doc.get("scenario", "")),
        hardware=str(doc.get("hardware", "")),
        figure=str(doc.get("figure", "")),
        concurrency=int(shape["concurrency"]),
        requests=int(shape.get("requests_per_boot") or 0),
        boot_means=tuple(math.log(float(x)) for x in means or ()),
        within_sd=float(within) if isinstance(within, int | float) else None,
        correlation=float(corr) if isinstance(corr, int | float) else None,
        boot_seconds=tuple(float(t) for t in times if isinstance(t, int | float)),
        image=str(doc.get("image", "")),
        measured_at=str(doc.get("measured_at", "")),
        warmup_probe=bool(doc.get("warmup_probe", True)),
        priming_boot=bool(doc.get("priming_boot", False)),
        path=str(path),
        others=tuple(_other(path, name, o) for name, o in others.items()),
    )


def _other(path: Path, name: str, doc: Any) -> tuple[str, tuple[float, ...], int]:
    means = doc.get("boot_means") if isinstance(doc, dict) else None
    if not isinstance(means, list) or not all(isinstance(x, int | float) and x > 0 for x in means):
        raise _bad(path, f"other_figures.{name}.boot_means must list speeds above 0")
    return name, tuple(math.log(float(x)) for x in means), int(doc.get("requests_per_boot") or 0)


def load(path: Path) -> Profile:
    """The profile in ``path`` (ConfigError naming it when unreadable or not one)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise _bad(Path(path), str(exc).splitlines()[0]) from None
    if not isinstance(doc, dict):
        raise _bad(Path(path), "not a JSON object")
    return from_dict(doc, Path(path))


def save(profile: Profile, path: Path) -> Path:
    """Write ``profile`` to ``path`` (a temporary file, then renamed)."""
    make_dirs(Path(path).parent)
    atomic_write(Path(path), json.dumps(profile.as_dict(), indent=2) + "\n")
    return Path(path)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:80] or "node"


def default_path(scenario: str, hardware: str) -> Path:
    """Where this node's profile of ``scenario`` is kept: the user cache, one file per
    scenario and hardware."""
    return cache_root() / "bench-noise" / f"{_slug(scenario)}--{_slug(hardware)}.json"


def find(scenario: str, hardware: str) -> Profile | None:
    """This node's profile of ``scenario`` from the cache, if one was measured."""
    path = default_path(scenario, hardware)
    return load(path) if path.is_file() else None


def node_hardware(standin: bool) -> str:
    """The node's accelerators in words (the GPU names its tools print), or the CPU for a
    stand-in: what a profile is kept under."""
    if not standin:
        for cmd in (
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            ["rocm-smi", "--showproductname", "--csv"],
        ):
            code, out = run_probe(cmd, timeout=20)
            names = _gpu_names(out) if code == 0 else []
            if names:
                return f"{len(names)}x {names[0]}"
        return "gpu"
    cpu = platform.processor() or platform.machine()
    return f"standin-cpu ({cpu})"


def _gpu_names(text: str) -> list[str]:
    """The device names of ``nvidia-smi``'s CSV, or the card series of ``rocm-smi``'s."""
    names = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.lower().startswith("device") or line.startswith("="):
            continue
        parts = [p.strip() for p in line.split(",")]
        names.append(parts[1] if line.startswith("card") and len(parts) > 1 else parts[0])
    return names
