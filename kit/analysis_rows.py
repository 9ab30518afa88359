"""The typed rows of an analysis (analysis.json's tables), each with the one mapping to and from its JSON.

:class:`kit.analysis_record.Analysis` holds these; the analysis layer computes them and the report, compare and history
read their fields instead of indexing dicts by name. Each row's ``to_json`` writes exactly the keys the kit has
always written (the golden analyses are compared key for key), and ``from_json`` reads what any kit of the same
analysis schema wrote: a key an older kit did not write reads as None (or empty), and a key this kit does not
know is kept, in ``more``, so that nothing is lost on the way through.

Nested results that are themselves the output of a statistic (a test's fields, a threat's numbers, an outlier
screen) stay JSON values, typed as such (:data:`JsonValue`), not ``Any``: the report prints them and nothing
computes on them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypedDict

from kit.records import JsonTable, JsonValue

JsonScalar = str | int | float | bool | None


def _more(obj: Mapping[str, JsonValue], known: Iterable[str]) -> JsonTable:
    """The keys of ``obj`` beyond ``known``, in their order (what a row keeps without typing it)."""
    skip = set(known)
    return {k: v for k, v in obj.items() if k not in skip}


def _obj(v: JsonValue) -> JsonTable:
    return v if isinstance(v, dict) else {}


def _objs(v: JsonValue) -> tuple[JsonTable, ...]:
    return tuple(r for r in v if isinstance(r, dict)) if isinstance(v, list) else ()


def _str(v: JsonValue) -> str:
    return v if isinstance(v, str) else ""


def _opt_str(v: JsonValue) -> str | None:
    return v if isinstance(v, str) else None


def _num(v: JsonValue) -> float | None:
    """A number as written (an int stays an int: the file is rewritten as it was read)."""
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _int(v: JsonValue) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _strs(v: JsonValue) -> tuple[str, ...]:
    return tuple(str(x) for x in v) if isinstance(v, list) else ()


def table_of(v: JsonValue) -> JsonTable:
    """A JSON value read as a table ({} for anything else): a nested result (a test's ``ratio``, a row's
    ``detectable``) read without indexing a value that may be missing."""
    return _obj(v)


def number_of(v: JsonValue) -> float | None:
    """A JSON value read as a number (None for anything else, a bool included)."""
    return _num(v)


def _ints(v: JsonValue) -> tuple[int, ...]:
    return tuple(x for x in v if isinstance(x, int) and not isinstance(x, bool)) if isinstance(v, list) else ()


# -- the value table --------------------------------------------------------------------------------------------------

VALUE_KEYS = ("trial_id", "arm", "framework", "config_id", "block", "repetition", "position", "warmup", "status",
              "phase", "metric", "value", "unit", "n_samples", "bound")


@dataclass(frozen=True, slots=True)
class ValueRow:
    """One trial's value of one metric in one phase (kit.analysis.metrics.VALUE_COLUMNS)."""

    trial_id: str
    arm: str
    framework: str | None
    config_id: str
    block: int | None
    repetition: int | None
    position: int | None
    warmup: bool
    status: str
    phase: str
    metric: str
    value: float | None
    unit: str | None
    n_samples: int | None
    bound: float | None

    @property
    def counts(self) -> bool:
        """kit.records.counts for a value row: a measured trial (not a warm-up) that finished ok."""
        return self.status == "ok" and not self.warmup

    @classmethod
    def from_json(cls, r: Mapping[str, JsonValue]) -> ValueRow:
        return cls(trial_id=_str(r.get("trial_id")), arm=_str(r.get("arm")), framework=_opt_str(r.get("framework")),
                   config_id=_str(r.get("config_id")), block=_int(r.get("block")),
                   repetition=_int(r.get("repetition")), position=_int(r.get("position")),
                   warmup=r.get("warmup") is True, status=_str(r.get("status")), phase=_str(r.get("phase")),
                   metric=_str(r.get("metric")), value=_num(r.get("value")), unit=_opt_str(r.get("unit")),
                   n_samples=_int(r.get("n_samples")), bound=_num(r.get("bound")))

    def to_json(self) -> JsonTable:
        return {k: getattr(self, k) for k in VALUE_KEYS}


