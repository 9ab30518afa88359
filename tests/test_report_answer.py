"""The answer first (issue 27, item 2): each decided comparison in one sentence with r >= 1 and the faster
side named, the warnings that qualify it, one line for what was not testable; the same for `kit compare`.
Threats one row per fact, ranked by their effect on this run; the design table agrees with the host."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from kit.analysis.design import on_this_host
from kit.analysis_record import Analysis
from kit.analysis_rows import Design, HypothesisResult
from kit.compare_records import CompareRow, Comparison
from kit.fmt import fmt_bytes, fmt_counts, fmt_value
from kit.report.answer import answer, compare_answer, compare_sentence, sentence, untestable_line
from kit.report.threats import ranked, shown

GOLDEN = json.loads((Path(__file__).parent / "data" / "golden" / "analysis.json").read_text())


def _analysis(obj: dict[str, Any]) -> Analysis:
    return Analysis.from_json(obj, "test")


def _hyp(ratio: float, low: float, high: float, metric: str = "time_s", phase: str = "train",
         rejected: bool = True, **kw: Any) -> HypothesisResult:
    return HypothesisResult.from_json({"id": "H1", "metric": metric, "metric_tested": metric, "label": metric, "unit": "s", "phase": phase,
            "arm_a": "tensorflow", "arm_b": "pytorch", "n_pairs": 12, "tested": True, "rejected": rejected,
            "comparison": {"ratio": {"estimate": ratio, "low": low, "high": high},
                           "shift": kw.pop("shift", None), "a": {"median": 1.0}, "b": {"median": 1.0}},
            "detectable": kw.pop("detectable", {"mde": 0.065, "decidable": True}), **kw})


ANALYSIS = _analysis({**GOLDEN, "profile": "quick", "devices": {"arms": [{"names": {"cpu": 12}}], "kinds": ["cpu"]}})


def test_a_faster_arm_a_is_named_with_the_inverted_ratio_and_interval() -> None:
    # ratio tensorflow/pytorch 0.78 [0.74, 0.82]: TensorFlow is 1/0.78 = 1.28x faster, CI [1/0.82, 1/0.74]
    s = sentence(_hyp(0.78, 0.74, 0.82), ANALYSIS)
    assert s == ("TensorFlow was 1.28× faster than PyTorch in training [95 % CI 1.22–1.35], "
                 "decided (n = 12 pairs, quick profile, CPU).")
    s = sentence(_hyp(1.5, 1.4, 1.6, phase="infer"), ANALYSIS)
    assert s is not None and s.startswith("PyTorch was 1.50× faster than TensorFlow in inference [95 % CI 1.40–1.60]")


def test_non_time_metrics_read_sensibly() -> None:
    cpu = sentence(_hyp(1.4, 1.3, 1.5, metric="trial_cpu_util_pct"), ANALYSIS)
    assert cpu is not None and cpu.startswith("TensorFlow used 1.40× more CPU than PyTorch in training")
    thr = sentence(_hyp(0.5, 0.45, 0.55, metric="throughput_ips"), ANALYSIS)
    assert thr is not None and thr.startswith("PyTorch was 2.00× faster than TensorFlow in training (throughput)")
    acc = sentence(_hyp(0.99, 0.98, 1.0, metric="accuracy", phase="infer",
                        shift={"estimate": -0.004, "low": -0.006, "high": -0.002}), ANALYSIS)
    assert acc is not None and acc.startswith("PyTorch's test accuracy was 0.40 percentage points higher than "
                                              "TensorFlow's in inference [95 % CI 0.20–0.60]")
    temp = sentence(_hyp(1.1, 1.0, 1.2, metric="gpu_temp_c", shift={"estimate": 3.1, "low": 2.0, "high": 4.0}),
                    ANALYSIS)
    assert temp is not None and "GPU temperature was 3.1 °C higher with TensorFlow than with PyTorch" in temp


def test_open_and_untested_hypotheses() -> None:
    (h,) = [h for h in GOLDEN["hypotheses"] if h["phase"] == "train"]
    s = sentence(HypothesisResult.from_json(h), _analysis(GOLDEN))
    assert s is not None and s.startswith("No difference shown in execution time in training")
    assert f"a difference under {h['detectable']['mde']:.1%} could have gone unseen" in s
    a = copy.deepcopy(GOLDEN)
    a["measured"] = [{"metric": "gpu_temp_c", "measured": False, "reason": "nvml: NVML: not found (fix: install it)"},
                     {"metric": "cpu_temp_c", "measured": False, "reason": "hwmon: no sensor (fix: modprobe)"}]
    for i, (m, ph) in enumerate([("gpu_temp_c", "train"), ("gpu_temp_c", "infer"), ("cpu_temp_c", "train")]):
        a["hypotheses"].append({"id": f"H{i + 2 if m == 'gpu_temp_c' else 9}", "metric": m, "phase": ph,
                                "tested": False, "reason": f"no paired measurements of {m}"})
    line = untestable_line(_analysis(a))
    # one line for all, reasons grouped, said once (the fix left to the threats table), ids listed once
    assert line == "Not testable here: GPU temperature (H2, H3): nvml: not found; CPU temperature (H9): hwmon: no sensor."
    ans = answer(_analysis(a))
    assert ans["untestable"] == line and ans["decided"] == [] and len(ans["open"]) == 2
    assert ans["headline"].startswith("No comparison decided: 2 tested")


def test_warnings_qualify_the_answer_most_consequential_first() -> None:
    ans = answer(_analysis(GOLDEN))
    # the golden run's idle baseline saw load 5.84 on 2 CPUs: a slowdown that outranks a 6 % CV
    assert ans["warnings"][0].startswith("Host busy before the trials (high): ") and "3.4× slower" in ans["warnings"][0]
    assert any(w.startswith("Unstable timing (medium)") for w in ans["warnings"])
    quick = {**copy.deepcopy(GOLDEN), "profile": "quick"}
    assert answer(_analysis(quick))["warnings"][0].startswith("QUICK profile, not the published protocol; 10 pairs")


def test_a_pinned_runs_busy_baseline_is_estimated_on_its_own_cpus() -> None:
    """Issue 43: one foreign CPU on the one CPU a pinned trial has halves it (2x), whatever the host-wide load says."""
    a = copy.deepcopy(GOLDEN)
    row = next(t for t in a["validity"] if t["title"] == "Host busy before the trials")
    row["numbers"].update(on_cpus="1", on_cpus_count=1, foreign_cpu_on_cpus=1.0)
    top = ranked(_analysis(a))[0]
    assert top["title"] == "Host busy before the trials" and "1/2.0 of them: up to 2.0× slower" in top["effect_text"]


def test_threats_one_row_per_fact_ranked_by_effect() -> None:
    rows = ranked(_analysis(GOLDEN))
    titles = [t["title"] for t in rows]
    assert titles.count("Unstable timing") == 1 and not any(t.startswith("Unstable timing:") for t in titles)
    assert rows[0]["title"] == "Host busy before the trials" and rows[0]["severity"] == "high"
    cv = next(t for t in rows if t["title"] == "Unstable timing")
    assert cv["severity"] == "medium" and abs(cv["effect"] - 0.0616) < 1e-3
    assert [t["status"] == "mitigated" for t in rows] == sorted(t["status"] == "mitigated" for t in rows)
    sensors = [{"rule": "sensor", "category": "construct", "severity": "medium", "title": f"Not measured: {x}",
                "evidence": "…", "mitigation": "…", "status": "threat"} for x in ("CPU temperature", "GPU temperature")]
    sensors += [{"rule": "sensors", "category": "internal", "severity": "low", "title": t, "evidence": "e",
                 "mitigation": "m", "status": "threat", "numbers": {"trials_without_sensor": 3}}
                for t in ("Sensors unavailable", "No temperature control")]
    a = {**GOLDEN, "profile": "quick", "validity": GOLDEN["validity"] + sensors + [
        {"rule": "profile", "category": "construct", "severity": "high", "title": "Not the paper's protocol",
         "evidence": "quick", "mitigation": "paper", "status": "threat"}]}
    rows = shown(_analysis(a))
    merged = [t for t in rows if t["title"] == "Sensors missing on this host"]
    assert len(merged) == 1 and not any(t["rule"] in ("sensor",) or t["title"].startswith("Not measured") for t in rows)
    assert "CPU temperature, GPU temperature" in merged[0]["evidence"]
    # the reduced profile and its small n are the banner's, not rows
    assert not any(t["rule"] in ("profile", "small_n") for t in rows)


def test_the_design_table_agrees_with_what_the_host_measured() -> None:
    design = {"rows": [{"id": "H1", "phase": "train", "decidable": True, "reason": None},
                       {"id": "H2", "phase": "train", "decidable": True, "reason": None}], "all_decidable": True}
    hyps = [{"id": "H1", "phase": "train", "tested": True},
            {"id": "H2", "phase": "train", "tested": False, "reason": "no paired measurements of GPU temperature"}]
    given = Design.from_json(design)
    out = on_this_host(given, [HypothesisResult.from_json(h) for h in hyps]).to_json()
    assert [r["decidable"] for r in out["rows"]] == [True, False] and not out["all_decidable"]
    assert out["rows"][1]["by_design"] and "not on this host" in out["rows"][1]["reason"]
    assert given.rows[1].decidable  # pure: the input is unchanged


def _cmp(**kw: Any) -> CompareRow:
    """A compared row with the fields the sentences read (the rest as a row without its test would have them)."""
    base: dict[str, Any] = {"unit": "s", "n_a": 12, "n_b": 12, "median_a": 1.0, "median_b": 1.0,
                            "ratio_estimator": "hl", "ratio_of_medians": None, "test": None, "p": None,
                            "cliffs_delta": None, "magnitude": None, "reason": None, "paired": True}
    return CompareRow(**{**base, **kw})


def test_compare_sentences() -> None:
    row = _cmp(config="default", metric="time_s", phase="train", arm="pytorch", ratio=1.31,
               ratio_low=1.22, ratio_high=1.40, verdict="regression", lower_is_better=True)
    assert compare_sentence(row) == ("pytorch · time_s · train · default: B is 1.31× slower than A "
                                     "[95 % CI 1.22–1.40]: regression")
    fast = replace(row, ratio=0.8, ratio_low=0.75, ratio_high=0.85, verdict="improvement")
    assert "B is 1.25× faster than A [95 % CI 1.18–1.33]: improvement" in compare_sentence(fast)
    same = replace(row, ratio=1.01, ratio_low=0.99, ratio_high=1.03, verdict="no change")
    assert compare_sentence(same).endswith("within ±5%: no change")
    res = Comparison(rows=(same, row), threshold=0.05, alpha=0.05)
    assert {k: n for k, n in res.counts.items() if n} == {"regression": 1, "no change": 1}
    said = compare_answer(res)
    assert said["headline"].endswith("slower than A [95 % CI 1.22–1.40]: regression") and said["rest"] == "1 no change"


def test_readable_numbers() -> None:
    assert fmt_bytes(1.268e9) == "1.18 GiB" and fmt_bytes(2048) == "2 KiB" and fmt_bytes(512) == "512 B"
    assert fmt_value(1.268e9, "B") == "1.18 GiB" and fmt_value(0.0623, "s") == "0.0623"
    assert fmt_counts({"tensorflow": [61706], "pytorch": [61706]}) == "61,706 in every arm"
    assert fmt_counts({"tensorflow": [61706], "pytorch": [61802]}) == "tensorflow 61,706, pytorch 61,802"
