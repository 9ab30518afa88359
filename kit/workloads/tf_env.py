"""TensorFlow/Keras setup, TF32, synchronisation, out-of-memory test and version report (inside the image).

``configure`` must run before TensorFlow places any op: device visibility and
memory growth cannot be changed afterwards. It never falls back to the CPU in
silence: see :mod:`kit.workloads.device` for the rule and the error it raises.
"""

from __future__ import annotations

import os
from typing import Any, TypedDict, cast

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# TensorFlow enables its oneDNN CPU kernels by default only on CPUs with VNNI/BF16/AMX features; on an
# AVX2-only CPU it falls back to Eigen (LeNet inference 4.4x slower on a Zen 2 EPYC) while PyTorch uses oneDNN
# everywhere, so the TF/PT ratio would depend on the host's CPU generation. Pinned on, recorded per trial.
# TensorFlow reads the variable once, when it is imported: the harness sets it before importing any workload
# (a workload that imports keras first would otherwise miss this line), and ``configure`` checks it took.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

import tensorflow as tf

from kit.workloads import cuda_driver
from kit.workloads import device as devmod
from kit.workloads.common import DeviceUnavailable, oom_text


class _Configured(TypedDict, total=False):
    """What :func:`configure` decided in this trial process, for :func:`tf_env` (one trial per process)."""

    driver: cuda_driver.DriverInfo | None
    tf32: devmod.Tf32Json


_STATE: _Configured = {}  # what configure decided: the driver view and the TF32 record, for tf_env


def build_cuda() -> str | None:
    """The CUDA this TensorFlow was built for (None: a CPU-only build)."""
    try:
        info = dict(tf.sysconfig.get_build_info())
    except Exception:
        return None
    return info.get("cuda_version") if info.get("is_cuda_build", True) else None


def configure(want: str, threads: int | None, gpu_uuids: list[str] | None = None, tf32: str = "native",
              gpu_indices: Any = None) -> str:
    """Pick the device (``auto``/``cpu``/``gpu``), set TF32 and threads; return the TF device name.

    ``gpu`` is GPU:0 or DeviceUnavailable with cause and fix; ``auto`` is the
    GPU whenever the CUDA driver lists one for this process, the CPU only when
    it lists none. ``gpu_uuids``: the GPUs the kit gave the trial (GPU:0 must
    be one of them).
    """
    driver = cuda_driver.probe() if want != "cpu" else None
    _STATE["driver"] = driver
    gpus = tf.config.list_physical_devices("GPU") if want != "cpu" else []
    if want == "cpu" or (driver is not None and devmod.decide(want, driver) == "cpu" and not gpus):
        tf.config.set_visible_devices([], "GPU")
        device = "/CPU:0"
    elif not gpus:
        assert driver is not None
        raise devmod.unusable("tensorflow", tf.__version__, build_cuda(), driver, want,
                              "tf.config.list_physical_devices('GPU') is empty (TensorFlow found no usable CUDA "
                              "device: missing CUDA/cuDNN libraries, a CPU-only build, or a driver too old)")
    else:
        tf.config.set_visible_devices(gpus[0], "GPU")
        # Grow GPU memory on demand so NVML's memory readings mean something.
        tf.config.experimental.set_memory_growth(gpus[0], True)
        device = "/GPU:0"
        devmod.check_uuid(gpu_uuids, gpu_uuid(0), "tensorflow", gpu_indices)
    _STATE["tf32"] = apply_tf32(tf32, device.startswith("/GPU"))
    if device == "/CPU:0":
        check_cpu_kernels()
    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(int(threads))
    return device


def setup(req: devmod.JsonTable, threads: int | None = None, want: str | None = None) -> str:
    """``configure`` from a trial request: its device, GPU UUIDs, TF32 mode and threads."""
    return configure(want or devmod.requested(req), threads if threads is not None else cast(int | None, req.get("threads")),
                     gpu_uuids=devmod.expected_uuids(req), tf32=devmod.tf32_mode(req),
                     gpu_indices=req.get("gpu_indices"))


def apply_tf32(mode: str, on_gpu: bool) -> devmod.Tf32Json:
    """Set TF32 for float32 matmuls and convolutions (one TensorFlow switch for both); native = TF's default, on."""
    if mode not in devmod.TF32_MODES:
        raise ValueError(f"tf32 mode {mode!r}")
    if mode != "native":
        tf.config.experimental.enable_tensor_float_32_execution(mode == "on")
    on = bool(tf.config.experimental.tensor_float_32_execution_enabled())
    return devmod.tf32_record(mode, on, on, on_gpu)


def gpu_uuid(ordinal: int = 0) -> str | None:
    """The UUID of visible GPU ``ordinal`` from the CUDA driver (TensorFlow does not report one)."""
    driver = _STATE.get("driver") or cuda_driver.probe()
    _STATE["driver"] = driver
    return driver.devices[ordinal].uuid if ordinal < driver.count else None


def device_sync() -> None:
    """Wait until every device has finished its queued work."""
    sync = getattr(getattr(tf.test, "experimental", None), "sync_devices", None)
    if sync is not None:
        sync()


def _is_gpu(device: str) -> bool:
    """Whether a TF device name ("/GPU:0", "/job:localhost/replica:0/task:0/device:GPU:0") is a GPU."""
    return device.rsplit("/", 1)[-1].upper().replace("DEVICE:", "").startswith("GPU")


