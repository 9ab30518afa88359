"""Did the paper's findings hold here? One verdict per ``[[claims]]`` table, by a stated procedure.

Each claim (kit.claim_spec) is judged on the run's counted values of its metric and phase, in the
configurations its ``where`` filter selects, and gets one of four verdicts:

* **replicated**: the run shows what the paper found, significantly (or within its tolerance);
* **contradicted**: the run shows the opposite, significantly (or the paper's value is excluded);
* **inconclusive**: neither, with the repetitions that would decide it at the noise the run had;
* **not testable here**: the claim was made under conditions this run does not have (a GPU claim on
  a CPU run, a two-GPU claim on one GPU), its metric was not measured or not resolvable here, no
  configuration of the profile matches, or the kit cannot judge it by design. A claim made on other
  hardware is never *contradicted* by this run: it is not testable, and this run's value is shown
  beside it for information.

Procedures (A/B = median of arm A over median of arm B; alpha the run's level):

* direction: the kit's two-sided test (paired Wilcoxon signed-rank over blocks, else Mann-Whitney) at
  alpha; significant with A/B on the paper's side -> replicated, on the other side -> contradicted;
* difference: significant -> replicated; TOST equivalence within ``margin`` (default 5 %) -> contradicted;
* magnitude: the 1 - alpha interval of A/B (BCa bootstrap of the ratio of medians) inside the paper's
  band (value x (1 -+ tolerance + reading uncertainty)) -> replicated; disjoint from it -> contradicted;
* no_difference: the 1 - 2 alpha Hodges-Lehmann interval of A/B inside [1/(1+m), 1+m] (TOST at alpha)
  -> replicated; the 1 - alpha interval of A/B outside the margin -> contradicted;
* trend: the stratified Jonckheere-Terpstra test (kit.analysis.stats.stratified_trend) of each arm's
  values along ``factor``, strata = the other configuration keys; significant in the paper's direction
  for every arm -> replicated, against it for any arm -> contradicted.

Several configurations: ``scope = "each"`` needs every configuration to replicate (an intersection:
each at alpha), while one contradicting configuration suffices to contradict (a union: tested at
alpha/k, Bonferroni); ``scope = "overall"`` judges the geometric mean of the configurations' A/B with
a t interval across configurations (the configuration is the unit, as in kit.analysis.across). Claims
are separate findings, each judged at alpha; no adjustment across claims.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from kit.analysis.claim_tests import judge_each, judge_overall, judge_trend, procedure_text
from kit.claim_spec import Claim
from kit.errors import AnalysisError

LEDGER_SCHEMA = 1
VERDICTS = ("replicated", "contradicted", "inconclusive", "not testable")
TRAINED_METRICS = ("accuracy", "train_loss")  # what the data and the training protocol decide

Unresolvable = Callable[[str, str, tuple[str, ...], str | None], str | None]


@dataclass(frozen=True)
class RunContext:
    """What this run was, for the claims' conditions: device kinds, GPUs per trial, hardware, versions."""

    profile: str
    device_kinds: tuple[str, ...]  # "cpu", "gpu" (kit.analysis.devices)
    gpus_per_trial: int
    hardware: str  # the GPU or CPU model the trials ran on
    versions: Mapping[str, str]  # framework -> version reported from inside the trial
    arm_of: Mapping[str, str]  # framework -> the run's arm for it (one arm per framework)
    refusal: str | None = None  # the arms are not comparable (kit.analysis.devices)
    # configuration id -> why its accuracy (and loss) is not the paper protocol's (synthetic data, fewer epochs)
    untrained: Mapping[str, str] = field(default_factory=dict)


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

    def as_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["differences"] = list(self.differences)
        out["per_config"] = [dict(r) for r in self.per_config]
        return out


