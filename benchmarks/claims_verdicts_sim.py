"""Issue 38 evidence: how often each claim procedure gives a wrong verdict, at the kit's sizes, by seeded simulation.

Run: .venv/bin/python benchmarks/claims_verdicts_sim.py [--sims N] > docs/evidence/claims-verdicts-sim-<date>.md

Data with a known truth go through the procedures kit.analysis.claims calls (kit.analysis.claim_tests):

* noise: per trial log-normal (SD 0.05 of the log, a block effect of SD 0.05 shared by the two arms of a block),
  and the same with outliers: 10 % of arm A's trials 30 % slower (right-skewed, in one arm: the case where the
  ratio of medians, the mean log ratio and the Hodges-Lehmann ratio differ);
* truth: the quantity the procedure prints and tests, on the log scale: the Hodges-Lehmann location of
  log A - log B (pseudo-median of the paired log ratios, or median of the pairwise ones when unpaired), and for
  "overall" claims the mean over networks of their configurations' log median ratios. Each noise model shifts
  these by a constant from the planted log ratio; it is computed once by a large simulation (``offsets``) and
  the planted ratio set so that the truth lies where the cell says: on the boundary of the claim (its band, its
  margin, the direction's 1), just inside or just outside it (by ``DELTA`` = 0.01 of the log), or far inside;
* wrong verdicts: "contradicted" where the truth is inside the paper's band, margin or direction; "replicated"
  where it is outside; bounded by the level the procedure states (alpha/2 for a one-sided route of a 1 - alpha
  interval, alpha for TOST and for the two-sided "they differ"), plus 2 SE of the simulation.

Sections: 1. the smallest n per procedure (the bare procedure, no minimum and no coverage check, on the grid
of n), the table kit.analysis.claim_tests.MIN_N holds; 2. wrong-verdict rates with the minimum enforced at
n = 2, 3, 5, 12 (each configuration; 5 and 8 networks x 3 configurations with network gaps of SD 0.1);
3. interval coverage (the BCa ratio of medians the ledger printed before, the Hodges-Lehmann interval now);
4. "equivalent" at the margin with skewed noise (claims, ``kit compare``'s "no change", the sequential rule's
equivalence leg); 5. the power of the "with ties" MDE on data rounded to the metric's resolution.

tests/test_claims_simulation.py runs sections 2, 4 and 5 at a smaller size. Pure computation, seeded.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kit.analysis import claim_tests as ct  # noqa: E402
from kit.analysis import power_cache as pc  # noqa: E402
from kit.analysis.across import ConfigRatio, mean_log  # noqa: E402
from kit.analysis.claim_overall import overall_decision  # noqa: E402
from kit.analysis.claim_trends import trend_decision  # noqa: E402
from kit.claim_spec import Claim  # noqa: E402
from kit.stats import detectability as det  # noqa: E402
from kit.stats import power as pw  # noqa: E402
from kit.stats import sequential as seq  # noqa: E402
from kit.stats.effects import ratio_of_medians  # noqa: E402
from kit.stats.rank_tests import wilcoxon_paired  # noqa: E402

ALPHA = 0.05
SD = 0.05  # per-trial SD of the log value
BLOCK_SD = 0.05  # block effect (shared by the two arms of a block)
OUTLIER_P, OUTLIER_FACTOR = 0.10, 1.30  # arm A: 10 % of trials 30 % slower
NETWORK_SD, CONFIG_SD = 0.10, 0.02  # overall: the networks' gaps, and each configuration's around its network's
SLOPE_SD = 0.02  # overall trends: the networks' slopes around the mean slope
DELTA = 0.01  # "just inside / outside": 0.01 of the log ratio
MARGIN = 0.05
BAND = (1.30, 0.10)  # magnitude: paper value 1.30, tolerance 10 % -> [1.17, 1.43]
LEVELS = (16.0, 32.0, 64.0, 128.0)  # trend: the factor's levels (slope per doubling)
MODELS = ("lognormal", "outliers")


# --------------------------------------------------------------------------- data


def _noise(rng: np.random.Generator, model: str, shape: tuple[int, ...], arm_a: bool) -> np.ndarray:
    e = rng.normal(0.0, SD, shape)
    if model == "outliers" and arm_a:
        e = e + math.log(OUTLIER_FACTOR) * (rng.random(shape) < OUTLIER_P)
    return e


@cache
def offsets(model: str) -> dict[str, float]:
    """How far each estimand lies from the planted log ratio under a noise model (0 for log-normal noise):
    pseudo-median of D (paired), median of D (unpaired, blocks independent), and median A - median B."""
    if model == "lognormal":
        return {"paired": 0.0, "unpaired": 0.0, "medians": 0.0}
    rng = np.random.default_rng(20261129)
    size = 4_000_000
    ea, eb = _noise(rng, model, (size,), True), _noise(rng, model, (size,), False)
    d = ea - eb
    walsh = 0.5 * (d[: size // 2] + d[size // 2:])
    ba, bb = rng.normal(0, BLOCK_SD, size), rng.normal(0, BLOCK_SD, size)
    return {"paired": float(np.median(walsh)), "unpaired": float(np.median(ea + ba - eb - bb)),
            "medians": float(np.median(ea + ba) - np.median(eb + bb))}


def each_data(rng: np.random.Generator, model: str, truth: float, n: int, paired: bool) -> tuple[np.ndarray,
                                                                                                  np.ndarray]:
    """One configuration's values of arms A and B whose estimand (the printed quantity) is ``truth`` (log)."""
    planted = truth - offsets(model)["paired" if paired else "unpaired"]
    block = rng.normal(0, BLOCK_SD, n)
    other = block if paired else rng.normal(0, BLOCK_SD, n)
    la = planted + block + _noise(rng, model, (n,), True)
    lb = other + _noise(rng, model, (n,), False)
    return 2.0 * np.exp(la), 2.0 * np.exp(lb)


