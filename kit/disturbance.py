"""Was a trial disturbed while it ran? Per timed phase, from the host's counters and the trial's own markers.

A shared host (a CI runner, a cloud VM, a lab node) runs other work beside a
trial, and the baseline before the first trial says nothing about what ran
during the tenth. So each timed phase is checked on its own:

* **foreign CPU**: the host's busy CPU time over the phase (``cpu/total/busy_cpu_s``,
  steal included: a VM's neighbours; for a pinned trial only its CPUs' and their SMT
  siblings', kit.disturbance_cpus, the host-wide figure kept beside it), minus the trial's own CPU time (``cpu_s``
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

import numpy as np

from kit import disturbance_cpus as on_cpus
from kit.records import JsonTable, TrialRecord

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
# The run-wide re-run budget, as a share of the plan's measured trials: a host that stays busy would otherwise cost
# ``DEFAULT_RETRIES`` extra attempts per trial (issue 39: 49 extra attempts for 24 trials, 40 min for a 3 min 40 s
# estimate); a quarter bounds the extra trials of a hog that lasts the whole run while still re-running every
# disturbed trial of a run with a few short disturbances (one in four trials).
DEFAULT_BUDGET_FRAC = 0.25
# Re-runs still disturbed this many times in a row mean the load outlasts the re-runs (see RerunLedger).
PERSISTENT_RERUNS = 3
MIN_PERIODS = 5  # a phase must span this many sampling periods to be judged
WARMUP_PHASES = ("warmup",)
# NVML clock-event reasons that mean the GPU was slowed by something other than the trial's own settings:
# hardware slowdown (0x8), software thermal (0x20), hardware thermal (0x40), hardware power brake (0x80).
GPU_THROTTLE_BITS = 0x8 | 0x20 | 0x40 | 0x80

Reading = tuple[float, str, str, str, float]  # (t, source, device, metric, value)


class PhaseJson(TypedDict):
    """One phase of a trial file's ``disturbance.phases`` (:meth:`PhaseDisturbance.as_dict`)."""

    phase: str
    duration_s: float
    judged: bool
    foreign_cpu: float | None
    trial_cpu: float | None
    freq_drop_frac: float | None
    foreign_gpu_procs: int | None
    gpu_throttle: list[str]
    disturbed: bool
    causes: list[str]
    why: str | None
    foreign_cpu_host: NotRequired[float | None]  # host-wide, beside ``foreign_cpu`` on the trial's CPUs
    cpus: NotRequired[list[int]]  # the CPUs ``foreign_cpu`` covers ([]: host-wide)
    late_samples: NotRequired[int | None]  # sampling gaps beyond LATE_SAMPLE_PERIODS periods (the kit's CPU)
    max_sample_gap_s: NotRequired[float | None]
    telemetry: NotRequired[str | None]  # the telemetry's flag (never the timing's)


class LimitsJson(TypedDict):
    foreign_cpu: float
    freq_drop_frac: float


class TrialDisturbanceJson(TypedDict):
    """A trial file's ``disturbance`` as this module writes it (:meth:`TrialDisturbance.as_dict`); the stored form is
    also read back from older runs, so readers still check what they use."""

    schema: int
    disturbed: bool
    cause: str | None
    limits: LimitsJson
    phases: dict[str, PhaseJson]
    cpus: NotRequired[on_cpus.CpuScopeJson | None]  # the pinned trial's CPUs (None: host-wide; absent: older)


class RerunBudgetJson(TypedDict):
    """The ``rerun_budget`` event's figures (:meth:`RerunBudget.as_dict`)."""

    budget: int
    measured_trials: int
    budget_frac: float
    per_trial: int
    persistent_after: int


class QuietWaitJson(TypedDict):
    """A ``quiet_wait`` event as :func:`rerun_summary` keeps it (values as logged; None when absent)."""

    when: Any
    quiet: Any
    waited_s: Any
    duration_s: Any
    foreign_cpu: Any


