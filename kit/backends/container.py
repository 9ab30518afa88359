"""What every container backend shares: the trial's container, image choice and the outcome rule.

Docker/Podman and Apptainer run the *same* :class:`TrialContainer`, built by
:func:`trial_container`: the harness command, the kit's code mounted
read-only at ``/kit``, the trial's work directory at ``/out`` (request in,
markers and result out), the dataset read-only at ``/data``, the environment,
the GPU indices and the resource limits of the spec's ``[container]``
section. Each backend only translates it (SDK arguments, an ``apptainer
exec`` command line), and :func:`container_outcome` turns what came back into
a :class:`TrialOutcome` with one rule for both, so they behave identically.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.backends.base import TrialOutcome, read_outputs, status_from, tail
from kit.errors import BackendError, ImageError
from kit.images.render import IMAGE_UID
from kit.plan import arm_framework
from kit.spec import Container

KIT_ROOT = Path(__file__).resolve().parents[2]
KIT_MOUNT, OUT_MOUNT, DATA_MOUNT, STUDY_MOUNT = "/kit", "/out", "/data", "/study"
HARNESS_ARGV = ("python3", "-m", "kit.harness", "--out", OUT_MOUNT, "--data", DATA_MOUNT)
LOG_TAIL_CHARS = 4000
SIGKILL_EXIT = 137
IMAGE_GID = IMAGE_UID  # the images' unprivileged user: USER {IMAGE_UID}:{IMAGE_UID} in images/Dockerfile.j2
TMP_MOUNT = "/tmp"
# The root file system is read-only: everything that wants a writable home or cache is sent to /tmp (a tmpfs).
WRITABLE_ENV = {"HOME": TMP_MOUNT, "TMPDIR": TMP_MOUNT, "XDG_CACHE_HOME": f"{TMP_MOUNT}/.cache",
                "MPLCONFIGDIR": f"{TMP_MOUNT}/matplotlib", "KERAS_HOME": f"{TMP_MOUNT}/.keras",
                "TORCHINDUCTOR_CACHE_DIR": f"{TMP_MOUNT}/torchinductor", "TRITON_CACHE_DIR": f"{TMP_MOUNT}/.triton"}


@dataclass(frozen=True)
class Mount:
    source: Path
    target: str
    read_only: bool


@dataclass(frozen=True)
class TrialContainer:
    """One trial's container, independent of the engine that runs it."""

    name: str
    image: str
    argv: tuple[str, ...]
    mounts: tuple[Mount, ...]
    env: dict[str, str]
    workdir: str
    gpus: list[int] | None  # None: every GPU; []: none; else these indices
    shm_size: str
    cpuset: str
    mem_limit: str
    network: bool
    labels: dict[str, str] = field(default_factory=dict)
    user: str = ""  # "uid:gid" the trial runs as ("": the image's USER); see work_owner()


def container_name(work: Path) -> str:
    """A stable name per run and trial, so a leftover of a killed attempt can be found and removed."""
    run = work.parent.parent.name if work.parent.name == "work" else work.parent.name
    raw = f"kit-{run}-{work.name}"
    return re.sub(r"[^a-zA-Z0-9_.-]", "-", raw)[:120]


