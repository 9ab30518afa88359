"""Which device a trial computes on, in which precision, and what its result records (framework-neutral).

Standard library only (runs inside the image). The framework modules
``torch_env`` and ``tf_env`` ask this module three things:

- :func:`decide`: ``"gpu"`` or ``"cpu"`` for the request. ``cpu`` is the CPU,
  ``gpu`` a GPU or an error, and the legacy ``auto`` a GPU whenever the CUDA
  driver lists one for this process (then failing like ``gpu`` if the
  framework cannot use it); the CPU only when the driver sees none. The
  framework's own view (``torch.cuda.is_available()``, TensorFlow's GPU list)
  never decides: a framework that cannot reach an existing GPU is exactly the
  case that used to fall back to the CPU in silence.
- :func:`unusable`: the :class:`~kit.workloads.common.DeviceUnavailable` error
  with the cause (framework version, the CUDA it was built for, the CUDA the
  driver supports) and the fix (``nvidia-smi``, the wheel or image row that fits).
- :func:`check_uuid`: the GPU seen inside is one of those the kit gave the trial.

and build the contract's ``env`` fields (:func:`device_fields`, :func:`precision_used`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, NotRequired, TypedDict, TypeVar, cast

from kit.workloads import cuda_driver
from kit.workloads.common import DeviceUnavailable, WorkloadError

TF32_MODES = ("native", "off", "on")
DEVICE_REQUESTS = ("auto", "cpu", "gpu")
T = TypeVar("T")

# request.json as the trial process reads it: JSON (the container side imports nothing of the host, so this is the
# same recursive type as kit.records.JsonValue, stated again here). A value is checked where it is used.
JsonValue = str | int | float | bool | None | list["JsonValue"] | dict[str, "JsonValue"]
JsonTable = dict[str, JsonValue]


class Tf32Json(TypedDict):
    """The contract's ``env["tf32"]``: the requested mode and the effective flags (None on the CPU)."""

    mode: str
    matmul: bool | None
    conv: bool | None


class CudaDriverJson(TypedDict):
    """``env["cuda_driver"]``: what the CUDA driver told the trial process (kit.workloads.cuda_driver)."""

    cuda_version: str | None
    driver_version: int | None
    devices: int
    reason: str | None


class DeviceEnv(TypedDict):
    """The env fields every workload reports (contract of issue 13)."""

    device_kind: str  # cpu | gpu, never a device name
    device_name: str
    gpu_uuid: str | None
    gpu_uuids: list[str]
    tf32: Tf32Json
    precision: str | None
    cuda_driver: NotRequired[CudaDriverJson]


class DatasetRequest(TypedDict, total=False):
    """The request's ``dataset`` table (the spec's [dataset], resolved by the host): what the loaders read of it."""

    name: str
    source: str
    train_size: int | None
    test_size: int | None


class PassResults(TypedDict):
    """The results every calibrated workload adds: passes per phase and every pass's seconds."""

    infer_passes: int
    infer_pass_times_s: list[float]
    train_passes: NotRequired[int]
    train_pass_times_s: NotRequired[list[float]]


def _table(v: JsonValue) -> JsonTable:
    """A table of the request (``workload``), or an empty one where the request has none."""
    return v if isinstance(v, dict) else {}


def requested(req: JsonTable) -> str:
    """The trial's device request: the runner's resolved ``device``, else the workload's, else ``auto``."""
    want = req.get("device") or _table(req.get("workload")).get("device") or "auto"
    if want not in DEVICE_REQUESTS:
        raise WorkloadError(f"device {want!r} is not one of {', '.join(DEVICE_REQUESTS)}")
    return str(want)


def expected_uuids(req: JsonTable) -> list[str]:
    """The NVML UUIDs of the GPUs the kit gave this trial ([] when unknown)."""
    given = req.get("gpu_uuids")
    return [str(u) for u in given if u] if isinstance(given, list) else []


def tf32_mode(req: JsonTable) -> str:
    mode = str(_table(req.get("workload")).get("tf32") or "native")
    if mode not in TF32_MODES:
        raise WorkloadError(f"workload.tf32 {mode!r} is not one of {', '.join(TF32_MODES)}")
    return mode


