"""Issue 13, analysis side, on recorded runs of a fake 8-GPU host (no GPU, no framework runs here).

The trial uses GPU 3 of an 8-GPU node with GPUs of two models; the other GPUs are hotter, another
job's process runs on GPU 5, GPU 6 throttles with unlocked clocks. Each test names the wrong answer
of issue 13 it guards against; each fails on the code before the issue:

1. arms on different devices (CPU vs GPU, or two GPUs) were compared and decided; the trial's GPU
   was never checked against the one sampled;
2. telemetry, energy and every telemetry threat used every GPU of the host;
3. TF32 / precision per arm were neither shown nor compared;
4. GPU power was only the driver's 1-s moving average;
5. a phase shorter than the sampling period was tested on the trials that happened to get a reading;
6. a failed design cell of the Dai factor study was dropped as missing data.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kit.analysis.analyze import analyze_run
from kit.analysis.metrics import trial_metric_rows
from kit.analysis.validity import Ctx
from kit.analysis.validity_telemetry import (
    foreign_load,
    gpu_clocks,
    start_temperature,
    throttling,
    trial_facts,
)
from kit.collectors.base import SAMPLE_COLUMNS
from kit.plan import make_plan
from kit.spec import load_spec
from kit.store import RunDir
from tests._runs import bare_manifest, manifest_of, record_of, records_of, run_view, write_record
from tests._studies import study_module

PERIOD = 0.1
OWN = 3  # the trial's GPU (NVML index)
UUIDS = {i: f"GPU-{i:08x}-0000-0000-0000-00000000000{i}" for i in range(8)}
NAMES = {i: "NVIDIA H100 80GB HBM3" if i < 4 else "NVIDIA L40S" for i in range(8)}
# true power of the trial's GPU per phase; other GPUs idle at 90 W
WATTS = {"train": 350.0, "infer": 200.0, "idle": 80.0}

SPEC = """
schema = 1
[experiment]
id = "gpu13a"
title = "issue 13 analysis fixtures"
study = "none"
citation = "test"
reproduces = "nothing"
frameworks = ["tensorflow", "pytorch"]
seed = 3
[goal]
analyse = "a"
purpose = "b"
quality_focus = "c"
viewpoint = "d"
context = "e"
[workload]
name = "calibrated"
batch_size = 1
epochs = 1
steps_per_epoch = 1
learning_rate = 0.01
warmup_steps = 0
device = "gpu"
train_s = 1.0
infer_s = 0.5
[design]
repetitions = {reps}
warmup_repetitions = 0
timeout_s = 120
[telemetry]
collectors = ["cpu", "nvml"]
period_s = {period}
baseline_s = 0
cooldown_max_s = 0
[[hypotheses]]
id = "H1"
question = "time"
metric = "time_s"
phases = ["train", "infer"]
h0 = "same"
h1 = "different"
[[hypotheses]]
id = "H2"
question = "GPU utilisation"
metric = "gpu_util_pct"
phases = ["infer"]
h0 = "same"
h1 = "different"
[[hypotheses]]
id = "H3"
question = "GPU power"
metric = "gpu_power_w"
phases = ["train", "infer"]
h0 = "same"
h1 = "different"
"""


# -- a fake 8-GPU host's samples ------------------------------------------------------------


def _phase_at(t: float, iv: dict[str, tuple[float, float]]) -> str:
    for p, (a, b) in iv.items():
        if a <= t < b:
            return p
    return "idle"


def _true_watts(t: float, iv: dict[str, tuple[float, float]]) -> float:
    return WATTS[_phase_at(t, iv)]


def _energy(t: float, t_begin: float, iv: dict[str, tuple[float, float]], e0: float = 1.0e6) -> float:
    """Counter of the trial's GPU: the exact integral of the piecewise-constant true power."""
    edges = sorted({t_begin, t, *[x for ab in iv.values() for x in ab if t_begin < x < t]})
    return e0 + sum(_true_watts((a + b) / 2, iv) * (b - a) for a, b in itertools.pairwise(edges))