def trial_container(arm: str, work: Path, data_dir: Path, spec: Container, image: str,
                    use_gpus: bool, kit_root: Path = KIT_ROOT, *, gpu_indices: list[int] | None = None,
                    study_dir: Path | None = None) -> TrialContainer:
    """The container that runs one trial's harness (shared by every container backend).

    ``gpu_indices`` are the trial's GPUs (NVML indices, from ``TrialTarget.gpu_indices``); None: the
    spec's ``container.gpus`` (all of them when "all"). Without ``use_gpus`` the trial gets none.
    """
    framework = arm_framework(arm)
    indices = (list(gpu_indices) if gpu_indices is not None else spec.gpu_indices()) if use_gpus else []
    env = _env(framework, indices)
    mounts: tuple[Mount, ...] = (
        Mount(kit_root / "kit", f"{KIT_MOUNT}/kit", True),
        Mount(work.resolve(), OUT_MOUNT, False),
        Mount(data_dir.resolve(), DATA_MOUNT, True),
    )
    argv: tuple[str, ...] = HARNESS_ARGV
    if study_dir is not None:  # a study folder's workload: the run's copy of the folder, read-only
        mounts += (Mount(study_dir.resolve(), STUDY_MOUNT, True),)
        argv += ("--study", STUDY_MOUNT)
    return TrialContainer(
        name=container_name(work), image=image, argv=argv, mounts=mounts, env=env, workdir=OUT_MOUNT,
        gpus=indices, shm_size=spec.shm_size, cpuset=spec.cpuset, mem_limit=spec.mem_limit, network=spec.network,
        labels={"io.kit.role": "trial", "io.kit.trial": work.name, "io.kit.framework": framework, "io.kit.arm": arm},
    )


def _env(framework: str, indices: list[int] | None) -> dict[str, str]:
    """The trial's environment: CUDA numbers GPUs in PCI bus order (NVML's), the engine attaches ``indices``."""
    env = {"PYTHONPATH": KIT_MOUNT, "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
           "TF_CPP_MIN_LOG_LEVEL": "2", "KIT_FRAMEWORK": framework, "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
           **WRITABLE_ENV}
    if indices is None:
        env["NVIDIA_VISIBLE_DEVICES"] = "all"
    elif indices:  # the engine attaches only these; Apptainer (all GPUs visible) adds CUDA_VISIBLE_DEVICES
        env["NVIDIA_VISIBLE_DEVICES"] = ",".join(map(str, indices))
    else:
        env["NVIDIA_VISIBLE_DEVICES"] = "void"
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def probe_container(framework: str, spec: Container, image: str, use_gpus: bool) -> TrialContainer:
    """The trial's container with the version probe as its command and nothing mounted."""
    from kit.images.verify import PROBE_SOURCE

    indices = spec.gpu_indices() if use_gpus else []
    return TrialContainer(
        name=f"kit-probe-{framework}", image=image,
        argv=("python3", "-c", PROBE_SOURCE.read_text(encoding="utf-8"), framework), mounts=(),
        env=_env(framework, indices), workdir="/tmp", gpus=indices, shm_size=spec.shm_size, cpuset=spec.cpuset,
        mem_limit=spec.mem_limit, network=spec.network, labels={"io.kit.role": "probe"},
    )


@dataclass(frozen=True)
class WorkOwner:
    """Who the trial runs as in its container, and who owns its work directory on the host."""

    user: str  # the container's "uid:gid"
    chown: tuple[int, int] | None  # give the work directory to this host uid:gid; None: leave it to the kit's user
    why: str


def work_owner(kit_uid: int, kit_gid: int, rootless: bool) -> WorkOwner:
    """The container user and the work directory's owner (never a world-writable directory).

    The trial must write its markers and result into the work directory, and
    nobody else on the host should be able to. Three cases:

    * the kit runs as root (a rootful engine): the trial runs as the image's
      unprivileged user (uid/gid 1000) and the work directory is chown'ed to it,
      mode 0700; the host's uid 1000, if one exists, is the only other account
      that can write it while the trial runs (the runner deletes it afterwards).
    * the kit is not root and the engine is rootless (rootless Podman or
      Docker): uids inside are mapped through the user's subordinate range, so
      the image's uid 1000 is some unnamed host uid the kit cannot chown to;
      but the container's root *is* the kit's user on the host, so the trial
      runs as "0:0" inside, which writes the kit user's 0700 directory as that
      user. It holds no capability (cap_drop ALL, no-new-privileges) and only
      user-namespace root, so it is no more than the kit's user.
    * the kit is not root and the engine is rootful (the user is in the docker
      group): the trial runs as the kit's own uid:gid, the host identity that
      owns the 0700 directory (``docker run -u $(id -u):$(id -g)``).
    """
    if kit_uid == 0:
        return WorkOwner(f"{IMAGE_UID}:{IMAGE_GID}", (IMAGE_UID, IMAGE_GID),
                         "kit runs as root: the work directory is given to the image's user (chown, mode 0700)")
    if rootless:
        return WorkOwner("0:0", None, "rootless engine: the container's root is the kit's user on the host "
                                      "(work directory mode 0700, no chown)")
    return WorkOwner(f"{kit_uid}:{kit_gid}", None, "rootful engine, kit not root: the trial runs as the kit's "
                                                   "uid:gid (work directory mode 0700, no chown)")


