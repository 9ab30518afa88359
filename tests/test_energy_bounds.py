"""Energy with its sampling bound and net of idle, and the trial's own CPU utilisation from its markers
(issue 25, items 4 and 8), on constructed trial records: the numbers are known by construction."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kit.analysis.energy import (
    IdleDomain,
    baseline_host,
    idle_for,
    idle_power,
    load_idle_power,
    net_energy,
)
from kit.analysis.metrics import (
    DEFAULT_METRICS,
    METRICS,
    NVML_METRICS,
    VALUE_COLUMNS,
    trial_cpu_util,
    trial_metric_rows,
)
from kit.analysis.telemetry import ENERGY_COLUMNS, boundary_bound_j, phase_energy
from kit.store import RunDir
from tests._runs import bare_manifest_json, trial

PERIOD = 0.1
T0 = 1000.0
TRAIN = (T0 + 0.05, T0 + 2.05)  # boundaries half-way between two readings
INFER = (T0 + 2.15, T0 + 2.19)  # 0.04 s: 0.4 sampling periods


def _frame(source: str, device: str, metric: str, unit: str, t: np.ndarray, v: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"t": t, "source": source, "device": device, "metric": metric, "value": v, "unit": unit})


def _counter(watts: float, t: np.ndarray, source: str = "nvml", device: str = "0") -> pd.DataFrame:
    return _frame(source, device, "energy_j", "J", t, watts * (t - t[0]))


def _markers(cpu: dict[str, tuple[float, float]] | None) -> list[dict[str, Any]]:
    """phase_start / phase_end markers of train and infer; ``cpu``: cpu_s at start and end per phase."""
    out: list[dict[str, Any]] = []
    for phase, (a, b) in (("train", TRAIN), ("infer", INFER)):
        start: dict[str, Any] = {"event": "phase_start", "t": a, "phase": phase}
        end: dict[str, Any] = {"event": "phase_end", "t": b, "phase": phase, "duration_s": b - a}
        if cpu is not None:
            start["cpu_s"], end["cpu_s"] = cpu[phase]
        out += [start, end]
    return out


def _record(cpu: dict[str, tuple[float, float]] | None = None, **fields: Any) -> dict[str, Any]:
    return trial("r000-c00-pytorch", "pytorch", markers=_markers(cpu), **fields)


def _rows(record: dict[str, Any], samples: pd.DataFrame, idle: Any = None) -> dict[tuple[str, str], dict[str, Any]]:
    rows = trial_metric_rows(record, samples, (*DEFAULT_METRICS, *NVML_METRICS), idle=idle)
    assert all(list(r) == VALUE_COLUMNS for r in rows)
    return {(r["metric"], r["phase"]): r for r in rows}


def test_boundary_bound_is_the_energy_of_the_sampling_intervals_around_each_boundary() -> None:
    t = T0 + PERIOD * np.arange(40)
    v = 200.0 * (t - T0)
    # each boundary lies inside one 0.1 s interval at 200 W: up to 20 J can be on the wrong side, twice
    assert boundary_bound_j(t, v, *TRAIN, counter=True) == pytest.approx(40.0)
    # a boundary on a reading misattributes nothing
    assert boundary_bound_j(t, v, T0 + 0.5, T0 + 1.05, counter=True) == pytest.approx(20.0)
    # sampled power (no counter): the larger reading x the interval
    p = np.where(t < T0 + 1.0, 100.0, 300.0)
    assert boundary_bound_j(t, p, T0 + 0.05, T0 + 1.05, counter=False) == pytest.approx(10.0 + 30.0)
    # not covered at a boundary: no bound, as no energy
    assert math.isnan(boundary_bound_j(t, v, T0 - 1.0, T0 + 1.0, counter=True))


def test_phase_energy_carries_the_bound_per_domain() -> None:
    t = T0 + PERIOD * np.arange(40)
    out = phase_energy(pd.concat([_counter(200.0, t), _counter(30.0, t, "rapl", "package-0")]),
                       {"train": TRAIN, "infer": INFER})
    assert list(out.columns) == list(ENERGY_COLUMNS)
    by = out.set_index(["phase", "domain"])
    assert by.loc[("train", "gpu0"), "energy_j"] == pytest.approx(400.0)
    assert by.loc[("train", "gpu0"), "bound_j"] == pytest.approx(40.0)
    assert by.loc[("train", "rapl:package-0"), "bound_j"] == pytest.approx(6.0)
    # the 0.04 s phase lies inside one interval: its 8 J could all belong to either side, twice over
    assert by.loc[("infer", "gpu0"), "energy_j"] == pytest.approx(8.0)
    assert by.loc[("infer", "gpu0"), "bound_j"] == pytest.approx(40.0)


def test_gross_net_and_bound_in_the_value_table() -> None:
    """200 W on the GPU, 30 W on the CPU package; idle 50 W and 10 W: net = gross - idle x duration."""
    t = T0 + PERIOD * np.arange(40)
    samples = pd.concat([_counter(200.0, t), _counter(30.0, t, "rapl", "package-0")])
    idle = {None: {"gpu0": IdleDomain("gpu0", 50.0, 10.0, 101, "test"),
                   "rapl:package-0": IdleDomain("rapl:package-0", 10.0, 10.0, 101, "test")}}
    by = _rows(_record(gpus=[{"index": 0}]), samples, idle)
    gross, net = by[("gpu_energy_j", "train")], by[("gpu_energy_net_j", "train")]
    assert gross["value"] == pytest.approx(400.0) and gross["bound"] == pytest.approx(40.0)
    assert net["value"] == pytest.approx(400.0 - 50.0 * 2.0) and net["bound"] == pytest.approx(40.0)
    assert by[("cpu_energy_net_j", "train")]["value"] == pytest.approx(60.0 - 20.0)
    assert by[("gpu_power_phase_w", "train")]["value"] == pytest.approx(200.0)
    assert by[("gpu_power_phase_w", "train")]["bound"] == pytest.approx(20.0)  # 40 J over 2 s
    assert by[("time_s", "train")]["bound"] is None  # no bound where none is known
    # without an idle baseline: gross as before, no net figure
    bare = _rows(_record(gpus=[{"index": 0}]), samples)
    assert bare[("gpu_energy_j", "train")]["value"] == pytest.approx(400.0)
    assert bare[("gpu_energy_net_j", "train")]["value"] is None
    assert METRICS["gpu_energy_net_j"].kind == METRICS["gpu_energy_j"].kind == "energy"


def test_net_energy_is_never_a_partial_subtraction() -> None:
    idle = {"gpu0": IdleDomain("gpu0", 50.0, 10.0, 101, "test")}
    assert net_energy(["gpu0"], 400.0, 2.0, idle) == pytest.approx(300.0)
    assert net_energy(["gpu0", "gpu1"], 800.0, 2.0, idle) is None  # the baseline saw one of the two GPUs
    assert net_energy(["gpu0"], 400.0, 2.0, None) is None
    assert net_energy(["gpu0"], float("nan"), 2.0, idle) is None


def test_idle_power_from_the_baseline_samples(tmp_path: Path) -> None:
    t = np.arange(0.0, 10.01, 0.1)
    base = pd.concat([_counter(55.0, t), _counter(12.0, t, "rapl", "package-0"),
                      _frame("nvml", "1", "power_w", "W", t, np.full(t.size, 40.0)),  # no counter (pre-Volta)
                      _frame("cpu", "total", "util_pct", "%", t, np.full(t.size, 3.0))])
    idle = idle_power(base)
    assert set(idle) == {"gpu0", "gpu1", "rapl:package-0"}
    assert idle["gpu0"].watts == pytest.approx(55.0) and idle["gpu0"].span_s == pytest.approx(10.0)
    assert idle["gpu1"].watts == pytest.approx(40.0) and idle["gpu1"].method == "mean of power readings"
    assert idle["rapl:package-0"].watts == pytest.approx(12.0)
    # a counter reset during the baseline gives no rate rather than a negative one
    reset = _frame("rapl", "package-0", "energy_j", "J", t, np.where(t < 5, t * 12.0, (t - 5) * 12.0))
    assert idle_power(reset) == {}

    rd = RunDir.create(tmp_path, "t", bare_manifest_json())
    rd.write_samples("_baseline", base)
    rd.write_samples("_baseline-node-a-1-chunk3", _counter(70.0, t))
    per_host = load_idle_power(rd)
    assert per_host[None]["gpu0"].watts == pytest.approx(55.0)
    assert per_host["node-a-1"]["gpu0"].watts == pytest.approx(70.0)
    assert baseline_host("_baseline-node-a-1-chunk3") == "node-a-1" and baseline_host("_baseline") is None
    # a trial takes its own host's baseline, else the run's single one
    assert idle_for({"host": "node-a-1"}, per_host)["gpu0"].watts == pytest.approx(70.0)  # type: ignore[index]
    assert idle_for({"host": "elsewhere"}, per_host)["gpu0"].watts == pytest.approx(55.0)  # type: ignore[index]
    assert idle_for({"host": "x"}, {}) is None
    # the golden run's baseline sampled the CPU only: no idle power, so no net energy, and nothing breaks
    assert load_idle_power(RunDir.open(Path(__file__).parent / "data" / "golden" / "run")) == {}


def test_trial_cpu_utilisation_from_the_markers_resolves_a_short_phase() -> None:
    """Train: 3 CPU-seconds in 2 s = 150 % of one CPU; infer: 0.03 CPU-s in 0.04 s (0.4 sampling periods) = 75 %.

    The host-wide figure of the same phases comes from 10 Hz samples: the infer phase gets the value of
    the one window around it (a host busy at 25 % with other work), whatever the trial did in it.
    """
    t = T0 + PERIOD * np.arange(40)
    host = _frame("cpu", "total", "util_pct", "%", t, np.full(t.size, 25.0))
    rec = _record({"train": (10.0, 13.0), "infer": (13.01, 13.04)})
    by = _rows(rec, host)
    own_train, own_infer = by[("trial_cpu_util_pct", "train")], by[("trial_cpu_util_pct", "infer")]
    assert own_train["value"] == pytest.approx(150.0) and own_infer["value"] == pytest.approx(75.0)
    assert own_train["n_samples"] == 1 and own_train["bound"] is None
    assert by[("cpu_util_pct", "infer")]["value"] == pytest.approx(25.0)  # host-wide, kept beside it
    assert METRICS["trial_cpu_util_pct"].kind == "marker"  # exact: not a sampled (telemetry) metric
    assert "host-wide" in METRICS["cpu_util_pct"].label and "% of all CPUs" in METRICS["cpu_util_pct"].label
    assert "trial's process" in METRICS["trial_cpu_util_pct"].label
    assert "% of one CPU" in METRICS["trial_cpu_util_pct"].label


def test_trial_cpu_utilisation_is_none_without_cpu_times() -> None:
    # an older kit's markers have no cpu_s: no value, never a made-up one
    by = _rows(_record(None), pd.DataFrame())
    assert by[("trial_cpu_util_pct", "train")]["value"] is None
    assert by[("trial_cpu_util_pct", "train")]["n_samples"] == 0
    # a phase never ended, a clock that went backwards, CPU time that shrank: None
    assert trial_cpu_util([{"event": "phase_start", "phase": "train", "t": 1.0, "cpu_s": 1.0}], "train") is None
    backwards = [{"event": "phase_start", "phase": "train", "t": 2.0, "cpu_s": 1.0},
                 {"event": "phase_end", "phase": "train", "t": 1.0, "cpu_s": 2.0}]
    assert trial_cpu_util(backwards, "train") is None
    shrank = [{"event": "phase_start", "phase": "train", "t": 1.0, "cpu_s": 2.0},
              {"event": "phase_end", "phase": "train", "t": 2.0, "cpu_s": 1.0}]
    assert trial_cpu_util(shrank, "train") is None
    # the first complete occurrence counts, as for the phase intervals
    twice = [{"event": "phase_start", "phase": "train", "t": 0.0, "cpu_s": 0.0},
             {"event": "phase_end", "phase": "train", "t": 1.0, "cpu_s": 0.5},
             {"event": "phase_start", "phase": "train", "t": 2.0, "cpu_s": 0.5},
             {"event": "phase_end", "phase": "train", "t": 3.0, "cpu_s": 1.5}]
    assert trial_cpu_util(twice, "train") == pytest.approx(50.0)
