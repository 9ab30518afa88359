"""Three-way verdicts: a change, "no change" only when the run could have seen one, else "inconclusive".

Planted changes on log-normal samples (per-block noise like a real interleaved run): a 10 %
slowdown with enough pairs is a regression; the same slowdown in a run too noisy and too short
is inconclusive, and drawing the repetitions the kit says it needs makes it a regression; a 1 %
change in a run that can see 5 % is "no change".
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from kit.analysis.power_cache import detectability, mde_unpaired_sd, n_needed
from kit.compare import CompareOptions, conclusive_advice, exit_code, judge
from kit.stats.detectability import min_p_unpaired


def paired_run(change: float, n: int, noise: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n blocks; a block effect shared by both arms, per-trial log-normal noise, B = A x (1 + change)."""
    rng = np.random.default_rng(seed)
    block = rng.lognormal(0.0, 0.2, n)  # blocks differ a lot (load, frequency): pairing removes it
    a = 0.5 * block * rng.lognormal(0.0, noise, n)
    b = 0.5 * (1 + change) * block * rng.lognormal(0.0, noise, n)
    return a, b


def one(a: np.ndarray, b: np.ndarray, paired: bool = True, metric: str = "time_s") -> dict:
    res = judge([("default", metric, "train", "b vs a", a, b)], paired=paired, opts=CompareOptions(n_boot=500))
    return res.to_json() | res.rows[0].to_json() | {"result": res}


def test_a_planted_10_percent_slowdown_with_enough_pairs_is_a_regression() -> None:
    r = one(*paired_run(0.10, 20, 0.03, seed=1))
    assert r["verdict"] == "regression" and r["mde"] < 0.05 and 1.07 < r["ratio"] < 1.13


def test_the_same_slowdown_with_too_few_noisy_pairs_is_inconclusive_until_the_advised_n() -> None:
    r = one(*paired_run(0.10, 10, 0.15, seed=5))
    assert r["verdict"] == "inconclusive", (r["ratio"], r["p_adj"], r["mde"])
    assert r["mde"] > 0.05 and r["n_needed"] > 10
    assert f"{r['n_needed']} pairs" in conclusive_advice(r["result"])
    assert exit_code(r["counts"], "regression") == 3 and exit_code(r["counts"], "regression", allow_inconclusive=True) == 0
    # the advice is right: drawn at the n it names, the same noise and slowdown give a conclusive regression
    again = one(*paired_run(0.10, r["n_needed"], 0.15, seed=6))
    assert again["verdict"] == "regression" and again["mde"] <= 0.05 and exit_code(again["counts"], "regression") == 1


def test_a_1_percent_change_in_a_run_that_sees_5_percent_is_no_change() -> None:
    r = one(*paired_run(0.01, 20, 0.02, seed=5))
    assert r["mde"] <= 0.05 and r["verdict"] == "no change"
    assert exit_code(r["counts"], "regression") == 0


@pytest.mark.slow
def test_a_large_but_unseeable_difference_is_never_called_no_change() -> None:
    """The old rule said "no change" for anything not significant: a 30 % slowdown in 10 very noisy pairs."""
    verdicts = [one(*paired_run(0.30, 10, 0.60, seed=s))["verdict"] for s in range(40)]
    assert "no change" not in verdicts
    assert verdicts.count("inconclusive") > 20  # most such runs cannot tell; the rest are real detections


def test_too_few_trials_cannot_decide_and_say_how_many() -> None:
    a, b = paired_run(0.0, 5, 0.02, seed=2)
    d = detectability(a, b, paired=True, level=0.05, threshold=0.05)
    assert d.mde == math.inf and d.as_dict()["decidable"] is False and d.as_dict()["mde"] is None
    assert d.n_needed is not None and d.n_needed >= 10 and "no outcome can reach" in d.why
    assert one(a, b)["verdict"] == "inconclusive"


def test_unpaired_mde_uses_both_runs_and_the_holm_level() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.lognormal(0, 0.05, 12), rng.lognormal(0, 0.05, 12)
    wide = detectability(a, b, paired=False, level=0.05, threshold=0.05)
    strict = detectability(a, b, paired=False, level=0.05 / 10, threshold=0.05)
    assert strict.mde > wide.mde > 0  # a larger family needs a larger change
    s = wide.noise
    # the Mann-Whitney test's own rejection region at 12 + 12 (kit.stats.power), not the normal formula
    assert wide.mde == pytest.approx(math.expm1(mde_unpaired_sd(12, 12, 0.05) * s), rel=1e-12)
    formula = math.expm1((1.959964 + 0.841621) * s * math.sqrt(2 / 12) / math.sqrt(3 / math.pi))
    assert wide.mde > formula  # the formula overstated power at n = 12
    assert n_needed(s, 0.05, paired=False, level=0.05) >= 10
    assert min_p_unpaired(3, 3) == pytest.approx(0.1) and min_p_unpaired(12, 12) < 1e-4


def test_identical_values_can_see_any_change() -> None:
    a = np.full(12, 0.98)
    d = detectability(a, a.copy(), paired=True, level=0.05, threshold=0.05)
    assert d.mde == 0.0 and one(a, a.copy(), metric="accuracy")["verdict"] == "no change"


def test_cli_prints_detectable_change_and_gates_on_inconclusive(tmp_path, monkeypatch) -> None:
    """kit compare --arms on a run whose arms hold the planted inconclusive case: exit 3, advice printed."""
    import kit.compare as cmp
    from kit.cli import app

    a, b = paired_run(0.10, 10, 0.15, seed=5)
    res = judge([("default", "time_s", "train", "b vs a", a, b)], paired=True, opts=CompareOptions(n_boot=200))
    fake = dataclasses.replace(res, run_a="r [a]", run_b="r [b]", experiment_a="x", experiment_b="x")
    monkeypatch.setattr(cmp, "compare_arms", lambda *args, **kw: fake)
    out = CliRunner().invoke(app, ["compare", str(tmp_path), "--arms", "a,b", "--fail-on", "regression"])
    assert out.exit_code == 3, out.output
    assert "inconclusive" in out.output and "pairs" in out.output and "detectable" in out.output
    ok = CliRunner().invoke(app, ["compare", str(tmp_path), "--arms", "a,b", "--fail-on", "regression",
                                  "--allow-inconclusive"])
    assert ok.exit_code == 0, ok.output


def test_the_report_says_what_a_not_rejected_hypothesis_could_have_detected() -> None:
    """A run's hypotheses: "H0 not rejected" comes with the difference the test would have found."""
    import json
    from pathlib import Path

    from kit.report.context import detectable_text, finding_text

    golden = json.loads((Path(__file__).parent / "data" / "golden" / "analysis.json").read_text())
    rows = [h for h in golden["hypotheses"] if h["tested"] and not h["rejected"]]
    assert rows and all(0 < h["detectable"]["mde"] < 1 and h["detectable"]["level"] == 0.025 for h in rows)
    from kit.analysis_record import Analysis
    from kit.analysis_rows import HypothesisResult

    text = finding_text(HypothesisResult.from_json(rows[0]), Analysis.from_json(golden, "golden"))
    assert f"would have detected a difference of {rows[0]['detectable']['mde']:.1%} or more" in text
    undecidable = HypothesisResult.from_json({"detectable": {"decidable": False, "mde": None}})
    assert detectable_text(undecidable).startswith("; with this n no difference")
