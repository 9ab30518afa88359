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

import numpy as np
import pandas as pd

from kit.analysis import detectability as det
from kit.analysis.across import mean_log
from kit.analysis.effects import ratio_of_medians
from kit.analysis.stats import MIN_N_FOR_TESTS, mann_whitney, stratified_trend, wilcoxon_paired
from kit.claim_spec import Claim
from kit.errors import AnalysisError

LEDGER_SCHEMA = 1
VERDICTS = ("replicated", "contradicted", "inconclusive", "not testable")
DEFAULT_DIFFERENCE_MARGIN = 0.05  # "they differ" is contradicted by equivalence within 5 % (the kit's practical threshold)
N_BOOT = 2000
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


def _fmt_ratio(est: float | None, low: float | None, high: float | None) -> str:
    if est is None or not math.isfinite(est):
        return ""
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return f"{est:.3g}"
    return f"{est:.3g} [{low:.3g}, {high:.3g}]"


def _side(est: float, direction: str) -> bool:
    return est > 1 if direction == "greater" else est < 1


def _pairs(df: pd.DataFrame, a: str, b: str) -> tuple[np.ndarray, np.ndarray, bool]:
    """Values of arms a and b in one configuration; paired by block where every value has its partner."""
    va, vb = df[df["arm"] == a], df[df["arm"] == b]
    if "block" in df.columns:
        ja = va.groupby("block")["value"].median()
        jb = vb.groupby("block")["value"].median()
        common = ja.index.intersection(jb.index)
        if len(common) >= 2 and len(common) == len(ja) == len(jb) and len(va) == len(ja) and len(vb) == len(jb):
            return ja.loc[common].to_numpy(float), jb.loc[common].to_numpy(float), True
    return va["value"].to_numpy(float), vb["value"].to_numpy(float), False


@dataclass
class _Cell:
    config_id: str
    a: np.ndarray
    b: np.ndarray
    paired: bool

    @property
    def n(self) -> int:
        return int(min(self.a.size, self.b.size))


def _test_p(c: _Cell) -> float | None:
    if c.n < MIN_N_FOR_TESTS:
        return None
    res = wilcoxon_paired(c.a, c.b) if c.paired else mann_whitney(c.a, c.b)
    return float(res.p) if res.p is not None and math.isfinite(res.p) else None


def _ratio(c: _Cell, conf: float) -> tuple[float | None, float | None, float | None]:
    if c.n < 1 or float(np.median(c.b)) == 0.0:
        return None, None, None
    r = ratio_of_medians(c.a, c.b, conf=conf, n_boot=N_BOOT, paired=c.paired)
    fin = (lambda v: float(v) if v is not None and math.isfinite(v) else None)  # noqa: E731
    return fin(r.estimate), fin(r.low), fin(r.high)


def _inside(low: float | None, high: float | None, lo: float, hi: float) -> bool:
    return low is not None and high is not None and lo <= low and high <= hi


def _disjoint(low: float | None, high: float | None, lo: float, hi: float) -> bool:
    return low is not None and high is not None and (high < lo or low > hi)


def _need(c: _Cell, threshold: float, alpha: float, detect: bool) -> int | None:
    noise = det.noise_of(c.a, c.b, c.paired)
    if noise is None or threshold <= 0:
        return None
    if detect:
        return det.n_to_detect(noise, threshold, c.paired, alpha)
    return det.n_needed(noise, threshold, c.paired, alpha)


