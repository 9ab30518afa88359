"""The host state each side of a comparison ran in, and when a significant difference is "suspect".

A difference between two arms (or two runs) is evidence about the frameworks
only when both sides ran in the same conditions. The runner re-runs a trial
whose timed phase was disturbed (kit.disturbance); what is left after the
re-runs, and the idle baseline of each run, is summarised here per arm,
configuration and phase. A significant result whose sides differ in it is
called "suspect" with the cause, never "regression", "improvement" or a plain
"reject H0": on a shared host the other process is the likelier explanation,
and the remedy is a re-run, not a conclusion.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kit import disturbance
from kit.records import counts


@dataclass(frozen=True)
class SideState:
    """One side of a comparison (an arm, in one configuration and phase, of one run)."""

    trials: int  # counted trials of the side with a judged disturbance record for the phase
    disturbed: int  # of which still disturbed after the re-runs
    busy_baseline: bool = False  # the run's idle baseline was busy

    def describe(self, who: str, phase: str) -> str:
        parts = []
        if self.disturbed:
            parts.append(f"{who}: {self.disturbed} of {self.trials} trials disturbed in {phase}")
        if self.busy_baseline:
            parts.append(f"{who}: host busy before the trials")
        return "; ".join(parts) or f"{who}: quiet"

    @property
    def quiet(self) -> bool:
        return not self.disturbed and not self.busy_baseline


def disturbance_table(trials: Iterable[Mapping[str, Any]], retried: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """analysis.json's ``disturbance``: per counted trial and phase what ran beside it, and the re-runs."""
    rows: list[dict[str, Any]] = []
    measured = 0
    for rec in trials:
        if not counts(rec):
            continue
        d = disturbance.from_record(rec)
        if d is None:
            continue
        measured += 1
        for phase, p in d["phases"].items():
            if not isinstance(p, Mapping):
                continue
            rows.append({"trial_id": rec.get("trial_id"), "arm": rec.get("arm"), "config_id": rec.get("config_id"),
                         "block": rec.get("block"), "phase": str(phase), "judged": p.get("judged") is True,
                         "disturbed": p.get("disturbed") is True, "foreign_cpu": _num(p.get("foreign_cpu")),
                         "trial_cpu": _num(p.get("trial_cpu")),
                         "causes": [str(c)[:200] for c in (p.get("causes") or []) if isinstance(c, str)][:5]})
    reruns = [r for r in retried if r.get("disturbed")]
    still = sorted({str(r["trial_id"]) for r in rows if r["disturbed"]})
    return {"measured_trials": measured, "judged_phases": sum(r["judged"] for r in rows),
            "disturbed_phases": sum(r["disturbed"] for r in rows), "still_disturbed_trials": still,
            "reruns": len(reruns), "rerun_trials": sorted({str(r.get("trial_id")) for r in reruns}), "phases": rows}


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def side_state(table: Mapping[str, Any] | None, arm: str, config_id: str | None, phase: str,
               busy_baseline: bool = False, blocks: Iterable[int] | None = None) -> SideState:
    """The state of one side from a run's ``disturbance`` table (``config_id`` None: every configuration)."""
    keep = set(blocks) if blocks is not None else None
    rows = [r for r in (table or {}).get("phases", []) or []
            if isinstance(r, Mapping) and r.get("arm") == arm and r.get("phase") == phase
            and (config_id is None or r.get("config_id") == config_id) and r.get("judged")
            and (keep is None or r.get("block") in keep)]
    return SideState(len(rows), sum(1 for r in rows if r.get("disturbed")), busy_baseline)


def suspect_cause(a: SideState, b: SideState, who_a: str, who_b: str, phase: str) -> str | None:
    """Why a significant difference between sides ``a`` and ``b`` is suspect (None: they ran alike).

    The sides differ when one had trials still disturbed after the re-runs and the other had none (or a
    clearly different share), or when only one ran after a busy idle baseline.
    """
    share_a = a.disturbed / a.trials if a.trials else 0.0
    share_b = b.disturbed / b.trials if b.trials else 0.0
    differ = (bool(a.disturbed) != bool(b.disturbed)) or abs(share_a - share_b) > 0.25
    differ = differ or a.busy_baseline != b.busy_baseline
    if not differ:
        return None
    return (f"the two sides ran in different host conditions ({a.describe(who_a, phase)}; "
            f"{b.describe(who_b, phase)}): re-run on a quiet host before reading this as a difference")


def busy_baseline(threats: Iterable[Mapping[str, Any]]) -> bool:
    """The run's idle baseline said the host was busy (its validity threats hold "Host busy before the trials")."""
    for t in threats:
        if isinstance(t, Mapping) and t.get("rule") == "foreign_cpu" and t.get("title") == "Host busy before the trials":
            return True
    return False
