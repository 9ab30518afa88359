"""``python3 -m kit.doctor torch-index|driver-check``: the Makefile's questions about torch (``make setup``), asked
before the virtual environment exists, so this module and what it imports use the standard library only."""

from __future__ import annotations

import sys

from kit.doctor.drivers import TF_CUDA, driver_fits, nvidia_driver, torch_choice
from kit.doctor.torch_cpu import cpu_torch_choice, kept_pair


def main(argv: list[str]) -> int:
    """``python3 -m kit.doctor torch-index [DRIVER]``: print pip's index option for torch (empty: PyPI).

    ``python3 -m kit.doctor torch-index --cpu 'torch==A torchvision==B' [--default 'torch==C torchvision==D']``: for
    a host without an NVIDIA GPU, print pip's arguments for torch (index option and pins: ``cpu_torch_choice``) and
    say on stderr where they come from, or what the default build costs.

    ``python3 -m kit.doctor driver-check [DRIVER]``: say on stderr what was chosen and why; exit 1 when no torch
    CUDA build fits the driver. DRIVER defaults to NVML's, else ``nvidia-smi``'s.
    """
    if not argv or argv[0] not in ("torch-index", "driver-check"):
        print("usage: python3 -m kit.doctor torch-index|driver-check [DRIVER]", file=sys.stderr)
        return 2
    if argv[0] == "torch-index" and argv[1:2] == ["--cpu"]:
        return _cpu_index_main(argv[2:])
    driver = argv[1] if len(argv) > 1 else (nvidia_driver()[0] or _smi_driver())
    if not driver:
        print("kit: no NVIDIA driver found (nvidia-smi); keeping the default torch wheel (`torch-index --cpu PAIR` "
              "picks a CPU build)", file=sys.stderr)
        return 0 if argv[0] == "torch-index" else 1
    choice = torch_choice(driver)
    if argv[0] == "torch-index":
        if choice["index_url"]:
            print(f"--index-url {choice['index_url']}")
        return 0
    print(f"kit: NVIDIA driver {driver}: {choice['reason']}", file=sys.stderr)
    tf_ok, tf_why = driver_fits(driver, TF_CUDA)
    print(f"kit: NVIDIA driver {driver}: tensorflow[and-cuda] 2.21 (CUDA {TF_CUDA}): "
          + (tf_why if tf_ok else f"cannot run: {tf_why}"), file=sys.stderr)
    return 0 if choice["ok"] and tf_ok else 1


def _cpu_index_main(args: list[str]) -> int:
    if len(args) not in (1, 3) or (len(args) == 3 and args[1] != "--default"):
        print("usage: python3 -m kit.doctor torch-index --cpu 'torch==A torchvision==B' "
              "[--default 'torch==C torchvision==D']", file=sys.stderr)
        return 2
    try:
        kept = kept_pair(args[0], args[2] if len(args) == 3 else None)
        choice = kept or cpu_torch_choice(args[0], args[2] if len(args) == 3 else None)
    except ValueError as exc:
        print(f"kit: torch-index --cpu: {exc}", file=sys.stderr)
        return 2
    for line in choice["reason"].splitlines():
        print(f"kit: {line}", file=sys.stderr)
    print(" ".join(choice["args"]))
    return 0


def _smi_driver() -> str | None:
    import subprocess

    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [ln.strip() for ln in p.stdout.splitlines() if ln.strip()]
    return lines[0] if p.returncode == 0 and lines else None
