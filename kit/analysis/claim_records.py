"""The records of the paper-claims ledger: the run's conditions (:class:`RunContext`, :class:`ConfigFacts`), one
claim's verdict (:class:`ClaimVerdict`) and the ledger (:class:`Ledger`) analysis.json holds under ``claims``.

They are apart from the judging (kit.analysis.claims) so that the report, ``kit compare`` and the typed analysis
read a ledger without importing the procedures; ``to_json()`` is the one place its JSON is made, and
:meth:`Ledger.from_json` the one place it is read back (checked: a ledger is data someone may have edited).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kit.errors import AnalysisError

LEDGER_SCHEMA = 1
VERDICTS = ("replicated", "contradicted", "inconclusive", "not testable")
TRAINED_METRICS = ("accuracy", "train_loss")  # what the data and the training protocol decide
BY_DESIGN = "no run of the kit: by design (see the reason)"


@dataclass(frozen=True)
class ConfigFacts:
    """How one configuration of this run stands against the paper protocol's same configuration."""

    device: str | None = None  # the device kind its trials ran on ("cpu" / "gpu"; None: unknown)
    threads: int | None = None  # the CPU threads its trials could use (None: not known)
    network: str = ""  # the network it runs (kit.analysis.across.network_of)
    data: str = ""  # "" when the data are the paper's kind; else the stand-in ("synthetic data for ...")
    data_sized: bool = False  # a stand-in with the paper's sizes (a claim on shapes only may use it)
    protocol: tuple[str, ...] = ()  # what the profile runs otherwise than the paper protocol (keys, "no such ...")


@dataclass(frozen=True)
class RunContext:
    """What this run was, for the claims' conditions: devices, GPUs per trial, CPU, versions, configurations."""

    profile: str
    device_kinds: tuple[str, ...]  # "cpu", "gpu" (kit.analysis.devices)
    gpus_per_trial: int
    hardware: str  # the GPU or CPU model the trials ran on
    versions: Mapping[str, str]  # framework -> version reported from inside the trial
    arm_of: Mapping[str, str]  # framework -> the run's arm for it (one arm per framework)
    refusal: str | None = None  # the arms are not comparable (kit.analysis.devices)
    # configuration id -> why its accuracy (and loss) is not the paper protocol's (synthetic data, fewer epochs)
    untrained: Mapping[str, str] = field(default_factory=dict)
    experiment: str = ""  # the experiment id, for the command that would test a claim
    cpu_model: str = ""  # the host's CPU model
    facts: Mapping[str, ConfigFacts] = field(default_factory=dict)  # configuration id -> its facts
    paper_estimate_s: float | None = None  # the paper profile's stated run time

    @property
    def networks(self) -> dict[str, str]:
        """Configuration id -> the network it runs, where known (the unit of an "overall" claim)."""
        return {cid: f.network for cid, f in self.facts.items() if f.network}


@dataclass(frozen=True)
class ClaimVerdict:
    """One claim of the paper beside this run's value and the verdict, with the reason and the procedure."""

    id: str
    source: str
    statement: str
    kind: str
    quantity: str  # "time_s (train), tensorflow/pytorch" in words a reader can follow
    paper_text: str
    verdict: str
    reason: str
    procedure: str
    value_text: str  # this run's value with its interval ("" when there is none)
    estimate: float | None = None
    low: float | None = None
    high: float | None = None
    n: int = 0  # repetitions (pairs or trials per arm) or configurations behind the value
    n_needed: int | None = None  # repetitions that would decide an inconclusive claim (None: unknown)
    differences: tuple[str, ...] = ()  # how this run's conditions differ from the paper's
    per_config: tuple[Mapping[str, Any], ...] = ()
    reading: str = ""  # the kit's reading of the paper's text
    would_test: str = ""  # not testable: the command and host that would test it
    p: float | None = None  # the p of the verdict the procedure reached (kit.analysis.claim_tests)
    p_adjusted: float | None = None  # Holm over the run's tested claims (claim_family.adjust_claims)
    family_size: int = 0  # how many claims that adjustment was over (0: not adjusted)
    estimator: str = ""  # what the printed ratio is (the tested quantity)
    networks_needed: int | None = None  # an overall claim: the networks that would decide it

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["differences"] = list(self.differences)
        out["per_config"] = [dict(r) for r in self.per_config]
        return out


def _count_ok(v: Any) -> bool:
    """A count read from analysis.json: an integer (not a bool) from 0 to a bound no run reaches."""
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 10**9


