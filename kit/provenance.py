"""Host provenance: what the manifest records about the machine and the kit.

Everything a reader needs to judge whether two runs are comparable: CPU and
its frequency governor, memory, kernel, GPUs (from NVML), the kit's version
and git commit. Readers take injectable /sys and /proc roots so tests can
describe machines that are not this one.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import TypedDict

import kit
from kit.records import JsonTable

REPO_ROOT = Path(kit.__file__).resolve().parent.parent


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def cpu_model(procfs_root: Path = Path("/proc")) -> str:
    text = _read(procfs_root / "cpuinfo") or ""
    for line in text.splitlines():
        if line.lower().startswith(("model name", "hardware", "cpu model")):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


# CPU features that decide which kernels oneDNN, MKL, Eigen and ATen dispatch to (and whether TensorFlow
# enables oneDNN at all by default): two hosts that differ here may rank the frameworks differently.
KERNEL_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")
# Settings of the frameworks' CPU kernels read from the environment (recorded; the kit pins some, see README)
KERNEL_ENV = ("TF_ENABLE_ONEDNN_OPTS", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY",
              "MKL_ENABLE_INSTRUCTIONS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TF_XLA_FLAGS")


class CpuIdentity(TypedDict):
    """The manifest's ``host.cpu``."""

    vendor: str | None
    family: int | None
    model: int | None
    stepping: int | None
    isa: list[str]  # the kernel-relevant flags of KERNEL_FLAGS CPU 0 has


class CpuFreq(TypedDict):
    """The manifest's ``host.cpu_freq``."""

    governors: list[str]
    readable: bool
    intel_no_turbo: bool | None
    boost: bool | None


class GitCommit(TypedDict):
    commit: str | None
    dirty: bool | None


class KitProvenance(TypedDict):
    """The manifest's ``kit``."""

    version: str
    commit: str | None
    dirty: bool | None


class HostProvenance(TypedDict):
    """The manifest's ``host`` (and each node's, kit.run.host)."""

    hostname: str
    os: str
    kernel: str
    machine: str
    cpu_model: str
    cpu: CpuIdentity
    cpu_logical: int | None
    cpu_physical: int | None
    cpu_freq: CpuFreq
    memory_total_bytes: int
    python: str
    gpus: list[JsonTable]  # kit.collectors.nvml.gpu_inventory's rows
    env: dict[str, str]


def cpu_identity(procfs_root: Path = Path("/proc")) -> CpuIdentity:
    """Vendor, family/model/stepping and the kernel-relevant ISA flags of CPU 0.

    Virtual machines often report only "AMD EPYC" as the model name; family
    and model tell the generation (e.g. AMD family 25 = Zen 3/4, 26 = Zen 5),
    and the flags say whether AVX-512 or VNNI kernels exist at all.
    """
    text = _read(procfs_root / "cpuinfo") or ""
    first = text.split("\n\n", 1)[0]
    fields: dict[str, str] = {}
    for line in first.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            fields.setdefault(k.strip().lower(), v.strip())
    flags = set(fields.get("flags", "").split())

    def num(key: str) -> int | None:
        v = fields.get(key, "")
        return int(v) if v.isdigit() else None

    return {"vendor": fields.get("vendor_id"), "family": num("cpu family"), "model": num("model"),
            "stepping": num("stepping"), "isa": [f for f in KERNEL_FLAGS if f in flags]}


def cpu_governors(sysfs_root: Path = Path("/sys")) -> CpuFreq:
    """Frequency governors in use (``performance`` is what benchmarks want)."""
    base = sysfs_root / "devices" / "system" / "cpu"
    govs = sorted({g for p in base.glob("cpu[0-9]*/cpufreq/scaling_governor") if (g := _read(p))})
    no_turbo = _read(base / "intel_pstate" / "no_turbo")
    boost = _read(base / "cpufreq" / "boost")
    return {
        "governors": govs,
        "readable": bool(govs),
        "intel_no_turbo": None if no_turbo is None else no_turbo == "1",
        "boost": None if boost is None else boost == "1",
    }


def os_release(etc_root: Path = Path("/etc")) -> str:
    text = _read(etc_root / "os-release") or ""
    for line in text.splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip('"')
    return platform.platform()


def git_commit(root: Path = REPO_ROOT) -> GitCommit:
    """The kit's commit and whether the tree had local changes (None outside git)."""
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def gpu_inventory() -> list[JsonTable]:
    """Static facts per GPU from NVML; [] where NVML is absent."""
    try:
        from kit.collectors.nvml import gpu_inventory as inventory
    except ImportError:  # pragma: no cover - collectors not installed
        return []
    try:
        return inventory()
    except Exception:
        return []


def host_provenance(sysfs_root: Path = Path("/sys"), procfs_root: Path = Path("/proc")) -> HostProvenance:
    import psutil

    mem = psutil.virtual_memory()
    return {
        "hostname": socket.gethostname(),
        "os": os_release(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpu_model": cpu_model(procfs_root),
        "cpu": cpu_identity(procfs_root),
        "cpu_logical": psutil.cpu_count(logical=True),
        "cpu_physical": psutil.cpu_count(logical=False),
        "cpu_freq": cpu_governors(sysfs_root),
        "memory_total_bytes": mem.total,
        "python": sys.version.split()[0],
        "gpus": gpu_inventory(),
        "env": {k: os.environ[k] for k in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID", *KERNEL_ENV) if k in os.environ},
    }


def kit_provenance() -> KitProvenance:
    git = git_commit()
    return {"version": kit.__version__, "commit": git["commit"], "dirty": git["dirty"]}
