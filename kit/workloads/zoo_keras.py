"""Model zoo in TensorFlow/Keras: keras.applications models and the sequence models, timed like zoo_torch.

TensorFlow is imported inside ``run``: ``TF_CUDNN_USE_AUTOTUNE`` (a factor of
the Dai design) is read when TensorFlow initialises, so it must be set first.
Training steps are a hand-written GradientTape step (the same SGD with
momentum as the PyTorch side), run as ``tf.function`` (``execution = "default"``,
what ``model.fit`` does), eagerly, or as a ``tf.function`` compiled with XLA
(``"compiled"``), so both frameworks time the same work.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from kit.workloads import zoo, zoo_pin
from kit.workloads.common import Markers, SkipTrial, apply_memory_cap, oom_text
from kit.workloads.device import min_phase_s, pass_results, repeat_inference, repeat_training


def image_shape(keras: Any, size: int) -> tuple[int, int, int]:
    """The input shape of a vision model in Keras' current data format: (3, s, s) channels_first, else (s, s, 3)."""
    return (3, size, size) if keras.backend.image_data_format() == "channels_first" else (size, size, 3)


def _resnet18(keras: Any, size: int, classes: int) -> Any:
    """ResNet-18 from Keras layers: keras.applications has none; same layers as torchvision's resnet18."""
    L = keras.layers
    ch = 1 if keras.backend.image_data_format() == "channels_first" else -1  # the channel axis

    def block(x: Any, filters: int, stride: int) -> Any:
        y = L.Conv2D(filters, 3, stride, padding="same", use_bias=False)(x)
        y = L.ReLU()(L.BatchNormalization(axis=ch, epsilon=1e-5)(y))
        y = L.BatchNormalization(axis=ch, epsilon=1e-5)(L.Conv2D(filters, 3, 1, padding="same", use_bias=False)(y))
        if stride != 1 or x.shape[ch] != filters:
            x = L.BatchNormalization(axis=ch, epsilon=1e-5)(L.Conv2D(filters, 1, stride, use_bias=False)(x))
        return L.ReLU()(L.Add()([x, y]))

    inp = keras.Input(image_shape(keras, size))
    x = L.Conv2D(64, 7, 2, padding="same", use_bias=False)(inp)
    x = L.MaxPooling2D(3, 2, padding="same")(L.ReLU()(L.BatchNormalization(axis=ch, epsilon=1e-5)(x)))
    for filters, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        x = block(block(x, filters, stride), filters, 1)
    x = L.Dense(classes)(L.GlobalAveragePooling2D()(x))
    return keras.Model(inp, x, name="resnet18")


def _PositionEmbedding(keras: Any) -> Any:
    """Learned positions added to the token embeddings (torch side: nn.Embedding(max_len, d_model))."""

    class PositionEmbedding(keras.layers.Layer):
        def build(self, shape: Any) -> None:
            self.table = self.add_weight(shape=(shape[1], shape[2]), initializer="random_normal", name="positions")

        def call(self, x: Any) -> Any:
            return x + keras.ops.cast(self.table, x.dtype)[None]

    return PositionEmbedding()


