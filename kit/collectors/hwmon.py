"""Temperature collector: hwmon sensors (thermal zones as fallback) and the CPU package temperature.

Per sensor a row ``hwmon/<chip>:<label>/temp_c``; per reading one derived row
``hwmon/cpu/cpu_temp_c`` when a CPU sensor exists, chosen by ``cpu_plan`` in
this order: coretemp "Package id N" (max over packages; else max over its
cores), k10temp / zenpower Tdie (else Tctl; else max of their sensors),
the cpu_thermal hwmon chip (ARM boards), a thermal zone of type
x86_pkg_temp (or cpu_thermal / cpu-thermal). Other chips (nvme, acpitz,
amdgpu, pch_*) never count as the CPU.

Sensors come from ``<root>/class/hwmon``; only when it holds no temperature
sensor at all are the thermal zones (``<root>/class/thermal``) used for the
per-sensor rows. A CPU zone is still used for ``cpu_temp_c`` when hwmon has
sensors but none of a CPU. The root is injectable so tests build fake trees.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from kit.collectors._sysfs import Attr, listdir, read_int, read_text
from kit.collectors.base import DEFAULT_PERIOD_S, Collector, Probe, Row, TrialTarget

SOURCE = "hwmon"
CPU_DEVICE = "cpu"
_TEMP_INPUT = re.compile(r"^temp(\d+)_input$")
_ZONE = re.compile(r"^thermal_zone(\d+)$")
CPU_ZONE_TYPES = ("x86_pkg_temp", "cpu_thermal", "cpu-thermal")
NO_SENSOR_FIX = (
    "on bare metal load the sensor driver (modprobe coretemp on Intel, k10temp on AMD) and check `sensors`; "
    "virtual machines and most cloud instances expose no temperature sensors"
)


@dataclass(frozen=True)
class Sensor:
    """One temperature input: ``device`` is the row's device, ``chip`` the driver name."""

    device: str
    chip: str
    label: str
    path: Path
    kind: str  # "hwmon" | "thermal"


@dataclass(frozen=True)
class CpuPlan:
    """Which sensors make the CPU temperature (their max) and by which rule."""

    rule: str
    devices: tuple[str, ...]


def _hwmon_sensors(root: Path) -> list[Sensor]:
    base = root / "class" / "hwmon"
    found: list[tuple[str, str, Path]] = []
    for entry in listdir(base):
        d = base / entry
        chip = read_text(d / "name") or read_text(d / "device" / "name") or entry
        # Old drivers keep their attributes in device/ rather than in hwmonN/ itself.
        for sub in (d, d / "device"):
            inputs = [m for m in map(_TEMP_INPUT.match, listdir(sub)) if m]
            for m in inputs:
                label = read_text(sub / f"temp{m.group(1)}_label") or f"temp{m.group(1)}"
                found.append((chip, label, sub / m.group(0)))
            if inputs:
                break
    # Two sockets give two chips of one name with the same labels ("Core 0"): number them.
    chips_per_name: dict[str, list[Path]] = {}
    for chip, _, path in found:
        dirs = chips_per_name.setdefault(chip, [])
        if path.parent not in dirs:
            dirs.append(path.parent)
    out = []
    for chip, label, path in found:
        dirs = chips_per_name[chip]
        name = chip if len(dirs) == 1 else f"{chip}.{dirs.index(path.parent)}"
        out.append(Sensor(f"{name}:{label}", chip, label, path, "hwmon"))
    return out


def _zone_sensors(root: Path) -> list[Sensor]:
    base = root / "class" / "thermal"
    out = []
    for entry in listdir(base):
        if _ZONE.match(entry) and (base / entry / "temp").exists():
            kind = read_text(base / entry / "type") or "unknown"
            out.append(Sensor(f"{entry}:{kind}", kind, kind, base / entry / "temp", "thermal"))
    return out


def discover(sysfs_root: Path = Path("/sys")) -> tuple[list[Sensor], CpuPlan | None]:
    """The sensors to record and the CPU temperature rule (None when no CPU sensor exists)."""
    hw = _hwmon_sensors(sysfs_root)
    zones = _zone_sensors(sysfs_root)
    sensors = hw if hw else zones
    plan = cpu_plan(hw)
    if plan is None:
        plan = cpu_plan(zones)
        if plan is not None and hw:  # the CPU comes from a zone: record that zone too
            sensors = hw + [s for s in zones if s.device in plan.devices]
    return sensors, plan


