"""The host state each side of a comparison ran in, and when a significant difference is "suspect".

A difference between two arms (or two runs) is evidence about the frameworks
only when both sides ran in the same conditions. The runner re-runs a trial
whose timed phase was disturbed (kit.disturbance); what is left after the
re-runs, and the idle baseline of each run, is summarised here per arm,
configuration and phase as the *load* each side ran under: the share of its
trials still disturbed, the foreign CPU-seconds per trial, and how large the
disturbance was (the mean foreign CPUs while disturbed).

Counting disturbed trials is not enough (issue 39): one mildly disturbed trial
beside eleven quiet ones cannot explain a +10 % regression, while 12 of 12
disturbed at 0.3 CPUs against 12 of 12 at 1.5 CPUs can explain anything. So a
significant result is "suspect" only when the disturbed data could explain it
(:func:`rule_on_load`): the verdict is recomputed on the undisturbed trials
alone, and the change is suspect when that verdict differs, or when too few
undisturbed trials are left to compute it and the sides' loads differ. Otherwise
the verdict stands, with a note naming the load it was measured under.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from kit import disturbance
from kit.analysis_rows import Disturbance, HypothesisLoad, PhaseLoad, ThreatRow
from kit.records import TrialRecord

# Two sides ran under a different load when the share of their trials still disturbed differs by more than this,
# or when their mean foreign CPUs differ by the disturbance limit or more (kit.disturbance.DEFAULT_FOREIGN_CPU: a
# quarter of a CPU, the smallest load the kit treats as a disturbance of one trial). The share tolerance is the
# one the kit used before issue 39 (a quarter of the trials).
SHARE_TOLERANCE = 0.25
CPU_TOLERANCE = disturbance.DEFAULT_FOREIGN_CPU


@dataclass(frozen=True)
class SideState:
    """One side of a comparison (an arm, in one configuration and phase, of one run): how many of its trials were
    judged and still disturbed, and how much foreign CPU ran beside them.

    The foreign CPU is kept as sums so that sides merge (:meth:`plus`): ``cpu_s`` is foreign CPUs × phase
    seconds over the judged phases with a reading, ``weight_s`` those phases' seconds (a phase of an analysis
    written before durations were recorded weighs 1 and leaves ``timed`` False), and the same two for the
    disturbed phases alone."""

    trials: int  # counted trials of the side with a judged disturbance record for the phase
    disturbed: int  # of which still disturbed after the re-runs
    busy_baseline: bool = False  # the run's idle baseline was busy
    cpu_s: float = 0.0
    weight_s: float = 0.0
    disturbed_cpu_s: float = 0.0
    disturbed_weight_s: float = 0.0
    timed: bool = True

    @property
    def share(self) -> float:
        return self.disturbed / self.trials if self.trials else 0.0

    @property
    def foreign_cpus(self) -> float:
        """Mean foreign CPUs over the side's judged phases (time-weighted): its load as a rate."""
        return self.cpu_s / self.weight_s if self.weight_s > 0 else 0.0

    @property
    def size_cpus(self) -> float | None:
        """Mean foreign CPUs over the disturbed phases: how large the disturbance was (None: none disturbed)."""
        return self.disturbed_cpu_s / self.disturbed_weight_s if self.disturbed_weight_s > 0 else None

    @property
    def cpu_s_per_trial(self) -> float | None:
        """Foreign CPU-seconds per judged trial (None where the phases' durations were not recorded)."""
        return self.cpu_s / self.trials if self.trials and self.timed and self.weight_s > 0 else None

    def plus(self, other: SideState) -> SideState:
        """Two parts of one side (e.g. two configurations of one device) as one."""
        return SideState(self.trials + other.trials, self.disturbed + other.disturbed,
                         self.busy_baseline or other.busy_baseline, self.cpu_s + other.cpu_s,
                         self.weight_s + other.weight_s, self.disturbed_cpu_s + other.disturbed_cpu_s,
                         self.disturbed_weight_s + other.disturbed_weight_s, self.timed and other.timed)

    def load_text(self) -> str:
        """"12 of 12 trials disturbed, 3.1 foreign CPU-s per trial, about 1.5 foreign CPUs while disturbed"."""
        bits = [f"{self.disturbed} of {self.trials} trials disturbed"]
        per = self.cpu_s_per_trial
        if per is not None:
            bits.append(f"{per:.2g} foreign CPU-s per trial")
        if self.size_cpus is not None:
            bits.append(f"about {self.size_cpus:.2g} foreign CPU{'' if f'{self.size_cpus:.2g}' == '1' else 's'} "
                        "while disturbed")
        return ", ".join(bits)

    def describe(self, who: str, phase: str) -> str:
        parts = []
        if self.disturbed:
            parts.append(f"{who}: {self.load_text().replace(' trials disturbed', f' trials disturbed in {phase}', 1)}")
        if self.busy_baseline:
            parts.append(f"{who}: host busy before the trials")
        if parts:
            return "; ".join(parts)
        return f"{who}: quiet" + (f" ({self.foreign_cpus:.2f} foreign CPUs)" if self.weight_s > 0 else "")

    @property
    def quiet(self) -> bool:
        return not self.disturbed and not self.busy_baseline


