"""Framework comparisons across configurations: the network is the unit, the log ratio the scale, devices apart.

Why. A sweep such as Patel et al.'s (5 networks x 5 batch sizes x 3 input sides, on the GPU and the CPU) or
Dai et al.'s (7 networks x 16 factorial runs) measures a handful of networks under many conditions. Its
configurations are not independent replicates of "is TensorFlow faster than PyTorch?": the configurations of
one network share that network's gap. The kit's earlier test (a paired Wilcoxon signed-rank test with the
configurations as pairs, on raw seconds) rejected 45-66 % of the time at the 5 % level when the gap differs by
network but averages zero, and its ranks were decided by the slowest configurations: TensorFlow 10 % faster
on every GPU configuration and 10 % slower on every (slower) CPU one came out "TensorFlow slower" (p = 1.3e-6
with 7 networks per device; issue 25 measured 1.3e-7). Evidence: docs/evidence/across-configurations-2026-11-26.md,
made by benchmarks/across_configurations_sim.py. So:

* scale: each configuration gives one log ratio, log(median of arm a / median of arm b) over its trials (the
  direction of the rows' ratio a/b); no rescaling of a network's times changes it;
* unit: each network (the configuration's ``model``; else its case; else the configuration itself) gives the
  mean of its configurations' log ratios, its geometric-mean ratio, with a t interval over its configurations
  (the gap's spread over batch sizes and shapes counts as that network's uncertainty);
* test: a one-sample t test of the networks' mean log ratios against 0 (df = networks - 1), with the t interval
  of the geometric-mean ratio over networks. It is the test of the fixed mean of a random-intercept model with
  the network as random effect (exactly so when every network has the same number of configurations) and
  keeps its level with 5-7 networks when the networks' gaps are roughly normal; statsmodels' MixedLM Wald z
  test of that model rejects 8-18 % at the 5 % level with so few groups (the evidence file), so it is not used;
* devices apart: the same networks on the CPU and on the GPU answer different questions: one row per device;
* enough networks: a population-level p needs enough networks for a test that assumes nothing about the shape
  of their gaps, the exact signed-rank test on the networks' means, to reach Holm's first threshold alpha/m:
  2/2^J < alpha/m. With 5 networks even five gaps of one sign give 2/32 = 0.0625 > 0.05, so a t test's p would
  rest on the normality of five values alone. Below that the row is "not testable" and the answer is the
  per-network ratios with their intervals. The signed-rank p is reported beside the t test where it is run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from kit.analysis.threats import Threat
from kit.analysis_rows import HypothesisResult
from kit.errors import AnalysisError
from kit.stats.common import MIN_N_FOR_TESTS
from kit.stats.common import AsDict as _AsDict
from kit.stats.normal import nct_sf, t_isf, t_ppf, t_sf
from kit.stats.power import POWER

if TYPE_CHECKING:  # scipy.stats (0.75 s at import) loads only where a test runs: `kit show` designs without it
    from kit.stats.rank_tests import TestResult

CONF = 0.95
DEVICE_TEXT = {"cpu": "on the CPU", "gpu": "on the GPU", "auto": "on device auto (the GPU where the host has one)"}
# The phases a configuration measures, and a hypothesis' unit: kit.analysis.design.config_phases and
# .hypothesis_unit, passed in by the callers (design imports this module: importing it back would close a circle).
PhasesOf = Callable[[Mapping[str, Any], dict[str, Any]], tuple[str, ...]]
UnitOf = Callable[[Mapping[str, Any], dict[str, Any]], str]
TEST_TEXT = ("one-sample t test across networks: per configuration log(median a / median b) of its trials, "
             "averaged per network; the networks' means tested against 0 (network = unit; one row per device)")


# --------------------------------------------------------------------------- what a configuration is


def _workload_value(spec: Mapping[str, Any], config: Mapping[str, Any], key: str) -> Any:
    """A workload key of one configuration: its grid value, else its case's, else [workload]'s (None if unset)."""
    if key in config:
        return config[key]
    case = config.get("case")
    over = (((spec.get("cases") or {}).get(case) or {}).get("workload") or {}) if case is not None else {}
    if key in over:
        return over[key]
    wl = spec.get("workload") or {}
    params = wl.get("params") or {}
    return params[key] if key in params else wl.get(key)


def network_of(spec: Mapping[str, Any], config: Mapping[str, Any], config_id: str) -> tuple[str, str]:
    """(what the unit is, its name): the ``model`` a configuration runs; else its case; else the configuration."""
    model = _workload_value(spec, config, "model")
    if model is not None:
        return "network", str(model)
    if config.get("case") is not None:
        return "case", str(config["case"])
    return "configuration", config_id


def device_of(spec: Mapping[str, Any], config: Mapping[str, Any]) -> str:
    """The device the spec asks the configuration to run on ("auto", "cpu" or "gpu")."""
    return str(_workload_value(spec, config, "device") or "auto")


def min_p_free(n: int) -> float:
    """Smallest two-sided exact signed-rank p of n values (all of one sign): 2/2^n, capped at 1 (as
    kit.analysis.design.min_p_exact): the least p a test assuming nothing about their shape can give."""
    return min(1.0, 2.0 / 2.0 ** n) if n > 0 else 1.0


def device_groups(spec: Mapping[str, Any], configs: Mapping[str, Mapping[str, Any]], phase: str,
                  phases_of: PhasesOf) -> dict[str, list[str]]:
    """Device -> the configuration ids that measure ``phase`` on it (devices sorted): one hypothesis row each."""
    out: dict[str, list[str]] = {}
    for cid, cfg in configs.items():
        if phase in phases_of(spec, dict(cfg)):
            out.setdefault(device_of(spec, cfg), []).append(cid)
    return dict(sorted(out.items()))


def row_devices(spec: Mapping[str, Any], configs: Mapping[str, Mapping[str, Any]], phase: str,
                phases_of: PhasesOf) -> list[str | None]:
    """The devices a hypothesis' rows across configurations cover in ``phase``: one row each; [None] where no
    configuration measures the phase (one row, which says so)."""
    return [*device_groups(spec, configs, phase, phases_of)] or [None]


def planned_family_sizes(spec: Mapping[str, Any], configs: Mapping[str, Mapping[str, Any]], arm_pairs: int,
                         unit_of: UnitOf, phases_of: PhasesOf) -> dict[str, int]:
    """Planned comparisons per Holm family, counted as ``design.design_table`` counts them (one per
    configuration for the trial unit, one per device across configurations; tests/test_across.py checks the
    two agree): the m of the alpha/m a row across networks is judged at while the analysis builds its rows."""
    sizes: dict[str, int] = {}
    for h in spec.get("hypotheses") or []:
        fam = h.get("family") or "primary"
        for phase in h["phases"]:
            if unit_of(spec, h) == "configuration":
                n = len(device_groups(spec, configs, phase, phases_of))
            else:
                n = sum(1 for cfg in configs.values() if phase in phases_of(spec, dict(cfg)))
            sizes[fam] = sizes.get(fam, 0) + n * arm_pairs
    return sizes


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def device_text(device: str | None) -> str:
    return DEVICE_TEXT.get(str(device), f"on device {device}")


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class ConfigRatio(_AsDict):
    """One configuration: each arm's median over its trials, and log(a / b) (None when a median is not positive)."""

    config_id: str
    network: str
    device: str
    a: float
    b: float
    n_a: int
    n_b: int
    log_ratio: float | None
    trial_ids: tuple[str, ...] = ()
    unit: str = "network"  # what ``network`` names: "network", "case" or "configuration" (network_of)