def overall_ratios(rng: np.random.Generator, model: str, truth: float, n: int, networks: int,
                   configs: int) -> list[ConfigRatio]:
    """Configurations nested in networks (gaps of SD NETWORK_SD), their per-arm medians; the estimand (the mean
    over networks of the configurations' log median ratios, in the population) is ``truth``."""
    planted = truth - offsets(model)["medians"]
    shape = (networks, configs, n)
    shift = planted + rng.normal(0, NETWORK_SD, (networks, 1, 1)) + rng.normal(0, CONFIG_SD, (networks, configs, 1))
    block = rng.normal(0, BLOCK_SD, shape)
    med_a = np.median(2.0 * np.exp(shift + block + _noise(rng, model, shape, True)), axis=2)
    med_b = np.median(2.0 * np.exp(block + _noise(rng, model, shape, False)), axis=2)
    return [ConfigRatio(f"n{j}c{c}", f"net{j}", "", float(med_a[j, c]), float(med_b[j, c]), n, n,
                        math.log(med_a[j, c] / med_b[j, c])) for j in range(networks) for c in range(configs)]


def trend_series(rng: np.random.Generator, model: str, slope: float, n: int, networks: int,
                 series: int) -> dict[str, dict[str, tuple[list[float], list[float], list[str]]]]:
    """One arm's series along LEVELS: slope per doubling (networks' slopes of SD SLOPE_SD around it when more than
    one network); ``networks`` x ``series`` series of n values per level."""
    out: dict[str, tuple[list[float], list[float], list[str]]] = {}
    for j in range(networks):
        s_j = slope + (rng.normal(0, SLOPE_SD) if networks > 1 else 0.0)
        for k in range(series):
            xs = [lv for lv in LEVELS for _ in range(n)]
            level_log = np.log2(np.asarray(xs) / LEVELS[0])
            ys = 2.0 * np.exp(s_j * level_log + rng.normal(0, 0.05) + _noise(rng, model, (len(xs),), True))
            out[f"net{j}/s{k}"] = (xs, ys.tolist(), [f"net{j}"])
    return {"a": out}


# --------------------------------------------------------------------------- cells


def claim_of(kind: str, scope: str) -> Claim:
    base: dict[str, Any] = {"id": "S", "source": "sim", "statement": "simulated", "kind": kind, "metric": "time_s",
                            "arms": ("a", "b"), "scope": scope}
    if kind == "direction":
        base["direction"] = "greater"
    if kind in ("difference", "no_difference"):
        base["margin"] = MARGIN
    if kind == "magnitude":
        base.update(paper_value=BAND[0], tolerance=BAND[1])
    if kind == "trend":
        base.update(arms=("a",), factor="batch_size", trend="increasing")
    return Claim(**base)


@dataclass(frozen=True)
class Cell:
    """Where the truth lies, and the verdicts that are wrong there with their bounds."""

    name: str
    truth: float  # the estimand on the log scale (trend: the slope per doubling)
    wrong: dict[str, float] = field(default_factory=dict)  # verdict -> bound (nominal level)
    power: bool = False  # far inside: the rate of the right verdict is reported (can the procedure decide?)


