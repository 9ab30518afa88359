"""Issue 13 (worker W): the trial's device, its GPU, its precision, on a faked GPU host.

No GPU exists here: the CUDA driver is a fake ``libcuda`` behind
``kit.workloads.cuda_driver`` and the frameworks' device queries are
monkeypatched. Each test names the wrong answer of the old code it catches.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

import pytest

from kit.errors import SpecError
from kit.spec import parse_spec
from kit.workloads import cuda_driver, zoo
from kit.workloads import device as devmod

H100_UUID = "GPU-3f1c2d4e-aaaa-bbbb-cccc-0123456789ab"
OTHER_UUID = "GPU-99999999-0000-1111-2222-333333333333"


class FakeLibcuda:
    """The driver API functions cuda_driver calls, writing through ctypes pointers as libcuda does."""

    def __init__(self, devices: list[tuple[str, str, str, tuple[int, int]]], version: int = 12040,
                 init_rc: int = 0) -> None:
        self.devices, self.version, self.init_rc = devices, version, init_rc

    @staticmethod
    def _set(ref: Any, value: int) -> None:
        ref._obj.value = value

    def cuDriverGetVersion(self, ref: Any) -> int:
        self._set(ref, self.version)
        return 0

    def cuInit(self, flags: Any) -> int:
        return self.init_rc

    def cuDeviceGetCount(self, ref: Any) -> int:
        self._set(ref, len(self.devices))
        return 0

    def cuDeviceGet(self, ref: Any, ordinal: Any) -> int:
        self._set(ref, ordinal.value)
        return 0

    def cuDeviceGetName(self, buf: Any, n: Any, dev: Any) -> int:
        buf.value = self.devices[dev.value][0].encode()
        return 0

    def cuDeviceGetUuid_v2(self, ref: Any, dev: Any) -> int:
        raw = bytes.fromhex(self.devices[dev.value][1].removeprefix("GPU-").replace("-", ""))
        ctypes.memmove(ref._obj, raw, 16)
        return 0

    def cuDeviceGetPCIBusId(self, buf: Any, n: Any, dev: Any) -> int:
        buf.value = self.devices[dev.value][2].encode()
        return 0

    def cuDeviceGetAttribute(self, ref: Any, attr: int, dev: Any) -> int:
        cc = self.devices[dev.value][3]
        self._set(ref, cc[0] if attr == cuda_driver.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR else cc[1])
        return 0

    def cuGetErrorName(self, code: Any, ref: Any) -> int:
        return 1


def fake_driver(monkeypatch: pytest.MonkeyPatch, devices: list[tuple[str, str, str, tuple[int, int]]],
                version: int = 12040) -> None:
    lib = FakeLibcuda(devices, version)
    monkeypatch.setattr(cuda_driver, "_load", lambda: (lib, ""))


ONE_H100 = [("NVIDIA H100 80GB HBM3", H100_UUID, "00000000:1B:00.0", (9, 0))]


# -- the CUDA driver probe ------------------------------------------------------------------------

def test_driver_probe_reads_version_devices_uuid_and_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_driver(monkeypatch, [*ONE_H100, ("NVIDIA L4", OTHER_UUID, "00000000:2C:00.0", (8, 9))], version=12080)
    info = cuda_driver.probe()
    assert info.available and info.count == 2 and info.cuda_version == "12.8"
    assert info.devices[0].name == "NVIDIA H100 80GB HBM3" and info.devices[0].uuid == H100_UUID
    assert info.devices[0].pci_bus_id == "00000000:1B:00.0" and info.devices[0].compute_capability == (9, 0)
    assert info.as_dict()["devices"][1]["uuid"] == OTHER_UUID

    monkeypatch.setattr(cuda_driver, "_load", lambda: (None, "libcuda.so.1: cannot open shared object file"))
    none = cuda_driver.probe()
    assert not none.available and none.count == 0 and "libcuda" in none.reason

    monkeypatch.setattr(cuda_driver, "_load", lambda: (FakeLibcuda([], init_rc=100), ""))
    empty = cuda_driver.probe()  # CUDA_ERROR_NO_DEVICE: a CPU host, or CUDA_VISIBLE_DEVICES=""
    assert empty.available and empty.count == 0 and "no device" in empty.reason

    def broken() -> Any:
        raise RuntimeError("segfault avoided")

    monkeypatch.setattr(cuda_driver, "_load", broken)
    assert "segfault avoided" in cuda_driver.probe().reason  # never raises


def test_probe_on_this_host_does_not_raise() -> None:
    info = cuda_driver.probe()  # whatever this host has
    assert isinstance(info.count, int) and (info.count > 0 or info.reason)


# -- no silent CPU fallback: PyTorch ------------------------------------------------------------

def test_torch_that_cannot_see_the_drivers_gpu_is_an_error_not_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Old code: ``auto`` took the CPU whenever torch.cuda.is_available() was False."""
    import torch

    from kit.workloads import torch_env

    fake_driver(monkeypatch, ONE_H100, version=12040)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    for want in ("auto", "gpu"):
        with pytest.raises(Exception) as err:
            torch_env.pick_device(want)
        assert type(err.value).__name__ == "DeviceUnavailable"
        msg = str(err.value)
        assert torch.__version__ in msg and "CUDA 13.0" in msg and "12.4" in msg  # framework, wheel, driver
        assert "nvidia-smi" in msg and "cu126" in msg and ">= 580" in msg and "matrix.toml" in msg
    assert torch_env.pick_device("cpu").type == "cpu"  # asked for the CPU: the CPU


