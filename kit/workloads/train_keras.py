"""Germino's and DLBench's models in Keras 3 on TensorFlow: build from the shared tables, train per epoch, time.

The same protocol as :mod:`kit.workloads.train_torch`: untimed warm-up (then
the initial weights and zeroed optimizer state are restored), every epoch
one pass over the block's shuffled
order gathered on the device (so both frameworks see the same batches),
each step a ``tf.function`` (what ``fit`` traces) on slices of the
device-resident tensors, as the PyTorch build slices them (``fit`` would route
the batches through a host-side data adapter inside the timed phase),
optional test accuracy between epochs (subtracted from the training time),
then the timed inference, a ``tf.function`` forward pass per batch; with
``min_phase_s`` both phases repeat their unit as there (each training pass
from the initial variables, random state included, and zeroed optimizer
state). Runs inside the framework image.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from kit.workloads import nets
from kit.workloads.common import Markers, WorkloadError
from kit.workloads.device import EpochLog, min_phase_s, pass_results, repeat_inference, repeat_training
from kit.workloads.tasks import Task, epoch_order, knn_run, load_task, steps_per_epoch, trial_results
from kit.workloads.tf_env import device_sync, is_oom, reset_optimizer, setup, tf_env, train_step

__all__ = ["build", "is_oom", "run"]


def build_cnn(table: tuple[nets.Layer, ...], input_shape: tuple[int, ...]) -> keras.Model:
    layers: list[Any] = [keras.Input(input_shape)]
    for s in nets.shapes(table, input_shape):
        layer = s.layer
        if s.kind == "conv":
            layers.append(keras.layers.Conv2D(int(layer[1]), int(layer[2]), padding=str(layer[3]), name=s.name))
        elif s.kind == "pool":
            layers.append(keras.layers.MaxPooling2D(int(layer[1]), strides=int(layer[2]), padding=str(layer[3])))
        elif s.kind == "bn":
            layers.append(keras.layers.BatchNormalization(name=s.name))
        elif s.kind == "relu":
            layers.append(keras.layers.ReLU())
        elif s.kind == "dropout":
            layers.append(keras.layers.Dropout(float(layer[1])))
        elif s.kind == "flatten":
            layers.append(keras.layers.Flatten())
        elif s.kind == "dense":
            layers.append(keras.layers.Dense(int(layer[1]), name=s.name))
    return keras.Sequential(layers)


def build_text(net: nets.TextNet, seq_len: int) -> keras.Model:
    inp = keras.Input((seq_len,), dtype="int32")
    # IMDB: id 0 is padding, masked so the LSTM's last state is the last true word's
    x = keras.layers.Embedding(net.vocab, net.embed, mask_zero=not net.per_step, name="embedding")(inp)
    for i, u in enumerate(net.units):
        x = keras.layers.LSTM(u, return_sequences=net.per_step or i < len(net.units) - 1, name=f"lstm{i}")(x)
    if net.dropout:
        x = keras.layers.Dropout(net.dropout)(x)
    return keras.Model(inp, keras.layers.Dense(net.outputs, name="dense")(x))


def build(task: Task, shared: bool, seed: int) -> keras.Model:
    """The trial's model; with ``shared`` its initial weights are the numpy-drawn ones."""
    if task.text is not None:
        model = build_text(task.text, int(task.x_tr.shape[1]))
        weights = nets.text_initial_weights(task.text, seed) if shared else {}
    else:
        assert task.table is not None
        model = build_cnn(task.table, task.input_shape)
        weights = nets.initial_weights(task.table, task.input_shape, seed) if shared else {}
    for name, w in weights.items():
        model.get_layer(name).set_weights(w)
    return model


def trainable_count(model: keras.Model) -> int:
    return sum(int(np.prod(w.shape)) for w in model.trainable_weights)


def make_optimizer(wl: dict[str, Any]) -> keras.optimizers.Optimizer:
    """The spec's optimizer and learning rate, Keras' own other constants (``shared`` uses these in PyTorch too)."""
    name, lr = str(wl["optimizer"]), float(wl["learning_rate"])
    if name == "sgd":
        return keras.optimizers.SGD(learning_rate=lr, momentum=float(wl["momentum"]))
    if name == "adam":
        return keras.optimizers.Adam(learning_rate=lr)
    if name == "adadelta":
        return keras.optimizers.Adadelta(learning_rate=lr)
    raise WorkloadError(f"optimizer {name!r} is not implemented in the Keras build")