def gpu_samples(iv: dict[str, tuple[float, float]], t_begin: float, t_end: float, offset: float = 0.0,
                own: int = OWN, n_gpus: int = 8, instant: bool = True,
                util: dict[str, float] | None = None) -> pd.DataFrame:
    """NVML rows of 8 GPUs every PERIOD from t_begin + offset; GPU ``own`` runs the trial.

    Other GPUs: 85 °C (GPU 0-2, 4-7), GPU 5 hosts a foreign process, GPU 6 is thermally throttled
    with clocks wandering 1200-1980 MHz. ``power_w`` is the 1-s moving average of the true power.
    """
    util = util or {"train": 97.0, "infer": 60.0, "idle": 0.0}
    rows: list[tuple[Any, ...]] = []
    for t in np.arange(t_begin + offset, t_end, PERIOD):
        t = float(t)
        phase = _phase_at(t, iv)
        for i in range(n_gpus):
            mine = i == own
            avg = float(np.mean([_true_watts(t - d, iv) for d in np.linspace(0, 1, 21)])) if mine else 90.0
            vals = {"gpu_util_pct": util[phase] if mine else 100.0 if i == 5 else 0.0,
                    "temp_c": 40.0 if mine else 85.0, "power_w": avg,
                    "energy_j": _energy(t, t_begin, iv) if mine else 5.0e6 + 90.0 * (t - t_begin),
                    "foreign_procs": 1.0 if i == 5 else 0.0,
                    "sm_clock_mhz": 1980.0 if i != 6 else 1200.0 + (t * 1000 % 780),
                    "throttle_reasons": 0.0 if i != 6 else float(0x20)}
            if instant:
                vals["power_instant_w"] = _true_watts(t, iv) if mine else 90.0
            units = {"gpu_util_pct": "%", "temp_c": "C", "power_w": "W", "energy_j": "J", "foreign_procs": "count",
                     "sm_clock_mhz": "MHz", "throttle_reasons": "bitmask", "power_instant_w": "W"}
            rows += [(t, "nvml", str(i), m, v, units[m]) for m, v in vals.items()]
        rows.append((t, "cpu", "total", "util_pct", 50.0, "%"))
    return pd.DataFrame(rows, columns=list(SAMPLE_COLUMNS))


def markers(start: float, train_s: float, infer_s: float) -> list[dict[str, Any]]:
    return [{"event": "phase_start", "phase": "train", "t": start},
            {"event": "phase_end", "phase": "train", "t": start + train_s},
            {"event": "phase_start", "phase": "infer", "t": start + train_s},
            {"event": "phase_end", "phase": "infer", "t": start + train_s + infer_s}]


def intervals(start: float, train_s: float, infer_s: float) -> dict[str, tuple[float, float]]:
    return {"train": (start, start + train_s), "infer": (start + train_s, start + train_s + infer_s)}


def gpu_env(framework: str, uuid: str | None = UUIDS[OWN], kind: str = "gpu", tf32: dict | None = None,
            precision: str = "fp32") -> dict[str, Any]:
    env: dict[str, Any] = {"framework": framework, "framework_version": "x", "device": "cuda:0" if kind == "gpu" else "cpu",
                           "device_kind": kind, "device_name": NAMES[OWN] if kind == "gpu" else "cpu",
                           "gpu_uuid": uuid if kind == "gpu" else None, "gpu_uuids": [uuid] if kind == "gpu" and uuid else [],
                           "precision": precision}
    env["tf32"] = tf32 or {"mode": "off", "matmul": False if kind == "gpu" else None,
                           "conv": False if kind == "gpu" else None}
    return env


def host_gpus(index: int = OWN) -> list[dict[str, Any]]:
    return [{"index": index, "uuid": UUIDS[index], "name": NAMES[index]}]