def test_torch_auto_is_the_cpu_only_when_the_driver_sees_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from kit.workloads import torch_env

    monkeypatch.setattr(cuda_driver, "_load", lambda: (FakeLibcuda([], init_rc=100), ""))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert torch_env.pick_device("auto").type == "cpu"
    with pytest.raises(Exception) as err:
        torch_env.pick_device("gpu")
    assert type(err.value).__name__ == "DeviceUnavailable"


def _fake_torch_gpu(monkeypatch: pytest.MonkeyPatch, uuid: str) -> None:
    import torch

    class Props:
        def __init__(self) -> None:
            self.uuid = uuid.removeprefix("GPU-")  # torch prints the bare UUID

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d=None: Props())


def test_torch_on_another_gpu_than_the_kit_gave_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Old code: cuda:0 was used whatever GPU it was; the telemetry sampled another."""
    from kit.workloads import torch_env

    fake_driver(monkeypatch, ONE_H100)
    _fake_torch_gpu(monkeypatch, H100_UUID)
    req = {"device": "gpu", "gpu_indices": [3], "gpu_uuids": [OTHER_UUID], "workload": {}}
    with pytest.raises(Exception) as err:
        torch_env.pick_device("gpu", req=req)
    assert type(err.value).__name__ == "DeviceUnavailable"
    assert H100_UUID in str(err.value) and OTHER_UUID in str(err.value) and "CUDA_VISIBLE_DEVICES" in str(err.value)
    # the right GPU passes, and so does a request that names none (old runner)
    assert torch_env.pick_device("gpu", req={**req, "gpu_uuids": [H100_UUID.upper()]}).type == "cuda"
    assert torch_env.pick_device("gpu", req={"workload": {}}).type == "cuda"


# -- no silent CPU fallback: TensorFlow ---------------------------------------------------------

@pytest.mark.slow
def test_tensorflow_listing_no_gpu_while_the_driver_sees_one_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Old code: ``auto`` took the CPU whenever TensorFlow listed no GPU."""
    from kit.workloads import tf_env

    fake_driver(monkeypatch, ONE_H100)
    monkeypatch.setattr(tf_env.tf.config, "list_physical_devices", lambda kind=None: [])
    for want in ("auto", "gpu"):
        with pytest.raises(Exception) as err:
            tf_env.configure(want, None)
        assert type(err.value).__name__ == "DeviceUnavailable"
        msg = str(err.value)
        assert tf_env.tf.__version__ in msg and "tensorflow" in msg and "nvidia-smi" in msg
        assert "list_physical_devices" in msg


