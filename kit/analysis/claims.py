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

The procedures (kit.analysis.claim_tests) say how a claim is judged once it may be; ``scope = "each_network"``
is built here from them: each network's configurations are judged together (as "overall" with the
configurations as units), every network must replicate and one contradicting network, at alpha/k,
contradicts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from kit.analysis.claim_tests import (
    adjust_claims,
    judge_each,
    judge_not_significant,
    judge_overall,
    judge_trend,
    procedure_text,
)
from kit.claim_spec import ArmRef, Claim
from kit.errors import AnalysisError

LEDGER_SCHEMA = 1
VERDICTS = ("replicated", "contradicted", "inconclusive", "not testable")
TRAINED_METRICS = ("accuracy", "train_loss")  # what the data and the training protocol decide
BY_DESIGN = "no run of the kit: by design (see the reason)"

Unresolvable = Callable[[str, str, tuple[str, ...], str | None], str | None]
Outcome = tuple[str, str, dict[str, Any]]


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
    p_adjusted: float | None = None  # Holm over the run's tested claims (claim_tests.adjust_claims)
    family_size: int = 0  # how many claims that adjustment was over (0: not adjusted)
    estimator: str = ""  # what the printed ratio is (the tested quantity)
    networks_needed: int | None = None  # an overall claim: the networks that would decide it

    def as_dict(self) -> dict[str, Any]:
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

    def as_dict(self) -> dict[str, Any]:
        return {"schema_version": self.schema_version, "headline": self.headline, "counts": dict(self.counts),
                "conditions": list(self.conditions), "rows": [r.as_dict() for r in self.rows]}

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


# --------------------------------------------------------------------------- conditions


def _run_on(kinds: set[str]) -> str:
    return " and ".join(sorted(kinds)).replace("cpu", "the CPU").replace("gpu", "a GPU") or "an unknown device"


def _words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9]+", " ", text.lower().replace("(r)", " ").replace("(tm)", " ")).split()


def cpu_matches(wanted: str, model: str) -> bool:
    """Every word of the claim's CPU (``AMD Ryzen 5 3600X``) in the run's CPU model, case and (R)/(TM) aside."""
    have = set(_words(model))
    return bool(have) and all(w in have for w in _words(wanted))


def version_meets(version: str | None, spec: str) -> bool:
    """Does a reported framework version meet a PEP 440 specifier? An unparsable or missing version does not."""
    if not version:
        return False
    try:
        return Version(version.split("+", 1)[0]) in SpecifierSet(spec, prereleases=True)
    except InvalidVersion:
        return False


def _run_conditions(claim: Claim, ctx: RunContext) -> list[str]:
    """The run-level conditions the finding depends on that this run lacks: GPUs per trial, the CPU model, the
    framework versions the paper ties its finding to."""
    out = []
    if claim.gpus > 1 and ctx.gpus_per_trial < claim.gpus and ("gpu" in ctx.device_kinds or claim.device != "gpu"):
        # (a GPU claim on a run without a GPU is blocked by the device already: one reason, not two)
        out.append(f"the GPUs: a {claim.gpus}-GPU claim, this run's trials used {ctx.gpus_per_trial} GPU(s)")
    if claim.cpu_model and not cpu_matches(claim.cpu_model, ctx.cpu_model):
        out.append(f"the CPU: the paper's {claim.cpu_model}, this run's {ctx.cpu_model or 'unknown'}")
    for fw, spec in sorted(claim.tied_versions.items()):
        mine = ctx.versions.get(fw)
        if not version_meets(mine, spec):
            out.append(f"the {fw} version: the paper ties its finding to {fw} {spec}, this run used "
                       f"{mine or 'an unrecorded version'}")
    return out


