"""Workloads: one model per framework, looked up by (workload, framework).

Modules are named, not imported, so that listing or validating workloads on
the host never imports a framework; the harness imports only the module a
trial needs. Each module provides ``run(request, data_dir, markers) ->
(results, env)`` and ``is_oom(exc) -> bool``.

A workload declares the spec keys it accepts beyond the common ones
(``Param``): ``[workload]`` in an experiment file is flat, and a key that is
neither common nor declared by the chosen workload is refused at load.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FRAMEWORKS: tuple[str, ...] = ("pytorch", "tensorflow")


@dataclass(frozen=True)
class Param:
    """One workload-specific spec key: its type, default and allowed values."""

    type: Any  # int, float, str, bool, or tuple[int, ...] style typing objects
    default: Any
    help: str = ""
    choices: tuple[Any, ...] = ()
    minimum: float | None = None


@dataclass(frozen=True)
class WorkloadInfo:
    """A workload: its module per framework, the datasets it can use, its parameters."""

    name: str
    modules: dict[str, str]
    datasets: tuple[str, ...] = ()  # empty: needs no dataset (synthetic inputs)
    params: dict[str, Param] = field(default_factory=dict)
    description: str = ""
    optimizers: tuple[str, ...] = ("sgd",)  # the values of workload.optimizer both builds implement


WORKLOADS: dict[str, WorkloadInfo] = {
    "lenet5": WorkloadInfo(
        name="lenet5",
        modules={"pytorch": "kit.workloads.lenet_torch", "tensorflow": "kit.workloads.lenet_keras"},
        datasets=("mnist",),
        params={"tf_jit_compile": Param(bool, False, "compile the Keras train/predict functions with XLA")},
        description="LeNet-5 (LeCun et al. 1998) on MNIST, identical weights and batches in both frameworks",
    ),
    "calibrated": WorkloadInfo(
        name="calibrated",
        modules={"pytorch": "kit.workloads.calibrated", "tensorflow": "kit.workloads.calibrated"},
        params={
            "train_s": Param(float, 0.2, "busy-wait time of the train phase", minimum=0.0),
            "infer_s": Param(float, 0.05, "busy-wait time of the infer phase", minimum=0.0),
            "jitter_frac": Param(float, 0.0, "relative standard deviation of the phase times", minimum=0.0),
            "slowdown": Param(float, 1.0, "planted factor on both phase times", minimum=0.0),
            "slowdown_framework": Param(str, "", "plant the slowdown in this framework only ('' = every framework)",
                                        choices=("", "pytorch", "tensorflow")),
            "drift_per_position": Param(float, 0.0, "relative growth of the phase times per schedule position "
                                        "(emulates a device warming up over the run)", minimum=0.0),
        },
        description="phases of known duration (no framework): tests the instrument, comparisons and verification",
    ),
    "germino": WorkloadInfo(
        name="germino",
        modules={"pytorch": "kit.workloads.train_torch", "tensorflow": "kit.workloads.train_keras"},
        datasets=("mnist",),
        params={
            "model": Param(str, "mlp", "knn (scikit-learn baseline), mlp (simple network) or cnn",
                           choices=("knn", "mlp", "cnn")),
            "defaults": Param(str, "shared", "shared: same initial weights and layer constants in both frameworks; "
                              "framework: each framework's own", choices=("shared", "framework")),
            "knn_k": Param(int, 5, "neighbours of the k-NN baseline", minimum=1),
            "eval_each_epoch": Param(bool, False, "test accuracy after every epoch (excluded from the training time)"),
        },
        description="Germino et al.: k-NN baseline, simple network and CNN on MNIST; time, energy, accuracy",
        optimizers=("sgd", "adam"),
    ),
    "dlbench": WorkloadInfo(
        name="dlbench",
        modules={"pytorch": "kit.workloads.train_torch", "tensorflow": "kit.workloads.train_keras"},
        datasets=("mnist", "cifar10", "cifar100", "svhn", "imdb", "ptb"),
        params={
            "defaults": Param(str, "framework", "framework: each framework's own initialisers and layer constants "
                              "(DLBench's question); shared: identical in both", choices=("shared", "framework")),
            "eval_each_epoch": Param(bool, True, "test accuracy after every epoch, for the convergence curves"),
            "imdb_vocab": Param(int, 5000, "IMDB vocabulary (most frequent words; 0 = padding, 1 = unknown)", minimum=3),
            "imdb_seq_len": Param(int, 500, "IMDB reviews truncated/padded to this many words", minimum=1),
            "ptb_seq_len": Param(int, 30, "PTB window length (time steps)", minimum=1),
            "ptb_stride": Param(int, 5, "PTB distance between training windows (the authors' skip_step)", minimum=1),
        },
        description="Elshawi et al. (DLBench): the CNNs of MNIST, CIFAR-10/100, SVHN and the LSTMs of IMDB, PTB",
        optimizers=("sgd", "adam", "adadelta"),
    ),
}


def module_for(workload: str, framework: str) -> str:
    """The module that runs ``workload`` in ``framework``; KeyError if none."""
    return WORKLOADS[workload].modules[framework]