def record(trial_id: str, arm: str, start: float, train_s: float = 1.0, infer_s: float = 0.5,
           env: dict[str, Any] | None = None, gpus: list[dict[str, Any]] | None = None,
           start_temps: dict[str, float] | None = None, **extra: Any) -> dict[str, Any]:
    rec = {"trial_id": trial_id, "arm": arm, "framework": arm, "config_id": "c00", "block": 0, "repetition": 0,
           "position": 0, "warmup": False, "status": "ok", "markers": markers(start, train_s, infer_s),
           "results": {"train_time_s": train_s, "infer_time_s": infer_s}, "env": env or gpu_env(arm),
           "cooldown": {"start_temps": start_temps or {}, "reached": True, "waited_s": 1.0}, **extra}
    if gpus is not None:
        rec["gpus"] = gpus
    return rec


# -- recorded runs ---------------------------------------------------------------------------


def make_run(tmp_path: Path, *, reps: int = 10, env_of: Any = None, gpus_of: Any = None, times: Any = None,
             offset_of: Any = None, manifest_extra: dict[str, Any] | None = None, instant: bool = True) -> RunDir:
    """A run directory of the SPEC above: per trial ``env_of(t)``, ``gpus_of(t)``, ``times(t)`` ->
    (train_s, infer_s), ``offset_of(t)`` -> offset of the sampling grid."""
    spec_path = tmp_path / "gpu13a.toml"
    spec_path.write_text(SPEC.replace("{reps}", str(reps)).replace("{period}", str(PERIOD)), encoding="utf-8")
    spec = load_spec(spec_path)
    plan = make_plan(spec)
    man = manifest_of(spec, host={"cpu_model": "test CPU", "cpu_logical": 16,
                                  "gpus": [{"index": i, "name": NAMES[i], "uuid": UUIDS[i]} for i in range(8)]},
                      dataset={"name": "synthetic", "source": "generated", "origin": "test"},
                      collectors=[{"name": "cpu", "ok": True, "detail": "", "fix": None},
                                  {"name": "nvml", "ok": True, "detail": "fake 8-GPU host", "fix": None}],
                      **(manifest_extra or {}))
    rd = RunDir.create(tmp_path / "runs", spec.experiment.id, man)
    rng = np.random.default_rng(0)
    for t in plan.trials:
        start = 1.0e9 + 10.0 * t.position
        train_s, infer_s = times(t) if times else ((1.0, 0.5) if t.framework == "tensorflow" else (1.2, 0.6))
        train_s *= 1 + 0.01 * rng.standard_normal()
        iv = intervals(start, train_s, infer_s)
        env = env_of(t) if env_of else gpu_env(t.framework)
        gpus = gpus_of(t) if gpus_of else host_gpus()
        rec = record_of(t, start, train_s, infer_s, markers=markers(start, train_s, infer_s), env=env)
        if gpus is not None:
            rec["gpus"] = gpus
        off = offset_of(t, iv) if offset_of else 0.03
        write_record(rd, rec, gpu_samples(iv, start - 0.5, start + train_s + infer_s + 0.5, off, instant=instant))
    return rd


# -- 1. device consistency -------------------------------------------------------------------


def test_arms_on_cpu_and_gpu_are_refused_not_decided(tmp_path: Path) -> None:
    """TensorFlow fell back to the CPU (old record: only env.device), PyTorch used the GPU."""
    def env_of(t: Any) -> dict[str, Any]:
        if t.framework == "tensorflow":
            return {"framework": "tensorflow", "device": "/CPU:0", "device_name": "cpu"}  # before issue 13
        return {"framework": "pytorch", "device": "cuda:0", "device_name": NAMES[OWN]}

    a = analyze_run(make_run(tmp_path, env_of=env_of).path).to_json()
    d = a["devices"]
    assert d["kind_mismatch"] and d["refusal"] and "different kinds of device" in d["refusal"]
    assert {x["arm"]: x["kinds"] for x in d["arms"]} == {"tensorflow": {"cpu": 10}, "pytorch": {"gpu": 10}}
    assert a["hypotheses"] and all(h["decision"] == "not decided" and h["rejected"] is None and not h["tested"]
                                   for h in a["hypotheses"])
    assert all("different kinds of device" in h["reason"] for h in a["hypotheses"])
    (thr,) = [v for v in a["validity"] if v["rule"] == "device_mismatch"]
    assert thr["severity"] == "high" and thr["category"] == "internal" and thr["status"] == "threat"
    assert thr["numbers"]["tensorflow"]["kinds"] == {"cpu": 10} and thr["numbers"]["pytorch"]["kinds"] == {"gpu": 10}


