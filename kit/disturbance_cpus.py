"""Foreign load where the trial runs: the CPUs a pinned trial may use, their busy time, and the sampler's lateness.

Issue 43: the host-wide rule (every CPU's busy time minus the trial's and the kit's) read a one-core hog on the
kit's CPU as one foreign CPU beside a trial pinned to the other, and re-ran every trial of a run for nothing. A
pinned trial can only be slowed by what runs on its own CPUs, or on their SMT siblings (the other hardware
threads of the same cores share their pipelines and caches). So for a trial whose CPU set is known, foreign CPU is
the busy time of exactly those CPUs and their siblings (per-CPU counters ``cpu/cpu<N>/busy_cpu_s``, steal
included) minus the trial's own CPU time; an unpinned trial keeps the host-wide rule.

Load on the kit's own CPU does not touch the trial's timing: it can only make the samples late. So it is judged by
that effect: gaps between the CPU collector's readings beyond ``LATE_SAMPLE_PERIODS`` periods flag the phase's
telemetry (interpolated over the gap), never the phase's time.

Where the trial's CPU set comes from, narrowest last: the kit's pinning (``[container] cpuset``, ``"auto"``
resolved), the affinity the harness found when it started (a container's or a job's cpuset: the kernel's word),
and the CPUs a ``cpu_cores`` workload pinned itself to (``env.cpu_pinning.cpus_pinned`` in its result).
Markers and results come from the trial's process: they are checked (integers, non-negative, within what the
kit pinned) and otherwise ignored.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import numpy as np

from kit.workloads.zoo_pin import parse_cpu_list

# A gap between two readings of the CPU collector longer than this many sampling periods: a reading was late by a
# whole period or missed. The sampler keeps a fixed schedule (kit.collectors.base), so on a quiet kit CPU the gaps
# are one period plus the read time (a few ms); two periods is the first gap that means a reading did not happen
# when it should have.
LATE_SAMPLE_PERIODS = 2.0
MAX_CPU = 65535  # the kernel's CPU lists go no higher (kit.workloads.zoo_pin.parse_cpu_list)
_SIBLINGS = "devices/system/cpu/cpu{}/topology/thread_siblings_list"

BASIS_KIT = "[container] cpuset"  # the kit pinned the trial (explicit set or "auto")
BASIS_AFFINITY = "the harness's CPU affinity"  # the kernel let the harness use only these (a container, a job)
BASIS_CORES = "workload cpu_cores"  # the trial pinned itself (kit.workloads.zoo_pin)

Reading = tuple[float, str, str, str, float]  # (t, source, device, metric, value): kit.disturbance.Reading


class CpuScopeJson(TypedDict):
    """A trial file's ``disturbance.cpus`` (:meth:`CpuScope.as_dict`); absent (or None) in older records."""

    trial: list[int]
    covered: list[int]
    kit_shares: bool
    basis: str


@dataclass(frozen=True)
class CpuScope:
    """The CPUs a pinned trial may run on, and those its foreign CPU is measured on (with their SMT siblings)."""

    trial_cpus: tuple[int, ...]
    covered_cpus: tuple[int, ...]  # trial_cpus and their SMT siblings
    kit_shares: bool  # the kit process may run on a covered CPU: its CPU time is subtracted too
    basis: str  # where the set came from (BASIS_*)

    def as_dict(self) -> CpuScopeJson:
        return {"trial": list(self.trial_cpus), "covered": list(self.covered_cpus), "kit_shares": self.kit_shares,
                "basis": self.basis}


@dataclass(frozen=True)
class PhaseCpus:
    """One stored phase's CPU figures, read back from any trial file (:func:`phase_cpus`)."""

    foreign_cpu: float | None  # the judged figure: on ``cpus`` when given, else host-wide
    foreign_cpu_host: float | None  # host-wide (None in records made before issue 43: ``foreign_cpu`` is that one)
    cpus: tuple[int, ...]  # the CPUs ``foreign_cpu`` covers; () host-wide
    late_samples: int | None
    telemetry: str | None

    @property
    def host_wide(self) -> bool:
        return not self.cpus


@dataclass(frozen=True)
class SamplingGaps:
    """The CPU collector's readings around one phase: how many gaps were late, and the longest."""

    late_samples: int
    max_gap_s: float
    limit_s: float

    @property
    def note(self) -> str | None:
        """The telemetry flag (None: on time): it says why and what it does not mean."""
        if not self.late_samples:
            return None
        return (f"telemetry late: {self.late_samples} sampling gap(s) over {self.limit_s:.3g} s (longest "
                f"{self.max_gap_s:.3g} s): the kit's CPU was busy or the sampler stalled; counters are interpolated "
                "over the gaps (the trial's timing is not affected)")


