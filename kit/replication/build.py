"""The replication map: each paper claim of one study by host class, and across classes a random-effects figure.

Runs of one host class are replicates: their verdicts are listed (and "replicates disagree" said when they
differ), their log ratios combined by fixed-effect inverse variance (:func:`kit.replication.meta.fixed_effect`).
Across three or more classes with an estimate, the DerSimonian-Laird pooled ratio, tau^2, I^2 and the prediction
interval for a new host (:func:`kit.replication.meta.random_effects`). A claim the ledger could not judge on a host
(verdict "not testable": conditions the paper's finding depends on were not met there, e.g. the device, the threads
or stand-in data) is shown, labelled with why, and kept out of the pooled figure; its estimates, where the run
has them, enter only the separate "as measured" figure, never a verdict. Differences the ledger records without
blocking a verdict (the paper's hardware, versions it only names) label the cell. Runs of different studies,
profiles or claim tables are never merged: KitError naming which input has which.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kit.analysis.claim_records import ClaimVerdict
from kit.errors import KitError, UsageError
from kit.replication.hostclass import HostClass, cap
from kit.replication.inputs import Inputs, Loaded, Refused
from kit.replication.meta import MIN_CLASSES, LogEffect, fixed_effect, random_effects, se_from_interval

MAP_SCHEMA = 1
ASSUMED_CONF = 0.95  # the interval level when a claim's record does not state it
HETEROGENEOUS_I2 = 0.5  # I^2 from which the answer calls the classes heterogeneous (Higgins 2003: "substantial")
ASSUMPTIONS = (
    "per-run standard error from the claim's interval: a symmetric normal interval on the log scale, at the level "
    "the record states (per_config conf), else 0.95",
    "replicate runs of one host class combined by fixed-effect inverse variance",
    "across host classes: DerSimonian-Laird random effects on log ratios (statsmodels combine_effects), normal "
    "95 % interval; prediction interval for a new host class: t with k - 2 df, sqrt(tau^2 + se^2) (Higgins, "
    "Thompson & Spiegelhalter 2009)",
    "a claim not testable on a host class (conditions its finding depends on unmet there) is shown, labelled, and "
    "kept out of the pooled figure; its estimates enter only the 'as measured' figure, never a verdict",
)
_ATTRIBUTE_ORDER = ("arch", "vendor", "device", "isa", "gpu", "threads", "versions")


@dataclass(frozen=True)
class ClassColumn:
    """One host class of the map and the inputs that fell in it."""

    host: HostClass
    runs: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        return {**self.host.to_json(), "runs": list(self.runs)}


@dataclass(frozen=True)
class Cell:
    """One claim on one host class: its runs' verdicts, the class's ratio with interval, and n."""

    class_key: str
    verdict: str  # the runs' verdict when they agree, else "replicates disagree"
    verdicts: tuple[str, ...]  # each run's verdict
    ratio: float | None
    low: float | None
    high: float | None
    level: float  # the interval's level
    n: int  # repetitions (pairs or trials per arm) summed over the runs
    runs: int
    differences: tuple[str, ...]  # conditions unlike the paper's that the ledger records without blocking a verdict
    pooled: bool  # this cell's estimate entered the pooled figure (judged: not "not testable")
    log_ratio: float | None = None
    se_log: float | None = None
    why_not: str = ""  # not testable: the ledger's reason (the first run's)

    def to_json(self) -> dict[str, object]:
        return {"class": self.class_key, "verdict": self.verdict, "verdicts": list(self.verdicts),
                "ratio": self.ratio, "low": self.low, "high": self.high, "level": self.level, "n": self.n,
                "runs": self.runs, "differences": list(self.differences), "pooled": self.pooled,
                "log_ratio": self.log_ratio, "se_log": self.se_log, "why_not": self.why_not}


@dataclass(frozen=True)
class Pooled:
    """The random-effects figure of one claim across host classes (ratios; tau^2 on the log scale)."""

    k: int
    ratio: float
    ci_low: float
    ci_high: float
    pi_low: float  # prediction interval for a new host class
    pi_high: float
    log_ratio: float
    se_log: float
    tau2: float
    i2: float  # fraction
    q: float
    level: float

    def to_json(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class ClaimRow:
    id: str
    source: str
    statement: str
    quantity: str
    estimator: str
    cells: tuple[Cell, ...]
    pooled: Pooled | None
    answer: str
    # the same random-effects figure over the classes whose runs ran under conditions unlike the paper's: what
    # this profile measured across hosts, for information; never a verdict on the paper's claim
    as_measured: Pooled | None = None

    def to_json(self) -> dict[str, object]:
        return {"id": self.id, "source": self.source, "statement": self.statement, "quantity": self.quantity,
                "estimator": self.estimator, "answer": self.answer, "cells": [c.to_json() for c in self.cells],
                "pooled": None if self.pooled is None else self.pooled.to_json(),
                "as_measured": None if self.as_measured is None else self.as_measured.to_json()}


@dataclass(frozen=True)
class NeverTested:
    """A claim no host given could test, and what would."""

    id: str
    statement: str
    reason: str
    would_test: str

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "statement": self.statement, "reason": self.reason, "would_test": self.would_test}


@dataclass(frozen=True)
class MapResult:
    experiment: str
    profile: str
    classes: tuple[ClassColumn, ...]
    claims: tuple[ClaimRow, ...]
    never_tested: tuple[NeverTested, ...]
    refused: tuple[Refused, ...]
    duplicates: tuple[str, ...]
    runs: int
    reused: int  # analyses reused (seal verified), the rest recomputed
    assumptions: tuple[str, ...] = ASSUMPTIONS
    schema_version: int = MAP_SCHEMA

    def to_json(self) -> dict[str, object]:
        return {"map_schema_version": self.schema_version, "experiment": self.experiment, "profile": self.profile,
                "runs": self.runs, "analyses_reused": self.reused,
                "answers": [{"id": c.id, "answer": c.answer} for c in self.claims],
                "classes": [c.to_json() for c in self.classes], "claims": [c.to_json() for c in self.claims],
                "never_tested": [n.to_json() for n in self.never_tested],
                "refused": [r.to_json() for r in self.refused], "duplicates": list(self.duplicates),
                "assumptions": list(self.assumptions)}


def _claims_table(x: Loaded) -> str:
    """The claims a run judged (id, kind, quantity): runs of edited specs with other claims are not merged."""
    rows = sorted((r.id, r.kind, r.quantity) for r in (x.ledger.rows if x.ledger else ()))
    return "; ".join(f"{i} {k} {q}" for i, k, q in rows)


def check_same(loaded: Sequence[Loaded]) -> None:
    """One study, one profile, one claims table: else KitError naming which input has which."""
    for what, get in (("study", lambda x: x.experiment), ("profile", lambda x: x.profile),
                      ("claims table", _claims_table)):
        first: dict[str, str] = {}
        for x in loaded:
            first.setdefault(get(x), x.source)
        if len(first) > 1:
            named = "; ".join(f"{cap(src, 120)} is {what} {cap(v, 60)!r}" for v, src in list(first.items())[:6])
            plural = {"study": "studies", "profile": "profiles", "claims table": "claims tables"}[what]
            raise UsageError(f"the inputs are of {len(first)} different {plural} and a map merges one: {named}",
                             where="kit map", fix=f"map the runs of one {what} at a time")


def _conf(row: ClaimVerdict) -> float:
    confs = {c.get("conf") for c in row.per_config}
    if len(confs) == 1:
        (c,) = confs
        if isinstance(c, float | int) and not isinstance(c, bool) and 0 < c < 1:
            return float(c)
    return ASSUMED_CONF


def _effect(row: ClaimVerdict) -> LogEffect | None:
    """The run's log ratio and standard error, when it has a positive, ordered interval."""
    est, lo, hi = row.estimate, row.low, row.high
    if est is None or lo is None or hi is None or not all(map(math.isfinite, (est, lo, hi))) or \
            not (0 < lo <= est <= hi):
        return None
    return LogEffect(math.log(est), se_from_interval(lo, hi, _conf(row)))


