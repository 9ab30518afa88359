"""Docker/Podman backend: each trial's harness in a fresh container of its framework's image.

The container is the shared :class:`~kit.backends.container.TrialContainer`
translated into docker SDK arguments: bind mounts, no network (``none``)
unless the spec allows it, shared-memory size, CPU set and memory limit
(swap included, so an over-limit trial is OOM-killed rather than swapping),
and GPUs through a device request (NVIDIA toolkit on Docker, CDI on Podman)
for exactly the trial's GPUs (``TrialTarget.gpu_indices``, NVML indices, the
numbering ``device_ids`` use), so inside the trial its first GPU is GPU 0.
When the trials compute on the GPU and the engine cannot attach GPUs, or an
arm's image row is a CPU image, the run is refused before any trial: a silent
CPU run would compare CPU with GPU.
Once it runs, its PID and cgroup go to the collectors; when it ends, its exit
code, OOM-killed flag and log tail go to the trial file, and it is removed.

The trial is untrusted code: its container has no capabilities
(``cap_drop ALL``), cannot gain privileges (``no-new-privileges``), has a
process limit, a read-only root file system and a tmpfs at /tmp (HOME and the
caches point there), and runs as the user of
:func:`~kit.backends.container.work_owner`, which owns the work directory
(mode 0700, never world-writable). What it leaves in the work directory is
read and written only without following links (kit.backends.base), and its
logs are taken from the engine with a size cap.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

from kit.backends.base import LOG_TAIL_BYTES, Backend, TrialOutcome, create_trial_file
from kit.backends.container import (
    TMP_MOUNT,
    TrialContainer,
    WorkOwner,
    cgroup_dir,
    choose_rows,
    container_outcome,
    prepare_work,
    size_bytes,
    trial_container,
    work_owner,
)
from kit.collectors.base import Probe, TrialTarget
from kit.engine import (
    Engine,
    GpuSupport,
    _short,
    connect,
    device_requests,
    find_engine,
    gpu_support,
    host_gpus,
    wait_for_exit,
)
from kit.errors import BackendError, EngineError, ImageError
from kit.plan import arm_framework
from kit.records import JsonTable
from kit.spec import Container

PIDS_LIMIT = 4096  # processes and threads of one trial (DataLoader workers, TF thread pools fit easily)
TMP_SIZE = "4g"  # the /tmp tmpfs (compiler caches); it counts against the memory limit only when used
TMP_OPTIONS = f"rw,exec,nosuid,nodev,size={TMP_SIZE},mode=1777"  # exec: Triton/Inductor load .so from caches

class DockerImage(TypedDict):
    """The image an arm runs in, checked by :meth:`DockerBackend.prepare`: the manifest's ``backend.images[arm]``."""

    row: str  # the matrix row (images/matrix.toml)
    tag: str
    id: str
    digest: str
    repo_digests: list[str]
    base: str | None
    base_pinned: bool | None
    device: str  # cpu | cuda
    matrix: dict[str, str]  # the versions the row promises
    versions: JsonTable  # what the probe reported from inside the image
    notes: list[str]


