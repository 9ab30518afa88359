"""Did the paper's findings hold? One verdict per ``[[claims]]`` table, by a stated procedure, under the paper's
conditions only.

Each claim (kit.claim_spec) is judged on the run's counted values of its metric and phase, in the
configurations its ``where`` filter (and its arms' qualifiers) select, and gets one of four verdicts:

* **replicated**: the run shows what the paper found, significantly (or within its tolerance);
* **contradicted**: the run shows the opposite, significantly (or the paper's value is excluded);
* **inconclusive**: neither, with the repetitions that would decide it at the noise the run had;
* **not testable here**: the run lacks a condition the finding depends on, and the verdict names what would
  test it (the command, the host, the time). A claim made under other conditions is never replicated or
  contradicted by this run: its figure is shown beside it, for information only.

Why conditions, not only devices. A CPU-speed ratio measured on 64 Xeon cores says nothing about one thread
of another CPU; a timing of a small stand-in LSTM on synthetic data is not the paper's model; "TensorFlow 2.0's
updates" are not TensorFlow 2.21. The conditions a claim depends on are data (kit.claim_spec); this module
compares them with the run's (:class:`RunContext`, built by kit.analysis.analyze from the manifest and the
trials): the device class of each configuration's trials and the GPUs per trial; the CPU threads and the CPU
model; the framework versions where the paper ties its finding to them; and, per configuration, whether the
run ran the paper protocol's configuration (its model, data and phase definition: :class:`ConfigFacts`).

Which configurations a claim is judged on: those its filter selects that meet the conditions. Every value the
filter lists must remain ("across the five models" is not judged from one model): otherwise the claim is not
testable and says which are missing and why.

Which profile may judge a claim: one whose configurations are the paper protocol's. The quick profiles change
the protocol of every configuration (fewer epochs and steps, smaller or synthetic data, one thread, other
batch sizes), so on a quick run no claim is judged: the quick profile exists to test the kit, not the paper.
This is not a rule about the profile's name: a profile that ran a configuration exactly as the paper profile
does would be judged there.

Where the parts live: the records (RunContext, ConfigFacts, ClaimVerdict, Ledger) in kit.analysis.claim_records,
the conditions and "what would test it" in kit.analysis.claim_conditions, the procedures in kit.analysis.claim_tests
(one configuration, each), claim_overall (across networks), claim_trends (trend, not significant) and claim_family
(Holm across the run's claims, the procedure in words).

The procedures (kit.analysis.claim_tests) say how a claim is judged once it may be; ``scope = "each_network"``
is built here from them: each network's configurations are judged together (as "overall" with the
configurations as units), every network must replicate and one contradicting network, at alpha/k,
contradicts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypedDict

import pandas as pd

from kit.analysis.claim_conditions import (
    _config_conditions,
    _differs,
    _recorded,
    _run_conditions,
    _summarise,
    _where_text,
    would_test,
)
from kit.analysis.claim_family import adjust_claims, procedure_text
from kit.analysis.claim_overall import judge_overall
from kit.analysis.claim_records import (
    BY_DESIGN,
    LEDGER_SCHEMA,
    ClaimVerdict,
    ConfigFacts,
    Ledger,
    RunContext,
    headline,
    tally,
)
from kit.analysis.claim_tests import Evidence, Outcome, judge_each
from kit.analysis.claim_trends import judge_not_significant, judge_trend
from kit.claim_spec import ArmRef, Claim

Unresolvable = Callable[[str, str, tuple[str, ...], str | None], str | None]


# --------------------------------------------------------------------------- arms and configurations


def _quantity(claim: Claim) -> str:
    if claim.untestable.strip():
        return "not measured by the kit"
    if claim.kind == "trend" or (claim.kind == "not_significant" and claim.factor):
        return f"{claim.metric} ({claim.phase}) of {', '.join(claim.arms)} along {claim.factor}"
    b = claim.arms[1] if claim.threshold == 1.0 else f"({claim.threshold:g} x {claim.arms[1]})"
    return f"{claim.metric} ({claim.phase}), {claim.arms[0]}/{b}"


def _qualified(ref: ArmRef, cfg: Mapping[str, Any], facts: ConfigFacts | None) -> bool:
    for key, value in ref.qualifiers:
        if key == "device":
            if facts is None or facts.device != value:
                return False
        elif str(cfg.get(key)) != value:
            return False
    return True


@dataclass(frozen=True)
class _Selection:
    """The values a claim is judged on: relabelled so that the procedures see two (or more) arms and units."""

    sel: pd.DataFrame
    arms: tuple[str, ...]
    cids: list[str]  # the units the procedures iterate (configuration ids, or "A~B" pairs)
    configs: dict[str, Mapping[str, Any]]  # unit -> its configuration (the keys a trend stratifies by)
    networks: dict[str, str]  # unit -> network


def _select(claim: Claim, refs: tuple[ArmRef, ...], use: pd.DataFrame, configs: Mapping[str, Mapping[str, Any]],
            cids: list[str], ctx: RunContext) -> _Selection:
    """The rows of the claim's metric and phase for its arms in ``cids``. Plain framework arms keep the run's
    arms and blocks; qualified arms take their own configurations, paired on the keys the qualifiers leave free,
    and judged unpaired (the kit's blocks hold one configuration: trials of two configurations are not a pair)."""
    base = use[(use["metric"] == claim.metric) & (use["phase"] == claim.phase)]
    if not any(r.qualifiers for r in refs):
        arms = tuple(ctx.arm_of[r.framework] for r in refs)
        sel = base[base["config_id"].isin(cids) & base["arm"].isin(arms)]
        return _Selection(sel, arms, cids, {c: configs[c] for c in cids}, {c: ctx.networks.get(c, c) for c in cids})
    labels = tuple(r.text for r in refs)
    parts = []
    units: list[str] = []
    if claim.kind == "trend" or len(refs) != 2:
        for ref, label in zip(refs, labels, strict=True):
            mine = [c for c in cids if _qualified(ref, configs[c], ctx.facts.get(c))]
            units += [c for c in mine if c not in units]
            d = base[base["config_id"].isin(mine) & (base["arm"] == ctx.arm_of[ref.framework])]
            parts.append(d.assign(arm=label))
        sel = pd.concat(parts) if parts else base.iloc[0:0]
        return _Selection(sel.drop(columns=["block"], errors="ignore"), labels, units,
                          {c: configs[c] for c in units}, {c: ctx.networks.get(c, c) for c in units})
    free = {k for r in refs for k, _ in r.qualifiers}

    def key(c: str) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k, str(v)) for k, v in configs[c].items() if k not in free))

    side = [[c for c in cids if _qualified(r, configs[c], ctx.facts.get(c))] for r in refs]
    unit_cfg: dict[str, Mapping[str, Any]] = {}
    nets: dict[str, str] = {}
    for ca in side[0]:
        for cb in side[1]:
            if key(ca) == key(cb) and ca != cb:
                unit = f"{ca}~{cb}"
                units.append(unit)
                unit_cfg[unit] = dict(key(ca))
                nets[unit] = ctx.networks.get(ca, unit)
                for c, ref, label in ((ca, refs[0], labels[0]), (cb, refs[1], labels[1])):
                    d = base[(base["config_id"] == c) & (base["arm"] == ctx.arm_of[ref.framework])]
                    parts.append(d.assign(arm=label, config_id=unit))
    sel = pd.concat(parts) if parts else base.iloc[0:0]
    return _Selection(sel.drop(columns=["block"], errors="ignore"), labels, units, unit_cfg, nets)