# -- what the run was -------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RunSummary:
    """analysis.json's ``run``: the plan against what finished, and how much of the wall time was timed."""

    planned: int
    finished: int
    missing: int
    by_status: dict[str, int]
    warmup_trials: int
    status: str | None
    backend: str | None
    blocking: str | None
    seed: int | None
    started: float | None
    ended: float | None
    timed_share: float | None
    timed_s: float | None
    trial_wall_s: float | None
    timed_trials: int
    phase_passes: dict[str, list[int]]
    min_phase_s: float | None
    more: JsonTable = field(default_factory=dict)

    _KEYS = ("planned", "finished", "missing", "by_status", "warmup_trials", "status", "backend", "blocking", "seed",
             "started", "ended", "timed_share", "timed_s", "trial_wall_s", "timed_trials", "phase_passes",
             "min_phase_s")

    @classmethod
    def from_json(cls, r: Mapping[str, JsonValue]) -> RunSummary:
        by_status = {str(k): v for k, v in _obj(r.get("by_status")).items() if isinstance(v, int)}
        passes = {str(k): list(_ints(v)) for k, v in _obj(r.get("phase_passes")).items()}
        return cls(planned=_int(r.get("planned")) or 0, finished=_int(r.get("finished")) or 0,
                   missing=_int(r.get("missing")) or 0, by_status=by_status,
                   warmup_trials=_int(r.get("warmup_trials")) or 0, status=_opt_str(r.get("status")),
                   backend=_opt_str(r.get("backend")), blocking=_opt_str(r.get("blocking")), seed=_int(r.get("seed")),
                   started=_num(r.get("started")), ended=_num(r.get("ended")), timed_share=_num(r.get("timed_share")),
                   timed_s=_num(r.get("timed_s")), trial_wall_s=_num(r.get("trial_wall_s")),
                   timed_trials=_int(r.get("timed_trials")) or 0, phase_passes=passes,
                   min_phase_s=_num(r.get("min_phase_s")), more=_more(r, cls._KEYS))

    def to_json(self) -> JsonTable:
        out: JsonTable = {k: getattr(self, k) for k in self._KEYS}
        out["by_status"] = dict(self.by_status)
        out["phase_passes"] = {k: list(v) for k, v in self.phase_passes.items()}
        return {**out, **self.more}


