"""Can the design decide its hypotheses? Unit, n, smallest attainable p and minimum detectable effect.

A paper profile that runs 3 trials per configuration can never reject anything with a
per-configuration test: the kit does not test below ``MIN_N_FOR_TESTS`` pairs, and with 5 pairs the
smallest two-sided exact signed-rank p is 2/2^5 = 0.0625. This module says so before anything runs,
from the spec and its plan alone (pure: plain dicts in, plain dicts out), for ``kit list``, the
analysis and the report.

How the figures are computed (``hypotheses.hypothesis_rows`` runs the tests they describe):

* unit ``trial``: one Wilcoxon signed-rank test per configuration, phase and arm pair, paired by
  block; n = the plan's measured repetitions of the configuration.
* unit ``configuration``: one row per phase, arm pair and device across the configurations that
  have the phase; the network is the unit (:mod:`kit.analysis.across`): n = the networks on the
  device, decidable when 2/2^n (a distribution-free p of n networks) is below alpha/m, and the MDE
  that of the t test across the networks' mean log ratios, in SDs of those means.
* The Holm family is every planned test of the hypothesis' family: "primary" (the default) or
  "secondary", stated in the spec before the run, each with its own Holm procedure; its first
  (strictest) threshold is alpha/m. A hypothesis is decidable when n >= MIN_N_FOR_TESTS and the
  smallest attainable p, that of all differences of one sign, is below alpha/m (equivalently: its
  MDE is finite). Exact test (n <= EXACT_MAX_N, no ties or zeros): p_min = 2 / 2^n; otherwise the
  normal approximation with continuity correction at R+ = 0.
* Minimum detectable effect at power 0.8, two-sided, at level alpha/m: the shift, in SDs of normal
  paired differences, at which the signed-rank test's real rejection region at that n and level
  rejects with power 0.8 (:mod:`kit.analysis.power`, simulated; the normal-theory formula
  (z_{1-alpha/(2m)} + z_power) / sqrt(n * 3/pi) the kit used before overstated power at n <= 20,
  e.g. 0.28 instead of 0.8 at n = 11, m = 30, and is kept as ``mde_sd_asymptotic``). For the trial
  unit also as a ratio TF/PT given a between-trial coefficient of variation ``cv`` of each arm's
  values (log-normal: sd of a log difference = sqrt(2 ln(1 + cv^2))). Across configurations the
  differences mix the effect's heterogeneity with noise, so no ratio is given there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from kit.analysis_rows import Design, HypothesisResult
from kit.records import JsonTable
from kit.stats.common import MIN_N_FOR_TESTS
from kit.stats.normal import norm_isf, norm_ppf
from kit.stats.power import TIES_STEP_SD, min_p, min_p_asymptotic

UNITS = ("trial", "configuration")
POWER = 0.8
DEFAULT_CV = 0.05  # an assumed between-trial CV of 5 % (stated wherever the ratio is shown)
ARE_SIGNED_RANK = 3 / math.pi
PHASES = ("train", "infer")


def mde_sd(n: int, level: float, power: float = POWER, ties: bool = False,
           step_sd: float = TIES_STEP_SD) -> float | None:
    """Smallest shift, in SDs of the paired differences, the signed-rank test at ``level`` detects with ``power``.

    Simulated against the test's real rejection region (:mod:`kit.analysis.power`); inf when no outcome
    of n differences reaches p < level; None without pairs. ``ties``: coarse values, simulated on data
    rounded to steps of ``step_sd`` SDs of the differences with zero differences dropped, through the test
    such data get (exact where no tie or zero is left, else the tie-corrected normal approximation). The
    design does not know a metric's resolution against its noise, so it states the step it assumes
    (TIES_STEP_SD = half an SD: an accuracy on a few thousand test images whose arms share initial weights
    moves in steps of about its paired SD, one of differently initialised models on 10,000 images in steps of
    a tenth); the run's own figure (kit.analysis.detectability) uses the step its data show.
    """
    if n <= 0:
        return None
    from kit.analysis.power_cache import mde_paired_sd  # the simulations: not for `kit list` (issue 44)

    return mde_paired_sd(n, level, power, ties=ties, step_sd=step_sd)


def mde_sd_asymptotic(n: int, level: float, power: float = POWER) -> float | None:
    """The normal-theory figure the kit printed before issue 25 (ARE 3/pi): kept to show how far off it is."""
    if n <= 0:
        return None
    return float((norm_isf(level / 2) + norm_ppf(power)) / math.sqrt(n * ARE_SIGNED_RANK))


def mde_ratio(delta_sd: float | None, cv: float) -> float | None:
    """The ratio of medians a shift of ``delta_sd`` means when each arm's values have coefficient of variation cv."""
    if delta_sd is None or not math.isfinite(delta_sd):
        return None
    return float(math.exp(delta_sd * math.sqrt(2 * math.log1p(cv * cv))))