def _scaled(claim: Claim, s: _Selection) -> _Selection:
    """A threshold t other than 1: B's values times t, so that A/(t B) is judged against 1 by the procedures."""
    if claim.threshold == 1.0 or len(s.arms) != 2:
        return s
    sel = s.sel.copy()
    b = sel["arm"] == s.arms[1]
    sel.loc[b, "value"] = sel.loc[b, "value"] * claim.threshold
    return replace(s, sel=sel)


def _missing(claim: Claim, kept: Sequence[Mapping[str, Any]]) -> list[str]:
    """The values the claim's filter lists that no kept configuration has ("case = svhn")."""
    return [f"{k} = {v}" for k, vals in claim.listed().items() for v in vals if not any(c.get(k) == v for c in kept)]


# --------------------------------------------------------------------------- judging


def _overall(claim: Claim, s: _Selection, cids: list[str], alpha: float, by_network: bool) -> Outcome:
    """judge_overall with the network as the unit where the configurations span two or more networks (one
    network: its configurations are the units, as kit.analysis.across takes one network's interval)."""
    nets = {c: s.networks.get(c, c) for c in cids}
    networks = nets if by_network and len(set(nets.values())) >= 2 else None
    return judge_overall(claim, s.sel, cids, s.arms, alpha, networks=networks, with_p=True)


