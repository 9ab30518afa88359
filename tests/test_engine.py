"""Engine discovery, GPU support rules and `kit doctor`'s engine checks, without a running engine."""

from __future__ import annotations

import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kit.cli import app
from kit.engine import (
    DOCKER_SOCKET,
    PODMAN_ROOT_SOCKET,
    WAIT_POLL_SLOW_S,
    WAIT_SAFETY_S,
    Engine,
    candidate_urls,
    cdi_nvidia_specs,
    connect,
    find_engine,
    gpu_support,
    wait_for_exit,
)
from kit.errors import EngineError, ExitCode
from kit.images.doctor import doctor_engine

ROOT = Path(__file__).resolve().parents[1]


def _engine(kind: str, version: str, runtimes: tuple[str, ...] = ()) -> Engine:
    return Engine(kind=kind, url="unix:///x", source="test", version=version, api_version="1.41", client=None,
                  runtimes=runtimes)


def test_docker_host_wins_else_docker_then_podman() -> None:
    assert candidate_urls({"DOCKER_HOST": "tcp://h:2375"}) == [("DOCKER_HOST", "tcp://h:2375")]
    urls = [u for _, u in candidate_urls({"XDG_RUNTIME_DIR": "/run/user/1000"})]
    assert urls == [DOCKER_SOCKET, PODMAN_ROOT_SOCKET, "unix:///run/user/1000/podman/podman.sock"]


def test_no_engine_is_an_error_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(EngineError) as e:
        connect(f"unix://{tmp_path}/nothing.sock", "DOCKER_HOST")
    assert "no engine socket" in str(e.value) and "podman system service" in str(e.value)
    dead = tmp_path / "dead.sock"
    dead.write_text("")  # a file where a socket should answer
    with pytest.raises(EngineError, match="does not answer"):
        connect(f"unix://{dead}")
    with pytest.raises(EngineError, match="no container engine answers"):
        find_engine({"DOCKER_HOST": f"unix://{tmp_path}/nothing.sock"})


def test_gpu_support_rules(tmp_path: Path) -> None:
    none = lambda name: None  # noqa: E731
    assert gpu_support(_engine("docker", "27.1", ("nvidia", "runc")), which=none).ok
    assert gpu_support(_engine("docker", "27.1", ("runc",)), which=lambda n: "/usr/bin/" + n).mechanism == "nvidia-toolkit"
    bare = gpu_support(_engine("docker", "27.1", ("runc",)), which=none, cdi_dirs=(tmp_path,))
    assert not bare.ok and "nvidia-ctk runtime configure" in bare.fix
    assert not gpu_support(_engine("podman", "5.4.0"), cdi_dirs=(tmp_path,)).ok  # no CDI spec yet
    (tmp_path / "nvidia.yaml").write_text("kind: nvidia.com/gpu\ndevices:\n- name: all\n")
    assert cdi_nvidia_specs((tmp_path,)) == [tmp_path / "nvidia.yaml"]
    old = gpu_support(_engine("podman", "4.9.3"), cdi_dirs=(tmp_path,))
    assert not old.ok and "5.4" in old.detail and "upgrade Podman" in old.fix
    new = gpu_support(_engine("podman", "5.4.1"), cdi_dirs=(tmp_path,))
    assert new.ok and new.mechanism == "cdi"


