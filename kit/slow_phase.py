"""Was a timed phase slow for a reason the counters do not show? Its time against the run's own quiet trials.

Foreign CPU time (kit.disturbance) catches a neighbour that computes on the
trial's CPUs. It misses contention that costs little CPU time: a neighbour
saturating memory bandwidth or the last-level cache, a VM's steal on another
guest's behalf that the guest cannot see, I/O. Measured on the 2-core CI VM
(issue 43), such a neighbour slowed trials by 73 % with no foreign CPU at all.
What it cannot hide is its effect, so each timed phase's time per pass is also
compared with the run's own quiet trials of the same arm, configuration and
phase:

* **the rule**: a phase is *slow* when its time per pass exceeds the median
  of those quiet trials by more than ``k_mads`` scaled MADs (1.4826 x the
  median absolute deviation: the standard deviation for normal noise, but not
  moved by the outliers it is looking for) *and* by at least
  ``min_excess_frac`` of the median; judged only once ``min_quiet`` quiet
  trials exist. A slow phase with no cause seen (no foreign CPU above the
  limit, no throttling, no foreign GPU process) is flagged
  :data:`SLOW_CAUSE` and is then a disturbed phase like any other: re-run
  within the run's budget (kit.disturbance.rerun_disturbed) and, if kept,
  counted in the report's threat.
* **the choice** (k = 6, m = 6, 10 %): the kit's quiet noise is a CV of about
  3-5 % between trials. With six references the MAD is itself noisy, so a
  3-MAD rule would flag 5 % of quiet phases; 6 MADs with a 10 % floor flag
  0.6 % at m = 6 and CV 5 % (0.06 % at CV 3 %), and fewer as the references
  grow (checked by a seeded simulation in tests/test_slow_phase.py). It still
  catches a 1.5x phase 95 % of the time at CV 5 % (all of them at 3 %), and
  the 1.73x of the measured memory-bandwidth neighbour nearly always. Six
  quiet trials per arm and configuration is what a quick profile reaches in
  its first blocks; fewer leave the phase "not judged", never "slow".
* **one-sided**: only slower than usual is a disturbance; a fast phase is not.

Limits, stated: the references are the run's own quiet trials, so a load
present from the first trial on (every reference slow alike) is not seen by
this rule, and a steady drift (warming) of more than the limit would be
flagged as slow. Pure functions on plain numbers and the store's records; the
runner keeps the references (:class:`QuietTimes`) as the run goes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from kit import disturbance
from kit.errors import KitError
from kit.records import TrialRecord

SLOW_CAUSE = "slow, cause not seen"
K_MADS = 6.0  # scaled MADs above the quiet median (see the module docstring for the choice)
MIN_QUIET = 6  # quiet trials of the same arm, configuration and phase before a phase is judged
MIN_EXCESS_FRAC = 0.10  # and at least this much slower than the quiet median
MAD_SCALE = 1.4826  # MAD x this = the standard deviation of normal noise

PhaseKey = tuple[str, str, str]  # (arm, config_id, phase)


@dataclass(frozen=True)
class SlowRule:
    """When a phase's time per pass is an outlier against the run's quiet trials (one-sided: slower only)."""

    k_mads: float = K_MADS
    min_quiet: int = MIN_QUIET
    min_excess_frac: float = MIN_EXCESS_FRAC

    def __post_init__(self) -> None:
        where = "slow-phase rule"
        if not (math.isfinite(self.k_mads) and self.k_mads > 0):
            raise KitError(f"k_mads = {self.k_mads!r} is not a positive number of MADs", where=where,
                           fix=f"use a finite number above 0 (the kit's choice is {K_MADS:g})")
        if isinstance(self.min_quiet, bool) or not isinstance(self.min_quiet, int) or self.min_quiet < 3:
            raise KitError(f"min_quiet = {self.min_quiet!r}: a MAD needs at least 3 quiet trials", where=where,
                           fix=f"use an integer of 3 or more (the kit's choice is {MIN_QUIET})")
        if not (math.isfinite(self.min_excess_frac) and 0 <= self.min_excess_frac < 10):
            raise KitError(f"min_excess_frac = {self.min_excess_frac!r} is not a fraction of the median", where=where,
                           fix=f"use a number from 0 to 10 (the kit's choice is {MIN_EXCESS_FRAC:g})")

    def text(self) -> str:
        """The rule in one sentence, as the report states it."""
        return (f"a timed phase is '{SLOW_CAUSE}' when its time per pass exceeds the median of the run's quiet "
                f"trials of its arm, configuration and phase by more than {self.k_mads:g} scaled MADs and by at "
                f"least {self.min_excess_frac:.0%}, with no foreign CPU, throttling or GPU process seen; judged "
                f"once {self.min_quiet} quiet trials exist")


@dataclass(frozen=True)
class SlowJudgement:
    """One phase of one trial against its quiet references."""

    phase: str
    seconds: float | None  # this trial's time per pass (None: the trial has none for the phase)
    quiet_n: int  # quiet references of the same arm, configuration and phase
    median_s: float | None = None  # their median (None: not judged)
    limit_s: float | None = None  # the time above which the phase is slow
    slow: bool = False
    why: str | None = None  # not judged: why

    @property
    def judged(self) -> bool:
        return self.why is None

    @property
    def ratio(self) -> float | None:
        """Time per pass over the quiet median (None: not judged)."""
        if self.seconds is None or not self.median_s:
            return None
        return self.seconds / self.median_s

    def cause(self) -> str:
        """The cause as a disturbed phase lists it: the label first, then the figures in parentheses."""
        return (f"{SLOW_CAUSE} ({self.seconds:.4g} s per pass, {self.ratio:.2f}x the median of {self.quiet_n} quiet "
                f"trials; limit {self.limit_s:.4g} s)")


def _positive(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    v = float(x)
    return v if math.isfinite(v) and v > 0 else None


def phase_seconds(results: Mapping[str, object], phases: Mapping[str, Mapping[str, float | None]]) -> dict[str, float]:
    """Each timed phase's time per pass: the workload's own ``<phase>_time_s`` (the value the analysis compares),
    else the phase table's ``duration_s`` over ``<phase>_passes`` (one pass when absent). A calibrated phase lasts
    about ``min_phase_s`` whatever its speed, so its duration alone would hide a slow phase: the time per pass
    does not. The warm-up is never judged."""
    out: dict[str, float] = {}
    for name, row in phases.items():
        if name in disturbance.WARMUP_PHASES or not isinstance(row, Mapping):
            continue
        own = _positive(results.get(f"{name}_time_s"))
        if own is not None:
            out[name] = own
            continue
        dur = _positive(row.get("duration_s"))
        if dur is None:
            start, end = _positive(row.get("start")), _positive(row.get("end"))
            dur = end - start if start is not None and end is not None and end > start else None
        passes = results.get(f"{name}_passes")
        n = passes if isinstance(passes, int) and not isinstance(passes, bool) and passes > 0 else 1
        if dur is not None:
            out[name] = dur / n
    return out


def judge_phase(phase: str, seconds: float | None, quiet: Sequence[float], rule: SlowRule | None = None) -> SlowJudgement:
    """One phase against its quiet references (pure): slow, not slow, or not judged and why."""
    rule = rule or SlowRule()
    ref = np.asarray([q for q in quiet if math.isfinite(q) and q > 0], dtype=float)
    n = int(ref.size)
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        return SlowJudgement(phase, None, n, why="no time per pass for the phase")
    if n < rule.min_quiet:
        return SlowJudgement(phase, seconds, n, why=f"{n} quiet trial(s) of its arm, configuration and phase so far; "
                                                    f"judged from {rule.min_quiet}")
    med = float(np.median(ref))
    mad_s = MAD_SCALE * float(np.median(np.abs(ref - med)))
    limit = med + max(rule.k_mads * mad_s, rule.min_excess_frac * med)
    return SlowJudgement(phase, seconds, n, med, limit, slow=seconds > limit)


@dataclass(frozen=True)
class QuietTimes:
    """The run's quiet references: per (arm, config_id, phase), the time per pass of each counted trial whose phase
    was not disturbed (slow phases included in "disturbed"). Grown one record at a time (:meth:`with_record`)."""

    times: Mapping[PhaseKey, tuple[float, ...]] = field(default_factory=dict)

    def of(self, arm: str, config_id: str, phase: str) -> tuple[float, ...]:
        return self.times.get((arm, config_id, phase), ())

    def with_record(self, rec: TrialRecord) -> QuietTimes:
        """These references and ``rec``'s quiet phases (a warm-up, a failed trial or a disturbed phase adds none)."""
        if not rec.counts:
            return self
        shaken = disturbance.disturbed_phases(rec)
        add = {p: s for p, s in phase_seconds(rec.results, rec.phases).items() if p not in shaken}
        if not add:
            return self
        times = dict(self.times)
        for p, s in add.items():
            key = (rec.arm, rec.config_id, p)
            times[key] = (*times.get(key, ()), s)
        return QuietTimes(times)

    @classmethod
    def from_records(cls, records: Iterable[TrialRecord]) -> QuietTimes:
        out = cls()
        for rec in records:
            out = out.with_record(rec)
        return out


