"""Builders for fake sysfs trees (hwmon, thermal zones, powercap) under a tmp_path root."""

from __future__ import annotations

from pathlib import Path


def hwmon_chip(root: Path, index: int, name: str, temps: dict[int, tuple[str | None, int]],
               *, in_device: bool = False) -> Path:
    """``/class/hwmon/hwmon<index>`` with ``name`` and temp<N>_input (m°C) / temp<N>_label.

    ``in_device`` puts the attributes in ``device/`` (old drivers' layout).
    """
    d = root / "class" / "hwmon" / f"hwmon{index}"
    attrs = d / "device" if in_device else d
    attrs.mkdir(parents=True, exist_ok=True)
    (attrs / "name").write_text(name + "\n")
    for n, (label, mdeg) in temps.items():
        (attrs / f"temp{n}_input").write_text(f"{mdeg}\n")
        if label is not None:
            (attrs / f"temp{n}_label").write_text(label + "\n")
    # a few non-temperature attributes real chips have, which must be ignored
    (attrs / "in0_input").write_text("1200\n")
    (attrs / "temp1_crit").write_text("100000\n")
    return attrs


def set_temp(attrs: Path, n: int, mdeg: int) -> None:
    (attrs / f"temp{n}_input").write_text(f"{mdeg}\n")


def thermal_zone(root: Path, index: int, kind: str, mdeg: int) -> Path:
    d = root / "class" / "thermal" / f"thermal_zone{index}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "type").write_text(kind + "\n")
    (d / "temp").write_text(f"{mdeg}\n")
    # cooling devices live beside the zones and must be ignored
    (root / "class" / "thermal" / "cooling_device0").mkdir(exist_ok=True)
    return d


def rapl_zone(root: Path, entry: str, name: str, energy_uj: int, max_range_uj: int | None = 262143328850) -> Path:
    """``/class/powercap/<entry>`` (e.g. ``intel-rapl:0`` or ``intel-rapl:0:2``)."""
    d = root / "class" / "powercap" / entry
    d.mkdir(parents=True, exist_ok=True)
    (d / "name").write_text(name + "\n")
    (d / "energy_uj").write_text(f"{energy_uj}\n")
    (d / "enabled").write_text("1\n")
    if max_range_uj is not None:
        (d / "max_energy_range_uj").write_text(f"{max_range_uj}\n")
    (root / "class" / "powercap" / "intel-rapl").mkdir(exist_ok=True)  # the control type, not a zone
    return d


def set_energy(zone: Path, energy_uj: int) -> None:
    (zone / "energy_uj").write_text(f"{energy_uj}\n")


def intel_server_tree(root: Path) -> dict[str, Path]:
    """Two coretemp packages, an NVMe drive, acpitz; two RAPL packages with DRAM."""
    chips = {
        "core0": hwmon_chip(root, 0, "coretemp", {1: ("Package id 0", 51000), 2: ("Core 0", 49000), 3: ("Core 1", 50000)}),
        "core1": hwmon_chip(root, 1, "coretemp", {1: ("Package id 1", 57000), 2: ("Core 0", 55000)}),
        "nvme": hwmon_chip(root, 2, "nvme", {1: ("Composite", 38850)}),
        "acpi": hwmon_chip(root, 3, "acpitz", {1: (None, 27800)}),
    }
    thermal_zone(root, 0, "acpitz", 27800)
    thermal_zone(root, 1, "x86_pkg_temp", 57000)
    chips["pkg0"] = rapl_zone(root, "intel-rapl:0", "package-0", 1_000_000)
    chips["dram0"] = rapl_zone(root, "intel-rapl:0:0", "dram", 500_000, 65712999613)
    chips["pkg1"] = rapl_zone(root, "intel-rapl:1", "package-1", 2_000_000)
    chips["dram1"] = rapl_zone(root, "intel-rapl:1:0", "dram", 700_000, 65712999613)
    return chips
