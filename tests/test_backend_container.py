"""Container backends without an engine: the shared container model and outcome rule, the Docker SDK
arguments, and the Apptainer backend end to end against a stand-in `apptainer` (tests/_fake_apptainer.py;
Apptainer itself cannot be installed here, so its isolation is not exercised)."""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
from pathlib import Path

import pytest

from kit.backends import make_backend
from kit.backends.apptainer import ApptainerBackend, exec_command
from kit.backends.base import TrialOutcome, TrialTarget
from kit.backends.container import (
    KIT_ROOT,
    cgroup_dir,
    choose_rows,
    container_name,
    container_outcome,
    probe_container,
    size_bytes,
    trial_container,
)
from kit.backends.docker import DockerBackend
from kit.engine import device_requests
from kit.errors import ImageError
from kit.harness import REQUEST_FILE, RESULT_FILE
from kit.images.matrix import load_matrix
from kit.plan import make_plan
from kit.run.prepare import trial_request
from kit.spec import Container, load_spec

CALIBRATED = Path(__file__).parent / "data" / "calibrated.toml"
FAKE = Path(__file__).parent / "_fake_apptainer.py"


def _work(tmp_path: Path, train_s: float = 0.05) -> tuple[Path, Path]:
    spec = load_spec(CALIBRATED, None)
    trial = make_plan(spec).trials[0]
    req = trial_request(spec, trial)
    req["workload"]["params"] = {**req["workload"].get("params", {}), "train_s": train_s}
    req["workload"]["train_s"] = train_s
    work = tmp_path / "run-x" / "work" / trial.trial_id
    work.mkdir(parents=True)
    (work / REQUEST_FILE).write_text(json.dumps(req))
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    return work, data


# -- the shared model -----------------------------------------------------------

def test_trial_container_mounts_code_read_only_and_output_writable(tmp_path: Path) -> None:
    work, data = _work(tmp_path)
    tc = trial_container("pytorch", work, data, Container(gpus="0,2", cpuset="0-1", mem_limit="4g"), "img", True)
    mounts = {m.target: (m.source, m.read_only) for m in tc.mounts}
    assert mounts["/kit/kit"] == (KIT_ROOT / "kit", True)
    assert mounts["/out"] == (work.resolve(), False)
    assert mounts["/data"] == (data.resolve(), True)
    assert tc.argv == ("python3", "-m", "kit.harness", "--out", "/out", "--data", "/data")
    assert tc.env["PYTHONPATH"] == "/kit" and tc.gpus == [0, 2] and tc.env["NVIDIA_VISIBLE_DEVICES"] == "0,2"
    assert tc.name == f"kit-run-x-{work.name}" == container_name(work)
    cpu = trial_container("pytorch", work, data, Container(gpus="all"), "img", False)
    assert cpu.gpus == [] and cpu.env["NVIDIA_VISIBLE_DEVICES"] == "void" and cpu.env["CUDA_VISIBLE_DEVICES"] == ""
    assert trial_container("pytorch", work, data, Container(gpus="all"), "img", True).gpus is None
    probe = probe_container("tensorflow", Container(), "img", False)
    assert probe.mounts == () and probe.argv[:2] == ("python3", "-c") and probe.argv[-1] == "tensorflow"


def _result(work: Path, status: str) -> None:
    (work / RESULT_FILE).write_text(json.dumps({"status": status, "results": {}}))


@pytest.mark.parametrize(("code", "timed_out", "oom", "result", "mem", "status", "source"), [
    (0, False, False, "ok", "", "ok", None),
    (3, False, False, "oom", "", "oom", None),  # the framework's own OOM error, caught by the harness
    (137, False, True, None, "", "oom", "engine"),  # the engine saw the kernel kill it
    (137, False, False, None, "512m", "oom", "inferred"),  # the engine did not say; SIGKILL under a limit
    (137, False, None, None, "512m", "oom", "inferred"),  # Apptainer never says
    (137, False, False, None, "", "error", None),  # SIGKILL without a limit: not claimed to be OOM
    (137, True, False, None, "512m", "timeout", None),  # our own kill at the time limit
    (1, False, False, "error", "", "error", None),
    (0, False, False, None, "", "ok", None),
])
def test_one_outcome_rule_for_every_container_backend(tmp_path: Path, code: int, timed_out: bool, oom: bool | None,
                                                        result: str | None, mem: str, status: str,
                                                        source: str | None) -> None:
    work, _ = _work(tmp_path)
    if result:
        _result(work, result)
    out = container_outcome(work, code, timed_out, oom, "out line", "err line", 1.5, {"x": 1}, mem)
    assert out.status == status
    assert out.detail["exit_code"] == code and out.detail["x"] == 1
    assert (out.detail["oom_source"] or "").startswith(source or "") and bool(out.detail["oom_source"]) == bool(source)
    assert out.detail["log_tail"] == "out line\nerr line" and out.stderr_tail == "err line"
    if timed_out:
        assert "time limit" in out.detail["note"]


