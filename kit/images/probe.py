"""Versions as the image reports them; runs INSIDE an image (standard library and the framework only).

    python3 -c "$(cat probe.py)" pytorch|tensorflow

prints one JSON line: Python, framework, CUDA and cuDNN versions (torch.version.cuda,
torch.backends.cudnn.version(); tf.sysconfig.get_build_info()), the user it runs as
and the GPUs the framework sees. ``kit images verify`` and the container backends
compare it with the matrix row.
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

        info = dict(tf.sysconfig.get_build_info())
        out["framework_version"] = tf.__version__
        out["cuda"] = info.get("cuda_version")
        out["cudnn"] = info.get("cudnn_version")
        out["build_info"] = {k: str(v) for k, v in info.items()}
        try:
            import keras

            out["keras_version"] = keras.__version__
        except ImportError:
            out["keras_version"] = None
        out["gpus"] = [d.name for d in tf.config.list_physical_devices("GPU")]
    else:
        raise SystemExit(f"unknown framework {framework!r}")
    import numpy

    out["numpy_version"] = numpy.__version__
    return out


if __name__ == "__main__":
    print(json.dumps(probe(sys.argv[1])), flush=True)
