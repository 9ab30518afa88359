"""Telemetry hypotheses are tested only where the telemetry can resolve the phase (issue 25 item 4), and Holm
runs within the families the spec states (issue 25 item 1: DLBench's primary and secondary hypotheses)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from kit.analysis.hypotheses import hypothesis_rows as _hypotheses
from kit.analysis_rows import Disturbance

ARMS = ["tensorflow", "pytorch"]


def _values(metrics: dict[tuple[str, str], tuple[float, float]], n: int = 12, seed: int = 0) -> pd.DataFrame:
    """(metric, phase) -> (tensorflow level, pytorch level): n blocks of both arms with 2 % noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for (metric, phase), levels in metrics.items():
        for block in range(n):
            for arm, level in zip(ARMS, levels, strict=True):
                rows.append({"trial_id": f"{arm}-{block}", "arm": arm, "framework": arm, "config_id": "c00",
                             "block": block, "repetition": block, "position": 0, "warmup": False, "status": "ok",
                             "phase": phase, "metric": metric, "value": level * (1 + 0.02 * rng.standard_normal()),
                             "unit": "", "n_samples": 5})
    return pd.DataFrame(rows)


def _spec(hyps: list[dict[str, Any]], period_s: float = 0.1) -> dict[str, Any]:
    return {"design": {"alpha": 0.05}, "telemetry": {"period_s": period_s, "collectors": ["cpu"]},
            "hypotheses": [{"question": "q", "h0": "h0", "h1": "h1", **h} for h in hyps]}


def test_a_phase_of_0_4_sampling_periods_makes_its_telemetry_hypothesis_not_testable() -> None:
    """LeNet's TensorFlow inference lasted 0.41 periods: its CPU utilisation is mostly other activity."""
    values = _values({("cpu_util_pct", "train"): (50.0, 60.0), ("cpu_util_pct", "infer"): (50.0, 60.0),
                      ("time_s", "infer"): (0.041, 0.05)})
    durations = {("tensorflow", "train"): 5.0, ("pytorch", "train"): 5.0,
                 ("tensorflow", "infer"): 0.041, ("pytorch", "infer"): 0.5}
    spec = _spec([{"id": "H5", "metric": "cpu_util_pct", "phases": ["train", "infer"]},
                  {"id": "H1", "metric": "time_s", "phases": ["infer"]}])
    rows = {(r["id"], r["phase"]): r for r in _hypotheses(spec, values, ARMS, {"c00": {}}, 0.05, values=values,
                                                          durations=durations)}
    infer = rows[("H5", "infer")]
    assert infer["decision"] == "not testable" and infer["tested"] is False
    assert "0.41 sampling periods" in infer["reason"] and "tensorflow infer" in infer["reason"]
    assert rows[("H5", "train")]["tested"]  # 50 periods: resolvable, and tested
    assert rows[("H1", "infer")]["tested"]  # time comes from the markers, not from sampling: always testable
    # the untestable row leaves the Holm family: two tests remain
    assert rows[("H5", "train")]["p_adjust"]["family_size"] == 2


def test_host_telemetry_of_a_phase_that_stayed_disturbed_is_not_testable() -> None:
    values = _values({("cpu_util_pct", "train"): (50.0, 60.0), ("time_s", "train"): (1.0, 1.2)})
    durations = {(arm, "train"): 5.0 for arm in ARMS}
    table = Disturbance.from_json({"phases": [{"arm": "pytorch", "phase": "train", "config_id": "c00", "block": b,
                                               "judged": True, "disturbed": b < 2} for b in range(12)]})
    spec = _spec([{"id": "H5", "metric": "cpu_util_pct", "phases": ["train"]},
                  {"id": "H1", "metric": "time_s", "phases": ["train"]}])
    rows = {r["id"]: r for r in _hypotheses(spec, values, ARMS, {"c00": {}}, 0.05, values=values,
                                            durations=durations, disturbance=table)}
    assert rows["H5"]["decision"] == "not testable"
    assert "2 of 12 pytorch trials stayed disturbed" in rows["H5"]["reason"]
    assert rows["H1"]["tested"]


def test_holm_runs_within_the_families_the_spec_states() -> None:
    """Two primary tests and three secondary: each family's p is adjusted by its own size only."""
    levels = {("time_s", "train"): (1.0, 1.001), ("accuracy", "infer"): (0.9, 0.9002),
              ("trial_rss_mean_bytes", "train"): (1e9, 1.0001e9), ("gpu_mem_used_bytes", "train"): (1e9, 1e9),
              ("host_mem_used_bytes", "train"): (2e9, 2e9)}
    values = _values(levels, seed=3)
    spec = _spec([{"id": "H1", "metric": "time_s", "phases": ["train"]},
                  {"id": "H2", "metric": "accuracy", "phases": ["infer"]},
                  {"id": "H3", "metric": "trial_rss_mean_bytes", "phases": ["train"], "family": "secondary"},
                  {"id": "H4", "metric": "gpu_mem_used_bytes", "phases": ["train"], "family": "secondary"},
                  {"id": "H5", "metric": "host_mem_used_bytes", "phases": ["train"], "family": "secondary"}],
                 period_s=0.01)
    durations = {(arm, ph): 5.0 for arm in ARMS for ph in ("train", "infer")}
    rows = _hypotheses(spec, values, ARMS, {"c00": {}}, 0.05, values=values, durations=durations)
    by = {r["id"]: r for r in rows}
    assert {r["p_adjust"]["family"] for r in rows} == {"primary", "secondary"}
    assert by["H1"]["p_adjust"]["family_size"] == 2 and by["H3"]["p_adjust"]["family_size"] == 3
    prim = sorted(by[h]["p"] for h in ("H1", "H2"))
    assert min(by["H1"]["p_adj"], by["H2"]["p_adj"]) == min(1.0, 2 * prim[0])  # Holm's first step at m = 2
    # the detectable change is computed at the family's level alpha/m
    assert by["H1"]["detectable"]["level"] == 0.025 and by["H3"]["detectable"]["level"] == 0.05 / 3
