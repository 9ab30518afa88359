"""The networks of the accuracy-and-energy studies, as framework-neutral tables (numpy only).

Both framework builds (``train_torch``, ``train_keras``) read these tables, so
layer sizes cannot drift apart between frameworks. Shapes are inferred here
(NHWC, Keras' layout); with ``defaults = "shared"`` the initial weights are
drawn here once, in Keras' layout and with Keras' initialisers (Glorot-uniform
kernels, zero biases, orthogonal recurrent kernels, unit forget bias,
uniform(-0.05, 0.05) embeddings), and both builds load the same numbers.

Germino et al. (seed 002): ``mlp`` is the network of the TensorFlow Datasets
Keras example the paper cites ([17]: Flatten, Dense 128 ReLU, Dense 10); ``cnn``
is the convolutional network of the PyTorch "Training a classifier" tutorial
([16]) on one 28x28 channel. Elshawi et al. (DLBench, seed 003): the CNNs of
Fig. 2 and the LSTMs of Fig. 3 as the authors' code builds them
(github.com/DataSystemsGroupUT/DLBench, Keras notebooks), one per dataset.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kit.workloads.common import WorkloadError, glorot_uniform

# A layer: (kind, *args)
#   ("conv", filters, kernel, "same"|"valid")   ("pool", size, stride, "same"|"valid")
#   ("bn",)  ("relu",)  ("dropout", rate)  ("flatten",)  ("dense", units)
Layer = tuple[str | int | float, ...]

GERMINO_NETS: dict[str, tuple[Layer, ...]] = {
    "mlp": (("flatten",), ("dense", 128), ("relu",), ("dense", 10)),
    "cnn": (("conv", 6, 5, "valid"), ("relu",), ("pool", 2, 2, "valid"),
            ("conv", 16, 5, "valid"), ("relu",), ("pool", 2, 2, "valid"),
            ("flatten",), ("dense", 120), ("relu",), ("dense", 84), ("relu",), ("dense", 10)),
}


def _svhn() -> tuple[Layer, ...]:
    layers: list[Layer] = [("conv", 48, 5, "same"), ("relu",), ("pool", 2, 2, "same"), ("dropout", 0.2)]
    for filters, stride in ((64, 1), (128, 2), (160, 1), (192, 2), (192, 1), (192, 2), (192, 1)):
        layers += [("conv", filters, 5, "same"), ("bn",), ("relu",), ("pool", 2, stride, "same"), ("dropout", 0.2)]
    return (*layers, ("flatten",), ("dense", 3072), ("relu",), ("dropout", 0.5), ("dense", 10))


DLBENCH_CNNS: dict[str, tuple[Layer, ...]] = {
    "mnist": (("conv", 32, 3, "valid"), ("relu",), ("conv", 64, 3, "valid"), ("relu",), ("pool", 2, 2, "valid"),
              ("dropout", 0.25), ("flatten",), ("dense", 128), ("relu",), ("dropout", 0.5), ("dense", 10)),
    "cifar10": (("conv", 32, 3, "same"), ("relu",), ("conv", 32, 3, "valid"), ("relu",), ("pool", 2, 2, "valid"),
                ("dropout", 0.25), ("conv", 64, 3, "same"), ("relu",), ("conv", 64, 3, "valid"), ("relu",),
                ("pool", 2, 2, "valid"), ("dropout", 0.25), ("flatten",), ("dense", 512), ("relu",),
                ("dropout", 0.5), ("dense", 10)),
    "cifar100": (("conv", 128, 3, "same"), ("relu",), ("conv", 128, 3, "valid"), ("relu",), ("pool", 2, 2, "valid"),
                 ("dropout", 0.1), ("conv", 256, 3, "same"), ("relu",), ("conv", 256, 3, "valid"), ("relu",),
                 ("pool", 2, 2, "valid"), ("dropout", 0.25), ("conv", 512, 3, "same"), ("relu",),
                 ("conv", 512, 3, "valid"), ("relu",), ("pool", 2, 2, "valid"), ("dropout", 0.5), ("flatten",),
                 ("dense", 1024), ("relu",), ("dropout", 0.5), ("dense", 100)),
    "svhn": _svhn(),
}
INPUT_SHAPES = {"mnist": (28, 28, 1), "cifar10": (32, 32, 3), "cifar100": (32, 32, 3), "svhn": (32, 32, 3)}


@dataclass(frozen=True)
class Shaped:
    """One layer of a table with its input and output shape (H, W, C or (features,))."""

    index: int
    layer: Layer
    shape_in: tuple[int, ...]
    shape_out: tuple[int, ...]
    pad: tuple[int, int, int, int] = (0, 0, 0, 0)  # pool "same": (left, right, top, bottom), TF's rule

    @property
    def kind(self) -> str:
        return str(self.layer[0])

    @property
    def name(self) -> str:
        return f"{self.kind}{self.index}"


def _same_pad(n: int, k: int, s: int) -> tuple[int, int, int]:
    """TensorFlow's SAME padding along one axis: (output, pad before, pad after)."""
    out = math.ceil(n / s)
    total = max((out - 1) * s + k - n, 0)
    return out, total // 2, total - total // 2