def prepare_work(work: Path, owner: WorkOwner | None = None) -> None:
    """Give the work directory to the trial's user, mode 0700, never world-writable.

    ``owner`` None: the trial runs as the kit's own user (Apptainer): no chown.
    The kit's own files in it (request.json) stay the kit's, readable.
    """
    os.chmod(work, 0o700)
    for f in work.iterdir():
        if f.is_file() and not f.is_symlink():
            os.chmod(f, 0o644)
    if owner is not None and owner.chown is not None:
        try:
            os.chown(work, *owner.chown, follow_symlinks=False)
        except OSError as exc:
            raise BackendError(f"cannot give the trial's work directory to uid {owner.chown[0]} ({exc.strerror})",
                               where=str(work), fix="put the run directory on a local file system where root "
                                                    "can chown (--runs-dir), e.g. not NFS with root_squash") from None


def container_outcome(work: Path, exit_code: int | None, timed_out: bool, oom_killed: bool | None,
                      stdout: str, stderr: str, wall_s: float, detail: dict[str, Any],
                      mem_limit: str = "") -> TrialOutcome:
    """One rule for every container backend: the base rule, then an OOM kill is ``oom``.

    The engine's OOM-killed flag decides when it is set. Some engines do not
    report it (Podman 4 on cgroup v1 here; Apptainer never does), so a trial
    killed by SIGKILL under a memory limit, not by the kit's time limit, counts
    as OOM too; ``oom_source`` says which of the two it was.
    """
    result, markers, problem = read_outputs(work)
    status = status_from(exit_code, result, timed_out)
    sigkill = exit_code == SIGKILL_EXIT and not timed_out
    inferred = bool(not oom_killed and sigkill and mem_limit)
    detail = dict(detail)
    if problem:
        detail["untrusted_output"] = problem
    detail["exit_code"] = exit_code
    sig = exit_signal(exit_code)
    if sig is not None:
        detail["signal"] = sig
    detail["oom_killed"] = bool(oom_killed) or inferred
    detail["oom_source"] = "engine" if oom_killed else (
        f"inferred: SIGKILL under the {mem_limit} memory limit (the engine did not report an OOM kill)" if inferred else None)
    if detail["oom_killed"] and status == "error":
        status = "oom"
    detail["log_tail"] = tail(stdout + ("\n" if stdout and stderr else "") + stderr, LOG_TAIL_CHARS)
    if sigkill and not detail["oom_killed"]:
        detail["note"] = "killed by SIGKILL; without a memory limit the kit cannot tell a host OOM kill from another kill"
    if timed_out:
        detail["note"] = "time limit reached: the container was killed"
    return TrialOutcome(status=status, exit_code=exit_code, result=result, markers=markers,
                        stderr_tail=tail(stderr), wall_s=wall_s, detail=detail)


def exit_signal(exit_code: int | None) -> str | None:
    """The signal that ended a container's process, from its exit code (None: it exited).

    Engines (Docker, Podman) and the shell report a process killed by signal
    N as exit code 128 + N (Apptainer's negative return code is translated
    the same way); the harness itself exits only with codes 0-6, so an exit
    code 129-192 that names a signal is one.
    """
    import signal

    if exit_code is None or not 128 < exit_code <= 128 + 64:
        return None
    try:
        return signal.Signals(exit_code - 128).name
    except ValueError:
        return None


