"""Issue 38's "done when": every claim procedure, on data with a known truth at the kit's sizes, gives a wrong
verdict no more often than the level it states (within 2 simulation SE).

The generators, cells and procedures are benchmarks/claims_verdicts_sim.py's (imported by path, so the evidence in
docs/evidence/claims-verdicts-sim-2026-11-29.md and this test run the same code); this test runs them at a smaller
number of draws per cell with another seed, so a table that only held for the published seed would fail here.
The truth sits on, just inside and just outside each claim's band, margin or direction (0.01 of the log), with
log-normal noise and with 10 % of one arm's trials 30 % slower; n = 2, 3, 5, 12; one configuration (paired and
unpaired), 5 and 8 networks x 3 configurations with network gaps of SD 0.1 (overall), trends in one series and
across 8 networks. The "each_network" scope is kit.analysis.claims' composition of these two procedures (each
network judged as "each" or "overall", a union over networks at alpha/k), so its error rates follow from theirs.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

from kit.analysis import claim_tests as ct

ROOT = Path(__file__).resolve().parents[1]
SEED = 3838  # not the evidence's seed (38): the bounds must hold on fresh draws
SIMS = 300  # draws per cell: 3 SE of a 2.5 % bound is 0.027, of a 5 % bound 0.038
# The evidence (1000 draws per cell) holds each rate to its bound + 2 SE, the criterion. Here about a hundred
# rates sit exactly on their bound (the t test across networks is exact there), and each exceeds bound + 2 SE by
# chance 2.3 % of the time: at 2 SE this suite would fail on a correct procedure most runs. 3 SE (0.13 % each) keeps
# that near 10 %, and still fails a procedure at twice its level (0.05 against 0.025) at these draws.
TOL_SE = 3.0
NS = (2, 3, 5, 12)


def _sim() -> ModuleType:
    name = "claims_verdicts_sim"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "claims_verdicts_sim.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # its dataclasses look their module up while being built
    spec.loader.exec_module(mod)
    return mod


SIM = _sim()


def _failures(rates: list) -> list[str]:
    return [f"{r.kind} {r.design} {r.model} n={r.n} {r.cell}: {r.verdict} {r.rate:.3f} > {r.bound:.3f} + "
            f"{TOL_SE * r.se:.3f}" for r in rates if r.bound is not None and r.rate > r.bound + TOL_SE * r.se]


def test_below_the_simulated_minimum_no_kind_reaches_a_verdict() -> None:
    """Fast: at n = 2 and 3 (DLBench's and Germino's quick profiles) every kind, one configuration or 5 networks x
    3 configurations, is inconclusive whatever the truth (the procedures' minima are above 3 there)."""
    for design in (SIM.EACH_PAIRED, SIM.overall_design(5)):
        for kind in SIM.KINDS:
            for n in (2, 3):
                if n >= ct.min_n(kind, design.scope, "networks" if design.scope == "overall" else "paired").enforced \
                        and design.networks >= ct.networks_needed(SIM.ALPHA):
                    continue
                for cell in SIM.cells(kind):
                    rng = SIM.np.random.default_rng([SEED, n])
                    got = {SIM.verdict_of(kind, design, cell, "lognormal", n, rng, True) for _ in range(5)}
                    assert got == {"inconclusive"}, (kind, design.label, n, cell.name, got)


KIND_DESIGNS = [(kind, design) for design in (SIM.EACH_PAIRED, SIM.EACH_UNPAIRED, SIM.overall_design(5),
                                              SIM.overall_design(8)) for kind in SIM.KINDS]
KIND_DESIGNS += [("trend", design) for design in SIM.trend_designs()]


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "design"), KIND_DESIGNS, ids=[f"{k}-{d.label}" for k, d in KIND_DESIGNS])
def test_wrong_verdicts_stay_within_their_bound(kind: str, design: object) -> None:
    rates = [r for model in SIM.MODELS for n in NS for r in SIM.rates(kind, design, model, n, SIMS, SEED)]
    assert rates and all(r.sims == SIMS for r in rates)
    assert not _failures(rates), _failures(rates)
    # the minimum is not so high that nothing is ever decided at n = 12 (5 networks cannot: 2/2^5 > 0.05)
    power = [r.rate for r in rates if r.bound is None and r.n == 12]
    if design.networks != 5:  # type: ignore[attr-defined]
        assert max(power) > 0, power


@pytest.mark.slow
def test_networks_as_units_keep_an_overall_claim_at_its_level() -> None:
    """No true overall effect, network gaps of SD 0.1: the configurations as units gave a directional verdict far
    above 5 % (the issue measured 26 %); the networks as units stay within it."""
    sims = 400
    old, new = SIM.old_overall_rate(8, 3, 12, sims, SEED)
    se = math.sqrt(0.05 * 0.95 / sims)
    assert new <= 0.05 + 2 * se, new
    assert old > 0.05 + 2 * se, old  # the failure mode the rule removes is real at these sizes


@pytest.mark.slow
@pytest.mark.parametrize("n", [12, 30])
@pytest.mark.parametrize("model", ["lognormal", "outliers"])
def test_equivalent_at_the_margin_keeps_its_level_with_skewed_noise(n: int, model: str) -> None:
    """The truth (the printed Hodges-Lehmann ratio) on the margin 1/1.05: claims' no_difference, ``kit compare``'s
    "no change" and the sequential rule's equivalence leg each say "equivalent" at most 5 % of the time."""
    sims = 300
    got = SIM.equivalence_rates(n, model, sims, SEED)
    bound = 0.05 + 2 * math.sqrt(0.05 * 0.95 / sims)
    assert all(v <= bound for v in got.values()), got


@pytest.mark.slow
def test_the_ties_mde_has_its_power_on_the_dlbench_accuracy_row() -> None:
    """Item 8: the "with ties" MDE of DLBench's accuracy row (n = 12 at 0.05/16), tested by the kit's own
    signed-rank test on differences rounded to the metric's resolution, zeros dropped: power 0.80 +- 0.03 (2000
    draws: SE 0.009, so 0.03 is more than 3 SE)."""
    mde, power = SIM.ties_power(12, 0.05 / 16, SIM.pw.TIES_STEP_SD, 2000, SEED)
    assert math.isfinite(mde) and abs(power - 0.80) <= 0.03, (mde, power)