class NetworkRow(TypedDict):
    """One network of an "each_network" claim, as its per_config row in analysis.json."""

    network: str
    configurations: int
    estimate: float | None
    low: float | None
    high: float | None
    replicates: bool
    contradicts: bool
    why: str
    n: int
    p: float | None


def _each_network(claim: Claim, s: _Selection, cids: list[str], alpha: float) -> Outcome:
    """Each network judged on its own configurations (one: trial-level; several: as "overall" across them);
    every network must replicate at alpha, one contradicting at alpha/k contradicts (a union)."""
    groups: dict[str, list[str]] = {}
    for c in cids:
        groups.setdefault(s.networks.get(c, c), []).append(c)
    k = len(groups)
    plain = replace(claim, scope="overall")
    rows: list[NetworkRow] = []
    parts, estimators = [], []
    for net, members in groups.items():
        def one(level: float, members: list[str] = members) -> Outcome:
            if len(members) == 1:
                return judge_each(plain, s.sel, members, s.arms, level, with_p=True)
            return _overall(plain, s, members, level, by_network=False)
        verdict, why, extra = one(alpha)
        estimators.append(str(extra.get("estimator") or ""))
        strict = one(alpha / k)[0] if k > 1 and verdict != "replicated" else verdict
        rows.append(NetworkRow(network=net, configurations=len(members), estimate=extra.get("estimate"),
                               low=extra.get("low"), high=extra.get("high"), replicates=verdict == "replicated",
                               contradicts=strict == "contradicted", why=why, n=extra.get("n", 0),
                               p=extra.get("p")))
        parts.append(f"{net} {extra.get('value_text') or '-'}")
    extra_all: Evidence = {"per_config": tuple(rows), "n": k, "value_text": "; ".join(parts),
                           "estimator": next((e for e in estimators if e), "")}
    contra = [r["network"] for r in rows if r["contradicts"]]
    # the claim's p, for Holm across the run's claims: replicated needs every network (intersection-union: the
    # largest p); contradicted needs one at alpha/k (Bonferroni: the smallest p times k)
    p_con = [min(1.0, k * float(r["p"])) for r in rows if r["contradicts"] and r["p"] is not None]
    if contra:
        extra_all["p"] = min(p_con) if p_con else None
        return "contradicted", f"{len(contra)} of {k} network(s) show the opposite ({', '.join(contra)})", extra_all
    if rows and all(r["replicates"] for r in rows):
        known = [float(r["p"]) for r in rows if r["p"] is not None]
        extra_all["p"] = max(known) if len(known) == len(rows) else None
        return "replicated", f"every one of the {k} networks shows it", extra_all
    open_ = [r["network"] for r in rows if not r["replicates"]]
    return "inconclusive", f"not shown in {len(open_)} of {k} network(s) ({', '.join(open_)})", extra_all


def _procedure(claim: Claim, alpha: float) -> str:
    if claim.untestable.strip():
        return ""
    if claim.kind == "not_significant":
        return (f"the run's rank test at the paper's design (its first {claim.paper_n} repetitions per arm) at "
                f"{alpha:g}: not rejected: replicated, with the test's power at this run's noise stated; rejected: "
                "contradicted; no verdict where that design cannot reach p below the level")
    text = procedure_text(replace(claim, scope="overall" if claim.scope == "each_network" else claim.scope), alpha)
    if claim.scope == "each_network":
        text += "; per network (its configurations together), every network must show it"
    if claim.threshold != 1.0:
        text += f"; against A/B = {claim.threshold:g} (B's values scaled by it)"
    return text


