"""Data-parallel training in TensorFlow: one device, or MirroredStrategy over several (inside the image).

``dp`` is ``tf.distribute.MirroredStrategy``: one process, one replica per
device, gradients all-reduced, the counterpart of PyTorch's DataParallel. On
a CPU host the devices are logical CPU devices
(``tf.config.set_logical_device_configuration``), so the path runs in CI.
``ddp`` (one process per device) has no counterpart here and is skipped
with the reason. Weak scaling as on the PyTorch side: ``batch_size`` per
device, step = one global batch.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from kit.workloads import zoo
from kit.workloads.common import Markers, SkipTrial


def is_oom(exc: BaseException) -> bool:
    from kit.workloads.zoo_keras import is_oom as keras_oom  # tf_env.is_oom once TensorFlow is loaded

    return keras_oom(exc)


def run(req: dict[str, Any], data_dir: Path, markers: Markers) -> tuple[dict[str, Any], dict[str, Any]]:
    wl, seed = req["workload"], int(req["seed"])
    zoo.check_params(wl)
    strategy_name, n_dev, bs = wl["strategy"], int(wl["devices"]), int(wl["batch_size"])
    if strategy_name == "ddp":
        raise SkipTrial("DistributedDataParallel is PyTorch's; TensorFlow's multi-process counterpart "
                        "(MultiWorkerMirroredStrategy) is not part of this study; TensorFlow runs strategy dp")
    if strategy_name == "single":
        n_dev = 1
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from kit.workloads import cuda_driver, tf_env
    from kit.workloads import device as devmod

    want = wl["dist_device"]
    if want == "auto" and devmod.requested(req) in ("cpu", "gpu"):
        want = devmod.requested(req)  # resolved by the host (same kind for every strategy); never re-decided here
    gpus = tf.config.list_physical_devices("GPU") if want != "cpu" else []
    if want != "cpu":
        driver = cuda_driver.probe()
        tf_env._STATE["driver"] = driver
        if driver.count > len(gpus):  # a GPU TensorFlow cannot use: an error, never a silent CPU run
            raise devmod.unusable("tensorflow", tf.__version__, tf_env.build_cuda(), driver,
                                  "gpu" if want == "gpu" else "auto",
                                  f"TensorFlow lists {len(gpus)} GPU(s), the CUDA driver {driver.count}")
    if want == "gpu" and len(gpus) < n_dev:
        raise SkipTrial(f"strategy {strategy_name} on {n_dev} GPU(s) asked for, TensorFlow lists {len(gpus)}")
    # auto: GPUs only when every strategy can have them (the one-device baseline on the same kind of device)
    kind = "gpu" if want == "gpu" or (want == "auto" and len(gpus) >= int(wl["devices"])) else "cpu"
    if kind == "cpu":
        zoo.check_cpu_devices(strategy_name, n_dev, os.sched_getaffinity(0))
        tf.config.set_visible_devices([], "GPU")
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * max(n_dev, 1))
        tf.config.threading.set_intra_op_parallelism_threads(1)  # one device = one core
        tf.config.threading.set_inter_op_parallelism_threads(max(n_dev, 1))
        names = [d.name for d in tf.config.list_logical_devices("CPU")][:n_dev]
    else:
        for g in gpus:
            tf.config.experimental.set_memory_growth(g, True)
        names = [d.name for d in tf.config.list_logical_devices("GPU")][:n_dev]
    tf_env._STATE["tf32"] = tf_env.apply_tf32(devmod.tf32_mode(req), kind == "gpu")
    if kind == "gpu":
        for i in range(n_dev):
            devmod.check_uuid(devmod.expected_uuids(req), tf_env.gpu_uuid(i), "tensorflow", req.get("gpu_indices"))
    import keras

    from kit.workloads.zoo_keras import build

    markers.sync = tf_env.device_sync
    keras.utils.set_random_seed(seed)
    strategy = tf.distribute.OneDeviceStrategy(names[0]) if n_dev == 1 else tf.distribute.MirroredStrategy(names)
    global_batch = bs * n_dev
    with strategy.scope():
        model = build(keras, wl["model"], int(wl["num_classes"]), bool(wl["tiny"]), int(wl["seq_len"]),
                      int(wl["image_size"]))
        opt = keras.optimizers.SGD(learning_rate=float(wl["learning_rate"]), momentum=float(wl["momentum"]))
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
        opt.build(model.trainable_variables)  # slot variables now, not lazily inside a replica context
    x, y = zoo.input_batch(wl["model"], global_batch, int(wl["image_size"]), int(wl["seq_len"]), bool(wl["tiny"]),
                           int(wl["num_classes"]), seed, True)
    ds = tf.data.Dataset.from_tensors((x, y)).repeat()
    it = iter(strategy.experimental_distribute_dataset(ds))

    def replica_step(xb: Any, yb: Any) -> None:
        with tf.GradientTape() as tape:
            per = loss_fn(yb, model(xb, training=True))
            loss = tf.nn.compute_average_loss(tf.reshape(per, [-1]), global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))

    @tf.function
    def step(batch: Any) -> None:
        strategy.run(replica_step, args=batch)

    for _ in range(int(wl["warmup_steps"])):
        step(next(it))
    markers.start("train")
    steps = []
    for _ in range(int(wl["repeats"])):
        batch = next(it)
        t0 = time.perf_counter()
        step(batch)
        tf_env.device_sync()
        steps.append(time.perf_counter() - t0)
    total = markers.end("train")
    results = {"strategy": strategy_name, "devices": n_dev, "device_kind": kind, "per_device_batch": bs,
               "global_batch": global_batch, "train_step_s": steps, "train_time_s": sum(steps),
               "train_throughput_ips": global_batch * len(steps) / sum(steps), "phase_s": total,
               "param_count": int(sum(int(v.shape.num_elements()) for v in model.trainable_weights)),
               "tf_strategy": type(strategy).__name__, "replicas": strategy.num_replicas_in_sync}
    # the device KIND decides the env fields (a full TF name such as /job:.../device:GPU:0 is no kind)
    env = tf_env.tf_env("/GPU:0" if kind == "gpu" else "/CPU:0", "fp32", conv_dominant=wl["model"] in zoo.VISION,
                        devices_used=names if kind == "gpu" else None)
    env["devices_used"] = names
    return results, env


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run through kit.harness")
