"""A fake NVML for the collector logic, autospec'd against the real ``pynvml``.

Every ``nvml*`` function of the real module is replaced by an autospec'd
mock: a call with the wrong arguments fails as it would for real, a call to a
function the fake does not implement fails with AssertionError, and a fake
method whose name is not in ``pynvml`` (a misspelling) fails at install time.
The autospecs are built once per process (building 400+ costs ~0.4 s).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pynvml

_SPECS: dict[str, Any] = {}


def _specs() -> dict[str, Any]:
    if not _SPECS:
        for name in dir(pynvml):
            fn = getattr(pynvml, name)
            if name.startswith("nvml") and inspect.isfunction(fn):
                _SPECS[name] = mock.create_autospec(fn)
    return _SPECS


def err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED


@dataclass
class FakeGpu:
    """One GPU's state; ``unsupported`` names fake methods that raise NOT_SUPPORTED."""

    name: str = "NVIDIA H100 80GB HBM3"
    util_gpu: int = 87
    util_mem: int = 41
    mem_total: int = 80 * 2**30
    mem_used: int = 12 * 2**30
    temp_c: int = 64
    power_mw: int = 312_500
    power_avg_mw: int | None = 300_000
    power_instant_mw: int | None = None  # NVML_FI_DEV_POWER_INSTANT; None: the driver lacks the field
    energy_mj: int = 5_000_000
    sm_mhz: int = 1980
    mem_mhz: int = 2619
    reasons: int = 0x1
    pstate: int = 0
    tx_kbs: int = 1200
    rx_kbs: int = 3400
    fan_pct: int = 30
    limit_mw: int = 700_000
    procs: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, used bytes)
    unsupported: set[str] = field(default_factory=set)
    lost: bool = False
    fail_once: dict[str, int] = field(default_factory=dict)  # method -> NVML error code, raised once
    raises: dict[str, BaseException] = field(default_factory=dict)  # method -> exception raised at every call
    uuid: str | None = None  # None: GPU-<index>-fake


