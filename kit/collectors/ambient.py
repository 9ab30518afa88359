"""The room's temperature at each trial's start: a host ambient sensor, or the value the user states in the spec.

Florencio et al. (seed 000) report the room at 22 °C while TensorFlow ran and at 24-26 °C while PyTorch ran,
and name the unmonitored room as a threat to validity: a warmer room means a warmer GPU and CPU, other fan
curves and earlier throttling, so the framework that ran in the warmer room pays for it. The kit records the
ambient temperature per trial where it can and says so where it cannot:

- ``ambient_sensor = "auto"`` (the default): an hwmon temperature input whose label names the air around the
  machine (``Ambient``, ``Inlet``, ``Intake``, ``Room``, ``SYSTIN``: what BMC/IPMI and Super-I/O drivers call it);
  ``"chip:label"`` names one input exactly as ``kit doctor`` lists it; ``"off"`` never reads one. GPUs and CPU
  packages are never taken for the room: NVML has no ambient sensor, and a CPU sensor measures the load.
- ``ambient_c``: the room's temperature as the user measured it, stated once for the run (a thermometer on the
  desk). It is recorded beside the sensor's reading, never in its place, and labelled as stated, not measured.

A reading outside [-30, 60] °C is not the air around a working computer (a misread or a mislabelled sensor): it
is recorded as missing with the reason, never as a value.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kit.collectors._sysfs import read_int
from kit.collectors.hwmon import Sensor, discover
from kit.spec import AMBIENT_PLAUSIBLE_C as PLAUSIBLE_C

SYSFS_ROOT = Path("/sys")  # where a reader made without a root looks (tests point it at a fake tree)
AMBIENT_LABEL = re.compile(r"\b(ambient|inlet|intake|room)\b|^systin$", re.IGNORECASE)


@dataclass(frozen=True)
class AmbientReading:
    """What a trial file records under ``ambient``: the sensor's value (None: none, or unreadable) and the stated one."""

    sensor_c: float | None
    sensor: str | None  # the hwmon input read ("chip:label"), None when none was
    stated_c: float | None  # the spec's [telemetry] ambient_c
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def plausible(value_c: float) -> bool:
    return PLAUSIBLE_C[0] <= value_c <= PLAUSIBLE_C[1]


def find_sensor(sensors: list[Sensor], setting: str) -> Sensor | None:
    """The ambient input among the host's hwmon sensors for ``setting`` ("auto" or "chip:label"); None if absent."""
    if setting == "off":
        return None
    if setting != "auto":
        return next((s for s in sensors if s.device == setting), None)
    found = [s for s in sensors if s.kind == "hwmon" and AMBIENT_LABEL.search(s.label.strip())]
    return sorted(found, key=lambda s: s.device)[0] if found else None


class AmbientReader:
    """Finds the ambient sensor once per run (sysfs is listed once) and reads it before every trial."""

    def __init__(self, setting: str = "auto", stated_c: float | None = None, sysfs_root: Path | None = None) -> None:
        self.setting = setting
        self.stated_c = stated_c
        self.sysfs_root = SYSFS_ROOT if sysfs_root is None else sysfs_root
        self._sensor: Sensor | None = None
        self._looked = False

    def _find(self) -> Sensor | None:
        if not self._looked:
            self._looked = True
            if self.setting != "off":
                sensors, _ = discover(self.sysfs_root)
                self._sensor = find_sensor(sensors, self.setting)
        return self._sensor

    def read(self) -> AmbientReading:
        if self.setting == "off":
            return AmbientReading(None, None, self.stated_c, "ambient sensor off (telemetry.ambient_sensor)")
        sensor = self._find()
        if sensor is None:
            what = ("no hwmon input labelled as ambient, inlet, intake, room or SYSTIN on this host"
                    if self.setting == "auto" else f"no hwmon input {self.setting!r} on this host")
            return AmbientReading(None, None, self.stated_c, what)
        milli = read_int(sensor.path)
        if milli is None:
            return AmbientReading(None, sensor.device, self.stated_c, f"{sensor.device} could not be read")
        value = milli / 1000.0
        if not plausible(value):
            return AmbientReading(None, sensor.device, self.stated_c,
                                  f"{sensor.device} read {value:g} °C, outside {PLAUSIBLE_C[0]:g}..{PLAUSIBLE_C[1]:g} °C: "
                                  "not the air around a running computer")
        return AmbientReading(round(value, 3), sensor.device, self.stated_c)