def _exp(x: float) -> float | None:
    """exp of a log ratio; None where it overflows (a crafted or degenerate estimate: shown as no estimate)."""
    try:
        return math.exp(x)
    except OverflowError:
        return None


def _cell(key: str, rows: Sequence[ClaimVerdict]) -> Cell:
    verdicts = tuple(r.verdict for r in rows)
    verdict = verdicts[0] if len(set(verdicts)) == 1 else "replicates disagree"
    diffs = tuple(dict.fromkeys(cap(d, 200) for r in rows for d in r.differences))
    judged = all(r.verdict != "not testable" for r in rows)
    why_not = next((cap(r.reason, 300) for r in rows if r.verdict == "not testable"), "")
    effects = [e for r in rows if (e := _effect(r)) is not None]
    level = _conf(rows[0])
    n = sum(r.n for r in rows)
    if not effects:
        return Cell(key, verdict, verdicts, None, None, None, level, n, len(rows), diffs, False, why_not=why_not)
    if len(effects) == 1 and len(rows) == 1:
        r = rows[0]
        return Cell(key, verdict, verdicts, r.estimate, r.low, r.high, level, n, 1, diffs, judged,
                    effects[0].log_ratio, effects[0].se, why_not)
    fe = fixed_effect(effects)
    from scipy.stats import norm

    z = float(norm.ppf((1 + level) / 2))
    ratio, low, high = _exp(fe.log_ratio), _exp(fe.log_ratio - z * fe.se), _exp(fe.log_ratio + z * fe.se)
    if ratio is None or low is None or high is None:
        return Cell(key, verdict, verdicts, None, None, None, level, n, len(rows), diffs, False, why_not=why_not)
    return Cell(key, verdict, verdicts, ratio, low, high, level, n, len(rows), diffs, judged, fe.log_ratio, fe.se,
                why_not)