def test_arms_on_different_gpus_are_refused(tmp_path: Path) -> None:
    """Same kind, different UUIDs: each framework saw another GPU (CUDA order vs NVML order)."""
    def env_of(t: Any) -> dict[str, Any]:
        return gpu_env(t.framework, uuid=UUIDS[OWN] if t.framework == "pytorch" else UUIDS[0])

    def gpus_of(t: Any) -> list[dict[str, Any]]:
        return host_gpus(OWN if t.framework == "pytorch" else 0)

    a = analyze_run(make_run(tmp_path, env_of=env_of, gpus_of=gpus_of).path).to_json()
    assert a["devices"]["gpu_mismatch"] and not a["devices"]["kind_mismatch"]
    assert "different GPUs" in a["devices"]["refusal"] and UUIDS[0] in a["devices"]["refusal"]
    assert {h["decision"] for h in a["hypotheses"]} == {"not decided"}
    thr = next(v for v in a["validity"] if v["rule"] == "device_mismatch")
    assert thr["severity"] == "high" and thr["numbers"]["tensorflow"]["gpu_uuids"] == {UUIDS[0]: 10}
    assert thr["numbers"]["blocks_with_different_gpus"]


def test_same_gpu_in_both_arms_is_decided(tmp_path: Path) -> None:
    a = analyze_run(make_run(tmp_path).path).to_json()
    assert a["devices"]["refusal"] is None
    h1 = [h for h in a["hypotheses"] if h["id"] == "H1"]
    assert all(h["tested"] and h["decision"].startswith(("reject", "H0")) for h in h1)
    ok = next(v for v in a["validity"] if v["rule"] == "device_mismatch")
    assert ok["status"] == "mitigated" and UUIDS[OWN] in ok["evidence"]


def test_trial_on_another_gpu_than_sampled_is_a_threat_and_its_telemetry_unused(tmp_path: Path) -> None:
    """The host gave and sampled GPU 3; inside, the trial computed on GPU 0 (CUDA numbering without
    CUDA_DEVICE_ORDER=PCI_BUS_ID): its GPU readings describe an idle GPU and must not be used."""
    bad = {"r001-c00-pytorch", "r004-c00-pytorch"}

    def env_of(t: Any) -> dict[str, Any]:
        return gpu_env(t.framework, uuid=UUIDS[0] if t.trial_id in bad else UUIDS[OWN])

    a = analyze_run(make_run(tmp_path, env_of=env_of).path).to_json()
    wrong = a["devices"]["trial_gpu_mismatch"]
    assert sorted(w["trial_id"] for w in wrong) == sorted(bad)
    thr = next(v for v in a["validity"] if v["rule"] == "gpu_uuid_mismatch")
    assert thr["severity"] == "high" and thr["numbers"]["trials"] == 2 and thr["numbers"]["by_arm"] == {"pytorch": 2}
    util = [v for v in a["values"] if v["metric"] == "gpu_util_pct" and v["phase"] == "train"]
    assert all(v["value"] is None for v in util if v["trial_id"] in bad)
    assert all(v["value"] == pytest.approx(97.0) for v in util if v["trial_id"] not in bad)
    # cpu telemetry of those trials is still theirs
    cpu = [v for v in a["values"] if v["metric"] == "cpu_util_pct" and v["trial_id"] in bad]
    assert cpu and all(v["value"] is not None for v in cpu)