def _loss(kind: str) -> keras.losses.Loss:
    if kind == "imdb":
        return keras.losses.BinaryCrossentropy(from_logits=True)
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def run(req: dict[str, Any], data_dir: Path, markers: Markers) -> tuple[dict[str, Any], dict[str, Any]]:
    wl, seed = req["workload"], int(req["seed"])
    device = setup(req)
    keras.utils.set_random_seed(seed)
    markers.sync = device_sync
    task = load_task(req, data_dir)
    if task.kind == "knn":  # scikit-learn on the CPU, whatever the device: reported as what it is
        return knn_run(task, int(wl["knn_k"]), markers), tf_env("/CPU:0", None)

    shared = wl["defaults"] == "shared"
    bs, ibs, epochs = int(wl["batch_size"]), int(wl["infer_batch_size"]), int(wl["epochs"])
    n = len(task.x_tr)
    steps = steps_per_epoch(wl, n)
    y_tr = task.y_tr.astype(np.float32)[:, None] if task.kind == "imdb" else task.y_tr
    with tf.device(device):
        xt, yt = tf.constant(task.x_tr), tf.constant(y_tr)
        xe = tf.constant(task.x_te)
        model = build(task, shared, seed)
        opt = make_optimizer(wl)
        step = train_step(model, opt, _loss(task.kind))

        def classify(xb: Any) -> Any:
            logits = model(xb, training=False)
            return tf.cast(logits[:, 0] > 0, tf.int64) if task.kind == "imdb" else tf.argmax(logits, axis=-1)

        predict_step = tf.function(classify, reduce_retracing=True)

        def train_epoch(order: np.ndarray, n_steps: int) -> float:
            idx = tf.constant(order[: n_steps * bs])
            x_e, y_e = tf.gather(xt, idx), tf.gather(yt, idx)
            total = tf.zeros(())
            for i in range(n_steps):
                total += step(x_e[i * bs : (i + 1) * bs], y_e[i * bs : (i + 1) * bs])
            return float(total.numpy()) / n_steps

        def predict() -> np.ndarray:
            out = [predict_step(xe[i : i + ibs]) for i in range(0, len(task.x_te), ibs)]
            return tf.concat(out, 0).numpy()

        def accuracy(pred: np.ndarray) -> float:
            return float((pred == task.y_te).mean())

        init = model.get_weights()
        warm = int(wl["warmup_steps"])
        if warm > 0:
            # trace the train and predict functions once, then restore the initial weights and
            # zero the optimizer's state (iterations, moments, accumulators; not its learning rate)
            markers.start("warmup")
            train_epoch(np.arange(n), min(warm, steps))
            predict()
            markers.end("warmup")
            model.set_weights(init)
            reset_optimizer(opt)
        # every training pass starts from here: weights, batch-norm statistics and the dropout seeds' state
        # (model.variables: get_weights and the seed generators) and zeroed optimizer state
        start = [v.numpy() for v in model.variables]

        def reset() -> None:
            for v, a in zip(model.variables, start, strict=True):
                v.assign(a)
            reset_optimizer(opt)

        each = bool(wl.get("eval_each_epoch", False))
        logs: list[EpochLog] = []  # every pass's

        def train_run() -> EpochLog:
            """The protocol's training run: every epoch, the accuracy between epochs with ``eval_each_epoch``."""
            log = EpochLog()
            logs.append(log)
            for e in range(epochs):
                device_sync()
                t0 = time.perf_counter()
                log.loss.append(train_epoch(epoch_order(n, seed, e), steps))
                device_sync()
                log.train_s.append(time.perf_counter() - t0)
                acc = None
                if each and e < epochs - 1:
                    t1 = time.perf_counter()
                    acc = accuracy(predict())
                    log.eval_s += time.perf_counter() - t1
                log.acc.append(acc)
                markers.event("epoch_end", epoch=e + 1, train_s=log.train_s[-1], train_loss=log.loss[-1],
                              test_accuracy=acc, train_pass=len(logs))
            return log

        min_s = min_phase_s(req)
        markers.start("train")
        trained = repeat_training(train_run, reset, min_s, device_sync)
        train_phase_s = markers.end("train", images=steps * bs * epochs * task.units_per_example * trained.passes,
                                    passes=trained.passes)
        markers.start("infer")
        inferred = repeat_inference(predict, min_s, device_sync)
        infer_s = inferred.per_pass_s(markers.end("infer", images=len(task.x_te) * task.units_per_example
                                                  * inferred.passes, passes=inferred.passes))
    log = trained.result
    final = accuracy(inferred.result)
    if each:
        log.acc[-1] = final
    evals = [x.eval_s for x in logs]
    results = trial_results(task, steps * bs, epochs, trained.per_pass_s(train_phase_s), sum(evals) / len(evals),
                            infer_s, log.train_s, log.loss, log.acc, final, trainable_count(model), each)
    results.update(pass_results(trained, inferred, evals))
    return results, tf_env(device, "fp32", conv_dominant=task.kind == "image")