def shapes(table: tuple[Layer, ...], input_shape: tuple[int, ...]) -> list[Shaped]:
    """Every layer with its shapes; a table that does not fit its input fails here, not in a framework."""
    out: list[Shaped] = []
    shape = tuple(input_shape)
    for i, layer in enumerate(table):
        kind = layer[0]
        pad = (0, 0, 0, 0)
        if kind == "conv":
            _, filters, k, mode = layer
            h, w, _c = shape
            if mode == "same":
                new: tuple[int, ...] = (h, w, int(filters))
            else:
                new = (h - int(k) + 1, w - int(k) + 1, int(filters))
        elif kind == "pool":
            _, k, s, mode = layer
            h, w, c = shape
            if mode == "same":
                oh, top, bottom = _same_pad(h, int(k), int(s))
                ow, left, right = _same_pad(w, int(k), int(s))
                new, pad = (oh, ow, c), (left, right, top, bottom)
            else:
                new = ((h - int(k)) // int(s) + 1, (w - int(k)) // int(s) + 1, c)
        elif kind == "flatten":
            new = (int(np.prod(shape)),)
        elif kind == "dense":
            new = (int(layer[1]),)
        elif kind in ("bn", "relu", "dropout"):
            new = shape
        else:
            raise WorkloadError(f"unknown layer kind {kind!r}")
        if min(new) < 1:
            raise WorkloadError(f"layer {i} {layer} leaves no output for input {shape}")
        out.append(Shaped(i, layer, shape, new, pad))
        shape = new
    return out


def param_count(table: tuple[Layer, ...], input_shape: tuple[int, ...]) -> int:
    """Trainable parameters from the table alone (batch-norm: scale and offset)."""
    total = 0
    for s in shapes(table, input_shape):
        if s.kind == "conv":
            k, cin, cout = int(s.layer[2]), s.shape_in[-1], s.shape_out[-1]
            total += cout * (cin * k * k + 1)
        elif s.kind == "dense":
            total += s.shape_out[0] * (s.shape_in[0] + 1)
        elif s.kind == "bn":
            total += 2 * s.shape_in[-1]
    return total


def initial_weights(table: tuple[Layer, ...], input_shape: tuple[int, ...], seed: int
                    ) -> dict[str, list[np.ndarray]]:
    """Keras-layout initial weights per parameterised layer (Keras' initialisers, drawn in numpy)."""
    rng = np.random.default_rng([seed, 2])
    out: dict[str, list[np.ndarray]] = {}
    for s in shapes(table, input_shape):
        if s.kind == "conv":
            k, cin, cout = int(s.layer[2]), s.shape_in[-1], s.shape_out[-1]
            out[s.name] = [glorot_uniform((k, k, cin, cout), cin * k * k, cout * k * k, rng), np.zeros(cout, np.float32)]
        elif s.kind == "dense":
            fin, fout = s.shape_in[0], s.shape_out[0]
            out[s.name] = [glorot_uniform((fin, fout), fin, fout, rng), np.zeros(fout, np.float32)]
        elif s.kind == "bn":
            c = s.shape_in[-1]
            out[s.name] = [np.ones(c, np.float32), np.zeros(c, np.float32), np.zeros(c, np.float32),
                           np.ones(c, np.float32)]  # gamma, beta, moving mean, moving variance
    return out


# -- the LSTMs of DLBench (Fig. 3) ------------------------------------------------------------------

@dataclass(frozen=True)
class TextNet:
    """Embedding -> stacked LSTM -> (dropout) -> dense, as DLBench's IMDB and PTB models."""

    vocab: int
    embed: int
    units: tuple[int, ...]
    outputs: int  # 1: binary (sigmoid) on the last state; vocab: next word at every step
    dropout: float = 0.0
    per_step: bool = False  # PTB: a prediction at every time step


def imdb_net(vocab: int) -> TextNet:
    """Embedding 32, LSTM 100 on the true (unpadded) length, one sigmoid output."""
    return TextNet(vocab=vocab, embed=32, units=(100,), outputs=1)


def ptb_net(vocab: int) -> TextNet:
    """Embedding 128, two LSTM layers of 1024, dropout 0.5, softmax over the vocabulary at each step."""
    return TextNet(vocab=vocab, embed=128, units=(1024, 1024), outputs=vocab, dropout=0.5, per_step=True)


def _orthogonal(rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Keras' Orthogonal initialiser for a (rows, cols) kernel."""
    a = rng.standard_normal((max(rows, cols), min(rows, cols)))
    q, r = np.linalg.qr(a)
    q = q * np.sign(np.diag(r))
    return (q if rows >= cols else q.T).astype(np.float32)


def text_initial_weights(net: TextNet, seed: int) -> dict[str, list[np.ndarray]]:
    """Keras-layout weights: embeddings; per LSTM kernel (in, 4u), recurrent (u, 4u), bias (4u); dense."""
    rng = np.random.default_rng([seed, 2])
    out: dict[str, list[np.ndarray]] = {"embedding": [rng.uniform(-0.05, 0.05, (net.vocab, net.embed)).astype(np.float32)]}
    fin = net.embed
    for i, u in enumerate(net.units):
        bias = np.zeros(4 * u, np.float32)
        bias[u : 2 * u] = 1.0  # unit forget bias; gate order i, f, c, o in both frameworks
        out[f"lstm{i}"] = [glorot_uniform((fin, 4 * u), fin, 4 * u, rng), _orthogonal(u, 4 * u, rng), bias]
        fin = u
    out["dense"] = [glorot_uniform((fin, net.outputs), fin, net.outputs, rng), np.zeros(net.outputs, np.float32)]
    return out


def text_param_count(net: TextNet) -> int:
    """Keras' count (one LSTM bias per layer; PyTorch's nn.LSTM carries a second, redundant one)."""
    total, fin = net.vocab * net.embed, net.embed
    for u in net.units:
        total += 4 * u * (fin + u + 1)
        fin = u
    return total + net.outputs * (fin + 1)
