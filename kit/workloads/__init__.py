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
    # True: defined by a study folder's [study] table; ``modules`` then name files of that folder
    # (imported by kit.workloads.study_import), not modules of the kit.
    folder: bool = False


WORKLOADS: dict[str, WorkloadInfo] = {
    "lenet5": WorkloadInfo(
        name="lenet5",
        modules={"pytorch": "kit.workloads.lenet_torch", "tensorflow": "kit.workloads.lenet_keras"},
        datasets=("mnist",),
        params={"tf_jit_compile": Param(bool, False, "compile the Keras train/predict functions with XLA"),
                "input_norm": Param(str, "none", "none: pixels in [0, 1]; mnist_mean_std: (x - 0.1307) / 0.3081, "
                                    "as PyTorch's MNIST example (kit.workloads.lenet.INPUT_NORMS)",
                                    choices=("none", "mnist_mean_std"))},
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
}


_ZOO_MODULES = {"pytorch": "kit.workloads.zoo_torch", "tensorflow": "kit.workloads.zoo_keras"}
_ZOO_MODELS = ("resnet18", "resnet50", "resnet152", "vgg16", "mobilenet_v2", "efficientnet_b4", "inception_v3",
               "lstm_lm", "transformer", "speech_crnn")  # kit.workloads.zoo.MODELS (not imported: numpy-free here)
ZOO_PARAMS: dict[str, Param] = {
    "model": Param(str, "resnet18", "torchvision / keras.applications model, or a sequence model", choices=_ZOO_MODELS),
    "image_size": Param(int, 224, "input side in pixels (vision models): random tensors of this shape", minimum=32),
    "num_classes": Param(int, 1000, "classes of the output layer, the same in both frameworks", minimum=2),
    "seq_len": Param(int, 64, "time steps of the sequence models' inputs", minimum=2),
    "tiny": Param(bool, False, "sequence models at tiny widths (same architecture) for CPU checks"),
    "repeats": Param(int, 100, "timed training steps and timed forward passes per trial", minimum=1),
    "mode": Param(str, "train_infer", "train_infer: time training steps then inference; infer: inference only",
                  choices=("train_infer", "infer")),
    "memory_cap_mb": Param(int, 0, "cap the trial's memory growth after the model is built (RLIMIT_DATA; 0 = no "
                           "cap): forces a real out-of-memory on a CPU host", minimum=0),
    "cudnn_autotune": Param(str, "native", "cuDNN algorithm autotuning: torch.backends.cudnn.benchmark / "
                            "TF_CUDNN_USE_AUTOTUNE; native = each framework's default (PyTorch off, TensorFlow on)",
                            choices=("native", "off", "on")),
    "layout": Param(str, "native", "image layout: native (PyTorch NCHW, Keras NHWC: each framework's default), "
                    "nchw (Keras channels_first) or nhwc (torch.channels_last)", choices=("native", "nchw", "nhwc")),
    "execution": Param(str, "default", "default: PyTorch eager, Keras tf.function (as model.fit); eager: both "
                       "eager; compiled: torch.compile / tf.function(jit_compile=True)",
                       choices=("default", "eager", "compiled")),
    "compile_backend": Param(str, "inductor", "torch.compile backend of execution = compiled (aot_eager: no code "
                             "generation, for CPU checks)", choices=("inductor", "aot_eager")),
    "precision": Param(str, "fp32", "fp32, or autocast / Keras mixed policy in bf16 or fp16",
                       choices=("fp32", "bf16", "fp16")),
    "input_pipeline": Param(bool, False, "batches through a DataLoader / tf.data from host memory each step "
                            "instead of tensors resident on the device"),
    "cpu_cores": Param(int, 0, "pin the trial (every thread) to this many CPU cores of those it may use, with as many "
                       "intra-op threads and one inter-op thread, read back and checked (kit.workloads.zoo_pin); "
                       "0 = not pinned", minimum=0),
}
WORKLOADS["zoo"] = WorkloadInfo(
    name="zoo", modules=dict(_ZOO_MODULES), params=dict(ZOO_PARAMS),
    description="Patel et al.: torchvision vs keras.applications models on random tensors; train-step and "
                "inference time over batch sizes and input shapes, OOM as missing points",
)
# Workloads that moved into their study folders ([study] tables, experiments/<folder>/experiment.toml): a spec
# that names one without its folder's [study] table (a copy of an older spec, e.g. in a run made by an earlier
# kit) is told where it went (kit.spec), never silently given another workload.
MOVED_TO_STUDIES: dict[str, str] = {"germino": "germino_mnist_energy", "dlbench": "elshawi_dlbench",
                                    "dai_factors": "dai_single_gpu_factors", "zoo_distributed": "patel_distributed"}


def module_for(workload: str, framework: str) -> str:
    """The module that runs ``workload`` in ``framework``; KeyError if none."""
    return WORKLOADS[workload].modules[framework]