def _distinguishing(bad: Sequence[HostClass], good: Sequence[HostClass]) -> str | None:
    """The value of one attribute that every contradicting class has and no other tested class has (with one
    contradicting class, the answer says it is one class: one host cannot tell which of its attributes matters)."""
    for attr in _ATTRIBUTE_ORDER:
        values = {h.attributes()[attr] for h in bad}
        if len(values) == 1:
            (v,) = values
            if good and all(h.attributes()[attr] != v for h in good):
                return v
    return None


def _as_measured_text(fig: Pooled | None) -> str:
    if fig is None:
        return ""
    return (f"as measured where not judged (no verdict): {fig.ratio:.3g} "
            f"[{fig.ci_low:.3g}, {fig.ci_high:.3g}] over {fig.k} classes, I² {fig.i2 * 100:.0f} %")


def _answer(cells: Sequence[Cell], hosts: Mapping[str, HostClass], pooled: Pooled | None, total: int,
            as_measured: Pooled | None = None) -> str:
    by = {v: [c for c in cells if c.verdict == v] for v in ("replicated", "contradicted", "inconclusive",
                                                           "not testable", "replicates disagree")}
    if cells and len(by["not testable"]) == len(cells):
        head = (f"not judged on any of the {total} host class{'es' if total != 1 else ''} given; why, and what "
                "would test it, below")
        return head + (f"; {_as_measured_text(as_measured)}" if as_measured else "")
    parts = [f"replicated on {len(by['replicated'])} of {total} host class{'es' if total != 1 else ''}"]
    if by["contradicted"]:
        bad = [hosts[c.class_key] for c in by["contradicted"]]
        good = [hosts[c.class_key] for c in cells if c.verdict in ("replicated", "inconclusive")]
        named = _distinguishing(bad, good)
        if len(bad) == 1:
            parts.append(f"contradicted on 1 class, the only one with {named}" if named else
                         f"contradicted on 1 class ({bad[0].label})")
        else:
            parts.append(f"contradicted on {named}" if named else f"contradicted on {len(bad)} classes")
    for v in ("inconclusive", "replicates disagree"):
        if by[v]:
            parts.append(f"{v} on {len(by[v])}")
    if by["not testable"]:
        parts.append(f"not testable on {len(by['not testable'])}")
    if pooled is not None:
        word = "heterogeneous" if pooled.i2 >= HETEROGENEOUS_I2 else "no detectable heterogeneity"
        parts.append(f"{word}: I² {pooled.i2 * 100:.0f} %")
    if as_measured is not None:
        parts.append(_as_measured_text(as_measured))
    return "; ".join(parts)


