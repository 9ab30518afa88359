"""PyTorch device choice, synchronisation and version report (inside the image)."""

from __future__ import annotations

from typing import Any

import torch


def pick_device(want: str) -> torch.device:
    """``auto`` takes the first CUDA device when there is one, else the CPU."""
    if want == "cpu":
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda:0")
    if want == "gpu":
        raise RuntimeError("the trial asks for a GPU but torch.cuda.is_available() is False")
    return torch.device("cpu")


def device_sync(device: torch.device) -> None:
    """Wait for queued device work so a clock read after it is true."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def torch_env(device: torch.device) -> dict[str, Any]:
    """Versions and device as seen from inside the trial process."""
    env: dict[str, Any] = {
        "framework": "pytorch",
        "framework_version": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        env["gpu_mem_peak_bytes"] = int(torch.cuda.max_memory_allocated(device))
    return env