def test_sizes_and_cgroups(tmp_path: Path) -> None:
    assert size_bytes("2g") == 2 * 1024**3 and size_bytes("512m") == 512 * 1024**2 and size_bytes("4096") == 4096
    proc, sys_root = tmp_path / "proc", tmp_path / "cg"
    (proc / "42").mkdir(parents=True)
    (proc / "42" / "cgroup").write_text("5:devices:/a\n4:memory:/libpod_parent/libpod-abc\n0::/\n")
    (sys_root / "memory" / "libpod_parent" / "libpod-abc").mkdir(parents=True)
    assert cgroup_dir(42, proc, sys_root) == sys_root / "memory" / "libpod_parent" / "libpod-abc"
    (proc / "43").mkdir()
    (proc / "43" / "cgroup").write_text("0::/system.slice/docker-1.scope\n")
    (sys_root / "system.slice" / "docker-1.scope").mkdir(parents=True)
    assert cgroup_dir(43, proc, sys_root) == sys_root / "system.slice" / "docker-1.scope"
    assert cgroup_dir(44, proc, sys_root) is None


def test_image_choice() -> None:
    m = load_matrix()
    rows = choose_rows(("tensorflow", "pytorch"), "cpu", None, m)
    assert {k: r.name for k, r in rows.items()} == {"tensorflow": "tensorflow-2.21-cpu", "pytorch": "pytorch-2.13-cpu"}
    assert choose_rows(("pytorch",), "cuda", {"pytorch": "pytorch-2.6-cu124"}, m)["pytorch"].cuda == "12.4"
    with pytest.raises(ImageError, match="not pytorch"):
        choose_rows(("pytorch",), "cpu", {"pytorch": "tensorflow-2.21-cpu"}, m)
    with pytest.raises(ImageError, match="does not run"):
        choose_rows(("pytorch",), "cpu", {"jax": "x"}, m)


# -- Docker / Podman SDK arguments -------------------------------------------------

def test_docker_arguments(tmp_path: Path) -> None:
    work, data = _work(tmp_path)
    spec = Container(gpus="1", shm_size="1g", cpuset="0-3", mem_limit="8g", network=False)
    tc = trial_container("pytorch", work, data, spec, "localhost/kit/x:1", True)
    kw = DockerBackend(spec).container_kwargs(tc, device_requests("docker", "nvidia-toolkit", tc.gpus))
    assert kw["network_mode"] == "none" and kw["shm_size"] == "1g" and kw["cpuset_cpus"] == "0-3"
    assert kw["mem_limit"] == kw["memswap_limit"] == 8 * 1024**3
    assert kw["volumes"][str(KIT_ROOT / "kit")] == {"bind": "/kit/kit", "mode": "ro"}
    assert kw["volumes"][str(work.resolve())] == {"bind": "/out", "mode": "rw"}
    assert kw["working_dir"] == "/out" and kw["command"][:3] == ["python3", "-m", "kit.harness"]
    req = kw["device_requests"][0]
    assert req["DeviceIDs"] == ["1"] and req["Capabilities"] == [["gpu", "compute", "utility"]]
    open_net = DockerBackend(Container(network=True)).container_kwargs(
        trial_container("pytorch", work, data, Container(network=True), "i", False), None)
    assert "network_mode" not in open_net and "device_requests" not in open_net and "mem_limit" not in open_net


def test_gpu_requests_per_engine() -> None:
    assert device_requests("docker", "nvidia-toolkit", [])== []
    every = device_requests("docker", "nvidia-toolkit", None)[0]
    assert every["Count"] == -1 and every["Capabilities"] == [["gpu", "compute", "utility"]]
    cdi = device_requests("podman", "cdi", None)[0]
    assert cdi["Driver"] == "cdi" and cdi["DeviceIDs"] == ["nvidia.com/gpu=all"]
    assert device_requests("podman", "cdi", [0, 3])[0]["DeviceIDs"] == ["nvidia.com/gpu=0", "nvidia.com/gpu=3"]