def build(keras: Any, model: str, num_classes: int, tiny: bool, seq_len: int, image_size: int) -> Any:
    """The named model with random weights; logits out (no softmax) like the PyTorch models."""
    L = keras.layers
    if model == "resnet18":
        return _resnet18(keras, image_size, num_classes)
    if model in zoo.VISION:
        cls = getattr(keras.applications, zoo.VISION[model][1])
        return cls(weights=None, classes=num_classes, input_shape=image_shape(keras, image_size),
                   classifier_activation=None)
    s = zoo.seq_sizes(model, tiny)
    if model == "lstm_lm":
        inp = keras.Input((seq_len,), dtype="int64")
        x = L.Embedding(s["vocab"], s["embed"])(inp)
        for _ in range(s["layers"]):
            x = L.LSTM(s["hidden"], return_sequences=True)(x)
        return keras.Model(inp, L.Dense(s["vocab"])(x), name="lstm_lm")
    if model == "transformer":
        inp = keras.Input((seq_len,), dtype="int64")
        x = _PositionEmbedding(keras)(L.Embedding(s["vocab"], s["d_model"])(inp))
        for _ in range(s["layers"]):  # post-norm like torch.nn.TransformerEncoderLayer(norm_first=False)
            a = L.MultiHeadAttention(s["heads"], s["d_model"] // s["heads"])(x, x)
            x = L.LayerNormalization(epsilon=1e-5)(x + a)
            f = L.Dense(s["ffn"])(x)
            f = L.Dense(s["d_model"])(L.Activation("gelu")(f))
            x = L.LayerNormalization(epsilon=1e-5)(x + f)
        return keras.Model(inp, L.Dense(num_classes)(L.GlobalAveragePooling1D()(x)), name="transformer")
    inp = keras.Input((seq_len, s["freq"]))
    x = L.Reshape((seq_len, s["freq"], 1))(inp)
    x = L.ReLU()(L.BatchNormalization(epsilon=1e-5)(L.Conv2D(s["channels"], (11, 41), (2, 2), padding="same")(x)))
    x = L.ReLU()(L.BatchNormalization(epsilon=1e-5)(L.Conv2D(s["channels"], (11, 21), (1, 2), padding="same")(x)))
    x = L.Reshape((x.shape[1], x.shape[2] * x.shape[3]))(x)
    for _ in range(s["layers"]):  # reset_after=True: the cuDNN GRU, like torch.nn.GRU's two bias vectors
        x = L.Bidirectional(L.GRU(s["hidden"], return_sequences=True))(x)
    return keras.Model(inp, L.Dense(s["classes"])(L.GlobalAveragePooling1D()(x)), name="speech_crnn")


def is_oom(exc: BaseException) -> bool:
    """tf_env.is_oom (the one TensorFlow test), without importing TensorFlow when the trial never did."""
    tf_env = sys.modules.get("kit.workloads.tf_env")
    if tf_env is not None:
        return bool(tf_env.is_oom(exc))
    return isinstance(exc, MemoryError) or oom_text(exc)


def _cpu_nchw_ok(tf: Any) -> bool:
    """Whether this TensorFlow runs a channels_first convolution and pooling on the CPU (Keras 3 does)."""
    import keras

    try:
        with tf.device("/CPU:0"):
            x = tf.zeros((1, 3, 8, 8))
            y = keras.layers.Conv2D(2, 3, data_format="channels_first")(x)
            keras.layers.MaxPooling2D(2, data_format="channels_first")(y)
        return True
    except Exception:
        return False


def run(req: dict[str, Any], data_dir: Path, markers: Markers) -> tuple[dict[str, Any], dict[str, Any]]:
    wl, seed = req["workload"], int(req["seed"])
    zoo.check_params(wl)
    if int(wl.get("memory_cap_mb", 0)):  # before importing TensorFlow: the skip costs nothing
        raise SkipTrial("memory_cap_mb is implemented for PyTorch only: under RLIMIT_DATA TensorFlow's allocator "
                        "(abseil low_level_alloc) aborts the process instead of raising ResourceExhaustedError")
    zoo.env_flag("TF_CUDNN_USE_AUTOTUNE", wl.get("cudnn_autotune", "native") != "off")  # native: TF's default, on
    cores = zoo_pin.threads_asked(wl, req.get("threads"))
    pinned = zoo_pin.pin(cores) if cores else None  # before TensorFlow's import starts its threads
    from kit.workloads import tf_env

    tf = tf_env.tf
    import keras

    device = tf_env.setup(req, cores or req.get("threads") or wl.get("threads"))
    if pinned is not None:
        try:
            tf.config.threading.set_inter_op_parallelism_threads(1)
        except RuntimeError as exc:  # the runtime already started: this trial cannot have what was asked
            raise zoo_pin.CpuPinError(f"TensorFlow refused inter-op threads = 1: {exc}",
                                      "pin in a fresh trial process, before TensorFlow runs its first op") from None
    markers.sync = tf_env.device_sync
    name, bs, size = wl["model"], int(wl["batch_size"]), int(wl["image_size"])
    tiny, seq_len, classes = bool(wl["tiny"]), int(wl["seq_len"]), int(wl["num_classes"])
    repeats, mode, precision = int(wl["repeats"]), wl["mode"], wl.get("precision", "fp32")
    nchw = name in zoo.VISION and wl.get("layout", "native") == "nchw"
    if nchw and device.startswith("/CPU") and not _cpu_nchw_ok(tf):
        raise SkipTrial("this TensorFlow has no NCHW (channels_first) convolution kernels on the CPU")
    keras.utils.set_random_seed(seed)
    keras.backend.set_image_data_format("channels_first" if nchw else "channels_last")
    policy = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}.get(precision, "float32")
    keras.mixed_precision.set_global_policy(policy)

    with tf.device(device):
        model = build(keras, name, classes, tiny, seq_len, size)
        opt = keras.optimizers.SGD(learning_rate=float(wl["learning_rate"]), momentum=float(wl["momentum"]))
        if precision == "fp16":
            opt = keras.mixed_precision.LossScaleOptimizer(opt)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        x_np, y_np = zoo.input_batch(name, bs, size, seq_len, tiny, classes, seed, not nchw)
        x, y = tf.constant(x_np), tf.constant(y_np)
    pipeline = bool(wl.get("input_pipeline", False))
    if pipeline:  # batches from host memory through tf.data each step, like the DataLoader on the PyTorch side
        ds = tf.data.Dataset.from_tensor_slices((x_np.repeat(2, 0), y_np.repeat(2, 0)))
        ds = ds.shuffle(2 * bs, seed=seed).batch(bs, drop_remainder=True).repeat().prefetch(tf.data.AUTOTUNE)
        data_it = iter(ds)

    def next_batch() -> tuple[Any, Any]:
        if not pipeline:
            return x, y
        xb, yb = next(data_it)
        with tf.device(device):
            return tf.identity(xb), tf.identity(yb)

    def step(xb: Any, yb: Any) -> None:
        with tf.GradientTape() as tape:
            out = model(xb, training=True)
            loss = loss_fn(yb, tf.cast(out, tf.float32))
            scaled = opt.scale_loss(loss) if hasattr(opt, "scale_loss") else loss
        grads = tape.gradient(scaled, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))

    def infer(xb: Any) -> Any:
        return model(xb, training=False)

    execution = wl.get("execution", "default")
    if execution != "eager":  # default: tf.function as model.fit runs it; compiled: with XLA, like torch.compile
        step = tf.function(step, jit_compile=execution == "compiled")
        infer = tf.function(infer, jit_compile=execution == "compiled")
    # trainable weights, as PyTorch's parameters (Keras' count_params adds batch-norm moving statistics)
    n_params = int(sum(int(np.prod(w.shape)) for w in model.trainable_weights))

    apply_memory_cap(int(wl.get("memory_cap_mb", 0)))
    train = mode == "train_infer"
    with tf.device(device):
        markers.start("warmup")
        for _ in range(int(wl["warmup_steps"])):
            xb, yb = next_batch()
            if train:
                step(xb, yb)
            infer(xb)
        markers.end("warmup")
        results: dict[str, Any] = {"model": name, "param_count": n_params, "batch_size": bs, "image_size": size}
        items = bs * zoo.items_per_example(name, seq_len)
        min_s = min_phase_s(req)
        trained = None
        if train:
            train_steps: list[float] = []

            def train_pass() -> None:  # `repeats` training steps, each timed
                for _ in range(repeats):
                    xb, yb = next_batch()
                    t0 = time.perf_counter()
                    step(xb, yb)
                    tf_env.device_sync()
                    train_steps.append(time.perf_counter() - t0)

            markers.start("train")
            trained = repeat_training(train_pass, lambda: None, min_s, tf_env.device_sync)
            train_s = trained.per_pass_s(markers.end("train", images=bs * repeats * trained.passes,
                                                     passes=trained.passes))
            results.update(train_time_s=train_s, train_step_s=train_steps, train_throughput_ips=bs * repeats / train_s,
                           train_items_per_s=items * repeats / train_s)
        infer_steps: list[float] = []

        def infer_pass() -> None:  # `repeats` forward passes, each timed
            for _ in range(repeats):
                xb, _ = next_batch()
                t0 = time.perf_counter()
                out = infer(xb)
                if device.startswith("/CPU"):
                    out.numpy()
                else:
                    tf_env.device_sync()
                infer_steps.append(time.perf_counter() - t0)

        markers.start("infer")
        inferred = repeat_inference(infer_pass, min_s, tf_env.device_sync)
        infer_s = inferred.per_pass_s(markers.end("infer", images=bs * repeats * inferred.passes,
                                                  passes=inferred.passes))
    results.update(infer_time_s=infer_s, infer_step_s=infer_steps, infer_throughput_ips=bs * repeats / infer_s,
                   infer_latency_per_image_s=infer_s / (bs * repeats), **pass_results(trained, inferred))
    env = tf_env.tf_env(device, precision, conv_dominant=name in zoo.VISION)
    if pinned is not None:  # read back after the timed phases: every thread, and the counts TensorFlow reports
        env["cpu_pinning"] = zoo_pin.checked(pinned, tf.config.threading.get_intra_op_parallelism_threads(),
                                             tf.config.threading.get_inter_op_parallelism_threads()).as_dict()
    threads = int(env.get("threads") or os.cpu_count() or 1)
    peak, source = (zoo.gpu_peak_flops(env["device_name"], env["precision"]) if device.startswith("/GPU")
                    else zoo.cpu_peak_flops(threads))
    results.update(peak_flops=peak, peak_source=source, precision=precision, layout="NCHW" if nchw else "NHWC",
                   execution=execution, input_pipeline=pipeline, mixed_precision_policy=policy)
    return results, env
