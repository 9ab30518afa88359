"""Per-phase attribution, summaries and energy on synthetic long-format frames (and one live run)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kit.analysis.telemetry import (
    ENERGY_COLUMNS,
    PER_IMAGE_COLUMNS,
    SUMMARY_COLUMNS,
    THROTTLE_COLUMNS,
    attribute_phases,
    energy_per_image,
    phase_energy,
    phase_intervals,
    phase_summaries,
    phase_throttle,
    trial_interval,
)
from kit.collectors.base import SAMPLE_COLUMNS
from kit.collectors.cpu import CpuCollector
from kit.collectors.memory import MemoryCollector
from kit.errors import AnalysisError
from kit.workloads.common import Markers

T0 = 1_700_000_000.0
MARKERS = [
    {"event": "harness_start", "t": T0 - 5, "pid": 1},
    {"event": "phase_start", "phase": "warmup", "t": T0 + 0.0},
    {"event": "phase_end", "phase": "warmup", "t": T0 + 5.0},
    {"event": "phase_start", "phase": "train", "t": T0 + 10.0},
    {"event": "phase_end", "phase": "train", "t": T0 + 20.0, "images": 50_000},
    {"event": "phase_start", "phase": "infer", "t": T0 + 20.0},
    {"event": "phase_end", "phase": "infer", "t": T0 + 25.0, "images": 10_000},
    {"event": "harness_end", "t": T0 + 26, "status": "ok"},
]


def frame(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(SAMPLE_COLUMNS))


def series(source: str, device: str, metric: str, unit: str, ts: np.ndarray, values: np.ndarray) -> list[tuple]:
    return [(T0 + float(t), source, device, metric, float(v), unit) for t, v in zip(ts, values, strict=True)]


# -- intervals --------------------------------------------------------------------


def test_phase_intervals() -> None:
    iv = phase_intervals(MARKERS)
    assert iv == {"warmup": (T0, T0 + 5), "train": (T0 + 10, T0 + 20), "infer": (T0 + 20, T0 + 25)}
    assert list(iv) == ["warmup", "train", "infer"]
    assert trial_interval(iv) == (T0, T0 + 25)


def test_killed_phase_and_odd_markers() -> None:
    markers = [
        {"event": "phase_end", "phase": "infer", "t": T0 - 1},  # end without start: ignored
        {"event": "phase_start", "phase": "train", "t": T0 + 10},
        {"event": "phase_start", "phase": "warmup", "t": T0},  # out of file order: sorted by t
        {"event": "phase_end", "phase": "warmup", "t": T0 + 5},
        {"event": "phase_start", "phase": "warmup", "t": T0 + 30},  # a second run: first one kept
        {"event": "phase_end", "phase": "warmup", "t": T0 + 31},
        {"event": "oom", "phase": "train", "t": T0 + 12},
    ]
    assert phase_intervals(markers) == {"warmup": (T0, T0 + 5)}  # train started, never ended
    assert phase_intervals([]) == {} and trial_interval({}) is None


# -- attribution ------------------------------------------------------------------


def test_attribution_instant_readings_by_timestamp() -> None:
    iv = phase_intervals(MARKERS)
    ts = np.array([-1.0, 0.0, 4.99, 5.0, 7.0, 10.0, 19.99, 20.0, 25.0, 30.0])
    df = attribute_phases(frame(series("nvml", "0", "temp_c", "C", ts, ts)), iv)
    assert list(df.columns) == [*SAMPLE_COLUMNS, "phase"]
    assert list(df["phase"]) == ["idle", "warmup", "warmup", "idle", "idle", "train", "train", "infer", "idle", "idle"]


def test_attribution_interval_readings_by_midpoint() -> None:
    iv = {"train": (T0 + 10.0, T0 + 20.0)}
    ts = np.array([9.5, 10.3, 10.5, 20.1, 20.4])
    rows = series("cpu", "total", "util_pct", "%", ts, np.full(5, 50.0))
    rows += series("hwmon", "cpu", "cpu_temp_c", "C", ts, np.full(5, 50.0))
    df = attribute_phases(frame(rows[::-1]), iv)  # order of rows must not matter
    cpu = df[df["source"] == "cpu"].sort_values("t")["phase"].tolist()
    temp = df[df["source"] == "hwmon"].sort_values("t")["phase"].tolist()
    # cpu: 9.5 (first: own t) idle; (9.5, 10.3] mid 9.9 idle; (10.3, 10.5] train; (10.5, 20.1] mid 15.3 train;
    # (20.1, 20.4] idle. The temperature at 10.3 and 20.1 goes by its timestamp.
    assert cpu == ["idle", "idle", "train", "train", "idle"]
    assert temp == ["idle", "train", "train", "idle", "idle"]


def test_attribution_per_series_for_the_midpoint() -> None:
    iv = {"train": (T0 + 10.0, T0 + 20.0)}
    rows = series("cpu", "cpu0", "util_pct", "%", np.array([0.0, 10.2]), np.zeros(2))
    rows += series("cpu", "cpu1", "util_pct", "%", np.array([10.0, 10.2]), np.zeros(2))
    df = attribute_phases(frame(rows), iv)
    # cpu0's second window is (0, 10.2] (mid 5.1, idle); cpu1's is (10.0, 10.2] (train)
    assert df.set_index(["device", "t"]).loc[("cpu0", T0 + 10.2), "phase"] == "idle"
    assert df.set_index(["device", "t"]).loc[("cpu1", T0 + 10.2), "phase"] == "train"


def test_empty_and_bad_input() -> None:
    empty = frame([])
    assert list(attribute_phases(empty, {}).columns) == [*SAMPLE_COLUMNS, "phase"]
    assert list(phase_summaries(empty, {}).columns) == list(SUMMARY_COLUMNS)
    assert list(phase_energy(empty, {}).columns) == list(ENERGY_COLUMNS)
    assert list(phase_throttle(empty, {}).columns) == list(THROTTLE_COLUMNS)
    assert list(energy_per_image(phase_energy(empty, {}), []).columns) == list(PER_IMAGE_COLUMNS)
    with pytest.raises(AnalysisError, match="value"):
        attribute_phases(pd.DataFrame({"t": [1.0], "source": ["cpu"]}), {})


# -- summaries --------------------------------------------------------------------


def test_phase_summaries() -> None:
    iv = phase_intervals(MARKERS)
    ts = np.arange(-2.0, 27.0, 0.5)
    util = np.where((ts >= 10) & (ts < 20), 90.0, 10.0)
    rows = series("nvml", "0", "gpu_util_pct", "%", ts, util)
    rows += series("nvml", "0", "mem_used_bytes", "B", ts, ts * 1e9)
    rows += series("nvml", "0", "energy_j", "J", ts, ts * 100)  # a counter: not summarised
    rows += series("nvml", "0", "throttle_reasons", "bitmask", ts, np.full(len(ts), 4.0))
    out = phase_summaries(frame(rows), iv)
    assert list(out.columns) == list(SUMMARY_COLUMNS)
    assert set(out["metric"]) == {"gpu_util_pct", "mem_used_bytes"}
    assert list(dict.fromkeys(out["phase"])) == ["warmup", "train", "infer", "idle", "trial"]
    s = out.set_index(["phase", "metric"])
    assert s.loc[("train", "gpu_util_pct"), "mean"] == 90.0 and s.loc[("train", "gpu_util_pct"), "n"] == 20
    assert s.loc[("warmup", "gpu_util_pct"), "max"] == 10.0
    assert s.loc[("idle", "gpu_util_pct"), "n"] == 4 + 10 + 4  # before, between warmup and train, after
    assert s.loc[("trial", "gpu_util_pct"), "n"] == 50  # T0 .. T0+25, gaps between phases included
    assert s.loc[("trial", "mem_used_bytes"), "max"] == pytest.approx(24.5e9)  # the GPU memory peak per trial
    assert s.loc[("trial", "mem_used_bytes"), "unit"] == "B"


# -- energy -----------------------------------------------------------------------


def test_counter_energy_interpolates_at_the_boundaries() -> None:
    iv = {"train": (T0 + 10.05, T0 + 19.97)}  # boundaries between samples
    ts = np.arange(0.0, 30.0, 0.1)
    rows = series("nvml", "0", "energy_j", "J", ts, 1e6 + 250.0 * ts)  # 250 W, counter since driver load
    rows += series("nvml", "0", "power_w", "W", ts, np.full(len(ts), 999.0))  # ignored: the counter wins
    rows += series("rapl", "package-0", "energy_j", "J", ts, 80.0 * ts)
    out = phase_energy(frame(rows), iv)
    assert list(out.columns) == list(ENERGY_COLUMNS)
    e = out.set_index(["phase", "domain"])
    assert e.loc[("train", "gpu0"), "energy_j"] == pytest.approx(250.0 * 9.92)
    assert e.loc[("train", "gpu0"), "method"] == "nvml_energy_counter"
    assert e.loc[("train", "rapl:package-0"), "energy_j"] == pytest.approx(80.0 * 9.92)
    assert e.loc[("train", "rapl:package-0"), "method"] == "rapl_counter"
    assert e.loc[("train", "gpu0"), "n"] == 99
    assert e.loc[("trial", "gpu0"), "energy_j"] == pytest.approx(250.0 * 9.92)


def test_power_integral_fallback_is_flagged() -> None:
    iv = phase_intervals(MARKERS)
    ts = np.round(np.arange(-1.0, 27.0, 0.1), 6)
    power = np.where(ts < 9.95, 100.0, 300.0)  # steps up between the samples at 9.9 and 10.0
    out = phase_energy(frame(series("nvml", "1", "power_w", "W", ts, power)), iv)
    e = out.set_index(["phase", "domain"])
    assert set(out["method"]) == {"nvml_power_integral"}
    assert all("less accurate" in n for n in out["note"])
    assert e.loc[("train", "gpu1"), "energy_j"] == pytest.approx(3000.0, rel=1e-6)
    assert e.loc[("warmup", "gpu1"), "energy_j"] == pytest.approx(500.0, rel=1e-6)
    # trial: 9.9 s at 100 W, the 0.1 s ramp (200 W on average in the trapezoid), 15 s at 300 W
    assert e.loc[("trial", "gpu1"), "energy_j"] == pytest.approx(990.0 + 20.0 + 4500.0, rel=1e-6)
    assert list(out["phase"]) == ["warmup", "train", "infer", "trial"]


def test_partial_coverage_and_counter_reset_give_nan() -> None:
    iv = {"warmup": (T0 + 0.0, T0 + 5.0), "train": (T0 + 10.0, T0 + 20.0)}
    ts = np.arange(2.0, 30.0, 0.5)  # the GPU collector started late: warm-up only partly covered
    counter = 100.0 * ts
    counter[ts >= 15] -= 1000.0  # and the counter jumped back during train
    out = phase_energy(frame(series("nvml", "0", "energy_j", "J", ts, counter)), iv)
    e = out.set_index(["phase", "domain"])
    assert np.isnan(e.loc[("warmup", "gpu0"), "energy_j"])
    assert "cover only 3.000 of 5.000 s" in e.loc[("warmup", "gpu0"), "note"]
    assert "partial 300.000 J" in e.loc[("warmup", "gpu0"), "note"]
    assert np.isnan(e.loc[("train", "gpu0"), "energy_j"]) and "backwards" in e.loc[("train", "gpu0"), "note"]


def test_energy_per_image() -> None:
    iv = phase_intervals(MARKERS)
    ts = np.arange(-1.0, 27.0, 0.1)
    energy = phase_energy(frame(series("nvml", "0", "energy_j", "J", ts, 200.0 * ts)), iv)
    per = energy_per_image(energy, MARKERS).set_index("phase")
    assert list(energy_per_image(energy, MARKERS).columns) == list(PER_IMAGE_COLUMNS)
    assert per.loc["train", "images"] == 50_000
    assert per.loc["train", "energy_per_image_j"] == pytest.approx(2000.0 / 50_000)
    assert per.loc["infer", "energy_per_image_j"] == pytest.approx(1000.0 / 10_000)
    assert np.isnan(per.loc["warmup", "energy_per_image_j"]) and np.isnan(per.loc["trial", "energy_per_image_j"])


def test_phase_throttle() -> None:
    iv = phase_intervals(MARKERS)
    ts = np.arange(10.0, 20.0, 1.0)
    bits = np.array([0x1, 0x1, 0x4, 0x4, 0x1, 0x40, 0x2, 0x1, 0x1, 0x1], float)  # 3 of 10 limited
    out = phase_throttle(frame(series("nvml", "0", "throttle_reasons", "bitmask", ts, bits)), iv)
    t = out.set_index(["phase", "device"])
    assert t.loc[("train", "0"), "n"] == 10
    assert t.loc[("train", "0"), "reasons_any"] == 0x1 | 0x2 | 0x4 | 0x40
    assert t.loc[("train", "0"), "frac_limited"] == pytest.approx(0.3)
    assert list(out["phase"]) == ["train", "trial"]


# -- end to end -------------------------------------------------------------------


def test_live_collectors_and_markers(tmp_path: Path) -> None:
    markers_file = tmp_path / "markers.jsonl"
    m = Markers(markers_file)
    with CpuCollector(period_s=0.02) as cpu, MemoryCollector(period_s=0.02) as mem:
        time.sleep(0.1)
        for phase in ("warmup", "train", "infer"):
            m.start(phase)
            time.sleep(0.3)
            m.end(phase, images=10)
        time.sleep(0.1)
    m.close()
    markers = [json.loads(line) for line in markers_file.read_text().splitlines()]
    samples = pd.DataFrame([*cpu.take_rows(), *mem.take_rows()], columns=list(SAMPLE_COLUMNS))
    iv = phase_intervals(markers)
    out = phase_summaries(samples, iv)
    n = out[(out["metric"] == "used_bytes")].set_index("phase")["n"]
    assert all(n[p] >= 3 for p in ("warmup", "train", "infer", "idle", "trial"))


def test_interval_readings_are_overlap_weighted_per_phase() -> None:
    # cpu util over (0,1]=10 %, (1,2]=50 %, (2,3]=90 %; a 0.2 s phase inside the second window and a
    # phase from 1.5 to 2.5 (half of window 2, half of window 3)
    rows = series("cpu", "total", "util_pct", "%", np.array([0.0, 1.0, 2.0, 3.0]), np.array([0.0, 10.0, 50.0, 90.0]))
    intervals = {"infer": (T0 + 1.4, T0 + 1.6), "train": (T0 + 1.5, T0 + 2.5)}
    s = phase_summaries(frame(rows), {"infer": intervals["infer"]})
    infer = s[(s["phase"] == "infer") & (s["metric"] == "util_pct")].iloc[0]
    assert infer["n"] == 1 and infer["mean"] == pytest.approx(50.0)
    s = phase_summaries(frame(rows), {"train": intervals["train"]})
    train = s[(s["phase"] == "train") & (s["metric"] == "util_pct")].iloc[0]
    assert train["n"] == 2 and train["mean"] == pytest.approx(70.0)
    assert train["max"] == 90.0 and train["min"] == 50.0
