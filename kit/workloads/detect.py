"""DLBench's Faster R-CNN on VOC2012: the protocol both frameworks run, around a framework adapter (numpy only).

One trial, as :mod:`kit.workloads.train_torch` runs the CNNs: the data read and decoded before any timed
phase (kit.workloads.voc), an untimed warm-up (a few training steps and one detection batch, then the
initial weights and a fresh optimizer again), the timed ``train`` phase (every epoch in the block's shuffled
order, :func:`kit.workloads.tasks.epoch_order`, full batches; with ``eval_each_epoch`` the test mAP after each
epoch is measured between epochs and its time taken off the training time) and the timed ``infer`` phase
(detections on the test set; the mAP is computed after the phase). With ``min_phase_s`` each phase repeats
its unit (kit.workloads.device). The framework modules (detect_torch, detect_keras) supply only the model
steps, so the order of images, batches, the mAP and the results' keys are the same code in both.

The model trains on the sum of torchvision's four losses; difficult objects are left out of the training
targets and ignored by the mAP (kit.workloads.voc_map).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from kit.workloads import voc
from kit.workloads.common import Markers, WorkloadError
from kit.workloads.device import (
    DatasetRequest,
    EpochLog,
    JsonTable,
    min_phase_s,
    pass_results,
    repeat_inference,
    repeat_training,
)
from kit.workloads.tasks import epoch_order
from kit.workloads.voc_map import Detections, mean_ap

ACCURACY_METRIC = "mAP@0.5"


@dataclass(frozen=True)
class DetectSettings:
    """The trial's detection settings, read and checked from the workload keys."""

    batch_size: int
    infer_batch_size: int
    epochs: int
    learning_rate: float
    weight_decay: float
    min_size: int
    max_size: int
    warmup_steps: int
    eval_each_epoch: bool
    steps_per_epoch: int | None


def settings(wl: dict[str, Any]) -> DetectSettings:
    """The workload keys of a detection trial; Adam only (DLBench's optimizer), framework defaults only."""
    if str(wl.get("optimizer")) != "adam":
        raise WorkloadError(f"Faster R-CNN trains with Adam (DLBench Sec. 4.3), not {wl.get('optimizer')!r}: set "
                            "optimizer = \"adam\" in the case's workload")
    if wl.get("defaults", "framework") != "framework":
        raise WorkloadError("defaults = \"shared\" (identical initial weights) is not implemented for Faster R-CNN: "
                            "use defaults = \"framework\"")
    s = DetectSettings(int(wl["batch_size"]), int(wl["infer_batch_size"]), int(wl["epochs"]),
                       float(wl["learning_rate"]), float(wl.get("weight_decay", 0.0)),
                       int(wl.get("detect_min_size", 800)), int(wl.get("detect_max_size", 1333)),
                       int(wl.get("warmup_steps", 0)), bool(wl.get("eval_each_epoch", False)),
                       None if wl.get("steps_per_epoch") is None else int(wl["steps_per_epoch"]))
    if min(s.batch_size, s.infer_batch_size, s.epochs, s.min_size) < 1 or s.max_size < s.min_size:
        raise WorkloadError(f"detection settings out of range: {s}")
    if not (s.learning_rate > 0 and s.weight_decay >= 0):
        raise WorkloadError(f"learning_rate {s.learning_rate} must be > 0 and weight_decay {s.weight_decay} >= 0")
    return s


def load_splits(req: JsonTable, data_dir: Path, decode: voc.Decoder) -> voc.VocSplits:
    """The trial's VOC images (the first train_size of train.txt, test_size of val.txt), decoded, untimed."""
    ds = cast(DatasetRequest, req.get("dataset") or {})
    if ds.get("name") != "voc2012":
        raise WorkloadError(f"the detection workload runs on voc2012, not {ds.get('name')!r}")
    return voc.load_voc(data_dir, decode, ds.get("train_size"), ds.get("test_size"))


@dataclass(frozen=True)
class Adapter:
    """What a framework supplies: one training step, detections of a batch, the reset to the initial state.

    ``train_step(images, boxes, labels)`` returns the step's summed loss as a value the framework may keep on
    the device (``read_loss`` turns a sum of them into a float once per epoch); ``detect(images)`` returns
    numpy (boxes, scores, labels) per image; ``reset()`` restores the initial weights, random state and a
    fresh optimizer state; ``sync()`` waits for queued device work.
    """

    train_step: Callable[[list[np.ndarray], list[np.ndarray], list[np.ndarray]], Any]
    read_loss: Callable[[Any], float]
    detect: Callable[[list[np.ndarray]], list[Detections]]
    reset: Callable[[], None]
    sync: Callable[[], None]
    param_count: int