def config_ratio(config_id: str, network: str, device: str, a: Sequence[float], b: Sequence[float],
                 trial_ids: Sequence[str] = (), unit: str = "network") -> ConfigRatio:
    """A configuration's per-arm medians of its trials' values (never steps) and their log ratio."""
    va, vb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if va.size == 0 or vb.size == 0 or not (np.isfinite(va).all() and np.isfinite(vb).all()):
        raise AnalysisError(f"configuration {config_id}: each arm needs finite values", where="across.config_ratio",
                            fix="pass the trial-level values of configurations measured in both arms")
    ma, mb = float(np.median(va)), float(np.median(vb))
    lr = math.log(ma / mb) if ma > 0 and mb > 0 else None
    return ConfigRatio(config_id, network, device, ma, mb, int(va.size), int(vb.size), lr, tuple(trial_ids), unit)


@dataclass(frozen=True)
class MeanLog(_AsDict):
    """exp(mean) of log ratios with its t interval, and the one-sample t test of mean 0."""

    n: int
    ratio: float
    low: float | None
    high: float | None
    conf: float
    mean_log: float
    sd_log: float | None
    t: float | None
    df: int
    p: float | None
    reason: str | None = None


def mean_log(values: Sequence[float], conf: float = CONF) -> MeanLog:
    """exp(mean) with the t interval, and the two-sided one-sample t test of mean 0: the arithmetic of
    ``scipy.stats.ttest_1samp(values, 0)`` and its ``confidence_interval`` (tests/test_across.py checks they
    agree), written out because this runs once per network in every simulated replication. With one value,
    or none spread, there is no interval or test and ``reason`` says why."""
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or x.size == 0 or not np.isfinite(x).all():
        raise AnalysisError("mean_log needs a non-empty 1-D array of finite log ratios", where="across.mean_log",
                            fix="drop configurations without a ratio first")
    n, m = int(x.size), float(x.mean())
    if n < 2:
        return MeanLog(n, math.exp(m), None, None, conf, m, None, None, 0, None, "one value: no interval")
    sd = float(x.std(ddof=1))
    if sd == 0.0:
        return MeanLog(n, math.exp(m), math.exp(m), math.exp(m), conf, m, 0.0, None, n - 1, None,
                       "every value is equal: no spread, the t test is undefined")
    se = sd / math.sqrt(n)
    q = t_ppf(0.5 + conf / 2, n - 1)
    t = m / se
    return MeanLog(n, math.exp(m), math.exp(m - q * se), math.exp(m + q * se), conf, m, sd, t, n - 1,
                   float(2 * t_sf(abs(t), n - 1)))