def _run(claim: Claim, s: _Selection, alpha: float) -> Outcome:
    if claim.kind == "not_significant":
        return judge_not_significant(claim, s.sel, s.cids, s.arms, alpha, claim.paper_n, configs=s.configs,
                                     with_p=True)
    if claim.kind == "trend":
        nets = {c: s.networks.get(c, c) for c in s.cids}
        networks = nets if claim.scope == "overall" and len(set(nets.values())) >= 2 else None
        return judge_trend(claim, s.sel, s.configs, s.cids, s.arms, alpha, networks=networks, with_p=True)
    if claim.scope == "each_network":
        return _each_network(claim, s, s.cids, alpha)
    if claim.scope == "overall" and len(s.cids) > 1:
        return _overall(claim, s, s.cids, alpha, by_network=True)
    return judge_each(claim, s.sel, s.cids, s.arms, alpha, with_p=True)


def _verdict(base: ClaimVerdict, verdict: str, reason: str, found: Evidence | None = None) -> ClaimVerdict:
    """A row from the claim's facts (``base``) and what the procedure found (its keys the row has; the rest, such
    as the networks' names, stay in per_config)."""
    f = found if found is not None else Evidence()
    out = replace(base, verdict=verdict, reason=reason, value_text=f.get("value_text", ""), estimate=f.get("estimate"),
                  low=f.get("low"), high=f.get("high"), n=f.get("n", 0), n_needed=f.get("n_needed"),
                  per_config=f.get("per_config", ()), p=f.get("p"), estimator=f.get("estimator", ""),
                  networks_needed=f.get("networks_needed"))
    return out if verdict == "not testable" else replace(out, would_test="")  # said of not-testable claims only


