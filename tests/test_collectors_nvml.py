"""NVML collector, inventory and probe against a fake NVML autospec'd on the real pynvml."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pynvml
import pytest

from kit.collectors.base import TrialTarget
from kit.collectors.nvml import NvmlCollector, gpu_inventory, nvml_error, nvml_probe
from kit.errors import CollectorError, NVMLError
from tests._fake_nvml import FakeGpu, FakeNvml, install

ALL_METRICS = {
    "gpu_util_pct", "mem_util_pct", "mem_used_bytes", "temp_c", "power_w", "power_avg_w", "energy_j",
    "sm_clock_mhz", "mem_clock_mhz", "throttle_reasons", "pstate", "pcie_tx_kbs", "pcie_rx_kbs", "fan_pct",
    "power_limit_w", "foreign_procs",
}


def _real_nvml_works() -> bool:
    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError, OSError):
        return False
    pynvml.nvmlShutdown()
    return True


def opened(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch, **kw: object) -> NvmlCollector:
    install(monkeypatch, fake)
    c = NvmlCollector(**kw)  # type: ignore[arg-type]
    assert c.available().ok, c.available()
    c._open()
    return c


def by_metric(rows: list, device: str = "0") -> dict[str, object]:
    return {r.metric: r for r in rows if r.device == device}


def test_fake_refuses_a_misspelt_nvml_function(monkeypatch: pytest.MonkeyPatch) -> None:
    class Misspelt(FakeNvml):
        def nvmlDeviceGetPowerUsge(self, h: object) -> int:  # not in pynvml
            return 0

    with pytest.raises(AttributeError, match="nvmlDeviceGetPowerUsge"):
        install(monkeypatch, Misspelt([FakeGpu()]))


def test_autospec_rejects_a_wrong_call(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeNvml([FakeGpu()]))
    with pytest.raises(TypeError):
        pynvml.nvmlDeviceGetTemperature(FakeGpu())  # the sensor argument is missing


def test_reading_has_every_metric_in_kit_units(monkeypatch: pytest.MonkeyPatch) -> None:
    c = opened(FakeNvml([FakeGpu()]), monkeypatch)
    rows = c.read()
    m = by_metric(rows)
    assert set(m) == ALL_METRICS  # no trial yet: no trial_mem_used_bytes
    assert {r.source for r in rows} == {"nvml"}
    assert m["power_w"].value == pytest.approx(312.5) and m["power_w"].unit == "W"
    assert m["power_avg_w"].value == pytest.approx(300.0)
    assert m["energy_j"].value == pytest.approx(5000.0) and m["energy_j"].unit == "J"
    assert m["mem_used_bytes"].value == 12 * 2**30 and m["mem_used_bytes"].unit == "B"
    assert m["temp_c"].value == 64 and m["temp_c"].unit == "C"
    assert m["throttle_reasons"].unit == "bitmask" and m["throttle_reasons"].value == 1.0
    assert m["power_limit_w"].value == pytest.approx(700.0)
    assert m["pcie_rx_kbs"].value == 3400 and m["pcie_tx_kbs"].unit == "KB/s"
    assert m["foreign_procs"].value == 0
    assert c.errors == [] and c.unsupported == {0: []}
    c._close()


def test_unsupported_queries_are_dropped_silently(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(unsupported={"nvmlDeviceGetFanSpeed", "nvmlDeviceGetTotalEnergyConsumption"}, power_avg_mw=None)
    c = opened(FakeNvml([gpu]), monkeypatch)
    for _ in range(3):
        m = by_metric(c.read())
    assert "fan_pct" not in m and "energy_j" not in m and "power_avg_w" not in m
    assert "power_w" in m
    assert set(c.unsupported[0]) == {"fan", "energy", "power_avg"}
    assert c.errors == []


def test_throttle_reasons_fall_back_to_the_old_name(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(reasons=0x24, unsupported={"nvmlDeviceGetCurrentClocksEventReasons"})
    fake = FakeNvml([gpu])
    c = opened(fake, monkeypatch)
    m = by_metric(c.read())
    assert m["throttle_reasons"].value == 0x24
    assert c.errors == []


def test_pcie_is_read_every_nth_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    mocks = install(monkeypatch, FakeNvml([FakeGpu()]))
    c = NvmlCollector(pcie_every=3)
    c._open()
    mocks["nvmlDeviceGetPcieThroughput"].reset_mock()
    has_pcie = ["pcie_tx_kbs" in by_metric(c.read()) for _ in range(7)]
    assert has_pcie == [True, False, False, True, False, False, True]
    assert mocks["nvmlDeviceGetPcieThroughput"].call_count == 3 * 2  # TX and RX


def test_foreign_processes_and_trial_gpu_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        gpu = FakeGpu(procs=[(os.getpid(), 2 * 2**30), (child.pid, 2**30), (2**22 + 7, 5 * 2**30)])
        target = TrialTarget()
        c = opened(FakeNvml([gpu]), monkeypatch, target=target)
        m = by_metric(c.read())
        assert m["foreign_procs"].value == 3  # no trial yet: everything on the GPU is someone else's
        assert "trial_mem_used_bytes" not in m
        target.pid = os.getpid()  # the backend fills the shared target once the trial runs
        m = by_metric(c.read())
        assert m["foreign_procs"].value == 1  # this process and its child are the trial's tree
        assert m["trial_mem_used_bytes"].value == 3 * 2**30
    finally:
        child.kill()
        child.wait()


def test_lost_gpu_is_recorded_once_and_others_go_on(monkeypatch: pytest.MonkeyPatch) -> None:
    g0, g1 = FakeGpu(), FakeGpu(temp_c=70)
    c = opened(FakeNvml([g0, g1]), monkeypatch)
    assert by_metric(c.read(), "0") and by_metric(c.read(), "1")
    g0.lost = True
    rows = c.read()
    lost = [r for r in rows if r.metric == "gpu_lost"]
    assert [(r.device, r.value) for r in lost] == [("0", 1.0)]
    assert by_metric(rows, "1")["temp_c"].value == 70
    assert any("GPU is lost" in e and "GPU 0" in e for e in c.errors)
    rows = c.read()
    assert not [r for r in rows if r.device == "0"]  # not read again
    assert by_metric(rows, "1")


def test_transient_error_is_recorded_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu()
    c = opened(FakeNvml([gpu]), monkeypatch)
    gpu.fail_once["nvmlDeviceGetTemperature"] = pynvml.NVML_ERROR_UNKNOWN
    m = by_metric(c.read())
    assert "temp_c" not in m and "power_w" in m
    assert len(c.errors) == 1 and "temperature" in c.errors[0]
    assert "temp_c" in by_metric(c.read())


def test_gpu_indices_select_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    c = opened(FakeNvml([FakeGpu(), FakeGpu()]), monkeypatch, gpu_indices=[1])
    assert {r.device for r in c.read()} == {"1"}
    bad = NvmlCollector(gpu_indices=[5])
    probe = bad.available()
    assert not probe.ok and "GPU index 5" in probe.detail


def test_context_manager_samples_and_shuts_nvml_down(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml([FakeGpu()])
    install(monkeypatch, fake)
    with NvmlCollector(period_s=0.01) as c:
        deadline = time.monotonic() + 5
        while len({r.t for r in c.rows}) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    rows = c.take_rows()
    assert len({r.t for r in rows}) >= 3
    assert c.errors == []
    assert fake.inits == fake.shutdowns >= 2  # probe and run each init and shut down


def test_probe_without_library_gives_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    probe = nvml_probe()
    assert not probe.ok
    assert "Library Not Found" in probe.detail and "libnvidia-ml" in probe.fix
    assert gpu_inventory() == []
    with NvmlCollector() as c:  # unavailable: entering does nothing and raises nothing
        pass
    assert c.take_rows() == [] and not c.running


def test_probe_with_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeNvml([]))
    probe = nvml_probe()
    assert not probe.ok and "no GPU" in probe.detail


def test_probe_names_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeNvml([FakeGpu(), FakeGpu(name="NVIDIA A100-SXM4-40GB")]))
    probe = nvml_probe()
    assert probe.ok and "550.54.15" in probe.detail and "1: NVIDIA A100-SXM4-40GB" in probe.detail


def test_inventory_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(unsupported={"nvmlDeviceGetApplicationsClock", "nvmlDeviceGetEccMode"})
    fake = FakeNvml([gpu])
    install(monkeypatch, fake)
    (inv,) = gpu_inventory()
    assert inv["name"] == "NVIDIA H100 80GB HBM3" and inv["uuid"] == "GPU-00000000-fake"
    assert inv["driver_version"] == "550.54.15" and inv["cuda_driver_version"] == "12.4"
    assert inv["pci_bus_id"] == "00000000:17:00.0" and inv["compute_capability"] == "9.0"
    assert inv["power_limit_default_w"] == 700.0 and inv["power_limit_min_w"] == 200.0
    assert inv["max_clock_sm_mhz"] == 1980 and inv["persistence_mode"] is True
    assert inv["app_clock_sm_mhz"] is None and inv["ecc_mode_current"] is None  # not supported: None
    assert inv["pcie_gen_current"] == 5 and inv["pcie_width_max"] == 16
    assert inv["memory_total_bytes"] == 80 * 2**30
    assert fake.inits == fake.shutdowns == 1


def test_nvml_errors_are_translated() -> None:
    err = nvml_error(pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED), "nvmlInit")
    assert isinstance(err, NVMLError) and isinstance(err, CollectorError)
    assert err.where == "nvmlInit" and "Driver Not Loaded" in err.cause and "kernel driver" in (err.fix or "")


def test_open_failure_is_recorded_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml([FakeGpu()])
    install(monkeypatch, fake)
    c = NvmlCollector()
    assert c.available().ok
    fake.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED  # the driver went away between probe and run
    with c:
        assert not c.running
    assert any("Driver Not Loaded" in e for e in c.errors)


@pytest.mark.skipif(_real_nvml_works(), reason="this host has NVML: the no-NVML path is not reachable")
def test_real_pynvml_without_nvidia_library() -> None:
    probe = nvml_probe()
    assert not probe.ok and probe.fix
    assert gpu_inventory() == []


def test_gpu_lost_before_the_run_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    g0, g1 = FakeGpu(), FakeGpu()
    fake = FakeNvml([g0, g1])
    install(monkeypatch, fake)
    c = NvmlCollector()
    assert c.available().ok
    g0.lost = True
    with c:
        assert c.running
    assert {r.device for r in c.take_rows()} == {"1"}
    assert any("GPU 0" in e and "not sampled" in e for e in c.errors)