def test_registry_knows_the_container_backends() -> None:
    assert isinstance(make_backend("docker", container=Container()), DockerBackend)
    assert isinstance(make_backend("apptainer", container=Container()), ApptainerBackend)


def test_docker_backend_without_engine_is_unavailable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    probe = DockerBackend(Container()).available()
    assert not probe.ok and "no engine socket" in probe.detail and "DOCKER_HOST" in probe.fix


# -- Apptainer ----------------------------------------------------------------------

def test_apptainer_command_line(tmp_path: Path) -> None:
    work, data = _work(tmp_path)
    spec = Container(gpus="0,1", cpuset="2-3", mem_limit="16g", network=False)
    tc = trial_container("tensorflow", work, data, spec, "/s/tf.sif", True)
    cmd = exec_command(tc, Path("/s/tf.sif"), "apptainer", "--nvccli")
    assert cmd[:5] == ["apptainer", "exec", "--containall", "--cleanenv", "--pwd"]
    assert f"{KIT_ROOT / 'kit'}:/kit/kit:ro" in cmd and f"{work.resolve()}:/out:rw" in cmd
    assert f"{data.resolve()}:/data:ro" in cmd and "--nvccli" in cmd and "--nv" not in cmd
    assert "CUDA_VISIBLE_DEVICES=0,1" in cmd and "PYTHONPATH=/kit" in cmd
    assert cmd[cmd.index("--network") + 1] == "none" and "--net" in cmd
    assert cmd[cmd.index("--cpuset-cpus") + 1] == "2-3" and cmd[cmd.index("--memory") + 1] == "16g"
    assert cmd[-8:] == ["/s/tf.sif", "python3", "-m", "kit.harness", "--out", "/out", "--data", "/data"]
    cpu = exec_command(trial_container("tensorflow", work, data, Container(network=True), "x", False), Path("x"))
    assert "--nv" not in cpu and "--net" not in cpu and "--memory" not in cpu
    with pytest.raises(ValueError):
        exec_command(tc, Path("x"), gpu_flag="--rocm")


@pytest.fixture
def fake_apptainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    exe = tmp_path / "bin" / "apptainer"
    exe.parent.mkdir()
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE} \"$@\"\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("FAKE_APPTAINER_LOG", str(tmp_path / "calls.jsonl"))
    monkeypatch.setenv("FAKE_APPTAINER_PYTHON", sys.executable)
    return exe


def _backend(exe: Path, spec: Container) -> ApptainerBackend:
    be = ApptainerBackend(spec, apptainer=str(exe))
    be._images = {"pytorch": {"row": "pytorch-2.13-cpu", "path": "/s/pt.sif", "digest": "sha256:" + "a" * 64,
                              "device": "cpu"}}
    return be


def test_apptainer_runs_the_harness_like_the_docker_backend(tmp_path: Path, fake_apptainer: Path) -> None:
    assert ApptainerBackend(apptainer=str(fake_apptainer)).available().ok
    work, data = _work(tmp_path)
    target = TrialTarget()
    out = _backend(fake_apptainer, Container()).run_trial("pytorch", work, data, 60, target)
    assert out.status == "ok", out.detail
    assert out.exit_code == 0 and out.result and out.result["results"]["train_time_s"] > 0
    assert {m["event"] for m in out.markers} >= {"harness_start", "phase_start", "phase_end", "harness_end"}
    assert target.pid == out.detail["pid"] and out.detail["network"] == "none" and out.detail["oom_killed"] is False
    call = json.loads((tmp_path / "calls.jsonl").read_text().splitlines()[-1])
    assert call["sif"] == "/s/pt.sif" and "--containall" in call["flags"] and "--network=none" in call["flags"]
    assert stat.S_IMODE(os.stat(work).st_mode) == 0o700  # the kit's or the container's user only, never world-writable


def _cut_short(out: TrialOutcome) -> None:
    """The trial (30 s of training) was ended in flight, not waited out: no result, no end of training or of the
    harness in its markers. This, not a clock, tells a limit that kills from one that only labels a trial that
    ran to its end."""
    events = [(m.get("event"), m.get("phase")) for m in out.markers]
    assert out.result is None and ("phase_end", "train") not in events and ("harness_end", None) not in events, events