# -- 2. only the trial's GPUs ------------------------------------------------------------------


def _one_trial(**kw: Any) -> tuple[dict[str, Any], pd.DataFrame]:
    start = 1000.0
    iv = intervals(start, 10.0, 2.0)
    rec = record("t0", "pytorch", start, 10.0, 2.0, gpus=host_gpus(), **kw)
    return rec, gpu_samples(iv, start - 2, start + 14, 0.05)


def test_metrics_use_only_the_trials_gpu() -> None:
    rec, samples = _one_trial()
    rows = {(r["metric"], r["phase"]): r for r in trial_metric_rows(
        rec, samples, ("gpu_util_pct", "gpu_temp_c", "gpu_energy_j", "gpu_mem_used_bytes", "gpu_power_w"))}
    assert rows[("gpu_util_pct", "train")]["value"] == pytest.approx(97.0)  # not (97 + 100 + 0 * 6) / 8
    assert rows[("gpu_temp_c", "train")]["value"] == pytest.approx(40.0)  # not the hot neighbours' 80 °C mean
    assert rows[("gpu_energy_j", "train")]["value"] == pytest.approx(350.0 * 10, rel=0.01)  # not + 7 GPUs x 900 J
    # an old record without "gpus": every GPU sampled (as before)
    old = {k: v for k, v in rec.items() if k != "gpus"}
    rows_old = {(r["metric"], r["phase"]): r for r in trial_metric_rows(old, samples, ("gpu_temp_c",))}
    assert rows_old[("gpu_temp_c", "train")]["value"] == pytest.approx((40 + 7 * 85) / 8)


def test_threat_rules_see_only_the_trials_gpu() -> None:
    """Foreign process on GPU 5, throttling and wandering clocks on GPU 6, hot neighbours at the start:
    none of it is the trial's (GPU 3)."""
    trials, facts = [], []
    for i, arm in enumerate(("tensorflow", "pytorch") * 3):
        rec, samples = _one_trial(start_temps={"gpu3": 40.0, "gpu6": 85.0 if arm == "pytorch" else 60.0, "cpu": 45.0})
        rec = {**rec, "trial_id": f"t{i}", "arm": arm, "position": i}
        trials.append(records_of([rec])[0])
        facts.append(trial_facts(trials[-1], samples))
    assert all(f["foreign_procs_max"] == 0 and f["throttle_frac_limited"] == 0.0 for f in facts)
    assert all(f["sm_clock_min_mhz"] == f["sm_clock_max_mhz"] == 1980.0 for f in facts)
    assert set(facts[0]["start_temps_c"]) == {"gpu3", "cpu"}
    c = Ctx(bare_manifest(host={"cpu_logical": 4}, collectors=[]), trials, pd.DataFrame(),
            {"trial_telemetry": facts, "baseline": {"recorded": False}})
    assert not [t for t in foreign_load(c) if t.rule == "foreign_gpu"]
    (thr,) = throttling(c)
    assert thr.status == "mitigated"
    (clk,) = gpu_clocks(c)
    assert clk.status == "mitigated"
    (st,) = start_temperature(c)
    assert st.status == "mitigated" and "gpu6" not in st.numbers["median_start_c"]


# -- 3. precision ------------------------------------------------------------------------------


