"""NVML collector (nvidia-ml-py): per-GPU telemetry, the GPU inventory and the NVML probe.

Rows ``nvml/<index>/<metric>``: ``gpu_util_pct``, ``mem_util_pct``,
``mem_used_bytes``, ``temp_c``, ``power_w`` (nvmlDeviceGetPowerUsage: on
Ampere and newer the driver's own moving average over about one second, so
the power of a phase shorter than a few seconds is partly the previous
phase's; use ``energy_j`` differences or ``power_instant_w`` for short
phases), ``power_instant_w`` (field NVML_FI_DEV_POWER_INSTANT, the
instantaneous reading, where the driver has it), ``power_avg_w`` (field
NVML_FI_DEV_POWER_AVERAGE where the driver has it), ``energy_j`` (nvmlDeviceGetTotalEnergyConsumption, Volta+, a cumulative
counter since the driver loaded), ``sm_clock_mhz``, ``mem_clock_mhz``,
``throttle_reasons`` (bitmask), ``pstate``, ``pcie_tx_kbs`` / ``pcie_rx_kbs``,
``fan_pct``, ``power_limit_w``, ``foreign_procs`` (processes on the GPU outside
the trial's process tree) and ``trial_mem_used_bytes`` (GPU memory of the
trial's own processes, once the trial has started and where NVML reports it).

Only the GPUs the trial was given are sampled (``TrialTarget.gpu_indices``,
else the collector's ``gpu_indices``, else every GPU), so utilisation, power,
energy and ``foreign_procs`` describe the trial's GPUs, not the host's.

Each query is tried once when the collector opens; one the GPU or driver
does not support is dropped silently (listed in ``unsupported``) rather than
failing every 100 ms. PCIe throughput is read every ``pcie_every`` readings
only: NVML measures it over a 20 ms window per call, so TX+RX at every 100 ms
reading would cost up to 40 ms per GPU.

A GPU that is lost mid-run (GPU_IS_LOST, RESET_REQUIRED, GPU_NOT_FOUND) gives
one ``gpu_lost`` = 1 row and an error entry, and is not read again; other GPUs
go on. pynvml exceptions never leave this module: they become
:class:`kit.errors.NVMLError` (or a failed :class:`Probe`). That includes
``pynvml.NVMLLibraryMismatchError``, which is *not* an ``NVMLError``: pynvml
raises it where nvidia-ml-py is newer than the driver's library (e.g. the
process queries on a 550-series driver); the query is dropped, recorded with
its fix, and the other queries go on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pynvml

from kit.collectors.base import DEFAULT_PERIOD_S, Collector, Probe, Row, TrialTarget
from kit.collectors.memory import TreeCache
from kit.errors import NVMLError
from kit.nvml import NvmlSession, nvml_error, nvml_session
from kit.nvml import cuda_version as _cuda_version
from kit.nvml import text as _text

SOURCE = "nvml"
LOST_CODES = frozenset(
    getattr(pynvml, n) for n in ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_RESET_REQUIRED", "NVML_ERROR_GPU_NOT_FOUND")
    if hasattr(pynvml, n)
)
UNSUPPORTED_CODES = frozenset(
    getattr(pynvml, n) for n in ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND")
    if hasattr(pynvml, n)
)
POWER_INSTANT_FIELD = getattr(pynvml, "NVML_FI_DEV_POWER_INSTANT", 186)
NO_GPU_FIX = "check `nvidia-smi -L`; without GPUs, leave 'nvml' out of telemetry.collectors"


def _code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _field_value(fv: Any) -> float:
    """The number in a ``c_nvmlFieldValue_t``, by its value type."""
    member = {
        pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
        pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
        pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    }.get(int(fv.valueType), "uiVal")
    return float(getattr(fv.value, member))


def _indices(gpu_indices: Iterable[int] | None) -> list[int]:
    """The GPUs to use (NVML must be initialised); raises NVMLError for an index not present."""
    count = pynvml.nvmlDeviceGetCount()
    if gpu_indices is None:
        return list(range(count))
    wanted = list(gpu_indices)
    bad = [i for i in wanted if not 0 <= i < count]
    if bad:
        raise NVMLError(f"GPU index {bad[0]} not present ({count} GPU(s) seen by NVML)", where="nvml",
                        fix="fix the GPU indices (container.gpus) or check `nvidia-smi -L`")
    return wanted


NO_TRIAL_GPU = "the trial was given no GPU (a CPU trial): no GPU to sample"


def nvml_probe(gpu_indices: Iterable[int] | None = None) -> Probe:
    """Can NVML be used here, and on which GPUs? Never raises."""
    if gpu_indices is not None and not list(gpu_indices):
        return Probe(False, NO_TRIAL_GPU)
    try:
        with nvml_session():
            idx = _indices(gpu_indices)
            if not idx:
                return Probe(False, "NVML works but reports no GPU", NO_GPU_FIX)
            driver = _try(pynvml.nvmlSystemGetDriverVersion)
            names = [f"{i}: {_text(n) if (n := _try(_name_of, i)) is not None else '?'}" for i in idx]
            return Probe(True, f"driver {_text(driver) if driver is not None else '?'}; {len(idx)} GPU(s): {', '.join(names)}")
    except Exception as exc:  # NVMLError from the session or a bad index, anything else pynvml raises
        err = nvml_error(exc, "nvml probe")
        return Probe(False, err.cause, err.fix or "")


def _name_of(index: int) -> Any:
    return pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index))


def _try(fn: Callable[..., Any], *args: Any) -> Any:
    """Call an NVML getter; None when it fails (unsupported, no permission, library mismatch...)."""
    try:
        return fn(*args)
    except Exception:
        return None


def _mw_to_w(mw: Any) -> float | None:
    return None if mw is None else mw / 1000.0


def _inventory_one(i: int, h: Any) -> dict[str, Any]:
    mem = _try(pynvml.nvmlDeviceGetMemoryInfo, h)
    pci = _try(pynvml.nvmlDeviceGetPciInfo, h)
    ecc = _try(pynvml.nvmlDeviceGetEccMode, h)
    cc = _try(pynvml.nvmlDeviceGetCudaComputeCapability, h)
    constraints = _try(pynvml.nvmlDeviceGetPowerManagementLimitConstraints, h)
    persistence = _try(pynvml.nvmlDeviceGetPersistenceMode, h)
    sm, mem_clk = pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM
    return {
        "index": i,
        "name": _text(n) if (n := _try(pynvml.nvmlDeviceGetName, h)) is not None else None,
        "uuid": _text(u) if (u := _try(pynvml.nvmlDeviceGetUUID, h)) is not None else None,
        "pci_bus_id": _text(pci.busId) if pci is not None else None,
        "vbios_version": _text(v) if (v := _try(pynvml.nvmlDeviceGetVbiosVersion, h)) is not None else None,
        "compute_capability": f"{cc[0]}.{cc[1]}" if cc is not None else None,
        "memory_total_bytes": int(mem.total) if mem is not None else None,
        "power_limit_default_w": _mw_to_w(_try(pynvml.nvmlDeviceGetPowerManagementDefaultLimit, h)),
        "power_limit_enforced_w": _mw_to_w(_try(pynvml.nvmlDeviceGetEnforcedPowerLimit, h)),
        "power_limit_min_w": _mw_to_w(constraints[0]) if constraints is not None else None,
        "power_limit_max_w": _mw_to_w(constraints[1]) if constraints is not None else None,
        "app_clock_sm_mhz": _try(pynvml.nvmlDeviceGetApplicationsClock, h, sm),
        "app_clock_mem_mhz": _try(pynvml.nvmlDeviceGetApplicationsClock, h, mem_clk),
        "max_clock_sm_mhz": _try(pynvml.nvmlDeviceGetMaxClockInfo, h, sm),
        "max_clock_mem_mhz": _try(pynvml.nvmlDeviceGetMaxClockInfo, h, mem_clk),
        "persistence_mode": None if persistence is None else bool(persistence),
        "ecc_mode_current": None if ecc is None else bool(ecc[0]),
        "ecc_mode_pending": None if ecc is None else bool(ecc[1]),
        "compute_mode": _try(pynvml.nvmlDeviceGetComputeMode, h),
        "pcie_gen_current": _try(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
        "pcie_gen_max": _try(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, h),
        "pcie_width_current": _try(pynvml.nvmlDeviceGetCurrPcieLinkWidth, h),
        "pcie_width_max": _try(pynvml.nvmlDeviceGetMaxPcieLinkWidth, h),
    }


def gpu_inventory(gpu_indices: Iterable[int] | None = None) -> list[dict[str, Any]]:
    """Static provenance per GPU for the manifest; [] without NVML. Never raises.

    Fields a GPU or driver does not report are None. Locked clocks
    (``nvidia-smi -lgc``) have no NVML getter; they show up as the
    applications-clocks bit in ``throttle_reasons`` during the run.
    """
    try:
        with nvml_session():
            idx = _indices(gpu_indices)
            driver = _try(pynvml.nvmlSystemGetDriverVersion)
            common = {
                "driver_version": _text(driver) if driver is not None else None,
                "cuda_driver_version": _cuda_version(_try(pynvml.nvmlSystemGetCudaDriverVersion)),
                "nvml_version": _text(v) if (v := _try(pynvml.nvmlSystemGetNVMLVersion)) is not None else None,
            }
            out = []
            for i in idx:
                h = _try(pynvml.nvmlDeviceGetHandleByIndex, i)
                if h is None:
                    out.append({"index": i, "error": "no handle (GPU lost?)", **common})
                    continue
                try:
                    out.append({**_inventory_one(i, h), **common})
                except Exception as exc:  # what one GPU cannot tell does not hide the others
                    out.append({"index": i, "error": str(nvml_error(exc, f"GPU {i}")), **common})
            return out
    except Exception:  # no NVML here (NVMLError from the session), or it failed before any GPU was read
        return []


# -- the collector -------------------------------------------------------------

Reading = list[tuple[str, float, str]]  # (metric, value, unit)


@dataclass
class _Gpu:
    index: int
    handle: Any
    readers: dict[str, Callable[[Any], Reading]]
    lost: bool = False


def _util(h: Any) -> Reading:
    u = pynvml.nvmlDeviceGetUtilizationRates(h)
    return [("gpu_util_pct", float(u.gpu), "%"), ("mem_util_pct", float(u.memory), "%")]


def _mem(h: Any) -> Reading:
    return [("mem_used_bytes", float(pynvml.nvmlDeviceGetMemoryInfo(h).used), "B")]


def _temp(h: Any) -> Reading:
    return [("temp_c", float(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)), "C")]


def _power(h: Any) -> Reading:
    return [("power_w", pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0, "W")]


def _power_field(h: Any, field_id: int) -> float:
    """A power field value in W; raises pynvml.NVMLError with the field's own return code."""
    fv = pynvml.nvmlDeviceGetFieldValues(h, [field_id])[0]
    if fv.nvmlReturn != pynvml.NVML_SUCCESS:
        raise pynvml.NVMLError(fv.nvmlReturn)
    return _field_value(fv) / 1000.0