def cells(kind: str) -> list[Cell]:
    half, full = ALPHA / 2, ALPHA
    lm = math.log1p(MARGIN)
    if kind in ("direction", "trend"):
        far = 0.2 if kind == "direction" else 0.1
        return [Cell("on 1" if kind == "direction" else "flat", 0.0, {"replicated": half, "contradicted": half}),
                Cell("just inside", DELTA, {"contradicted": half}), Cell("just outside", -DELTA, {"replicated": half}),
                Cell("far inside", far, {"contradicted": half}, power=True)]
    if kind == "difference":
        return [Cell("on 1 (no difference)", 0.0, {"replicated": full}),
                Cell("on the margin", lm, {"contradicted": full}),
                Cell("just outside the margin", lm + DELTA, {"contradicted": full}),
                Cell("far inside", 0.2, {"contradicted": full}, power=True)]
    if kind == "magnitude":
        lo = math.log(BAND[0] * (1 - BAND[1]))
        hi = math.log(BAND[0] * (1 + BAND[1]))
        return [Cell("on the lower edge", lo, {"contradicted": half, "replicated": half}),
                Cell("just inside the lower edge", lo + DELTA, {"contradicted": half}),
                Cell("just outside the lower edge", lo - DELTA, {"replicated": half}),
                Cell("on the upper edge", hi, {"contradicted": half, "replicated": half}),
                Cell("just inside the upper edge", hi - DELTA, {"contradicted": half}),
                Cell("just outside the upper edge", hi + DELTA, {"replicated": half}),
                Cell("far inside", math.log(BAND[0]), {"contradicted": half}, power=True)]
    return [Cell("on the margin", lm, {"replicated": full, "contradicted": half}),
            Cell("just outside the margin", lm + DELTA, {"replicated": full}),
            Cell("just inside the margin", lm - DELTA, {"contradicted": half}),
            Cell("far inside (no difference)", 0.0, {"contradicted": half}, power=True)]


@dataclass(frozen=True)
class Design:
    """Where a claim is judged: one configuration (paired or not), networks x configurations, or a trend's series."""

    scope: str  # each | overall
    paired: bool = True
    networks: int = 1
    configs: int = 1
    label: str = ""


def verdict_of(kind: str, design: Design, cell: Cell, model: str, n: int, rng: np.random.Generator,
               enforce: bool) -> str:
    claim = claim_of(kind, design.scope)
    if kind == "trend":
        series = trend_series(rng, model, cell.truth, n, design.networks, design.configs)
        nets = {f"net{j}": f"net{j}" for j in range(design.networks)} if design.scope == "overall" else None
        return trend_decision(claim, series, ALPHA, nets, enforce=enforce)[0]
    if design.scope == "overall":
        ratios = overall_ratios(rng, model, cell.truth, n, design.networks, design.configs)
        return overall_decision(claim, ratios, ALPHA, by_network=True, enforce=enforce)[0]
    a, b = each_data(rng, model, cell.truth, n, design.paired)
    row = ct.judge_cell(claim, "c", a, b, design.paired, ALPHA, 1, enforce=enforce, advise=False)
    return "contradicted" if row["contradicts"] else "replicated" if row["replicates"] else "inconclusive"


@dataclass(frozen=True)
class Rate:
    kind: str
    design: str
    model: str
    n: int
    cell: str
    verdict: str  # the wrong verdict counted (or, for a power cell, "power: <right verdict>")
    rate: float
    bound: float | None
    sims: int

    @property
    def se(self) -> float:
        b = self.bound if self.bound is not None else self.rate
        return math.sqrt(max(b * (1 - b), 1e-12) / self.sims)

    @property
    def ok(self) -> bool:
        return self.bound is None or self.rate <= self.bound + 2 * self.se


def rates(kind: str, design: Design, model: str, n: int, sims: int, seed: int, enforce: bool = True) -> list[Rate]:
    out = []
    for i, cell in enumerate(cells(kind)):
        rng = np.random.default_rng([seed, i, n, MODELS.index(model), design.networks, int(design.paired)])
        got = [verdict_of(kind, design, cell, model, n, rng, enforce) for _ in range(sims)]
        for wrong, bound in cell.wrong.items():
            out.append(Rate(kind, design.label, model, n, cell.name, wrong, got.count(wrong) / sims, bound, sims))
        if cell.power:
            right = "replicated"
            out.append(Rate(kind, design.label, model, n, cell.name, f"power: {right}", got.count(right) / sims,
                            None, sims))
    return out


