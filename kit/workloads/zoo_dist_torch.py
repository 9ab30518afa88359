"""Data-parallel training in PyTorch: one device, DataParallel, DistributedDataParallel (Patel et al. VI-E).

Weak scaling: every device gets ``batch_size`` images per step, so N devices
process N x batch_size; speed-up = throughput on N devices / throughput on one.
``single`` trains in this process on one device; ``dp`` wraps the model in
``nn.DataParallel`` (CUDA devices only, one process); ``ddp`` starts
``devices`` processes with torchrun (``python -m torch.distributed.run
--standalone``), NCCL on GPUs and gloo on CPUs, and rank 0 writes the phase
markers and the step times. On a CPU each device is one core (one thread).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from kit.workloads import cuda_driver, zoo
from kit.workloads import device as devmod
from kit.workloads.common import Markers, SkipTrial, WorkloadError, die_with_parent
from kit.workloads.torch_env import apply_tf32, device_sync, gpu_uuid, is_oom, torch_env
from kit.workloads.zoo_torch import build, param_count

__all__ = ["dist_device", "is_oom", "run", "train_loop"]


def dist_device(want: str, devices: int, strategy: str, trial_device: str = "auto") -> str:
    """'gpu' or 'cpu' for this trial, SkipTrial with the reason, or DeviceUnavailable.

    ``trial_device`` is the request's (resolved) device: a CPU trial never
    takes GPUs. A GPU the CUDA driver lists but PyTorch cannot use is an
    error, never a silent CPU run.
    """
    if want == "auto" and trial_device in ("cpu", "gpu"):
        # resolved by the host with the same-kind rule over every strategy of the study; the trial
        # sees only the GPUs it was given (one for the baseline), so it must not re-decide from its count
        want = trial_device
    n_gpu = torch.cuda.device_count() if want != "cpu" and torch.cuda.is_available() else 0
    if want != "cpu":
        driver = cuda_driver.probe()
        if driver.count > n_gpu:
            raise devmod.unusable("pytorch", torch.__version__, torch.version.cuda, driver,
                                  "gpu" if want == "gpu" else "auto",
                                  f"PyTorch sees {n_gpu} CUDA device(s), the driver {driver.count}")
    need = 1 if strategy == "single" else devices
    if want == "gpu" and n_gpu < need:
        raise SkipTrial(f"strategy {strategy} on {need} GPU(s) asked for, this host has {n_gpu}")
    # auto: GPUs only when the multi-device strategies can have them too, so that every strategy
    # (the one-device baseline included) runs on the same kind of device and speed-ups compare like with like
    kind = "gpu" if want == "gpu" or (want == "auto" and n_gpu >= devices) else "cpu"
    if strategy == "dp" and kind == "cpu":
        raise SkipTrial(f"DataParallel replicates over CUDA devices only; this host has {n_gpu} GPU(s), "
                        f"{devices} needed (the CPU path is DistributedDataParallel with gloo)")
    if kind == "cpu":
        zoo.check_cpu_devices(strategy, need, os.sched_getaffinity(0))
    return kind


def train_loop(model: nn.Module, x: torch.Tensor, y: torch.Tensor, wl: dict[str, Any], device: torch.device,
               markers: Markers | None, barrier: Any = None) -> list[float]:
    """Warm-up, then ``repeats`` timed SGD steps; phase markers only where ``markers`` is given (rank 0)."""
    opt = torch.optim.SGD(model.parameters(), lr=float(wl["learning_rate"]), momentum=float(wl["momentum"]))
    loss_fn = nn.CrossEntropyLoss()
    model.train()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss_fn(out.reshape(-1, out.shape[-1]), y.reshape(-1)).backward()
        opt.step()

    for _ in range(int(wl["warmup_steps"])):
        step()
    device_sync(device)
    if barrier:
        barrier()
    if markers:
        markers.start("train")
    steps = []
    for _ in range(int(wl["repeats"])):
        t0 = time.perf_counter()
        step()
        device_sync(device)
        steps.append(time.perf_counter() - t0)
    if barrier:
        barrier()
    if markers:
        markers.end("train")
    return steps


def _inputs(wl: dict[str, Any], batch: int, seed: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = zoo.input_batch(wl["model"], batch, int(wl["image_size"]), int(wl["seq_len"]), bool(wl["tiny"]),
                           int(wl["num_classes"]), seed, False)
    return torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)


def run(req: dict[str, Any], data_dir: Path, markers: Markers) -> tuple[dict[str, Any], dict[str, Any]]:
    wl, seed = req["workload"], int(req["seed"])
    zoo.check_params(wl)
    strategy, n_dev, bs = wl["strategy"], int(wl["devices"]), int(wl["batch_size"])
    kind = dist_device(wl["dist_device"], n_dev, strategy, devmod.requested(req))
    if strategy == "single":
        n_dev = 1
    tf32 = apply_tf32(devmod.tf32_mode(req))
    torch.manual_seed(seed)
    results: dict[str, Any] = {"strategy": strategy, "devices": n_dev, "device_kind": kind,
                               "per_device_batch": bs, "global_batch": bs * n_dev}
    if strategy == "ddp":
        steps, env = _run_ddp(req, markers, n_dev, kind)
    else:
        device = torch.device("cuda:0" if kind == "gpu" else "cpu")
        if kind == "cpu":
            torch.set_num_threads(1)  # one device = one core
        markers.sync = lambda: device_sync(device)
        model = build(wl["model"], int(wl["num_classes"]), bool(wl["tiny"]), int(wl["seq_len"])).to(device)
        results["param_count"] = param_count(model)
        if strategy == "dp":
            model = nn.DataParallel(model, device_ids=list(range(n_dev)))
        x, y = _inputs(wl, bs * n_dev, seed, device)
        steps = train_loop(model, x, y, wl, device, markers)
        uuids = used_uuids(kind, n_dev, req)
        env = torch_env(device, devmod.tf32_record(devmod.tf32_mode(req), tf32["matmul"], tf32["conv"], kind == "gpu"),
                        "fp32", conv_dominant=wl["model"] in zoo.VISION, uuids=uuids)
    total = sum(steps)
    results.update(train_step_s=steps, train_time_s=total, train_throughput_ips=bs * n_dev * len(steps) / total)
    env["dist_backend"] = {"ddp": "nccl" if kind == "gpu" else "gloo"}.get(strategy)
    return results, env


def used_uuids(kind: str, n_dev: int, req: devmod.JsonTable) -> list[str] | None:
    """The UUIDs of cuda:0..n_dev-1, each checked against the GPUs the kit gave the trial."""
    if kind != "gpu":
        return None
    uuids = [gpu_uuid(torch.device(f"cuda:{i}")) for i in range(n_dev)]
    for u in uuids:
        devmod.check_uuid(devmod.expected_uuids(req), u, "pytorch", req.get("gpu_indices"))
    return [u for u in uuids if u]


def _run_ddp(req: devmod.JsonTable, markers: Markers, n_dev: int, kind: str) -> tuple[list[float], dict[str, Any]]:
    """Start ``n_dev`` ranks with torchrun; rank 0 reports its step times through a JSON file."""
    work = markers.path.parent
    req_path, out_path = work / "ddp_request.json", work / "ddp_rank0.json"
    req_path.write_text(json.dumps({**req, "kind": kind, "markers": str(markers.path)}), encoding="utf-8")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n_dev}",
           "-m", "kit.workloads.zoo_ddp_worker", str(req_path), str(out_path)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    markers.event("ddp_launch", cmd=cmd)
    # torchrun dies with this harness (which dies with the kit), and each rank with torchrun
    # (zoo_ddp_worker.main): a kill -9 of the kit, a time limit or Ctrl-C leaves no rank behind.
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=None, preexec_fn=die_with_parent)
    if proc.returncode != 0 or not out_path.exists():
        tail = (proc.stdout + proc.stderr)[-3000:]
        if any(t in tail.lower() for t in ("out of memory", "outofmemoryerror", "cannot allocate memory")):
            raise torch.cuda.OutOfMemoryError(f"a DDP rank ran out of memory: {tail[-500:]}")
        raise WorkloadError(f"torchrun exited with {proc.returncode}: {tail}")
    out = json.loads(out_path.read_text(encoding="utf-8"))
    return out["steps"], out["env"]