@dataclass(frozen=True, slots=True)
class Measured:
    """Whether one metric was measured in the run, and why not."""

    metric: str
    label: str
    unit: str
    measured: bool
    n_values: int
    reason: str | None

    @classmethod
    def from_json(cls, r: Mapping[str, JsonValue]) -> Measured:
        return cls(metric=_str(r.get("metric")), label=_str(r.get("label")), unit=_str(r.get("unit")),
                   measured=r.get("measured") is True, n_values=_int(r.get("n_values")) or 0,
                   reason=_opt_str(r.get("reason")))

    def to_json(self) -> JsonTable:
        return {"metric": self.metric, "label": self.label, "unit": self.unit, "measured": self.measured,
                "n_values": self.n_values, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Descriptive:
    """One arm's descriptives of one metric, phase and configuration (kit.stats.describe's figures in ``stats``)."""

    config_id: str
    metric: str
    phase: str
    arm: str
    unit: str
    stats: dict[str, JsonScalar]  # n, mean, sd, median, q1, q3, ...: kit.stats.Descriptives, by name
    config_label: str | None
    normality: JsonTable | None
    outliers: JsonTable

    _HEAD = ("config_id", "metric", "phase", "arm", "unit")
    _TAIL = ("config_label", "normality", "outliers")

    @classmethod
    def from_json(cls, r: Mapping[str, JsonValue]) -> Descriptive:
        stats = {k: v for k, v in r.items() if k not in cls._HEAD + cls._TAIL and not isinstance(v, (list, dict))}
        norm = r.get("normality")
        return cls(config_id=_str(r.get("config_id")), metric=_str(r.get("metric")), phase=_str(r.get("phase")),
                   arm=_str(r.get("arm")), unit=_str(r.get("unit")), stats=stats,
                   config_label=_opt_str(r.get("config_label")), normality=norm if isinstance(norm, dict) else None,
                   outliers=_obj(r.get("outliers")))

    def stat(self, name: str) -> float | None:
        return _num(self.stats.get(name))

    def to_json(self) -> JsonTable:
        out: JsonTable = {k: getattr(self, k) for k in self._HEAD}
        out.update(self.stats)
        if self.config_label is not None:
            out["config_label"] = self.config_label
        out["normality"] = self.normality
        out["outliers"] = self.outliers
        return out


# -- the hypotheses ---------------------------------------------------------------------------------------------------

class HypothesisLoad(TypedDict):
    """The load behind one hypothesis row (kit.analysis.host_state.row_load), as analysis.json writes it under
    the row's ``load``: the answer sentence says what the verdict was decided on, and under what load."""

    trials: int  # both arms' counted trials over the row's blocks
    disturbed: int  # of which still disturbed after the re-runs
    foreign_cpus: float | None  # the mean foreign CPU while disturbed
    foreign_cpu_s_per_trial: float | None
    decided_on: str  # "undisturbed" (the disturbed blocks set aside) or "all"
    trials_used: int


@dataclass(frozen=True, slots=True)
class HypothesisResult:
    """One row of the hypothesis table: a hypothesis on one configuration (or across them), phase and arm pair.

    ``comparison`` is the test's output as JSON (kit.stats.compare_two, or the test across networks);
    ``more`` the keys only some rows carry (load, suspect, detectable, the across-configuration fields, ...),
    read through the properties below.
    """

    id: str
    question: str
    metric: str
    metric_tested: str | None
    label: str
    unit: str
    phase: str
    config_id: str | None
    arm_a: str
    arm_b: str
    h0: str
    h1: str
    n_pairs: int
    blocks: tuple[int, ...]
    family: str
    test_unit: str | None
    tested: bool
    comparison: JsonTable | None
    reason: str | None
    p: float | None
    p_adj: float | None
    p_adjust: JsonTable
    test_method: str | None
    decision: str
    rejected: bool | None
    effect_text: str | None
    direction: str | None
    more: JsonTable = field(default_factory=dict)

    _KEYS = ("id", "question", "metric", "metric_tested", "label", "unit", "phase", "config_id", "arm_a", "arm_b",
             "h0", "h1", "n_pairs", "blocks", "family", "test_unit", "tested", "comparison", "reason", "p", "p_adj",
             "p_adjust", "test_method", "decision", "rejected", "effect_text", "direction")

    @classmethod
    def from_json(cls, r: Mapping[str, JsonValue]) -> HypothesisResult:
        comp = r.get("comparison")
        rejected = r.get("rejected")
        return cls(id=_str(r.get("id")), question=_str(r.get("question")), metric=_str(r.get("metric")),
                   metric_tested=_opt_str(r.get("metric_tested")), label=_str(r.get("label")),
                   unit=_str(r.get("unit")), phase=_str(r.get("phase")), config_id=_opt_str(r.get("config_id")),
                   arm_a=_str(r.get("arm_a")), arm_b=_str(r.get("arm_b")), h0=_str(r.get("h0")), h1=_str(r.get("h1")),
                   n_pairs=_int(r.get("n_pairs")) or 0, blocks=_ints(r.get("blocks")),
                   family=_str(r.get("family")) or "primary", test_unit=_opt_str(r.get("test_unit")),
                   tested=r.get("tested") is True, comparison=comp if isinstance(comp, dict) else None,
                   reason=_opt_str(r.get("reason")), p=_num(r.get("p")), p_adj=_num(r.get("p_adj")),
                   p_adjust=_obj(r.get("p_adjust")), test_method=_opt_str(r.get("test_method")),
                   decision=_str(r.get("decision")), rejected=rejected if isinstance(rejected, bool) else None,
                   effect_text=_opt_str(r.get("effect_text")), direction=_opt_str(r.get("direction")),
                   more=_more(r, cls._KEYS))

    def to_json(self) -> JsonTable:
        out: JsonTable = {k: getattr(self, k) for k in self._KEYS}
        out["blocks"] = list(self.blocks)
        return {**out, **self.more}

    @property
    def tested_metric(self) -> str:
        return self.metric_tested or self.metric

    @property
    def not_testable(self) -> bool:
        return self.more.get("not_testable") is True

    @property
    def not_decided(self) -> bool:
        return self.more.get("not_decided") is True

    @property
    def suspect(self) -> str | None:
        return _opt_str(self.more.get("suspect"))

    @property
    def load_note(self) -> str | None:
        return _opt_str(self.more.get("load_note"))

    @property
    def config_label(self) -> str | None:
        return _opt_str(self.more.get("config_label"))

    @property
    def device(self) -> str | None:
        return _opt_str(self.more.get("device"))

    @property
    def config_ids(self) -> tuple[str, ...]:
        return _strs(self.more.get("config_ids"))

    @property
    def n_networks(self) -> int | None:
        """A test across configurations (kit.analysis.across): how many networks it paired."""
        return _int(self.more.get("n_networks"))

    @property
    def metric_note(self) -> str | None:
        return _opt_str(self.more.get("metric_note"))

    @property
    def load(self) -> JsonTable | None:
        v = self.more.get("load")
        return v if isinstance(v, dict) else None

    @property
    def detectable(self) -> JsonTable | None:
        v = self.more.get("detectable")
        return v if isinstance(v, dict) else None


# -- threats to validity ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ThreatRow:
    """One finding of a validity rule (kit.analysis.threats registers the rules)."""

    rule: str
    category: str  # conclusion | internal | construct | external
    severity: str
    title: str
    evidence: str
    mitigation: str
    status: str = "threat"  # threat | mitigated
    numbers: JsonTable = field(default_factory=dict)

    @classmethod
    def from_json(cls, r: Mapping[str, JsonValue]) -> ThreatRow:
        return cls(rule=_str(r.get("rule")), category=_str(r.get("category")), severity=_str(r.get("severity")),
                   title=_str(r.get("title")), evidence=_str(r.get("evidence")), mitigation=_str(r.get("mitigation")),
                   status=_str(r.get("status")) or "threat", numbers=_obj(r.get("numbers")))

    def to_json(self) -> JsonTable:
        return {"rule": self.rule, "category": self.category, "severity": self.severity, "title": self.title,
                "evidence": self.evidence, "mitigation": self.mitigation, "status": self.status,
                "numbers": self.numbers}


# -- what ran beside the trials ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class PhaseLoad:
    """What ran beside one counted trial in one timed phase (kit.disturbance's judgement of it)."""

    trial_id: str | None
    arm: str | None
    config_id: str | None
    block: int | None
    phase: str
    judged: bool
    disturbed: bool
    foreign_cpu: float | None
    trial_cpu: float | None
    duration_s: float | None
    causes: tuple[str, ...]

    @classmethod
    def from_json(cls, r: Mapping[str, JsonValue]) -> PhaseLoad:
        return cls(trial_id=_opt_str(r.get("trial_id")), arm=_opt_str(r.get("arm")),
                   config_id=_opt_str(r.get("config_id")), block=_int(r.get("block")), phase=_str(r.get("phase")),
                   judged=r.get("judged") is True, disturbed=r.get("disturbed") is True,
                   foreign_cpu=_num(r.get("foreign_cpu")), trial_cpu=_num(r.get("trial_cpu")),
                   duration_s=_num(r.get("duration_s")), causes=_strs(r.get("causes")))

    def to_json(self) -> JsonTable:
        return {"trial_id": self.trial_id, "arm": self.arm, "config_id": self.config_id, "block": self.block,
                "phase": self.phase, "judged": self.judged, "disturbed": self.disturbed,
                "foreign_cpu": self.foreign_cpu, "trial_cpu": self.trial_cpu, "duration_s": self.duration_s,
                "causes": list(self.causes)}


@dataclass(frozen=True, slots=True)
class Disturbance:
    """analysis.json's ``disturbance``: per counted trial and phase what ran beside it, and the re-runs."""

    measured_trials: int = 0
    judged_phases: int = 0
    disturbed_phases: int = 0
    still_disturbed_trials: tuple[str, ...] = ()
    reruns: int = 0
    rerun_trials: tuple[str, ...] = ()
    phases: tuple[PhaseLoad, ...] = ()

    @classmethod
    def from_json(cls, r: Mapping[str, JsonValue] | None) -> Disturbance:
        r = r or {}
        return cls(measured_trials=_int(r.get("measured_trials")) or 0, judged_phases=_int(r.get("judged_phases")) or 0,
                   disturbed_phases=_int(r.get("disturbed_phases")) or 0,
                   still_disturbed_trials=_strs(r.get("still_disturbed_trials")), reruns=_int(r.get("reruns")) or 0,
                   rerun_trials=_strs(r.get("rerun_trials")),
                   phases=tuple(PhaseLoad.from_json(p) for p in _objs(r.get("phases"))))

    def to_json(self) -> JsonTable:
        return {"measured_trials": self.measured_trials, "judged_phases": self.judged_phases,
                "disturbed_phases": self.disturbed_phases, "still_disturbed_trials": list(self.still_disturbed_trials),
                "reruns": self.reruns, "rerun_trials": list(self.rerun_trials),
                "phases": [p.to_json() for p in self.phases]}


# -- the design -------------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class DesignRow:
    """Per hypothesis and phase: unit, test, n per comparison, Holm family, decidable (kit.analysis.design)."""

    id: str
    phase: str
    metric: str
    unit: str
    test: str
    n: int
    n_note: str
    comparisons: int
    family: str
    decidable: bool
    reason: str | None
    more: JsonTable = field(default_factory=dict)  # the figures: min_p, MDEs, thresholds, the across fields

    _KEYS = ("id", "phase", "metric", "unit", "test", "n", "n_note", "comparisons", "family", "decidable", "reason")

    @classmethod
    def from_json(cls, r: Mapping[str, JsonValue]) -> DesignRow:
        return cls(id=_str(r.get("id")), phase=_str(r.get("phase")), metric=_str(r.get("metric")),
                   unit=_str(r.get("unit")), test=_str(r.get("test")), n=_int(r.get("n")) or 0,
                   n_note=_str(r.get("n_note")), comparisons=_int(r.get("comparisons")) or 0,
                   family=_str(r.get("family")) or "primary", decidable=r.get("decidable") is True,
                   reason=_opt_str(r.get("reason")), more=_more(r, cls._KEYS))

    def to_json(self) -> JsonTable:
        return {**{k: getattr(self, k) for k in self._KEYS}, **self.more}


@dataclass(frozen=True, slots=True)
class Design:
    """analysis.json's ``design``: the rows and what they were computed under."""

    rows: tuple[DesignRow, ...]
    all_decidable: bool
    more: JsonTable = field(default_factory=dict)  # alpha, family sizes, power, cv, the method sentence

    @classmethod
    def from_json(cls, r: Mapping[str, JsonValue]) -> Design:
        return cls(rows=tuple(DesignRow.from_json(x) for x in _objs(r.get("rows"))),
                   all_decidable=r.get("all_decidable") is True, more=_more(r, ("rows", "all_decidable")))

    def to_json(self) -> JsonTable:
        return {"rows": [r.to_json() for r in self.rows], **{k: v for k, v in self.more.items()},
                "all_decidable": self.all_decidable}