def test_tensorflow_on_another_gpu_than_the_kit_gave_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from kit.workloads import tf_env

    tf = tf_env.tf
    fake_driver(monkeypatch, ONE_H100)
    gpu = tf.config.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU")
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: [gpu] if kind == "GPU" else [])
    monkeypatch.setattr(tf.config, "set_visible_devices", lambda *a, **k: None)
    monkeypatch.setattr(tf.config.experimental, "set_memory_growth", lambda *a, **k: None)
    with pytest.raises(Exception) as err:
        tf_env.configure("gpu", None, gpu_uuids=[OTHER_UUID])
    assert type(err.value).__name__ == "DeviceUnavailable" and OTHER_UUID in str(err.value)
    assert tf_env.configure("gpu", None, gpu_uuids=[H100_UUID]) == "/GPU:0"


def test_tf_env_of_a_full_gpu_device_name_records_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Old code: zoo_dist_keras passed "/job:localhost/.../device:GPU:0" and the env said cpu."""
    from kit.workloads import tf_env

    tf = tf_env.tf
    fake_driver(monkeypatch, ONE_H100)
    gpu = tf.config.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU")
    monkeypatch.setattr(tf.config, "get_visible_devices", lambda kind=None: [gpu])
    monkeypatch.setattr(tf.config.experimental, "get_device_details",
                        lambda d: {"device_name": "NVIDIA H100 80GB HBM3", "compute_capability": (9, 0)})
    monkeypatch.setattr(tf.config.experimental, "get_memory_info", lambda d: {"current": 0, "peak": 123})
    monkeypatch.setitem(tf_env._STATE, "driver", None)
    monkeypatch.setitem(tf_env._STATE, "tf32", {"mode": "off", "matmul": False, "conv": False})
    env = tf_env.tf_env("/job:localhost/replica:0/task:0/device:GPU:0")
    assert env["device_kind"] == "gpu" and env["device_name"] == "NVIDIA H100 80GB HBM3"
    assert env["gpu_uuid"] == H100_UUID and env["gpu_uuids"] == [H100_UUID]
    assert env["tf32"] == {"mode": "off", "matmul": False, "conv": False} and env["precision"] == "fp32"
    import inspect

    from kit.workloads import zoo_dist_keras

    src = inspect.getsource(zoo_dist_keras.run)
    assert 'tf_env.tf_env(names[0]' not in src  # the kind decides, never a full device name


# -- TF32 -----------------------------------------------------------------------------------------

def test_torch_tf32_flags_applied_identically() -> None:
    import torch

    from kit.workloads import torch_env

    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        assert torch_env.apply_tf32("on") == {"matmul": True, "conv": True}
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        assert torch_env.apply_tf32("off") == {"matmul": False, "conv": False}
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, True  # PyTorch's defaults
        assert torch_env.apply_tf32("native") == {"matmul": False, "conv": True}  # left alone
        device, rec = torch_env.setup({"device": "cpu", "workload": {"tf32": "on"}})
        assert device.type == "cpu" and rec == {"mode": "on", "matmul": None, "conv": None}  # CPU: n/a
        assert torch.backends.cuda.matmul.allow_tf32  # but the switch is set as asked
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_tensorflow_tf32_switch_applied_and_recorded() -> None:
    from kit.workloads import tf_env

    tf = tf_env.tf
    saved = tf.config.experimental.tensor_float_32_execution_enabled()
    try:
        assert tf_env.apply_tf32("off", True) == {"mode": "off", "matmul": False, "conv": False}
        assert not tf.config.experimental.tensor_float_32_execution_enabled()
        assert tf_env.apply_tf32("on", True) == {"mode": "on", "matmul": True, "conv": True}
        assert tf_env.apply_tf32("on", False) == {"mode": "on", "matmul": None, "conv": None}
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(saved)


def test_precision_used_follows_tf32_and_the_gpu() -> None:
    on = {"mode": "on", "matmul": True, "conv": True}
    native_torch = {"mode": "native", "matmul": False, "conv": True}
    assert devmod.precision_used("fp32", on, (9, 0), True) == "tf32"
    assert devmod.precision_used("fp32", on, (7, 0), True) == "fp32"  # Volta: no TF32
    assert devmod.precision_used("fp32", native_torch, (8, 0), True) == "tf32"  # convolutions
    assert devmod.precision_used("fp32", native_torch, (8, 0), False) == "fp32"  # matmul models
    assert devmod.precision_used("bf16", native_torch, (8, 0), True) == "bf16"


# -- MFU peaks: exact models ----------------------------------------------------------------------

def test_peak_lookup_matches_the_exact_model_and_the_precision_used() -> None:
    """Old code matched substrings: L40 was an L4, A10G an A10, H200 NVL an H200 (SXM), and fp32 was TF32."""
    assert zoo.gpu_peak_flops("NVIDIA L40", "fp32")[0] == 90.5e12
    assert zoo.gpu_peak_flops("NVIDIA L4", "fp32")[0] == 30.3e12
    assert zoo.gpu_peak_flops("NVIDIA L40S", "tf32")[0] == 183e12
    assert zoo.gpu_peak_flops("NVIDIA A10", "tf32")[0] == 62.5e12
    peak, why = zoo.gpu_peak_flops("NVIDIA A10G", "tf32")
    assert peak is None and "A10G" in why
    assert zoo.gpu_peak_flops("NVIDIA H200 NVL", "bf16")[0] == 835.5e12
    assert zoo.gpu_peak_flops("NVIDIA H200", "bf16")[0] == 989.4e12
    assert zoo.gpu_peak_flops("NVIDIA H100 PCIe", "fp32")[0] == 51.2e12  # TF32 off: CUDA cores
    assert zoo.gpu_peak_flops("NVIDIA H100 PCIe", "tf32")[0] == 378e12
    assert zoo.gpu_peak_flops("NVIDIA H100 80GB HBM3", "tf32")[0] == 494.7e12
    assert zoo.gpu_peak_flops("NVIDIA H100 NVL", "fp32")[0] == 60e12
    assert zoo.gpu_peak_flops("NVIDIA A100-SXM4-80GB", "fp32")[0] == 19.5e12
    assert zoo.gpu_peak_flops("Tesla V100-SXM2-16GB", "fp32")[0] == 15.7e12
    assert zoo.gpu_peak_flops("Tesla V100-PCIE-32GB", "fp32")[0] == 14e12
    peak, why = zoo.gpu_peak_flops("Tesla T4", "tf32")
    assert peak is None and "tf32" in why  # no TF32 on Turing: unknown, with the reason
    assert zoo.gpu_peak_flops("NVIDIA GeForce RTX 2080 Ti", "fp16")[0] == 53.8e12
    assert zoo.gpu_peak_flops("Mystery GPU", "fp32") == (None, "no peak known for 'Mystery GPU' (model not in the table)")


# -- spec: tf32 and min_phase_s ---------------------------------------------------------------------

def _spec(extra: str) -> Any:
    """The LeNet study's spec with its tf32/min_phase_s lines replaced by ``extra``."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "experiments" / "florencio2019_lenet" / "experiment.toml").read_text()
    text = re.sub(r"(?m)^(tf32|min_phase_s) = .*$", "", text)
    text = text.replace('name = "lenet5"\n', f'name = "lenet5"\n{extra}\n', 1)
    return parse_spec(text, "t.toml")