KINDS = ("direction", "difference", "magnitude", "no_difference")
EACH_PAIRED = Design("each", True, label="each, paired")
EACH_UNPAIRED = Design("each", False, label="each, unpaired")


def overall_design(networks: int) -> Design:
    return Design("overall", True, networks, 3, f"overall, {networks} networks x 3 configurations")


def trend_designs() -> list[Design]:
    return [Design("each", True, 1, 1, "trend, one series"), Design("overall", True, 8, 3, "trend, 8 networks x 3")]


# --------------------------------------------------------------------------- section 1: the minimum n


def min_n_search(kind: str, design: Design, grid: Sequence[int], sims: int, seed: int) -> tuple[int | None,
                                                                                                 list[Rate]]:
    """The smallest n of ``grid`` from which the bare procedure keeps every bound at every larger n of the grid
    and reaches a verdict at the far-inside truth; None when no n of the grid does."""
    found: int | None = None
    seen: list[Rate] = []
    for n in sorted(grid, reverse=True):  # down from the largest n, to the first that fails (the one below found)
        rs = [r for model in MODELS for r in rates(kind, design, model, n, sims, seed, enforce=False)]
        seen += rs
        decides = any(r.bound is None and r.rate > 0 for r in rs)
        if not (all(r.ok for r in rs) and decides):
            break
        found = n
    return found, seen


# --------------------------------------------------------------------------- section 3: coverage


def coverage(n: int, model: str, sims: int, seed: int, paired: bool = True) -> dict[str, float]:
    """Coverage of the 95 % intervals of their own estimands: the BCa ratio of medians (printed before issue 38)
    and the Hodges-Lehmann interval (printed and tested now); the HL interval's attainable coverage at n."""
    rng = np.random.default_rng([seed, n, MODELS.index(model)])
    truth = 0.1
    off = offsets(model)
    bca = hl = 0
    for _ in range(sims):
        a, b = each_data(rng, model, truth, n, paired)
        r = ratio_of_medians(a, b, conf=0.95, n_boot=1000, seed=0, paired=paired)
        med_truth = truth - off["paired" if paired else "unpaired"] + off["medians"]
        bca += bool(math.isfinite(r.low) and r.low <= math.exp(med_truth) <= r.high)
        h = det.hl_ratio(a, b, paired=paired, conf=0.95)
        hl += bool(h.low is not None and h.high is not None and h.low <= math.exp(truth) <= h.high)
    return {"bca": bca / sims, "hl": hl / sims,
            "attainable": det.attainable_coverage(n, n, paired, 0.95)}


# --------------------------------------------------------------------------- section 4: equivalence at the margin


def equivalence_rates(n: int, model: str, sims: int, seed: int, truth_of: str = "hl") -> dict[str, float]:
    """Share of "equivalent" verdicts when the truth sits on the lower margin 1/(1 + m) (its least favourable
    point with right-skewed noise in arm A): claims' no_difference, compare's "no change" (TOST on the rank
    interval), the sequential rule's equivalence leg. ``truth_of`` "medians": the margin placed on the ratio of
    medians instead (the quantity printed before issue 38), to show why printing the tested one matters."""
    rng = np.random.default_rng([seed, n, MODELS.index(model), len(truth_of)])
    lm = -math.log1p(MARGIN)
    off = offsets(model)
    truth = lm if truth_of == "hl" else lm - off["medians"] + off["paired"]
    claim = claim_of("no_difference", "each")
    got = {"claims": 0, "compare": 0, "sequential": 0}
    for _ in range(sims):
        a, b = each_data(rng, model, truth, n, True)
        row = ct.judge_cell(claim, "c", a, b, True, ALPHA, 1, advise=False)
        got["claims"] += bool(row["replicates"])
        inside, *_ = det.equivalence_interval(b, a, paired=True, alpha=ALPHA, threshold=MARGIN)
        got["compare"] += bool(inside)
        d = seq.decide([("h", a, b)], ALPHA, MARGIN)[0]
        got["sequential"] += d.status == "equivalent"
    return {k: v / sims for k, v in got.items()}


# --------------------------------------------------------------------------- section 5: the ties MDE


