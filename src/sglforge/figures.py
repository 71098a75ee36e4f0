"""What a gate measured, typed: the one carrier of a smoke's and a bench's figures from the gate
that found them to the publish result, the upgrade's outcome, the release record and every
report (issue 44: one result model).

``SmokeFigures`` holds a smoke run's named numbers (``ready_s``, ``decode_tok_s``...) in the
order they were measured; ``BenchFigures`` what a release keeps of a bench (the knee, the speed
probe, the single stream, the sweep, the comparison). Each has one JSON form (``as_dict``) and
reads it back (``from_dict``), so a record written by any earlier release still reads.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from sglforge.scenario.constants import Value

# A bench's nested parts (the knee, a sweep point, the comparison) as their JSON objects.
Part = Mapping[str, object]


@dataclass(frozen=True)
class SmokeFigures:
    """A smoke run's named numbers, in the order it measured them (empty: not run)."""

    named: tuple[tuple[str, Value], ...] = ()

    @classmethod
    def of(cls, figures: Mapping[str, Value]) -> SmokeFigures:
        return cls(tuple(figures.items()))

    def as_dict(self) -> dict[str, Value]:
        return dict(self.named)

    def items(self) -> Iterator[tuple[str, Value]]:
        return iter(self.named)

    def __bool__(self) -> bool:
        return bool(self.named)


def _part(value: object) -> Part | None:
    return value if isinstance(value, Mapping) else None


def _parts(value: object) -> tuple[Part, ...]:
    if not isinstance(value, Sequence) or isinstance(value, str):
        return ()
    return tuple(v for v in value if isinstance(v, Mapping))


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@dataclass(frozen=True)
class BenchFigures:
    """What a release keeps of a bench (``inspect``, the CHANGELOG and the next release's
    knee search read it): where it ran, the knee and its bracket, the speed probe, the single
    stream, each probed rate, the regression verdict, whether a comparison ran and why not."""

    hardware: str
    scenario: str
    dataset: str
    knee: Part | None = None
    speed: Part | None = None
    single_stream: Part | None = None
    sweep: tuple[Part, ...] = ()
    regression: Part | None = None
    comparison: Part | None = None
    notes: tuple[str, ...] = ()
    baseline: Part | None = None

    def as_dict(self) -> dict[str, object]:
        """The JSON form (the release record's ``smoke.bench`` and ``--json``'s ``bench``)."""
        return {
            "hardware": self.hardware,
            "scenario": self.scenario,
            "dataset": self.dataset,
            "knee": self.knee,
            "speed": self.speed,
            "single_stream": self.single_stream,
            "sweep": list(self.sweep),
            "regression": self.regression,
            "comparison": self.comparison,
            "notes": list(self.notes),
            "baseline": self.baseline,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> BenchFigures:
        """The figures of a JSON form (a record of any earlier release: missing parts None)."""
        notes = data.get("notes")
        return cls(
            hardware=str(data.get("hardware") or ""),
            scenario=str(data.get("scenario") or ""),
            dataset=str(data.get("dataset") or ""),
            knee=_part(data.get("knee")),
            speed=_part(data.get("speed")),
            single_stream=_part(data.get("single_stream")),
            sweep=_parts(data.get("sweep")),
            regression=_part(data.get("regression")),
            comparison=_part(data.get("comparison")),
            notes=tuple(str(n) for n in notes) if isinstance(notes, list | tuple) else (),
            baseline=_part(data.get("baseline")),
        )

    def knee_bracket(self, scenario: str, hardware: str) -> tuple[float, float | None] | None:
        """The knee and the lowest failing rate above it, for a search of ``scenario`` on
        ``hardware`` to start from; None from another scenario or kind of hardware (a
        stand-in's knee says nothing of a node's) or without a knee."""
        if self.scenario != scenario or self.hardware != hardware or not self.knee:
            return None
        rate = _number(self.knee.get("request_rate"))
        return None if rate is None else (rate, _number(self.knee.get("failed_at")))