class BaselineLoadJson(TypedDict):
    """The last ``baseline_load`` event as :func:`rerun_summary` keeps it (values as logged; None when absent)."""

    foreign_cpu: Any
    cpus: Any
    limit_cpu: Any
    busy: Any
    choice: Any


class RerunSummary(TypedDict):
    """What :func:`rerun_summary` reads from a run's events.jsonl (the analysis and ``kit reproduce`` read it)."""

    budget: int | None
    spent: int
    kept: int
    stopped: bool
    stop_reasons: list[str]
    waits: list[QuietWaitJson]
    baseline: BaselineLoadJson | None
    text: str


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
    foreign_cpu_host: float | None = None  # host-wide figure (= foreign_cpu when ``cpus`` is empty)
    cpus: tuple[int, ...] = ()  # the CPUs foreign_cpu covers: the trial's and their SMT siblings; (): host-wide
    late_samples: int | None = None  # gaps between the CPU collector's readings beyond LATE_SAMPLE_PERIODS
    max_sample_gap_s: float | None = None
    telemetry: str | None = None  # late samples: the kit's CPU was loaded; flags the telemetry, not the timing

    @property
    def disturbed(self) -> bool:
        return bool(self.causes)

    def as_dict(self) -> PhaseJson:
        return {"phase": self.phase, "duration_s": self.duration_s, "judged": self.judged,
                "foreign_cpu": self.foreign_cpu, "trial_cpu": self.trial_cpu, "freq_drop_frac": self.freq_drop_frac,
                "foreign_gpu_procs": self.foreign_gpu_procs, "gpu_throttle": list(self.gpu_throttle),
                "disturbed": self.disturbed, "causes": list(self.causes), "why": self.why,
                "foreign_cpu_host": self.foreign_cpu_host, "cpus": list(self.cpus), "late_samples": self.late_samples,
                "max_sample_gap_s": self.max_sample_gap_s, "telemetry": self.telemetry}


@dataclass(frozen=True)
class TrialDisturbance:
    """Every timed phase of one trial attempt."""

    phases: tuple[PhaseDisturbance, ...] = field(default_factory=tuple)
    limits: Limits = field(default_factory=Limits)
    cpus: on_cpus.CpuScope | None = None  # the pinned trial's CPUs (None: not pinned, judged host-wide)

    @property
    def disturbed(self) -> bool:
        return any(p.disturbed for p in self.phases)

    @property
    def cause(self) -> str | None:
        """One line for the user: which phases, and why."""
        bad = [f"{p.phase}: {'; '.join(p.causes)}" for p in self.phases if p.disturbed]
        return " | ".join(bad) if bad else None

    def as_dict(self) -> TrialDisturbanceJson:
        return {"schema": 1, "disturbed": self.disturbed, "cause": self.cause,
                "limits": {"foreign_cpu": self.limits.foreign_cpu, "freq_drop_frac": self.limits.freq_drop_frac},
                "phases": {p.phase: p.as_dict() for p in self.phases},
                "cpus": self.cpus.as_dict() if self.cpus is not None else None}


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
           limits: Limits | None = None, idle_freq_mhz: float | None = None,
           cpus: on_cpus.CpuScope | None = None) -> TrialDisturbance:
    """Per timed phase of one trial: foreign CPU (on a pinned trial's ``cpus`` and their SMT siblings, the host-wide
    figure kept beside it: kit.disturbance_cpus), frequency drop, foreign GPU processes and GPU throttling."""
    limits = limits or Limits()
    readings = list(readings)
    busy_t, busy_v = _series(readings, "cpu", "total", "busy_cpu_s")
    kit_t, kit_v = _series(readings, "cpu", "kit", "cpu_s")
    freq_t, freq_v = _series(readings, "cpu", "total", "freq_mhz")
    procs_t, procs_v = _series(readings, "nvml", None, "foreign_procs")
    thr_t, thr_v = _series(readings, "nvml", None, "throttle_reasons")
    per_cpu = on_cpus.PerCpuCounters.from_readings(readings)
    judged_on = on_cpus.scope_cpus(cpus, per_cpu)
    kit_shares = cpus is None or cpus.kit_shares
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
        foreign = trial = host = None
        covered: tuple[int, ...] = ()
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
                host = max(0.0, ((h1 - h0) - (c1 - c0) - (k1 - k0)) / dur)
                own = (on_cpus.foreign_on_cpus(per_cpu, judged_on, t0, t1, c1 - c0, (k1 - k0) if kit_shares else 0.0)
                       if judged_on else None)
                covered = judged_on if own is not None else ()
                foreign = own if own is not None else host
                if limits.foreign_cpu > 0 and foreign > limits.foreign_cpu:
                    where = f" on CPU(s) {','.join(map(str, covered))}" if covered else ""
                    causes.append(f"foreign CPU {foreign:.2f} CPUs{where} (limit {limits.foreign_cpu:g})")
        gaps = on_cpus.sampling_gaps(kit_t, t0, t1, period_s)
        judged = why is None or bool(causes)
        phases.append(PhaseDisturbance(phase, dur, judged, foreign, trial, drop, procs, throttle, tuple(causes), why,
                                       foreign_cpu_host=host, cpus=covered,
                                       late_samples=gaps.late_samples if gaps else None,
                                       max_sample_gap_s=gaps.max_gap_s if gaps else None,
                                       telemetry=gaps.note if gaps else None))
    return TrialDisturbance(tuple(phases), limits, cpus)