@dataclass(frozen=True)
class NetworkRatio(_AsDict):
    """One network's geometric-mean ratio a/b over its configurations, with the t interval over them."""

    network: str
    n_configs: int
    ratio: float
    low: float | None
    high: float | None
    conf: float
    mean_log: float
    sd_log: float | None
    config_ids: tuple[str, ...]
    note: str | None = None


@dataclass(frozen=True)
class AcrossNetworks(_AsDict):
    """A comparison of arms a and b across the networks of one device: per network, and (if enough) overall."""

    device: str
    unit: str  # what a unit is here: "network", "case" or "configuration" (the spec names neither)
    n_configs: int  # configurations with a log ratio
    n_networks: int
    networks: tuple[NetworkRatio, ...]
    ratio: float | None  # geometric mean over the networks of their ratios a/b
    centre_a: float | None  # geometric mean over networks of each network's geometric mean of a's medians
    centre_b: float | None  # (centre_a / centre_b == ratio: the centres order the arms as the ratio does)
    level: float  # Holm's first threshold alpha/m, at which the number of networks is judged
    min_p_free: float  # smallest exact signed-rank p the networks allow: 2 / 2^J
    testable: bool
    reason: str
    test: MeanLog | None  # the t test across the networks' mean log ratios (None: not testable)
    signed_rank: TestResult | None  # exact signed-rank test on the same means (distribution-free check)
    between_sd: float | None  # SD of the networks' mean log ratios
    mde: float | None  # relative change the t test finds with power 0.8 at ``level``, given between_sd
    dropped: tuple[str, ...] = ()  # configurations without a ratio (a median not positive)