def ties_power(n: int, level: float, step_sd: float, sims: int, seed: int) -> tuple[float, float]:
    """The printed "with ties" MDE and the power the kit's own test (stats.wilcoxon_paired) has there on normal
    differences rounded to steps of ``step_sd`` SDs, zeros dropped by the test."""
    mde = pc.mde_paired_sd(n, level, ties=True, step_sd=step_sd)
    if not math.isfinite(mde):
        return mde, math.nan
    rng = np.random.default_rng([seed, n, int(step_sd * 100)])
    hits = 0
    for _ in range(sims):
        d = np.rint((rng.standard_normal(n) + mde) / step_sd) * step_sd
        hits += wilcoxon_paired(d, np.zeros(n)).p < level
    return mde, hits / sims


def old_overall_rate(networks: int, configs: int, n: int, sims: int, seed: int) -> tuple[float, float]:
    """A directional verdict with no true overall effect: configurations as units (the procedure before issue 38)
    against the networks as units (now); 5 networks x 3 configurations, gaps of SD NETWORK_SD."""
    rng = np.random.default_rng([seed, networks, configs, n])
    claim = claim_of("direction", "overall")
    old = new = 0
    for _ in range(sims):
        ratios = overall_ratios(rng, "lognormal", 0.0, n, networks, configs)
        ml = mean_log([r.log_ratio for r in ratios], conf=1 - ALPHA)
        old += bool(ml.low is not None and ml.high is not None and (ml.low > 1 or ml.high < 1))
        new += overall_decision(claim, ratios, ALPHA)[0] != "inconclusive"
    return old / sims, new / sims


# --------------------------------------------------------------------------- printing