def min_phase_s(req: JsonTable) -> float:
    val = float(cast(float, _table(req.get("workload")).get("min_phase_s") or 0.0))
    if not math.isfinite(val) or val < 0:
        raise WorkloadError(f"workload.min_phase_s {val!r} is not a finite number >= 0")
    return val


def decide(want: str, driver: cuda_driver.DriverInfo) -> str:
    """``"gpu"`` or ``"cpu"``: ``auto`` is the GPU whenever the CUDA driver lists a device for this process."""
    if want == "cpu":
        return "cpu"
    if want == "gpu":
        return "gpu"
    return "gpu" if driver.count > 0 else "cpu"


def min_driver(cuda: str | None) -> str:
    """The NVIDIA driver a wheel built for ``cuda`` needs (CUDA minor-version compatibility)."""
    try:
        major = int(str(cuda).split(".")[0])
    except ValueError:
        return "a driver for that CUDA"
    return {13: ">= 580", 12: ">= 525 (CUDA 12.8 features >= 570)", 11: ">= 450.80"}.get(major, f"one for CUDA {major}")


def _version_tuple(v: str | None) -> tuple[int, ...]:
    out = []
    for part in str(v or "").split(".")[:2]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def unusable(framework: str, version: str, built_cuda: str | None, driver: cuda_driver.DriverInfo, want: str,
             detail: str) -> DeviceUnavailable:
    """The error of a GPU request the framework cannot serve: what is wrong and which wheel or image row fits."""
    drv = driver.cuda_version
    seen = ", ".join(f"{d.ordinal}: {d.name or '?'}" for d in driver.devices) or "none"
    asked = "device = gpu" if want == "gpu" else "device = auto and the CUDA driver lists a GPU"
    cause = (f"the trial asks for a GPU ({asked}; driver devices: {seen}; driver supports CUDA {drv or 'unknown'}"
             f"{'' if driver.available else ' - ' + driver.reason}) but {framework} {version}, built for "
             f"CUDA {built_cuda or 'none (a CPU-only build)'}, cannot use it: {detail}")
    steps = ["run `nvidia-smi` on the host: its 'CUDA Version' is the newest CUDA the driver supports"]
    if built_cuda is None:
        if framework == "pytorch":
            steps.append("install a CUDA build of torch (pip install torch --index-url "
                         "https://download.pytorch.org/whl/cu126 or cu128) or use an images/matrix.toml CUDA row")
        else:
            steps.append("install tensorflow[and-cuda] (CUDA 12 wheels, driver >= 525) instead of tensorflow / "
                         "tensorflow-cpu, or use an images/matrix.toml CUDA row")
    elif drv is not None and _version_tuple(built_cuda)[:1] > _version_tuple(drv)[:1]:
        steps.append(f"this {framework} wheel is built for CUDA {built_cuda} and needs a driver {min_driver(built_cuda)}; "
                     f"this driver supports CUDA {drv}: upgrade the driver, or install a build for CUDA <= {drv}")
        if framework == "pytorch":
            steps.append("e.g. pip install torch==<version> --index-url https://download.pytorch.org/whl/cu126 "
                         "(cu126/cu128 wheels run on CUDA 12 drivers, >= 525; a cu130 wheel needs a CUDA 13 driver, >= 580)")
        steps.append(f"or run the arm in the images/matrix.toml row whose cuda is <= {drv}")
    else:
        if drv is not None and _version_tuple(built_cuda) > _version_tuple(drv):
            steps.append(f"the wheel's CUDA {built_cuda} is newer than the driver's {drv}: CUDA minor-version "
                         f"compatibility usually covers it, but kernels JIT-compiled from PTX need a driver that "
                         f"supports CUDA {built_cuda}; try a build for CUDA <= {drv} or a newer driver")
        steps.append(f"the wheel's CUDA {built_cuda} and the driver's CUDA {drv or '?'}: check that the framework "
                     "finds its CUDA libraries (TensorFlow: pip install tensorflow[and-cuda]; LD_LIBRARY_PATH), "
                     "that CUDA_VISIBLE_DEVICES names the trial's GPU, and the framework's own log lines")
    if want == "auto":
        steps.append("to measure the CPU on purpose set workload.device = \"cpu\" (or container.gpus = \"none\")")
    return DeviceUnavailable(cause, "; ".join(steps))