def disturbance_table(trials: Iterable[TrialRecord], retried: Iterable[Mapping[str, Any]]) -> Disturbance:
    """analysis.json's ``disturbance``: per counted trial and phase what ran beside it, and the re-runs."""
    rows: list[PhaseLoad] = []
    measured = 0
    for rec in trials:
        if not rec.counts:
            continue
        d = rec.disturbance  # as disturbance.from_record: a table whose phases are a table, else not measured
        if d is None or not isinstance(d.get("phases"), Mapping):
            continue
        measured += 1
        for phase, p in d["phases"].items():
            if not isinstance(p, Mapping):
                continue
            rows.append(PhaseLoad(trial_id=rec.trial_id, arm=rec.arm, config_id=rec.config_id,
                                  block=rec.block, phase=str(phase), judged=p.get("judged") is True,
                                  disturbed=p.get("disturbed") is True, foreign_cpu=_num(p.get("foreign_cpu")),
                                  trial_cpu=_num(p.get("trial_cpu")), duration_s=_num(p.get("duration_s")),
                                  causes=tuple([str(c)[:200] for c in cast(Iterable[Any], p.get("causes") or [])
                                                if isinstance(c, str)][:5])))
    reruns = [r for r in retried if r.get("disturbed")]
    still = sorted({str(r.trial_id) for r in rows if r.disturbed})
    return Disturbance(measured_trials=measured, judged_phases=sum(r.judged for r in rows),
                       disturbed_phases=sum(r.disturbed for r in rows), still_disturbed_trials=tuple(still),
                       reruns=len(reruns), rerun_trials=tuple(sorted({str(r.get("trial_id")) for r in reruns})),
                       phases=tuple(rows))


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _rows(table: Disturbance | None, arm: str, config_id: str | None, phase: str,
          blocks: Iterable[int] | None = None) -> list[PhaseLoad]:
    keep = set(blocks) if blocks is not None else None
    return [r for r in (table.phases if table is not None else ())
            if r.arm == arm and r.phase == phase and (config_id is None or r.config_id == config_id) and r.judged
            and (keep is None or r.block in keep)]


def side_state(table: Disturbance | None, arm: str, config_id: str | None, phase: str,
               busy_baseline: bool = False, blocks: Iterable[int] | None = None) -> SideState:
    """The state of one side from a run's ``disturbance`` table (``config_id`` None: every configuration)."""
    rows = _rows(table, arm, config_id, phase, blocks)
    cpu_s = weight_s = d_cpu_s = d_weight_s = 0.0
    timed = True
    for r in rows:
        cpus = r.foreign_cpu
        if cpus is None:
            continue
        dur = r.duration_s
        if dur is None or dur <= 0:
            timed, dur = False, 1.0
        cpu_s += cpus * dur
        weight_s += dur
        if r.disturbed:
            d_cpu_s += cpus * dur
            d_weight_s += dur
    return SideState(len(rows), sum(1 for r in rows if r.disturbed), busy_baseline, cpu_s, weight_s, d_cpu_s,
                     d_weight_s, timed)


def disturbed_trials(table: Disturbance | None, arm: str, config_id: str | None, phase: str) -> set[str]:
    """The trial ids of one side still disturbed in ``phase`` (the trials a verdict on quiet trials leaves out)."""
    return {str(r.trial_id) for r in _rows(table, arm, config_id, phase) if r.disturbed}


def disturbed_blocks(table: Disturbance | None, arms: Iterable[str], config_id: str | None,
                     phase: str) -> set[int]:
    """The blocks in which a trial of any of ``arms`` stayed disturbed in ``phase``: a paired design drops
    whole blocks, never one trial of a pair."""
    out: set[int] = set()
    for arm in arms:
        for r in _rows(table, arm, config_id, phase):
            if r.disturbed and r.block is not None:
                out.add(r.block)
    return out


