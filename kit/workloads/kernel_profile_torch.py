"""A profile trial in PyTorch: torch.profiler around the training steps of zoo_torch's train phase.

The trial runs ``kit.workloads.zoo_torch.run`` unchanged (same model, factors, warm-up and step) with
:class:`kit.workloads.kernel_profile.ProfileMarkers` in place of the harness's markers: the profiler starts
when the train phase starts (after the warm-up) and stops when it ends, over ``profile_steps`` steps. Its
results are the kernel tables and what ran; the wrapped run's times are dropped (profiling perturbs them).

Tables: ``cpu``, every op's self CPU time (key_averages' self_cpu_time_total, re-added from the event tree
so that ops under ``Optimizer.step`` are keyed ``Optimizer.step/<op>``, the optimizer's update, as
TensorFlow's ``sgd/`` scope is); ``gpu``, where CUDA activity was recorded, every kernel's self device time
(key_averages' self_device_time_total of device events: kernels, memcpy, memset).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from kit.workloads import kernel_profile as kp
from kit.workloads.common import Markers

US = 1e-6


def cpu_totals(events: Any) -> list[kp.OpTotal]:
    """Per name, self CPU seconds and calls of the host-side events; an op under Optimizer.step is keyed
    ``Optimizer.step/<name>`` (its update arithmetic, not the model's)."""
    acc: dict[str, list[float]] = {}
    for e in events:
        if getattr(e, "device_type", None) is not None and "CUDA" in str(e.device_type):
            continue
        name = str(e.key if hasattr(e, "key") else e.name)
        parent = getattr(e, "cpu_parent", None)
        depth = 0
        while parent is not None and depth < 256:
            if str(parent.name).startswith("Optimizer.step"):
                name = f"Optimizer.step/{name}"
                break
            parent, depth = getattr(parent, "cpu_parent", None), depth + 1
        a = acc.setdefault(name, [0.0, 0])
        a[0] += float(e.self_cpu_time_total) * US
        a[1] += 1
    return [kp.OpTotal(n, s, int(c)) for n, (s, c) in acc.items()]


def device_totals(averages: Any) -> list[kp.OpTotal]:
    """Per kernel name, self device seconds and calls from key_averages (device events only)."""
    out = []
    for e in averages:
        t = float(getattr(e, "self_device_time_total", 0.0) or 0.0)
        if "CUDA" in str(getattr(e, "device_type", "")) and t > 0:
            out.append(kp.OpTotal(str(e.key), t * US, int(e.count)))
    return out


def run(req: dict[str, Any], data_dir: Path, markers: Markers) -> tuple[dict[str, Any], dict[str, Any]]:
    sub = kp.profile_request(req)  # first: a skipped repetition costs no framework import
    import torch
    from torch.profiler import ProfilerActivity, profile

    from kit.workloads import zoo_torch

    steps = int(sub["workload"]["repeats"])
    want_gpu = torch.cuda.is_available()  # a CPU trial on a GPU host records no kernel: no gpu table
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if want_gpu else [])
    prof = profile(activities=activities)
    pm = kp.ProfileMarkers(markers, on_start=prof.__enter__, on_end=lambda: prof.__exit__(None, None, None))
    results, env = zoo_torch.run(sub, data_dir, cast(Markers, pm))  # a stand-in with Markers' methods
    if not pm.profiled:
        from kit.workloads.common import WorkloadError

        raise WorkloadError("the profile trial ran no train phase to profile (mode must be train_infer)")
    tables = [kp.build_table("cpu", "torch.profiler: self CPU time per op", steps, cpu_totals(prof.events()))]
    gpu = device_totals(prof.key_averages()) if want_gpu else []
    if gpu:
        tables.append(kp.build_table("gpu", "torch.profiler (CUPTI): self device time per kernel", steps, gpu))
    note = "" if want_gpu else "no CUDA device in this trial: CPU ops only"
    out = {k: results[k] for k in kp.KEPT_RESULTS if k in results}
    out["kernel_profile"] = kp.profile_result("pytorch", tables, note)
    return out, env