class DockerBackend(Backend):
    """Trials in containers through the Docker Engine API (Docker or Podman)."""

    name = "docker"

    def __init__(self, container: Container | None = None, images: dict[str, str] | None = None,
                 engine_url: str | None = None) -> None:
        self.spec = container or Container()
        self.overrides = dict(images or {})
        self.engine_url = engine_url
        self._engine: Engine | None = None
        self._support: GpuSupport | None = None
        self._use_gpus = False
        self._images: dict[str, DockerImage] = {}
        self._owner: WorkOwner | None = None

    # -- engine ---------------------------------------------------------------

    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = connect(self.engine_url, "--engine-url") if self.engine_url else find_engine()
        return self._engine

    def available(self) -> Probe:
        try:
            eng = self.engine()
        except EngineError as err:
            return Probe(False, err.cause, err.fix or "")
        return Probe(True, eng.label())

    def describe(self) -> dict[str, Any]:
        eng = self.engine()
        net = "network on" if self.spec.network else "network none"
        return {"backend": self.name, "isolation": f"{eng.kind} {eng.version} container per trial, {net}",
                **eng.describe(), "container": {"gpus": self.spec.gpus, "shm_size": self.spec.shm_size,
                                                "cpuset": self.spec.cpuset, "mem_limit": self.spec.mem_limit,
                                                "network": self.spec.network}}

    # -- once per run ---------------------------------------------------------

    def prepare(self, arms: tuple[str, ...], data_dir: Path) -> dict[str, Any]:
        """Pick each arm's image, check it is built, and record the versions it reports from inside."""
        from kit.images.build import find_built
        from kit.images.verify import Verification, compare, mismatch_error, run_probe

        eng = self.engine()
        self._support = gpu_support(eng)
        gpus = host_gpus()
        # the runner resolved the device (kit.gpus); used alone, "auto" on this host: GPU when one is allowed
        want_gpu = self.device == "gpu" if self.device is not None else bool(gpus) and self.spec.gpu_indices() != []
        if want_gpu and not self._support.ok:
            raise BackendError(
                f"the trials compute on the GPU ({len(gpus)} on this host), but {eng.kind} cannot attach GPUs to "
                f"containers: {self._support.detail}; the trials would silently run on the CPU",
                where=f"backend docker ({eng.url})",
                fix=f"{self._support.fix or 'install the NVIDIA Container Toolkit (Docker) or a CDI spec (Podman)'}; "
                    "or run with --backend local, or set [workload] device = \"cpu\" to measure the CPU on purpose")
        self._use_gpus = want_gpu
        device = "cuda" if want_gpu else "cpu"
        rows = choose_rows(arms, device, self.overrides)
        results = []
        for arm, row in rows.items():
            fw = arm_framework(arm)
            if want_gpu and row.device != "cuda":
                raise ImageError(f"image {row.name} is a CPU image, but the trials of {arm} compute on the GPU",
                                 where=f"--image {fw}={row.name}",
                                 fix="give a CUDA row of the matrix (kit images list), or set [workload] device = "
                                     "\"cpu\" to measure the CPU on purpose")
            built = find_built(eng, row)
            if built is None:
                raise ImageError(f"image {row.name} ({fw}, {device}) is not built for its current recipe on {eng.kind}",
                                 where=f"backend docker ({eng.url})", fix=f"kit images build {row.name}")
            reqs = self._device_requests() if self._use_gpus and row.device == "cuda" else None
            reported = run_probe(eng, built["tag"], fw, reqs)
            bad, notes = compare(row, reported)
            results.append(Verification(row.name, built["tag"], built["id"], reported, bad, notes))
            self._images[arm] = {"row": row.name, "tag": built["tag"], "id": built["id"], "digest": built["digest"],
                                "repo_digests": built["repo_digests"], "base": built.get("base"),
                                "base_pinned": built.get("base_pinned"), "device": row.device,
                                "matrix": row.expected(), "versions": reported, "notes": notes}
        err = mismatch_error(results)
        if err is not None:
            raise err
        return {"images": self._images, "device": device, "host_gpus": gpus,
                "gpu_support": {"ok": self._support.ok, "mechanism": self._support.mechanism,
                                "detail": self._support.detail}}

    def _device_requests(self, indices: list[int] | None = None) -> list[Any]:
        """Device requests for ``indices`` (NVML indices; None: the spec's container.gpus)."""
        support = self._support or gpu_support(self.engine())
        return device_requests(self.engine().kind, support.mechanism,
                               indices if indices is not None else self.spec.gpu_indices())

    def owner(self) -> WorkOwner:
        """Who the trials run as (see work_owner); the engine says whether it is rootless."""
        if self._owner is None:
            rootless = False
            if os.geteuid() != 0:
                import docker
                import requests

                try:
                    opts = self.engine().client.info().get("SecurityOptions") or []
                except (docker.errors.DockerException, requests.RequestException):
                    opts = []
                rootless = any("rootless" in str(o) for o in opts)
            self._owner = work_owner(os.geteuid(), os.getegid(), rootless)
        return self._owner

    # -- one trial ------------------------------------------------------------

    def container_kwargs(self, tc: TrialContainer, gpu_requests: list[Any] | None) -> dict[str, Any]:
        """The SDK arguments of ``containers.create`` for ``tc`` (pure: tested without an engine)."""
        kwargs: dict[str, Any] = {
            "image": tc.image, "command": list(tc.argv), "name": tc.name, "detach": True,
            "working_dir": tc.workdir, "environment": dict(tc.env), "labels": dict(tc.labels),
            "volumes": {str(m.source): {"bind": m.target, "mode": "ro" if m.read_only else "rw"} for m in tc.mounts},
            "shm_size": tc.shm_size or None,
            # untrusted code: no capabilities, no privilege gain, bounded processes, read-only root, /tmp in memory
            "cap_drop": ["ALL"], "security_opt": ["no-new-privileges"], "pids_limit": PIDS_LIMIT,
            "read_only": True, "tmpfs": {TMP_MOUNT: TMP_OPTIONS},
        }
        if tc.user:
            kwargs["user"] = tc.user
        if not tc.network:
            kwargs["network_mode"] = "none"
        if tc.cpuset:
            kwargs["cpuset_cpus"] = tc.cpuset
        if tc.mem_limit:
            kwargs["mem_limit"] = size_bytes(tc.mem_limit)
            kwargs["memswap_limit"] = size_bytes(tc.mem_limit)  # no swap: over the limit is an OOM kill
        if gpu_requests:
            kwargs["device_requests"] = gpu_requests
        return kwargs

    def trial_container(self, arm: str, work: Path, data_dir: Path, img: DockerImage,
                        target: TrialTarget) -> TrialContainer:
        """The trial's container with the trial's GPUs; a GPU trial this backend cannot serve is an error."""
        use = self._use_gpus and img["device"] == "cuda"
        if target.gpu_indices and not use:
            raise BackendError(f"the trial was given GPU(s) {target.gpu_indices}, but its container gets none "
                               f"(image {img.get('row')} is a {img['device']} image, or GPUs are off for this run)",
                               where="backend docker", fix="give a CUDA image row, or set [workload] device = \"cpu\"")
        tc = trial_container(arm, work, data_dir, self.spec, img["tag"], use, gpu_indices=target.gpu_indices,
                             study_dir=self.study_dir)
        return dataclasses.replace(tc, user=self.owner().user)

    def run_trial(self, arm: str, work: Path, data_dir: Path, timeout_s: float, target: TrialTarget,
                  on_start: Callable[[], None] | None = None) -> TrialOutcome:
        import docker
        import requests

        if arm not in self._images:
            raise BackendError(f"no image prepared for {arm}", where="backend docker",
                               fix="call prepare() before run_trial() (kit run does)")
        img = self._images[arm]
        eng = self.engine()
        tc = self.trial_container(arm, work, data_dir, img, target)
        prepare_work(work, self.owner())
        self._remove_leftover(tc.name)
        gpu_reqs = self._device_requests(tc.gpus) if tc.gpus != [] else None
        try:
            container = eng.client.containers.create(**self.container_kwargs(tc, gpu_reqs))
        except docker.errors.ImageNotFound:
            raise ImageError(f"image {img['tag']} disappeared from the engine", where=eng.url,
                             fix=f"kit images build {img['row']}, then kit run --resume") from None
        except (docker.errors.DockerException, requests.RequestException) as exc:
            raise EngineError(f"the engine refused to create the trial container ({_short(exc)})", where=eng.url,
                              fix="check the [container] settings and the engine (kit doctor)") from None
        t0 = time.monotonic()
        timed_out = False
        try:
            container.start()
            container.reload()
            pid = int(container.attrs.get("State", {}).get("Pid") or 0) or None
            target.pid, target.container_id = pid, container.id
            target.cgroup = cgroup_dir(pid) if pid else None
            if on_start:
                on_start()
            try:
                code: int | None = wait_for_exit(container, timeout_s, pid)
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                code = None
            if code is None:  # the time limit
                timed_out = True
                _kill(container)
                code = _exit_code(container)
            wall = time.monotonic() - t0
            container.reload()
            st = container.attrs.get("State", {})
            oom = bool(st.get("OOMKilled"))
            if code is None or code < 0:
                code = st.get("ExitCode")
            stdout = _log_tail(container, stdout=True)
            stderr = _log_tail(container, stdout=False)
        except BaseException:  # KeyboardInterrupt/SIGTERM or engine trouble: the trial in flight is lost, nothing else
            _kill(container)
            _remove(container)
            raise
        log_problem = _write_logs(work, stdout, stderr)
        _remove(container)
        detail = {"container_id": container.id, "container_name": tc.name, "image": img["tag"], "image_id": img["id"],
                  "engine": eng.kind, "pid": target.pid, "cgroup": str(target.cgroup) if target.cgroup else None,
                  "gpus": "none" if tc.gpus == [] else ("all" if tc.gpus is None else tc.gpus),
                  "network": "on" if tc.network else "none", "user": tc.user}
        if log_problem:
            detail["log_files"] = log_problem
        return container_outcome(work, code, timed_out, oom, stdout, stderr, wall, detail, self.spec.mem_limit)

    def _remove_leftover(self, name: str) -> None:
        """A container of the same run and trial left by a killed `kit run`: remove it before the retry."""
        import docker

        try:
            old = self.engine().client.containers.get(name)
        except docker.errors.NotFound:
            return
        except docker.errors.DockerException as exc:
            raise EngineError(f"cannot look up container {name} ({_short(exc)})", where=self.engine().url) from None
        _kill(old)
        _remove(old)


