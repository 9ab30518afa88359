"""The LeNet paper profile's PyTorch arm, run natively with fewer repetitions, then NVML checks on its raw samples.

Run by benchmarks/gpu_evidence.sh on a GPU host whose image has PyTorch but no TensorFlow, hence one arm:
the plan is the kit's own (``make_plan`` with ``arms=("pytorch",)``) and the trials go through
``kit.run.start_run`` exactly as ``kit run`` sends them, so what is checked here is what a user's run does.

The spec is the paper profile of experiments/florencio2019_lenet with one extra profile appended to a copy
of its text (so the kit validates it like any other): fewer repetitions, the MNIST test set split
9,000/1,000 (the device host has no dataset downloads; 90 steps of batch 100 instead of 600), a bounded
cool-down. Everything else (batch, learning rate, warm-up, TF32 off, min_phase_s = 1.0, 10 Hz telemetry,
the collectors) is the paper profile's.

The checks read the raw samples independently of the kit's analysis:
  * NVML sampling: rows per second of ``power_w`` inside each timed phase, against the spec's period;
  * energy: the ``energy_j`` counter's increase over the train+infer span against the integral of
    ``power_w`` over the same span (the driver averages power over about a second, so the two agree only
    to tens of per cent on short phases; the check is that both are positive, finite and of one order);
  * the GPU was the one measured: utilisation above zero during training, the trial's device is "cuda".
Exit 0 when every check passes, 1 otherwise; a JSON summary goes to --out.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kit.run import RunOptions, start_run  # noqa: E402
from kit.spec import load_spec  # noqa: E402

SPEC = ROOT / "experiments" / "florencio2019_lenet" / "experiment.toml"

PROFILE = """