def _power_avg(h: Any) -> Reading:
    return [("power_avg_w", _power_field(h, pynvml.NVML_FI_DEV_POWER_AVERAGE), "W")]


def _power_instant(h: Any) -> Reading:
    return [("power_instant_w", _power_field(h, POWER_INSTANT_FIELD), "W")]


def _energy(h: Any) -> Reading:
    return [("energy_j", pynvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0, "J")]


def _sm_clock(h: Any) -> Reading:
    return [("sm_clock_mhz", float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)), "MHz")]


def _mem_clock(h: Any) -> Reading:
    return [("mem_clock_mhz", float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)), "MHz")]


def _throttle_event(h: Any) -> Reading:
    return [("throttle_reasons", float(pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)), "bitmask")]


def _throttle_legacy(h: Any) -> Reading:  # drivers before r535 know only the old name
    return [("throttle_reasons", float(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)), "bitmask")]


def _pstate(h: Any) -> Reading:
    return [("pstate", float(pynvml.nvmlDeviceGetPerformanceState(h)), "1")]


def _pcie(h: Any) -> Reading:
    tx = pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES)
    rx = pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_RX_BYTES)
    return [("pcie_tx_kbs", float(tx), "KB/s"), ("pcie_rx_kbs", float(rx), "KB/s")]


