"""Telemetry threats to validity on fake data: start temperatures, throttling, foreign load,
unlocked GPU clocks, unavailable sensors. NVML readings come from the real collector over the
autospec'd fake NVML, so the facts are computed from rows in the format a real run stores."""

from __future__ import annotations

import pandas as pd
import pytest

from kit.analysis.validity import Ctx, assess
from kit.analysis.validity_telemetry import (
    baseline_facts,
    foreign_load,
    gpu_clocks,
    reason_names,
    sensors,
    start_temperature,
    throttling,
    trial_facts,
)
from kit.analysis_record import AnalysisSoFar
from kit.collectors.base import Row, TrialTarget
from kit.collectors.nvml import NvmlCollector
from kit.store import rows_to_frame
from tests._fake_nvml import FakeGpu, FakeNvml, install
from tests._runs import bare_manifest, records_of

ARMS = ("tensorflow", "pytorch")


def markers(t0: float) -> list[dict]:
    return [{"event": "phase_start", "phase": "train", "t": t0}, {"event": "phase_end", "phase": "train", "t": t0 + 10},
            {"event": "phase_start", "phase": "infer", "t": t0 + 10}, {"event": "phase_end", "phase": "infer", "t": t0 + 12}]


def nvml_rows(monkeypatch: pytest.MonkeyPatch, gpus: list[FakeGpu], times: list[float]) -> list[Row]:
    """One real collector reading per (GPU state, time), re-stamped at ``times``."""
    out: list[Row] = []
    for gpu, t in zip(gpus, times, strict=True):
        install(monkeypatch, FakeNvml([gpu]))
        c = NvmlCollector(target=TrialTarget())
        c._open()
        out += [r._replace(t=t) for r in c.read()]
        c._close()
    return out


def record(i: int, arm: str, t0: float, start_temps: dict[str, float] | None = None, reached: bool = True) -> dict:
    return {"trial_id": f"t{i}", "arm": arm, "position": i, "warmup": False, "status": "ok", "markers": markers(t0),
            "cooldown": {"start_temps": start_temps or {}, "reached": reached, "waited_s": 1.0}}


def ctx(trials: list[dict], facts: list[dict] | None = None, baseline: dict | None = None,
        collectors: list[dict] | None = None) -> Ctx:
    manifest = {"host": {"cpu_logical": 4}, "collectors": collectors or []}
    return Ctx(bare_manifest(**manifest), records_of(trials), pd.DataFrame(), {"trial_telemetry": facts or [],
                                                                            "baseline": baseline or {}})


def test_reason_bits_are_named() -> None:
    assert reason_names(0x1 | 0x20 | 0x4) == ["GPU idle", "software power cap", "software thermal slowdown"]


def test_thermal_throttling_and_unlocked_clocks_from_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    trials, facts = [], []
    for i, arm in enumerate(ARMS * 3):
        t0 = 1000.0 + 100 * i
        hot = arm == "pytorch"  # pytorch trials run hot: thermal slowdown at lower clocks
        states = [FakeGpu(reasons=0x20 if hot else 0x0, sm_mhz=1400 + 10 * k if hot else 1980) for k in range(4)]
        rows = nvml_rows(monkeypatch, states, [t0 + 1, t0 + 4, t0 + 8, t0 + 11])
        rec = record(i, arm, t0)
        trials.append(rec)
        facts.append(trial_facts(records_of([rec])[0], rows_to_frame(rows)))
    assert facts[1]["throttle_frac_limited"] == 1.0 and facts[0]["throttle_frac_limited"] == 0.0
    assert facts[1]["sm_clock_min_mhz"] == 1400 and facts[0]["sm_clock_median_mhz"] == 1980
    assert facts[0]["foreign_procs_max"] == 0
    (thr,) = throttling(ctx(trials, facts))
    assert thr.status == "threat" and thr.severity == "high" and thr.category == "internal"
    assert thr.numbers["trials_limited"] == 3 and thr.numbers["mean_frac_limited_by_arm"] == {"pytorch": 1.0, "tensorflow": 0.0}
    assert "software thermal slowdown" in thr.evidence and thr.mitigation
    (clk,) = gpu_clocks(ctx(trials, facts))
    assert clk.status == "threat" and clk.title == "GPU clocks not locked"
    assert clk.numbers["sm_clock_min_mhz"] == 1400 and clk.numbers["sm_clock_max_mhz"] == 1980
    assert "nvidia-smi -lgc" in clk.mitigation