def test_tf32_native_differs_between_frameworks_and_is_a_high_threat(tmp_path: Path) -> None:
    """tf32 = "native": TensorFlow uses TF32 for matmuls and convolutions, PyTorch only for convolutions."""
    def env_of(t: Any) -> dict[str, Any]:
        on = t.framework == "tensorflow"
        return gpu_env(t.framework, tf32={"mode": "native", "matmul": on, "conv": True})

    a = analyze_run(make_run(tmp_path, env_of=env_of).path).to_json()
    (bad,) = a["devices"]["precision_mismatch"]
    assert bad["by_arm"]["tensorflow"] == [{"tf32_matmul": True, "tf32_conv": True, "precision": "fp32"}]
    assert bad["by_arm"]["pytorch"] == [{"tf32_matmul": False, "tf32_conv": True, "precision": "fp32"}]
    thr = next(v for v in a["validity"] if v["rule"] == "precision_mismatch")
    assert thr["severity"] == "high" and thr["status"] == "threat"
    tf = next(x for x in a["devices"]["arms"] if x["arm"] == "tensorflow")
    assert tf["tf32"] == {"native (matmul on, conv on)": 10} and tf["precision"] == {"fp32": 10}


def test_tf32_off_in_both_is_mitigated(tmp_path: Path) -> None:
    a = analyze_run(make_run(tmp_path).path).to_json()
    assert a["devices"]["precision_mismatch"] == []
    thr = next(v for v in a["validity"] if v["rule"] == "precision_mismatch")
    assert thr["status"] == "mitigated"


# -- 4. power ----------------------------------------------------------------------------------


def test_phase_power_from_the_energy_counter(tmp_path: Path) -> None:
    """The infer phase (0.5 s) follows 1 s of training at 350 W: the 1-s average still shows mostly
    the training; the counter's difference over the phase gives its 200 W."""
    a = analyze_run(make_run(tmp_path).path).to_json()
    vals = pd.DataFrame(a["values"])
    ph = vals[(vals["metric"] == "gpu_power_phase_w") & (vals["phase"] == "infer")]["value"]
    avg = vals[(vals["metric"] == "gpu_power_w") & (vals["phase"] == "infer")]["value"]
    inst = vals[(vals["metric"] == "gpu_power_instant_w") & (vals["phase"] == "infer")]["value"]
    assert len(ph) == 20 and ph.notna().all() and np.allclose(ph, 200.0, rtol=0.02)
    assert (avg > 260).all()  # the moving average is dominated by the preceding training phase
    assert np.allclose(inst.dropna(), 200.0)
    tr = vals[(vals["metric"] == "gpu_power_phase_w") & (vals["phase"] == "train")]["value"]
    assert np.allclose(tr, 350.0, rtol=0.05)  # boundaries: within one period's energy
    labels = {m["metric"]: m["label"] for m in a["measured"]}
    assert labels["gpu_power_w"] == "GPU power (NVML 1-s moving average)"
    assert labels["gpu_power_phase_w"] == "GPU power (energy counter / phase duration)"
    h3 = [h for h in a["hypotheses"] if h["id"] == "H3"]
    assert h3 and all(h["metric"] == "gpu_power_w" and h["metric_tested"] == "gpu_power_phase_w" for h in h3)
    assert all("energy counter" in h["metric_note"] for h in h3)
    # the value is there, but a 0.5-s phase is 5 sampling periods: the hypothesis on it is not testable (issue 25)
    infer = next(h for h in h3 if h["phase"] == "infer")
    assert infer["decision"] == "not testable" and "5 sampling periods" in infer["reason"]
    assert "energy counter / phase duration" in infer["reason"]


def test_power_without_the_counter_falls_back_to_the_average(tmp_path: Path) -> None:
    rec, samples = _one_trial()
    no_counter = samples[samples["metric"] != "energy_j"]
    rows = {(r["metric"], r["phase"]): r["value"] for r in trial_metric_rows(
        rec, no_counter, ("gpu_power_phase_w", "gpu_power_w"))}
    assert rows[("gpu_power_phase_w", "train")] is None and rows[("gpu_power_w", "train")] is not None


# -- 5. phases shorter than the sampling -----------------------------------------------------


