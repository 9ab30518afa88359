"""Local backend: each trial's harness in a fresh Python subprocess on this host.

A fresh process per trial keeps imports, JIT caches and allocator state from
leaking between trials. The child dies with the parent (``KIT_PARENT_PID``,
see ``kit.harness``), so killing ``kit run`` never leaves a trial running
behind a resumed run.

GPUs: the child sees only the trial's GPUs (``TrialTarget.gpu_indices``, NVML
indices) through ``CUDA_VISIBLE_DEVICES`` with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``,
so CUDA numbers GPUs as NVML does and the trial's first GPU is ``cuda:0``; a
CPU trial gets ``CUDA_VISIBLE_DEVICES=""``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kit.backends.base import (
    Backend,
    TrialOutcome,
    TrialTarget,
    create_trial_file,
    fd_tail,
    kill_group,
    read_outputs,
    status_from,
    tail,
)
from kit.collectors.base import Probe
from kit.errors import BackendError
from kit.plan import arm_framework

KIT_ROOT = Path(__file__).resolve().parents[2]
REAPER = Path(__file__).resolve().parent / "reaper.py"
REPORT_MAX_BYTES = 64 << 10


def wait_reaper(proc: subprocess.Popen[bytes], timeout_s: float | None, grace_s: float = 10.0) -> bool:
    """Wait for the reaper; True if the trial timed out. On the time limit or an interrupt the reaper is asked
    (SIGTERM) to end the harness and everything below it; its process group is killed if it does not."""
    try:
        proc.wait(timeout=timeout_s)
        return False
    except BaseException as exc:
        timed_out = isinstance(exc, subprocess.TimeoutExpired)
        try:
            proc.terminate()
            proc.wait(timeout=grace_s)
        except BaseException:
            kill_group(proc)
            if not timed_out:
                raise
        if not timed_out:
            raise
        return True


def harness_pid(fd: int, timeout_s: float = 10.0) -> int | None:
    """The harness's PID from the reaper's first line (``harness PID``); None if it does not come."""
    import select

    line = b""
    end = time.monotonic() + timeout_s
    while not line.endswith(b"\n") and len(line) < 64:
        if not select.select([fd], [], [], max(0.0, end - time.monotonic()))[0]:
            return None
        ch = os.read(fd, 1)
        if not ch:
            return None
        line += ch
    parts = line.split()
    return int(parts[1]) if len(parts) == 2 and parts[0] == b"harness" and parts[1].isdigit() else None


def read_report(fd: int) -> dict[str, Any]:
    """The reaper's JSON record (``{}`` when it wrote none), read without blocking and capped."""
    import json

    os.set_blocking(fd, False)
    chunks, total = [], 0
    while total <= REPORT_MAX_BYTES:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    lines = b"".join(chunks)[:REPORT_MAX_BYTES].splitlines()
    lines = [ln for ln in lines if not ln.startswith(b"harness ")]  # the first line, unless already read
    try:
        rec = json.loads(lines[-1] if lines else b"{}")
    except ValueError:
        return {}
    return rec if isinstance(rec, dict) else {}
FRAMEWORK_MODULES = {"pytorch": "torch", "tensorflow": "tensorflow"}


