"""Issue 15 item 3, Patel: each label says what its test tests.

- Patel H3 was labelled "Q4: batch size affects power" but compares TensorFlow with PyTorch: it is
  now labelled a framework contrast, and Q4 is tested by a trend test across batch sizes per
  framework (stratified Jonckheere-Terpstra on trial-level power).
- The distributed H1 was labelled with the DP-vs-DDP question but compares the frameworks; the
  question itself is now tested within PyTorch, paired by repetition, with a CI on the ratio,
  instead of the bare point comparison ``ddp_better = ddp_speedup > dp_speedup``.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kit import stats as S
from kit.analysis.metrics import VALUE_COLUMNS
from kit.spec import load_spec
from tests._runs import run_view
from tests._studies import study_module, study_sections

zoo = study_module("patel_models_sweep", "analysis")
zoo_dist = study_module("patel_distributed", "analysis")

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- labels


def test_hypothesis_labels_say_what_is_tested() -> None:
    sweep = load_spec(ROOT / "experiments" / "patel_models_sweep" / "experiment.toml")
    q4 = next(q for q in sweep.goal.questions if q.startswith("Q4"))
    assert q4 == zoo.Q4  # the trend test carries the paper's question
    for h in sweep.hypotheses:  # every hypothesis of the table compares the two frameworks
        assert "TensorFlow" in h.h0 and "PyTorch" in h.h0
        assert not h.question.startswith("Q4") and not h.question.startswith("Q3"), h.question
    h3 = next(h for h in sweep.hypotheses if h.id == "H3")
    assert "Framework contrast" in h3.question and "TensorFlow" in h3.question and "PyTorch" in h3.question

    dist = load_spec(ROOT / "experiments" / "patel_distributed" / "experiment.toml")
    assert dist.goal.questions == (zoo_dist.Q1,)
    (h1,) = dist.hypotheses
    assert not h1.question.startswith("Q1")  # it does not test DDP against DataParallel
    assert "Framework contrast" in h1.question and "TensorFlow" in h1.question and "PyTorch" in h1.question


# --------------------------------------------------------------------------- the trend test


def jonckheere(x: list[float], y: list[float]) -> float:
    """JT by its definition: over pairs at different levels, 1 if the higher level has the higher value, ½ if tied."""
    total = 0.0
    for (xi, yi), (xj, yj) in itertools.combinations(zip(x, y, strict=True), 2):
        if xi == xj:
            continue
        lo, hi = (yi, yj) if xi < xj else (yj, yi)
        total += (hi > lo) + 0.5 * (hi == lo)
    return total


def test_stratified_trend_variance_is_the_permutation_variance() -> None:
    # ties in both the level (3 batch sizes, repeated) and the value (integer watts)
    x = [1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 3.0]
    y = [150.0, 150.0, 152.0, 155.0, 155.0, 160.0, 150.0]
    res = S.stratified_trend([(x, y)])
    # under H0 every order of y over the units is equally likely: enumerate all 7! of them
    sums = []
    for perm in itertools.permutations(y):
        sums.append(sum(np.sign(xj - xi) * np.sign(yj - yi)
                        for (xi, yi), (xj, yj) in itertools.combinations(zip(x, perm, strict=True), 2)))
    assert np.mean(sums) == pytest.approx(0.0, abs=1e-12)
    assert res.var_s == pytest.approx(float(np.var(sums)), rel=1e-12)
    pairs_diff = sum(xi != xj for xi, xj in itertools.combinations(x, 2))  # 16 pairs at different levels
    assert res.pairs == pairs_diff == 16
    assert res.s == pytest.approx(2 * jonckheere(x, y) - pairs_diff)  # S is Jonckheere-Terpstra's statistic
    assert res.p == pytest.approx(math.erfc(abs(res.s) / math.sqrt(res.var_s) / math.sqrt(2)), rel=1e-12)


def test_stratified_trend_sums_strata_and_ignores_level_shifts() -> None:
    # two strata at very different levels (two models): pooled, the levels would swamp the order
    a = ([1.0, 4.0, 16.0, 64.0], [100.0, 101.0, 103.0, 104.0])
    b = ([1.0, 4.0, 16.0, 64.0], [250.0, 252.0, 251.0, 255.0])
    res = S.stratified_trend([a, b, ([8.0], [3.0]), ([2.0, 2.0], [1.0, 2.0])], names=["m1", "m2", "one", "flat"])
    s_a, s_b = 6.0, 4.0  # by hand: a is fully concordant (6 of 6 pairs), b has 5 concordant, 1 discordant
    assert (res.s, res.strata, res.n, res.pairs) == (s_a + s_b, 2, 8, 12)
    assert res.var_s == pytest.approx(2 * 4 * 3 * 13 / 18)  # no ties: n(n-1)(2n+5)/18 per stratum
    assert [p["stratum"] for p in res.per_stratum] == ["m1", "m2"]
    assert res.concordance == pytest.approx(10 / 12)
    none = S.stratified_trend([([1.0], [2.0])])
    assert math.isnan(none.p) and none.reason


def _power_values(rise: dict[str, float], missing: bool = False, seed: int = 0) -> tuple[pd.DataFrame, dict]:
    """Trial-level phase power of a 2-model x 5-batch x 3-repetition sweep, one value per trial."""
    rng = np.random.default_rng(seed)
    batches = [1, 4, 16, 64, 256]
    infos, rows, cid = {}, [], 0
    for model, level in (("resnet18", 120.0), ("vgg16", 250.0)):
        for b in batches:
            c = f"c{cid:02d}"
            cid += 1
            infos[c] = {"config_id": c, "case": model, "model": model, "image_size": 224, "batch_size": b,
                        "mode": "train_infer", "device": "cuda"}
            for rep in range(3):
                for arm in ("tensorflow", "pytorch"):
                    drift = 40.0 * rep  # repetitions hours apart: the GPU runs hotter
                    v = level + drift + rise[arm] * math.log2(b) + rng.normal(0, 1.0)
                    rows.append({"trial_id": f"r{rep:03d}-{c}-{arm}", "arm": arm, "framework": arm, "config_id": c,
                                 "block": cid * 3 + rep, "repetition": rep, "position": len(rows), "warmup": False,
                                 "status": "ok", "phase": "train", "metric": "gpu_phase_power_w", "value": v,
                                 "unit": "W", "n_samples": None})
    for b in batches:  # a CPU-inference case: the idle GPU's power falls over the run, whatever the batch
        c = f"c{cid:02d}"
        cid += 1
        infos[c] = {"config_id": c, "case": "cpu_resnet18", "model": "resnet18", "image_size": 224, "batch_size": b,
                    "mode": "infer", "device": "cpu"}
        for rep in range(3):
            rows.append({"trial_id": f"r{rep:03d}-{c}-tensorflow", "arm": "tensorflow", "framework": "tensorflow",
                         "config_id": c, "block": cid * 3 + rep, "repetition": rep, "position": len(rows),
                         "warmup": False, "status": "ok", "phase": "train", "metric": "gpu_phase_power_w",
                         "value": 60.0 - b / 8, "unit": "W", "n_samples": None})
    if missing:
        rows[2]["value"] = None  # a TensorFlow trial without a power reading
    return pd.DataFrame(rows, columns=VALUE_COLUMNS), infos


def test_q4_power_trend_per_framework_on_trials() -> None:
    values, infos = _power_values({"pytorch": 3.0, "tensorflow": 0.0})
    rows = zoo.power_trend(values, infos, ["tensorflow", "pytorch"], "gpu_phase_power_w", 0.05)
    by = {r["arm"]: r for r in rows}
    assert set(by) == {"tensorflow", "pytorch"} and all(r["question"] == zoo.Q4 for r in rows)
    pt, tf = by["pytorch"], by["tensorflow"]
    # the unit is the trial: 2 models x 5 batch sizes x 3 repetitions = 30 values, in 6 strata
    assert pt["unit"] == "trial" and pt["n_trials"] == 30 and pt["strata"] == 6
    assert pt["decision"] == "power rises with batch size" and pt["p_holm"] < 0.05
    assert tf["decision"].startswith("no monotone trend detected") and tf["p_holm"] >= 0.05
    assert "would have been detected with power 0.8" in tf["decision"] and tf["mde"]["mde_per_step"] > 0
    assert pt["test"]["method"].startswith("stratified Jonckheere-Terpstra")
    # the drift between repetitions (40 W) exceeds the whole batch effect (24 W): within strata it cancels
    assert pt["concordance"] > 0.9


def test_q4_not_testable_when_some_trials_have_no_reading() -> None:
    values, infos = _power_values({"pytorch": 3.0, "tensorflow": 0.0}, missing=True)
    rows = zoo.power_trend(values, infos, ["tensorflow", "pytorch"], "gpu_phase_power_w", 0.05)
    tf = next(r for r in rows if r["arm"] == "tensorflow")
    assert tf["tested"] is False and tf["decision"] == "not testable" and "biased subset" in tf["reason"]


# --------------------------------------------------------------------------- DDP vs DataParallel


def _dist_run(ddp_over_dp: float, seed: int = 1, reps: int = 5) -> tuple[dict, list[dict]]:
    """A patel_distributed-like run: PyTorch single/dp/ddp, TensorFlow single/dp, with drift between repetitions."""
    rng = np.random.default_rng(seed)
    configs = {"c00": {"case": "single"}, "c01": {"case": "dp"}, "c02": {"case": "ddp"}}
    spec = {"workload": {"name": "zoo_distributed", "batch_size": 64, "model": "resnet18", "devices": 2},
            "cases": {"single": {"workload": {"strategy": "single"}}, "dp": {"workload": {"strategy": "dp"}},
                      "ddp": {"workload": {"strategy": "ddp"}}}, "design": {"alpha": 0.05}}
    manifest = {"spec": spec, "plan": {"arms": ["tensorflow", "pytorch"], "configs": configs}}
    base = {"single": 1000.0, "dp": 1500.0, "ddp": 1500.0 * ddp_over_dp}
    trials = []
    for rep in range(reps):
        drift = 1.0 + 0.25 * rep  # later repetitions faster (clocks, caches): shared by the configs of a repetition
        for cid, cfg in configs.items():
            for arm in ("tensorflow", "pytorch"):
                st = cfg["case"]
                if arm == "tensorflow" and st == "ddp":
                    trials.append({"trial_id": f"r{rep:03d}-{cid}-{arm}", "config_id": cid, "arm": arm,
                                   "repetition": rep, "warmup": False, "status": "skipped", "results": {},
                                   "error": "TensorFlow has no DDP arm"})
                    continue
                ips = base[st] * drift * float(np.exp(rng.normal(0, 0.01)))
                trials.append({"trial_id": f"r{rep:03d}-{cid}-{arm}", "config_id": cid, "arm": arm, "repetition": rep,
                               "warmup": False, "status": "ok", "env": {"dist_backend": "nccl"},
                               "results": {"devices": 1 if st == "single" else 2, "train_throughput_ips": ips,
                                           "device_kind": "gpu"}})
    return manifest, trials


def test_ddp_vs_dp_is_tested_paired_by_repetition_with_a_ratio_ci() -> None:
    manifest, trials = _dist_run(1.25)
    out = zoo_dist.analyse(run_view(manifest, trials)).to_json()
    c = out["ddp_vs_dp"]
    assert c["question"] == zoo_dist.Q1 and c["arm"] == "pytorch" and c["paired_by"] == "repetition"
    assert c["n_pairs"] == 5 and c["repetitions"] == [0, 1, 2, 3, 4]
    assert c["low"] < 1.25 < c["high"] and c["low"] > 1.0
    assert c["verdict"] == "DDP faster than DataParallel" and c["ddp_better"] is True
    # the drift (x2 over the run) dwarfs the 1 % noise; paired, the ratio is tight, unpaired it would not be
    ddp = [t["results"]["train_throughput_ips"] for t in trials if t["config_id"] == "c02" and t["status"] == "ok"]
    dp = [t["results"]["train_throughput_ips"] for t in trials if t["config_id"] == "c01" and t["arm"] == "pytorch"]
    paired = S.paired_log_ratio(ddp, dp)
    assert (paired.low, paired.high) == pytest.approx((c["low"], c["high"]))
    unpaired = zoo.time_ratio(ddp, dp)  # Welch on the logs, the pairing ignored
    assert unpaired["lo"] < 1.0 < unpaired["hi"]  # the drift hides the 25 % difference
    assert c["high"] / c["low"] < 1.1 < 1.5 < unpaired["hi"] / unpaired["lo"]


def test_a_point_difference_inside_the_noise_is_not_a_finding() -> None:
    # DDP 0.5 % faster in truth, 1 % noise per trial: the old rule said "DDP better" from the two means
    manifest, trials = _dist_run(1.005, seed=3)
    c = zoo_dist.analyse(run_view(manifest, trials)).to_json()["ddp_vs_dp"]
    assert c["ddp_speedup"] > c["dp_speedup"]  # the bare point comparison would call this a win
    assert c["low"] < 1.0 < c["high"]
    assert c["verdict"] == "no difference shown" and c["ddp_better"] is False


def test_ddp_scaling_efficiency_against_near_linear() -> None:
    manifest, trials = _dist_run(1.25)  # DDP 1875 images/s on 2 devices against 1000 on one: efficiency 0.94
    s = zoo_dist.analyse(run_view(manifest, trials)).to_json()["ddp_scaling"]
    assert s["devices"] == 2 and s["n_pairs"] == 5
    assert s["efficiency"] == pytest.approx(0.9375, rel=0.02)
    assert s["efficiency_low"] >= zoo_dist.NEAR_LINEAR_EFFICIENCY and s["verdict"] == "near-linear"
    manifest, trials = _dist_run(0.9)  # 1350 on 2 devices: efficiency 0.675
    s = zoo_dist.analyse(run_view(manifest, trials)).to_json()["ddp_scaling"]
    assert s["verdict"] == "below near-linear"


def test_without_data_parallel_there_is_no_claim() -> None:
    manifest, trials = _dist_run(1.25)
    trials = [dict(t, status="skipped", results={}) if t["config_id"] == "c01" and t["arm"] == "pytorch" else t
              for t in trials]
    out = zoo_dist.analyse(run_view(manifest, trials)).to_json()
    assert out["ddp_vs_dp"] is None and out["ddp_scaling"]["verdict"] == "near-linear"


def test_paired_log_ratio_by_hand() -> None:
    r = S.paired_log_ratio([2.0, 4.0, 8.0], [1.0, 2.0, 2.0])  # log ratios: ln2, ln2, ln4
    m = (2 * math.log(2) + math.log(4)) / 3
    sd = math.sqrt(sum((v - m) ** 2 for v in (math.log(2), math.log(2), math.log(4))) / 2)
    assert r.ratio == pytest.approx(math.exp(m)) and r.df == 2
    q = 4.302652729911275  # t(0.975, 2)
    assert (r.low, r.high) == pytest.approx((math.exp(m - q * sd / math.sqrt(3)), math.exp(m + q * sd / math.sqrt(3))))
    assert S.paired_log_ratio([2.0], [1.0]).reason and S.paired_log_ratio([2.0, 4.0], [1.0, 2.0]).reason


def test_q4_trend_rows_reach_the_report_power_section() -> None:
    """The report's power section shows Q4 as tested (the trend per framework), not only the per-curve table."""
    report = study_module("patel_models_sweep", "report")

    values, infos = _power_values({"pytorch": 3.0, "tensorflow": 0.0})
    rows = zoo.power_trend(values, infos, ["tensorflow", "pytorch"], "gpu_phase_power_w", 0.05)
    d = {"arms": ["tensorflow", "pytorch"], "param_pairs": [], "ratios": [], "curves": [], "decrease_summary": {},
         "power_measured": True, "power_source": "energy counter / phase duration", "power_trend": rows, "alpha": 0.05,
         "cells": [], "missing": []}
    (power,) = [s for s in study_sections(report, {"zoo": d}) if s["id"] == "zoo-power"]
    (table,) = [t for t in power["tables"] if t["caption"].startswith("Q4")]
    by = {r[0]: r for r in table["rows"]}
    assert by["pytorch"][7] == "power rises with batch size" and by["pytorch"][2] == 30 and by["pytorch"][3] == 6
    assert by["tensorflow"][7].startswith("no monotone trend detected")