def _fmt(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def print_rates(rs: Sequence[Rate]) -> None:
    print("| kind | design | noise | n | truth | wrong verdict | rate | bound + 2 SE | ok |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rs:
        bound = "-" if r.bound is None else f"{r.bound:.3f} + {2 * r.se:.3f}"
        print(f"| {r.kind} | {r.design} | {r.model} | {r.n} | {r.cell} | {r.verdict} | {r.rate:.3f} | {bound} | "
              f"{'yes' if r.ok else 'NO'} |")


def kit_sizes(sims: int, seed: int, ns: Sequence[int] = (2, 3, 5, 12),
              designs: Sequence[Design] | None = None) -> Iterator[Rate]:
    """Section 2: every kind x design at the kit's sizes, the minimum enforced."""
    designs = list(designs) if designs is not None else [EACH_PAIRED, overall_design(5), overall_design(8)]
    for design in designs:
        for kind in KINDS:
            for model in MODELS:
                for n in ns:
                    yield from rates(kind, design, model, n, sims, seed)
    for design in trend_designs():
        for model in MODELS:
            for n in ns:
                yield from rates("trend", design, model, n, sims, seed)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sims", type=int, default=2000, help="draws per cell (sections 1 and 2)")
    ap.add_argument("--seed", type=int, default=38)
    ap.add_argument("--sections", default="1,2,3,4,5,6")
    args = ap.parse_args(argv)
    sims, seed = args.sims, args.seed
    want = {int(s) for s in args.sections.split(",")}
    print("# Issue 38: wrong verdicts of the claim procedures (benchmarks/claims_verdicts_sim.py)\n")
    print(f"Seeded (seed {seed}); {sims} draws per cell; alpha {ALPHA}; noise per trial log-SD {SD}, block SD "
          f"{BLOCK_SD}; outliers: {OUTLIER_P:.0%} of arm A's trials x{OUTLIER_FACTOR}; just inside/outside: "
          f"{DELTA} of the log; margin {MARGIN:.0%}; band {BAND[0]} +- {BAND[1]:.0%}. Estimand offsets from the "
          f"planted log ratio with outliers: {', '.join(f'{k} {v:+.4f}' for k, v in offsets('outliers').items())}.\n")
    if 1 in want:
        print("## 1. The smallest n at which each bare procedure keeps its bounds (no minimum, no coverage check)\n")
        print("Grid n = 2, 3, 4, 5, 6, 8, 10, 12 (each); 1, 2, 3, 5 (overall, 8 networks x 3; trend). 'decides': the "
              "far-inside truth gets the right verdict at least once. Enforced = max(simulated, the kit's floor).\n")
        print("| kind | design | simulated minimum | kit floor | enforced (MIN_N) | worst rate below it |")
        print("|---|---|---|---|---|---|")
        searches = [(kind, d, (2, 3, 4, 5, 6, 8, 10, 12)) for kind in KINDS for d in (EACH_PAIRED, EACH_UNPAIRED)]
        searches += [(kind, replace(overall_design(8), label="overall, 8 networks x 3"), (1, 2, 3, 5))
                     for kind in KINDS]
        searches += [("trend", d, (1, 2, 3, 5)) for d in trend_designs()]
        for kind, design, grid in searches:
            found, seen = min_n_search(kind, design, grid, max(300, sims // 4), seed)
            below = [r for r in seen if found is None or r.n < found]
            worst = max((r for r in below if r.bound is not None), key=lambda r: r.rate - (r.bound or 0.0),
                        default=None)
            power = [r.rate for r in below if r.bound is None]
            if worst is not None and worst.rate <= (worst.bound or 0.0) + 2 * worst.se and power and max(power) == 0:
                worst = None  # within the bounds there: the n below decides nothing at all
            key = (kind, "overall" if design.scope == "overall" and kind != "trend" else design.scope,
                   "levels" if kind == "trend" else "networks" if design.scope == "overall" else
                   ("paired" if design.paired else "unpaired"))
            entry = ct.MIN_N.get(key)
            n_below = max((r.n for r in below), default=None)
            worst_text = (f"no verdict reachable at n = {n_below}" if worst is None and n_below is not None else
                          "-" if worst is None else (f"{worst.rate:.3f} ({worst.verdict}, {worst.cell}, n = "
                                                     f"{worst.n}, {worst.model}; bound {worst.bound:.3f})"))
            print(f"| {kind} | {design.label} | {found} | {entry.floor if entry else '-'} | "
                  f"{entry.enforced if entry else '-'} | {worst_text} |", flush=True)
    if 2 in want:
        print("\n## 2. Wrong-verdict rates at the kit's sizes, the minimum enforced\n")
        print_rates(list(kit_sizes(sims, seed)))
    if 3 in want:
        print("\n## 3. Coverage of the 95 % intervals (paired), each of its own estimand\n")
        print("| n | noise | BCa ratio of medians (before) | Hodges-Lehmann (now) | HL attainable at n |")
        print("|---|---|---|---|---|")
        for n in (2, 3, 5, 6, 12):
            for model in MODELS:
                c = coverage(n, model, max(200, sims // 4), seed)
                print(f"| {n} | {model} | {c['bca']:.3f} | {c['hl']:.3f} | {c['attainable']:.3f} |", flush=True)
    if 4 in want:
        print("\n## 4. 'Equivalent' with the truth on the lower margin 1/1.05 (should be <= 0.05 + 2 SE)\n")
        print("| n | noise | margin placed on | claims no_difference | compare 'no change' | sequential leg |")
        print("|---|---|---|---|---|---|")
        for n in (12, 30):
            for model in MODELS:
                for on in ("hl", "medians"):
                    e = equivalence_rates(n, model, sims, seed, on)
                    label = "the Hodges-Lehmann ratio (printed now)" if on == "hl" else "the ratio of medians"
                    print(f"| {n} | {model} | {label} | {e['claims']:.3f} | {e['compare']:.3f} | "
                          f"{e['sequential']:.3f} |", flush=True)
    if 5 in want:
        print("\n## 5. Power at the printed 'with ties' MDE on rounded data (should be 0.80 +- 0.03)\n")
        print("| row | n | level | step (SD) | MDE with ties (SD) | power, kit's test on rounded data |")
        print("|---|---|---|---|---|---|")
        for name, n, level in (("DLBench accuracy (H1, primary, m = 16)", 12, 0.05 / 16),
                               ("Germino (m = 12)", 20, 0.05 / 12), ("Patel distributed (m = 3)", 10, 0.05 / 3),
                               ("LeNet paper (m = 10)", 100, 0.05 / 10)):
            for step in (pw.TIES_STEP_SD, 0.25, 1.0):
                mde, power = ties_power(n, level, step, max(1000, sims), seed)
                print(f"| {name} | {n} | {level:.4g} | {step:g} | {_fmt(mde)} | {_fmt(power)} |", flush=True)
    if 6 in want:
        print("\n## 6. Overall claims, no true effect, network gaps of SD 0.1: a directional verdict (<= 0.05)\n")
        print("| networks x configurations | n | configurations as units (before) | networks as units (now) |")
        print("|---|---|---|---|")
        for nets, n in ((5, 2), (5, 12), (8, 12)):
            old, new = old_overall_rate(nets, 3, n, sims, seed)
            print(f"| {nets} x 3 | {n} | {old:.3f} | {new:.3f} |", flush=True)


if __name__ == "__main__":
    main()
