"""hwmon / thermal-zone temperatures and the CPU package rule, on fake sysfs trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.collectors.hwmon import HwmonCollector, discover
from tests._sysfs import hwmon_chip, intel_server_tree, set_temp, thermal_zone


def one_reading(root: Path) -> dict[str, float]:
    c = HwmonCollector(sysfs_root=root)
    assert c.available().ok, c.available()
    c._open()
    try:
        rows = c.read()
    finally:
        c._close()
    assert all(r.source == "hwmon" and r.unit == "C" for r in rows)
    assert all(r.metric == ("cpu_temp_c" if r.device == "cpu" else "temp_c") for r in rows)
    return {r.device: r.value for r in rows}


def test_intel_two_packages_max_and_numbered_chips(tmp_path: Path) -> None:
    intel_server_tree(tmp_path)
    got = one_reading(tmp_path)
    assert got["cpu"] == 57.0  # max over "Package id 0" (51) and "Package id 1" (57), not a core
    assert got["coretemp.0:Package id 0"] == 51.0 and got["coretemp.1:Core 0"] == 55.0
    assert got["nvme:Composite"] == 38.85
    assert got["acpitz:temp1"] == 27.8  # no label: temp<N>
    assert not any(d.startswith("thermal_zone") for d in got)  # hwmon first; zones only as fallback


def test_coretemp_without_package_uses_max_core(tmp_path: Path) -> None:
    hwmon_chip(tmp_path, 0, "coretemp", {2: ("Core 0", 45000), 3: ("Core 1", 48500)})
    assert one_reading(tmp_path)["cpu"] == 48.5


@pytest.mark.parametrize(
    ("chip", "temps", "want"),
    [
        ("k10temp", {1: ("Tctl", 70000), 2: ("Tdie", 60000), 3: ("Tccd1", 66000)}, 60.0),
        ("k10temp", {1: ("Tctl", 70000), 3: ("Tccd1", 66000)}, 70.0),
        ("k10temp", {3: ("Tccd1", 66000), 4: ("Tccd2", 68000)}, 68.0),
        ("zenpower", {1: ("Tdie", 52000), 2: ("Tctl", 52000)}, 52.0),
        ("cpu_thermal", {1: (None, 44000)}, 44.0),
    ],
)
def test_amd_and_arm_cpu_rules(tmp_path: Path, chip: str, temps: dict, want: float) -> None:
    hwmon_chip(tmp_path, 0, "amdgpu", {1: ("edge", 90000)})  # a hot non-CPU chip never counts
    hwmon_chip(tmp_path, 1, chip, temps)
    assert one_reading(tmp_path)["cpu"] == want


def test_no_cpu_sensor_no_cpu_row(tmp_path: Path) -> None:
    hwmon_chip(tmp_path, 0, "nvme", {1: ("Composite", 35000)})
    hwmon_chip(tmp_path, 1, "acpitz", {1: (None, 30000)})
    c = HwmonCollector(sysfs_root=tmp_path)
    assert c.available().ok and "no CPU sensor" in c.available().detail
    got = one_reading(tmp_path)
    assert "cpu" not in got and got["nvme:Composite"] == 35.0


def test_thermal_zones_as_fallback(tmp_path: Path) -> None:
    thermal_zone(tmp_path, 0, "acpitz", 27800)
    thermal_zone(tmp_path, 1, "x86_pkg_temp", 61000)
    got = one_reading(tmp_path)
    assert got == {"thermal_zone0:acpitz": 27.8, "thermal_zone1:x86_pkg_temp": 61.0, "cpu": 61.0}


def test_cpu_from_zone_when_hwmon_has_no_cpu_chip(tmp_path: Path) -> None:
    hwmon_chip(tmp_path, 0, "nvme", {1: ("Composite", 35000)})
    thermal_zone(tmp_path, 0, "acpitz", 27800)
    thermal_zone(tmp_path, 1, "x86_pkg_temp", 61000)
    got = one_reading(tmp_path)
    assert got == {"nvme:Composite": 35.0, "thermal_zone1:x86_pkg_temp": 61.0, "cpu": 61.0}


def test_old_layout_attributes_in_device_dir(tmp_path: Path) -> None:
    hwmon_chip(tmp_path, 0, "coretemp", {1: ("Package id 0", 50000)}, in_device=True)
    assert one_reading(tmp_path) == {"coretemp:Package id 0": 50.0, "cpu": 50.0}


def test_natural_order_of_hwmon_dirs(tmp_path: Path) -> None:
    for i in (10, 2):
        hwmon_chip(tmp_path, i, f"chip{i}", {1: ("t", 1000 * i)})
    sensors, _ = discover(tmp_path)
    assert [s.device for s in sensors] == ["chip2:t", "chip10:t"]


def test_values_refresh_and_a_bad_sensor_is_reported_once(tmp_path: Path) -> None:
    chips = intel_server_tree(tmp_path)
    c = HwmonCollector(sysfs_root=tmp_path)
    c._open()
    try:
        c.read()
        set_temp(chips["core1"], 1, 80000)
        (chips["nvme"] / "temp1_input").write_text("garbage\n")
        for _ in range(3):
            got = {r.device: r.value for r in c.read()}
        assert got["cpu"] == 80.0 and got["coretemp.1:Package id 1"] == 80.0
        assert "nvme:Composite" not in got
        assert len(c.errors) == 1 and "temp1_input" in c.errors[0]
    finally:
        c._close()


def test_no_sensor_probe_gives_fix(tmp_path: Path) -> None:
    probe = HwmonCollector(sysfs_root=tmp_path).available()
    assert not probe.ok and "no temperature sensor" in probe.detail and "modprobe coretemp" in probe.fix


def test_context_manager_on_fake_tree(tmp_path: Path) -> None:
    intel_server_tree(tmp_path)
    with HwmonCollector(period_s=0.01, sysfs_root=tmp_path) as c:
        assert c.running
    rows = c.take_rows()
    assert sum(r.device == "cpu" for r in rows) >= 2  # first reading on enter, last on exit
    assert c.errors == [] and not c.running


def test_real_sys_probe_does_not_raise() -> None:
    probe = HwmonCollector().available()
    assert probe.detail and (probe.ok or probe.fix)