def normalise_uuid(u: Any) -> str | None:
    """A GPU UUID in NVML's spelling ("GPU-" + 8-4-4-4-12 lowercase hex), or None."""
    if u is None:
        return None
    s = str(u).strip().lower()
    if not s:
        return None
    if s.startswith("gpu-") or s.startswith("mig-"):
        return s[:3].upper() + s[3:]
    hexs = s.replace("-", "")
    if len(hexs) == 32 and all(c in "0123456789abcdef" for c in hexs):
        return cuda_driver.format_uuid(bytes.fromhex(hexs))
    return s


def check_uuid(given: list[str] | None, seen: str | None, framework: str, indices: Any = None) -> None:
    """Refuse a trial that computes on a GPU other than the ones the kit gave it (``given``, and sampled)."""
    want = [normalise_uuid(u) for u in (given or []) if u]
    got = normalise_uuid(seen)
    if not want or got is None or not got.startswith("GPU-") or not all(str(w).startswith("GPU-") for w in want):
        return
    if got not in want:
        raise DeviceUnavailable(
            f"{framework} computes on GPU {got}, but the kit gave this trial {', '.join(map(str, want))} "
            f"(indices {indices}): its telemetry would describe another GPU",
            "set CUDA_DEVICE_ORDER=PCI_BUS_ID with CUDA_VISIBLE_DEVICES (or the container's device_ids) to the "
            "trial's GPU indices; `nvidia-smi -L` lists indices and UUIDs")


def tf32_record(mode: str, matmul: bool | None, conv: bool | None, on_gpu: bool) -> Tf32Json:
    """The contract's env["tf32"]: the requested mode and the effective flags (None on the CPU)."""
    return {"mode": mode, "matmul": bool(matmul) if on_gpu and matmul is not None else None,
            "conv": bool(conv) if on_gpu and conv is not None else None}


def precision_used(base: str, tf32: Tf32Json, compute_capability: tuple[int, int] | None,
                   conv_dominant: bool) -> str:
    """The compute precision actually used: ``tf32`` for an fp32 run whose dominant op class runs in TF32.

    TF32 exists from Ampere (compute capability 8.0) on; ``conv_dominant``
    says whether convolutions (else matmuls) carry the model's FLOPs.
    """
    if base != "fp32":
        return base
    flag = tf32.get("conv") if conv_dominant else tf32.get("matmul")
    if not flag:
        return "fp32"
    if compute_capability is not None and compute_capability < (8, 0):
        return "fp32"
    return "tf32"


def device_fields(kind: str, name: str | None, uuid: str | None, uuids: list[str] | None, tf32: Tf32Json,
                  precision: str | None, driver: cuda_driver.DriverInfo | None = None) -> DeviceEnv:
    """The env fields every workload reports (contract of issue 13)."""
    if kind not in ("cpu", "gpu"):
        raise ValueError(f"device kind {kind!r}: 'cpu' or 'gpu', never a device name")
    u = normalise_uuid(uuid) if kind == "gpu" else None
    out: DeviceEnv = {
        "device_kind": kind,
        "device_name": name or kind,
        "gpu_uuid": u,
        "gpu_uuids": [x for x in (normalise_uuid(v) for v in (uuids if uuids is not None else [u])) if x]
        if kind == "gpu" else [],
        "tf32": tf32,
        "precision": precision,
    }
    if driver is not None:
        out["cuda_driver"] = {"cuda_version": driver.cuda_version, "driver_version": driver.driver_version,
                              "devices": driver.count, "reason": driver.reason or None}
    return out


@dataclass(frozen=True)
class PhasePasses(Generic[T]):
    """What a calibrated phase ran: the last pass's result, the time of every pass and of every reset.

    ``pass_times_s`` holds each pass timed on its own (``perf_counter`` after a
    device sync on both sides); ``reset_times_s`` the resets between passes
    (training only: one fewer than the passes); ``phase_s`` the whole loop as
    the helper saw it.
    """

    result: T
    pass_times_s: tuple[float, ...]
    reset_times_s: tuple[float, ...]
    phase_s: float

    @property
    def passes(self) -> int:
        return len(self.pass_times_s)

    def per_pass_s(self, phase_s: float) -> float:
        """The trial's time of one pass: the phase's seconds (the markers') less the resets, over the passes.

        The mean, not the median or the fastest pass, is the trial's value: its
        reciprocal is the throughput over the window the telemetry samples (the
        whole phase but the cheap resets), so time, utilisation, power and
        energy of one trial describe the same work. It is the mean of
        ``pass_times_s`` up to the clock reads and syncs between passes, and
        with one pass it is the phase's duration, as before calibration. The
        per-pass list stays in the trial record for any other statistic.
        """
        return (phase_s - sum(self.reset_times_s)) / self.passes


