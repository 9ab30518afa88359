"""The CUDA driver as the trial process sees it, read through ``libcuda.so.1`` with ctypes.

Standard library only, and it never raises: on a host without the driver (or
without a GPU) :func:`probe` returns a :class:`DriverInfo` that says why. The
workloads ask it whether a GPU exists *before* asking the framework, so a
framework that cannot reach an existing GPU is an error with its cause, never
a silent CPU run (issue 13). The driver honours ``CUDA_VISIBLE_DEVICES``: the
devices listed are the ones given to this trial, numbered as the framework
numbers them (``CUDA_DEVICE_ORDER=PCI_BUS_ID`` makes that the NVML order).
"""

from __future__ import annotations

import ctypes
from dataclasses import asdict, dataclass, field
from typing import Any

CUDA_SUCCESS = 0
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
LIBRARY_NAMES = ("libcuda.so.1", "libcuda.so")


@dataclass
class CudaDevice:
    """One device as the driver lists it (ordinal = the framework's cuda:N / GPU:N)."""

    ordinal: int
    name: str | None = None
    uuid: str | None = None  # "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi / NVML print it
    pci_bus_id: str | None = None
    compute_capability: tuple[int, int] | None = None


@dataclass
class DriverInfo:
    """What the CUDA driver reports; ``reason`` says why ``available`` is False or devices are missing."""

    available: bool = False
    reason: str = ""
    driver_version: int | None = None  # cuDriverGetVersion: 1000 * major + 10 * minor (12040 = CUDA 12.4)
    devices: list[CudaDevice] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.devices)

    @property
    def cuda_version(self) -> str | None:
        """The newest CUDA this driver supports, "12.4" (what ``nvidia-smi`` prints as "CUDA Version")."""
        if not self.driver_version:
            return None
        return f"{self.driver_version // 1000}.{(self.driver_version % 1000) // 10}"

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["cuda_version"] = self.cuda_version
        for d in out["devices"]:
            if d["compute_capability"] is not None:
                d["compute_capability"] = list(d["compute_capability"])
        return out


def format_uuid(raw: bytes) -> str:
    """16 raw UUID bytes in NVML's spelling: GPU-8-4-4-4-12 lowercase hex."""
    h = raw.hex()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _error_name(lib: Any, code: int) -> str:
    try:
        ptr = ctypes.c_char_p()
        if lib.cuGetErrorName(ctypes.c_int(code), ctypes.byref(ptr)) == CUDA_SUCCESS and ptr.value:
            return f"{ptr.value.decode(errors='replace')} ({code})"
    except (AttributeError, OSError):
        pass
    return f"CUresult {code}"


def _load() -> tuple[Any, str]:
    last = ""
    for name in LIBRARY_NAMES:
        try:
            return ctypes.CDLL(name), ""
        except OSError as exc:
            last = str(exc)
    return None, f"the CUDA driver library (libcuda.so.1) is not loadable here ({last})"


def _device(lib: Any, ordinal: int) -> CudaDevice:
    dev = CudaDevice(ordinal)
    handle = ctypes.c_int()
    if lib.cuDeviceGet(ctypes.byref(handle), ctypes.c_int(ordinal)) != CUDA_SUCCESS:
        return dev
    buf = ctypes.create_string_buffer(256)
    if lib.cuDeviceGetName(buf, ctypes.c_int(len(buf)), handle) == CUDA_SUCCESS:
        dev.name = buf.value.decode(errors="replace")
    raw = (ctypes.c_ubyte * 16)()
    for fn in ("cuDeviceGetUuid_v2", "cuDeviceGetUuid"):
        f = getattr(lib, fn, None)
        if f is not None and f(ctypes.byref(raw), handle) == CUDA_SUCCESS:
            dev.uuid = format_uuid(bytes(raw))
            break
    bus = ctypes.create_string_buffer(64)
    if lib.cuDeviceGetPCIBusId(bus, ctypes.c_int(len(bus)), handle) == CUDA_SUCCESS:
        dev.pci_bus_id = bus.value.decode(errors="replace")
    major, minor = ctypes.c_int(), ctypes.c_int()
    if (lib.cuDeviceGetAttribute(ctypes.byref(major), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, handle)
            == CUDA_SUCCESS and lib.cuDeviceGetAttribute(ctypes.byref(minor),
                                                         CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, handle)
            == CUDA_SUCCESS):
        dev.compute_capability = (major.value, minor.value)
    return dev


def probe() -> DriverInfo:
    """Read the driver: version, the visible devices with name, UUID, PCI bus id, compute capability.

    Never raises. ``cuInit`` failing with CUDA_ERROR_NO_DEVICE (100) is the
    ordinary CPU host (or ``CUDA_VISIBLE_DEVICES=""``): available, zero devices.
    """
    try:
        lib, why = _load()
        if lib is None:
            return DriverInfo(reason=why)
        info = DriverInfo()
        version = ctypes.c_int()
        if lib.cuDriverGetVersion(ctypes.byref(version)) == CUDA_SUCCESS:
            info.driver_version = int(version.value)
        rc = lib.cuInit(ctypes.c_uint(0))
        if rc == 100:  # CUDA_ERROR_NO_DEVICE
            info.available = True
            info.reason = "the CUDA driver sees no device (none installed, or CUDA_VISIBLE_DEVICES hides them)"
            return info
        if rc != CUDA_SUCCESS:
            info.reason = f"cuInit failed: {_error_name(lib, rc)}"
            return info
        count = ctypes.c_int()
        rc = lib.cuDeviceGetCount(ctypes.byref(count))
        if rc != CUDA_SUCCESS:
            info.reason = f"cuDeviceGetCount failed: {_error_name(lib, rc)}"
            return info
        info.available = True
        info.devices = [_device(lib, i) for i in range(int(count.value))]
        if not info.devices:
            info.reason = "the CUDA driver sees no device"
        return info
    except Exception as exc:  # a broken library must not kill the trial before it can say why
        return DriverInfo(reason=f"reading the CUDA driver failed: {type(exc).__name__}: {exc}")


if __name__ == "__main__":  # pragma: no cover - a one-line check for users: python -m kit.workloads.cuda_driver
    import json

    print(json.dumps(probe().as_dict(), indent=1))
