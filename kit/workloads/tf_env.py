"""TensorFlow/Keras setup, synchronisation and version report (inside the image).

``configure`` must run before TensorFlow places any op: device visibility and
memory growth cannot be changed afterwards.
"""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf


def configure(want: str, threads: int | None) -> str:
    """Pick the device (``auto``/``cpu``/``gpu``) and return its TF name."""
    gpus = tf.config.list_physical_devices("GPU")
    if want == "cpu" or not gpus:
        if want == "gpu":
            raise RuntimeError("the trial asks for a GPU but TensorFlow lists none")
        tf.config.set_visible_devices([], "GPU")
        device = "/CPU:0"
    else:
        tf.config.set_visible_devices(gpus[0], "GPU")
        # Grow GPU memory on demand so NVML's memory readings mean something.
        tf.config.experimental.set_memory_growth(gpus[0], True)
        device = "/GPU:0"
    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(int(threads))
    return device


def device_sync() -> None:
    """Wait until every device has finished its queued work."""
    sync = getattr(getattr(tf.test, "experimental", None), "sync_devices", None)
    if sync is not None:
        sync()


def tf_env(device: str) -> dict[str, Any]:
    """Versions and device as seen from inside the trial process."""
    import keras

    info = dict(tf.sysconfig.get_build_info())
    env: dict[str, Any] = {
        "framework": "tensorflow",
        "framework_version": tf.__version__,
        "keras_version": keras.__version__,
        "cuda": info.get("cuda_version"),
        "cudnn": info.get("cudnn_version"),
        "device": device,
        "device_name": "cpu",
        "threads": tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count(),
    }
    if device.startswith("/GPU"):
        gpu = tf.config.get_visible_devices("GPU")[0]
        env["device_name"] = tf.config.experimental.get_device_details(gpu).get("device_name", "gpu")
        env["gpu_mem_peak_bytes"] = int(tf.config.experimental.get_memory_info("GPU:0")["peak"])
    return env


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, tf.errors.ResourceExhaustedError) or "out of memory" in str(exc).lower()
