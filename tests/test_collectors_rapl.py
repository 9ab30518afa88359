"""RAPL over fake powercap trees: zones, cumulative joules, wraparound, implausible steps, permissions."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.collectors import rapl
from kit.collectors.rapl import RaplCollector, discover_zones, step_uj
from tests._sysfs import intel_server_tree, rapl_zone, set_energy


def energies(c: RaplCollector) -> dict[str, float]:
    rows = c.read()
    assert all(r.source == "rapl" and r.metric == "energy_j" and r.unit == "J" for r in rows)
    return {r.device: r.value for r in rows}


def test_zones_and_names(tmp_path: Path) -> None:
    intel_server_tree(tmp_path)
    rapl_zone(tmp_path, "intel-rapl:0:1", "core", 0)
    rapl_zone(tmp_path, "intel-rapl-mmio:0", "package-0", 0)  # same counter through MMIO: skipped
    rapl_zone(tmp_path, "intel-rapl:2", "psys", 0)
    assert [z.device for z in discover_zones(tmp_path)] == [
        "package-0", "package-0/dram", "package-0/core", "package-1", "package-1/dram", "psys",
    ]


def test_energy_since_open(tmp_path: Path) -> None:
    chips = intel_server_tree(tmp_path)
    c = RaplCollector(sysfs_root=tmp_path)
    assert c.available().ok
    c._open()
    try:
        assert energies(c) == {"package-0": 0.0, "package-0/dram": 0.0, "package-1": 0.0, "package-1/dram": 0.0}
        set_energy(chips["pkg0"], 1_000_000 + 2_500_000)
        set_energy(chips["dram1"], 700_000 + 125)
        got = energies(c)
        assert got["package-0"] == pytest.approx(2.5) and got["package-1/dram"] == pytest.approx(125e-6)
        set_energy(chips["pkg0"], 1_000_000 + 4_000_000)
        assert energies(c)["package-0"] == pytest.approx(4.0)
    finally:
        c._close()


def test_wraparound_is_corrected(tmp_path: Path) -> None:
    zone = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 9_000_000, max_range_uj=10_000_000)
    c = RaplCollector(sysfs_root=tmp_path)
    c._open()
    try:
        set_energy(zone, 9_800_000)
        assert energies(c)["package-0"] == pytest.approx(0.8)
        set_energy(zone, 300_000)  # wrapped: 0.2 J to the top, 0.3 J after
        assert energies(c)["package-0"] == pytest.approx(1.3)
        set_energy(zone, 1_300_000)
        assert energies(c)["package-0"] == pytest.approx(2.3)
        assert c.zones[0].wraps == 1 and c.errors == []
    finally:
        c._close()


def test_implausible_step_is_reported_and_left_out(tmp_path: Path) -> None:
    zone = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 1_000_000, max_range_uj=10_000_000)
    c = RaplCollector(sysfs_root=tmp_path)
    c._open()
    try:
        set_energy(zone, 1_500_000)
        assert energies(c)["package-0"] == pytest.approx(0.5)
        set_energy(zone, 1_400_000)  # slightly backwards: a reset, not a wrap (would be 9.9 J in 100 ms)
        assert energies(c)["package-0"] == pytest.approx(0.5)
        set_energy(zone, 1_600_000)  # counting resumes from the new base
        assert energies(c)["package-0"] == pytest.approx(0.7)
        assert len(c.errors) == 1 and "implausible" in c.errors[0]
    finally:
        c._close()


def test_step_rule() -> None:
    assert step_uj(100, 250, 1000) == (150, False)
    assert step_uj(900, 100, 1000) == (200, True)
    assert step_uj(100, 700, 1000) == (None, False)  # more than half the range in one step
    assert step_uj(500, 400, None) == (None, False)  # backwards without a known range
    assert step_uj(500, 400, 1000) == (None, True)  # a "wrap" of 900 of 1000: implausible


def test_permission_denied_probe_gives_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    intel_server_tree(tmp_path)

    def denied(path: Path) -> int:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(rapl, "_read_energy_uj", denied)  # root reads anything: simulate a normal user
    probe = RaplCollector(sysfs_root=tmp_path).available()
    assert not probe.ok
    assert "permission denied" in probe.detail and "CVE-2020-8694" in probe.detail
    assert "chmod a+r /sys/class/powercap/intel-rapl:*/energy_uj" in probe.fix


def test_permission_denied_at_open_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    intel_server_tree(tmp_path)

    def denied(self: object) -> None:
        raise PermissionError(13, "Permission denied")

    c = RaplCollector(sysfs_root=tmp_path)
    assert c.available().ok
    monkeypatch.setattr(rapl.Attr, "open", denied)
    with c:
        assert not c.running
    assert c.take_rows() == [] and "PermissionError" in c.errors[0]


def test_no_powercap(tmp_path: Path) -> None:
    probe = RaplCollector(sysfs_root=tmp_path).available()
    assert not probe.ok and "no RAPL zone" in probe.detail and "intel_rapl_msr" in probe.fix


def test_context_manager_on_fake_tree(tmp_path: Path) -> None:
    intel_server_tree(tmp_path)
    with RaplCollector(period_s=0.01, sysfs_root=tmp_path) as c:
        pass
    rows = c.take_rows()
    assert {r.device for r in rows} == {"package-0", "package-0/dram", "package-1", "package-1/dram"}
    assert c.errors == []


def test_real_sys_probe_does_not_raise() -> None:
    probe = RaplCollector().available()
    assert probe.detail and (probe.ok or probe.fix)