def network_ratios(ratios: Sequence[ConfigRatio], conf: float = CONF) -> list[NetworkRatio]:
    """Per network (sorted by name): the mean of its configurations' log ratios and the t interval over them."""
    by: dict[str, list[ConfigRatio]] = {}
    for r in ratios:
        if r.log_ratio is not None:
            by.setdefault(r.network, []).append(r)
    out = []
    for net in sorted(by):
        rs = by[net]
        m = mean_log([r.log_ratio for r in rs if r.log_ratio is not None], conf)
        out.append(NetworkRatio(net, m.n, m.ratio, m.low, m.high, conf, m.mean_log, m.sd_log,
                                tuple(r.config_id for r in rs), m.reason))
    return out


def t_power(effect_sd: float, n: int, level: float) -> float:
    """Power of the two-sided one-sample t test (n values, ``level``) at a mean of ``effect_sd`` SDs (noncentral t;
    both tails through the survival function, whose far lower tail scipy returns as NaN where it is 0)."""
    df, nc = n - 1, effect_sd * math.sqrt(n)
    q = t_isf(level / 2, df)
    upper, lower = nct_sf(q, df, nc), nct_sf(q, df, -nc)
    return (upper if math.isfinite(upper) else 0.0) + (lower if math.isfinite(lower) else 0.0)


@lru_cache(maxsize=256)
def mde_networks_sd(n: int, level: float, power: float = POWER) -> float | None:
    """Mean log ratio, in SDs of the networks' mean log ratios, that the t test across n networks detects with
    ``power`` at two-sided ``level``; None below 2 networks."""
    if n < 2:
        return None
    from scipy.optimize import brentq

    return float(brentq(lambda d: t_power(d, n, level) - power, 0.0, 1e4))


def across_networks(ratios: Sequence[ConfigRatio], device: str, level: float, conf: float = CONF,
                    power: float = POWER) -> AcrossNetworks:
    """Arms a and b across the networks of one device, at Holm's first threshold ``level`` (alpha/m).

    Pure: the configurations' per-arm medians in, the per-network ratios and, where enough networks allow a
    population-level p (2/2^J < level), the t test across networks out (module docstring: why).
    """
    if not 0.0 < level < 1.0:
        raise AnalysisError(f"level must lie in (0, 1), got {level}", where="across.across_networks")
    kinds = sorted({r.unit for r in ratios}) or ["network"]
    unit = kinds[0] if len(kinds) == 1 else " or ".join(kinds)
    nets = network_ratios(ratios, conf)
    used = [r for r in ratios if r.log_ratio is not None]
    dropped = tuple(r.config_id for r in ratios if r.log_ratio is None)
    j = len(nets)
    p_free = min_p_free(j)
    means = [n.mean_log for n in nets]
    centre_a = centre_b = ratio = None
    if nets:
        la = [float(np.mean([math.log(r.a) for r in used if r.network == n.network])) for n in nets]
        lb = [float(np.mean([math.log(r.b) for r in used if r.network == n.network])) for n in nets]
        centre_a, centre_b = math.exp(float(np.mean(la))), math.exp(float(np.mean(lb)))
        ratio = math.exp(float(np.mean(means)))
    between = float(np.std(means, ddof=1)) if j >= 2 else None
    base = AcrossNetworks(device=device, unit=unit, n_configs=len(used), n_networks=j, networks=tuple(nets),
                          ratio=ratio, centre_a=centre_a, centre_b=centre_b, level=level, min_p_free=p_free,
                          testable=False, reason="", test=None, signed_rank=None, between_sd=between, mde=None,
                          dropped=dropped)
    if j == 0:
        return replace(base, reason="no configuration has a ratio (a median not positive)")
    if p_free >= level:
        return replace(base, reason=(
            f"{_count(j, unit)} {device_text(device)}: too few for a population-level p. Even with "
            f"every {unit}'s gap of one sign the exact signed-rank p is 2/2^{j} = {p_free:.3g}, not below "
            f"alpha/m = {level:.3g}, so a t test's p would rest on assuming normally distributed gaps that {j} "
            f"value{'s' if j != 1 else ''} cannot check; the per-{unit} ratios with their {conf:.0%} intervals are "
            "the answer"))
    test = mean_log(means, conf)
    if test.p is None or test.t is None:
        return replace(base, reason=f"{j} {unit}s {device_text(device)}: {test.reason}")
    from kit.stats.rank_tests import wilcoxon_paired

    signed = wilcoxon_paired(np.asarray(means), np.zeros(j))
    d = mde_networks_sd(j, level, power)
    mde = math.expm1(d * between) if d is not None and between is not None else None
    return replace(base, testable=True, test=test, signed_rank=signed, mde=mde, reason=(
        f"one-sample t test across the {j} {unit}s' mean log ratios {device_text(device)} (t = {test.t:.3g}, "
        f"df = {test.df}; {len(used)} configurations); {j} {unit}s let even a distribution-free test reach "
        f"p = {p_free:.3g} < alpha/m = {level:.3g} (the exact signed-rank test on the same means: "
        f"p = {signed.p:.3g})"))


