"""Driver vs the CUDA of the framework wheels: the table, the torch build that fits, `kit doctor`, the Makefile helper."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from kit.doctor import drivers as doctor
from kit.doctor.drivers import (
    CUDA_MINOR_COMPAT_DRIVER,
    CUDA_TOOLKIT_DRIVER,
    check_driver,
    driver_cuda,
    driver_fits,
    torch_choice,
    version_tuple,
)
from tests._fake_nvml import FakeGpu, FakeNvml, install

ROOT = Path(__file__).resolve().parents[1]


def test_the_table_holds_nvidias_minimum_drivers() -> None:
    assert CUDA_TOOLKIT_DRIVER["12.0"] == "525.60.13"
    assert CUDA_TOOLKIT_DRIVER["12.4"] == "550.54.14"
    assert CUDA_TOOLKIT_DRIVER["12.8"] == "570.26"
    assert CUDA_TOOLKIT_DRIVER["13.0"] == "580.65.06"
    assert CUDA_MINOR_COMPAT_DRIVER == {11: "450.80.02", 12: "525.60.13", 13: "580"}
    ordered = sorted(CUDA_TOOLKIT_DRIVER, key=version_tuple)
    drivers = [version_tuple(CUDA_TOOLKIT_DRIVER[c]) for c in ordered]
    assert drivers == sorted(drivers)  # a newer CUDA never needs an older driver


@pytest.mark.parametrize(("driver", "cuda", "ok"), [
    ("550.54.15", "13.0", False),  # the host: PyPI's torch 2.14 (CUDA 13.0) cannot run
    ("550.54.15", "12.4", True),
    ("550.54.15", "12.6", True),  # minor-version compatibility
    ("535.104.05", "12.9", True),
    ("520.61.05", "12.0", False),
    ("580.65.06", "13.0", True),
    ("590.44.01", "13.0", True),
    ("550.54.15", "", True),  # a CPU build needs no driver
])
def test_driver_fits(driver: str, cuda: str, ok: bool) -> None:
    assert driver_fits(driver, cuda)[0] is ok


def test_driver_cuda() -> None:
    assert driver_cuda("550.54.15") == "12.4"
    assert driver_cuda("570.86.10") == "12.8"
    assert driver_cuda("580.82.07") == "13.0"
    assert driver_cuda("470.82.01") is None


@pytest.mark.parametrize(("driver", "flavour", "index"), [
    ("550.54.15", "cu126", "https://download.pytorch.org/whl/cu126"),
    ("560.35.03", "cu126", "https://download.pytorch.org/whl/cu126"),
    ("570.86.10", "cu128", "https://download.pytorch.org/whl/cu128"),
    ("580.82.07", "cu130", None),  # PyPI's default wheel
])
def test_torch_choice(driver: str, flavour: str, index: str | None) -> None:
    c = torch_choice(driver)
    assert c["ok"] and c["flavour"] == flavour and c["index_url"] == index
    assert driver in c["reason"]


def test_torch_choice_refuses_a_too_old_driver() -> None:
    c = torch_choice("470.82.01")
    assert not c["ok"] and "update the NVIDIA driver" in c["reason"]


def test_doctor_says_which_torch_build_fits_the_driver() -> None:
    found = {f["check"]: f for f in check_driver("550.54.15", {"pytorch": "13.0", "tensorflow": "12.5.1"})}
    pt = found["pytorch build vs driver"]
    assert not pt["ok"] and not pt["optional"]
    assert "needs a driver >= 580" in pt["detail"]
    assert "--index-url https://download.pytorch.org/whl/cu126" in pt["fix"]
    tf = found["tensorflow build vs driver"]
    assert tf["ok"] and "minor-version compatibility" in tf["detail"] and "PTX" in tf["detail"]
    assert found["torch build for this driver"]["detail"].startswith("torch cu126")


def test_doctor_flags_a_cpu_build_on_a_gpu_host() -> None:
    found = {f["check"]: f for f in check_driver("580.82.07", {"pytorch": None})}
    assert not found["pytorch build vs driver"]["ok"]
    assert "CPU build" in found["pytorch build vs driver"]["detail"]


def test_doctor_reads_the_driver_from_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeNvml([FakeGpu()]))
    assert doctor.nvidia_driver() == ("550.54.15", "12.4")
    found = {f["check"]: f for f in check_driver(cudas={"pytorch": "13.0"})}
    assert found["NVIDIA driver"]["ok"] and "550.54.15" in found["NVIDIA driver"]["detail"]
    assert not found["pytorch build vs driver"]["ok"]


def test_doctor_without_a_driver_is_an_optional_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    import pynvml

    install(monkeypatch, FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    (f,) = check_driver(cudas={})
    assert not f["ok"] and f["optional"]


def test_framework_cuda_reads_the_wheels_without_importing_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('must not be imported')\n")
    (tmp_path / "torch" / "version.py").write_text("__version__ = '2.14.1+cu126'\ncuda: Optional[str] = '12.6'\n")
    tf = tmp_path / "tensorflow"
    (tf / "python" / "platform").mkdir(parents=True)
    (tf / "python" / "platform" / "build_info.py").write_text(
        "build_info = collections.OrderedDict([('cuda_version', '12.5.1'), ('cudnn_version', '9')])\n")
    specs = {"torch": SimpleNamespace(origin=str(tmp_path / "torch" / "__init__.py")),
             "tensorflow": SimpleNamespace(origin=None, submodule_search_locations=[str(tf)])}
    monkeypatch.setattr(doctor.importlib.util, "find_spec", lambda name: specs.get(name))
    assert doctor.framework_cuda() == {"pytorch": "12.6", "tensorflow": "12.5.1"}


def test_makefile_helper_picks_the_index_for_the_driver() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "kit.doctor", *args], capture_output=True, text=True, cwd=ROOT,
                              check=False)

    assert run("torch-index", "550.54.15").stdout.strip() == "--index-url https://download.pytorch.org/whl/cu126"
    assert run("torch-index", "580.82.07").stdout.strip() == ""
    ok = run("driver-check", "550.54.15")
    assert ok.returncode == 0 and "torch cu126" in ok.stderr and "tensorflow" in ok.stderr
    assert run("driver-check", "470.82.01").returncode == 1


def test_makefile_checks_the_driver_only_on_a_gpu_host() -> None:
    def dry(*args: str) -> str:
        # FULL_TORCH and the choice's other inputs come from the command line here, never from the environment
        # (CI exports FULL_TORCH=1, which would otherwise change every dry run below)
        env = {k: v for k, v in os.environ.items() if k not in {"FULL_TORCH", "HAVE_GPU", "DRIVER", "TORCH_INDEX"}}
        return subprocess.run(["make", "-n", "setup", "VENV=/nonexistent-kit-venv", *args], capture_output=True,
                              text=True, cwd=ROOT, check=True, env=env).stdout

    cpu = dry("HAVE_GPU=")
    assert "driver-check" not in cpu and "--index-url" not in cpu
    assert ('kit.doctor torch-index --cpu "torch==2.13.0 torchvision==0.28.0" '
            '--default "torch==2.14.1 torchvision==0.29.1"') in cpu
    gpu = dry("HAVE_GPU=yes", "DRIVER=550.54.15")
    assert "kit.doctor driver-check 550.54.15" in gpu and "--cpu" not in gpu
    assert "--index-url https://download.pytorch.org/whl/cu126 torch==2.14.1 torchvision==0.29.1" in gpu
    assert re.search(r"pip install -q +torch==2\.14\.1 torchvision==0\.29\.1\n", dry("HAVE_GPU=yes", "DRIVER=580.82.07"))
    # TORCH_INDEX given: no choice made, the index and TORCH_PAIR as given
    own = dry("HAVE_GPU=", "TORCH_INDEX=--index-url https://mirror.example/whl/cpu")
    assert "--cpu" not in own and "--index-url https://mirror.example/whl/cpu torch==2.14.1" in own
    # FULL_TORCH=1 (what CI sets): the default pair without a choice, on a CPU host too
    full = dry("HAVE_GPU=", "FULL_TORCH=1")
    assert "--cpu" not in full and re.search(r"pip install -q +torch==2\.14\.1 torchvision==0\.29\.1\n", full)