def _cpu_ids(value: object, limit: int = 4096) -> tuple[int, ...] | None:
    """A list of CPU numbers from a trial's marker or result; None when it is not one (never trusted blindly)."""
    if not isinstance(value, (list, tuple)) or not value or len(value) > limit:
        return None
    if not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= MAX_CPU for c in value):
        return None
    return tuple(sorted(set(value)))


def read_siblings(cpus: Iterable[int], sysfs_root: Path = Path("/sys")) -> dict[int, tuple[int, ...]]:
    """Each CPU's SMT siblings (itself included) from ``<sysfs_root>/devices/system/cpu/cpu<N>/topology/
    thread_siblings_list``; a CPU sysfs says nothing of (no file, a link, not a CPU list) has only itself."""
    out: dict[int, tuple[int, ...]] = {}
    for cpu in cpus:
        sib: tuple[int, ...] = (cpu,)
        try:
            fd = os.open(sysfs_root / _SIBLINGS.format(int(cpu)), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            out[cpu] = sib
            continue
        try:
            raw = os.read(fd, 4096).decode("ascii", "replace")
        except OSError:
            raw = ""
        finally:
            os.close(fd)
        try:
            found = parse_cpu_list(raw)
        except ValueError:
            found = ()
        out[cpu] = found if cpu in found else sib
    return out


def cover(trial_cpus: Iterable[int], siblings: Mapping[int, Sequence[int]]) -> tuple[int, ...]:
    """The trial's CPUs with their SMT siblings: every CPU whose load shares a core with the trial."""
    out: set[int] = set()
    for c in trial_cpus:
        out.add(c)
        out.update(siblings.get(c, (c,)))
    return tuple(sorted(out))


def trial_cpu_set(pinned: Sequence[int], markers: Sequence[Mapping[str, object]],
                  result_env: Mapping[str, object] | None) -> tuple[tuple[int, ...], str] | None:
    """The CPUs the trial could run on and where that is known from (None: nothing says; host-wide).

    The kit's pinning first; the harness's affinity (``harness_start`` marker's ``cpus``) where it is within it
    (the kernel may have narrowed it: a container's or a job's cpuset); a ``cpu_cores`` trial's own pinning
    (``result_env["cpu_pinning"]["cpus_pinned"]``) where it is within that. A claim outside the set before it is
    ignored: the trial's process cannot widen what the kit gave it.
    """
    current: tuple[int, ...] | None = tuple(sorted(set(pinned))) or None
    basis = BASIS_KIT
    affinity = next((_cpu_ids(m.get("cpus")) for m in markers
                     if isinstance(m, Mapping) and m.get("event") == "harness_start"), None)
    if affinity is not None and (current is None or (set(affinity) < set(current))):
        current, basis = affinity, BASIS_AFFINITY
    pin = result_env.get("cpu_pinning") if isinstance(result_env, Mapping) else None
    cores = _cpu_ids(pin.get("cpus_pinned")) if isinstance(pin, Mapping) else None
    if cores is not None and (current is None or set(cores) <= set(current)):
        current, basis = cores, BASIS_CORES
    return (current, basis) if current else None


def trial_scope(pinned: Sequence[int], kit_cpus: Sequence[int], markers: Sequence[Mapping[str, object]],
                result_env: Mapping[str, object] | None, sysfs_root: Path = Path("/sys"),
                siblings_of: Callable[[Iterable[int]], Mapping[int, Sequence[int]]] | None = None) -> CpuScope | None:
    """The trial's CPU scope for :func:`kit.disturbance.assess` (None: not pinned; the host-wide rule).

    ``kit_cpus`` are the CPUs the kit process is pinned to (empty: not pinned, it may run anywhere, so its CPU
    time is subtracted from the covered CPUs' as it is from the host's)."""
    found = trial_cpu_set(pinned, markers, result_env)
    if found is None:
        return None
    cpus, basis = found
    siblings = siblings_of(cpus) if siblings_of is not None else read_siblings(cpus, sysfs_root)
    covered = cover(cpus, siblings)
    kit_shares = not kit_cpus or bool(set(kit_cpus) & set(covered))
    return CpuScope(cpus, covered, kit_shares, basis)


class PerCpuCounters:
    """The cumulative per-CPU busy counters of one trial's readings, indexed once (a phase reads a few of them)."""

    def __init__(self, series: Mapping[int, tuple[np.ndarray, np.ndarray]]) -> None:
        self.series = dict(series)

    @classmethod
    def from_readings(cls, readings: Iterable[Reading]) -> PerCpuCounters:
        pts: dict[int, list[tuple[float, float]]] = {}
        for t, source, device, metric, value in readings:
            if source != "cpu" or metric != "busy_cpu_s" or not isinstance(device, str) or not device.startswith("cpu"):
                continue
            num = device[3:]
            if not num.isdigit() or not (math.isfinite(float(t)) and math.isfinite(float(value))):
                continue
            pts.setdefault(int(num), []).append((float(t), float(value)))
        out = {}
        for cpu, rows in pts.items():
            arr = np.asarray(sorted(rows))
            out[cpu] = (arr[:, 0], arr[:, 1])
        return cls(out)

    @property
    def cpus(self) -> tuple[int, ...]:
        return tuple(sorted(self.series))

    def busy_s(self, cpus: Iterable[int], t0: float, t1: float) -> float | None:
        """Busy CPU seconds of ``cpus`` together between ``t0`` and ``t1`` (None: a CPU not covered then)."""
        total = 0.0
        for c in cpus:
            ts, vs = self.series.get(c, (np.empty(0), np.empty(0)))
            if len(ts) < 2 or t0 < ts[0] or t1 > ts[-1]:
                return None
            total += float(np.interp(t1, ts, vs)) - float(np.interp(t0, ts, vs))
        return total


def scope_cpus(scope: CpuScope | None, counters: PerCpuCounters) -> tuple[int, ...]:
    """The CPUs to judge a phase on: the scope's covered CPUs, or () (host-wide) when there is no scope or it
    covers every CPU the counters saw (pinned to all of them is not pinned). A sibling without counters is offline
    (it runs nothing) and left out; a trial CPU without them leaves the phase to the host-wide rule (assess)."""
    if scope is None or not scope.covered_cpus:
        return ()
    if counters.cpus and set(counters.cpus) <= set(scope.covered_cpus):
        return ()
    return tuple(c for c in scope.covered_cpus if c in counters.series or c in scope.trial_cpus)


def foreign_on_cpus(counters: PerCpuCounters, cpus: Sequence[int], t0: float, t1: float, trial_s: float,
                    kit_s: float) -> float | None:
    """Mean CPUs something else kept busy on ``cpus`` over ``[t0, t1]``: their busy time minus the trial's own
    (``trial_s``) and the kit's (``kit_s``: 0 when the kit runs elsewhere), per second. None: no counters."""
    busy = counters.busy_s(cpus, t0, t1)
    if busy is None or t1 <= t0:
        return None
    return max(0.0, (busy - trial_s - kit_s) / (t1 - t0))


def sampling_gaps(ts: np.ndarray, t0: float, t1: float, period_s: float,
                  k: float = LATE_SAMPLE_PERIODS) -> SamplingGaps | None:
    """The gaps between the sampler's readings that touch ``[t0, t1]`` (one reading before and one after
    included), counted late beyond ``k`` periods; None without two readings there."""
    if len(ts) < 2 or period_s <= 0:
        return None
    lo = max(int(np.searchsorted(ts, t0, side="right")) - 1, 0)
    hi = min(int(np.searchsorted(ts, t1, side="left")) + 1, len(ts))
    window = ts[lo:hi]
    if len(window) < 2:
        return None
    gaps = np.diff(window)
    limit = k * period_s
    return SamplingGaps(int(np.count_nonzero(gaps > limit)), float(gaps.max()), limit)


def phase_cpus(stored: Mapping[str, object]) -> PhaseCpus:
    """A stored phase's CPU figures, from a record of any age: one made before issue 43 has only ``foreign_cpu``,
    host-wide, and no telemetry judgement."""

    def num(x: object) -> float | None:
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            return None
        return float(x) if math.isfinite(float(x)) else None

    late = stored.get("late_samples")
    note = stored.get("telemetry")
    return PhaseCpus(num(stored.get("foreign_cpu")), num(stored.get("foreign_cpu_host")),
                     _cpu_ids(stored.get("cpus")) or (),
                     late if isinstance(late, int) and not isinstance(late, bool) and late >= 0 else None,
                     note[:400] if isinstance(note, str) else None)
