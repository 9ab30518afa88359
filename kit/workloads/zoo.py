"""Model zoo shared by both frameworks: which library model each name means, device peaks, inputs.

Framework-neutral (standard library and numpy only): the harness loads it in
either image. The vision models are the libraries' own definitions
(``torchvision.models`` and ``keras.applications``, random weights, the same
number of classes), so a parameter-count difference between a pair is a
difference between the libraries' definitions, which the report states.
The sequence models (LSTM language model, Transformer encoder, conv+RNN
speech model) have no library definition in both; they are defined layer for
layer alike in ``zoo_torch`` and ``zoo_keras`` from the sizes here.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

# name -> (torchvision builder, keras.applications class, smallest input side Keras accepts)
VISION: dict[str, tuple[str, str, int]] = {
    "resnet18": ("resnet18", "", 32),  # keras.applications has no ResNet18: built here from Keras layers
    "resnet50": ("resnet50", "ResNet50", 32),
    "resnet152": ("resnet152", "ResNet152", 32),
    "vgg16": ("vgg16", "VGG16", 32),
    "mobilenet_v2": ("mobilenet_v2", "MobileNetV2", 32),
    "efficientnet_b4": ("efficientnet_b4", "EfficientNetB4", 32),
    "inception_v3": ("inception_v3", "InceptionV3", 75),
}
SEQUENCE = ("lstm_lm", "transformer", "speech_crnn")
MODELS: tuple[str, ...] = (*VISION, *SEQUENCE)

# Sizes of the sequence models: (full, tiny). Tiny keeps the architecture and shrinks widths for CPU checks.
SEQ_SIZES: dict[str, dict[str, dict[str, int]]] = {
    # Zaremba et al. (2014) medium PTB language model: 2 x LSTM 650, vocabulary 10,000
    "lstm_lm": {"full": {"vocab": 10000, "embed": 650, "hidden": 650, "layers": 2},
                "tiny": {"vocab": 500, "embed": 32, "hidden": 32, "layers": 2}},
    # BERT-base-sized encoder: 12 layers, d 768, 12 heads, ffn 3072, vocabulary 30,522
    "transformer": {"full": {"vocab": 30522, "d_model": 768, "heads": 12, "ffn": 3072, "layers": 12},
                    "tiny": {"vocab": 500, "d_model": 32, "heads": 2, "ffn": 64, "layers": 2}},
    # DeepSpeech2-like: 2 conv layers on 161 spectrogram bins, 3 bidirectional GRUs of 800, 29 characters
    "speech_crnn": {"full": {"freq": 161, "channels": 32, "hidden": 800, "layers": 3, "classes": 29},
                    "tiny": {"freq": 33, "channels": 4, "hidden": 16, "layers": 2, "classes": 29}},
}

# Dense peak FLOP/s of known GPU models (vendor data sheets, without sparsity), by exact model (see gpu_model).
# "fp32" is the CUDA-core peak (an fp32 run with TF32 off); "tf32" the tensor-core peak of an fp32 run with TF32
# on (Ampere and newer); "bf16"/"fp16" tensor cores with fp32 accumulation. A precision a GPU lacks is absent.
GPU_PEAK_FLOPS: dict[str, dict[str, float]] = {
    "H200 SXM": {"fp32": 67e12, "tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12},
    "H200 NVL": {"fp32": 60e12, "tf32": 417.5e12, "bf16": 835.5e12, "fp16": 835.5e12},
    "H100 SXM": {"fp32": 67e12, "tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12},
    "H100 PCIe": {"fp32": 51.2e12, "tf32": 378e12, "bf16": 756e12, "fp16": 756e12},
    "H100 NVL": {"fp32": 60e12, "tf32": 417.5e12, "bf16": 835.5e12, "fp16": 835.5e12},
    "GH200": {"fp32": 67e12, "tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12},
    "A100": {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12},  # SXM4 and PCIe alike
    "L40S": {"fp32": 91.6e12, "tf32": 183e12, "bf16": 362e12, "fp16": 362e12},
    "L40": {"fp32": 90.5e12, "tf32": 90.5e12, "bf16": 181e12, "fp16": 181e12},
    "L4": {"fp32": 30.3e12, "tf32": 60e12, "bf16": 121e12, "fp16": 121e12},
    "A10": {"fp32": 31.2e12, "tf32": 62.5e12, "bf16": 125e12, "fp16": 125e12},
    "V100 SXM2": {"fp32": 15.7e12, "fp16": 125e12},
    "V100 PCIe": {"fp32": 14e12, "fp16": 112e12},
    "T4": {"fp32": 8.1e12, "fp16": 65e12},
    "RTX 2080 Ti": {"fp32": 13.4e12, "fp16": 53.8e12},  # the paper's GPU (Patel et al.)
    "RTX 4090": {"fp32": 82.6e12, "tf32": 82.6e12, "bf16": 165.2e12, "fp16": 165.2e12},
}
# Models a name can denote whose peaks no vendor data sheet gives: named, so they are not mistaken for a neighbour.
GPU_NO_DATASHEET: dict[str, str] = {
    "A10G": "the A10G (AWS) has no NVIDIA data sheet; its tensor-core peaks differ from the A10's",
}


def _tokens(name: str) -> list[str]:
    """A GPU name in lower-case tokens, vendor words dropped: "NVIDIA A100-SXM4-80GB" -> [a100, sxm4, 80gb]."""
    out = []
    for tok in name.lower().replace("-", " ").replace("_", " ").replace(",", " ").split():
        if tok not in ("nvidia", "tesla", "geforce", "quadro"):
            out.append(tok)
    return out


def gpu_model(device_name: str) -> str | None:
    """The exact model (a key of GPU_PEAK_FLOPS or GPU_NO_DATASHEET) of a name NVML/CUDA reports, or None.

    The first token names the chip exactly (``l4`` is never ``l40``, ``a10`` never
    ``a10g``); the form factor comes from the remaining tokens (``pcie``,
    ``nvl``; HBM3/SXM otherwise), as NVML spells the variants.
    """
    tok = _tokens(device_name)
    if not tok:
        return None
    chip, rest = tok[0], set(tok[1:])
    if chip == "rtx" and len(tok) >= 2:
        key = "RTX " + " ".join("Ti" if t == "ti" else t.upper() for t in tok[1:])
        return key if key in GPU_PEAK_FLOPS else None
    if chip in ("h100", "h200"):
        if "nvl" in rest:
            return f"{chip.upper()} NVL"
        if "pcie" in rest:
            return "H100 PCIe" if chip == "h100" else None
        return f"{chip.upper()} SXM"
    if chip == "v100" or chip == "v100s":
        if chip == "v100s":
            return None
        return "V100 PCIe" if "pcie" in rest else "V100 SXM2"
    exact = {k.lower(): k for k in (*GPU_PEAK_FLOPS, *GPU_NO_DATASHEET)}
    return exact.get(chip)


def gpu_peak_flops(device_name: str, precision: str) -> tuple[float | None, str]:
    """(peak FLOP/s, where it comes from) of the precision actually used; (None, why) if unknown.

    ``precision``: ``fp32`` (TF32 off: the CUDA-core peak), ``tf32`` (an fp32
    run with TF32 on), ``bf16`` or ``fp16``. The model is matched exactly
    (:func:`gpu_model`), never by substring.
    """
    model = gpu_model(device_name or "")
    if model is None:
        return None, f"no peak known for {device_name!r} (model not in the table)"
    if model in GPU_NO_DATASHEET:
        return None, f"no peak known for {device_name!r}: {GPU_NO_DATASHEET[model]}"
    table = GPU_PEAK_FLOPS[model]
    if precision not in table:
        return None, f"no {precision} peak for {model} ({device_name!r}): the GPU has no such tensor-core mode"
    return table[precision], f"data sheet: {model} dense {precision}"


def cpu_peak_flops(threads: int) -> tuple[float | None, str]:
    """Nominal fp32 peak of ``threads`` cores: GHz x FLOP/cycle (2 FMA units x SIMD lanes x 2), flagged as such."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            info = fh.read()
    except OSError:
        return None, "no /proc/cpuinfo"
    mhz = [float(line.split(":")[1]) for line in info.splitlines() if line.startswith("cpu MHz")]
    flags = next((line for line in info.splitlines() if line.startswith("flags")), "")
    lanes = 16 if " avx512f" in flags else 8 if " avx2" in flags else 4
    fma = 2 if " fma" in flags or lanes == 16 else 1
    if not mhz:
        return None, "no clock rate in /proc/cpuinfo"
    ghz = max(mhz) / 1000
    flops = threads * ghz * 1e9 * lanes * 2 * fma
    return flops, (f"NOMINAL CPU estimate: {threads} core(s) x {ghz:.2f} GHz x {lanes} fp32 lanes x 2 (FMA) "
                   f"x {fma} unit(s); not a measured peak")


