"""The room's temperature per framework (kit.collectors.ambient): a threat when the frameworks ran in rooms of
different temperature, and said plainly when the run could not know.

Florencio et al. (seed 000) ran TensorFlow at 22 °C and PyTorch at 24-26 °C and could only name it as a threat.
The trial files record, per trial, a host ambient sensor's reading (``sensor_c``) and the room temperature the
user stated for the run (``stated_c``). Both are read from a run directory that may be crafted, so every value
is checked (a finite number of plausible room temperature, strings capped) before it is counted.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from kit.analysis.threats import Ctx, Threat, rule
from kit.records import TrialRecord
from kit.spec import AMBIENT_PLAUSIBLE_C

AMBIENT_DIFF_C = 1.0  # a gap in the median room temperature between frameworks above this is a threat
NOTE_CHARS = 200


@dataclass(frozen=True)
class TrialAmbient:
    """One trial's ``ambient`` table, checked: None where the value is missing or not a plausible room."""

    sensor_c: float | None
    sensor: str | None
    stated_c: float | None
    note: str

    @classmethod
    def from_record(cls, rec: TrialRecord) -> TrialAmbient | None:
        raw = rec.ambient
        if not isinstance(raw, Mapping):
            return None
        sensor = raw.get("sensor")
        note = raw.get("note")
        return cls(_room(raw.get("sensor_c")), sensor[:NOTE_CHARS] if isinstance(sensor, str) else None,
                   _room(raw.get("stated_c")), note[:NOTE_CHARS] if isinstance(note, str) else "")


def _room(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    lo, hi = AMBIENT_PLAUSIBLE_C
    return float(v) if lo <= v <= hi else None


def by_arm(trials: Iterable[TrialRecord]) -> tuple[dict[str, list[float]], set[float], list[str]]:
    """Sensor readings per arm of the counted trials, the stated values, and why readings are missing."""
    measured: dict[str, list[float]] = {}
    stated: set[float] = set()
    notes: list[str] = []
    for t in trials:
        if not t.counts:
            continue
        a = TrialAmbient.from_record(t)
        if a is None:
            notes.append("the trial files record no ambient temperature (a run made before the kit recorded it)")
            continue
        if a.sensor_c is not None:
            measured.setdefault(t.arm, []).append(a.sensor_c)
        elif a.note:
            notes.append(a.note)
        if a.stated_c is not None:
            stated.add(a.stated_c)
    return measured, stated, sorted(set(notes))


@rule
def ambient_temperature(c: Ctx) -> list[Threat]:
    """Frameworks measured in rooms of different temperature run at other clocks; unknown, it is said."""
    measured, stated, notes = by_arm(c.trials)
    stated_text = (f"; the user stated {', '.join(f'{s:g} °C' for s in sorted(stated))} for the run "
                   "([telemetry] ambient_c: not measured per trial)") if stated else ""
    if not measured:
        why = "; ".join(notes[:3]) or "no reading"
        if stated:
            return [Threat("ambient_temperature", "internal", "info", "Ambient temperature stated, not measured",
                           f"no ambient sensor reading ({why}){stated_text}; a change of room temperature between "
                           "the frameworks would go unseen", "run on a host with an ambient (inlet) sensor, or keep "
                           "the room's temperature steady and interleave the frameworks (the kit does)",
                           numbers={"stated_c": sorted(stated)})]
        return [Threat("ambient_temperature", "internal", "info", "Ambient temperature not recorded",
                       f"the room's temperature is unknown: {why}", "state it in [telemetry] ambient_c (a thermometer "
                       "reading), or name the host's ambient sensor with ambient_sensor = \"chip:label\" "
                       "(see `kit doctor`)")]
    medians = {a: round(float(np.median(v)), 2) for a, v in measured.items()}
    ranges = {a: [round(min(v), 2), round(max(v), 2)] for a, v in measured.items()}
    numbers: dict[str, Any] = {"median_c": medians, "range_c": ranges, "n": {a: len(v) for a, v in measured.items()}}
    if stated:
        numbers["stated_c"] = sorted(stated)
    text = ", ".join(f"{a} {medians[a]:.1f} °C ({ranges[a][0]:.1f}-{ranges[a][1]:.1f}, n={len(measured[a])})"
                     for a in sorted(medians))
    if len(medians) < 2:
        return [Threat("ambient_temperature", "internal", "info", "Ambient temperature",
                       f"measured for one framework only: {text}{stated_text}", "a sensor reading for every trial")]
    gap = round(max(medians.values()) - min(medians.values()), 2)
    numbers["gap_c"] = gap
    if gap > AMBIENT_DIFF_C:
        return [Threat("ambient_temperature", "internal", "high" if gap > 2 * AMBIENT_DIFF_C else "medium",
                       "Frameworks ran in rooms of different temperature",
                       f"median ambient temperature per framework: {text}; gap {gap:.1f} °C{stated_text}",
                       "keep the room's temperature steady (air conditioning, no run across day and night) and "
                       "interleave the frameworks; compare the trials' start temperatures", numbers=numbers)]
    return [Threat("ambient_temperature", "internal", "info", "Ambient temperature",
                   f"median ambient temperature per framework: {text}: within {AMBIENT_DIFF_C:g} °C{stated_text}",
                   "measured before every trial; the frameworks are interleaved", status="mitigated", numbers=numbers)]
