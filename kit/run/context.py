"""One execution of a run's trials: what the loop carries from trial to trial, and the waits and budgets it keeps.

A :class:`RunContext` is made from a :class:`kit.run.prepare.Prepared` (the spec resolved once) and the run
directory; the loop, the host readings and the trial code read it, never the spec's methods.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kit import disturbance, disturbance_cpus, pinning, slow_phase, studies
from kit.backends.base import Backend
from kit.collectors.quiet import HOST, QUIET_WINDOW_S, LoadScope, QuietWait, read_load, wait_for_quiet
from kit.executors import Executor
from kit.records import Plan, TrialRecord
from kit.run.options import RunEvents, RunOptions
from kit.run.prepare import Prepared, ResolvedTrial
from kit.spec import Spec
from kit.store import RunDir

if TYPE_CHECKING:
    from kit.collectors.ambient import AmbientReader
    from kit.collectors.thermal import TemperatureReader


@dataclass
class RunContext:
    """The prepared run, its directory and options, and what the loop learns as it goes (baseline, budgets)."""

    prepared: Prepared
    rd: RunDir
    opts: RunOptions
    events: RunEvents
    executor: Executor  # where the run's trials run (only its name and chunks matter here)
    baseline: dict[str, float] = field(default_factory=dict)
    temp_reader: TemperatureReader | None = None
    ambient_reader: AmbientReader | None = None  # made at the first trial
    only: frozenset[str] | None = None  # a chunk's trials (cluster job); None: the whole plan
    shared: bool = False  # other jobs write into the same run directory: leave the manifest alone
    retry: dict[str, TrialRecord] = field(default_factory=dict)  # finished trials to run again, as recorded
    idle_freq_mhz: float | None = None  # median CPU frequency of the idle baseline (throttling reference)
    reruns: disturbance.RerunLedger | None = None  # the run's re-run budget and what is spent of it
    quiet: slow_phase.QuietTimes | None = None  # the quiet trials' times per pass so far (kit.slow_phase)
    limits: disturbance.Limits = field(init=False)  # when a timed phase counts as disturbed ([design])

    def __post_init__(self) -> None:
        # A study folder's trials import the run's copy of the folder (checked against the manifest's digest).
        self.backend.study_dir = studies.checked_copy(self.rd.path, self.rd.manifest())
        self.limits = self.prepared.spec.design.disturbance_limits()

    @property
    def spec(self) -> Spec:
        """The resolved spec, for its settings (telemetry, design); its trials are never resolved again."""
        return self.prepared.spec

    @property
    def plan(self) -> Plan:
        return self.prepared.plan

    @property
    def backend(self) -> Backend:
        return self.prepared.backend

    def resolved(self, trial_id: str) -> ResolvedTrial:
        return self.prepared.trials[trial_id]


def rerun_ledger(ctx: RunContext) -> disturbance.RerunLedger:
    """The run's re-run budget, with the re-runs its directory shows already spent (a resume gets no new budget)."""
    design = ctx.spec.design
    scope = [t for t in ctx.plan.trials if not t.warmup and (ctx.only is None or t.trial_id in ctx.only)]
    ids = {t.trial_id for t in scope}
    budget = disturbance.RerunBudget(len(scope), design.disturbance_budget_frac, design.disturbance_retries)
    spent = disturbance.spent_reruns(a.record for a in ctx.rd.checked_attempts() if a.trial_id in ids)
    ctx.rd.log_event("rerun_budget", **budget.as_dict(), spent=spent, chunk=ctx.opts.chunk,
                     wait_for_quiet_s=ctx.opts.wait_for_quiet_s)
    return disturbance.RerunLedger(budget, spent=spent)


def quiet_times(ctx: RunContext) -> slow_phase.QuietTimes:
    """The run's quiet references for the slow-phase rule: read once from the finished trials (a resume keeps
    them), then grown by each new record (kit.run.trial.run_one)."""
    if ctx.quiet is None:
        ctx.quiet = slow_phase.QuietTimes.from_records(ctx.rd.trial_records())
    return ctx.quiet


def load_scope(ctx: RunContext) -> LoadScope:
    """Where the idle baseline and the quiet wait count other work: a pinned run's trial CPUs and their SMT
    siblings, as its phases are judged (kit.disturbance_cpus); the host when not pinned or pinned to every CPU."""
    pin = ctx.backend.pinning
    if not pin.trial_cpus:
        return HOST
    covered = disturbance_cpus.cover(pin.trial_cpus, disturbance_cpus.read_siblings(pin.trial_cpus))
    if set(covered) >= set(pinning.available_cpus()):
        return HOST
    return LoadScope(covered, not pin.kit_cpus or bool(set(pin.kit_cpus) & set(covered)))


def quiet_wait(ctx: RunContext, when: str) -> QuietWait:
    """Wait (bounded by --wait-for-quiet) for a quiet window, with a countdown; log and say how it ended."""
    secs = ctx.opts.wait_for_quiet_s
    assert secs is not None
    limit = ctx.spec.design.disturbance_cpu
    ctx.events.message(f"waiting up to {disturbance.duration_text(secs)} for a quiet window (other work at most "
                       f"{limit:g} CPUs over {QUIET_WINDOW_S:g} s); Ctrl-C stops the run")
    try:
        scope = load_scope(ctx)
        res = wait_for_quiet(secs, limit, tick=lambda left, cpu: ctx.events.waiting(when, left, cpu),
                             read=lambda: read_load(scope=scope))
    except KeyboardInterrupt:
        ctx.rd.log_event("quiet_wait", when=when, quiet=False, outcome="interrupted", duration_s=secs)
        raise
    ctx.rd.log_event("quiet_wait", when=when, outcome="quiet" if res.quiet else "timeout", **res.as_dict())
    figure = "" if res.foreign_cpu is None else f" (other work: {res.foreign_cpu:.2f} CPUs)"
    ctx.events.message(f"quiet window after {res.waited_s:.0f} s{figure}: going on" if res.quiet else
                       f"no quiet window within {disturbance.duration_text(secs)}{figure}: going on anyway, disturbed "
                       "trials are flagged")
    return res