# --------------------------------------------------------------------------- a hypothesis row


def hypothesis_fields(res: AcrossNetworks, a: str, b: str, alpha: float) -> dict[str, Any]:
    """The fields of one hypothesis row tested across configurations (``hypotheses.hypothesis_rows``).

    The row keeps the fields every reader uses (comparison.test.p and .statistic, comparison.ratio, the
    arms' centres under comparison.a/b.median, comparison.cliffs_delta): ``a.median`` and ``b.median`` hold
    the geometric-mean centres, so the direction the row reports is the sign of the mean log ratio.
    """
    nets = "; ".join(f"{n.network} {n.ratio:.3g}" + (f" [{n.low:.3g}, {n.high:.3g}]" if n.low is not None else "")
                     + f" ({n.n_configs} cfg)" for n in res.networks)
    unit = res.unit
    label = (f"across {_count(res.n_networks, unit)} {device_text(res.device)} ("
             + (f"{res.n_configs} configurations; per configuration log({a}/{b}) of its trials' medians, averaged "
                f"per {unit})" if unit != "configuration" else
                f"log({a}/{b}) of each one's trials' medians; no network or case named, so each configuration is "
                "its own unit)"))
    fields: dict[str, Any] = {
        "device": res.device, "config_label": label, "n_pairs": res.n_networks, "n_configs": res.n_configs,
        "networks": [n.as_dict() for n in res.networks], "across": res.as_dict(),
    }
    comp = _comparison(res, a, b, alpha)
    if not res.testable:
        comp["reason"] = res.reason
        return {**fields, "tested": False, "not_testable": True, "comparison": comp, "detectable": None,
                "reason": f"{res.reason}: {a}/{b} per {unit} {nets}" if nets else res.reason}
    comp["reason"] = res.reason
    detect = {"level": res.level, "noise": res.between_sd, "mde": res.mde, "decidable": True,
              "mde_why": (f"the t test across {res.n_networks} {unit}s at {res.level:.3g} finds a mean change of "
                          f"{res.mde:.1%} with power 80 %, given their spread (SD {res.between_sd:.3g} of the "
                          "mean log ratios)") if res.mde is not None else "no spread between the networks"}
    return {**fields, "tested": True, "comparison": comp, "detectable": detect, "reason": res.reason}