def size_bytes(text: str) -> int:
    """'2g' -> 2147483648; '512m', '64k' or a plain number of bytes."""
    text = text.strip().lower()
    mult = {"k": 1024, "m": 1024**2, "g": 1024**3}
    if text and text[-1] in mult:
        return int(text[:-1]) * mult[text[-1]]
    return int(text)


def choose_rows(arms: tuple[str, ...], device: str, overrides: dict[str, str] | None = None,
                matrix: Any = None) -> dict[str, Any]:
    """The matrix row each arm runs in: the override (keyed by arm or framework), else the default row for ``device``."""
    from kit.images.matrix import load_matrix, require_harness

    matrix = matrix or load_matrix()
    overrides = overrides or {}
    out = {}
    for arm in arms:
        fw = arm_framework(arm)
        name = overrides.get(arm) or overrides.get(fw)
        row = matrix.get(name) if name else matrix.default_for(fw, device)
        if row.framework != fw:
            raise ImageError(f"image {row.name} is a {row.framework} image, not {fw}", where=f"--image {fw}={row.name}",
                             fix=f"give a {fw} row (kit images list)")
        require_harness(row, f"--image {fw}={row.name}")  # a paper-era stack: no trials of the kit's harness there
        out[arm] = row
    unknown = set(overrides) - set(arms) - {arm_framework(a) for a in arms}
    if unknown:
        raise ImageError(f"--image names framework(s) the experiment does not run: {', '.join(sorted(unknown))}",
                         where="--image", fix=f"use one of: {', '.join(arms)}")
    return out


def image_arms(names: list[str], frameworks: tuple[str, ...], matrix: Any = None) -> tuple[tuple[str, ...], dict[str, str]]:
    """Arms for ``kit run --images ROW,ROW``: one arm per image row, all interleaved in one plan.

    An arm is ``framework@version`` (the row name without its framework prefix),
    so the report and ``kit compare`` tell the versions apart; the returned map
    says which row each arm runs in.
    """
    from kit.images.matrix import load_matrix, require_harness

    matrix = matrix or load_matrix()
    names = [n.strip() for n in names if n.strip()]
    if len(names) < 2 or len(set(names)) != len(names):
        raise ImageError(f"--images needs two or more different matrix rows, got {', '.join(names) or 'none'}",
                         where="--images", fix="e.g. --images pytorch-2.6-cu124,pytorch-2.7-cu126 (rows: kit images list)")
    arms: list[str] = []
    rows: dict[str, str] = {}
    for name in names:
        row = matrix.get(name)
        require_harness(row, f"--images {name}")
        if row.framework not in frameworks:
            raise ImageError(f"image {row.name} is a {row.framework} image; the experiment runs {', '.join(frameworks)}",
                             where=f"--images {name}", fix=f"give rows of {' or '.join(frameworks)} (kit images list)")
        arm = f"{row.framework}@{row.name.removeprefix(row.framework + '-')}"
        arms.append(arm)
        rows[arm] = row.name
    return tuple(arms), rows


def cgroup_dir(pid: int, proc_root: Path = Path("/proc"), sys_root: Path = Path("/sys/fs/cgroup")) -> Path | None:
    """The memory cgroup of ``pid`` as seen from this host (v2 unified, or v1's memory controller)."""
    try:
        lines = (proc_root / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return None
    v1 = v2 = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if "memory" in parts[1].split(","):
            v1 = sys_root / "memory" / parts[2].lstrip("/")
        elif parts[0] == "0" and parts[1] == "":
            v2 = sys_root / parts[2].lstrip("/")
    for cand in (v1, v2):
        if cand is not None and cand.is_dir():
            return cand
    return None