def cpu_plan(sensors: list[Sensor]) -> CpuPlan | None:
    """Pick the CPU package sensors among ``sensors`` (see the module docstring for the order)."""

    def of(chip: str) -> list[Sensor]:
        return [s for s in sensors if s.kind == "hwmon" and s.chip == chip]

    core = of("coretemp")
    if core:
        pkg = [s for s in core if s.label.lower().startswith("package id")]
        if pkg:
            return CpuPlan("coretemp package (max over packages)", tuple(s.device for s in pkg))
        return CpuPlan("coretemp cores (max; no package sensor)", tuple(s.device for s in core))
    for chip in ("k10temp", "zenpower"):
        amd = of(chip)
        for label in ("Tdie", "Tctl"):
            chosen = [s for s in amd if s.label == label]
            if chosen:
                return CpuPlan(f"{chip} {label}", tuple(s.device for s in chosen))
        if amd:
            return CpuPlan(f"{chip} (max of its sensors)", tuple(s.device for s in amd))
    arm = of("cpu_thermal")
    if arm:
        return CpuPlan("cpu_thermal", tuple(s.device for s in arm))
    for kind in CPU_ZONE_TYPES:
        zones = [s for s in sensors if s.kind == "thermal" and s.chip == kind]
        if zones:
            return CpuPlan(f"thermal zone {kind}", tuple(s.device for s in zones))
    return None


def read_once(sensors: list[Sensor]) -> dict[str, float]:
    """One reading of every sensor in °C (unreadable ones left out); for one-off callers."""
    out = {}
    for s in sensors:
        value = read_int(s.path)
        if value is not None:
            out[s.device] = value / 1000.0
    return out


def cpu_temp_c(values: dict[str, float], plan: CpuPlan | None) -> float | None:
    """The CPU temperature of one reading: the max over the plan's sensors present."""
    if plan is None:
        return None
    vals = [values[d] for d in plan.devices if d in values]
    return max(vals) if vals else None


class HwmonCollector(Collector):
    """Rows: ``hwmon/<chip>:<label>/temp_c`` per sensor and ``hwmon/cpu/cpu_temp_c``."""

    name = "hwmon"

    def __init__(self, period_s: float = DEFAULT_PERIOD_S, *, sysfs_root: Path = Path("/sys")) -> None:
        super().__init__(period_s)
        self.sysfs_root = sysfs_root
        self.plan: CpuPlan | None = None
        self._attrs: list[tuple[Sensor, Attr]] = []
        self._failed: set[str] = set()

    @classmethod
    def build(cls, period_s: float, target: TrialTarget, sysfs_root: Path, **options: object) -> HwmonCollector:
        return cls(period_s, sysfs_root=sysfs_root)

    def probe(self) -> Probe:
        sensors, plan = discover(self.sysfs_root)
        if not sensors:
            return Probe(
                False,
                f"no temperature sensor under {self.sysfs_root}/class/hwmon or {self.sysfs_root}/class/thermal",
                NO_SENSOR_FIX,
            )
        readable = read_once(sensors)
        if not readable:
            return Probe(False, f"{len(sensors)} temperature sensor(s) found, none readable", NO_SENSOR_FIX)
        cpu = f"CPU temperature from {plan.rule}" if plan else "no CPU sensor (cpu_temp_c not recorded)"
        kinds = "hwmon" if sensors[0].kind == "hwmon" else "thermal zones"
        return Probe(True, f"{len(readable)}/{len(sensors)} readable sensors ({kinds}); {cpu}")

    def _open(self) -> None:
        sensors, self.plan = discover(self.sysfs_root)
        self._attrs = [(s, Attr(s.path)) for s in sensors]
        self._failed = set()

    def read(self) -> list[Row]:
        t = time.time()
        rows = []
        values: dict[str, float] = {}
        for sensor, attr in self._attrs:
            try:
                value = attr.value() / 1000.0
            except (OSError, ValueError) as exc:
                # Some inputs fail now and then (ENODATA, EIO); say so once per sensor.
                if sensor.device not in self._failed:
                    self._failed.add(sensor.device)
                    self.note_error(f"{sensor.path}: {type(exc).__name__}: {exc}")
                continue
            values[sensor.device] = value
            rows.append(Row(t, SOURCE, sensor.device, "temp_c", value, "C"))
        cpu = cpu_temp_c(values, self.plan)
        if cpu is not None:
            rows.append(Row(t, SOURCE, CPU_DEVICE, "cpu_temp_c", cpu, "C"))
        return rows

    def _close(self) -> None:
        for _, attr in self._attrs:
            attr.close()
        self._attrs = []
