"""Issue 25 evidence: claimed vs measured power, verdict rates, and the design table of every paper profile.

Run: .venv/bin/python benchmarks/power_verdicts_sim.py [--draws N] > docs/evidence/issue25-power-verdicts-<date>.md

1. Claimed vs measured power. For the (n, Holm level) of each study profile: the MDE the kit printed
   before issue 25 (normal theory, ARE 3/pi) and the one it prints now (kit.stats.power), and the
   power the kit's own ``stats.wilcoxon_paired`` really has at each, on independent normal draws.
2. Verdict rates. Paired log-normal runs (a block effect shared by the arms, 3 % per-trial noise) with a
   true change of 0, 3, 5.5 and 6 % at a 5 % threshold, n = 12, 30, 100: how often the old rule (not
   significant and formula-MDE <= threshold: "no change") and the new one (the 1 - 2 alpha rank interval
   inside the margin: TOST) say "no change", "regression" and "inconclusive".
3. The design table of every paper profile (kit list's figures) with the old MDE beside the new.

Pure computation: no run directory, no framework; seeded, so the output is reproducible.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
from scipy.stats import norm

from kit import stats
from kit.analysis.design import design_table, mde_sd, mde_sd_asymptotic
from kit.analysis.power_cache import detectability
from kit.compare import verdict
from kit.plan import make_plan
from kit.spec import load_spec

ROOT = Path(__file__).resolve().parent.parent
PROFILES = [("Patel distributed", 10, 3), ("DLBench paper, before (one family)", 11, 30),
            ("DLBench paper, now (primary family)", 12, 12), ("DLBench paper, now (secondary family)", 12, 18),
            ("LeNet quick", 12, 10), ("Germino", 20, 12), ("LeNet paper", 100, 10)]


def measured_power(delta: float, n: int, level: float, draws: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    return sum(stats.wilcoxon_paired(rng.standard_normal(n) + delta, np.zeros(n)).p < level
               for _ in range(draws)) / draws


def old_verdict(a: np.ndarray, b: np.ndarray, threshold: float, alpha: float) -> str:
    """The rule before issue 25: significant and practical -> change; else formula-MDE <= threshold -> no change."""
    ratio = float(np.median(b) / np.median(a))
    p = stats.wilcoxon_paired(b, a).p
    if p < alpha and abs(ratio - 1) >= threshold:
        return "regression" if ratio > 1 else "improvement"
    s = float(np.std(np.log(b) - np.log(a), ddof=1))
    mde = math.expm1((norm.isf(alpha / 2) + norm.ppf(0.8)) * s / math.sqrt(a.size * 3 / math.pi))
    return "no change" if mde <= threshold else "inconclusive"


def new_verdict(a: np.ndarray, b: np.ndarray, threshold: float, alpha: float) -> str:
    ratio = float(np.median(b) / np.median(a))
    p = stats.wilcoxon_paired(b, a).p
    det = detectability(a, b, paired=True, level=alpha, threshold=threshold, alpha=alpha)
    return verdict(ratio, p, True, threshold, alpha, det.mde, det.equivalent)


def verdict_rates(change: float, n: int, draws: int, seed: int) -> dict[str, dict[str, float]]:
    rng = np.random.default_rng(seed)
    out = {"old": {"no change": 0.0, "regression": 0.0, "inconclusive": 0.0},
           "new": {"no change": 0.0, "regression": 0.0, "inconclusive": 0.0}}
    for _ in range(draws):
        block = rng.lognormal(0.0, 0.05, n)
        a = block * rng.lognormal(0.0, 0.03, n)
        b = block * (1 + change) * rng.lognormal(0.0, 0.03, n)
        for rule, fn in (("old", old_verdict), ("new", new_verdict)):
            v = fn(a, b, 0.05, 0.05)
            out[rule][v if v in out[rule] else "inconclusive"] += 1 / draws
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--design-only", action="store_true", help="print section 3 only (no simulation)")
    args = ap.parse_args()
    d = args.draws
    if args.design_only:
        design_tables()
        return
    print("# Issue 25: power, verdicts and designs (benchmarks/power_verdicts_sim.py)\n")
    print(f"Seeded; {d} draws per cell (binomial SE at 0.8: {math.sqrt(0.16 / d):.3f}; at 0.05: "
          f"{math.sqrt(0.0475 / d):.3f}).\n")
    print("## 1. Claimed vs measured power (two-sided signed-rank at the Holm level alpha/m, normal differences)\n")
    print("| profile | n | m | level | old MDE (SD) | real power at old MDE | new MDE (SD) | real power at new MDE |")
    print("|---|---|---|---|---|---|---|---|")
    for name, n, m in PROFILES:
        level = 0.05 / m
        old, new = mde_sd_asymptotic(n, level), mde_sd(n, level)
        assert old is not None and new is not None
        draws = d if n <= 20 else max(400, d // 3)
        p_old = measured_power(old, n, level, draws, 11 + n)
        p_new = measured_power(new, n, level, draws, 23 + n) if math.isfinite(new) else float("nan")
        print(f"| {name} | {n} | {m} | {level:.3g} | {old:.3f} | {p_old:.3f} | {new:.3f} | {p_new:.3f} |")
    print("\n## 2. Verdict rates at a 5 % threshold (paired, 3 % per-trial noise, alpha 0.05)\n")
    print("| true change | n | old: no change | old: regression | old: inconclusive | new: no change | "
          "new: regression | new: inconclusive |")
    print("|---|---|---|---|---|---|---|---|")
    for change in (0.0, 0.03, 0.055, 0.06):
        for n in (12, 30, 100):
            r = verdict_rates(change, n, max(300, d // 4), 1000 * n + int(change * 1000))
            o, w = r["old"], r["new"]
            print(f"| {change:.1%} | {n} | {o['no change']:.3f} | {o['regression']:.3f} | {o['inconclusive']:.3f} | "
                  f"{w['no change']:.3f} | {w['regression']:.3f} | {w['inconclusive']:.3f} |")
    design_tables()


def design_tables() -> None:
    print("\n## 3. Design table of every paper profile (kit list's figures)\n")
    print("| experiment | hypothesis | phase | metric | family (m) | n | decidable | MDE SD now | with ties | "
          "old formula | ratio at CV 5 % |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for spec_file in sorted((ROOT / "experiments").glob("*/experiment.toml")):
        spec = load_spec(spec_file)
        plan = make_plan(spec)
        t = design_table(spec.to_dict(), plan.configs, list(plan.arms))
        for r in t["rows"]:
            def f(x: float | None) -> str:
                return "-" if x is None else f"{x:.2f}"
            print(f"| {spec.experiment.id} | {r['id']} | {r['phase']} | {r['metric']} | {r['family']} "
                  f"({r['family_size']}) | {r['n']} ({r['unit']}) | {'yes' if r['decidable'] else 'NO: ' + str(r['reason'])} | "
                  f"{f(r['mde_sd'])} | {f(r.get('mde_sd_with_ties'))} | {f(r.get('mde_sd_asymptotic'))} | "
                  f"{'-' if r.get('mde_ratio') is None else format(r['mde_ratio'], '.3f')} |")


if __name__ == "__main__":
    main()