def _config_conditions(claim: Claim, ctx: RunContext, cid: str | None) -> list[str]:
    """What keeps one configuration out of the claim: the device class its trials ran on, its CPU threads, its
    data (a stand-in where the quantity depends on the data's values, or not of the paper's sizes) and its
    protocol (the paper profile's configuration run otherwise); for a claim on trained models, a configuration
    that does not train as the paper did. A configuration without facts is taken as the run's."""
    out = []
    f = ctx.facts.get(cid) if cid is not None else None
    devices = {f.device} if f is not None and f.device else set(ctx.device_kinds)
    if claim.device in ("cpu", "gpu") and claim.device not in devices:  # unknown: not the paper's either
        where = f" ({claim.hardware})" if claim.hardware else ""
        paper = "a GPU" if claim.device == "gpu" else "a CPU"
        ran = f"ran on {_run_on(devices)}" if devices else "recorded no device"
        out.append(f"the device: the paper measured this on {paper}{where}, this run {ran}")
    if claim.threads and devices != {"gpu"}:  # the CPU threads of a configuration that computes on the CPU
        mine = f.threads if f is not None else None
        if mine != claim.threads:
            out.append(f"the CPU threads: the paper's {claim.threads}, this run's "
                       f"{mine if mine is not None else 'not recorded'}")
    if f is not None and f.data and not (claim.data == "shapes" and f.data_sized
                                         and claim.metric not in TRAINED_METRICS):
        out.append(f"the data: {f.data}")
    if f is not None and f.protocol:
        out.append(f"the protocol: the {ctx.profile} profile runs otherwise than the paper ({', '.join(f.protocol)})")
    if claim.metric in TRAINED_METRICS and cid is not None and cid in ctx.untrained and not (f and f.protocol):
        out.append(f"the training: {ctx.untrained[cid]}")
    return out


def _recorded(claim: Claim, ctx: RunContext) -> list[str]:
    """Differences the verdict lists without being blocked by them: the hardware and versions the paper names
    without tying its finding to them."""
    diffs = []
    if claim.hardware:
        diffs.append(f"the paper's hardware: {claim.hardware}; this run's: {ctx.hardware or 'unknown'}")
    for fw, ver in sorted(claim.versions.items()):
        mine = ctx.versions.get(fw)
        if mine is None or not mine.startswith(ver):
            diffs.append(f"the paper used {fw} {ver}; this run {mine or 'an unrecorded version'}")
    return diffs