def _judge_cell(claim: Claim, c: _Cell, alpha: float, k: int) -> dict[str, Any]:
    """One configuration: its value, and whether it replicates (at alpha) or contradicts (at alpha / k)."""
    level_any = alpha / k
    est, low, high = _ratio(c, 1 - alpha)
    row: dict[str, Any] = {"config_id": c.config_id, "n": c.n, "paired": c.paired, "estimate": est, "low": low,
                           "high": high, "p": None, "replicates": False, "contradicts": False, "n_needed": None}
    if est is None:
        row["why"] = "no ratio (an arm has no values, or B's median is 0)"
        return row
    if claim.kind in ("direction", "difference"):
        p = _test_p(c)
        row["p"] = p
        if p is not None:
            if claim.kind == "direction":
                row["replicates"] = p < alpha and _side(est, claim.direction)
                row["contradicts"] = p < level_any and not _side(est, claim.direction) and est != 1
            else:
                m = claim.margin or DEFAULT_DIFFERENCE_MARGIN
                inside, eq_low, eq_high, _ = det.equivalence_interval(c.b, c.a, paired=c.paired, alpha=level_any,
                                                                       threshold=m)
                row["replicates"] = p < alpha
                row["contradicts"] = bool(inside) and not p < alpha
        if not (row["replicates"] or row["contradicts"]):
            obs = abs(math.log(est)) if est > 0 else 0.0
            row["n_needed"] = _need(c, max(math.expm1(obs), 0.01), alpha, detect=True)
    elif claim.kind == "magnitude":
        lo, hi = claim.band() or (0.0, math.inf)
        wide = _ratio(c, 1 - level_any) if k > 1 else (est, low, high)
        row["replicates"] = _inside(wide[1], wide[2], lo, hi)
        row["contradicts"] = _disjoint(wide[1], wide[2], lo, hi)
        if not (row["replicates"] or row["contradicts"]):
            row["n_needed"] = _need(c, claim.tolerance + claim.uncertainty, alpha, detect=False)
    elif claim.kind == "no_difference":
        m = claim.margin
        inside, eq_low, eq_high, _ = det.equivalence_interval(c.b, c.a, paired=c.paired, alpha=alpha, threshold=m)
        wide = _ratio(c, 1 - level_any) if k > 1 else (est, low, high)
        row["replicates"] = bool(inside)
        row["contradicts"] = _disjoint(wide[1], wide[2], 1 / (1 + m), 1 + m)
        row["equivalence_interval"] = [eq_low, eq_high]
        if not (row["replicates"] or row["contradicts"]):
            row["n_needed"] = _need(c, m, alpha, detect=False)
    return row


# --------------------------------------------------------------------------- the claim


def _quantity(claim: Claim) -> str:
    if claim.untestable.strip():
        return "not measured by the kit"
    if claim.kind == "trend":
        return f"{claim.metric} ({claim.phase}) of {', '.join(claim.arms)} along {claim.factor}"
    return f"{claim.metric} ({claim.phase}), {claim.arms[0]}/{claim.arms[1]}"


def _procedure(claim: Claim, alpha: float) -> str:
    scope = {"each": "in each matching configuration", "overall": "the geometric mean over the matching "
             "configurations, with a t interval across them"}[claim.scope]
    return {
        "direction": f"two-sided rank test at {alpha:g} ({scope}); significant on the paper's side: replicated, "
                     "on the other side: contradicted",
        "difference": f"two-sided rank test at {alpha:g} ({scope}); significant: replicated; equivalent within "
                      f"{(claim.margin or DEFAULT_DIFFERENCE_MARGIN):.0%} (TOST): contradicted",
        "magnitude": f"the {1 - alpha:.0%} interval of the ratio ({scope}) inside the paper's band: replicated, "
                     "outside it: contradicted",
        "no_difference": f"TOST at {alpha:g} with margin {claim.margin:.0%} ({scope}): replicated; the "
                         f"{1 - alpha:.0%} interval outside the margin: contradicted",
        "trend": f"stratified Jonckheere-Terpstra test per arm at {alpha:g} along {claim.factor}; every arm "
                 "significant the paper's way: replicated; any arm significant the other way: contradicted",
    }[claim.kind]


def _verdict(claim: Claim, base: dict[str, Any], verdict: str, reason: str, **kw: Any) -> ClaimVerdict:
    return ClaimVerdict(verdict=verdict, reason=reason, **base, **kw)


def judge_claim(claim: Claim, use: pd.DataFrame, configs: Mapping[str, Mapping[str, Any]], ctx: RunContext,
                alpha: float, unresolvable: Unresolvable | None = None) -> ClaimVerdict:
    """The verdict of one claim on the run's counted values (``use``: kit.analysis.analyze.usable)."""
    base: dict[str, Any] = {"id": claim.id, "source": claim.source, "statement": claim.statement,
                            "kind": claim.kind, "quantity": _quantity(claim), "paper_text": claim.paper_text,
                            "procedure": "" if claim.untestable.strip() else _procedure(claim, alpha)}
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
        out = _judge_trend(claim, sel, configs, cids, arms, alpha)
    elif claim.scope == "overall" and len(cids) > 1:
        out = _judge_overall(claim, sel, cids, arms, alpha)
    else:
        out = _judge_each(claim, sel, cids, arms, alpha)
    verdict, reason, extra = out
    if block is not None:  # a claim made under other conditions: this run's value is information, never a verdict
        return _verdict(claim, base, "not testable", f"{block} (this run's figure is shown for information)",
                        **extra)
    return _verdict(claim, base, verdict, reason, **extra)