def build_map(inputs: Inputs) -> MapResult:
    """The map of the loaded inputs (one study and profile: KitError otherwise)."""
    loaded = inputs.loaded
    if not loaded:
        reasons = "; ".join(f"{r.path}: {r.reason}" for r in inputs.refused[:3])
        raise KitError("no input could be mapped" + (f" ({reasons})" if reasons else ""), where="kit map",
                       fix="give run directories or bundles of one study that pass `kit verify --integrity-only`")
    check_same(loaded)
    members: dict[str, list[Loaded]] = {}
    hosts: dict[str, HostClass] = {}
    for x in loaded:
        members.setdefault(x.host.key, []).append(x)
        hosts[x.host.key] = x.host
    order = sorted(members, key=lambda k: hosts[k].label)
    classes = tuple(ClassColumn(hosts[k], tuple(x.source for x in members[k])) for k in order)
    claim_order: dict[str, ClaimVerdict] = {}
    for x in loaded:
        for r in x.ledger.rows if x.ledger else ():
            claim_order.setdefault(r.id, r)
    rows: list[ClaimRow] = []
    never: list[NeverTested] = []
    for cid, first in claim_order.items():
        cells = []
        for k in order:
            per_run = [r for x in members[k] for r in (x.ledger.rows if x.ledger else ()) if r.id == cid]
            if per_run:
                cells.append(_cell(k, per_run))
        pooled = _pooled([c for c in cells if c.pooled])
        as_measured = _pooled([c for c in cells if not c.pooled])
        rows.append(ClaimRow(cap(cid, 40), cap(first.source, 80), cap(first.statement, 300), cap(first.quantity, 120),
                             cap(first.estimator, 80), tuple(cells), pooled,
                             _answer(cells, hosts, pooled, len(order), as_measured), as_measured))
        if cells and all(c.verdict == "not testable" for c in cells):
            rs = [r for x in loaded for r in (x.ledger.rows if x.ledger else ()) if r.id == cid]
            would = next((r.would_test for r in rs if r.would_test), "")
            never.append(NeverTested(cap(cid, 40), cap(first.statement, 300), cap(rs[0].reason, 300),
                                     cap(would, 300) or "no host class given says what would test it"))
    return MapResult(experiment=cap(loaded[0].experiment, 80), profile=cap(loaded[0].profile, 40), classes=classes,
                     claims=tuple(rows), never_tested=tuple(never), refused=inputs.refused,
                     duplicates=inputs.duplicates, runs=len(loaded), reused=sum(1 for x in loaded if x.reused))


def _pooled(cells: Sequence[Cell]) -> Pooled | None:
    effects = [LogEffect(c.log_ratio, c.se_log) for c in cells if c.log_ratio is not None and c.se_log is not None]
    if len(effects) < MIN_CLASSES:
        return None
    re = random_effects(effects)
    values = [_exp(x) for x in (re.log_ratio, re.ci_low, re.ci_high, re.pi_low, re.pi_high)]
    if any(v is None for v in values):
        return None
    return Pooled(k=re.k, ratio=math.exp(re.log_ratio), ci_low=math.exp(re.ci_low), ci_high=math.exp(re.ci_high),
                  pi_low=math.exp(re.pi_low), pi_high=math.exp(re.pi_high), log_ratio=re.log_ratio, se_log=re.se,
                  tau2=re.tau2, i2=re.i2, q=re.q, level=re.level)
