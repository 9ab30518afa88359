"""A calibrated workload: phases of known duration, for testing the instrument itself.

It imports no framework (any framework name maps here), busy-waits for the
requested time per phase and reports it like a real workload. With a
``slowdown`` factor it plants an exact, known difference (and with
``drift_per_position`` a known drift over the schedule), so comparisons,
regression verdicts and artifact verification can be tested end to end
through the real harness, runner and store — the kit's equivalent of a
reference weight on a scale.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from kit.workloads.common import Markers
from kit.workloads.device import min_phase_s, repeat_phase


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, MemoryError)


def run(req: dict[str, Any], data_dir: Path, markers: Markers) -> tuple[dict[str, Any], dict[str, Any]]:
    wl = req["workload"]
    rng = np.random.default_rng([int(req["seed"]), 3])
    only = str(wl.get("slowdown_framework", ""))
    factor = float(wl.get("slowdown", 1.0)) if only in ("", req["framework"]) else 1.0
    jitter = float(wl.get("jitter_frac", 0.0))
    # a warming device: every later trial runs slower, whatever its framework (a planted confound)
    factor *= 1 + float(wl.get("drift_per_position", 0.0)) * int(req.get("position", 0))
    train_s = float(wl["train_s"]) * factor * (1 + jitter * float(rng.standard_normal()))
    infer_s = float(wl["infer_s"]) * factor * (1 + jitter * float(rng.standard_normal()))
    markers.start("warmup")
    _busy(0.01)
    markers.end("warmup")
    markers.start("train")
    _busy(max(train_s, 0.0))
    t_train = markers.end("train")
    markers.start("infer")
    _, passes, _ = repeat_phase(lambda: _busy(max(infer_s, 0.0)), min_phase_s(req), lambda: None)
    t_infer = markers.end("infer", passes=passes) / passes
    results = {"train_time_s": t_train, "infer_time_s": t_infer, "train_loss": 0.0, "test_accuracy": 1.0,
               "param_count": 0, "planted_slowdown": factor, "infer_passes": passes}
    mode = str(wl.get("tf32") or "native")
    return results, {"framework": req["framework"], "framework_version": "calibrated", "device": "cpu",
                     "device_kind": "cpu", "device_name": "cpu", "gpu_uuid": None, "gpu_uuids": [],
                     "tf32": {"mode": mode, "matmul": None, "conv": None}, "precision": None}