_GPU_REASONS = {0x8: "hardware slowdown", 0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown",
                0x80: "hardware power brake"}


def from_record(rec: TrialRecord | JsonTable) -> TrialDisturbanceJson | None:
    """A trial record's stored disturbance (None when the kit that ran it did not measure one). Only its shape at the
    top is checked: an older or damaged record may lack a key, so readers use ``.get`` below the phases.

    ``rec`` is the store's typed record (a run directory's trials and attempts) or, inside the runner's re-run loop,
    the trial file's JSON just written (:func:`rerun_disturbed`); both are read the same way."""
    d = rec.disturbance if isinstance(rec, TrialRecord) else rec.get("disturbance")
    return d if isinstance(d, Mapping) and isinstance(d.get("phases"), Mapping) else None  # type: ignore[return-value]


def is_disturbed(rec: TrialRecord | JsonTable) -> bool:
    d = from_record(rec)
    return bool(d and d.get("disturbed") is True)


def disturbed_phases(rec: TrialRecord | JsonTable) -> dict[str, list[str]]:
    """Phase -> causes, for the phases of a trial record that were disturbed."""
    d = from_record(rec)
    if not d:
        return {}
    out: dict[str, list[str]] = {}
    for name, p in d["phases"].items():
        if isinstance(p, Mapping) and p.get("disturbed") is True:
            out[str(name)] = [str(c)[:200] for c in (p.get("causes") or []) if isinstance(c, str)]
    return out


# -- the run-wide re-run budget ---------------------------------------------------------------------------------
#
# Re-running a disturbed trial at once is right when the disturbance was a burst (a cron job, a compile); on a host
# that stays busy every re-run is disturbed again and the per-trial cap alone turns a 4-minute run into a 40-minute
# one. So the re-runs of a run draw on one budget (a share of its measured trials), and a load that outlasts the
# re-runs stops them: the trials are still measured, each flagged, and the report says so.

KEEP_CAP = "per_trial_cap"  # this trial had its ``disturbance_retries`` re-runs
KEEP_BUDGET = "budget_spent"  # the run's budget is spent
KEEP_PERSISTENT = "persistent_load"  # PERSISTENT_RERUNS re-runs in a row were disturbed again


