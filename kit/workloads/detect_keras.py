"""DLBench's Faster R-CNN (ResNet-50 FPN) on VOC2012 in Keras 3 on TensorFlow: the shared protocol.

The model is :mod:`kit.workloads.frcnn_keras`, torchvision's fasterrcnn_resnet50_fpn layer for layer (same
trainable parameter count, same resize, same losses), with Keras' own initialisers, trained from scratch.
Keras' Adam with the trial's learning rate and ``weight_decay`` (decoupled, as PyTorch's arm sets it). The
loop, data order and mAP are :mod:`kit.workloads.detect`'s. JPEGs are decoded by ``tf.io.decode_jpeg`` with
the accurate integer DCT (libjpeg-turbo's default, what torchvision.io uses: the same pixels in both arms),
before any timed phase. Runs inside the framework image.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from kit.workloads import detect
from kit.workloads.common import Markers, WorkloadError
from kit.workloads.tf_env import device_sync, is_oom, reset_optimizer, setup, tf_env
from kit.workloads.voc_map import Detections

__all__ = ["decode_jpeg", "is_oom", "run"]


def decode_jpeg(data: bytes) -> np.ndarray:
    """JPEG bytes -> (H, W, 3) uint8 with TensorFlow's decoder (accurate integer DCT)."""
    return np.asarray(tf.io.decode_jpeg(data, channels=3, dct_method="INTEGER_ACCURATE").numpy())


def _frcnn() -> Any:
    try:
        from kit.workloads import frcnn_keras
    except ImportError as exc:
        raise WorkloadError(f"the Keras Faster R-CNN (kit.workloads.frcnn_keras) cannot be imported ({exc}) | fix: "
                            "install the kit's workloads package complete, or run only the PyTorch arm") from exc
    return frcnn_keras


def run(req: dict[str, Any], data_dir: Path, markers: Markers) -> tuple[dict[str, Any], dict[str, Any]]:
    s = detect.settings(req["workload"])
    seed = int(req["seed"])
    device = setup(req)
    keras.utils.set_random_seed(seed)
    markers.sync = device_sync
    frcnn = _frcnn()
    with tf.device(device):
        data = detect.load_splits(req, data_dir, decode_jpeg)
        model = frcnn.build(num_classes=len(detect.voc.CLASSES) + 1, min_size=s.min_size, max_size=s.max_size,
                            seed=seed)
        opt = keras.optimizers.Adam(learning_rate=s.learning_rate, weight_decay=s.weight_decay or None)
        start = [v.numpy() for v in model.variables]
        if not start:
            raise WorkloadError("frcnn_keras.build returned a model without variables (not built)")

        def train_step(images: list[np.ndarray], boxes: list[np.ndarray], labels: list[np.ndarray]) -> float:
            losses = model.train_batch(images, boxes, labels, opt)
            return float(sum(float(v) for v in losses.values()))

        def detect_batch(images: list[np.ndarray]) -> list[Detections]:
            return [(np.asarray(b), np.asarray(sc), np.asarray(lab)) for b, sc, lab in model.detect(images)]

        def reset() -> None:
            # every training pass starts here: weights, batch-norm statistics and the seed generators' state
            # (model.variables), and zeroed optimizer state
            for v, a in zip(model.variables, start, strict=True):
                v.assign(a)
            reset_optimizer(opt)

        adapter = detect.Adapter(train_step, float, detect_batch, reset, device_sync, int(frcnn.param_count(model)))
        results = detect.run_protocol(req, s, data, adapter, markers)
    results["jpeg_decoder"] = f"tensorflow {tf.__version__} io.decode_jpeg (INTEGER_ACCURATE)"
    return results, tf_env(device, "fp32", conv_dominant=True)