def _fan(h: Any) -> Reading:
    return [("fan_pct", float(pynvml.nvmlDeviceGetFanSpeed(h)), "%")]


def _power_limit(h: Any) -> Reading:
    return [("power_limit_w", pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0, "W")]


def _gpu_processes(h: Any) -> dict[int, int | None]:
    """PID -> used GPU memory (bytes or None) over compute and graphics processes."""
    procs: dict[int, int | None] = {}
    for fn in (pynvml.nvmlDeviceGetComputeRunningProcesses, pynvml.nvmlDeviceGetGraphicsRunningProcesses):
        for p in fn(h):
            used = getattr(p, "usedGpuMemory", None)
            if procs.get(p.pid) is None:
                procs[p.pid] = int(used) if used is not None else None
    return procs


READERS: dict[str, Callable[[Any], Reading]] = {
    "utilization": _util,
    "memory": _mem,
    "temperature": _temp,
    "power": _power,
    "power_avg": _power_avg,
    "energy": _energy,
    "sm_clock": _sm_clock,
    "mem_clock": _mem_clock,
    "throttle": _throttle_event,
    "pstate": _pstate,
    "pcie": _pcie,
    "fan": _fan,
    "power_limit": _power_limit,
}
# Newer driver fields, absent on many drivers: tried once, kept where they answer, else listed in
# ``missing_fields`` (not in ``unsupported``, which lists the queries every NVIDIA GPU is expected to answer).
OPTIONAL_READERS: dict[str, Callable[[Any], Reading]] = {"power_instant": _power_instant}
# Field queries: a driver that does not know the field answers with some error code; any of them drops it.
FIELD_READERS = frozenset({"power_avg", *OPTIONAL_READERS})


