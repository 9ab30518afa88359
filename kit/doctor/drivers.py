"""The NVIDIA driver against the CUDA the frameworks were built for, and the PyTorch wheel that fits a driver.

The one table of driver versions each CUDA release needs lives here (``CUDA_TOOLKIT_DRIVER``,
``CUDA_MINOR_COMPAT_DRIVER``), used by ``kit doctor``, ``kit selftest`` and the Makefile (``python3 -m kit.doctor
torch-index``, which runs before the virtual environment exists: standard library only at import time).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from pathlib import Path
from typing import TypedDict

from kit.doctor.findings import Finding, finding


class TorchChoice(TypedDict):
    """The PyTorch wheel flavour for a driver: ``index_url`` None is PyPI's wheel; ``ok`` False: none fits."""

    flavour: str | None
    index_url: str | None
    ok: bool
    reason: str


# -- NVIDIA driver vs the CUDA the frameworks were built for ---------------------------------------------------------
#
# From NVIDIA's CUDA Toolkit release notes ("CUDA Toolkit and Corresponding Driver Versions", Linux x86_64) and the
# CUDA compatibility guide ("Minor Version Compatibility": CUDA 12.x runs on >= 525 drivers, 13.x on >= 580, with
# a limited feature set: no PTX JIT of code newer than the driver). Sources:
#   https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/  (table 3)
#   https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html

CUDA_TOOLKIT_DRIVER: dict[str, str] = {  # CUDA major.minor -> the driver of its GA release (full feature set)
    "11.8": "520.61.05",
    "12.0": "525.60.13",
    "12.1": "530.30.02",
    "12.2": "535.54.03",
    "12.3": "545.23.06",
    "12.4": "550.54.14",
    "12.5": "555.42.02",
    "12.6": "560.28.03",
    "12.8": "570.26",
    "12.9": "575.51.03",
    "13.0": "580.65.06",
}
CUDA_MINOR_COMPAT_DRIVER: dict[int, str] = {  # CUDA major -> the oldest driver that runs any of its minor releases
    11: "450.80.02",
    12: "525.60.13",
    13: "580",
}
# The CUDA flavours PyTorch publishes wheels for (index https://download.pytorch.org/whl/<flavour>), newest first.
# PyPI's plain `torch` wheel is the newest flavour (torch 2.14: CUDA 13.0).
TORCH_INDEX = "https://download.pytorch.org/whl"
TORCH_FLAVOURS: tuple[str, ...] = ("cu130", "cu128", "cu126")
TORCH_PYPI_FLAVOUR = "cu130"
TF_CUDA = "12.5.1"  # tensorflow[and-cuda] 2.21 (its wheel's build_info; the pip CUDA libraries are >= 12.5)