def test_quiet_gpu_with_locked_clocks_is_mitigated(monkeypatch: pytest.MonkeyPatch) -> None:
    trials, facts = [], []
    for i, arm in enumerate(ARMS * 2):
        t0 = 1000.0 + 100 * i
        rows = nvml_rows(monkeypatch, [FakeGpu(reasons=0x2, sm_mhz=1500)] * 3, [t0 + 1, t0 + 5, t0 + 11])
        trials.append(record(i, arm, t0))
        facts.append(trial_facts(records_of(trials[-1:])[0], rows_to_frame(rows)))
    assert [t.status for t in throttling(ctx(trials, facts))] == ["mitigated"]
    assert [t.status for t in gpu_clocks(ctx(trials, facts))] == ["mitigated"]


def test_foreign_gpu_processes_are_a_threat(monkeypatch: pytest.MonkeyPatch) -> None:
    t0 = 1000.0
    rows = nvml_rows(monkeypatch, [FakeGpu(procs=[(2**22 + 5, 2**30)])] * 2, [t0 + 1, t0 + 9])
    rec = record(0, "pytorch", t0)
    facts = [trial_facts(records_of([rec])[0], rows_to_frame(rows))]
    assert facts[0]["foreign_procs_max"] == 1
    gpu = [t for t in foreign_load(ctx([rec], facts, {"recorded": False})) if t.rule == "foreign_gpu"]
    assert gpu and gpu[0].severity == "high" and gpu[0].numbers["trial_ids"] == ["t0"]


def cpu_rows(util: float, load1: float) -> pd.DataFrame:
    return rows_to_frame([Row(float(t), "cpu", "total", m, v, u) for t in range(5)
                          for m, v, u in (("util_pct", util, "%"), ("load1", load1, "1"))])


def test_busy_host_before_trials() -> None:
    busy = baseline_facts(cpu_rows(55.0, 3.5))
    assert busy["cpu_util_mean_pct"] == 55.0 and busy["load1_median"] == 3.5
    (t,) = foreign_load(ctx([], [], busy))
    assert t.rule == "foreign_cpu" and t.status == "threat" and "55.0 %" in t.evidence
    (idle,) = foreign_load(ctx([], [], baseline_facts(cpu_rows(2.0, 0.1))))
    assert idle.status == "mitigated"
    # right after the kit's own previous run the 1-minute load average is still high: not foreign load
    (after_run,) = foreign_load(ctx([], [], baseline_facts(cpu_rows(0.2, 1.1))))
    assert after_run.status == "mitigated" and "load average 1.10" in after_run.evidence
    (unknown,) = foreign_load(ctx([], [], baseline_facts(None)))
    assert unknown.status == "threat" and unknown.severity == "low" and "baseline_s" in unknown.mitigation


def test_a_busy_host_is_no_threat_to_trials_pinned_away_from_the_load() -> None:
    """Issue 43: a hog on the kit's CPU makes the baseline busy host-wide; a pinned run whose trials' CPUs were quiet
    says so (mitigated), and one busy there too keeps the threat."""
    busy = baseline_facts(cpu_rows(55.0, 1.0))

    def with_load(load: dict) -> Ctx:
        return Ctx(bare_manifest(host={"cpu_logical": 2}, baseline={"load": load}), records_of([]), pd.DataFrame(),
                   {"trial_telemetry": [], "baseline": busy})

    (t,) = foreign_load(with_load({"foreign_cpu": 0.02, "cpus": 1, "on_cpus": [1], "busy": False}))
    assert t.status == "mitigated" and t.severity == "info" and "on the trials' CPU(s) 1" in t.evidence, t
    assert "0.02 CPUs busy" in t.evidence and t.numbers["on_cpus"] == "1"
    (there,) = foreign_load(with_load({"foreign_cpu": 0.9, "cpus": 1, "on_cpus": [1], "busy": True}))
    assert there.status == "threat" and there.title == "Host busy before the trials"
    for crafted in ({"foreign_cpu": "0", "on_cpus": [1], "busy": False}, {"foreign_cpu": 0.0, "on_cpus": ["1"],
                    "busy": False}, {"foreign_cpu": float("nan"), "on_cpus": [1], "busy": False}, [], None,
                    {"foreign_cpu": 0.0, "on_cpus": [], "busy": False}):
        (t,) = foreign_load(with_load(crafted))  # type: ignore[arg-type]
        assert t.status == "threat", crafted  # not recorded as pinned and quiet: the host-wide threat stands