def hypothesis_unit(spec: Mapping[str, Any], hyp: dict[str, Any]) -> str:
    """The hypothesis' own unit, else the design's default, else 'trial'."""
    return hyp.get("unit") or (spec.get("design") or {}).get("unit") or "trial"


def config_phases(spec: Mapping[str, Any], config: dict[str, Any]) -> tuple[str, ...]:
    """The phases a configuration measures: inference only where its workload's mode is 'infer'; none where it is
    'profile' (a profile trial: the framework's profiler around the steps, no time tested; kit.workloads.kernel_profile)."""
    mode = config.get("mode")
    case = config.get("case")
    if mode is None and case is not None:
        mode = (((spec.get("cases") or {}).get(case) or {}).get("workload") or {}).get("mode")
    if mode is None:
        mode = ((spec.get("workload") or {}).get("params") or {}).get("mode")
    return () if mode == "profile" else ("infer",) if mode == "infer" else PHASES


def design_table(spec: Mapping[str, Any], configs: dict[str, dict[str, Any]], arms: list[str] | tuple[str, ...],
                 *, power: float = POWER, cv: float = DEFAULT_CV, mde: bool = True) -> dict[str, Any]:
    """Per hypothesis and phase: unit, test, n per comparison, Holm family, smallest p, decidable, MDE.

    ``spec`` is the plain spec (``Spec.to_dict()``, the manifest's), ``configs`` the plan's. ``mde=False``: skip
    the simulated minimum detectable effects (most of the cost; `kit list` shows only whether rows are decidable,
    which the smallest attainable p settles), leaving the trial unit's MDE fields None.
    """
    design = spec.get("design") or {}
    alpha = float(design.get("alpha", 0.05))
    reps = int(design.get("repetitions", 0))
    n_pairs = max(0, len(arms) - 1)
    rows: list[dict[str, Any]] = []
    for h in spec.get("hypotheses") or []:
        unit = hypothesis_unit(spec, h)
        for phase in h["phases"]:
            with_phase = [cid for cid, cfg in configs.items() if phase in config_phases(spec, cfg)]
            if unit == "configuration":  # one row per device, n = its networks (kit.analysis.across)
                from kit.analysis.across import design_rows

                rows += design_rows(spec, configs, h, phase, n_pairs, config_phases)
                continue
            else:
                n, comparisons = (reps if with_phase else 0), len(with_phase) * n_pairs
                test = "Wilcoxon signed-rank per configuration, paired by block (one trial per arm per block)"
                n_note = f"{reps} repetitions per configuration" + (
                    f", tested in each of {len(with_phase)} configurations" if len(with_phase) > 1 else "")
            rows.append({"id": h["id"], "phase": phase, "metric": h["metric"], "unit": unit, "test": test,
                         "n": n, "n_note": n_note, "comparisons": comparisons,
                         "family": h.get("family") or "primary"})
    sizes = {f: sum(r["comparisons"] for r in rows if r["family"] == f) for f in {r["family"] for r in rows}}
    for r in rows:
        family = sizes[r["family"]]
        threshold = alpha / family if family else alpha
        n = r["n"]
        p_min, p_ties = min_p(n), min_p_asymptotic(n)
        reasons = []
        if r["comparisons"] == 0:
            reasons.append(f"no configuration measures the {r['phase']} phase")
        if n < MIN_N_FOR_TESTS:
            reasons.append(f"n = {n} < {MIN_N_FOR_TESTS}, the kit's minimum for a test (descriptives only)")
        if p_min >= threshold:
            reasons.append(f"the smallest attainable p ({p_min:.3g}, all differences of one sign) is not below "
                           f"alpha/m = {alpha:g}/{family} = {threshold:.3g}, Holm's first threshold")
        delta = mde_sd(n, threshold, power) if n >= MIN_N_FOR_TESTS and mde else None
        if delta is not None and not math.isfinite(delta) and not reasons:
            reasons.append(f"no outcome of {n} differences reaches p < {threshold:.3g}: no change is detectable")
        decidable = not reasons
        delta_ties = mde_sd(n, threshold, power, ties=True) if decidable and mde else None
        ties_note = None
        if decidable and mde and (delta_ties is None or not math.isfinite(delta_ties)):
            ties_note = (f"on coarse values (steps of {TIES_STEP_SD:g} SD of the differences, zeros dropped) the "
                         f"tie-corrected normal approximation applies, which reaches p < {threshold:.3g} with power "
                         f"{power:.0%} at no shift up to 50 SD: a metric with coarse values may not be decided")
        r.update({
            "family_size": family, "alpha": alpha, "holm_first_threshold": threshold,
            "min_p": p_min, "min_p_with_ties": p_ties, "decidable": decidable,
            "reason": "; ".join(reasons) if reasons else None,
            "ties_note": ties_note,
            "ties_step_sd": TIES_STEP_SD,
            "mde_sd": delta if delta is not None and math.isfinite(delta) else None, "power": power,
            "mde_sd_with_ties": delta_ties if delta_ties is not None and math.isfinite(delta_ties) else None,
            "mde_sd_asymptotic": mde_sd_asymptotic(n, threshold, power) if n >= MIN_N_FOR_TESTS else None,
            "cv": cv if r["unit"] == "trial" else None,
            "mde_ratio": mde_ratio(delta, cv) if r["unit"] == "trial" else None,
        })
        if r["unit"] == "configuration":  # the t test across networks, judged by their number
            from kit.analysis.across import design_fields

            r.update(design_fields(r, threshold, power))
    return {
        "rows": rows, "alpha": alpha, "family_size": sum(sizes.values()), "family_sizes": sizes, "power": power, "cv": cv,
        "min_n_for_tests": MIN_N_FOR_TESTS, "all_decidable": bool(rows) and all(r["decidable"] for r in rows),
        "method": ("decidable: n >= the kit's minimum and the smallest attainable two-sided signed-rank p "
                   "(exact: 2/2^n) below alpha/m, the first Holm threshold over the m planned tests of the "
                   "hypothesis' family (primary or secondary, stated in the spec); "
                   f"MDE at power {power:g}: the shift, in SDs of normal paired differences, that the two-sided "
                   "signed-rank test at alpha/m rejects with that power, simulated against its exact rejection "
                   "region at n (kit.analysis.power; the old normal-theory figure, efficiency 3/pi, is kept as "
                   f"mde_sd_asymptotic; mde_sd_with_ties is simulated on values rounded to steps of {TIES_STEP_SD:g} SD of "
                   "the differences with zeros dropped, through the test such coarse values get); "
                   f"ratio for the trial unit assuming a between-trial CV of {cv:.0%} in each arm. Across "
                   "configurations the unit is the network: a one-sample t test on the networks' mean log ratios "
                   "(one row per device), decidable when 2/2^J < alpha/m for J networks, its MDE that t test's "
                   "(kit.analysis.across)"),
    }


