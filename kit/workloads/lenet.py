"""LeNet-5 as one framework-neutral description (numpy only).

Both framework builds read this table, so layer sizes cannot drift apart.
Input is the 28x28 MNIST digit; the first convolution pads by 2, which is the
classic 32x32 input of LeCun et al. (1998). C5 maps 5x5x16 to 1x1x120, so the
flatten order is the same in NCHW and NHWC and weights transfer one to one.
"""

from __future__ import annotations

import numpy as np

from kit.workloads.common import WorkloadError, glorot_uniform

# (name, kind, params): conv = (in_ch, out_ch, kernel, padding); dense = (in, out)
LAYERS: tuple[tuple[str, str, tuple[int, ...]], ...] = (
    ("c1", "conv", (1, 6, 5, 2)),
    ("c3", "conv", (6, 16, 5, 0)),
    ("c5", "conv", (16, 120, 5, 0)),
    ("f6", "dense", (120, 84)),
    ("out", "dense", (84, 10)),
)
NUM_CLASSES = 10
# Input normalisation (workload key ``input_norm``): "mnist_mean_std" subtracts the mean and divides by the standard
# deviation of the MNIST training images' pixels in [0, 1], the constants of PyTorch's MNIST example
# (transforms.Normalize((0.1307,), (0.3081,)), 2018-2019), whose code the paper says its own was adapted from;
# "none" keeps the pixels in [0, 1]. Applied here, in numpy, so both frameworks see the same numbers.
INPUT_NORMS = ("none", "mnist_mean_std")
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


def normalise(x: np.ndarray, how: str) -> np.ndarray:
    """The images as the model sees them (float32), by ``input_norm`` (see INPUT_NORMS)."""
    if how == "none":
        return x
    if how == "mnist_mean_std":
        return ((x - np.float32(MNIST_MEAN)) / np.float32(MNIST_STD)).astype(np.float32)
    raise WorkloadError(f"input_norm {how!r}: expected one of {', '.join(INPUT_NORMS)}")


def expected_param_count() -> int:
    """Parameter count from the table alone (61,706), to check both builds against."""
    total = 0
    for _, kind, p in LAYERS:
        if kind == "conv":
            cin, cout, k, _ = p
            total += cout * (cin * k * k + 1)
        else:
            fin, fout = p
            total += fout * (fin + 1)
    return total


def initial_weights(seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Glorot-uniform kernels and zero biases, in Keras layout.

    Conv kernels are (kh, kw, in, out), dense kernels (in, out). The PyTorch
    build transposes them; both frameworks therefore start from the same
    numbers, not only the same scheme.
    """
    rng = np.random.default_rng([seed, 2])
    weights: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name, kind, p in LAYERS:
        if kind == "conv":
            cin, cout, k, _ = p
            w = glorot_uniform((k, k, cin, cout), cin * k * k, cout * k * k, rng)
            weights[name] = (w, np.zeros(cout, np.float32))
        else:
            fin, fout = p
            weights[name] = (glorot_uniform((fin, fout), fin, fout, rng), np.zeros(fout, np.float32))
    return weights
