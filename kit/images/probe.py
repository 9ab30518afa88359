"""Versions as the image reports them; runs INSIDE an image (standard library and the framework only).

    python3 -c "$(cat probe.py)" pytorch|tensorflow [--gpu-ops] [--selftest SECONDS]

prints one JSON line: Python, framework, CUDA and cuDNN versions (torch.version.cuda,
torch.backends.cudnn.version(); tf.sysconfig.get_build_info()), the user it runs as
and the GPUs the framework sees. ``kit images verify`` and the container backends
compare it with the matrix row.

``--gpu-ops`` adds ``gpu_ops``: one real operation per framework on the first GPU,
checked against NumPy (PyTorch: a matmul on cuda:0; TensorFlow: a matmul on GPU:0
and an XLA-compiled function, ``tf.function(jit_compile=True)``, which needs ptxas
and libdevice). It also runs in paper-era images (CPython 3.6, TensorFlow 1.x, torch 1.0):
``kit.images.verify.probe_source`` sends it without annotations, and the TensorFlow part
falls back where ``get_build_info`` (2.3) and ``tf.config`` (2.1) do not exist yet. ``--selftest SECONDS`` adds ``selftest`` for ``kit selftest``: the
UUID of the GPU the framework computes on (torch's device properties or the CUDA
driver API), the framework's TF32 defaults and, for PyTorch on a GPU, a busy-wait of
SECONDS (``torch.cuda._sleep``, its cycles calibrated against CUDA events) timed the
way the harness times a phase (synchronise, then ``time.perf_counter``).
"""

from __future__ import annotations

import json
import os
import platform
import sys


def cudnn_text(v: int | None) -> str | None:
    """torch's integer cuDNN version as text: 90100 -> 9.1.0 (cuDNN 9), 8902 -> 8.9.2 (cuDNN 8)."""
    if not v:
        return None
    if v >= 90000:
        return f"{v // 10000}.{v % 10000 // 100}.{v % 100}"
    return f"{v // 1000}.{v % 1000 // 100}.{v % 100}"