def _comparison(res: AcrossNetworks, a: str, b: str, alpha: float) -> dict[str, Any]:
    from kit.stats.effects import cliffs_delta
    from kit.stats.rank_tests import TestResult

    means = np.array([n.mean_log for n in res.networks], dtype=float)
    test = None
    if res.testable and res.test is not None and res.test.t is not None and res.test.p is not None:
        test = TestResult(
            method="one-sample t test across networks", statistic=res.test.t, statistic_name="t", p=res.test.p,
            alternative="two-sided", n_a=res.n_networks, n_b=res.n_networks, n_pairs=res.n_networks,
            n_used=res.n_networks, exact=True, method_detail=f"t on {res.test.df} df (normal network gaps)",
            zero_method=None, ties=False, ties_handling="not applicable (t test)", continuity_correction=False,
            call="scipy.stats.ttest_1samp(network_mean_log_ratios, 0.0)",
            details={"df": float(res.test.df), "mean_log_ratio": res.test.mean_log, "n_configs": float(res.n_configs),
                     "signed_rank_p": res.signed_rank.p if res.signed_rank is not None else math.nan},
            note=f"each network's value: the mean over its configurations of log(median {a} / median {b})").as_dict()
    delta = None
    if means.size:
        eff = cliffs_delta(means, np.zeros(1))
        delta = replace(eff, definition=(f"across networks: share of networks with {a}/{b} > 1 minus share with "
                                         f"{a}/{b} < 1 (Cliff's delta of their mean log ratios against 0)")).as_dict()
    centre = "geometric mean over the networks of each network's geometric-mean median (a/b centres = the ratio)"
    low = res.test.low if res.testable and res.test is not None else None
    high = res.test.high if res.testable and res.test is not None else None
    return {
        "paired": True, "alternative": "two-sided", "alpha": alpha,
        "a": {"median": res.centre_a, "n": res.n_networks, "centre": centre},
        "b": {"median": res.centre_b, "n": res.n_networks, "centre": centre},
        "test": test, "reason": res.reason, "spreads": None, "cliffs_delta": delta, "a12": None, "shift": None,
        "ratio": {"estimate": res.ratio, "low": low, "high": high, "conf": res.test.conf if res.test else CONF,
                  "method": ("exp(mean over networks of their mean log(a/b)), t interval over networks"
                             if res.testable else "exp(mean over networks of their mean log(a/b)); no interval: "
                             "too few networks")},
        "signed_rank": res.signed_rank.as_dict() if res.signed_rank is not None else None,
        "notes": ["unit: the network; scale: log ratios; one row per device"],
    }


# --------------------------------------------------------------------------- the design table


def design_rows(spec: Mapping[str, Any], configs: Mapping[str, Mapping[str, Any]], hyp: Mapping[str, Any], phase: str,
                arm_pairs: int, phases_of: PhasesOf) -> list[dict[str, Any]]:
    """``kit.analysis.design.design_table`` rows of a hypothesis tested across configurations: one per device,
    n = the networks on it (``design_fields`` then says whether they can support a population-level p)."""
    base = {"id": hyp["id"], "phase": phase, "metric": hyp["metric"], "unit": "configuration", "test": TEST_TEXT,
            "family": hyp.get("family") or "primary"}
    groups = device_groups(spec, configs, phase, phases_of)
    if not groups:
        return [{**base, "device": None, "n": 0, "n_configs": 0, "networks": [], "comparisons": 0,
                 "n_note": f"no configuration measures the {phase} phase"}]
    rows = []
    for device, ids in groups.items():
        named = [network_of(spec, configs[c], c) for c in ids]
        nets = sorted({name for _, name in named})
        unit = named[0][0] if len({k for k, _ in named}) == 1 else "network"
        rows.append({**base, "device": device, "n": len(nets), "n_configs": len(ids), "networks": nets,
                     "comparisons": arm_pairs,
                     "n_note": (f"{_count(len(nets), unit)} {device_text(device)} ({', '.join(nets)}) over "
                                f"{_count(len(ids), 'configuration')} measuring {phase} (at most: oom or skipped "
                                "ones drop out)")})
    return rows


class DesignFields(TypedDict):
    """What a design row across networks adds (:func:`design_fields`): the keys ``design_table`` writes for every
    row, with the values of the t test across networks."""

    min_p: float
    min_p_with_ties: float
    decidable: bool
    reason: str | None
    ties_note: str | None
    mde_sd: float | None
    mde_sd_with_ties: float | None
    mde_sd_asymptotic: float | None
    power: float
    cv: float | None
    mde_ratio: float | None