def input_batch(model: str, batch: int, image_size: int, seq_len: int, tiny: bool, num_classes: int,
                seed: int, channels_last: bool) -> tuple[np.ndarray, np.ndarray]:
    """Random inputs and labels (no data loading, as in Patel et al.), identical for both frameworks.

    Images are float32 NHWC when ``channels_last`` else NCHW; token models get int64 ids;
    the speech model gets a float32 spectrogram (batch, time, freq). Labels: classes,
    or next tokens per position for the language models.
    """
    rng = np.random.default_rng([seed, 7])
    if model in VISION:
        shape = (batch, image_size, image_size, 3) if channels_last else (batch, 3, image_size, image_size)
        return rng.standard_normal(shape, dtype=np.float32), rng.integers(0, num_classes, batch, dtype=np.int64)
    size = seq_sizes(model, tiny)
    if model == "speech_crnn":
        x = rng.standard_normal((batch, seq_len, size["freq"]), dtype=np.float32)
        return x, rng.integers(0, size["classes"], batch, dtype=np.int64)
    tokens = rng.integers(0, size["vocab"], (batch, seq_len + 1), dtype=np.int64)
    if model == "lstm_lm":
        return tokens[:, :-1], tokens[:, 1:]
    return tokens[:, :-1], rng.integers(0, num_classes, batch, dtype=np.int64)