def test_short_phase_without_samples_in_most_trials_is_not_testable(tmp_path: Path) -> None:
    """TensorFlow's inference lasts 0.04 s (less than one 0.1-s period): in 18 of 30 trials no
    reading falls inside it. Testing the 12 that got one would compare a biased subset."""
    def times(t: Any) -> tuple[float, float]:
        return (1.0, 0.04) if t.framework == "tensorflow" else (1.0, 0.6)

    def offset_of(t: Any, iv: dict[str, tuple[float, float]]) -> float:
        a, _ = iv["infer"]
        t_begin = iv["train"][0] - 0.5
        inside = t.framework == "pytorch" or t.repetition % 5 in (0, 1)  # 12 of 30 TF trials get a reading
        target = a + (0.02 if inside else 0.07)  # a grid point there; its neighbours 0.1 s away
        return (target - t_begin) % PERIOD

    a = analyze_run(make_run(tmp_path, reps=30, times=times, offset_of=offset_of).path).to_json()
    util = [v for v in a["values"] if v["metric"] == "gpu_util_pct" and v["phase"] == "infer"
            and v["arm"] == "tensorflow"]
    assert sum(v["value"] is None for v in util) == 18
    (h2,) = [h for h in a["hypotheses"] if h["id"] == "H2"]
    assert h2["decision"] == "not testable" and not h2["tested"] and h2["p"] is None
    assert "18 of 30 tensorflow trials" in h2["reason"] and "biased subset" in h2["reason"]
    thr = next(v for v in a["validity"] if v["rule"] == "short_phases")
    assert thr["severity"] == "high" and thr["status"] == "threat"
    row = next(r for r in thr["numbers"]["phases"] if r["arm"] == "tensorflow" and r["phase"] == "infer")
    assert row["median_s"] == pytest.approx(0.04) and row["periods"] == pytest.approx(0.4)
    assert row["trials_without_samples"]["gpu_util_pct"] == 18
    assert thr["numbers"]["threshold_s"] == pytest.approx(10 * PERIOD)
    # the time hypotheses are unaffected
    assert all(h["tested"] for h in a["hypotheses"] if h["id"] == "H1")


def test_long_phases_are_no_threat(tmp_path: Path) -> None:
    spec_times = (lambda t: (2.0, 1.5))  # noqa: E731
    a = analyze_run(make_run(tmp_path, times=spec_times).path).to_json()
    thr = next(v for v in a["validity"] if v["rule"] == "short_phases")
    assert thr["status"] == "mitigated"
    assert all(h["tested"] for h in a["hypotheses"] if h["id"] == "H2")


# -- 6. a failed design cell of the Dai factor study ------------------------------------------


def _dai_manifest() -> dict[str, Any]:
    configs = {"c00": {"case": "base", "model": "resnet50"}, "c01": {"case": "nhwc", "model": "resnet50"},
               "c02": {"case": "fp16", "model": "resnet50"}, "c03": {"case": "nhwc_bf16", "model": "resnet50"}}
    cases = {"base": {"workload": {"layout": "nchw", "precision": "fp32"}},
             "nhwc": {"workload": {"layout": "nhwc", "precision": "fp32"}},
             "fp16": {"workload": {"layout": "nchw", "precision": "bf16"}},
             "nhwc_bf16": {"workload": {"layout": "nhwc", "precision": "bf16"}}}
    return {"spec": {"workload": {"name": "dai_factors"}, "cases": cases, "design": {"alpha": 0.05}},
            "plan": {"arms": ["tensorflow", "pytorch"], "configs": configs}}


def _dai_trials(fail: set[tuple[str, str]]) -> list[dict[str, Any]]:
    out = []
    step = {"tensorflow": 0.12, "pytorch": 0.10}
    for cid in ("c00", "c01", "c02", "c03"):
        for arm in ("tensorflow", "pytorch"):
            for rep in range(3):
                t = {"trial_id": f"{cid}-{arm}-{rep}", "config_id": cid, "arm": arm, "repetition": rep,
                     "warmup": False, "block": rep}
                if (cid, arm) in fail:
                    t.update(status="error", results={}, error="Traceback ...\nValueError: Input 0 of layer conv1 is "
                             "incompatible with the layer: expected axis -1 of input shape to have value 3")
                else:
                    s = step[arm] * (1.1 if cid in ("c00", "c02") else 1.0) * (1 + 0.01 * rep)
                    t.update(status="ok", results={"train_step_s": [s, s], "train_items_per_s": 32 / s,
                                                    "batch_size": 32}, error=None)
                out.append(t)
    return out