def design_fields(row: Mapping[str, Any], threshold: float, power: float = POWER) -> DesignFields:
    """Decidability of a design row across networks at Holm's first threshold: enough networks for a
    distribution-free p below it (2/2^J < alpha/m), and the t test's MDE in SDs of the networks' mean log ratios."""
    n = int(row["n"])
    p_free = min_p_free(n)
    mde = mde_networks_sd(n, threshold, power)  # the t test has no ties rule: the same with coarse values
    reasons = []
    if row.get("comparisons", 0) == 0:
        reasons.append(f"no configuration measures the {row['phase']} phase")
    elif p_free >= threshold:
        reasons.append(f"{_count(n, 'network')} {device_text(row.get('device'))} cannot support a population-level p: "
                       "even with "
                       f"every network's gap of one sign the exact signed-rank p is 2/2^{n} = {p_free:.3g}, not below "
                       f"alpha/m = {threshold:.3g}; the per-network ratios with their intervals are the answer "
                       "(descriptive)")
    return {"min_p": p_free, "min_p_with_ties": p_free, "decidable": not reasons,
            "reason": "; ".join(reasons) if reasons else None, "ties_note": None,
            "mde_sd": mde, "mde_sd_with_ties": mde, "mde_sd_asymptotic": None,
            "power": power, "cv": None, "mde_ratio": None}


# --------------------------------------------------------------------------- the threat to validity


def network_threats(hypotheses: Sequence[HypothesisResult]) -> list[Threat]:
    """The ``few_networks`` threat (kit.analysis.validity): rows across configurations rest on a few networks.

    High where a row could not be tested for want of networks (only the per-network ratios answer it, as the
    ``small_n`` rule says of too few trials); medium where the t test ran on fewer than MIN_N_FOR_TESTS
    networks, whose normality it assumes and so few values cannot check.
    """
    rows = [(h, n) for h in hypotheses if h.test_unit == "configuration"
            and (n := _networks_tested(h)) is not None]
    if not rows:
        return []
    untested = [(h, n) for h, n in rows if not h.tested and h.not_testable]
    few = [(h, n) for h, n in rows if h.tested and n < MIN_N_FOR_TESTS]

    def name(h: HypothesisResult, n: int) -> str:
        return f"{h.id} {h.phase} {device_text(h.device)} ({n} networks)"

    nets = min(n for _, n in rows)
    if untested:
        return [Threat("few_networks", "conclusion", "high", "Too few networks for a test across configurations",
                       f"{'; '.join(name(h, n) for h, n in untested)}: the configurations of one network share its gap, so "
                       "the network is the unit, and so few networks cannot support a population-level p; the rows "
                       "report each network's ratio with its interval instead",
                       "read the per-network ratios; a claim about frameworks in general needs more networks (the "
                       "design table gives the number each device needs)", numbers={"min_networks": nets})]
    if few:
        return [Threat("few_networks", "conclusion", "medium", "Test across configurations on few networks",
                       f"{'; '.join(name(h, n) for h, n in few)}: the t test across networks assumes their gaps are roughly "
                       "normal, which so few values cannot check; a skewed population of networks inflates its level "
                       "(docs/evidence/across-configurations-2026-11-26.md)",
                       "read the per-network ratios beside the test; more networks make the claim general",
                       numbers={"min_networks": nets})]
    return []


def _networks_tested(h: HypothesisResult) -> int | None:
    """The networks a row across configurations paired (its ``across`` record's n_networks, 0 when it names
    none); None for a row without that record."""
    across = h.more.get("across")
    if not isinstance(across, dict):
        return None
    n = across.get("n_networks")
    return int(n) if isinstance(n, (int, float, np.integer)) and not isinstance(n, bool) else 0
