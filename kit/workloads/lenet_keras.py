"""LeNet-5 on MNIST in Keras 3 on TensorFlow (runs inside the framework image).

The same loop as the PyTorch build: a ``tf.function`` training step (what
``Model.fit`` traces) called on slices of tensors resident on the device, with
the same batches in the same order, and a ``tf.function`` forward pass per
inference batch. ``fit``/``predict`` are not used: they route every batch
through a host-side data adapter inside the timed phase, which the PyTorch
build does not do (issue 13).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from kit.workloads import lenet
from kit.workloads.common import Markers, data_order, load_mnist
from kit.workloads.device import min_phase_s, pass_results, repeat_inference, repeat_training
from kit.workloads.tf_env import device_sync, is_oom, reset_optimizer, setup, tf_env, train_step

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
    """One trial: untimed warm-up, the timed training run, the timed inference pass.

    With ``min_phase_s`` each timed phase repeats its unit until it lasts that
    long, as in the PyTorch build: the whole training run (each pass from the
    shared initial weights with zeroed optimizer state) and the inference
    pass; the times stay per pass and every pass's time is kept.
    """
    wl, ds, seed = req["workload"], req["dataset"], int(req["seed"])
    device = setup(req)
    keras.utils.set_random_seed(seed)
    markers.sync = device_sync

    x_tr, y_tr, x_te, y_te = load_mnist(data_dir, ds["source"], ds.get("train_size"), ds.get("test_size"))
    norm = str(wl.get("input_norm", "none"))
    x_tr, x_te = lenet.normalise(x_tr, norm), lenet.normalise(x_te, norm)
    bs, epochs = int(wl["batch_size"]), int(wl["epochs"])
    steps = int(wl["steps_per_epoch"] or len(x_tr) // bs)  # None: every full batch
    ibs = int(wl["infer_batch_size"])
    order = data_order(len(x_tr), seed)[: steps * bs]
    jit = bool(wl.get("tf_jit_compile", False))
    with tf.device(device):
        xt = tf.constant(x_tr[order][..., None])
        yt = tf.constant(y_tr[order])
        xe = tf.constant(x_te[..., None])

    init = keras_weights(lenet.initial_weights(seed))
    with tf.device(device):
        model = build(seed)
        opt = keras.optimizers.SGD(learning_rate=float(wl["learning_rate"]), momentum=float(wl["momentum"]))
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        step = train_step(model, opt, loss_fn, jit)
        predict_step = tf.function(lambda xb: tf.argmax(model(xb, training=False), axis=1), jit_compile=jit,
                                   reduce_retracing=True)

        def train(n_steps: int, n_epochs: int) -> float:
            """Train on device-resident slices; the mean loss of the last epoch (read back once)."""
            total = tf.zeros(())
            for _ in range(n_epochs):
                total = tf.zeros(())
                for i in range(n_steps):
                    total += step(xt[i * bs : (i + 1) * bs], yt[i * bs : (i + 1) * bs])
            return float(total.numpy()) / max(n_steps, 1)

        def infer() -> np.ndarray:
            preds = [predict_step(xe[i : i + ibs]) for i in range(0, len(x_te), ibs)]
            return tf.concat(preds, 0).numpy()

        def reset() -> None:
            """The shared initial weights and zeroed optimizer state (the traced functions are kept)."""
            model.set_weights(init)
            reset_optimizer(opt)

        warm = int(wl["warmup_steps"])
        if warm > 0:
            # Same warm-up as the PyTorch build: trace and run the train and
            # predict functions once, then back to the initial state.
            markers.start("warmup")
            train(min(warm, steps), 1)
            infer()
            markers.end("warmup")
            reset()

        # the loss of the shared initial weights on the first batch (untimed), as in the PyTorch build
        initial_loss = float(loss_fn(yt[:bs], model(xt[:bs], training=False)).numpy())
        min_s = min_phase_s(req)
        markers.start("train")
        trained = repeat_training(lambda: train(steps, epochs), reset, min_s, device_sync)
        train_s = trained.per_pass_s(markers.end("train", images=steps * bs * epochs * trained.passes,
                                                 passes=trained.passes))
        markers.start("infer")
        inferred = repeat_inference(infer, min_s, device_sync)
        infer_s = inferred.per_pass_s(markers.end("infer", images=len(x_te) * inferred.passes,
                                                  passes=inferred.passes))
    final_loss, pred = trained.result, inferred.result

    results: dict[str, Any] = {
        "train_time_s": train_s,
        "infer_time_s": infer_s,
        "train_loss": final_loss,
        "train_loss_initial": initial_loss,
        "test_accuracy": float((pred == y_te).mean()),
        "train_images": steps * bs * epochs,
        "test_images": len(x_te),
        "train_throughput_ips": steps * bs * epochs / train_s,
        "infer_throughput_ips": len(x_te) / infer_s,
        "param_count": int(model.count_params()),
    }
    results.update(pass_results(trained, inferred))
    return results, tf_env(device, "fp32", conv_dominant=True)