def version_tuple(v: str) -> tuple[int, ...]:
    """'550.54.15' -> (550, 54, 15); non-numeric parts end the tuple."""
    out = []
    for part in str(v).strip().split("+", 1)[0].split("."):
        digits = "".join(ch for ch in part if ch.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def _cuda_key(cuda: str) -> str:
    t = version_tuple(cuda)
    return f"{t[0]}.{t[1] if len(t) > 1 else 0}" if t else ""


def flavour_cuda(flavour: str) -> str:
    """'cu126' -> '12.6', 'cu130' -> '13.0'."""
    digits = flavour.removeprefix("cu")
    return f"{digits[:-1]}.{digits[-1]}"


def driver_cuda(driver: str) -> str | None:
    """The newest CUDA major.minor whose GA driver this driver reaches (None: older than every row)."""
    d = version_tuple(driver)
    fits = [c for c, need in CUDA_TOOLKIT_DRIVER.items() if d >= version_tuple(need)]
    return max(fits, key=version_tuple) if fits else None


def driver_fits(driver: str, cuda: str) -> tuple[bool, str]:
    """Can a framework built for ``cuda`` run on ``driver``? (ok, how or why not)."""
    key = _cuda_key(cuda)
    if not key:
        return True, "no CUDA (CPU build)"
    d = version_tuple(driver)
    major = version_tuple(key)[0]
    ga = CUDA_TOOLKIT_DRIVER.get(key)
    if ga is not None and d >= version_tuple(ga):
        return True, f"driver {driver} >= {ga}, the driver of CUDA {key}"
    compat = CUDA_MINOR_COMPAT_DRIVER.get(major)
    if compat is not None and d >= version_tuple(compat):
        return True, (f"driver {driver} runs CUDA {key} through minor-version compatibility (>= {compat}; "
                      f"the full feature set wants >= {ga or 'a newer driver'})")
    need = compat or ga or "a newer driver"
    return False, f"CUDA {key} needs a driver >= {need}; this host has {driver}"


def torch_choice(driver: str) -> TorchChoice:
    """The PyTorch wheel flavour that fits ``driver``: {"flavour", "index_url" (None: PyPI), "ok", "reason"}.

    The newest flavour the driver runs at its full feature set; else the oldest CUDA 12 flavour through minor-version
    compatibility; none below 525.60.13 (then ``ok`` is False).
    """
    full = [f for f in TORCH_FLAVOURS if (need := CUDA_TOOLKIT_DRIVER.get(flavour_cuda(f)))
            and version_tuple(driver) >= version_tuple(need)]
    if full:
        f = full[0]
        how = f"driver {driver} >= {CUDA_TOOLKIT_DRIVER[flavour_cuda(f)]} (CUDA {flavour_cuda(f)})"
    else:
        compat = [f for f in reversed(TORCH_FLAVOURS) if driver_fits(driver, flavour_cuda(f))[0]]
        if not compat:
            return {"flavour": None, "index_url": None, "ok": False,
                    "reason": (f"driver {driver} is older than every CUDA build of torch "
                               f"({', '.join(TORCH_FLAVOURS)}: >= {CUDA_MINOR_COMPAT_DRIVER[12]}); update the "
                               "NVIDIA driver (nvidia-smi shows it), or run the CPU build")}
        f = compat[0]
        how = driver_fits(driver, flavour_cuda(f))[1]
    index = None if f == TORCH_PYPI_FLAVOUR else f"{TORCH_INDEX}/{f}"
    where = "PyPI's default wheel" if index is None else f"--index-url {index}"
    return {"flavour": f, "index_url": index, "ok": True, "reason": f"torch {f} ({where}): {how}"}


def nvidia_driver() -> tuple[str | None, str | None]:
    """(driver version, the CUDA version the driver supports) from NVML; (None, None) without a driver."""
    from kit.nvml import cuda_version, nvml_session, text

    try:
        with nvml_session() as nv:
            driver = text(nv.nvmlSystemGetDriverVersion())
            try:
                cuda = cuda_version(int(nv.nvmlSystemGetCudaDriverVersion()))
            except Exception:  # an old driver without the query
                cuda = None
            return driver, cuda
    except Exception:  # no NVML here (NVMLError from the session) or no driver version
        return None, None


def framework_cuda() -> dict[str, str | None]:
    """The CUDA each installed framework was built for, read without importing the frameworks.

    torch: ``torch/version.py`` (``cuda = '13.0'``, None for the CPU build); TensorFlow: the CUDA pip libraries its
    wheel depends on (``tensorflow[and-cuda]`` pulls nvidia-cuda-runtime-cu12; ``tensorflow-cpu`` none) and, where
    present, ``tensorflow/python/platform/build_info.py``.
    """
    out: dict[str, str | None] = {}
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin:
        ver = Path(spec.origin).with_name("version.py")
        cuda = None
        try:
            for line in ver.read_text(encoding="utf-8").splitlines():
                if line.startswith("cuda") and "=" in line:
                    val = line.split("=", 1)[1].split("#", 1)[0].strip().strip("'\"")
                    cuda = None if val in ("None", "") else val
        except OSError:
            pass
        out["pytorch"] = cuda
    tf_spec = importlib.util.find_spec("tensorflow")
    if tf_spec is not None and tf_spec.submodule_search_locations:
        base = Path(next(iter(tf_spec.submodule_search_locations)))
        cuda = None
        try:
            text = (base / "python" / "platform" / "build_info.py").read_text(encoding="utf-8")
            m = re.search(r"""['"]cuda_version['"]\s*[,:]\s*['"]([^'"]*)['"]""", text)
            cuda = m.group(1) if m and m.group(1) else None
        except OSError:
            pass
        if cuda is None:
            for dist in ("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11"):
                try:
                    v = version_tuple(importlib.metadata.version(dist))
                    cuda = f"{v[0]}.{v[1]}"
                    break
                except importlib.metadata.PackageNotFoundError:
                    continue
        out["tensorflow"] = cuda
    return out


def check_driver(driver: str | None = None, cudas: dict[str, str | None] | None = None) -> list[Finding]:
    """The NVIDIA driver against the CUDA of each installed framework, and the torch build that fits."""
    if driver is None:
        driver, driver_max = nvidia_driver()
    else:
        driver_max = driver_cuda(driver)
    if driver is None:
        return [finding("NVIDIA driver", False, "no NVIDIA driver (NVML) on this host: CPU trials only",
                        "on an NVIDIA host install the driver; `nvidia-smi` must work")]
    out = [finding("NVIDIA driver", True, f"{driver} (supports CUDA up to {driver_max or '?'})")]
    cudas = framework_cuda() if cudas is None else cudas
    for fw, cuda in cudas.items():
        if cuda is None:
            out.append(finding(f"{fw} build vs driver", False, f"{fw} is a CPU build: it cannot use this host's GPU",
                               _fit_fix(fw, driver), optional=False))
            continue
        ok, why = driver_fits(driver, cuda)
        ga = CUDA_TOOLKIT_DRIVER.get(_cuda_key(cuda))
        if ok and fw == "tensorflow" and ga and version_tuple(driver) < version_tuple(ga):
            why += (f"; but TensorFlow ships only PTX (compute_90) for Hopper and newer GPUs, which the driver must "
                    f"JIT-compile, and minor-version compatibility does not cover PTX: on those GPUs use a driver "
                    f">= {ga}")
        out.append(finding(f"{fw} build vs driver", ok, f"built for CUDA {cuda}: {why}", _fit_fix(fw, driver),
                           optional=False))
    choice = torch_choice(driver)
    out.append(finding("torch build for this driver", choice["ok"], choice["reason"],
                       "update the NVIDIA driver (>= 525.60.13 for CUDA 12, >= 580 for CUDA 13)"))
    return out


def _fit_fix(framework: str, driver: str) -> str:
    if framework == "pytorch":
        c = torch_choice(driver)
        if not c["ok"]:
            return c["reason"]
        idx = f" --index-url {c['index_url']}" if c["index_url"] else ""
        return (f"pip install{idx} 'torch==<version>' (the {c['flavour']} build; `make setup` on this host picks it), "
                f"or run in an image row that fits (kit images list)")
    return ("pip install 'tensorflow[and-cuda]' (CUDA 12 wheels, driver >= 525.60.13), or update the driver; "
            "images: tensorflow-2.21-cu125")
