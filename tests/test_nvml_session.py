"""kit.nvml: the one NVML session. Every init is paired with one shutdown, errors are translated once, and no
other module of the kit calls nvmlInit/nvmlShutdown itself (checked over the source)."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pynvml
import pytest

from kit.collectors.thermal import TemperatureReader
from kit.doctor.drivers import nvidia_driver
from kit.engine import host_gpus
from kit.errors import NVMLError
from kit.gpus import nvml_inventory
from kit.nvml import MISMATCH_FIX, NvmlSession, nvml_error, nvml_session
from kit.selftest import nvml_gpus
from tests._fake_nvml import FakeGpu, FakeNvml, install

KIT = Path(__file__).resolve().parents[1] / "kit"


def test_only_kit_nvml_opens_or_closes_nvml() -> None:
    callers = []
    for path in sorted(KIT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("nvmlInit", "nvmlShutdown", "nvmlInitWithFlags"):
                callers.append(f"{path.relative_to(KIT.parent)}:{node.lineno} {node.attr}")
    assert callers and all(c.startswith("kit/nvml.py:") for c in callers), callers


def test_every_call_site_pairs_init_and_shutdown(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml([FakeGpu(), FakeGpu(temp_c=51)])
    install(monkeypatch, fake)
    assert [g.index for g in nvml_inventory().gpus] == [0, 1]
    assert len(host_gpus()) == 2
    assert nvidia_driver()[0] is not None
    assert nvml_gpus(None) == ([0, 1], "")
    reader = TemperatureReader(nvml=True)
    assert reader()["gpu1"] == 51
    assert fake.inits == fake.shutdowns + 1  # the reader holds its session for the cool-down ...
    reader.close()
    reader.close()  # ... and closing twice shuts down once
    assert fake.inits == fake.shutdowns == 5


def test_sessions_nest_and_close_once(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml([FakeGpu()])
    install(monkeypatch, fake)
    s = NvmlSession()
    assert s.open() is s.open() is pynvml and fake.inits == 1  # one init per session, however often opened
    with nvml_session() as nv:
        assert nv.nvmlDeviceGetCount() == 1 and fake.inits == 2
    assert fake.shutdowns == 1 and s.is_open
    s.close()
    s.close()
    assert fake.shutdowns == 2 and not s.is_open


def test_a_failing_init_is_one_kit_error_and_nothing_to_shut_down(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    install(monkeypatch, fake)
    with pytest.raises(NVMLError) as info, nvml_session():
        pass
    assert info.value.where == "nvmlInit" and "kernel driver" in (info.value.fix or "")
    assert fake.shutdowns == 0
    assert nvml_inventory().gpus == () and host_gpus() == [] and nvidia_driver() == (None, None)
    assert nvml_gpus(None)[0] == [] and "Driver Not Loaded" in nvml_gpus(None)[1]


def test_library_mismatch_and_broken_library_are_translated() -> None:
    mismatch = getattr(pynvml, "NVMLLibraryMismatchError", None)
    if mismatch is not None:
        err = nvml_error(mismatch("newer than the driver"), "here")
        assert err.fix == MISMATCH_FIX and err.where == "here"
    err = nvml_error(OSError("libnvidia-ml.so.1: invalid ELF header"), "nvmlInit")
    assert err.cause.startswith("cannot load NVML") and "ELF" in err.cause


def test_missing_nvidia_ml_py_is_a_kit_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_pynvml(name: str, *args: object, **kwargs: object) -> object:
        if name == "pynvml":
            raise ImportError("No module named 'pynvml'")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    with pytest.raises(NVMLError) as info, nvml_session():
        pass
    assert "nvidia-ml-py" in info.value.cause and "pip install nvidia-ml-py" in (info.value.fix or "")