def _kill(container: Any) -> None:
    import docker

    try:
        container.kill()
    except docker.errors.DockerException:
        pass


def _remove(container: Any) -> None:
    import docker

    try:
        container.remove(force=True)
    except docker.errors.DockerException:
        pass


def _exit_code(container: Any) -> int | None:
    import docker
    import requests

    try:
        return int(container.wait(timeout=30).get("StatusCode", -1))
    except (docker.errors.DockerException, requests.RequestException):
        return None


def _log_tail(container: Any, stdout: bool, max_bytes: int = LOG_TAIL_BYTES) -> str:
    """The last ``max_bytes`` of the container's stdout (or stderr), streamed: a flood cannot fill the kit's memory."""
    chunks: deque[bytes] = deque()
    kept = 0
    for chunk in container.logs(stdout=stdout, stderr=not stdout, stream=True, follow=False):
        chunks.append(chunk)
        kept += len(chunk)
        while kept - len(chunks[0]) >= max_bytes:
            kept -= len(chunks.popleft())
    return b"".join(chunks)[-max_bytes:].decode(errors="replace")


def _write_logs(work: Path, stdout: str, stderr: str) -> str | None:
    """stdout.log/stderr.log into the work directory, replacing whatever the trial left at those names.

    The container could write the directory, so a name there may be a planted
    link to a host file: create_trial_file unlinks it and creates a new file
    with O_EXCL|O_NOFOLLOW, never writing through it. A name that cannot be
    freed (the trial made it a directory) is skipped; the reason is returned.
    """
    problems = []
    for name, text in (("stdout.log", stdout), ("stderr.log", stderr)):
        try:
            fd = create_trial_file(work, name)
        except OSError as exc:
            problems.append(f"{name} not written: the trial left something there that is not a file "
                            f"({exc.strerror or exc})")
            continue
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode("utf-8", errors="replace"))
    return "; ".join(problems) or None