class FakeNvml:
    """Implements the NVML functions the kit uses, over a list of FakeGpu."""

    def __init__(self, gpus: list[FakeGpu], *, init_error: int | None = None,
                 init_exc: BaseException | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.init_exc = init_exc  # any exception nvmlInit raises (e.g. pynvml.NVMLLibraryMismatchError)
        self.inits = 0
        self.shutdowns = 0

    # -- plumbing ----------------------------------------------------------
    def _gpu(self, h: FakeGpu, method: str) -> FakeGpu:
        if method in h.raises:
            raise h.raises[method]
        if h.lost:
            raise err(pynvml.NVML_ERROR_GPU_IS_LOST)
        if method in h.fail_once:
            raise err(h.fail_once.pop(method))
        if method in h.unsupported:
            raise err(NOT_SUPPORTED)
        return h

    # -- system ------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.init_exc is not None:
            raise self.init_exc
        if self.init_error is not None:
            raise err(self.init_error)
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12040

    def nvmlSystemGetNVMLVersion(self) -> str:
        return "12.550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        if not 0 <= index < len(self.gpus):
            raise err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._gpu(self.gpus[index], "nvmlDeviceGetHandleByIndex")

    # -- sampled -----------------------------------------------------------
    def nvmlDeviceGetName(self, h: FakeGpu) -> str:
        return self._gpu(h, "nvmlDeviceGetName").name

    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu) -> Any:
        g = self._gpu(h, "nvmlDeviceGetUtilizationRates")
        return pynvml.c_nvmlUtilization_t(gpu=g.util_gpu, memory=g.util_mem)

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu, version: Any = None) -> Any:
        g = self._gpu(h, "nvmlDeviceGetMemoryInfo")
        return pynvml.c_nvmlMemory_t(total=g.mem_total, free=g.mem_total - g.mem_used, used=g.mem_used)

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._gpu(h, "nvmlDeviceGetTemperature").temp_c

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:
        return self._gpu(h, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetFieldValues(self, h: FakeGpu, field_ids: list[Any]) -> Any:
        g = self._gpu(h, "nvmlDeviceGetFieldValues")
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        for i, fid in enumerate(field_ids):
            values[i].fieldId = fid
            mw = {pynvml.NVML_FI_DEV_POWER_AVERAGE: g.power_avg_mw,
                  pynvml.NVML_FI_DEV_POWER_INSTANT: g.power_instant_mw}.get(fid)
            if mw is not None:
                values[i].nvmlReturn = pynvml.NVML_SUCCESS
                values[i].valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                values[i].value.uiVal = mw
            else:
                values[i].nvmlReturn = NOT_SUPPORTED
        return values

    def nvmlDeviceGetTotalEnergyConsumption(self, h: FakeGpu) -> int:
        return self._gpu(h, "nvmlDeviceGetTotalEnergyConsumption").energy_mj

    def nvmlDeviceGetClockInfo(self, h: FakeGpu, kind: int) -> int:
        g = self._gpu(h, "nvmlDeviceGetClockInfo")
        return {pynvml.NVML_CLOCK_SM: g.sm_mhz, pynvml.NVML_CLOCK_MEM: g.mem_mhz}[kind]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeGpu) -> int:
        return self._gpu(h, "nvmlDeviceGetCurrentClocksEventReasons").reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: FakeGpu) -> int:
        return self._gpu(h, "nvmlDeviceGetCurrentClocksThrottleReasons").reasons

    def nvmlDeviceGetPerformanceState(self, h: FakeGpu) -> int:
        return self._gpu(h, "nvmlDeviceGetPerformanceState").pstate

    def nvmlDeviceGetPcieThroughput(self, h: FakeGpu, counter: int) -> int:
        g = self._gpu(h, "nvmlDeviceGetPcieThroughput")
        return {pynvml.NVML_PCIE_UTIL_TX_BYTES: g.tx_kbs, pynvml.NVML_PCIE_UTIL_RX_BYTES: g.rx_kbs}[counter]

    def nvmlDeviceGetFanSpeed(self, h: FakeGpu) -> int:
        return self._gpu(h, "nvmlDeviceGetFanSpeed").fan_pct

    def nvmlDeviceGetEnforcedPowerLimit(self, h: FakeGpu) -> int:
        return self._gpu(h, "nvmlDeviceGetEnforcedPowerLimit").limit_mw

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeGpu) -> list[Any]:
        g = self._gpu(h, "nvmlDeviceGetComputeRunningProcesses")
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in g.procs]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: FakeGpu) -> list[Any]:
        self._gpu(h, "nvmlDeviceGetGraphicsRunningProcesses")
        return []

    # -- inventory ---------------------------------------------------------
    def _index(self, h: FakeGpu) -> int:
        return next(i for i, g in enumerate(self.gpus) if g is h)

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:
        g = self._gpu(h, "nvmlDeviceGetUUID")
        return g.uuid or f"GPU-{self._index(h):08d}-fake"

    def nvmlDeviceGetPciInfo(self, h: FakeGpu) -> Any:
        return SimpleNamespace(busId=f"00000000:{0x17 + 0x10 * self._index(h):02X}:00.0".encode())

    def nvmlDeviceGetVbiosVersion(self, h: FakeGpu) -> str:
        return "96.00.74.00.01"

    def nvmlDeviceGetCudaComputeCapability(self, h: FakeGpu) -> tuple[int, int]:
        return (9, 0)

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h: FakeGpu) -> int:
        return 700_000

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h: FakeGpu) -> list[int]:
        return [200_000, 700_000]

    def nvmlDeviceGetApplicationsClock(self, h: FakeGpu, kind: int) -> int:
        self._gpu(h, "nvmlDeviceGetApplicationsClock")
        return {pynvml.NVML_CLOCK_SM: 1755, pynvml.NVML_CLOCK_MEM: 2619}[kind]

    def nvmlDeviceGetMaxClockInfo(self, h: FakeGpu, kind: int) -> int:
        return {pynvml.NVML_CLOCK_SM: 1980, pynvml.NVML_CLOCK_MEM: 2619}[kind]

    def nvmlDeviceGetPersistenceMode(self, h: FakeGpu) -> int:
        return pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetMigMode(self, h: FakeGpu) -> list[int]:
        return [0, 0]  # (current, pending): MIG disabled

    def nvmlDeviceGetEccMode(self, h: FakeGpu) -> list[int]:
        self._gpu(h, "nvmlDeviceGetEccMode")
        return [1, 1]

    def nvmlDeviceGetComputeMode(self, h: FakeGpu) -> int:
        return pynvml.NVML_COMPUTEMODE_DEFAULT

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: FakeGpu) -> int:
        return 5

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: FakeGpu) -> int:
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: FakeGpu) -> int:
        return 16

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: FakeGpu) -> int:
        return 16


H100, L40S = "NVIDIA H100 80GB HBM3", "NVIDIA L40S"
FOREIGN_PID = 424242  # a process of another user, on a GPU the trial does not use


def eight_gpu_host() -> FakeNvml:
    """A fake 8-GPU node: GPUs 0-3 H100, 4-7 L40S, each at its own temperature and power; GPU 5 runs a
    foreign process; instantaneous power (NVML_FI_DEV_POWER_INSTANT) on the H100s only."""
    gpus = []
    for i in range(8):
        h100 = i < 4
        gpus.append(FakeGpu(
            name=H100 if h100 else L40S, temp_c=30 + 5 * i, util_gpu=10 * i, power_mw=100_000 + 10_000 * i,
            power_instant_mw=(150_000 + 10_000 * i) if h100 else None, energy_mj=1_000_000 * (i + 1),
            mem_total=(80 if h100 else 48) * 2**30, limit_mw=700_000 if h100 else 350_000,
            procs=[(FOREIGN_PID, 2**30)] if i == 5 else [], uuid=f"GPU-{i:08x}-0000-4000-8000-{'ab' * 6}",
        ))
    return FakeNvml(gpus)


def _unexpected(name: str) -> Any:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"unexpected NVML call {name}{args}")

    return fail


def install(monkeypatch: Any, fake: FakeNvml) -> dict[str, Any]:
    """Replace every pynvml.nvml* function by its autospec wired to ``fake``; returns the mocks."""
    specs = _specs()
    mine = [n for n in dir(fake) if n.startswith("nvml")]
    unknown = [n for n in mine if n not in specs]
    if unknown:
        raise AttributeError(f"fake NVML implements functions pynvml does not have: {unknown}")
    for name, spec in specs.items():
        spec.mock.reset_mock(return_value=True, side_effect=True)
        spec.side_effect = getattr(fake, name) if name in mine else _unexpected(name)
        monkeypatch.setattr(pynvml, name, spec)
    return specs
