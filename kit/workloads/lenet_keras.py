"""LeNet-5 on MNIST in Keras 3 on TensorFlow (runs inside the framework image).

Idiomatic Keras: ``fit`` and ``predict`` on device-resident tensors, with the
same batches in the same order as the PyTorch build.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from kit.workloads import lenet
from kit.workloads.common import Markers, data_order, load_mnist
from kit.workloads.tf_env import configure, device_sync, is_oom, tf_env

__all__ = ["build", "is_oom", "keras_weights", "run"]


def keras_weights(weights: dict[str, tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray]:
    """Flatten the shared weights into ``Model.set_weights`` order."""
    return [a for name, _, _ in lenet.LAYERS for a in weights[name]]


def build(seed: int) -> keras.Model:
    """The LeNet-5 of ``lenet.LAYERS`` with the shared initial weights."""
    layers: list[Any] = [keras.Input((28, 28, 1))]
    for name, kind, p in lenet.LAYERS:
        if kind == "conv":
            _, cout, k, pad = p
            layers.append(keras.layers.Conv2D(cout, k, padding="same" if pad else "valid", activation="relu", name=name))
            if name != "c5":
                layers.append(keras.layers.MaxPooling2D(2))
        else:
            if name == "f6":
                layers.append(keras.layers.Flatten())
            layers.append(keras.layers.Dense(p[1], activation=None if name == "out" else "relu", name=name))
    model = keras.Sequential(layers)
    model.set_weights(keras_weights(lenet.initial_weights(seed)))
    return model


def run(req: dict[str, Any], data_dir: Path, markers: Markers) -> tuple[dict[str, Any], dict[str, Any]]:
    """One trial: untimed warm-up, one timed training run, one timed inference."""
    wl, ds, seed = req["workload"], req["dataset"], int(req["seed"])
    device = configure(req.get("device", "auto"), req.get("threads"))
    keras.utils.set_random_seed(seed)
    markers.sync = device_sync

    x_tr, y_tr, x_te, y_te = load_mnist(data_dir, ds["source"], ds.get("train_size"), ds.get("test_size"))
    bs, epochs = int(wl["batch_size"]), int(wl["epochs"])
    steps = int(wl["steps_per_epoch"] or len(x_tr) // bs)  # None: every full batch
    ibs = int(wl["infer_batch_size"])
    order = data_order(len(x_tr), seed)[: steps * bs]
    with tf.device(device):
        xt = tf.constant(x_tr[order][..., None])
        yt = tf.constant(y_tr[order])
        xe = tf.constant(x_te[..., None])

    init = keras_weights(lenet.initial_weights(seed))
    with tf.device(device):
        model = build(seed)
        model.compile(
            optimizer=keras.optimizers.SGD(learning_rate=float(wl["learning_rate"]), momentum=float(wl["momentum"])),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            jit_compile=bool(wl.get("tf_jit_compile", False)),
        )

        warm = int(wl["warmup_steps"])
        if warm > 0:
            # Same warm-up as the PyTorch build: trace and run the train and
            # predict functions once, then restore the shared initial weights
            # and zero the optimizer state (the traced functions are kept).
            markers.start("warmup")
            n = min(warm, steps) * bs
            model.fit(xt[:n], yt[:n], batch_size=bs, epochs=1, shuffle=False, verbose=0)
            model.predict(xe, batch_size=ibs, verbose=0)
            markers.end("warmup")
            model.set_weights(init)
            opt = model.optimizer
            opt.iterations.assign(0)
            for slot in getattr(opt, "momentums", []):  # SGD's only state
                slot.assign(tf.zeros_like(slot))

        markers.start("train")
        hist = model.fit(xt, yt, batch_size=bs, epochs=epochs, shuffle=False, verbose=0)
        train_s = markers.end("train", images=steps * bs * epochs)
        markers.start("infer")
        pred = np.asarray(model.predict(xe, batch_size=ibs, verbose=0)).argmax(axis=1)
        infer_s = markers.end("infer", images=len(x_te))

    results = {
        "train_time_s": train_s,
        "infer_time_s": infer_s,
        "train_loss": float(hist.history["loss"][-1]),
        "test_accuracy": float((pred == y_te).mean()),
        "train_images": steps * bs * epochs,
        "test_images": len(x_te),
        "train_throughput_ips": steps * bs * epochs / train_s,
        "infer_throughput_ips": len(x_te) / infer_s,
        "param_count": int(model.count_params()),
    }
    return results, tf_env(device)