@dataclass(frozen=True)
class Ledger:
    """Every claim of the paper with its verdict, and the one-line answer the report opens with."""

    rows: tuple[ClaimVerdict, ...]
    counts: Mapping[str, int]
    headline: str
    schema_version: int = LEDGER_SCHEMA
    conditions: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": self.schema_version, "headline": self.headline, "counts": dict(self.counts),
                "conditions": list(self.conditions), "rows": [r.to_json() for r in self.rows]}

    @classmethod
    def from_json(cls, obj: Any, where: str) -> Ledger:
        """analysis.json's ``claims`` table, checked (AnalysisError naming the key) and typed. The keys added by
        issue 38 (reading, would_test, p, p_adjusted, family_size, estimator, networks_needed) are optional: a
        ledger written before them reads as having none."""
        def need(ok: bool, key: str, expected: str) -> None:
            if not ok:
                raise AnalysisError(f"claims.{key}: expected {expected}", where=where,
                                    fix="delete analysis.json: `kit report RUN` recomputes it from the raw data")

        need(isinstance(obj, dict), "", "a table")
        need(obj.get("schema_version") == LEDGER_SCHEMA, "schema_version", f"{LEDGER_SCHEMA}")
        need(isinstance(obj.get("headline"), str), "headline", "a string")
        rows_in = obj.get("rows")
        need(isinstance(rows_in, list), "rows", "a list")
        rows = []
        for i, r in enumerate(rows_in):
            need(isinstance(r, dict), f"rows[{i}]", "a table")
            for key in ("id", "source", "statement", "kind", "quantity", "paper_text", "reason", "procedure",
                        "value_text"):
                need(isinstance(r.get(key), str), f"rows[{i}].{key}", "a string")
            for key in ("reading", "would_test"):
                need(isinstance(r.get(key, ""), str), f"rows[{i}].{key}", "a string")
            need(r.get("verdict") in VERDICTS, f"rows[{i}].verdict", f"one of {', '.join(VERDICTS)}")
            for key in ("estimate", "low", "high"):
                v = r.get(key)
                need(v is None or (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)),
                     f"rows[{i}].{key}", "a finite number or null")
            need(_count_ok(r.get("n", 0)), f"rows[{i}].n", "an integer >= 0")
            need(r.get("n_needed") is None or _count_ok(r.get("n_needed")), f"rows[{i}].n_needed",
                 "an integer >= 0 or null")
            diffs = r.get("differences", [])
            need(isinstance(diffs, list) and all(isinstance(d, str) for d in diffs), f"rows[{i}].differences",
                 "a list of strings")
            per = r.get("per_config", [])
            need(isinstance(per, list) and all(isinstance(p, dict) for p in per), f"rows[{i}].per_config",
                 "a list of tables")
            for key in ("p", "p_adjusted"):
                v = r.get(key)
                need(v is None or (isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= 1),
                     f"rows[{i}].{key}", "a probability in [0, 1] or null")
            need(_count_ok(r.get("family_size", 0)), f"rows[{i}].family_size", "an integer >= 0")
            need(isinstance(r.get("estimator", ""), str), f"rows[{i}].estimator", "a string")
            need(r.get("networks_needed") is None or _count_ok(r.get("networks_needed")),
                 f"rows[{i}].networks_needed", "an integer >= 0 or null")
            rows.append(ClaimVerdict(
                id=r["id"], source=r["source"], statement=r["statement"], kind=r["kind"], quantity=r["quantity"],
                paper_text=r["paper_text"], verdict=r["verdict"], reason=r["reason"], procedure=r["procedure"],
                value_text=r["value_text"], estimate=r.get("estimate"), low=r.get("low"), high=r.get("high"),
                n=r.get("n", 0), n_needed=r.get("n_needed"), differences=tuple(diffs), per_config=tuple(per),
                reading=r.get("reading", ""), would_test=r.get("would_test", ""), p=r.get("p"),
                p_adjusted=r.get("p_adjusted"), family_size=r.get("family_size", 0),
                estimator=r.get("estimator", ""), networks_needed=r.get("networks_needed")))
        conditions = obj.get("conditions", [])
        need(isinstance(conditions, list) and all(isinstance(c, str) for c in conditions), "conditions",
             "a list of strings")
        return cls(tuple(rows), tally(rows), headline(rows), LEDGER_SCHEMA, tuple(conditions))


def tally(rows: Sequence[ClaimVerdict]) -> dict[str, int]:
    return {v: sum(1 for r in rows if r.verdict == v) for v in VERDICTS}


def headline(rows: Sequence[ClaimVerdict]) -> str:
    """"2 of 6 claims replicated, 1 contradicted, 3 not testable on this host"."""
    if not rows:
        return "this experiment lists no claims of a paper ([[claims]] in its experiment.toml)"
    c = tally(rows)
    parts = [f"{c['replicated']} of {len(rows)} claims replicated"]
    parts += [f"{c[v]} {v}" for v in ("contradicted", "inconclusive") if c[v]]
    if c["not testable"]:
        parts.append(f"{c['not testable']} not testable on this host")
    return ", ".join(parts)