def _where_text(claim: Claim) -> str:
    return ", ".join(f"{k} = {v}" for k, v in claim.where.items()) or "any settings"


def _judge_each(claim: Claim, sel: pd.DataFrame, cids: list[str], arms: tuple[str, ...],
                alpha: float) -> tuple[str, str, dict[str, Any]]:
    k = len(cids)
    rows = []
    for cid in cids:
        a, b, paired = _pairs(sel[sel["config_id"] == cid], arms[0], arms[1])
        rows.append(_judge_cell(claim, _Cell(cid, a, b, paired), alpha, k))
    ok = [r for r in rows if r["estimate"] is not None]
    extra: dict[str, Any] = {"per_config": tuple(rows), "n": min((r["n"] for r in rows), default=0)}
    if len(rows) == 1:
        r = rows[0]
        extra.update(estimate=r["estimate"], low=r["low"], high=r["high"],
                     value_text=_fmt_ratio(r["estimate"], r["low"], r["high"]) + (f" (p = {r['p']:.3g})"
                                                                                  if r["p"] is not None else ""))
    else:
        ests = [r["estimate"] for r in ok if r["estimate"] and r["estimate"] > 0]
        gm = float(np.exp(np.mean(np.log(ests)))) if ests else None
        extra.update(estimate=gm, value_text=(f"{min(ests):.3g} to {max(ests):.3g} over {len(ok)} configurations"
                                              if ests else ""))
    contra = [r for r in rows if r["contradicts"]]
    if contra:
        band = claim.band()
        shows = {"direction": "show the opposite direction",
                 "difference": f"are equivalent within {(claim.margin or DEFAULT_DIFFERENCE_MARGIN):.0%} (TOST)",
                 "magnitude": (f"lie outside the paper's band [{band[0]:.3g}, {band[1]:.3g}]" if band else
                               "lie outside the paper's band"),
                 "no_difference": f"differ by more than the margin of {claim.margin:.0%}"}[claim.kind]
        return "contradicted", (f"{len(contra)} of {k} configuration(s) {shows} "
                                f"({', '.join(r['config_id'] for r in contra)})"), extra
    if rows and all(r["replicates"] for r in rows):
        return "replicated", f"every one of the {k} matching configuration(s) shows it", extra
    few = [r for r in rows if r["n"] < MIN_N_FOR_TESTS and claim.kind in ("direction", "difference")]
    needs = [r["n_needed"] for r in rows if not r["replicates"] and r["n_needed"] is not None]
    extra["n_needed"] = max(needs) if needs else None
    open_ = [r["config_id"] for r in rows if not r["replicates"]]
    why = (f"not shown in {len(open_)} of {k} configuration(s)"
           + (f"; {len(few)} with fewer than {MIN_N_FOR_TESTS} repetitions per arm (no test)" if few else ""))
    if extra["n_needed"]:
        why += f"; about {extra['n_needed']} repetitions per arm would decide it at the noise seen"
    return "inconclusive", why, extra