def tf_env(device: str, precision: str | None = "fp32", conv_dominant: bool = True,
           devices_used: list[str] | None = None) -> dict[str, Any]:
    """Versions, device and precision as seen from inside the trial process (the contract's env fields).

    ``device`` may be a short ("/GPU:0") or a full TF device name; the kind is
    derived from it, never taken from the name itself.
    """
    import keras

    info = dict(tf.sysconfig.get_build_info())
    gpu = _is_gpu(device)
    tf32 = _STATE.get("tf32") or apply_tf32("native", gpu)
    if not gpu:
        tf32 = devmod.tf32_record(tf32["mode"], None, None, False)
    name, cc, uuids = "cpu", None, None
    if gpu:
        vis = tf.config.get_visible_devices("GPU")
        details = tf.config.experimental.get_device_details(vis[0]) if vis else {}
        name = details.get("device_name", "gpu")
        cc = tuple(details["compute_capability"]) if details.get("compute_capability") else None
        n = len(devices_used) if devices_used else 1
        uuids = [u for u in (gpu_uuid(i) for i in range(n)) if u]
    env: dict[str, Any] = {
        "framework": "tensorflow",
        "framework_version": tf.__version__,
        "keras_version": keras.__version__,
        "cuda": info.get("cuda_version"),
        "cudnn": info.get("cudnn_version"),
        "device": device,
        "threads": tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count(),
        "cpu_kernels": cpu_kernels(),
        "deterministic": op_determinism(),
        **devmod.device_fields(
            "gpu" if gpu else "cpu", name, gpu_uuid(0) if gpu else None, uuids, tf32,
            None if precision is None else (devmod.precision_used(precision, tf32, cc, conv_dominant)
                                            if gpu else precision)),
    }
    if gpu:
        env["compute_capability"] = list(cc) if cc else None
        env["gpu_mem_peak_bytes"] = int(tf.config.experimental.get_memory_info("GPU:0")["peak"])
    return env


class CpuKernels(TypedDict):
    """``env["cpu_kernels"]`` of a TensorFlow trial (the analysis compares it across trials and hosts)."""

    onednn: bool | None
    inter_op_threads: int | None
    tf_enable_onednn_opts: str | None
    onednn_max_cpu_isa: str | None


def cpu_kernels() -> CpuKernels:
    """Which CPU kernel library TensorFlow uses and the settings that choose it (recorded, compared by the analysis)."""
    try:
        from tensorflow.python.util import _pywrap_util_port

        onednn: bool | None = bool(_pywrap_util_port.IsMklEnabled())
    except Exception:  # private module moved: say unknown rather than guess
        onednn = None
    return {"onednn": onednn, "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads() or None,
            "tf_enable_onednn_opts": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
            "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA")}


def op_determinism() -> bool | None:
    """Whether deterministic kernels are on (tf.config.experimental.enable_op_determinism); None if unknown."""
    try:
        from tensorflow.python.framework import config

        return bool(config.is_op_determinism_enabled())
    except Exception:  # private module moved: say unknown rather than guess
        return None


def check_cpu_kernels() -> None:
    """Stop a CPU trial whose TensorFlow did not get the oneDNN setting asked for (measure what was asked or stop).

    TensorFlow reads TF_ENABLE_ONEDNN_OPTS once, at import: set after ``import tensorflow`` (or ``import keras``)
    it is recorded as "1" while Eigen kernels run, which on an AVX2-only CPU made TensorFlow's LeNet inference
    4.4x slower and flipped the study's finding between hosts (issue 15).
    """
    asked = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    got = cpu_kernels()["onednn"]
    if asked is None or got is None or got == (asked.strip().lower() in ("1", "true")):
        return
    raise DeviceUnavailable(
        f"TF_ENABLE_ONEDNN_OPTS={asked} but TensorFlow's oneDNN kernels are {'on' if got else 'off'}: the variable "
        "was set after TensorFlow was imported (it is read once, at import), or this TensorFlow build has no oneDNN",
        "run trials through `python -m kit.harness` (it sets the variable before importing a workload) or set "
        "TF_ENABLE_ONEDNN_OPTS before anything imports tensorflow or keras; with a build without oneDNN set "
        "TF_ENABLE_ONEDNN_OPTS=0 and compare on the threat the report raises")


def is_oom(exc: BaseException) -> bool:
    """The one out-of-memory test of every TensorFlow workload (ResourceExhausted, host allocator, any wording)."""
    return isinstance(exc, (tf.errors.ResourceExhaustedError, MemoryError)) or oom_text(exc)


def train_step(model: Any, opt: Any, loss_fn: Any, jit_compile: bool = False) -> Any:
    """One SGD/Adam/... step on a batch already on the device, as a ``tf.function`` (what ``fit`` traces).

    The workloads call it on slices of device-resident tensors in a Python
    loop, as the PyTorch builds do; ``fit`` would route every batch through a
    host-side data adapter inside the timed phase. Returns the batch loss (a
    device scalar: no read-back per step).
    """
    opt.build(model.trainable_variables)

    def step(xb: Any, yb: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return tf.function(step, jit_compile=jit_compile, reduce_retracing=True)


def reset_optimizer(opt: Any) -> None:
    """Zero the optimizer's state (iterations, moments, accumulators) but not its learning rate."""
    for v in opt.variables:
        if not v.path.endswith("learning_rate"):
            v.assign(tf.zeros_like(v))
