"""RAPL collector: package / core / DRAM energy from the powercap sysfs tree.

Zones are ``<root>/class/powercap/intel-rapl:N`` (packages, psys) and
``intel-rapl:N:M`` (their core / uncore / dram subzones); the same driver
serves AMD Zen since Linux 5.8 (no DRAM zone there). ``intel-rapl-mmio``
zones repeat the package counter through another interface and are skipped.

Rows: ``rapl/<zone>/energy_j`` with zone ``package-0``, ``package-0/dram``,
``package-0/core``, ``psys``: joules since the collector opened, as a
cumulative counter. The hardware counter (``energy_uj``) wraps at
``max_energy_range_uj`` (about 262 kJ on many CPUs: minutes at full load), so
a reading below the previous one is one wrap and ``max_energy_range_uj`` is
added (exact up to one counter unit, some µJ). Several wraps between two
readings 100 ms apart are physically impossible, so a step larger than half
the range (after the correction) is reported as an error and left out of the
sum instead of being trusted (a counter reset, or a reader stalled for minutes).

Since Linux 5.10 ``energy_uj`` is readable by root only (CVE-2020-8694,
the PLATYPUS power side channel); the probe says so and gives the fix.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from kit.collectors._sysfs import Attr, listdir, read_int, read_text
from kit.collectors.base import DEFAULT_PERIOD_S, Collector, Probe, Row, TrialTarget

SOURCE = "rapl"
_ZONE = re.compile(r"^intel-rapl:(\d+)(?::(\d+))?$")
PERMISSION_FIX = (
    "run kit as root, or make the counters readable: `sudo chmod a+r /sys/class/powercap/intel-rapl:*/energy_uj "
    "/sys/class/powercap/intel-rapl:*:*/energy_uj` (until reboot), or permanently with a udev rule such as "
    'ACTION=="add", SUBSYSTEM=="powercap", RUN+="/bin/chmod a+r /sys%p/energy_uj"'
)
NO_RAPL_FIX = (
    "load the driver (modprobe intel_rapl_msr; AMD Zen needs Linux 5.8+); virtual machines and containers "
    "usually expose no RAPL"
)


@dataclass
class Zone:
    """One powercap zone and its running total."""

    device: str
    path: Path
    max_range_uj: int | None
    attr: Attr | None = None
    prev_uj: int | None = None
    total_uj: int = 0
    wraps: int = field(default=0)


def discover_zones(sysfs_root: Path = Path("/sys")) -> list[Zone]:
    """RAPL zones under ``<root>/class/powercap``, packages before their subzones."""
    base = sysfs_root / "class" / "powercap"
    names: dict[tuple[int, int | None], str] = {}
    for entry in listdir(base):
        m = _ZONE.match(entry)
        if m and (base / entry / "energy_uj").exists():
            key = (int(m.group(1)), int(m.group(2)) if m.group(2) is not None else None)
            names[key] = read_text(base / entry / "name") or entry
    zones = []
    for (pkg, sub), name in sorted(names.items(), key=lambda kv: (kv[0][0], -1 if kv[0][1] is None else kv[0][1])):
        entry = f"intel-rapl:{pkg}" if sub is None else f"intel-rapl:{pkg}:{sub}"
        device = name if sub is None else f"{names.get((pkg, None), f'intel-rapl:{pkg}')}/{name}"
        zones.append(Zone(device, base / entry, read_int(base / entry / "max_energy_range_uj")))
    # Names are unique in practice; make sure, since they are the rows' devices.
    seen: dict[str, int] = {}
    for z in zones:
        n = seen.get(z.device, 0)
        seen[z.device] = n + 1
        if n:
            z.device = f"{z.device}#{n}"
    return zones


def _read_energy_uj(path: Path) -> int:
    """One read of ``energy_uj``; raises ``PermissionError`` where it is root-only."""
    return int(path.read_text(encoding="ascii").strip())


def step_uj(prev_uj: int, cur_uj: int, max_range_uj: int | None) -> tuple[int | None, bool]:
    """Energy between two counter readings: (µJ or None if implausible, whether it wrapped)."""
    delta = cur_uj - prev_uj
    wrapped = False
    if delta < 0:
        if not max_range_uj:
            return None, False
        delta += max_range_uj
        wrapped = True
    if max_range_uj and delta > max_range_uj // 2:
        return None, wrapped
    return delta, wrapped


class RaplCollector(Collector):
    """Rows: ``rapl/<zone>/energy_j``, cumulative since the collector opened."""

    name = "rapl"

    def __init__(self, period_s: float = DEFAULT_PERIOD_S, *, sysfs_root: Path = Path("/sys")) -> None:
        super().__init__(period_s)
        self.sysfs_root = sysfs_root
        self.zones: list[Zone] = []

    @classmethod
    def build(cls, period_s: float, target: TrialTarget, sysfs_root: Path, **options: object) -> RaplCollector:
        return cls(period_s, sysfs_root=sysfs_root)

    def probe(self) -> Probe:
        zones = discover_zones(self.sysfs_root)
        if not zones:
            return Probe(False, f"no RAPL zone under {self.sysfs_root}/class/powercap", NO_RAPL_FIX)
        for z in zones:
            try:
                _read_energy_uj(z.path / "energy_uj")
            except PermissionError:
                return Probe(
                    False,
                    f"{z.path}/energy_uj: permission denied (root-only since Linux 5.10, CVE-2020-8694)",
                    PERMISSION_FIX,
                )
            except (OSError, ValueError) as exc:
                return Probe(False, f"{z.path}/energy_uj: unreadable ({exc})", NO_RAPL_FIX)
        no_range = [z.device for z in zones if not z.max_range_uj]
        note = f"; no max_energy_range_uj for {', '.join(no_range)} (wraps undetectable)" if no_range else ""
        return Probe(True, f"{len(zones)} zone(s): {', '.join(z.device for z in zones)}{note}")

    def _open(self) -> None:
        self.zones = discover_zones(self.sysfs_root)
        for z in self.zones:
            z.attr = Attr(z.path / "energy_uj")
            z.prev_uj = z.attr.value()
            z.total_uj = 0

    def read(self) -> list[Row]:
        t = time.time()
        rows = []
        for z in self.zones:
            assert z.attr is not None and z.prev_uj is not None
            try:
                cur = z.attr.value()
            except (OSError, ValueError) as exc:
                self.note_error(f"{z.path}/energy_uj: {type(exc).__name__}: {exc}")
                continue
            delta, wrapped = step_uj(z.prev_uj, cur, z.max_range_uj)
            if delta is None:
                self.note_error(
                    f"{z.device}: implausible counter step {z.prev_uj} -> {cur} µJ "
                    f"(range {z.max_range_uj}); step left out (counter reset or a long stall)"
                )
            else:
                z.total_uj += delta
                z.wraps += wrapped
            z.prev_uj = cur
            rows.append(Row(t, SOURCE, z.device, "energy_j", z.total_uj / 1e6, "J"))
        return rows

    def _close(self) -> None:
        for z in self.zones:
            if z.attr is not None:
                z.attr.close()
                z.attr = None