@dataclass(frozen=True)
class Ledger:
    """Every claim of the paper with its verdict, and the one-line answer the report opens with."""

    rows: tuple[ClaimVerdict, ...]
    counts: Mapping[str, int]
    headline: str
    schema_version: int = LEDGER_SCHEMA
    conditions: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        return {"schema_version": self.schema_version, "headline": self.headline, "counts": dict(self.counts),
                "conditions": list(self.conditions), "rows": [r.as_dict() for r in self.rows]}

    @classmethod
    def from_json(cls, obj: Any, where: str) -> Ledger:
        """analysis.json's ``claims`` table, checked (AnalysisError naming the key) and typed."""
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
            need(r.get("verdict") in VERDICTS, f"rows[{i}].verdict", f"one of {', '.join(VERDICTS)}")
            for key in ("estimate", "low", "high"):
                v = r.get(key)
                need(v is None or (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)),
                     f"rows[{i}].{key}", "a finite number or null")
            need(isinstance(r.get("n", 0), int), f"rows[{i}].n", "an integer")
            need(r.get("n_needed") is None or isinstance(r.get("n_needed"), int), f"rows[{i}].n_needed",
                 "an integer or null")
            diffs = r.get("differences", [])
            need(isinstance(diffs, list) and all(isinstance(d, str) for d in diffs), f"rows[{i}].differences",
                 "a list of strings")
            per = r.get("per_config", [])
            need(isinstance(per, list) and all(isinstance(p, dict) for p in per), f"rows[{i}].per_config",
                 "a list of tables")
            rows.append(ClaimVerdict(
                id=r["id"], source=r["source"], statement=r["statement"], kind=r["kind"], quantity=r["quantity"],
                paper_text=r["paper_text"], verdict=r["verdict"], reason=r["reason"], procedure=r["procedure"],
                value_text=r["value_text"], estimate=r.get("estimate"), low=r.get("low"), high=r.get("high"),
                n=r.get("n", 0), n_needed=r.get("n_needed"), differences=tuple(diffs), per_config=tuple(per)))
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


# --------------------------------------------------------------------------- conditions


def _conditions(claim: Claim, ctx: RunContext) -> tuple[str | None, list[str]]:
    """(why the claim is not testable under this run's conditions or None, how the conditions differ)."""
    diffs: list[str] = []
    where = f" ({claim.hardware})" if claim.hardware else ""
    kinds = set(ctx.device_kinds)
    run_on = " and ".join(sorted(kinds)).replace("cpu", "the CPU").replace("gpu", "a GPU") or "an unknown device"
    block = None
    if claim.device == "gpu" and "gpu" not in kinds:
        block = f"the paper measured this on a GPU{where}; this run ran on {run_on}"
    elif claim.device == "cpu" and kinds and "cpu" not in kinds:
        block = f"the paper measured this on a CPU{where}; this run ran on {run_on}"
    elif claim.gpus > max(1, ctx.gpus_per_trial) or (claim.gpus > 1 and ctx.gpus_per_trial < claim.gpus):
        block = f"a {claim.gpus}-GPU claim; this run's trials used {ctx.gpus_per_trial} GPU(s)"
    if claim.hardware:
        diffs.append(f"the paper's hardware: {claim.hardware}; this run's: {ctx.hardware or 'unknown'}")
    for fw, ver in sorted(claim.versions.items()):
        mine = ctx.versions.get(fw)
        if mine is None or not mine.startswith(ver):
            diffs.append(f"the paper used {fw} {ver}; this run {mine or 'an unrecorded version'}")
    if ctx.profile != "paper":
        diffs.append(f"judged on the {ctx.profile} profile, not the paper's protocol")
    return block, diffs


# --------------------------------------------------------------------------- per configuration


# --------------------------------------------------------------------------- the claim


def _quantity(claim: Claim) -> str:
    if claim.untestable.strip():
        return "not measured by the kit"
    if claim.kind == "trend":
        return f"{claim.metric} ({claim.phase}) of {', '.join(claim.arms)} along {claim.factor}"
    return f"{claim.metric} ({claim.phase}), {claim.arms[0]}/{claim.arms[1]}"


def _verdict(claim: Claim, base: dict[str, Any], verdict: str, reason: str, **kw: Any) -> ClaimVerdict:
    return ClaimVerdict(verdict=verdict, reason=reason, **base, **kw)