def judge_claim(claim: Claim, use: pd.DataFrame, configs: Mapping[str, Mapping[str, Any]], ctx: RunContext,
                alpha: float, unresolvable: Unresolvable | None = None) -> ClaimVerdict:
    """The verdict of one claim on the run's counted values (``use``: kit.analysis.analyze.usable)."""
    base = ClaimVerdict(id=claim.id, source=claim.source, statement=claim.statement, kind=claim.kind,
                        quantity=_quantity(claim), paper_text=claim.paper_text, reading=claim.reading,
                        procedure=_procedure(claim, alpha), verdict="not testable", reason="", value_text="")
    if claim.untestable.strip():
        return _verdict(replace(base, would_test=BY_DESIGN), "not testable",
                        f"the kit cannot judge this claim: {claim.untestable.strip()}")
    refs = claim.arm_refs()
    cids = [cid for cid, cfg in configs.items() if claim.matches(cfg)]
    if claim.up_to is not None:
        cids = [cid for cid in cids if float(configs[cid].get(claim.factor, math.inf)) <= claim.up_to]
    run_blocks = _run_conditions(claim, ctx)
    base = replace(base, differences=tuple(_recorded(claim, ctx)), would_test=would_test(claim, ctx))
    removed = claim.cause_removed.strip()
    if removed:  # recorded, never judged: the run has not the paper's cause, so neither verdict would be the paper's
        base = replace(base, would_test=BY_DESIGN)
    if ctx.refusal:
        return _verdict(base, "not testable", ctx.refusal)
    missing_arms = [r.framework for r in refs if r.framework not in ctx.arm_of]
    if missing_arms:
        return _verdict(base, "not testable", f"this run has no single arm of {', '.join(missing_arms)}")
    if not cids:
        return _verdict(base, "not testable", f"the {ctx.profile} profile runs no configuration with "
                        f"{_where_text(claim)}")
    # which configurations meet the conditions; run-level conditions are in run_blocks
    kept, dropped = [], {}
    for cid in cids:
        why = _config_conditions(claim, ctx, cid)
        if why:
            dropped[cid] = why
        else:
            kept.append(cid)
    absent = _missing(claim, [configs[c] for c in cids])
    lost = _missing(claim, [configs[c] for c in kept])
    blocks = list(run_blocks)
    if not kept or [m for m in lost if m not in absent]:
        blocks += sorted({b for why in dropped.values() for b in why})
    if absent:
        blocks.append(f"the configurations: the {ctx.profile} profile runs none with {', '.join(absent)} (the "
                      "claim needs every one it lists)")
    judged_on = kept if not blocks else cids
    blocks = _summarise(blocks)
    s = _scaled(claim, _select(claim, refs, use, configs, judged_on, ctx))
    if not blocks and dropped:
        base = replace(base, differences=(*base.differences, *(f"configuration {c} left out: {'; '.join(w)}"
                                                               for c, w in dropped.items())))
    if any(r.qualifiers for r in refs) and not s.cids:
        blocks.append("the configurations: this run has no configuration of " + " beside one of ".join(
            r.text for r in refs) + " with the other keys the same")
        base = replace(base, would_test=would_test(claim, ctx, both_devices=any(k == "device" for r in refs
                                                                                  for k, _ in r.qualifiers)))
    absent_arms = [a for a in s.arms if s.sel[s.sel["arm"] == a].empty]
    if absent_arms and s.cids:
        none = (f"this run has no {claim.metric} values of the {claim.phase} phase for {', '.join(absent_arms)} (not "
                "measured on this host, or its collector was off)")
        if removed:
            none = f"the kit removes the cause of the paper's gap: {removed}"
        return _verdict(base, "not testable", _differs(blocks) if blocks and not removed else none)
    if unresolvable is not None and not blocks and not removed:
        for cid in kept:
            why_u = unresolvable(claim.metric, claim.phase, tuple(ctx.arm_of[r.framework] for r in refs), cid)
            if why_u:
                return _verdict(base, "not testable", why_u.replace("the hypothesis", "the claim"))
    if not s.cids:
        return _verdict(base, "not testable", f"the kit removes the cause of the paper's gap: {removed}" if removed
                        else _differs(blocks))
    verdict, reason, extra = _run(claim, s, alpha)
    # a claim made under other conditions: this run's value (value_text) is information, never a verdict; the
    # reason names only the conditions, so that claims alike read alike (the report groups them by it)
    if removed:
        base = replace(base, differences=(*base.differences, *(f"also differs in {b}" for b in blocks)))
        return _verdict(base, "not testable", f"the kit removes the cause of the paper's gap: {removed}", extra)
    if blocks:
        return _verdict(base, "not testable", _differs(blocks), extra)
    return _verdict(base, verdict, reason, extra)



# --------------------------------------------------------------------------- the ledger


def judge(claims: Sequence[Claim], use: pd.DataFrame, configs: Mapping[str, Mapping[str, Any]], ctx: RunContext,
          alpha: float, unresolvable: Unresolvable | None = None) -> Ledger:
    """Every claim's verdict, in the spec's order, and the headline."""
    rows = tuple(judge_claim(c, use, configs, ctx, alpha, unresolvable) for c in claims)
    rows = tuple(adjust_claims(list(rows), alpha))  # one family: Holm across the run's tested claims
    conditions = [f"profile: {ctx.profile}", f"devices: {', '.join(ctx.device_kinds) or 'unknown'}",
                  f"hardware: {ctx.hardware or 'unknown'}"]
    if ctx.cpu_model and ctx.cpu_model != ctx.hardware:
        conditions.append(f"CPU: {ctx.cpu_model}")
    threads = sorted({f.threads for f in ctx.facts.values() if f.threads is not None})
    if threads:
        conditions.append(f"CPU threads per trial: {', '.join(str(t) for t in threads)}")
    conditions += [f"{fw} {v}" for fw, v in sorted(ctx.versions.items())]
    return Ledger(rows, tally(rows), headline(rows), LEDGER_SCHEMA, tuple(conditions))


def claims_of(spec: Mapping[str, Any]) -> tuple[Claim, ...]:
    """The claims of a manifest's resolved spec, validated again (a manifest is data someone may have crafted)."""
    from kit.spec import parse_claims

    return parse_claims(spec.get("claims") or [], spec.get("experiment", {}).get("frameworks") or [],
                        "manifest.json: spec.claims")