def run_protocol(req: JsonTable, s: DetectSettings, data: voc.VocSplits, model: Adapter,
                 markers: Markers) -> dict[str, Any]:
    """Warm-up, timed training (mAP between epochs), timed inference; the results both frameworks report."""
    n = len(data.train)
    steps = n // s.batch_size
    if steps < 1:
        raise WorkloadError(f"{n} training images are fewer than one batch of {s.batch_size}")
    if s.steps_per_epoch is not None:
        steps = min(steps, s.steps_per_epoch)
    seed = int(cast(int, req["seed"]))
    truths = [(im.boxes, im.labels, im.difficult) for im in data.test]
    targets = [voc.train_targets(im) for im in data.train]

    def train_epoch(order: np.ndarray, n_steps: int) -> float:
        total: Any = 0.0
        for i in range(n_steps):
            idx = order[i * s.batch_size:(i + 1) * s.batch_size]
            total = total + model.train_step(voc.batch_inputs([data.train[j] for j in idx]),
                                             [targets[j][0] for j in idx], [targets[j][1] for j in idx])
        return model.read_loss(total) / n_steps

    def predict() -> list[Detections]:
        out: list[Detections] = []
        for i in range(0, len(data.test), s.infer_batch_size):
            out.extend(model.detect(voc.batch_inputs(list(data.test[i:i + s.infer_batch_size]))))
        return out

    def score(dets: list[Detections]) -> float:
        return mean_ap(dets, truths).map

    if s.warmup_steps > 0:
        # untimed: first-call costs (allocator, kernel choice, tracing) stay out of the timed phases
        markers.start("warmup")
        train_epoch(np.arange(n), min(s.warmup_steps, steps))
        model.detect(voc.batch_inputs(list(data.test[:s.infer_batch_size])))
        tail = len(data.test) % s.infer_batch_size
        if tail and len(data.test) > s.infer_batch_size:  # the last, smaller batch: a graph of its own in Keras
            model.detect(voc.batch_inputs(list(data.test[-tail:])))
        markers.end("warmup")
        model.reset()
    logs: list[EpochLog] = []

    def train_run() -> EpochLog:
        log = EpochLog()
        logs.append(log)
        for e in range(s.epochs):
            model.sync()
            t0 = time.perf_counter()
            log.loss.append(train_epoch(epoch_order(n, seed, e), steps))
            model.sync()
            log.train_s.append(time.perf_counter() - t0)
            acc = None
            if s.eval_each_epoch and e < s.epochs - 1:  # the last epoch's mAP is the infer phase's
                t1 = time.perf_counter()
                acc = score(predict())
                log.eval_s += time.perf_counter() - t1
            log.acc.append(acc)
            markers.event("epoch_end", epoch=e + 1, train_s=log.train_s[-1], train_loss=log.loss[-1],
                          test_accuracy=acc, train_pass=len(logs))
        return log

    min_s = min_phase_s(req)
    markers.start("train")
    trained = repeat_training(train_run, model.reset, min_s, model.sync)
    train_phase_s = markers.end("train", images=steps * s.batch_size * s.epochs * trained.passes,
                                passes=trained.passes)
    markers.start("infer")
    inferred = repeat_inference(predict, min_s, model.sync)
    infer_s = inferred.per_pass_s(markers.end("infer", images=len(data.test) * inferred.passes,
                                              passes=inferred.passes))
    log = trained.result
    final = mean_ap(inferred.result, truths)
    if s.eval_each_epoch:
        log.acc[-1] = final.map
    evals = [x.eval_s for x in logs]
    out = results(s, steps, n, len(data.test), trained.per_pass_s(train_phase_s), sum(evals) / len(evals), infer_s,
                  log, final.map, model.param_count)
    out["test_ap_per_class"] = {voc.CLASSES[c - 1]: ap for c, ap in final.per_class.items()}
    out.update(pass_results(trained, inferred, evals))
    return out


def results(s: DetectSettings, steps: int, n_train: int, n_test: int, train_phase_s: float, eval_s: float,
            infer_s: float, log: EpochLog, final: float, params: int) -> dict[str, Any]:
    """The keys of kit.workloads.tasks.trial_results (test_accuracy holds the mAP@0.5) plus the detection's own."""
    per_epoch = steps * s.batch_size
    train_s = train_phase_s - eval_s
    out: dict[str, Any] = {
        "train_time_s": train_s,
        "infer_time_s": infer_s,
        "train_loss": log.loss[-1],
        "test_accuracy": final,
        "accuracy_metric": ACCURACY_METRIC,
        "train_images": per_epoch * s.epochs,
        "test_images": n_test,
        "throughput_unit": "images",
        "train_throughput_ips": per_epoch * s.epochs / train_s,
        "infer_throughput_ips": n_test / infer_s,
        "param_count": params,
        "epochs": s.epochs,
        "train_examples_per_epoch": per_epoch,
        "train_images_available": n_train,
        "epoch_train_s": log.train_s,
        "epoch_train_loss": log.loss,
        "train_phase_s": train_phase_s,
        "detect_min_size": s.min_size,
        "detect_max_size": s.max_size,
        "batch_size": s.batch_size,
    }
    if s.eval_each_epoch:
        out["epoch_test_accuracy"] = log.acc
        out["eval_between_epochs_s"] = eval_s
    return out