@dataclass(frozen=True)
class RerunBudget:
    """The re-runs one run (or one chunk of a cluster run) may spend on disturbed trials."""

    measured_trials: int  # the plan's measured (non-warm-up) trials this budget covers
    frac: float = DEFAULT_BUDGET_FRAC  # [design] disturbance_budget_frac
    per_trial: int = DEFAULT_RETRIES  # [design] disturbance_retries
    persistent_after: int = PERSISTENT_RERUNS

    @property
    def total(self) -> int:
        """At most ``frac`` of the measured trials, rounded down: the extra trials never pass that share."""
        return max(0, math.floor(self.frac * self.measured_trials + 1e-9))

    def as_dict(self) -> RerunBudgetJson:
        return {"budget": self.total, "measured_trials": self.measured_trials, "budget_frac": self.frac,
                "per_trial": self.per_trial, "persistent_after": self.persistent_after}


@dataclass(frozen=True)
class RerunDecision:
    action: str  # "rerun", "wait" (for a quiet window, then decide again) or "keep" (the trial stays, flagged)
    reason: str | None = None  # for "keep" and "wait": KEEP_CAP, KEEP_BUDGET or KEEP_PERSISTENT


@dataclass
class RerunLedger:
    """The budget's account through one execution of a run: re-runs spent, the disturbed re-runs in a row.

    ``spent`` starts from what the run directory says was spent before (:func:`spent_reruns` of its attempts), so
    a resumed run never gets a fresh budget. ``streak`` counts re-runs that came back disturbed again, in a row
    and across trials; :data:`PERSISTENT_RERUNS` of them mean the load outlasts the re-runs. A re-run follows its
    attempt at once, so with the default per-trial cap of 2, three disturbed re-runs in a row span at least two
    trials and four attempts: the load outlived one trial's re-runs and came back for the next. Short bursts that
    hit a share p of the attempts independently give three in a row with probability p**3 (3 % for p = 0.3), so
    an intermittent load rarely stops the re-runs, and a persistent one costs three re-runs before they stop (two
    would stop on 9 % of such bursts; four would spend a third more on a hog). An undisturbed trial resets it.
    """

    budget: RerunBudget
    spent: int = 0
    streak: int = 0
    stopped: str | None = None  # why re-runs stopped (said once); None: spending
    waited_in_vain: bool = False  # a wait for a quiet window during this load found none

    def decide(self, reruns_of_trial: int, can_wait: bool) -> RerunDecision:
        if reruns_of_trial >= self.budget.per_trial:
            return RerunDecision("keep", KEEP_CAP)
        if self.spent >= self.budget.total:
            return RerunDecision("keep", KEEP_BUDGET)
        if self.streak >= self.budget.persistent_after:
            if can_wait and not self.waited_in_vain:
                return RerunDecision("wait", KEEP_PERSISTENT)
            return RerunDecision("keep", KEEP_PERSISTENT)
        return RerunDecision("rerun")

    def stop(self, reason: str | None) -> bool:
        """Re-runs stop for ``reason``; True the first time (the caller says it once)."""
        if reason not in (KEEP_BUDGET, KEEP_PERSISTENT) or self.stopped == reason:
            return False
        self.stopped = reason
        return True

    def after_rerun(self, disturbed: bool) -> None:
        self.streak = self.streak + 1 if disturbed else 0

    def after_wait(self, quiet: bool) -> None:
        if quiet:
            self.streak = 0
        else:
            self.waited_in_vain = True

    def quiet_trial(self) -> bool:
        """A measured trial ran undisturbed: the load is gone. True when that resumes stopped re-runs."""
        self.streak, self.waited_in_vain = 0, False
        if self.stopped == KEEP_PERSISTENT:
            self.stopped = None
            return True
        return False


def spent_reruns(attempts: Iterable[TrialRecord]) -> int:
    """Re-runs a run already spent, from its archived attempts (``RunDir.checked_attempts()`` records): each
    disturbed measured attempt set aside was re-run. A failed attempt set aside by ``--retry-failed`` is not."""
    return sum(1 for rec in attempts if rec.status == "ok" and not rec.warmup and is_disturbed(rec))


