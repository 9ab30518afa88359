"""What `kit compare` (and `kit bisect`, which judges with it) hands on: typed rows, never dicts.

A :class:`Comparison` holds one :class:`CompareRow` per configuration × metric × phase × arm, the provenance
differences and the paper claims whose verdict changed; renderers (the CLI table, the HTML page, the report's
answer) read its fields. ``to_json()`` is the one place the JSON of ``kit compare --json`` is made
(kit/schemas/compare.schema.json): keys in the order the comparison has always written them, the keys a row only
has once the load was judged (``load``, ``was``, ``suspect_cause``, ``load_note``) only where they are set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kit.analysis.host_state import SideState
from kit.records import JsonValue
from kit.stats.detectability import Detectability

VERDICTS = ("regression", "improvement", "suspect", "no change", "inconclusive", "not tested")

# A provenance value: what a manifest or an analysis said about the host, the images, the spec (flattened).
ProvValue = JsonValue


def load_json(s: SideState) -> dict[str, float | int | bool | None]:
    """One side's load as ``kit compare --json`` writes it."""
    return {"trials": s.trials, "disturbed": s.disturbed, "share": s.share, "foreign_cpus": s.foreign_cpus,
            "foreign_cpu_s_per_trial": s.cpu_s_per_trial, "disturbed_foreign_cpus": s.size_cpus,
            "busy_baseline": s.busy_baseline}


@dataclass(frozen=True, slots=True)
class RowLoad:
    """The load both sides of a changed row ran under, and the row re-judged on its undisturbed trials alone."""

    a: SideState
    b: SideState
    quiet_verdict: str | None  # None: too few undisturbed trials to compute it (or not re-judged)
    quiet_n: str | None  # how many undisturbed trials that verdict rests on, in words

    def to_json(self) -> dict[str, Any]:
        return {"a": load_json(self.a), "b": load_json(self.b), "quiet_verdict": self.quiet_verdict,
                "quiet_n": self.quiet_n}


@dataclass(frozen=True, slots=True)
class CompareRow:
    """B against A in one configuration, metric, phase and arm: ratio, test, detectability and verdict."""

    config: str  # the configuration's label
    metric: str
    phase: str
    arm: str  # the arm, or "B vs A" for two arms of one run
    unit: str
    n_a: int
    n_b: int
    median_a: float
    median_b: float
    ratio: float | None  # the tested ratio B/A (``ratio_estimator`` says which)
    ratio_low: float | None
    ratio_high: float | None
    ratio_estimator: str
    ratio_of_medians: float | None
    test: str | None  # the two-sample test's method
    p: float | None
    cliffs_delta: float | None
    magnitude: str | None
    reason: str | None  # why there is no test, if there is none
    lower_is_better: bool | None
    paired: bool
    detect: Detectability | None = None  # what the comparison could see (set with the Holm family)
    p_adj: float | None = None
    verdict: str = "not tested"
    load: RowLoad | None = None  # a changed row with a disturbed side: the loads and the quiet verdict
    was: str | None = None  # a suspect row: the verdict the numbers alone gave
    suspect_cause: str | None = None
    load_note: str | None = None  # a change that stands under load: the load it was measured under

    @property
    def mde(self) -> float | None:
        """The minimum detectable change (None: unknown, or the design could not reject anything)."""
        j = self.detect.as_dict() if self.detect is not None else {}
        v = j.get("mde")
        return float(v) if isinstance(v, int | float) else None

    @property
    def decidable(self) -> bool | None:
        return None if self.detect is None else self.detect.mde is None or self.mde is not None

    @property
    def n_needed(self) -> int | None:
        return None if self.detect is None else self.detect.n_needed

    @property
    def equivalent(self) -> bool | None:
        return None if self.detect is None else self.detect.equivalent

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "config": self.config, "metric": self.metric, "phase": self.phase, "arm": self.arm, "unit": self.unit,
            "n_a": self.n_a, "n_b": self.n_b, "median_a": self.median_a, "median_b": self.median_b,
            "ratio": self.ratio, "ratio_low": self.ratio_low, "ratio_high": self.ratio_high,
            "ratio_estimator": self.ratio_estimator, "ratio_of_medians": self.ratio_of_medians,
            "test": self.test, "p": self.p, "cliffs_delta": self.cliffs_delta, "magnitude": self.magnitude,
            "reason": self.reason, "lower_is_better": self.lower_is_better, "paired": self.paired}
        if self.detect is not None:
            out.update({k: v for k, v in self.detect.as_dict().items() if k not in ("n_a", "n_b", "paired")})
            out["p_adj"] = self.p_adj
            out["verdict"] = self.verdict
        if self.load is not None:
            out["load"] = self.load.to_json()
        if self.was is not None:
            out["was"] = self.was
            out["suspect_cause"] = self.suspect_cause
        if self.load_note is not None:
            out["load_note"] = self.load_note
        return out


@dataclass(frozen=True, slots=True)
class ProvenanceDiff:
    """One provenance key that differs between the sides, and why it could explain a changed verdict."""

    key: str
    a: ProvValue
    b: ProvValue
    may_explain: str | None  # None: bookkeeping only (the hostname, say)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "a": self.a, "b": self.b, "may_explain": self.may_explain}


@dataclass(frozen=True, slots=True)
class ClaimChange:
    """A paper claim whose verdict differs between two runs of one study."""

    id: str
    statement: str
    verdict_a: str
    verdict_b: str
    value_a: str
    value_b: str
    reason_a: str
    reason_b: str
    could_explain: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "statement": self.statement, "verdict_a": self.verdict_a, "verdict_b": self.verdict_b,
                "value_a": self.value_a, "value_b": self.value_b, "reason_a": self.reason_a,
                "reason_b": self.reason_b, "could_explain": list(self.could_explain)}


@dataclass(frozen=True, slots=True)
class Comparison:
    """B against A: the rows of one Holm family, and (for two runs or two arms) what else differs.

    ``kit.compare.judge`` returns one with the rows alone; ``compare_runs`` adds ``claims_changed`` and
    ``compare_arms`` the ``arms``."""

    rows: tuple[CompareRow, ...]
    threshold: float
    alpha: float
    run_a: str = ""
    run_b: str = ""
    experiment_a: str | None = None
    experiment_b: str | None = None
    provenance_differences: tuple[ProvenanceDiff, ...] = ()
    different_hosts_allowed: bool = False
    claims_changed: tuple[ClaimChange, ...] | None = None  # two runs only
    arms: tuple[str, str] | None = None  # two arms of one run only

    @property
    def counts(self) -> dict[str, int]:
        """How many rows have each verdict (every verdict named, zeros included)."""
        return {v: sum(1 for r in self.rows if r.verdict == v) for v in VERDICTS}

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "run_a": self.run_a, "run_b": self.run_b, "experiment_a": self.experiment_a,
            "experiment_b": self.experiment_b, "threshold": self.threshold, "alpha": self.alpha,
            "rows": [r.to_json() for r in self.rows], "counts": self.counts,
            "provenance_differences": [d.to_json() for d in self.provenance_differences],
            "different_hosts_allowed": self.different_hosts_allowed}
        if self.claims_changed is not None:
            out["claims_changed"] = [c.to_json() for c in self.claims_changed]
        if self.arms is not None:
            out["arms"] = list(self.arms)
        return out