def test_spec_tf32_and_min_phase_s_are_validated_common_keys() -> None:
    wl = _spec("").workload
    assert wl.tf32 == "native" and wl.min_phase_s == 0.0
    wl = _spec('tf32 = "off"\nmin_phase_s = 1.5').workload
    assert wl.tf32 == "off" and wl.min_phase_s == 1.5
    assert wl.flat()["tf32"] == "off" and wl.flat()["min_phase_s"] == 1.5  # reaches request.json
    for extra, where, expect in (('tf32 = "maybe"', "workload.tf32", "native"),
                                 ("tf32 = true", "workload.tf32", "string"),
                                 ("min_phase_s = -1.0", "workload.min_phase_s", ">= 0"),
                                 ("min_phase_s = inf", "workload.min_phase_s", "finite"),
                                 ("min_phase_s = nan", "workload.min_phase_s", "finite"),
                                 ('min_phase_s = "1"', "workload.min_phase_s", "number")):
        with pytest.raises(SpecError) as err:
            _spec(extra)
        assert where in str(err.value) and expect in str(err.value), str(err.value)


def test_every_paper_profile_states_its_tf32_choice() -> None:
    from pathlib import Path

    from kit.spec import load_spec

    for path in sorted(Path(__file__).resolve().parents[1].glob("experiments/*/experiment.toml")):
        spec = load_spec(path)
        assert spec.workload.tf32 in ("off", "on"), path  # chosen, not left to the frameworks' defaults
        assert "TF32" in path.read_text(encoding="utf-8"), path  # and the file says why
    lenet = load_spec(Path(__file__).resolve().parents[1] / "experiments" / "florencio2019_lenet" / "experiment.toml")
    assert lenet.workload.min_phase_s >= 1.0


