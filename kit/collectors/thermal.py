"""Thermal control: an idle baseline at run start and a bounded cool-down before each trial.

Trials that start on a GPU still hot from the previous one run at other
clocks (thermal throttling, fan curves), and the order of frameworks would
then bias the comparison. So the run records the idle temperature of each
sensor once, and before each trial waits, at most ``max_wait_s``, until every
sensor is back within ``band_c`` above its baseline. The trial file records
the wait and the temperatures the trial started at.

Sensors: ``"cpu"`` (the CPU package, by the hwmon collector's rule) and
``"gpu<N>"`` from NVML. Either may be missing (a VM, no GPU); with none at
all there is nothing to wait for, and the result says so.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pynvml

from kit.collectors.hwmon import CpuPlan, Sensor, cpu_temp_c, discover, read_once
from kit.errors import NVMLError
from kit.nvml import NvmlSession

Temps = dict[str, float]
ReadFn = Callable[[], Temps]
NO_SENSOR_NOTE = "no temperature sensor"


class TemperatureReader:
    """Reads the CPU and GPU temperatures; keeps NVML initialised between calls.

    ``nvmlInit`` can take a second or more on a GPU without persistence mode,
    too slow to repeat at every poll of a cool-down, so the reader initialises
    once (NVML counts its initialisations, so this does not disturb the NVML
    collector) until ``close()``.
    """

    def __init__(self, sysfs_root: Path = Path("/sys"), nvml: bool = True) -> None:
        self.sysfs_root = sysfs_root
        self.nvml = nvml
        self._cpu: tuple[list[Sensor], CpuPlan | None] | None = None
        self._handles: list[tuple[int, Any]] | None = None
        self._lock = threading.Lock()
        self._session = NvmlSession()

    def _cpu_sensors(self) -> tuple[list[Sensor], CpuPlan | None]:
        if self._cpu is None:
            sensors, plan = discover(self.sysfs_root)
            wanted = set(plan.devices) if plan else set()
            self._cpu = ([s for s in sensors if s.device in wanted], plan)
        return self._cpu

    def _gpu_handles(self) -> list[tuple[int, Any]]:
        if self._handles is None:
            self._handles = []
            if self.nvml:
                try:
                    self._session.open()
                except NVMLError:  # no NVML here
                    self.nvml = False  # do not try again at every poll
                    return self._handles
                try:
                    n = pynvml.nvmlDeviceGetCount()
                except Exception:
                    n = 0
                for i in range(n):
                    try:
                        self._handles.append((i, pynvml.nvmlDeviceGetHandleByIndex(i)))
                    except Exception:  # a lost GPU: the others are still read
                        continue
        return self._handles

    def __call__(self) -> Temps:
        with self._lock:
            out: Temps = {}
            sensors, plan = self._cpu_sensors()
            cpu = cpu_temp_c(read_once(sensors), plan)
            if cpu is not None:
                out["cpu"] = cpu
            for i, h in self._gpu_handles():
                try:
                    out[f"gpu{i}"] = float(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU))
                except Exception:  # NVMLError or a library mismatch
                    continue  # a lost GPU or one without a sensor: left out of this reading
            return out

    def close(self) -> None:
        with self._lock:
            self._session.close()
            self._handles = None


_readers: dict[tuple[Path, bool], TemperatureReader] = {}
_readers_lock = threading.Lock()


def read_temperatures(sysfs_root: Path = Path("/sys"), nvml: bool = True) -> Temps:
    """Current temperatures in °C, keys "cpu" and "gpu<N>" (those that exist).

    Uses one cached :class:`TemperatureReader` per (root, nvml) for the process.
    """
    key = (Path(sysfs_root), nvml)
    with _readers_lock:
        reader = _readers.get(key)
        if reader is None:
            reader = _readers[key] = TemperatureReader(Path(sysfs_root), nvml)
    return reader()


@dataclass
class CooldownResult:
    """What the trial file records about the wait before the trial.

    ``start_temps`` are the temperatures when the wait ended, that is, what the
    trial starts at; ``initial_temps`` those when it began.
    """

    waited_s: float
    reached: bool
    start_temps: Temps
    baseline: Temps
    band_c: float
    initial_temps: Temps = field(default_factory=dict)
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def idle_baseline(
    duration_s: float,
    period_s: float = 1.0,
    *,
    read: ReadFn | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Temps:
    """Median temperature per sensor over an idle window (the median shrugs off a stray spike)."""
    if duration_s < 0 or period_s <= 0:
        raise ValueError("duration_s must be >= 0 and period_s > 0")
    read_fn = read or read_temperatures
    samples: dict[str, list[float]] = {}
    end = clock() + duration_s
    while True:
        for k, v in read_fn().items():
            samples.setdefault(k, []).append(v)
        left = end - clock()
        if left <= 0:
            break
        sleep(min(period_s, left))
    return {k: float(statistics.median(v)) for k, v in samples.items()}


def _within(temps: Temps, baseline: Temps, band_c: float) -> bool:
    return all(temps[k] <= baseline[k] + band_c for k in baseline if k in temps)


def wait_for_cooldown(
    baseline: Temps,
    band_c: float,
    max_wait_s: float,
    *,
    poll_s: float = 1.0,
    read: ReadFn = read_temperatures,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    sensors: Iterable[str] | None = None,
) -> CooldownResult:
    """Wait until every baseline sensor is within ``band_c`` °C above its baseline, or ``max_wait_s`` passed.

    ``sensors`` limits the wait (and what is recorded) to those keys, e.g.
    ``["cpu", "gpu3"]`` for a trial on GPU 3: a hot GPU the trial does not use
    is neither waited for nor recorded. A sensor missing from a reading (a GPU
    lost since the baseline) is not waited for. ``max_wait_s`` = 0 takes one
    reading and does not wait.
    """
    if band_c < 0 or max_wait_s < 0 or poll_s <= 0:
        raise ValueError("band_c and max_wait_s must be >= 0, poll_s > 0")
    if sensors is not None:
        keep = set(sensors)
        baseline = {k: v for k, v in baseline.items() if k in keep}
        raw_read = read

        def read() -> Temps:
            return {k: v for k, v in raw_read().items() if k in keep}
    t0 = clock()
    temps = read()
    initial = dict(temps)
    if not baseline or not (set(baseline) & set(temps)):
        return CooldownResult(0.0, True, temps, dict(baseline), band_c, initial, NO_SENSOR_NOTE)
    while True:
        if _within(temps, baseline, band_c):
            return CooldownResult(clock() - t0, True, temps, dict(baseline), band_c, initial)
        left = max_wait_s - (clock() - t0)
        if left <= 0:
            hot = ", ".join(
                f"{k} {temps[k]:.1f} C (baseline {baseline[k]:.1f})"
                for k in baseline
                if k in temps and temps[k] > baseline[k] + band_c
            )
            return CooldownResult(
                clock() - t0, False, temps, dict(baseline), band_c, initial,
                f"not back within {band_c:g} C of the baseline after {max_wait_s:g} s: {hot}",
            )
        sleep(min(poll_s, left))
        temps = read()