def test_doctor_without_engine_says_how_to_start_one(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nothing.sock")
    findings = doctor_engine()
    eng = findings[0]
    assert eng["check"] == "container engine" and not eng["ok"] and "systemctl start" in eng["fix"]
    assert any(f["check"].startswith("apptainer") for f in findings)


def test_cli_run_docker_without_engine_fails_cleanly(tmp_path: Path) -> None:
    env = {"DOCKER_HOST": f"unix://{tmp_path}/nothing.sock", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "KIT_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-m", "kit", "run", "experiments/florencio2019_lenet/experiment.toml", "--profile", "smoke",
                          "--backend", "docker", "--runs-dir", str(tmp_path / "runs"), "--data-dir",
                          str(ROOT / "data" / "mnist-t10k")], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == ExitCode.INPUT, out.stderr
    assert "backend docker is not usable here" in out.stderr and "Fix:" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # nothing half-written


def test_cli_image_option_is_checked(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["run", "experiments/florencio2019_lenet/experiment.toml", "--image", "pytorch"],
                             catch_exceptions=True, standalone_mode=False)
    assert res.exception is not None and "FRAMEWORK=ROW" in str(res.exception)


def test_cli_images_list_render_without_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nothing.sock")
    res = CliRunner().invoke(app, ["images", "list"])
    assert res.exit_code == 0 and "pytorch-2.7-cu126" in res.output and "no engine" in res.output
    res = CliRunner().invoke(app, ["images", "render", "pytorch-2.13-cpu", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "r" / "pytorch-2.13-cpu" / "Dockerfile").exists()
    assert (tmp_path / "r" / "pytorch-2.13-cpu" / "pytorch-2.13-cpu.def").exists()
    res = CliRunner().invoke(app, ["images", "verify", "pytorch-2.13-cpu"], standalone_mode=False)
    assert isinstance(res.exception, EngineError)


class _Clock:
    """A fake clock for :func:`kit.engine.wait_for_exit` (its ``time.monotonic``, ``time.sleep`` and
    ``select.select``), over a real process and its real pidfd: time moves only when the code under test waits,
    and the process is ended when the clock passes ``end_at_s``. What the wait did (each sleep and select, each
    look at the engine) is then a fact of the code, not of how busy this host is."""

    def __init__(self, proc: subprocess.Popen[bytes], end_at_s: float) -> None:
        self.proc, self.end_at_s, self.now = proc, end_at_s, 0.0
        self.waits: list[tuple[str, float]] = []
        self.real_select, self.real_sleep, self.real_monotonic = select.select, time.sleep, time.monotonic

    def monotonic(self) -> float:
        return self.now

    def _pass(self, seconds: float, until_end: bool) -> None:
        """Let ``seconds`` pass, ending the process if they reach its end; a wait that returns when the process
        ends (``until_end``: the pidfd's select) stops the clock there."""
        if self.proc.poll() is None and self.now + seconds >= self.end_at_s:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # the process reads its stdin to the end, then exits 7
            give_up = self.real_monotonic() + 60  # a hang guard only
            while self.proc.poll() is None and self.real_monotonic() < give_up:
                self.real_sleep(0.01)  # the real clock (proc.wait would call the fake sleep)
            self.now = self.end_at_s if until_end else self.now + seconds
        else:
            self.now += seconds

    def sleep(self, seconds: float) -> None:
        self.waits.append(("sleep", seconds))
        self._pass(seconds, until_end=False)

    def select(self, r: list[int], w: list[int], x: list[int], timeout: float) -> tuple[list[int], list, list]:
        self.waits.append(("select", timeout))
        self._pass(timeout, until_end=True)
        return self.real_select(r, w, x, 0)  # the real pidfd: readable once the process has really ended


def _child() -> subprocess.Popen[bytes]:
    """A real process that runs until the test ends it (its stdin closed), then exits 7."""
    return subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read(); sys.exit(7)"],
                            stdin=subprocess.PIPE)


class _Container:
    """What wait_for_exit reads of an SDK container: reload() and attrs["State"], here following a real process
    (running while it runs, then Podman's "stopped" and "exited"); it has no wait(): Podman's spins a CPU."""

    def __init__(self, proc: subprocess.Popen[bytes], pid: int | None, clock: _Clock) -> None:
        self.proc, self.pid, self.clock, self.reloads = proc, pid, clock, 0
        self.ended_at: float | None = None
        self.looks_running = 0  # reloads that found the process running
        self.attrs: dict = {}

    def reload(self) -> None:
        self.reloads += 1
        code = self.proc.poll()
        if code is None:
            self.looks_running += 1
            self.attrs = {"State": {"Status": "running", "Running": True, "Pid": self.pid, "ExitCode": 0}}
            return
        self.ended_at = self.ended_at if self.ended_at is not None else self.clock.end_at_s
        status = "stopped" if self.clock.now - self.ended_at < 0.1 else "exited"
        self.attrs = {"State": {"Status": status, "Running": False, "Pid": 0, "ExitCode": code}}


def _wait_on_the_fake_clock(monkeypatch: pytest.MonkeyPatch, clock: _Clock, box: _Container,
                            timeout_s: float) -> int | None:
    with monkeypatch.context() as mp:
        mp.setattr(time, "monotonic", clock.monotonic)
        mp.setattr(time, "sleep", clock.sleep)
        mp.setattr(select, "select", clock.select)
        return wait_for_exit(box, timeout_s)


@pytest.mark.parametrize("with_pid", [True, False], ids=["pidfd", "polled"])
def test_a_container_is_awaited_without_busy_polling_the_engine(with_pid: bool, monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    proc = _child()
    try:
        clock = _Clock(proc, end_at_s=0.6)
        box = _Container(proc, proc.pid if with_pid else None, clock)
        assert _wait_on_the_fake_clock(monkeypatch, clock, box, 30) == 7
    finally:
        proc.kill()
        proc.wait()
    # with the process's pidfd: one look at the start, then a wait on the pidfd (not on the engine), one look when
    # it ends; polled: one look every WAIT_POLL_SLOW_S. Either way the end is seen within a poll, not at the limit
    if with_pid:
        assert box.looks_running == 1 and box.reloads == 2, clock.waits
        assert clock.waits[0] == ("select", WAIT_SAFETY_S), clock.waits  # blocked on the pidfd, not polling
    else:
        assert box.looks_running == 3 and box.reloads == 4, clock.waits  # at 0, 0.25, 0.5; the end seen at 0.75
        assert clock.waits == [("sleep", WAIT_POLL_SLOW_S)] * 3, clock.waits
    assert clock.now - 0.6 <= WAIT_POLL_SLOW_S  # seen within one poll of the end (fake clock), not at the 30 s limit


def test_a_container_still_running_at_the_limit_is_a_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    proc = _child()
    try:
        clock = _Clock(proc, end_at_s=30)
        box = _Container(proc, proc.pid, clock)
        assert _wait_on_the_fake_clock(monkeypatch, clock, box, 0.5) is None
        assert clock.now == 0.5 and proc.poll() is None  # gave up exactly at the limit, the process left running
        assert clock.waits == [("select", 0.5)] and box.reloads == 2, clock.waits
    finally:
        proc.kill()
        proc.wait()