def judge(arm: str, config_id: str, seconds: Mapping[str, float], quiet: QuietTimes,
          rule: SlowRule | None = None) -> tuple[SlowJudgement, ...]:
    """Every timed phase of one trial (``seconds``: :func:`phase_seconds`) against the run's quiet references."""
    return tuple(judge_phase(p, s, quiet.of(arm, config_id, p), rule) for p, s in sorted(seconds.items()))


def amend(shaken: disturbance.TrialDisturbance, judgements: Iterable[SlowJudgement]) -> disturbance.TrialDisturbance:
    """The trial's disturbance with :data:`SLOW_CAUSE` added to each slow phase that has no cause seen.

    A phase already disturbed keeps its own causes (the slowness is explained); a slow phase the counters did not
    judge (too short for the sampling) is judged by its effect. The result is what the trial record stores, so the
    re-run loop (``is_disturbed``), the analysis and the report's threat treat it like any disturbed phase."""
    slow = {j.phase: j for j in judgements if j.slow}
    if not slow:
        return shaken
    phases = tuple(replace(p, causes=(slow[p.phase].cause(),), judged=True) if p.phase in slow and not p.causes
                   else p for p in shaken.phases)
    return replace(shaken, phases=phases)


def is_slow_cause(cause: object) -> bool:
    """A cause string written by :meth:`SlowJudgement.cause` (for counting slow phases apart from seen causes)."""
    return isinstance(cause, str) and cause.startswith(SLOW_CAUSE)