@dataclass(frozen=True)
class RerunHooks:
    """What the re-run loop does to the run: the runner's (archive, run_one, events.jsonl, RunEvents), a test's."""

    archive: Callable[[], str]  # set the disturbed attempt aside (attempts/); returns where it went
    run: Callable[[], JsonTable]  # run the trial again in its plan position; returns the new record
    log: Callable[..., None]  # one event in the run's events.jsonl
    say: Callable[[str], None]  # one line for the user
    wait: Callable[[], bool] | None = None  # `--wait-for-quiet`: wait for a quiet window (True: found one)


def rerun_disturbed(record: JsonTable, trial_id: str, warmup: bool, ledger: RerunLedger,
                    hooks: RerunHooks) -> JsonTable:
    """Re-run a measured trial while its timed phases were disturbed, within the ledger's budget; the last record.

    Events (events.jsonl): ``disturbed`` per re-run (trial_id, cause, archived, rerun, spent, budget);
    ``disturbed_kept`` per trial kept disturbed (trial_id, cause, reruns, reason); ``reruns_stopped`` once per
    stop (reason, after, spent, budget, streak, waited); ``reruns_resumed`` when an undisturbed trial ends a stop
    for persistent load. A warm-up trial is never re-run: it never enters the statistics.
    """
    if warmup or record.get("status") != "ok":
        return record
    total = ledger.budget.total
    if not is_disturbed(record):
        if ledger.quiet_trial():
            hooks.log("reruns_resumed", after=trial_id, spent=ledger.spent, budget=total)
            hooks.say(f"trial {trial_id} ran undisturbed: the load is gone, disturbed trials are re-run again "
                      f"({ledger.spent} of {total} re-runs spent)")
        return record
    reruns = 0
    while record.get("status") == "ok" and is_disturbed(record):
        stored = from_record(record)
        cause = stored.get("cause") if stored is not None else None
        decision = ledger.decide(reruns, hooks.wait is not None)
        if decision.action == "wait" and hooks.wait is not None:
            ledger.after_wait(hooks.wait())
            decision = ledger.decide(reruns, True)
        if decision.action == "keep":
            _keep(record, trial_id, cause, reruns, decision.reason, ledger, hooks)
            break
        reruns += 1
        ledger.spent += 1
        hooks.say(f"trial {trial_id} disturbed ({cause}): re-running it in its plan position (re-run {reruns} of "
                  f"at most {ledger.budget.per_trial}; {ledger.spent} of {total} in the run's budget)")
        archived = hooks.archive()
        hooks.log("disturbed", trial_id=trial_id, cause=cause, archived=archived, rerun=reruns, spent=ledger.spent,
                  budget=total)
        record = hooks.run()
        if record.get("status") == "ok":
            ledger.after_rerun(is_disturbed(record))
    return record


def _keep(record: JsonTable, trial_id: str, cause: Any, reruns: int, reason: str | None, ledger: RerunLedger,
          hooks: RerunHooks) -> None:
    total, b = ledger.budget.total, ledger.budget
    if ledger.stop(reason):
        waited = ledger.waited_in_vain
        if reason == KEEP_BUDGET:
            why = (f"re-run budget spent ({ledger.spent} of {total}: {b.frac:.0%} of {b.measured_trials} measured "
                   "trials, [design] disturbance_budget_frac)")
        else:
            why = (f"load persists: the last {ledger.streak} re-runs were disturbed again"
                   + (" and no quiet window came within --wait-for-quiet" if waited else "")
                   + f" ({ledger.spent} of {total} re-runs spent)")
        hooks.say(f"{why}: re-runs stopped; the remaining trials are measured and each disturbed one is kept and "
                  "flagged (the report counts them)"
                  + ("; re-runs resume after an undisturbed trial" if reason == KEEP_PERSISTENT else "")
                  + ("" if waited or reason == KEEP_BUDGET else "; on a busy host, --wait-for-quiet 10m waits for a "
                     "quiet window instead"))
        hooks.log("reruns_stopped", reason=reason, after=trial_id, spent=ledger.spent, budget=total,
                  streak=ledger.streak, waited=waited)
    if reason == KEEP_CAP:
        hooks.say(f"trial {trial_id} still disturbed after {reruns} re-run(s) ({cause}): kept and flagged; the report "
                  "counts it as a threat")
    hooks.log("disturbed_kept", trial_id=trial_id, cause=cause, reruns=reruns, reason=reason)