def probe(framework: str) -> dict[str, object]:
    out: dict[str, object] = {"python": platform.python_version(), "framework": framework, "uid": os.getuid(),
                              "executable": sys.executable}
    if framework == "pytorch":
        import torch

        out["framework_version"] = torch.__version__
        out["cuda"] = torch.version.cuda
        try:
            out["cudnn"] = cudnn_text(torch.backends.cudnn.version())
        except Exception as exc:  # a broken cuDNN install is a finding, not a crash
            out["cudnn"] = None
            out["cudnn_error"] = f"{type(exc).__name__}: {exc}"
        out["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    elif framework == "tensorflow":
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        build_info = getattr(tf.sysconfig, "get_build_info", None)  # TensorFlow >= 2.3
        info = dict(build_info()) if build_info is not None else {}
        out["framework_version"] = tf.__version__
        out["cuda"] = info.get("cuda_version")
        out["cudnn"] = info.get("cudnn_version")
        out["build_info"] = {k: str(v) for k, v in info.items()}
        if build_info is None:  # a paper-era TensorFlow: it says only whether it was built with CUDA
            out["built_with_cuda"] = bool(tf.test.is_built_with_cuda())
            if out["built_with_cuda"]:
                out["cuda_error"] = "TensorFlow < 2.3 does not report the CUDA/cuDNN it was built with"
        try:
            import keras

            out["keras_version"] = keras.__version__
        except ImportError:
            out["keras_version"] = None
        out["gpus"] = tf_gpu_names(tf)
    else:
        raise SystemExit(f"unknown framework {framework!r}")
    import numpy

    out["numpy_version"] = numpy.__version__
    return out


def tf_gpu_names(tf: object) -> list[str]:
    """The GPUs TensorFlow sees: tf.config (>= 2.1), its experimental twin (2.0), or device_lib (1.x)."""
    config = getattr(tf, "config", None)
    for owner in (config, getattr(config, "experimental", None)):
        lister = getattr(owner, "list_physical_devices", None)
        if lister is not None:
            return [d.name for d in lister("GPU")]
    from tensorflow.python.client import device_lib

    return [d.name for d in device_lib.list_local_devices() if d.device_type == "GPU"]


def uuid_text(raw: object) -> str | None:
    """A GPU UUID as NVML prints it ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"), from 16 bytes or any text form."""
    if raw is None:
        return None
    if isinstance(raw, (bytes, bytearray)) and len(raw) == 16:
        h = bytes(raw).hex()
    else:
        text = str(raw).strip()
        for prefix in ("GPU-", "MIG-"):
            if text.upper().startswith(prefix):
                text = text[len(prefix):]
        h = text.replace("-", "").lower()
    if len(h) != 32 or any(c not in "0123456789abcdef" for c in h):
        return str(raw)
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def driver_uuid(ordinal: int = 0) -> str | None:
    """UUID of CUDA device ``ordinal`` (after CUDA_VISIBLE_DEVICES) through the driver API (libcuda, ctypes)."""
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    dev = ctypes.c_int()
    buf = (ctypes.c_char * 16)()
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGet(ctypes.byref(dev), ordinal) != 0:
        return None
    fn = getattr(cuda, "cuDeviceGetUuid_v2", None) or cuda.cuDeviceGetUuid
    if fn(buf, dev) != 0:
        return None
    return uuid_text(bytes(buf))


def _op(name: str, fn: object) -> dict[str, object]:
    try:
        detail = fn()  # type: ignore[operator]
        return {"op": name, "ok": True, "detail": detail}
    except Exception as exc:  # the failure is the finding (no GPU, no ptxas, no libdevice...)
        return {"op": name, "ok": False, "detail": f"{type(exc).__name__}: {str(exc)[-600:]}"}


def torch_gpu_ops() -> list[dict[str, object]]:
    import numpy as np
    import torch

    def matmul() -> str:
        a = np.random.RandomState(0).standard_normal((256, 256)).astype("float32")  # numpy < 1.17 too
        got = (torch.from_numpy(a).to("cuda:0") @ torch.from_numpy(a).to("cuda:0")).cpu().numpy()
        err = float(np.max(np.abs(got - a @ a)) / max(1.0, float(np.max(np.abs(a @ a)))))
        if err > 1e-2:
            raise RuntimeError(f"result differs from NumPy by {err:.3g}")
        return f"256x256 matmul on {torch.cuda.get_device_name(0)}, max rel. error {err:.2g}"

    return [_op("torch matmul cuda:0", matmul)]


def tf_gpu_ops() -> list[dict[str, object]]:
    import numpy as np
    import tensorflow as tf

    a = np.random.default_rng(0).standard_normal((256, 256)).astype("float32")
    want = float(np.maximum(a @ a, 0).sum())

    def check(got: float, what: str, device: str) -> str:
        err = abs(got - want) / max(1.0, abs(want))
        if err > 1e-2:
            raise RuntimeError(f"{what}: result differs from NumPy by {err:.3g}")
        if "GPU" not in device.upper():
            raise RuntimeError(f"{what} ran on {device}, not on a GPU")
        return f"{what} on {device}, rel. error {err:.2g}"

    def eager() -> str:
        with tf.device("/GPU:0"):
            y = tf.reduce_sum(tf.nn.relu(tf.matmul(tf.constant(a), tf.constant(a))))
        return check(float(y.numpy()), "matmul", y.device)

    def xla() -> str:
        f = tf.function(lambda x: tf.reduce_sum(tf.nn.relu(tf.matmul(x, x))), jit_compile=True)
        with tf.device("/GPU:0"):
            y = f(tf.constant(a))
        return check(float(y.numpy()), "XLA (jit_compile=True) matmul", y.device)

    return [_op("tf matmul GPU:0", eager), _op("tf XLA jit_compile GPU:0", xla)]


def torch_selftest(busy_s: float) -> dict[str, object]:
    import time

    import torch

    out: dict[str, object] = {"cuda_build": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
                              "device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
                              "tf32": {"matmul": bool(torch.backends.cuda.matmul.allow_tf32),
                                       "conv": bool(torch.backends.cudnn.allow_tf32)}}
    if not torch.cuda.is_available():
        return out
    props = torch.cuda.get_device_properties(0)
    out["device_name"] = props.name
    out["uuid"] = uuid_text(getattr(props, "uuid", None)) or driver_uuid(0)
    torch.cuda.synchronize()
    torch.cuda._sleep(1_000_000)  # wake the GPU (clocks ramp up) before calibrating
    torch.cuda.synchronize()

    def timed(cycles: int) -> tuple[float, float]:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        torch.cuda.synchronize()
        return time.perf_counter() - t0, start.elapsed_time(end) / 1000.0

    cal_cycles = 100_000_000
    _, cal_s = timed(cal_cycles)
    rate = cal_cycles / cal_s
    cycles = int(busy_s * rate)
    runs = [timed(cycles) for _ in range(3)]
    out["busy_wait"] = {"target_s": busy_s, "cycles": cycles, "cycles_per_s": rate,
                        "harness_s": [r[0] for r in runs], "event_s": [r[1] for r in runs]}
    return out


def tf_selftest() -> dict[str, object]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    info = dict(tf.sysconfig.get_build_info())
    out: dict[str, object] = {"cuda_build": info.get("cuda_version"), "device_count": len(gpus),
                              "tf32": {"matmul": bool(tf.config.experimental.tensor_float_32_execution_enabled()),
                                       "conv": bool(tf.config.experimental.tensor_float_32_execution_enabled())}}
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        out["device_name"] = details.get("device_name")
        with tf.device("/GPU:0"):  # create the context on the GPU, then ask the driver which one it is
            tf.constant(1.0) + 1.0
        out["uuid"] = driver_uuid(0)
    return out


def main(argv: list[str]) -> dict[str, object]:
    framework = argv[0]
    out = probe(framework)
    if "--gpu-ops" in argv and out.get("gpus"):
        out["gpu_ops"] = torch_gpu_ops() if framework == "pytorch" else tf_gpu_ops()
    if "--selftest" in argv:
        busy_s = float(argv[argv.index("--selftest") + 1])
        out["selftest"] = torch_selftest(busy_s) if framework == "pytorch" else tf_selftest()
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])), flush=True)