def _judge_overall(claim: Claim, sel: pd.DataFrame, cids: list[str], arms: tuple[str, ...],
                   alpha: float) -> tuple[str, str, dict[str, Any]]:
    logs, per = [], []
    for cid in cids:
        d = sel[sel["config_id"] == cid]
        ma, mb = d[d["arm"] == arms[0]]["value"].median(), d[d["arm"] == arms[1]]["value"].median()
        if ma > 0 and mb > 0 and math.isfinite(ma) and math.isfinite(mb):
            logs.append(math.log(ma / mb))
            per.append({"config_id": cid, "estimate": ma / mb, "n": int(min((d["arm"] == arms[0]).sum(),
                                                                               (d["arm"] == arms[1]).sum()))})
    extra: dict[str, Any] = {"per_config": tuple(per), "n": len(logs)}
    if len(logs) < 2:
        return "inconclusive", "fewer than two configurations with a positive ratio: no interval across them", extra
    ml = mean_log(logs, conf=1 - alpha)
    extra.update(estimate=ml.ratio, low=ml.low, high=ml.high,
                 value_text=_fmt_ratio(ml.ratio, ml.low, ml.high) + f" (geometric mean of {len(logs)} configurations)")
    if ml.low is None or ml.high is None:
        return "inconclusive", f"no interval across the configurations ({ml.reason})", extra
    lo, hi = ml.low, ml.high
    if claim.kind in ("direction", "difference"):
        sig = lo > 1 or hi < 1
        if claim.kind == "direction":
            if sig:
                good = _side(ml.ratio, claim.direction)
                return ("replicated" if good else "contradicted"), (
                    f"the interval across {len(logs)} configurations excludes 1 on the "
                    f"{'paper' if good else 'other'}'s side"), extra
        else:
            if sig:
                return "replicated", f"the interval across {len(logs)} configurations excludes 1", extra
            m = claim.margin or DEFAULT_DIFFERENCE_MARGIN
            tost = mean_log(logs, conf=1 - 2 * alpha)
            if tost.low is not None and tost.high is not None and 1 / (1 + m) < tost.low and tost.high < 1 + m:
                return "contradicted", f"equivalent within {m:.0%} across the configurations (TOST)", extra
        return "inconclusive", "the interval across the configurations includes 1: more configurations or " \
                               "less noise would decide it", extra
    if claim.kind == "magnitude":
        blo, bhi = claim.band() or (0.0, math.inf)
        if _inside(lo, hi, blo, bhi):
            return "replicated", f"the interval lies inside the paper's band [{blo:.3g}, {bhi:.3g}]", extra
        if _disjoint(lo, hi, blo, bhi):
            return "contradicted", f"the interval lies outside the paper's band [{blo:.3g}, {bhi:.3g}]", extra
        return "inconclusive", f"the interval overlaps the edge of the paper's band [{blo:.3g}, {bhi:.3g}]", extra
    m = claim.margin
    tost = mean_log(logs, conf=1 - 2 * alpha)
    if tost.low is not None and tost.high is not None and 1 / (1 + m) < tost.low and tost.high < 1 + m:
        return "replicated", f"equivalent within {m:.0%} across the configurations (TOST)", extra
    if _disjoint(lo, hi, 1 / (1 + m), 1 + m):
        return "contradicted", f"the interval lies outside the margin of {m:.0%}", extra
    return "inconclusive", f"neither equivalent within {m:.0%} nor outside it", extra


def _judge_trend(claim: Claim, sel: pd.DataFrame, configs: Mapping[str, Mapping[str, Any]], cids: list[str],
                 arms: tuple[str, ...], alpha: float) -> tuple[str, str, dict[str, Any]]:
    want = "greater" if claim.trend == "increasing" else "less"
    per: list[dict[str, Any]] = []
    parts: list[str] = []
    for arm in arms:
        strata: dict[str, tuple[list[float], list[float]]] = {}
        for cid in cids:
            cfg = configs[cid]
            key = ",".join(f"{k}={v}" for k, v in sorted(cfg.items()) if k != claim.factor) or "all"
            vals = sel[(sel["config_id"] == cid) & (sel["arm"] == arm)]["value"].to_numpy(float)
            xs, ys = strata.setdefault(key, ([], []))
            xs.extend([float(cfg[claim.factor])] * vals.size)
            ys.extend(vals.tolist())
        names = sorted(strata)
        res = stratified_trend([(np.asarray(strata[s][0]), np.asarray(strata[s][1])) for s in names], names=names)
        p = res.p if math.isfinite(res.p) else None
        side = res.concordance > 0 if want == "greater" else res.concordance < 0
        per.append({"arm": arm, "p": p, "concordance": res.concordance if math.isfinite(res.concordance) else None,
                    "strata": res.strata, "n": res.n, "replicates": p is not None and p < alpha and side,
                    "contradicts": p is not None and p < alpha / len(arms) and not side and res.concordance != 0,
                    "reason": res.reason})
        parts.append(f"{arm}: concordance {res.concordance:+.2f}" + (f" (p = {p:.3g})" if p is not None else "")
                     if math.isfinite(res.concordance) else f"{arm}: {res.reason}")
    extra: dict[str, Any] = {"per_config": tuple(per), "n": min(r["n"] for r in per), "value_text": "; ".join(parts)}
    if any(r["contradicts"] for r in per):
        bad = [r["arm"] for r in per if r["contradicts"]]
        return "contradicted", f"{', '.join(bad)} significantly {'falls' if want == 'greater' else 'rises'} " \
                               f"with {claim.factor}", extra
    if all(r["replicates"] for r in per):
        return "replicated", f"every arm significantly {'rises' if want == 'greater' else 'falls'} with " \
                             f"{claim.factor}", extra
    return "inconclusive", f"not significant for {', '.join(r['arm'] for r in per if not r['replicates'])}: more " \
                           "repetitions or levels of the factor would decide it", extra


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
