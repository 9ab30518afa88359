"""Docker/Podman backend: each trial's harness in a fresh container of its framework's image.

The container is the shared :class:`~kit.backends.container.TrialContainer`
translated into docker SDK arguments: bind mounts, no network (``none``)
unless the spec allows it, shared-memory size, CPU set and memory limit
(swap included, so an over-limit trial is OOM-killed rather than swapping),
and GPUs through a device request (NVIDIA toolkit on Docker, CDI on Podman).
Once it runs, its PID and cgroup go to the collectors; when it ends, its exit
code, OOM-killed flag and log tail go to the trial file, and it is removed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kit.backends.base import Backend, TrialOutcome
from kit.backends.container import (
    TrialContainer,
    cgroup_dir,
    choose_rows,
    container_outcome,
    prepare_work,
    size_bytes,
    trial_container,
)
from kit.collectors.base import Probe, TrialTarget
from kit.engine import Engine, GpuSupport, _short, connect, device_requests, find_engine, gpu_support, host_gpus
from kit.errors import BackendError, EngineError, ImageError
from kit.plan import arm_framework
from kit.spec import Container


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
        self._images: dict[str, dict[str, Any]] = {}

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
        self._use_gpus = bool(gpus) and self._support.ok and self.spec.gpu_indices() != []
        device = "cuda" if self._use_gpus else "cpu"
        rows = choose_rows(arms, device, self.overrides)
        results = []
        for arm, row in rows.items():
            fw = arm_framework(arm)
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

    def _device_requests(self) -> list[Any]:
        support = self._support or gpu_support(self.engine())
        return device_requests(self.engine().kind, support.mechanism, self.spec.gpu_indices())

    # -- one trial ------------------------------------------------------------

    def container_kwargs(self, tc: TrialContainer, gpu_requests: list[Any] | None) -> dict[str, Any]:
        """The SDK arguments of ``containers.create`` for ``tc`` (pure: tested without an engine)."""
        kwargs: dict[str, Any] = {
            "image": tc.image, "command": list(tc.argv), "name": tc.name, "detach": True,
            "working_dir": tc.workdir, "environment": dict(tc.env), "labels": dict(tc.labels),
            "volumes": {str(m.source): {"bind": m.target, "mode": "ro" if m.read_only else "rw"} for m in tc.mounts},
            "shm_size": tc.shm_size or None,
        }
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

    def run_trial(self, arm: str, work: Path, data_dir: Path, timeout_s: float, target: TrialTarget,
                  on_start: Callable[[], None] | None = None) -> TrialOutcome:
        import docker
        import requests

        if arm not in self._images:
            raise BackendError(f"no image prepared for {arm}", where="backend docker",
                               fix="call prepare() before run_trial() (kit run does)")
        img = self._images[arm]
        eng = self.engine()
        tc = trial_container(arm, work, data_dir, self.spec, img["tag"], self._use_gpus and img["device"] == "cuda")
        prepare_work(work)
        self._remove_leftover(tc.name)
        gpu_reqs = self._device_requests() if tc.gpus != [] else None
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
                state = container.wait(timeout=timeout_s)
                code: int | None = int(state.get("StatusCode", -1))
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):  # the time limit
                timed_out = True
                _kill(container)
                code = _exit_code(container)
            wall = time.monotonic() - t0
            container.reload()
            st = container.attrs.get("State", {})
            oom = bool(st.get("OOMKilled"))
            if code is None or code < 0:
                code = st.get("ExitCode")
            stdout = container.logs(stdout=True, stderr=False).decode(errors="replace")
            stderr = container.logs(stdout=False, stderr=True).decode(errors="replace")
        except BaseException:  # KeyboardInterrupt/SIGTERM or engine trouble: the trial in flight is lost, nothing else
            _kill(container)
            _remove(container)
            raise
        _write_logs(work, stdout, stderr)
        _remove(container)
        detail = {"container_id": container.id, "container_name": tc.name, "image": img["tag"], "image_id": img["id"],
                  "engine": eng.kind, "pid": target.pid, "cgroup": str(target.cgroup) if target.cgroup else None,
                  "gpus": "none" if tc.gpus == [] else ("all" if tc.gpus is None else tc.gpus),
                  "network": "on" if tc.network else "none"}
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


def _write_logs(work: Path, stdout: str, stderr: str) -> None:
    (work / "stdout.log").write_text(stdout, encoding="utf-8")
    (work / "stderr.log").write_text(stderr, encoding="utf-8")