[profiles.gpu_evidence]
description = "GPU EVIDENCE: the paper protocol with {reps} repetitions (plus one discarded block), PyTorch only, on the MNIST test set split 9,000/1,000 (90 steps of batch 100): the device host has no TensorFlow and no dataset downloads."
[profiles.gpu_evidence.dataset]
source = "t10k_split"
train_size = 9000
test_size = 1000
[profiles.gpu_evidence.workload]
steps_per_epoch = 90
device = "{device}"
[profiles.gpu_evidence.design]
repetitions = {reps}
timeout_s = 300
[profiles.gpu_evidence.telemetry]
baseline_s = 5
cooldown_max_s = 15
"""


def derived_spec(work: Path, reps: int, device: str) -> Path:
    text = SPEC.read_text(encoding="utf-8") + PROFILE.format(reps=reps, device=device)
    work.mkdir(parents=True, exist_ok=True)
    path = work / "experiment.toml"
    path.write_text(text, encoding="utf-8")
    return path


def integral_w_s(t: np.ndarray, w: np.ndarray, a: float, b: float) -> float:
    """Integral of a sampled power curve over [a, b] (linear interpolation, end points included)."""
    inside = (t > a) & (t < b)
    ts = np.concatenate([[a], t[inside], [b]])
    ws = np.concatenate([[np.interp(a, t, w)], w[inside], [np.interp(b, t, w)]])
    return float(np.sum((ts[1:] - ts[:-1]) * (ws[1:] + ws[:-1]) / 2))


def check_trial(run: Path, rec: dict, period_s: float) -> dict:
    tid = rec["trial_id"]
    out: dict = {"trial": tid, "status": rec["status"], "device": rec.get("device"), "warmup": rec.get("warmup"),
                 "train_time_s": (rec.get("results") or {}).get("train_time_s"),
                 "infer_time_s": (rec.get("results") or {}).get("infer_time_s"), "problems": []}
    if rec["status"] != "ok":
        out["problems"].append(f"status {rec['status']}: {rec.get('error')}")
        return out
    ran_on = str((rec.get("env") or {}).get("device", ""))
    out["framework_device"] = ran_on
    if not ran_on.startswith("cuda"):
        out["problems"].append(f"the framework ran on {ran_on!r}, not the GPU")
    df = pd.read_parquet(run / "samples" / f"{tid}.parquet")
    nv = df[df["source"] == "nvml"]
    if nv.empty:
        out["problems"].append("no NVML rows")
        return out
    ph = rec["phases"]
    for name in ("train", "infer"):
        a, b = ph[name]["start"], ph[name]["end"]
        p = nv[(nv["metric"] == "power_w") & (nv["t"] >= a) & (nv["t"] <= b)]
        u = nv[(nv["metric"] == "gpu_util_pct") & (nv["t"] >= a) & (nv["t"] <= b)]
        out[f"{name}_s"] = b - a
        out[f"{name}_nvml_rows"] = len(p)
        out[f"{name}_rate_hz"] = len(p) / (b - a) if b > a else None
        out[f"{name}_util_max_pct"] = float(u["value"].max()) if len(u) else None
        out[f"{name}_power_mean_w"] = float(p["value"].mean()) if len(p) else None
    # The sampling rate is judged on the 1 s inference phase (min_phase_s): training lasts tenths of a second.
    rate = out.get("infer_rate_hz")
    if rate is None or rate < 0.6 / period_s:
        out["problems"].append(f"NVML sampled {rate} rows/s in the inference phase; expected about {1 / period_s:g}")
    if not out.get("train_util_max_pct"):
        out["problems"].append("GPU utilisation 0 during training: the GPU was not the one measured")
    a, b = ph["train"]["start"], ph["infer"]["end"]
    e = nv[nv["metric"] == "energy_j"].sort_values("t")
    pw = nv[nv["metric"] == "power_w"].sort_values("t")
    if len(e) >= 2 and len(pw) >= 2:
        t_e, v_e = e["t"].to_numpy(), e["value"].to_numpy()
        counter_j = float(np.interp(b, t_e, v_e) - np.interp(a, t_e, v_e))
        integral_j = integral_w_s(pw["t"].to_numpy(), pw["value"].to_numpy(), a, b)
        out.update(energy_counter_j=counter_j, energy_power_integral_j=integral_j,
                   energy_ratio=counter_j / integral_j if integral_j > 0 else None)
        if not (math.isfinite(counter_j) and counter_j > 0 and integral_j > 0 and 0.3 < counter_j / integral_j < 3):
            out["problems"].append(f"energy counter {counter_j:.3f} J vs power integral {integral_j:.3f} J")
        if np.any(np.diff(v_e) < 0):
            out["problems"].append("the energy counter went backwards")
    else:
        out["problems"].append("no energy_j or power_w series")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--device", default="auto", help="auto (the paper profile: the GPU) or cpu (a dry run here)")
    ap.add_argument("--runs-dir", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    spec = load_spec(derived_spec(args.runs_dir / "spec", args.reps, args.device), "gpu_evidence")
    t0 = time.perf_counter()
    rd = start_run(spec, RunOptions(runs_root=args.runs_dir, arms=("pytorch",), download=False,
                                    data_dir=ROOT / "data"))
    wall = time.perf_counter() - t0
    run = Path(rd.path)
    man = json.loads((run / "manifest.json").read_text())
    recs = [json.loads(p.read_text()) for p in sorted((run / "trials").glob("*.json"))]
    trials = [check_trial(run, r, spec.telemetry.period_s) for r in recs]
    if args.device == "cpu":  # a dry run of the script on a host without a GPU: no NVML checks apply
        for t in trials:
            t["problems"] = [p for p in t["problems"] if p.startswith("status")]
            t["dry_run"] = "cpu: NVML checks not applicable"
    measured = [t for t in trials if not t["warmup"]]
    summary = {
        "run_dir": str(run), "wall_s": wall, "trials": trials,
        "host": {k: man["host"].get(k) for k in ("hostname", "cpu_model", "gpus", "driver") if k in man["host"]},
        "devices": man.get("devices"), "run_selftest": man.get("selftest"),
        "median_train_time_s": float(np.median([t["train_time_s"] for t in measured if t["train_time_s"]]))
        if measured else None,
        "median_infer_time_s": float(np.median([t["infer_time_s"] for t in measured if t["infer_time_s"]]))
        if measured else None,
        "problems": [f"{t['trial']}: {p}" for t in trials for p in t["problems"]],
    }
    args.out.write_text(json.dumps(summary, indent=1, default=str))
    for t in trials:
        keys = ("status", "device", "train_time_s", "infer_time_s", "infer_rate_hz", "train_util_max_pct",
                "energy_counter_j", "energy_power_integral_j")
        print(t["trial"], " ".join(f"{k}={t.get(k)}" for k in keys))
    print(f"median train {summary['median_train_time_s']} s, infer {summary['median_infer_time_s']} s "
          f"over {len(measured)} measured trials; wall {wall:.1f} s")
    print("problems:", summary["problems"] or "none")
    return 1 if summary["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