class NvmlCollector(Collector):
    """Per-GPU NVML rows (see the module docstring)."""

    name = "nvml"

    def __init__(
        self,
        period_s: float = DEFAULT_PERIOD_S,
        target: TrialTarget | None = None,
        *,
        gpu_indices: list[int] | None = None,
        pcie_every: int = 10,
    ) -> None:
        super().__init__(period_s)
        if pcie_every < 1:
            raise ValueError("pcie_every must be >= 1")
        self.target = target if target is not None else TrialTarget()
        self.gpu_indices = gpu_indices
        self.pcie_every = pcie_every
        self.gpus: list[_Gpu] = []
        self.unsupported: dict[int, list[str]] = {}
        self.missing_fields: dict[int, list[str]] = {}
        self._n_reads = 0
        self._procs_ok: dict[int, bool] = {}
        self.tree = TreeCache()
        self._session = NvmlSession()

    @classmethod
    def build(cls, period_s: float, target: TrialTarget, sysfs_root: Path, **options: Any) -> NvmlCollector:
        return cls(period_s, target, gpu_indices=options.get("gpu_indices"))

    def wanted(self) -> list[int] | None:
        """The GPUs to sample: the collector's own list, else the trial's, else None (every GPU)."""
        return self.gpu_indices if self.gpu_indices is not None else self.target.gpu_indices

    def probe(self) -> Probe:
        return nvml_probe(self.wanted())

    def _open(self) -> None:
        self._session.open()
        try:
            indices = _indices(self.wanted())
        except NVMLError:
            raise
        except Exception as exc:
            raise nvml_error(exc, "nvml open") from exc
        self.gpus = []
        for i in indices:
            try:
                self.gpus.append(self._open_gpu(i))
            except Exception as exc:  # one GPU already gone: record it, sample the others
                self.note_error(str(nvml_error(exc, f"GPU {i}")) + " (not sampled)")
        self._n_reads = 0

    def _open_gpu(self, index: int) -> _Gpu:
        """Try every query once; keep those this GPU and driver support."""
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        readers: dict[str, Callable[[Any], Reading]] = {}
        dropped: list[str] = []
        for key, fn in READERS.items():
            try:
                fn(h)
            except pynvml.NVMLError as exc:
                if _code(exc) in LOST_CODES:
                    raise
                if key == "throttle" and _code(exc) in UNSUPPORTED_CODES:
                    try:
                        _throttle_legacy(h)
                        readers[key] = _throttle_legacy
                        continue
                    except Exception:
                        pass
                if _code(exc) in UNSUPPORTED_CODES or key in FIELD_READERS:
                    dropped.append(key)
                    continue
                self.note_error(str(nvml_error(exc, f"GPU {index} {key}")))
            except Exception as exc:  # NVMLLibraryMismatchError and the like: will not heal, so dropped
                dropped.append(key)
                self.note_error(str(nvml_error(exc, f"GPU {index} {key}")) + " (query dropped)")
                continue
            readers[key] = fn
        missing: list[str] = []
        for key, fn in OPTIONAL_READERS.items():
            try:
                fn(h)
            except pynvml.NVMLError as exc:
                if _code(exc) in LOST_CODES:
                    raise
                missing.append(key)
                continue
            except Exception:
                missing.append(key)
                continue
            readers[key] = fn
        self.missing_fields[index] = missing
        try:
            _gpu_processes(h)
            self._procs_ok[index] = True
        except pynvml.NVMLError as exc:
            if _code(exc) in LOST_CODES:
                raise
            self._procs_ok[index] = False
            dropped.append("processes")
        except Exception as exc:  # e.g. the library mismatch of nvmlDeviceGetComputeRunningProcesses on old drivers
            self._procs_ok[index] = False
            dropped.append("processes")
            self.note_error(str(nvml_error(exc, f"GPU {index} processes")) +
                            " (foreign processes and the trial's GPU memory not measured)")
        self.unsupported[index] = dropped
        return _Gpu(index, h, readers)

    def read(self) -> list[Row]:
        self._n_reads += 1
        pcie_now = (self._n_reads - 1) % self.pcie_every == 0
        rows: list[Row] = []
        for gpu in self.gpus:
            if gpu.lost:
                continue
            t = time.time()
            dev = str(gpu.index)
            try:
                for key, fn in gpu.readers.items():
                    if key == "pcie" and not pcie_now:
                        continue
                    try:
                        rows += [Row(t, SOURCE, dev, m, v, u) for m, v, u in fn(gpu.handle)]
                    except pynvml.NVMLError as exc:
                        if _code(exc) in LOST_CODES:
                            raise
                        self.note_error(str(nvml_error(exc, f"GPU {gpu.index} {key}")))
                    except Exception as exc:  # not an NVMLError (library mismatch...): recorded, reading goes on
                        self.note_error(str(nvml_error(exc, f"GPU {gpu.index} {key}")))
                if self._procs_ok.get(gpu.index):
                    rows += self._process_rows(gpu, t)
            except pynvml.NVMLError as exc:  # only the lost codes get here
                gpu.lost = True
                rows.append(Row(time.time(), SOURCE, dev, "gpu_lost", 1.0, "1"))
                self.note_error(str(nvml_error(exc, f"GPU {gpu.index}")) + " (GPU lost; no further readings)")
        return rows

    def _process_rows(self, gpu: _Gpu, t: float) -> list[Row]:
        """``foreign_procs`` and ``trial_mem_used_bytes``; raises pynvml errors only for a lost GPU."""
        try:
            procs = _gpu_processes(gpu.handle)
        except pynvml.NVMLError as exc:
            if _code(exc) in LOST_CODES:
                raise
            self.note_error(str(nvml_error(exc, f"GPU {gpu.index} processes")))
            return []
        except Exception as exc:
            self.note_error(str(nvml_error(exc, f"GPU {gpu.index} processes")))
            return []
        pid = self.target.pid
        mine = self.tree.pids(pid) if procs else set()  # cached: re-listed at most once a second
        dev = str(gpu.index)
        rows = [Row(t, SOURCE, dev, "foreign_procs", float(len(set(procs) - mine)), "1")]
        used = [procs[p] for p in procs if p in mine]
        if pid is not None and all(b is not None for b in used):  # None: NVML hides it (no permission, vGPU)
            rows.append(Row(t, SOURCE, dev, "trial_mem_used_bytes", float(sum(b or 0 for b in used)), "B"))
        return rows

    def _close(self) -> None:
        self.gpus = []
        self._session.close()