class LocalBackend(Backend):
    """Runs ``python -m kit.harness`` with this interpreter."""

    name = "local"

    def __init__(self, python: str | None = None, env: dict[str, str] | None = None) -> None:
        self.python = python or sys.executable
        self.env = dict(env or {})

    def available(self) -> Probe:
        return Probe(True, f"subprocesses of {self.python}")

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "python": self.python, "isolation": "fresh process per trial"}

    def prepare(self, arms: tuple[str, ...], data_dir: Path) -> dict[str, Any]:
        """Check that each arm's framework imports in this interpreter, before any trial."""
        import importlib.util

        frameworks = dict.fromkeys(arm_framework(arm) for arm in arms)
        missing = [fw for fw in frameworks if importlib.util.find_spec(FRAMEWORK_MODULES.get(fw, fw)) is None]
        if missing:
            raise BackendError(
                f"framework(s) not installed in {self.python}: {', '.join(missing)}",
                where="backend local",
                fix="install them (make setup installs torch and tensorflow-cpu) or use --backend docker",
            )
        return {}

    def trial_env(self, gpu_indices: list[int] | None = None) -> dict[str, str]:
        """The child's environment; ``gpu_indices`` None leaves CUDA_VISIBLE_DEVICES as it is (not resolved)."""
        env = dict(os.environ)
        env.update(self.env)
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA's default is "fastest first", not NVML's order
        if gpu_indices is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in gpu_indices)
        path = env.get("PYTHONPATH", "")
        env["PYTHONPATH"] = str(KIT_ROOT) + (os.pathsep + path if path else "")
        env["KIT_PARENT_PID"] = str(os.getpid())
        env.update(self.pinning.env())
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def run_trial(
        self,
        arm: str,
        work: Path,
        data_dir: Path,
        timeout_s: float,
        target: TrialTarget,
        on_start: Callable[[], None] | None = None,
    ) -> TrialOutcome:
        # The harness runs in its work directory, so a relative run directory (`--runs-dir runs`)
        # or data directory must reach it as an absolute path.
        work, data_dir = work.resolve(), data_dir.resolve()
        cmd = [self.python, "-m", "kit.harness", "--out", str(work), "--data", str(data_dir)]
        if self.study_dir is not None:
            cmd += ["--study", str(self.study_dir.resolve())]
        # the harness runs under a child subreaper (kit/backends/reaper.py): every process the trial starts
        # ends with it, and those that outlived it are recorded
        # stderr is read back through this descriptor, never by name (the trial may replace the file)
        out_fd = create_trial_file(work, "stdout.log")
        try:
            err_fd = create_trial_file(work, "stderr.log")
        except BaseException:
            os.close(out_fd)
            raise
        report_r, report_w = os.pipe()
        cmd = [self.python, "-I", str(REAPER), str(report_w), "--", *cmd]
        t0 = time.monotonic()
        try:
            try:
                proc = subprocess.Popen(cmd, stdout=out_fd, stderr=err_fd, env=self.trial_env(target.gpu_indices),
                                        cwd=work, start_new_session=True, pass_fds=(report_w,))
            except OSError as exc:
                raise BackendError(f"cannot start the harness ({exc})", where=self.python,
                                   fix="check that the interpreter exists and is executable") from exc
            finally:
                os.close(report_w)
            target.pid = harness_pid(report_r) or proc.pid  # the collectors sample the harness's tree
            if on_start:
                on_start()
            timed_out = wait_reaper(proc, timeout_s)
            wall = time.monotonic() - t0
            err = fd_tail(err_fd)
            reaped = read_report(report_r)
        finally:
            os.close(out_fd)
            os.close(err_fd)
            os.close(report_r)
        result, markers, problem = read_outputs(work)
        code = proc.returncode
        detail: dict[str, Any] = {"pid": proc.pid, "gpus": target.gpu_indices if target.gpu_indices is not None else "all"}
        if problem:
            detail["untrusted_output"] = problem
        if reaped.get("leftover_count"):
            detail["leftover_processes"] = reaped.get("leftover_processes") or []
            detail["leftover_count"] = reaped["leftover_count"]
        elif "leftover_count" not in reaped:
            detail["reaper"] = "no report (the reaper was killed)"
        if code is not None and code < 0:
            detail["signal"] = signal.Signals(-code).name
            if -code == signal.SIGKILL and not timed_out:
                detail["note"] = "killed by SIGKILL (possibly the kernel's OOM killer)"
        return TrialOutcome(
            status=status_from(code, result, timed_out),
            exit_code=code,
            result=result,
            markers=markers,
            stderr_tail=tail(err),
            wall_s=wall,
            detail=detail,
        )

