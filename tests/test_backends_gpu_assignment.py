"""Issue 13 (H): every backend gives the trial exactly its GPU(s), numbered as NVML numbers them, and a GPU run
that a container engine cannot serve is refused before any trial instead of silently running on the CPU."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import Any

import docker
import pytest

from kit.backends.apptainer import ApptainerBackend, exec_command, host_env
from kit.backends.base import TrialTarget
from kit.backends.container import trial_container
from kit.backends.docker import DockerBackend
from kit.backends.local import LocalBackend
from kit.engine import Engine, GpuSupport
from kit.errors import BackendError, EngineError, ImageError
from kit.spec import Container

NO_TOOLKIT = GpuSupport(False, "none", "Docker without the NVIDIA container toolkit",
                        "install nvidia-container-toolkit, then `sudo nvidia-ctk runtime configure --runtime=docker`")
TOOLKIT = GpuSupport(True, "nvidia-toolkit", "NVIDIA container toolkit (nvidia runtime registered)")


# -- local ---------------------------------------------------------------------------------

def _env_dumper(tmp_path: Path) -> Path:
    """A stand-in interpreter that writes the environment it was started with into its work directory."""
    exe = tmp_path / "bin" / "python-env"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(f"#!{sys.executable}\nimport json, os\n"
                   "json.dump(dict(os.environ), open('env.json', 'w'))\n", encoding="utf-8")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


@pytest.mark.parametrize(("indices", "visible"), [([3], "3"), ([2, 6], "2,6"), ([], "")])
def test_local_trial_process_sees_only_its_gpus_in_pci_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             indices: list[int], visible: str) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")  # whatever the user's shell had
    work = tmp_path / "work"
    work.mkdir()
    LocalBackend(python=str(_env_dumper(tmp_path))).run_trial("pytorch", work, tmp_path, 30,
                                                              TrialTarget(gpu_indices=indices))
    env = json.loads((work / "env.json").read_text())
    assert env["CUDA_VISIBLE_DEVICES"] == visible and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


# -- Docker / Podman --------------------------------------------------------------------------

class _Containers:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []

    def get(self, name: str) -> Any:
        raise docker.errors.NotFound(f"no container {name}")

    def create(self, **kwargs: Any) -> Any:
        self.created.append(kwargs)
        raise docker.errors.APIError("stop here: the arguments are what the test checks")


def _engine(kind: str = "docker") -> Engine:
    client = type("Client", (), {"containers": _Containers()})()
    return Engine(kind, "unix:///fake.sock", "test", "27.1", "1.46", client, runtimes=("nvidia", "runc"))


def _prepared_docker(spec: Container, kind: str = "docker", support: GpuSupport = TOOLKIT) -> DockerBackend:
    be = DockerBackend(spec)
    be._engine = _engine(kind)
    be._support = support
    be._use_gpus = True
    be._images = {"pytorch": {"row": "pytorch-2.6-cu124", "tag": "kit/pytorch:2.6-cu124", "id": "sha256:1",
                              "device": "cuda"}}
    return be


@pytest.mark.parametrize("kind", ["docker", "podman"])
def test_docker_container_gets_exactly_the_trials_gpu(tmp_path: Path, kind: str) -> None:
    be = _prepared_docker(Container(gpus="all"), kind, TOOLKIT if kind == "docker" else GpuSupport(True, "cdi", "cdi"))
    work = tmp_path / "run" / "work" / "r000-c00-pytorch"
    work.mkdir(parents=True)
    with pytest.raises(EngineError):
        be.run_trial("pytorch", work, tmp_path, 30, TrialTarget(gpu_indices=[5]))
    (kw,) = be.engine().client.containers.created
    (req,) = kw["device_requests"]
    assert req["DeviceIDs"] == (["5"] if kind == "docker" else ["nvidia.com/gpu=5"])  # NVML index 5, nothing else
    assert kw["environment"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert kw["environment"]["NVIDIA_VISIBLE_DEVICES"] == "5"
    assert "CUDA_VISIBLE_DEVICES" not in kw["environment"]  # inside, the trial's GPU is GPU 0


def test_docker_cpu_trial_gets_no_gpu(tmp_path: Path) -> None:
    be = _prepared_docker(Container(gpus="all"))
    work = tmp_path / "run" / "work" / "r000-c00-pytorch"
    work.mkdir(parents=True)
    with pytest.raises(EngineError):
        be.run_trial("pytorch", work, tmp_path, 30, TrialTarget(gpu_indices=[]))
    (kw,) = be.engine().client.containers.created
    assert "device_requests" not in kw and kw["environment"]["CUDA_VISIBLE_DEVICES"] == ""


def _unprepared_docker(monkeypatch: pytest.MonkeyPatch, support: GpuSupport, **kw: Any) -> DockerBackend:
    monkeypatch.setattr("kit.backends.docker.gpu_support", lambda eng: support)
    monkeypatch.setattr("kit.backends.docker.host_gpus", lambda: ["NVIDIA H100 80GB HBM3"] * 8)
    monkeypatch.setattr("kit.images.build.find_built", lambda eng, row: None)  # past the checks: "not built"
    be = DockerBackend(Container(), **kw)
    be._engine = _engine()
    return be


@pytest.mark.parametrize("device", ["gpu", None])
def test_docker_without_gpu_support_on_a_gpu_host_refuses(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                          device: str | None) -> None:
    be = _unprepared_docker(monkeypatch, NO_TOOLKIT)
    be.device = device  # resolved by the runner, or (None) decided from the host: GPUs there, so the GPU
    with pytest.raises(BackendError) as e:
        be.prepare(("pytorch",), tmp_path)
    assert "cannot attach GPUs" in e.value.cause and "silently run on the CPU" in e.value.cause
    assert "nvidia-container-toolkit" in (e.value.fix or "") and 'device = "cpu"' in (e.value.fix or "")


def test_docker_cpu_run_on_a_gpu_host_without_support_is_fine(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    be = _unprepared_docker(monkeypatch, NO_TOOLKIT)
    be.device = "cpu"  # asked for on purpose
    with pytest.raises(ImageError, match="is not built"):  # got past the GPU check to the image lookup
        be.prepare(("pytorch",), tmp_path)


def test_cpu_image_row_for_a_gpu_trial_is_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    be = _unprepared_docker(monkeypatch, TOOLKIT, images={"pytorch": "pytorch-2.13-cpu"})
    be.device = "gpu"
    with pytest.raises(ImageError, match=r"pytorch-2\.13-cpu is a CPU image") as e:
        be.prepare(("pytorch",), tmp_path)
    assert "CUDA row" in (e.value.fix or "")


def test_docker_gpu_trial_in_a_cpu_container_is_an_error(tmp_path: Path) -> None:
    be = _prepared_docker(Container())
    be._images["pytorch"]["device"] = "cpu"
    with pytest.raises(BackendError, match=r"given GPU\(s\) \[1\]"):
        be.run_trial("pytorch", tmp_path, tmp_path, 30, TrialTarget(gpu_indices=[1]))


# -- Apptainer -----------------------------------------------------------------------------------

def test_apptainer_selects_the_trials_gpu_in_pci_order(tmp_path: Path) -> None:
    work = tmp_path / "run" / "work" / "t"
    work.mkdir(parents=True)
    tc = trial_container("tensorflow", work, tmp_path, Container(gpus="all"), "/s/tf.sif", True, gpu_indices=[5])
    nv = exec_command(tc, Path("/s/tf.sif"), "apptainer", "--nv")
    assert "CUDA_VISIBLE_DEVICES=5" in nv and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in nv  # --nv shows every GPU
    cli = exec_command(tc, Path("/s/tf.sif"), "apptainer", "--nvccli")
    assert "CUDA_VISIBLE_DEVICES=0" in cli and host_env(tc)["NVIDIA_VISIBLE_DEVICES"] == "5"  # only GPU 5 bound
    cpu = trial_container("tensorflow", work, tmp_path, Container(gpus="all"), "/s/tf.sif", True, gpu_indices=[])
    assert "--nv" not in exec_command(cpu, Path("x")) and "CUDA_VISIBLE_DEVICES=" in exec_command(cpu, Path("x"))


def test_apptainer_cpu_image_row_for_a_gpu_trial_is_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("kit.engine.host_gpus", lambda: ["NVIDIA H100 80GB HBM3"])
    monkeypatch.setattr("kit.images.sif.find_sif", lambda row: pytest.fail("got past the row check"))
    be = ApptainerBackend(Container(), images={"pytorch": "pytorch-2.13-cpu"}, apptainer="/bin/true")
    be.device = "gpu"
    with pytest.raises(ImageError, match="is a CPU image"):
        be.prepare(("pytorch",), tmp_path)