def test_apptainer_time_limit_kills_the_container(tmp_path: Path, fake_apptainer: Path) -> None:
    work, data = _work(tmp_path, train_s=30)
    out = _backend(fake_apptainer, Container()).run_trial("pytorch", work, data, 2, TrialTarget())
    assert out.status == "timeout" and "time limit" in out.detail["note"]
    assert out.exit_code == 128 + signal.SIGKILL  # killed (the kit's kill of its process group), not exited
    _cut_short(out)


def test_apptainer_sigkill_under_a_memory_limit_is_oom(tmp_path: Path, fake_apptainer: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_APPTAINER_SIGKILL", "1")
    work, data = _work(tmp_path)
    out = _backend(fake_apptainer, Container(mem_limit="1g")).run_trial("pytorch", work, data, 60, TrialTarget())
    assert out.status == "oom" and out.exit_code == 137 and out.detail["oom_source"].startswith("inferred")
    work2, _ = _work(tmp_path / "b")
    plain = _backend(fake_apptainer, Container()).run_trial("pytorch", work2, data, 60, TrialTarget())
    assert plain.status == "error" and "SIGKILL" in plain.detail["note"]


def test_apptainer_prepare_needs_a_recorded_sif(tmp_path: Path, fake_apptainer: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIT_IMAGES_LOCK", str(tmp_path / "images.lock.json"))
    be = ApptainerBackend(Container(), apptainer=str(fake_apptainer))
    with pytest.raises(ImageError, match=r"no \.sif is built") as e:
        be.prepare(("pytorch",), tmp_path)
    assert "kit images build --format sif pytorch-2.13-cpu" in str(e.value)


def test_apptainer_prepare_checks_digest_and_versions(tmp_path: Path, fake_apptainer: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe really runs (in this host's Python): its torch is not the row's, which must be an error."""
    from kit.images.build import record
    from kit.images.sif import sha256_file

    monkeypatch.setenv("KIT_IMAGES_LOCK", str(tmp_path / "images.lock.json"))
    row = load_matrix().get("pytorch-2.13-cpu")
    sif = tmp_path / "pt.sif"
    sif.write_bytes(b"not really a sif")
    record("sif", row.name, {"path": str(sif), "sha256": sha256_file(sif), "lock_sha256": row.lock_sha256()})
    from importlib.metadata import version

    be = ApptainerBackend(Container(), apptainer=str(fake_apptainer))
    # torch's version from its metadata: importing torch here would cost seconds for one string (issue 44)
    if version("torch").split("+")[0] == row.version:
        pytest.skip("this host's torch equals the row's: no mismatch to show")
    with pytest.raises(ImageError, match=r"pytorch-2\.13-cpu: framework_version expected 2\.13\.0, image reports"):
        be.prepare(("pytorch",), tmp_path)
    sif.write_bytes(b"changed")
    with pytest.raises(ImageError, match="changed since it was built"):
        be.prepare(("pytorch",), tmp_path)


def test_apptainer_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    probe = ApptainerBackend(Container()).available()
    assert not probe.ok and "apptainer" in probe.fix.lower()


def test_sif_build_commands_and_missing_apptainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kit.images.sif import build_from_archive_command, build_from_def_command, build_sif

    assert build_from_def_command("apptainer", Path("/o/x.sif"), Path("/r/x.def"), True) == [
        "apptainer", "build", "--fakeroot", "--force", "/o/x.sif", "x.def"]
    assert build_from_archive_command("apptainer", Path("/o/x.sif"), Path("/t/i.tar"))[-1] == "docker-archive:///t/i.tar"
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ImageError, match="apptainer is not installed"):
        build_sif(load_matrix().get("pytorch-2.13-cpu"), out_dir=tmp_path)


def test_local_time_limit_kills_the_trials_process_group(tmp_path: Path) -> None:
    """The local backend's time limit (kit.backends.base.wait_group): status timeout, the trial's group gone."""
    from kit.backends.local import LocalBackend

    work, data = _work(tmp_path, train_s=30)
    target = TrialTarget()
    out = LocalBackend().run_trial("pytorch", work, data, 2, target)
    assert out.status == "timeout"
    _cut_short(out)
    with pytest.raises(ProcessLookupError):
        os.killpg(target.pid, 0)  # no process of the trial's group is left