def design_summary(row: dict[str, Any]) -> str:
    """One line per hypothesis and phase, for `kit list` and text reports."""
    from kit.analysis.across import device_text

    what = (f"across {row['n']} network(s) {device_text(row.get('device'))}" if row["unit"] == "configuration"
            else f"per configuration, n = {row['n']}")
    verdict = "testable" if row["decidable"] else f"NOT testable: {row['reason']}"
    mde = "" if row["mde_sd"] is None else f"; MDE {row['mde_sd']:.2f} SD at power {row['power']:.0%}"
    ties = row.get("mde_sd_with_ties")
    if row["mde_sd"] is not None and row["decidable"] and ties != row["mde_sd"]:
        step = row.get("ties_step_sd", TIES_STEP_SD)
        mde += (f" ({ties:.2f} SD with ties: values in steps of {step:g} SD)" if ties is not None else
                f" (undecidable with ties: values in steps of {step:g} SD)")
    if row.get("mde_ratio") is not None:
        mde += f" (ratio {row['mde_ratio']:.3g} at CV {row['cv']:.0%})"
    fam = f" [{row.get('family', 'primary')}, m = {row.get('family_size')}]" if row.get("family_size") else ""
    return f"{row['id']} {row['phase']}{fam}: {row['unit']} unit, {what}; {verdict}{mde}"


def on_this_host(design: Design, hypotheses: Sequence[HypothesisResult]) -> Design:
    """The design table as this run could use it: a row the design calls decidable whose hypotheses were all
    left untested here (a metric this host cannot measure, phases the telemetry cannot resolve) reads
    decidable "no, not on this host" with the reason, so the table agrees with the findings. The profile's
    own verdict is kept in ``by_design`` (pure: a new record; rows without a matching hypothesis are unchanged)."""
    rows = []
    for r in design.rows:
        more: JsonTable = {**r.more, "by_design": r.decidable, "host_note": None}
        row = replace(r, more=more)
        same = [h for h in hypotheses if h.id == r.id and h.phase == r.phase]
        if r.decidable and same and not any(h.tested for h in same):
            note = str(same[0].reason or same[0].decision or "not tested").split(" (fix:")[0]
            row = replace(r, decidable=False, reason=f"not on this host: {note}", more={**more, "host_note": note})
        rows.append(row)
    limited = sum(1 for r in rows if r.more.get("host_note"))
    return replace(design, rows=tuple(rows), all_decidable=bool(rows) and all(r.decidable for r in rows),
                   more={**design.more, "host_limited": limited})