def judge_claim(claim: Claim, use: pd.DataFrame, configs: Mapping[str, Mapping[str, Any]], ctx: RunContext,
                alpha: float, unresolvable: Unresolvable | None = None) -> ClaimVerdict:
    """The verdict of one claim on the run's counted values (``use``: kit.analysis.analyze.usable)."""
    base: dict[str, Any] = {"id": claim.id, "source": claim.source, "statement": claim.statement,
                            "kind": claim.kind, "quantity": _quantity(claim), "paper_text": claim.paper_text,
                            "procedure": "" if claim.untestable.strip() else procedure_text(claim, alpha)}
    block, diffs = _conditions(claim, ctx)
    base["differences"] = tuple(diffs)
    if claim.untestable.strip():
        return _verdict(claim, base, "not testable", f"the kit cannot judge this claim: {claim.untestable.strip()}",
                        value_text="")
    if ctx.refusal:
        return _verdict(claim, base, "not testable", ctx.refusal, value_text="")
    missing = [fw for fw in claim.arms if fw not in ctx.arm_of]
    if missing:
        return _verdict(claim, base, "not testable", f"this run has no single arm of {', '.join(missing)}",
                        value_text="")
    arms = tuple(ctx.arm_of[fw] for fw in claim.arms)
    cids = [cid for cid, cfg in configs.items() if claim.matches(cfg)]
    if claim.kind == "trend" and claim.up_to is not None:
        cids = [cid for cid in cids if float(configs[cid].get(claim.factor, math.inf)) <= claim.up_to]
    if not cids:
        return _verdict(claim, base, "not testable", block or f"the {ctx.profile} profile runs no configuration "
                        f"with {_where_text(claim)}", value_text="")
    if claim.metric in TRAINED_METRICS:
        skipped = [ctx.untrained[cid] for cid in cids if cid in ctx.untrained]
        cids = [cid for cid in cids if cid not in ctx.untrained]
        if not cids:
            return _verdict(claim, base, "not testable", block or f"a claim about trained models: {skipped[0]}"
                            + (f" (and {len(skipped) - 1} more configuration(s) alike)" if len(skipped) > 1 else ""),
                            value_text="")
    sel = use[(use["metric"] == claim.metric) & (use["phase"] == claim.phase) & use["config_id"].isin(cids)
              & use["arm"].isin(arms)]
    absent = [a for a in arms if sel[sel["arm"] == a].empty]
    if absent:
        return _verdict(claim, base, "not testable", block or f"this run has no {claim.metric} values of the "
                        f"{claim.phase} phase for {', '.join(absent)} (not measured on this host, or its collector "
                        "was off)", value_text="")
    if unresolvable is not None:
        for cid in cids:
            why = unresolvable(claim.metric, claim.phase, arms, cid)
            if why:
                return _verdict(claim, base, "not testable", block or why.replace("the hypothesis", "the claim"),
                                value_text="")
    if claim.kind == "trend":
        out = judge_trend(claim, sel, configs, cids, arms, alpha)
    elif claim.scope == "overall" and len(cids) > 1:
        out = judge_overall(claim, sel, cids, arms, alpha)
    else:
        out = judge_each(claim, sel, cids, arms, alpha)
    verdict, reason, extra = out
    if block is not None:  # a claim made under other conditions: this run's value is information, never a verdict
        return _verdict(claim, base, "not testable", f"{block} (this run's figure is shown for information)",
                        **extra)
    return _verdict(claim, base, verdict, reason, **extra)


def _where_text(claim: Claim) -> str:
    return ", ".join(f"{k} = {v}" for k, v in claim.where.items()) or "any settings"


def judge(claims: Sequence[Claim], use: pd.DataFrame, configs: Mapping[str, Mapping[str, Any]], ctx: RunContext,
          alpha: float, unresolvable: Unresolvable | None = None) -> Ledger:
    """Every claim's verdict, in the spec's order, and the headline."""
    rows = tuple(judge_claim(c, use, configs, ctx, alpha, unresolvable) for c in claims)
    conditions = [f"profile: {ctx.profile}", f"devices: {', '.join(ctx.device_kinds) or 'unknown'}",
                  f"hardware: {ctx.hardware or 'unknown'}"]
    conditions += [f"{fw} {v}" for fw, v in sorted(ctx.versions.items())]
    return Ledger(rows, tally(rows), headline(rows), LEDGER_SCHEMA, tuple(conditions))


def claims_of(spec: Mapping[str, Any]) -> tuple[Claim, ...]:
    """The claims of a manifest's resolved spec, validated again (a manifest is data someone may have crafted)."""
    from kit.spec import parse_claims

    return parse_claims(spec.get("claims") or [], spec.get("experiment", {}).get("frameworks") or [],
                        "manifest.json: spec.claims")