def seq_sizes(model: str, tiny: bool) -> dict[str, int]:
    return SEQ_SIZES[model]["tiny" if tiny else "full"]


def items_per_example(model: str, seq_len: int) -> int:
    """Tokens per example for the language model (its loss is per token), else 1."""
    return seq_len if model == "lstm_lm" else 1


def check_params(wl: dict[str, Any]) -> None:
    """Combinations the declared parameters cannot refuse on their own."""
    from kit.workloads.common import WorkloadError

    model = wl["model"]
    if model in VISION and int(wl["image_size"]) < VISION[model][2]:
        raise WorkloadError(f"{model} needs image_size >= {VISION[model][2]} (got {wl['image_size']})")


def check_cpu_devices(strategy: str, devices: int, allowed_cpus: Any) -> None:
    """SkipTrial when a data-parallel trial on CPU devices (one core each) asks for more devices than CPUs it may use.

    N processes (or replicas) of one thread each on fewer than N CPUs would time the scheduler's sharing, not
    N devices: the trial is not run, with the reason, as DataParallel is without CUDA devices.
    """
    from kit.workloads.common import SkipTrial

    n_cpus = len(set(allowed_cpus))
    if devices > n_cpus:
        raise SkipTrial(f"strategy {strategy} on {devices} CPU devices (one core each) asked for, the trial may use "
                        f"{n_cpus} CPU(s): not run rather than timed on shared cores")


def env_flag(name: str, value: bool) -> None:
    os.environ[name] = "1" if value else "0"