def rerun_summary(events: Iterable[Mapping[str, Any]]) -> RerunSummary:
    """What a run's events.jsonl says of its load and re-runs, for the analysis and the report.

    ``budget`` (the latest ``rerun_budget`` event's; None: a run made before budgets), ``spent`` (``disturbed``
    events: one per re-run, across resumes), ``stopped`` and ``stop_reasons`` (``reruns_stopped``), ``kept``
    (trials kept disturbed), ``baseline`` (the last ``baseline_load`` event: foreign CPUs before the first trial,
    and the choice made), ``waits`` (``quiet_wait`` events), and ``text``: one sentence.
    """
    budget: Any = None
    spent, kept = 0, 0
    stops: list[str] = []
    waits: list[QuietWaitJson] = []
    baseline: BaselineLoadJson | None = None
    for e in events:
        if not isinstance(e, Mapping):
            continue
        kind = e.get("event")
        if kind == "rerun_budget":
            budget = _number(e.get("budget"))
        elif kind == "disturbed":
            spent += 1
        elif kind == "disturbed_kept":
            kept += 1
        elif kind == "reruns_stopped" and isinstance(e.get("reason"), str):
            stops.append(str(e["reason"]))
        elif kind == "quiet_wait":
            waits.append({"when": e.get("when"), "quiet": e.get("quiet"), "waited_s": e.get("waited_s"),
                          "duration_s": e.get("duration_s"), "foreign_cpu": e.get("foreign_cpu")})
        elif kind == "baseline_load":
            baseline = {"foreign_cpu": e.get("foreign_cpu"), "cpus": e.get("cpus"), "limit_cpu": e.get("limit_cpu"),
                        "busy": e.get("busy"), "choice": e.get("choice")}
    text = f"{spent} re-run(s) of disturbed trials" + (f", of a budget of {int(budget)}" if budget is not None else "")
    if KEEP_PERSISTENT in stops:
        text += "; stopped re-running after persistent load"
    elif KEEP_BUDGET in stops:
        text += "; the budget was spent"
    return {"budget": int(budget) if budget is not None else None, "spent": spent, "kept": kept,
            "stopped": bool(stops), "stop_reasons": sorted(set(stops)), "waits": waits, "baseline": baseline,
            "text": text}


def busy_baseline_text(foreign_cpu: float, cpus: int, limit_cpu: float, budget: RerunBudget, wait_s: float | None,
                       resume: str, on: str = "") -> str:
    """The one line a run prints when its idle baseline shows other work: the figure, the cost, the choice (``on``:
    the pinned trials' CPUs the figure covers, kit.collectors.quiet.LoadScope.where; "" host-wide)."""
    of = on if on else f"of {cpus} CPUs"
    head = (f"host busy before the first trial: other work kept {foreign_cpu:.1f} CPUs busy {of} during the "
            f"idle baseline (a trial is disturbed above {limit_cpu:g}); most trials will likely be disturbed, costing "
            f"up to {budget.total} re-run{'' if budget.total == 1 else 's'} ({budget.frac:.0%} of {budget.measured_trials} "
            "measured trials), the rest "
            "kept and flagged. ")
    if wait_s is not None:
        return head + (f"Waiting up to {duration_text(wait_s)} for a quiet window (--wait-for-quiet), then going on "
                       "either way; Ctrl-C stops the run.")
    return head + (f"Going on (the default). To wait for a quiet window instead, press Ctrl-C (finished trials are "
                   f"kept) and {resume} --wait-for-quiet 10m; to stop, press Ctrl-C.")


def duration_text(seconds: float) -> str:
    """``2 min``, ``1 h 30 min``, ``45 s``: a duration in a line for the user."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 else "")
    return f"{s // 3600} h" + (f" {s % 3600 // 60} min" if s % 3600 // 60 else "")
