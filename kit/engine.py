"""The container engine: which one answers, what it can do with GPUs, and `kit doctor`'s view of it.

The engine is found from ``DOCKER_HOST`` (when set, only there: an explicit
choice is never silently replaced) and otherwise from the default sockets,
Docker's first, then Podman's (rootful, then the user's). Both speak the
Docker Engine API, so the ``docker`` SDK drives either; what differs is how a
container gets GPUs:

- Docker with the NVIDIA container toolkit: a ``DeviceRequest`` for the
  ``gpu`` capability (what ``docker run --gpus`` sends);
- Podman: CDI devices (``nvidia.com/gpu=all`` from ``nvidia-ctk cdi
  generate``), which Podman's Docker-compatible API accepts as a device request
  with the ``cdi`` driver from Podman 5.4 on (older releases ignore device
  requests: GPUs only through ``podman run --device``, not through the API).

Library errors of the SDK are translated here into :class:`EngineError`.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.errors import EngineError
from kit.nvml import nvml_session, text

DOCKER_SOCKET = "unix:///var/run/docker.sock"
PODMAN_ROOT_SOCKET = "unix:///run/podman/podman.sock"
CDI_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))
PODMAN_CDI_API = (5, 4)  # first Podman whose Docker-compatible API honours CDI device requests
START_FIX = ("start Docker (`sudo systemctl start docker`) or Podman's API service (`sudo systemctl start "
             "podman.socket`, or `podman system service --time=0 unix:///run/podman/podman.sock &`), "
             "or point DOCKER_HOST at a running engine's socket")


@dataclass
class Engine:
    """A reachable engine and what it said about itself."""

    kind: str  # docker | podman
    url: str
    source: str  # DOCKER_HOST | default socket
    version: str
    api_version: str
    client: Any = field(repr=False)
    runtimes: tuple[str, ...] = ()
    default_runtime: str = ""
    cgroup_driver: str = ""

    def describe(self) -> dict[str, Any]:
        return {"engine": self.kind, "engine_version": self.version, "api_version": self.api_version,
                "url": self.url, "found_via": self.source, "runtimes": list(self.runtimes),
                "default_runtime": self.default_runtime, "cgroup_driver": self.cgroup_driver}

    def label(self) -> str:
        return f"{self.kind} {self.version} (Docker API {self.api_version}) at {self.url}"


def candidate_urls(env: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """(source, url) pairs in the order they are tried."""
    env = dict(os.environ) if env is None else env
    if env.get("DOCKER_HOST"):
        return [("DOCKER_HOST", env["DOCKER_HOST"])]
    out = [("default Docker socket", DOCKER_SOCKET), ("default Podman socket", PODMAN_ROOT_SOCKET)]
    runtime_dir = env.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        out.append(("user's Podman socket", f"unix://{runtime_dir}/podman/podman.sock"))
    return out


def _socket_missing(url: str) -> bool:
    return url.startswith("unix://") and not Path(url.removeprefix("unix://")).exists()


def connect(url: str, source: str = "given", timeout_s: float = 10.0) -> Engine:
    """Connect to the engine at ``url`` and ask what it is; EngineError if nothing answers."""
    import docker
    import requests

    if _socket_missing(url):
        raise EngineError(f"no engine socket at {url}", where=source, fix=START_FIX)
    try:
        client = docker.DockerClient(base_url=url, timeout=int(timeout_s))
        client.ping()
        ver = client.version()
        info = client.info()
    except (docker.errors.DockerException, requests.RequestException, OSError) as exc:
        raise EngineError(f"the engine at {url} does not answer ({_short(exc)})", where=source, fix=START_FIX) from None
    components = " ".join(c.get("Name", "") for c in ver.get("Components") or [])
    kind = "podman" if "podman" in components.lower() or "podman" in str(ver.get("Platform", {})).lower() else "docker"
    return Engine(kind=kind, url=url, source=source, version=str(ver.get("Version", "?")),
                  api_version=str(ver.get("ApiVersion", "?")), client=client,
                  runtimes=tuple(sorted((info.get("Runtimes") or {}).keys())),
                  default_runtime=str(info.get("DefaultRuntime") or ""), cgroup_driver=str(info.get("CgroupDriver") or ""))


def find_engine(env: dict[str, str] | None = None) -> Engine:
    """The first engine that answers: DOCKER_HOST, else Docker's socket, then Podman's."""
    tried = []
    for source, url in candidate_urls(env):
        try:
            return connect(url, source)
        except EngineError as err:
            tried.append(f"{url} ({err.cause})")
    raise EngineError("no container engine answers; tried " + "; ".join(tried), where="container engine",
                      fix=START_FIX)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:300]


# -- GPUs ---------------------------------------------------------------------

# A container's end is awaited on its process (a pidfd: no CPU while it runs), then on its state, polled every
# WAIT_POLL_S until the engine says it stopped (about 0.1 s later); not on the engine's wait endpoint: Podman's spins
# a CPU for as long as it waits (containers/podman#18150, fixed in 4.6; Debian 12 ships 4.3). On a 2-core host that
# CPU competed with every trial, and the disturbance check (rightly) counted it as foreign: every judged phase was
# disturbed, each trial ran three times. Without a pidfd (another host's engine, an old kernel) the state is polled
# every WAIT_POLL_SLOW_S; with one it is still re-read every WAIT_SAFETY_S.
WAIT_POLL_S = 0.05
WAIT_POLL_SLOW_S = 0.25
WAIT_SAFETY_S = 2.0
STOPPED = ("exited", "dead", "stopped")  # Podman says "stopped" (exit code set) before its clean-up says "exited"


def _pidfd(pid: int | None) -> int | None:
    """A file descriptor that becomes readable when process ``pid`` ends (Linux 5.3+), or None."""
    if not pid or not hasattr(os, "pidfd_open"):
        return None
    try:
        return os.pidfd_open(pid)
    except OSError:  # gone already (the state says how it ended), or no pidfd on this kernel
        return None


def wait_for_exit(container: Any, timeout_s: float, pid: int | None = None) -> int | None:
    """The exit code of the started ``container`` once it has stopped, or None when ``timeout_s`` passed first.

    ``pid``: its main process on this host (``State.Pid``; read from the engine when not given). The SDK's
    errors are the caller's to handle, as those of ``container.wait``.
    """
    import select
    import time

    deadline = time.monotonic() + timeout_s
    fd: int | None = None
    poll_s = WAIT_POLL_SLOW_S
    first = True
    try:
        while True:
            container.reload()
            st = container.attrs.get("State") or {}
            if not st.get("Running") and st.get("Status") in STOPPED:
                code = st.get("ExitCode")
                return code if isinstance(code, int) and not isinstance(code, bool) else -1
            if first:
                first = False
                fd = _pidfd(pid if pid is not None else (st.get("Pid") or None))
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if fd is not None:
                if not select.select([fd], [], [], min(left, WAIT_SAFETY_S))[0]:
                    continue  # still running
                os.close(fd)  # the process ended: the engine's state follows within a few polls
                fd, poll_s = None, WAIT_POLL_S
            time.sleep(min(left, poll_s))
    finally:
        if fd is not None:
            os.close(fd)


def _version_tuple(text: str) -> tuple[int, ...]:
    out = []
    for part in text.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def cdi_nvidia_specs(dirs: tuple[Path, ...] = CDI_DIRS) -> list[Path]:
    """CDI spec files that define ``nvidia.com/gpu`` devices."""
    out = []
    for d in dirs:
        if not d.is_dir():
            continue
        for f in sorted(d.iterdir()):
            if f.suffix in (".yaml", ".yml", ".json"):
                try:
                    text = f.read_text(encoding="utf-8", errors="replace")
                except OSError:
                    continue
                if "nvidia.com/gpu" in text or ("nvidia.com" in text and "gpu" in text):
                    out.append(f)
    return out


@dataclass(frozen=True)
class GpuSupport:
    """How (or why not) this engine can hand GPUs to a container."""

    ok: bool
    mechanism: str  # nvidia-toolkit | cdi | none
    detail: str
    fix: str = ""


def gpu_support(engine: Engine, which: Any = shutil.which, cdi_dirs: tuple[Path, ...] = CDI_DIRS) -> GpuSupport:
    """Can ``engine`` attach NVIDIA GPUs through its API? (No container is started.)"""
    if engine.kind == "docker":
        hook = which("nvidia-container-runtime-hook") or which("nvidia-container-cli")
        if "nvidia" in engine.runtimes or hook:
            how = "nvidia runtime registered" if "nvidia" in engine.runtimes else f"toolkit hook {hook}"
            return GpuSupport(True, "nvidia-toolkit", f"NVIDIA container toolkit ({how}): device requests for 'gpu'")
        return GpuSupport(False, "none", "Docker without the NVIDIA container toolkit",
                          "install nvidia-container-toolkit, then `sudo nvidia-ctk runtime configure --runtime=docker "
                          "&& sudo systemctl restart docker`")
    specs = cdi_nvidia_specs(cdi_dirs)
    if not specs:
        return GpuSupport(False, "none", "Podman without a CDI specification for NVIDIA GPUs",
                          "install nvidia-container-toolkit, then `sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`")
    if _version_tuple(engine.version) < PODMAN_CDI_API:
        return GpuSupport(False, "none",
                          f"CDI spec {specs[0]} found, but Podman {engine.version}'s Docker-compatible API ignores "
                          "device requests (CDI through the API needs Podman >= 5.4)",
                          "upgrade Podman to 5.4 or newer, or use Docker with the NVIDIA container toolkit")
    return GpuSupport(True, "cdi", f"CDI devices nvidia.com/gpu from {specs[0]}")


def device_requests(engine_kind: str, mechanism: str, indices: list[int] | None) -> list[Any]:
    """The ``device_requests`` that give a container the GPUs ``indices`` (None: all; []: none)."""
    if indices == []:
        return []
    from docker.types import DeviceRequest

    if mechanism == "cdi" or engine_kind == "podman":
        ids = ["nvidia.com/gpu=all"] if indices is None else [f"nvidia.com/gpu={i}" for i in indices]
        return [DeviceRequest(driver="cdi", device_ids=ids)]
    caps = [["gpu", "compute", "utility"]]
    if indices is None:
        return [DeviceRequest(count=-1, capabilities=caps)]
    return [DeviceRequest(device_ids=[str(i) for i in indices], capabilities=caps)]


def host_gpus() -> list[str]:
    """Names of the NVIDIA GPUs NVML sees on this host ([] without a driver or GPU)."""
    try:
        with nvml_session() as nv:
            return [text(nv.nvmlDeviceGetName(nv.nvmlDeviceGetHandleByIndex(i))) for i in range(nv.nvmlDeviceGetCount())]
    except Exception:  # no NVML (NVMLError from the session) or a GPU that cannot be read: no GPUs to offer
        return []


def engine_with_gpu() -> bool:
    """True when an engine answers, can attach GPUs, and this host has one: `--backend auto` picks containers."""
    if not host_gpus():
        return False
    try:
        engine = find_engine()
    except EngineError:
        return False
    return gpu_support(engine).ok
