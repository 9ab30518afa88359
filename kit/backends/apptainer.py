"""Apptainer backend: each trial's harness in ``apptainer exec`` of its framework's .sif (HPC sites).

It runs the same :class:`~kit.backends.container.TrialContainer` as the
Docker backend, translated into a command line: ``--containall --cleanenv``
(no host environment, home or /tmp), ``--no-privs`` (no capabilities even
when started as root; the image is a read-only SIF and the trial runs as the
kit's user, so the work directory stays the kit's, mode 0700), the same three bind mounts, the same
environment (``--env``), ``--nv`` (or ``--nvccli``) for GPUs: under ``--nv`` Apptainer shows every
GPU and ``CUDA_VISIBLE_DEVICES`` (with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, so
CUDA's numbers are NVML's) selects the trial's; under ``--nvccli`` with
``--containall`` only the GPUs in ``NVIDIA_VISIBLE_DEVICES`` are bound,
renumbered from 0, so ``CUDA_VISIBLE_DEVICES`` counts from 0,
``--net --network none`` unless the spec allows the network, and the CPU set
and memory limit as Apptainer's cgroup flags. The outcome follows the shared
rule; Apptainer cannot say whether the kernel's OOM killer struck, so a
SIGKILL is reported as "possibly" one. The trial itself lives in the
container's PID namespace (``--containall``) and ends with it; Apptainer's
own processes on this host are guarded like a local trial's tree (the kit a
subreaper meanwhile, :mod:`kit.proctree`): one that outlives ``apptainer
exec`` is ended and recorded as a leftover.

The .sif is built by ``kit images build --format sif`` (from the row's
definition or from the built Docker image) and found through the images lock,
which records its sha256 (the manifest's image digest).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kit.backends.base import Backend, TrialOutcome, create_trial_file, fd_tail, kill_group, wait_group
from kit.backends.container import (
    TrialContainer,
    choose_rows,
    container_outcome,
    prepare_work,
    probe_container,
    trial_container,
)
from kit.collectors.base import Probe, TrialTarget
from kit.errors import BackendError, ImageError
from kit.plan import arm_framework
from kit.proctree import MAX_LISTED, TreeGuard, child_subreaper, signals_held
from kit.spec import Container

GPU_FLAGS = ("--nv", "--nvccli")


def find_apptainer(which: Callable[[str], str | None] = shutil.which) -> str | None:
    return which("apptainer") or which("singularity")


def exec_command(tc: TrialContainer, sif: Path, apptainer: str = "apptainer", gpu_flag: str = "--nv") -> list[str]:
    """The ``apptainer exec`` command line of ``tc`` (pure: tested without Apptainer)."""
    if gpu_flag not in GPU_FLAGS:
        raise ValueError(gpu_flag)
    cmd = [apptainer, "exec", "--containall", "--cleanenv", "--pwd", tc.workdir, "--no-privs"]
    for m in tc.mounts:
        cmd += ["--bind", f"{m.source}:{m.target}:{'ro' if m.read_only else 'rw'}"]
    env = dict(tc.env)
    if tc.gpus != []:
        cmd.append(gpu_flag)
        if tc.gpus and gpu_flag == "--nv":  # every GPU is visible under --nv: select by CUDA index (PCI order)
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, tc.gpus))
        elif tc.gpus:  # --nvccli binds only NVIDIA_VISIBLE_DEVICES' GPUs, numbered from 0
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, range(len(tc.gpus))))
    for key in sorted(env):
        cmd += ["--env", f"{key}={env[key]}"]
    if not tc.network:
        cmd += ["--net", "--network", "none"]
    if tc.cpuset:
        cmd += ["--cpuset-cpus", tc.cpuset]
    if tc.mem_limit:
        cmd += ["--memory", tc.mem_limit, "--memory-swap", tc.mem_limit]
    return [*cmd, str(sif), *tc.argv]


def host_env(tc: TrialContainer) -> dict[str, str]:
    """The environment of the ``apptainer`` process itself (``--nvccli`` reads NVIDIA_VISIBLE_DEVICES there)."""
    env = dict(os.environ)
    if "NVIDIA_VISIBLE_DEVICES" in tc.env:
        env["NVIDIA_VISIBLE_DEVICES"] = tc.env["NVIDIA_VISIBLE_DEVICES"]
    return env


class ApptainerBackend(Backend):
    """Trials in ``apptainer exec`` of a .sif per framework."""

    name = "apptainer"

    def __init__(self, container: Container | None = None, images: dict[str, str] | None = None,
                 apptainer: str | None = None, gpu_flag: str = "--nv") -> None:
        self.spec = container or Container()
        self.overrides = dict(images or {})
        self.apptainer = apptainer
        self.gpu_flag = gpu_flag
        self._use_gpus = False
        self._images: dict[str, dict[str, Any]] = {}

    def exe(self) -> str:
        exe = self.apptainer or find_apptainer()
        if not exe:
            raise BackendError("apptainer is not installed", where="backend apptainer",
                               fix="install Apptainer (https://apptainer.org/docs/admin/main/installation.html) "
                                   "or use --backend docker")
        return exe

    def available(self) -> Probe:
        exe = self.apptainer or find_apptainer()
        if not exe:
            return Probe(False, "apptainer not found on PATH",
                         "install Apptainer (https://apptainer.org/docs/admin/main/installation.html)")
        try:
            out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Probe(False, f"{exe} does not run ({exc})", "check the Apptainer installation")
        if out.returncode != 0:
            return Probe(False, f"{exe} --version failed: {out.stderr.strip()[:200]}", "check the Apptainer installation")
        return Probe(True, out.stdout.strip())

    def describe(self) -> dict[str, Any]:
        net = "network on" if self.spec.network else "network none"
        return {"backend": self.name, "isolation": f"apptainer exec --containall per trial, {net}",
                "apptainer": self.apptainer or find_apptainer(), "gpu_flag": self.gpu_flag,
                "container": {"gpus": self.spec.gpus, "shm_size": "host /dev/shm (not settable in Apptainer)",
                              "cpuset": self.spec.cpuset, "mem_limit": self.spec.mem_limit,
                              "network": self.spec.network}}

    def prepare(self, arms: tuple[str, ...], data_dir: Path) -> dict[str, Any]:
        """Find each arm's .sif, check its digest, and record the versions it reports from inside."""
        from kit.engine import host_gpus
        from kit.images.sif import find_sif
        from kit.images.verify import Verification, compare, mismatch_error

        exe = self.exe()
        gpus = host_gpus()
        # the runner resolved the device (kit.gpus); used alone, "auto" on this host: GPU when one is allowed
        self._use_gpus = self.device == "gpu" if self.device is not None else bool(gpus) and self.spec.gpu_indices() != []
        device = "cuda" if self._use_gpus else "cpu"
        results = []
        for arm, row in choose_rows(arms, device, self.overrides).items():
            fw = arm_framework(arm)
            if self._use_gpus and row.device != "cuda":
                raise ImageError(f"image {row.name} is a CPU image, but the trials of {arm} compute on the GPU",
                                 where=f"--image {fw}={row.name}",
                                 fix="give a CUDA row of the matrix (kit images list), or set [workload] device = "
                                     "\"cpu\" to measure the CPU on purpose")
            sif = find_sif(row)
            tc = probe_container(fw, self.spec, str(sif["path"]), self._use_gpus and row.device == "cuda")
            reported = _run_probe(exec_command(tc, Path(sif["path"]), exe, self.gpu_flag), host_env(tc), row.name)
            bad, notes = compare(row, reported)
            results.append(Verification(row.name, str(sif["path"]), sif["sha256"], reported, bad, notes))
            self._images[arm] = {"row": row.name, "tag": Path(sif["path"]).name, "path": str(sif["path"]),
                                "digest": f"sha256:{sif['sha256']}", "id": f"sha256:{sif['sha256']}",
                                "device": row.device, "matrix": row.expected(), "versions": reported, "notes": notes,
                                "source": sif.get("source")}
        err = mismatch_error(results)
        if err is not None:
            raise err
        return {"images": self._images, "device": device, "host_gpus": gpus}

    def run_trial(self, arm: str, work: Path, data_dir: Path, timeout_s: float, target: TrialTarget,
                  on_start: Callable[[], None] | None = None) -> TrialOutcome:
        if arm not in self._images:
            raise BackendError(f"no image prepared for {arm}", where="backend apptainer",
                               fix="call prepare() before run_trial() (kit run does)")
        img = self._images[arm]
        use = self._use_gpus and img["device"] == "cuda"
        if target.gpu_indices and not use:
            raise BackendError(f"the trial was given GPU(s) {target.gpu_indices}, but its container gets none "
                               f"(image {img.get('row')} is a {img['device']} image, or GPUs are off for this run)",
                               where="backend apptainer", fix="give a CUDA image row, or set [workload] device = \"cpu\"")
        tc = trial_container(arm, work, data_dir, self.spec, img["path"], use, gpu_indices=target.gpu_indices,
                             study_dir=self.study_dir)
        prepare_work(work)
        cmd = exec_command(tc, Path(img["path"]), self.exe(), self.gpu_flag)
        t0 = time.monotonic()
        # the logs are read back through the descriptors opened here, never by name: the trial can write the directory
        out_fd, err_fd = create_trial_file(work, "stdout.log"), create_trial_file(work, "stderr.log")
        try:
            # apptainer's own processes run on this host: a helper that daemonizes (setsid) and outlives the
            # container is re-parented to the kit (a subreaper meanwhile), ended and recorded (kit.proctree)
            with child_subreaper():
                guard = TreeGuard()
                try:
                    proc = subprocess.Popen(cmd, stdout=out_fd, stderr=err_fd, env=host_env(tc),
                                            start_new_session=True)
                except OSError as exc:
                    raise BackendError(f"cannot start apptainer ({exc})", where=cmd[0],
                                       fix="check the Apptainer installation") from exc
                guard.started(proc.pid)
                try:
                    target.pid = proc.pid
                    if on_start:
                        on_start()
                    timed_out = wait_group(proc, timeout_s)
                finally:
                    with signals_held():  # a second Ctrl-C or SIGTERM waits until the tree is gone
                        if proc.returncode is None:
                            kill_group(proc)
                        leftover = guard.end()
            wall = time.monotonic() - t0
            stdout, stderr = fd_tail(out_fd), fd_tail(err_fd)
        finally:
            os.close(out_fd)
            os.close(err_fd)
        code = proc.returncode
        if code is not None and code < 0:  # killed by a signal: report it the way engines do (128 + signal)
            code = 128 - code
        detail = {"sif": img["path"], "sif_sha256": img["digest"], "pid": proc.pid, "command": cmd,
                  "gpus": "none" if tc.gpus == [] else ("all" if tc.gpus is None else tc.gpus),
                  "network": "on" if tc.network else "none"}
        if leftover:
            detail["leftover_processes"] = leftover[:MAX_LISTED]
            detail["leftover_count"] = len(leftover)
        return container_outcome(work, code, timed_out, None, stdout, stderr, wall, detail, self.spec.mem_limit)


def _run_probe(cmd: list[str], env: dict[str, str], row: str) -> dict[str, Any]:
    import json

    try:
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ImageError(f"the version probe could not run in {row} ({exc})", where=cmd[0],
                         fix="check the Apptainer installation") from None
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        raise ImageError(f"the version probe failed in {row} (exit {out.returncode}): {out.stderr.strip()[-1500:]}",
                         where=f"{cmd[0]} exec ({row})",
                         fix="rebuild the .sif (kit images build --format sif), or allow what Apptainer refused "
                             "(e.g. set [container] network = true where --network none is not permitted)")
    return json.loads(lines[-1])