def test_late_samples_are_a_threat_to_the_telemetry_only() -> None:
    from kit.analysis.validity_telemetry import late_telemetry

    def rec(i: int, late: int | None, warmup: bool = False) -> dict:
        phase = {"phase": "train", "duration_s": 2.0, "judged": True, "foreign_cpu": 0.0, "disturbed": False,
                 "causes": [], "late_samples": late}
        if late is None:
            del phase["late_samples"]  # a record made before issue 43
        return {**record(i, "pytorch", 0.0), "warmup": warmup, "disturbance": {"phases": {"train": phase}}}

    assert late_telemetry(ctx([rec(0, 0), rec(1, None)])) == []
    (t,) = late_telemetry(ctx([rec(0, 0), rec(1, 3), rec(2, 1), rec(3, 9, warmup=True), rec(4, None)]))
    assert t.rule == "late_telemetry" and t.severity == "low" and t.status == "threat"
    assert t.numbers == {"phases": 3, "late_phases": 2, "gaps": 4, "trial_ids": ["t1", "t2"]}
    assert "not affected" in t.evidence and "cpuset" in t.mitigation
    (crafted,) = late_telemetry(ctx([rec(0, 2), {**rec(1, 0), "disturbance": {"phases": {"x": "y"}}},
                                     {**rec(2, 0), "disturbance": {"phases": {"train": {"late_samples": -4}}}},
                                     {**rec(3, 0), "disturbance": {"phases": {"train": {"late_samples": True}}}}]))
    assert crafted.numbers["late_phases"] == 1 and crafted.numbers["phases"] == 1


def test_start_temperature_gap_between_frameworks() -> None:
    trials = [record(i, arm, 0.0, {"gpu0": (48.0 if arm == "pytorch" else 41.0) + 0.1 * i, "cpu": 40.0},
                     reached=arm != "pytorch") for i, arm in enumerate(ARMS * 5)]
    (t,) = start_temperature(ctx(trials))
    assert t.status == "threat" and t.severity == "high" and t.category == "internal"
    assert t.numbers["gap_c"]["gpu0"] == pytest.approx(7.1, abs=0.01)  # medians 48.5 vs 41.4
    assert t.numbers["gap_c"]["cpu"] == 0
    assert t.numbers["cooldown_not_reached"] == 5
    even = [record(i, arm, 0.0, {"gpu0": 41.0 + 0.1 * i}) for i, arm in enumerate(ARMS * 5)]
    (ok,) = start_temperature(ctx(even))
    assert ok.status == "mitigated"
    assert start_temperature(ctx([record(0, "pytorch", 0.0)])) == []  # no sensor: nothing to compare


def test_unavailable_sensors_are_listed() -> None:
    trials = [{**record(0, "pytorch", 0.0), "cooldown": {"note": "no temperature sensor at baseline"}}]
    found = sensors(ctx(trials, collectors=[{"name": "nvml", "ok": False, "detail": "NVML library not found"},
                                            {"name": "cpu", "ok": True, "detail": "ok"}]))
    assert [t.title for t in found] == ["Sensors unavailable", "No temperature control"]
    assert found[0].numbers == {"unavailable": ["nvml"]} and "NVML library not found" in found[0].evidence


def test_assess_runs_the_telemetry_rules() -> None:
    manifest = {"host": {"cpu_logical": 2}, "collectors": [], "plan": {"blocking": "interleaved", "seed": 1, "configs": {"c": {}}},
                "spec": {"design": {"warmup_repetitions": 1}, "workload": {}, "hypotheses": []}, "profile": "paper"}
    values = pd.DataFrame(columns=["metric", "phase", "arm", "position", "value", "warmup", "status"])
    found = assess(bare_manifest(**manifest), [], values, AnalysisSoFar(baseline={"recorded": False}))
    assert "foreign_cpu" in {t["rule"] for t in found}


def test_a_gpu_idle_through_the_timed_phases_is_a_threat() -> None:
    """LeNet-5 on an H100 (the GPU evidence run): 1-20 % utilisation in training. Busy GPUs give no threat."""
    from kit.analysis.validity_telemetry import gpu_underused

    def values(util: dict[tuple[str, str], list[float]]) -> pd.DataFrame:
        return pd.DataFrame([{"trial_id": f"{a}{i}", "arm": a, "phase": p, "metric": "gpu_util_pct", "value": u,
                              "warmup": False, "status": "ok"}
                             for (a, p), us in util.items() for i, u in enumerate(us)])

    idle = values({("pytorch", "train"): [9.0, 1.0, 14.0], ("pytorch", "infer"): [80.0, 85.0, 90.0],
                   ("tensorflow", "train"): [60.0, 70.0, 65.0]})
    (thr,) = gpu_underused(Ctx(bare_manifest(), [], idle, {}))
    assert thr.rule == "gpu_underused" and thr.numbers["median_util_pct"] == {"pytorch train": 9.0}
    busy = values({("pytorch", "train"): [95.0, 97.0], ("tensorflow", "train"): [90.0, 99.0]})
    assert gpu_underused(Ctx(bare_manifest(), [], busy, {})) == []
    cpu_only = values({}).reindex(columns=["trial_id", "arm", "phase", "metric", "value", "warmup", "status"])
    assert gpu_underused(Ctx(bare_manifest(), [], cpu_only, {})) == []