# -- request helpers, phase repetition, OOM detectors ---------------------------------------------------

def test_request_device_prefers_the_runners_resolution() -> None:
    assert devmod.requested({"device": "gpu", "workload": {"device": "auto"}}) == "gpu"
    assert devmod.requested({"workload": {"device": "cpu"}}) == "cpu"
    assert devmod.requested({}) == "auto"
    assert devmod.decide("auto", cuda_driver.DriverInfo(available=True)) == "cpu"
    assert devmod.decide("auto", cuda_driver.DriverInfo(True, "", 12040, [cuda_driver.CudaDevice(0)])) == "gpu"


def test_repeat_phase_runs_full_passes_until_min_s() -> None:
    """Whole passes until the phase has lasted min_s: the last pass began before min_s was reached, the total is at
    least min_s, and the per-pass figure is the passes' own mean. (Read from the passes' own start and end times, not
    from a count of fixed-length passes, which a busy host stretches.)"""
    import time

    calls: list[tuple[float, float]] = []

    def one() -> int:
        t0 = time.perf_counter()
        while time.perf_counter() < t0 + 0.02:
            pass
        calls.append((t0, time.perf_counter()))
        return 7

    first, passes, total = devmod.repeat_phase(one, 0.1, lambda: None)
    assert first == 7 and passes == len(calls) >= 2 and total >= 0.1
    assert sum(e - s for s, e in calls[:-1]) < 0.1  # no pass more than needed: before the last, min_s was not reached
    mean_pass = sum(e - s for s, e in calls) / passes
    assert math.isclose(total / passes, mean_pass, rel_tol=0.5)  # per pass stays per pass
    calls.clear()
    assert devmod.repeat_phase(one, 0.0, lambda: None)[1] == 1 and len(calls) == 1


def test_one_oom_detector_per_framework() -> None:
    """Old code: train_torch/lenet_torch/zoo_dist_torch each had their own, matching only 'out of memory'."""
    from kit.workloads import (
        lenet_keras,
        lenet_torch,
        tf_env,
        torch_env,
        train_keras,
        train_torch,
        zoo_dist_torch,
        zoo_torch,
    )

    for mod in (lenet_torch, train_torch, zoo_torch, zoo_dist_torch):
        assert mod.is_oom is torch_env.is_oom, mod.__name__
    for mod in (lenet_keras, train_keras):
        assert mod.is_oom is tf_env.is_oom, mod.__name__
    assert torch_env.is_oom(RuntimeError("CUDA error: cannot allocate memory"))
    assert tf_env.is_oom(tf_env.tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor"))
    assert not torch_env.is_oom(RuntimeError("shape mismatch"))
    from kit.workloads import zoo_keras

    assert zoo_keras.is_oom(MemoryError())
