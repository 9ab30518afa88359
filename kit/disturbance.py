"""Was a trial disturbed while it ran? Per timed phase, from the host's counters and the trial's own markers.

A shared host (a CI runner, a cloud VM, a lab node) runs other work beside a
trial, and the baseline before the first trial says nothing about what ran
during the tenth. So each timed phase is checked on its own:

* **foreign CPU**: the host's busy CPU time over the phase (``cpu/total/busy_cpu_s``,
  steal included: a VM's neighbours), minus the trial's own CPU time (``cpu_s``
  in its phase markers: the harness process and its finished children), minus
  the kit process's own (``cpu/kit/cpu_s``: the collectors), per second of
  phase: the mean number of CPUs something else kept busy;
* **CPU frequency** below the idle baseline's median (a throttled package);
* on the trial's GPUs, **foreign processes** and **throttling** (thermal or
  hardware slowdown, power brake: NVML's clock-event reasons).

The cumulative counters are sampled every telemetry period and interpolated
at the phase's start and end. A phase shorter than ``MIN_PERIODS`` sampling
periods is not judged (the interpolation error would be of the order of the
figure); calibrated phases (``min_phase_s``) are long enough. Pure functions on
plain readings: the runner decides from them whether to re-run a trial, the
analysis lists them, and ``kit compare`` calls a verdict whose sides differ in
them "suspect".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Default limit of foreign CPU (mean CPUs busy outside the trial and the kit over a timed phase). Measured on
# the 2-core CI VM (docs/evidence/issue24-*.txt): quiet phases read 0.00-0.08 CPUs (kernel threads, the
# engine's idle polling); a one-core busy loop beside a one-thread LeNet trial reads 0.9-1.0 and slowed
# TensorFlow training by 13-20 %. A quarter of a CPU sits well above the quiet noise and well below the
# smallest real intruder (one process at full speed), so it flags a competitor that is on the CPUs for
# a quarter of the phase or more.
DEFAULT_FOREIGN_CPU = 0.25
# A CPU frequency this far below the idle baseline's median during a phase: the package was throttled
# (power or thermal capping); idle clocks are the floor a loaded CPU normally stays above.
FREQ_DROP_FRAC = 0.10
DEFAULT_RETRIES = 2
MIN_PERIODS = 5  # a phase must span this many sampling periods to be judged
WARMUP_PHASES = ("warmup",)
# NVML clock-event reasons that mean the GPU was slowed by something other than the trial's own settings:
# hardware slowdown (0x8), software thermal (0x20), hardware thermal (0x40), hardware power brake (0x80).
GPU_THROTTLE_BITS = 0x8 | 0x20 | 0x40 | 0x80

Reading = tuple[float, str, str, str, float]  # (t, source, device, metric, value)


@dataclass(frozen=True)
class Limits:
    """When a phase counts as disturbed (``[design]`` of the spec)."""

    foreign_cpu: float = DEFAULT_FOREIGN_CPU  # CPUs; 0 disables the CPU check
    freq_drop_frac: float = FREQ_DROP_FRAC


@dataclass(frozen=True)
class PhaseDisturbance:
    """One timed phase: what else ran, and whether it was too much."""

    phase: str
    duration_s: float
    judged: bool  # False: too short or not covered by the counters (then ``why``)
    foreign_cpu: float | None = None  # mean CPUs busy outside the trial and the kit
    trial_cpu: float | None = None  # mean CPUs the trial used
    freq_drop_frac: float | None = None  # 1 - phase median frequency / idle median (negative: faster)
    foreign_gpu_procs: int | None = None  # most processes seen on the trial's GPUs that are not the trial's
    gpu_throttle: tuple[str, ...] = ()
    causes: tuple[str, ...] = ()
    why: str | None = None

    @property
    def disturbed(self) -> bool:
        return bool(self.causes)

    def as_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "duration_s": self.duration_s, "judged": self.judged,
                "foreign_cpu": self.foreign_cpu, "trial_cpu": self.trial_cpu, "freq_drop_frac": self.freq_drop_frac,
                "foreign_gpu_procs": self.foreign_gpu_procs, "gpu_throttle": list(self.gpu_throttle),
                "disturbed": self.disturbed, "causes": list(self.causes), "why": self.why}


@dataclass(frozen=True)
class TrialDisturbance:
    """Every timed phase of one trial attempt."""

    phases: tuple[PhaseDisturbance, ...] = field(default_factory=tuple)
    limits: Limits = field(default_factory=Limits)

    @property
    def disturbed(self) -> bool:
        return any(p.disturbed for p in self.phases)

    @property
    def cause(self) -> str | None:
        """One line for the user: which phases, and why."""
        bad = [f"{p.phase}: {'; '.join(p.causes)}" for p in self.phases if p.disturbed]
        return " | ".join(bad) if bad else None

    def as_dict(self) -> dict[str, Any]:
        return {"schema": 1, "disturbed": self.disturbed, "cause": self.cause,
                "limits": {"foreign_cpu": self.limits.foreign_cpu, "freq_drop_frac": self.limits.freq_drop_frac},
                "phases": {p.phase: p.as_dict() for p in self.phases}}


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    v = float(x)
    return v if math.isfinite(v) else None


def _series(readings: Iterable[Reading], source: str, device: str | None, metric: str) -> tuple[np.ndarray, np.ndarray]:
    pts = sorted((float(t), float(v)) for t, s, d, m, v in readings
                 if s == source and m == metric and (device is None or d == device)
                 and math.isfinite(float(t)) and math.isfinite(float(v)))
    if not pts:
        return np.empty(0), np.empty(0)
    arr = np.asarray(pts)
    return arr[:, 0], arr[:, 1]


def _at(ts: np.ndarray, vs: np.ndarray, t: float) -> float | None:
    """A cumulative counter at time ``t`` (linear between readings); None outside the readings."""
    if len(ts) < 2 or t < ts[0] or t > ts[-1]:
        return None
    return float(np.interp(t, ts, vs))


def _phase_marks(markers: Sequence[Mapping[str, Any]]) -> list[tuple[str, float, float, float | None, float | None]]:
    """(phase, start t, end t, trial cpu_s at start, at end) for every closed timed phase, in order."""
    opened: dict[str, tuple[float, float | None]] = {}
    out = []
    for m in markers:
        if not isinstance(m, Mapping):
            continue
        phase, t = m.get("phase"), _number(m.get("t"))
        if not isinstance(phase, str) or t is None or phase in WARMUP_PHASES:
            continue
        if m.get("event") == "phase_start":
            opened[phase] = (t, _number(m.get("cpu_s")))
        elif m.get("event") == "phase_end" and phase in opened:
            t0, c0 = opened.pop(phase)
            if t > t0:
                out.append((phase, t0, t, c0, _number(m.get("cpu_s"))))
    return out


def assess(markers: Sequence[Mapping[str, Any]], readings: Sequence[Reading], period_s: float,
           limits: Limits | None = None, idle_freq_mhz: float | None = None) -> TrialDisturbance:
    """Per timed phase of one trial: foreign CPU, frequency drop, foreign GPU processes and GPU throttling."""
    limits = limits or Limits()
    readings = list(readings)
    busy_t, busy_v = _series(readings, "cpu", "total", "busy_cpu_s")
    kit_t, kit_v = _series(readings, "cpu", "kit", "cpu_s")
    freq_t, freq_v = _series(readings, "cpu", "total", "freq_mhz")
    procs_t, procs_v = _series(readings, "nvml", None, "foreign_procs")
    thr_t, thr_v = _series(readings, "nvml", None, "throttle_reasons")
    phases = []
    for phase, t0, t1, c0, c1 in _phase_marks(markers):
        dur = t1 - t0
        causes: list[str] = []
        in_procs = procs_v[(procs_t >= t0) & (procs_t <= t1)]
        procs = int(in_procs.max()) if in_procs.size else None
        if procs:
            causes.append(f"{procs} foreign process(es) on the trial's GPU")
        bits = 0
        for b in thr_v[(thr_t >= t0) & (thr_t <= t1)]:
            bits |= int(b) & GPU_THROTTLE_BITS
        throttle = tuple(name for bit, name in _GPU_REASONS.items() if bits & bit)
        if throttle:
            causes.append("GPU " + ", ".join(throttle))
        drop = None
        fin = freq_v[(freq_t >= t0) & (freq_t <= t1)]
        if idle_freq_mhz and idle_freq_mhz > 0 and fin.size:
            drop = 1.0 - float(np.median(fin)) / idle_freq_mhz
            if limits.freq_drop_frac > 0 and drop > limits.freq_drop_frac:
                causes.append(f"CPU frequency {float(np.median(fin)):.0f} MHz, {drop:.0%} below idle")
        foreign = trial = None
        why = None
        if dur < MIN_PERIODS * period_s:
            why = f"phase of {dur:.3g} s is shorter than {MIN_PERIODS} sampling periods ({period_s:g} s)"
        elif c0 is None or c1 is None or c1 < c0:
            why = "the trial's markers carry no CPU time"
        else:
            h0, h1 = _at(busy_t, busy_v, t0), _at(busy_t, busy_v, t1)
            k0, k1 = _at(kit_t, kit_v, t0), _at(kit_t, kit_v, t1)
            if None in (h0, h1, k0, k1):
                why = "no host CPU counters around the phase (the cpu collector did not run)"
            else:
                assert h0 is not None and h1 is not None and k0 is not None and k1 is not None
                trial = (c1 - c0) / dur
                foreign = max(0.0, ((h1 - h0) - (c1 - c0) - (k1 - k0)) / dur)
                if limits.foreign_cpu > 0 and foreign > limits.foreign_cpu:
                    causes.append(f"foreign CPU {foreign:.2f} CPUs (limit {limits.foreign_cpu:g})")
        judged = why is None or bool(causes)
        phases.append(PhaseDisturbance(phase, dur, judged, foreign, trial, drop, procs, throttle, tuple(causes), why))
    return TrialDisturbance(tuple(phases), limits)


_GPU_REASONS = {0x8: "hardware slowdown", 0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown",
                0x80: "hardware power brake"}


def from_record(rec: Mapping[str, Any]) -> dict[str, Any] | None:
    """A trial record's stored disturbance (None when the kit that ran it did not measure one)."""
    d = rec.get("disturbance")
    return d if isinstance(d, Mapping) and isinstance(d.get("phases"), Mapping) else None  # type: ignore[return-value]


def is_disturbed(rec: Mapping[str, Any]) -> bool:
    d = from_record(rec)
    return bool(d and d.get("disturbed") is True)


def disturbed_phases(rec: Mapping[str, Any]) -> dict[str, list[str]]:
    """Phase -> causes, for the phases of a trial record that were disturbed."""
    d = from_record(rec)
    if not d:
        return {}
    out: dict[str, list[str]] = {}
    for name, p in d["phases"].items():
        if isinstance(p, Mapping) and p.get("disturbed") is True:
            out[str(name)] = [str(c)[:200] for c in (p.get("causes") or []) if isinstance(c, str)]
    return out
