"""PyTorch device choice, TF32, synchronisation, out-of-memory test and version report (inside the image).

``pick_device`` never falls back to the CPU in silence: see
:mod:`kit.workloads.device` for the rule and the error it raises.
"""

from __future__ import annotations

from typing import Any, TypedDict

import torch

from kit.workloads import cuda_driver
from kit.workloads import device as devmod
from kit.workloads.common import oom_text


def pick_device(want: str, gpu_uuids: list[str] | None = None, req: devmod.JsonTable | None = None) -> torch.device:
    """``cpu`` -> the CPU; ``gpu`` -> cuda:0 or DeviceUnavailable; ``auto`` -> ``gpu`` when the driver lists a GPU.

    ``gpu_uuids`` (the request's) are the GPUs the kit gave the trial: cuda:0
    must be one of them. ``req`` may stand in for both arguments' sources.
    """
    if req is not None:
        gpu_uuids = devmod.expected_uuids(req) if gpu_uuids is None else gpu_uuids
    if want == "cpu":
        return torch.device("cpu")
    driver = cuda_driver.probe()
    if devmod.decide(want, driver) == "cpu" and not torch.cuda.is_available():
        return torch.device("cpu")
    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        detail = "torch.cuda.is_available() is False"
        if torch.version.cuda is None:
            detail += " (this torch has no CUDA support)"
        raise devmod.unusable("pytorch", torch.__version__, torch.version.cuda, driver, want, detail)
    device = torch.device("cuda:0")
    devmod.check_uuid(gpu_uuids, gpu_uuid(device, driver), "pytorch", (req or {}).get("gpu_indices"))
    return device


def gpu_uuid(device: torch.device, driver: cuda_driver.DriverInfo | None = None) -> str | None:
    """The UUID of the CUDA device, as NVML prints it ("GPU-..."), from PyTorch or else the driver."""
    if device.type != "cuda":
        return None
    try:
        u = devmod.normalise_uuid(getattr(torch.cuda.get_device_properties(device), "uuid", None))
    except Exception:
        u = None
    if u is None:
        driver = driver or cuda_driver.probe()
        idx = device.index or 0
        u = driver.devices[idx].uuid if idx < driver.count else None
    return u


def apply_tf32(mode: str) -> dict[str, bool]:
    """Set TF32 for float32 matmuls and cuDNN convolutions; native leaves PyTorch's defaults (matmul off, conv on)."""
    if mode not in devmod.TF32_MODES:
        raise ValueError(f"tf32 mode {mode!r}")
    if mode != "native":
        torch.backends.cuda.matmul.allow_tf32 = mode == "on"
        torch.backends.cudnn.allow_tf32 = mode == "on"
    return {"matmul": bool(torch.backends.cuda.matmul.allow_tf32), "conv": bool(torch.backends.cudnn.allow_tf32)}


def setup(req: devmod.JsonTable, want: str | None = None) -> tuple[torch.device, devmod.Tf32Json]:
    """Device and TF32 for one trial: (device, the env["tf32"] record)."""
    device = pick_device(want or devmod.requested(req), req=req)
    mode = devmod.tf32_mode(req)
    flags = apply_tf32(mode)
    return device, devmod.tf32_record(mode, flags["matmul"], flags["conv"], device.type == "cuda")


def device_sync(device: torch.device) -> None:
    """Wait for queued device work so a clock read after it is true."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def is_oom(exc: BaseException) -> bool:
    """The one out-of-memory test of every PyTorch workload (CUDA allocator, host allocator, any wording)."""
    return isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)) or oom_text(exc)


class CpuKernels(TypedDict):
    """``env["cpu_kernels"]`` of a PyTorch trial (the analysis compares it across trials and hosts)."""

    onednn: bool
    cpu_capability: str | None
    inter_op_threads: int
    onednn_max_cpu_isa: str | None


def cpu_kernels() -> CpuKernels:
    """Which CPU kernels PyTorch dispatches to (ATen capability, oneDNN) and the settings that choose them."""
    import os

    try:
        capability: str | None = torch.backends.cpu.get_cpu_capability()
    except Exception:
        capability = None
    return {"onednn": bool(torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled),
            "cpu_capability": capability, "inter_op_threads": torch.get_num_interop_threads(),
            "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA")}


def torch_env(device: torch.device, tf32: devmod.Tf32Json | None = None, precision: str | None = "fp32",
              conv_dominant: bool = True, uuids: list[str] | None = None) -> dict[str, Any]:
    """Versions, device and precision as seen from inside the trial process (the contract's env fields)."""
    gpu = device.type == "cuda"
    tf32 = tf32 if tf32 is not None else devmod.tf32_record("native", None, None, False)
    cc = tuple(torch.cuda.get_device_capability(device)) if gpu else None
    env: dict[str, Any] = {
        "framework": "pytorch",
        "framework_version": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "device": str(device),
        "threads": torch.get_num_threads(),
        "cpu_kernels": cpu_kernels(),
        # deterministic kernels (torch.use_deterministic_algorithms): the analysis's loss tolerance says which applied
        "deterministic": bool(torch.are_deterministic_algorithms_enabled()),
        **devmod.device_fields(
            "gpu" if gpu else "cpu", torch.cuda.get_device_name(device) if gpu else "cpu",
            gpu_uuid(device), uuids, tf32,
            None if precision is None else (devmod.precision_used(precision, tf32, cc, conv_dominant)  # type: ignore[arg-type]
                                            if gpu else precision)),
    }
    if gpu:
        env["compute_capability"] = list(cc) if cc else None
        env["gpu_mem_peak_bytes"] = int(torch.cuda.max_memory_allocated(device))
    return env