def _conditions(claim: Claim, ctx: RunContext, cids: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """(what of this run's conditions differs from those the finding depends on, each item blocking a verdict:
    run-level, then those of the configurations ``cids`` (none: the run's); the recorded differences)."""
    blocks = _run_conditions(claim, ctx)
    ids: list[str | None] = list(cids) or [None]
    for cid in ids:
        blocks += [b for b in _config_conditions(claim, ctx, cid) if b not in blocks]
    return blocks, _recorded(claim, ctx)


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


def _each_network(claim: Claim, s: _Selection, cids: list[str], alpha: float) -> Outcome:
    """Each network judged on its own configurations (one: trial-level; several: as "overall" across them);
    every network must replicate at alpha, one contradicting at alpha/k contradicts (a union)."""
    groups: dict[str, list[str]] = {}
    for c in cids:
        groups.setdefault(s.networks.get(c, c), []).append(c)
    k = len(groups)
    plain = replace(claim, scope="overall")
    rows, parts, estimators = [], [], []
    for net, members in groups.items():
        def one(level: float, members: list[str] = members) -> Outcome:
            if len(members) == 1:
                return judge_each(plain, s.sel, members, s.arms, level, with_p=True)
            return _overall(plain, s, members, level, by_network=False)
        verdict, why, extra = one(alpha)
        estimators.append(str(extra.get("estimator") or ""))
        strict = one(alpha / k)[0] if k > 1 and verdict != "replicated" else verdict
        rows.append({"network": net, "configurations": len(members), "estimate": extra.get("estimate"),
                     "low": extra.get("low"), "high": extra.get("high"), "replicates": verdict == "replicated",
                     "contradicts": strict == "contradicted", "why": why, "n": extra.get("n", 0),
                     "p": extra.get("p")})
        parts.append(f"{net} {extra.get('value_text') or '-'}")
    extra_all: dict[str, Any] = {"per_config": tuple(rows), "n": k, "value_text": "; ".join(parts),
                                 "estimator": next((e for e in estimators if e), "")}
    contra = [r["network"] for r in rows if r["contradicts"]]
    # the claim's p, for Holm across the run's claims: replicated needs every network (intersection-union: the
    # largest p); contradicted needs one at alpha/k (Bonferroni: the smallest p times k)
    p_con = [min(1.0, k * float(r["p"])) for r in rows if r["contradicts"] and r["p"] is not None]
    if contra:
        extra_all["p"] = min(p_con) if p_con else None
        return "contradicted", f"{len(contra)} of {k} network(s) show the opposite ({', '.join(contra)})", extra_all
    if rows and all(r["replicates"] for r in rows):
        ps = [r["p"] for r in rows]
        extra_all["p"] = max(float(x) for x in ps) if all(x is not None for x in ps) else None
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


_FIELDS = frozenset(ClaimVerdict.__dataclass_fields__)


def _verdict(base: dict[str, Any], verdict: str, reason: str, **kw: Any) -> ClaimVerdict:
    """A row from the claim's facts and what the procedure returned (its keys the row has; the rest, such as
    the networks' names, stay in per_config)."""
    kw.setdefault("value_text", "")
    out = {k: v for k, v in {**base, **kw}.items() if k in _FIELDS and k not in ("verdict", "reason")}
    if verdict != "not testable":
        out["would_test"] = ""  # what would test it: said of not-testable claims only
    return ClaimVerdict(verdict=verdict, reason=reason, **out)


def judge_claim(claim: Claim, use: pd.DataFrame, configs: Mapping[str, Mapping[str, Any]], ctx: RunContext,
                alpha: float, unresolvable: Unresolvable | None = None) -> ClaimVerdict:
    """The verdict of one claim on the run's counted values (``use``: kit.analysis.analyze.usable)."""
    base: dict[str, Any] = {"id": claim.id, "source": claim.source, "statement": claim.statement,
                            "kind": claim.kind, "quantity": _quantity(claim), "paper_text": claim.paper_text,
                            "reading": claim.reading, "procedure": _procedure(claim, alpha)}
    if claim.untestable.strip():
        return _verdict(base, "not testable", f"the kit cannot judge this claim: {claim.untestable.strip()}",
                        would_test=BY_DESIGN)
    refs = claim.arm_refs()
    cids = [cid for cid, cfg in configs.items() if claim.matches(cfg)]
    if claim.up_to is not None:
        cids = [cid for cid in cids if float(configs[cid].get(claim.factor, math.inf)) <= claim.up_to]
    run_blocks = _run_conditions(claim, ctx)
    base["differences"] = tuple(_recorded(claim, ctx))
    base["would_test"] = would_test(claim, ctx)
    removed = claim.cause_removed.strip()
    if removed:  # recorded, never judged: the run has not the paper's cause, so neither verdict would be the paper's
        base["would_test"] = BY_DESIGN
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
        base["differences"] = (*base["differences"], *(f"configuration {c} left out: {'; '.join(w)}"
                                                       for c, w in dropped.items()))
    if any(r.qualifiers for r in refs) and not s.cids:
        blocks.append("the configurations: this run has no configuration of " + " beside one of ".join(
            r.text for r in refs) + " with the other keys the same")
        base["would_test"] = would_test(claim, ctx, both_devices=any(k == "device" for r in refs
                                                                      for k, _ in r.qualifiers))
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
        base["differences"] = (*base["differences"], *(f"also differs in {b}" for b in blocks))
        return _verdict(base, "not testable", f"the kit removes the cause of the paper's gap: {removed}", **extra)
    if blocks:
        return _verdict(base, "not testable", _differs(blocks), **extra)
    return _verdict(base, verdict, reason, **extra)


_PROTOCOL_KEYS = re.compile(r"^(?P<head>.*?) \((?P<keys>[^()]*)\)$")


def _summarise(blocks: Sequence[str]) -> list[str]:
    """The blocks with one entry per kind of condition ("the data: a synthetic stand-in for the paper's cifar10
    (python), a synthetic stand-in for the paper's cifar100 (python)"; the protocol's keys of all configurations
    in one list). Why: a claim over several configurations would otherwise name "the data" and "the protocol"
    once per configuration, and the report (kit.report.context.claim_groups) groups not-testable claims by the
    kinds of condition their reasons name."""
    heads: dict[str, list[str]] = {}
    for b in blocks:
        kind, _, what = b.partition(": ")
        if what not in heads.setdefault(kind, []):
            heads[kind].append(what)
    out = []
    for kind, whats in heads.items():
        if kind == "the protocol":
            keys: list[str] = []
            head = ""
            for w in whats:
                m = _PROTOCOL_KEYS.match(w)
                head = head or (m.group("head") if m else "")
                keys += [k for k in (m.group("keys").split(", ") if m else [w]) if k not in keys]
            out.append(f"{kind}: {head} ({', '.join(keys)})" if head else f"{kind}: {', '.join(keys)}")
        else:
            out.append(f"{kind}: {', '.join(whats)}" if whats != [""] else kind)
    return out


def _differs(blocks: Sequence[str]) -> str:
    return "differs in " + "; ".join(blocks)


def _where_text(claim: Claim) -> str:
    return ", ".join(f"{k} = {v}" for k, v in claim.where.items()) or "any settings"


# --------------------------------------------------------------------------- what would test it


def duration_text(seconds: float | None) -> str:
    """"about 70 min", "about 14 h", "about 11 days" (a profile's stated estimate)."""
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        return ""
    if seconds < 90 * 60:
        return f"about {max(1, round(seconds / 60))} min"
    if seconds < 48 * 3600:
        return f"about {round(seconds / 3600)} h"
    return f"about {round(seconds / 86400)} days"


def _host_text(claim: Claim) -> str:
    n = max(1, claim.gpus)
    if claim.device == "gpu":
        host = "a host with one NVIDIA GPU" if n == 1 else f"a host with {n} NVIDIA GPUs"
    elif claim.device == "cpu":
        host = "a CPU host" + (f" ({claim.cpu_model})" if claim.cpu_model else "")
    else:
        host = "a host" + (f" with {n} NVIDIA GPUs" if claim.gpus > 1 else "") + (
            f" ({claim.cpu_model})" if claim.cpu_model else "")
    if claim.threads:
        host += f", {claim.threads} CPU thread{'s' if claim.threads != 1 else ''} for each trial"
    return host


def would_test(claim: Claim, ctx: RunContext, both_devices: bool = False) -> str:
    """The command and host that would test a claim: the paper profile (the paper protocol's configurations)
    on a host with the claim's device, GPUs, CPU and threads, with the versions it is tied to; the profile's
    stated estimate. "`kit run florencio2019_lenet --profile paper` on a host with one NVIDIA GPU, about 70 min"."""
    exp = ctx.experiment or "EXPERIMENT"
    text = f"`kit run {exp} --profile paper` on {_host_text(claim)}"
    if both_devices:
        text += (", with the configuration run on the CPU and on the GPU in one run (the experiment runs each on one "
                 "device; a copy of it with [grid] device = [\"cpu\", \"gpu\"] would)")
    if claim.tied_versions:
        text += ", with " + ", ".join(f"{fw} {spec}" for fw, spec in sorted(claim.tied_versions.items())) + \
            " in the trials' image"
    est = duration_text(ctx.paper_estimate_s)
    return text + (f", {est}" if est else "")


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