def loads_differ(a: SideState, b: SideState) -> bool:
    """Whether two sides ran under a different load: the share disturbed differs by more than SHARE_TOLERANCE, or
    the mean foreign CPUs by CPU_TOLERANCE or more. A busy idle baseline on one side only counts where that side
    has no judged phase (nothing says whether its trials then ran quiet)."""
    if abs(a.share - b.share) > SHARE_TOLERANCE or abs(a.foreign_cpus - b.foreign_cpus) >= CPU_TOLERANCE:
        return True
    busy = [s for s in (a, b) if s.busy_baseline]
    return len(busy) == 1 and busy[0].trials == 0


def suspect_cause(a: SideState, b: SideState, who_a: str, who_b: str, phase: str) -> str | None:
    """Why a significant difference between sides ``a`` and ``b`` is suspect when it cannot be re-decided on
    quiet trials (None: they ran under a like load, :func:`loads_differ`)."""
    if not loads_differ(a, b):
        return None
    return (f"the two sides ran under different loads ({a.describe(who_a, phase)}; "
            f"{b.describe(who_b, phase)}): re-run on a quiet host before reading this as a difference")


def row_load(table: Disturbance | None, arms: tuple[str, str], config_ids: Iterable[str | None], phase: str,
             blocks: Iterable[int] | None = None, kept: Iterable[int] | None = None) -> HypothesisLoad | None:
    """The load behind one hypothesis row, for its answer sentence (None: no trial behind it stayed disturbed).

    ``blocks``: the row's blocks (None: all of its configurations' trials); ``kept``: the undisturbed blocks it
    was decided on, where the disturbed ones were set aside. Keys: ``trials`` and ``disturbed`` (both arms, over
    ``blocks``), ``foreign_cpus`` (the mean while disturbed), ``foreign_cpu_s_per_trial``, ``decided_on``
    ("undisturbed" or "all") and ``trials_used``."""
    ids = list(config_ids)
    total = SideState(0, 0)
    for arm in arms:
        for cid in ids:
            total = total.plus(side_state(table, arm, cid, phase, blocks=list(blocks) if blocks is not None else None))
    if not total.disturbed:
        return None
    used = [int(b) for b in kept] if kept is not None else None
    return {"trials": total.trials, "disturbed": total.disturbed, "foreign_cpus": total.size_cpus,
            "foreign_cpu_s_per_trial": total.cpu_s_per_trial,
            "decided_on": "undisturbed" if used is not None else "all",
            "trials_used": len(arms) * len(used) if used is not None else total.trials}


@dataclass(frozen=True)
class LoadRuling:
    """What the load makes of a significant result: ``suspect`` (why; None: the verdict stands) and ``note``
    (the load it was measured under; None: both sides quiet)."""

    suspect: str | None
    note: str | None


def rule_on_load(a: SideState, b: SideState, who_a: str, who_b: str, phase: str, verdict: str,
                 quiet_verdict: str | None, quiet_n: str = "") -> LoadRuling:
    """Could the disturbed data explain ``verdict``? ``quiet_verdict``: the same procedure's verdict on the
    undisturbed trials alone (``quiet_n`` says how many), None when too few are left to compute it.

    Suspect when the quiet verdict differs, or cannot be computed and the sides' loads differ (a load common to
    both sides cannot by itself make one of them slower); otherwise the verdict stands with the note.
    """
    if a.quiet and b.quiet:
        return LoadRuling(None, None)
    load = f"{a.describe(who_a, phase)}; {b.describe(who_b, phase)}"
    if not a.disturbed and not b.disturbed:  # only an idle baseline was busy: the trials themselves were judged
        cause = suspect_cause(a, b, who_a, who_b, phase)
        if cause is not None:
            return LoadRuling(cause + " (its phases were too short to judge trial by trial)", None)
        return LoadRuling(None, f"the idle baseline was busy, but every judged phase ran quiet ({load})")
    n = f" ({quiet_n})" if quiet_n else ""
    if quiet_verdict is not None and quiet_verdict != verdict:
        return LoadRuling(f"on the undisturbed trials alone{n} the verdict is {quiet_verdict}, not {verdict}: the "
                          f"load ({load}) could explain it; re-run on a quiet host", None)
    if quiet_verdict is not None:
        return LoadRuling(None, f"measured under load ({load}); the verdict holds on the undisturbed trials "
                                f"alone{n}")
    cause = suspect_cause(a, b, who_a, who_b, phase)
    if cause is not None:
        return LoadRuling(f"too few undisturbed trials to decide without the disturbed ones{n}, and {cause}", None)
    return LoadRuling(None, f"measured under a like load on both sides ({load}): it cannot explain a difference "
                            "between them, but a quiet host may differ")


def busy_baseline(threats: Iterable[ThreatRow]) -> bool:
    """The run's idle baseline said the host was busy (its validity threats hold "Host busy before the trials")."""
    return any(t.rule == "foreign_cpu" and t.title == "Host busy before the trials" for t in threats)