def test_failed_dai_cell_is_an_error_not_missing_data() -> None:
    """Every TensorFlow NCHW trial failed (channels_first with input_shape=(s, s, 3)): before, the
    cells were dropped and the layout factor was fitted on what was left."""
    analyse = study_module("dai_single_gpu_factors", "analysis").analyse
    from kit.analysis.validity import failed_cells

    d = analyse(run_view(_dai_manifest(), _dai_trials({("c00", "tensorflow"), ("c02", "tensorflow")}))).to_json()
    assert [(f["config_id"], f["arm"], f["status"], f["trials"]) for f in d["failed_cells"]] == [
        ("c00", "tensorflow", "error", 3), ("c02", "tensorflow", "error", 3)]
    assert "incompatible with the layer" in d["failed_cells"][0]["error"]
    assert d["error"] and "not computed" in d["error"]
    assert d["gap_effects"]["not_computed"] and d["gap_effects"]["factors"] == []
    assert all(r["not_computed"] for r in d["framework_effects"].values())
    (thr,) = failed_cells(Ctx(bare_manifest(), [], pd.DataFrame(), {"extras": {"dai_factors": d}}))
    assert thr.severity == "high" and thr.status == "threat" and "incompatible with the layer" in thr.evidence
    assert [c["config_id"] for c in thr.numbers["cells"]] == ["c00", "c02"]


def test_dai_without_failed_cells_fits_the_factors() -> None:
    analyse = study_module("dai_single_gpu_factors", "analysis").analyse

    d = analyse(run_view(_dai_manifest(), _dai_trials(set()))).to_json()
    assert d["failed_cells"] == [] and d["error"] is None
    assert {f["factor"]: f["status"] for f in d["gap_effects"]["factors"]}["layout"] == "estimated"


def test_a_configuration_on_the_cpu_in_every_arm_is_not_a_mismatch() -> None:
    """Patel et al. time inference on the GPU and on the CPU: devices differ between configurations, not arms."""
    from kit.analysis.devices import device_summary

    trials = [{"trial_id": f"{cid}-{arm}-{b}", "arm": arm, "config_id": cid, "block": b, "status": "ok",
               "warmup": False, "env": gpu_env(arm, kind="gpu" if cid == "gpu_cfg" else "cpu")}
              for cid in ("gpu_cfg", "cpu_cfg") for arm in ("tensorflow", "pytorch") for b in range(3)]
    d = device_summary(records_of(trials), ["tensorflow", "pytorch"])
    assert d["refusal"] is None and not d["kind_mismatch"] and d["kinds"] == ["cpu", "gpu"]
    trials[0]["env"] = gpu_env("tensorflow", kind="cpu")  # one TF trial of the GPU configuration fell back
    d = device_summary(records_of(trials), ["tensorflow", "pytorch"])
    assert d["kind_mismatch"] and d["kind_mismatch_configs"] == [
        {"config_id": "gpu_cfg", "kinds": {"tensorflow": ["cpu", "gpu"], "pytorch": ["gpu"]}}]


def test_instantaneous_power_missing_says_why(tmp_path: Path) -> None:
    a = analyze_run(make_run(tmp_path, instant=False).path).to_json()
    m = next(x for x in a["measured"] if x["metric"] == "gpu_power_instant_w")
    assert not m["measured"] and "NVML_FI_DEV_POWER_INSTANT" in m["reason"]
    assert next(x for x in a["measured"] if x["metric"] == "gpu_power_phase_w")["measured"]