def _repeat(run_pass: Callable[[], T], min_s: float, sync: Callable[[], None], reset: Callable[[], None] | None,
            clock: Callable[[], float]) -> PhasePasses[T]:
    t_phase = clock()
    times: list[float] = []
    resets: list[float] = []
    while True:
        sync()
        t0 = clock()
        result = run_pass()
        sync()
        times.append(clock() - t0)
        if clock() - t_phase >= min_s:
            return PhasePasses(result, tuple(times), tuple(resets), clock() - t_phase)
        if reset is not None:
            t0 = clock()
            reset()
            sync()
            resets.append(clock() - t0)


def repeat_inference(run_pass: Callable[[], T], min_s: float, sync: Callable[[], None],
                     clock: Callable[[], float] = time.perf_counter) -> PhasePasses[T]:
    """Run the full inference pass until the phase lasts ``min_s`` (at least once), timing every pass.

    Inference does not change the model, so the passes follow each other with
    nothing in between and every pass computes the same predictions.
    """
    return _repeat(run_pass, min_s, sync, None, clock)


def repeat_training(run_pass: Callable[[], T], reset: Callable[[], None], min_s: float, sync: Callable[[], None],
                    clock: Callable[[], float] = time.perf_counter) -> PhasePasses[T]:
    """Run the protocol's whole training run until the phase lasts ``min_s`` (at least once), timing every pass.

    A pass is the full training run of the protocol (every step of every
    epoch). ``reset`` runs before every pass after the first: it restores the
    shared initial weights and a fresh optimizer state (and whatever random
    state the run draws from), so every pass is the same protocol run, and the
    model after the phase, with the loss returned (the last pass's), is the
    result of one protocol run, not of ``passes`` runs in a row. The reset
    lies inside the phase (the telemetry sees it) but outside every pass's
    time; it must be cheap (copies of the initial weights kept in memory).
    With ``min_s`` 0 this is exactly one pass and no reset: the uncalibrated
    protocol.
    """
    return _repeat(run_pass, min_s, sync, reset, clock)


@dataclass
class EpochLog:
    """One training run of an epoch-wise protocol, epoch by epoch: what one training pass returns.

    Seconds and mean loss of every epoch, the test accuracy after it (None
    where not measured) and the seconds of those accuracy checks, which are
    not training time.
    """

    train_s: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    acc: list[float | None] = field(default_factory=list)
    eval_s: float = 0.0


def pass_results(trained: PhasePasses[Any] | None, inferred: PhasePasses[Any],
                 train_excluded_s: list[float] | None = None) -> PassResults:
    """The results every calibrated workload adds: passes per phase and every pass's seconds.

    ``train_excluded_s``: per training pass, seconds inside it that are not
    training (accuracy checks between epochs), taken off that pass's time.
    """
    out: PassResults = {"infer_passes": inferred.passes, "infer_pass_times_s": list(inferred.pass_times_s)}
    if trained is not None:
        less = train_excluded_s or [0.0] * trained.passes
        out["train_passes"] = trained.passes
        out["train_pass_times_s"] = [t - x for t, x in zip(trained.pass_times_s, less, strict=True)]
    return out


def repeat_phase(run_pass: Callable[[], Any], min_s: float, sync: Callable[[], None]) -> tuple[Any, int, float]:
    """Run ``run_pass`` until the phase lasts ``min_s`` (at least once); (result, passes, total seconds).

    The interface study folders written by earlier ``kit new study`` call;
    :func:`repeat_inference` is the same loop and also keeps every pass's time.
    """
    t0 = time.perf_counter()
    done = repeat_inference(run_pass, min_s, sync)
    return done.result, done.passes, time.perf_counter() - t0
