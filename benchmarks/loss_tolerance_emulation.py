"""Where the equivalence check's loss tolerances come from: an emulation of the arithmetic differences between
two framework builds of one model, on the kit's LeNet-5 and MNIST, run for real with PyTorch on the CPU.

    python benchmarks/loss_tolerance_emulation.py [--blocks 4] [--steps 600] [--momentum M] [--input-norm N] [--data DIR]

The check (kit/analysis/equivalence.py) compares the mean training loss of the two arms of a block, which start
from the same initial weights and see the same batches, and calls them consistent with the same model when the
relative gap stays within a tolerance that depends on the number format the convolutions and matmuls ran in. This
script measures the gaps that tolerance must cover and the gaps it should not cover.

Each block draws its initial weights and batch order from one seed (kit.workloads.lenet.initial_weights and
kit.workloads.common.data_order, as a trial does) and trains the kit's LeNet-5 (kit.workloads.lenet_torch.build)
with SGD at learning rate 0.01, the momentum and input normalisation of the LeNet paper profile
(experiments/florencio2019_lenet: momentum 0.5, (x - 0.1307) / 0.3081; ``--momentum 0 --input-norm none`` is the
plain SGD on [0, 1] pixels the kit ran before issue 25), batches of 100 images of the MNIST test set (the 10,000
images of t10k, which is what these machines hold; the paper profile trains on the 60,000 of the training set), for
``--steps`` steps (600: the paper's epoch). The reference arm runs PyTorch's own fp32 kernels. Each other arm
differs in one way, and its gap is |L - L_ref| / L_ref of the mean training loss L over the steps:

* ``kernels``: every convolution and linear layer computed by another route (its forward, input and weight
  gradients from torch.nn.grad / explicit matmuls in a custom autograd function), in fp32: another summation
  order, as another framework's kernels have;
* ``ulp``: that route, with every output and every gradient of every convolution/linear moved by 1 ulp to a
  random neighbour (another summation order's rounding, at its largest per op);
* ``rel1e-5``: the same with a uniform relative error of up to 1e-5 per element (about 100 ulp: FFT or
  Winograd algorithms a GPU library may pick);
* ``tf32-trunc``: both operands of every convolution/linear (forward and both gradients) truncated to TF32's
  10 mantissa bits (tensor cores may read only the first 10 bits), products summed in fp32;
* ``tf32-rne``: the operands rounded to nearest even to 10 bits instead;
* ``bf16``: operands and outputs of every convolution/linear rounded to bfloat16 (7 bits, round to nearest even,
  as autocast and Keras' mixed policies convert);
* ``batch-order``: fp32 kernels, the same initial weights, the batches in another order (another data_order seed);
* ``init``: fp32 kernels, the same batches, other initial weights (another initial_weights seed).

The first six should fall within the tolerance of their format; the last two show what the check can and cannot
detect. Figures are printed, never asserted. One framework thread: the kernels are deterministic for a fixed
thread count, so a rerun prints the same numbers on the same CPU and library build.
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.grad import conv2d_input, conv2d_weight

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kit.analysis.equivalence import (  # noqa: E402
    LOSS_EPS,
    LOSS_TOL_FACTOR_ROUNDING,
    LOSS_TOL_FACTOR_TRUNCATING,
    LOSS_TOL_FP32,
)
from kit.spec import load_spec  # noqa: E402
from kit.workloads import lenet, lenet_torch  # noqa: E402
from kit.workloads.common import data_order, read_idx  # noqa: E402

Round = Callable[[torch.Tensor], torch.Tensor]
SEED_BASE = 20261126  # the blocks' seeds: SEED_BASE + block (weights and batch order, as a trial's seed gives both)
OTHER = 7919  # added to a block's seed for the other batch order / other initial weights


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def _tf32_trunc(x: torch.Tensor) -> torch.Tensor:
    """Keep the first 10 of fp32's 23 mantissa bits (drop the other 13): what a tensor core may read."""
    return (x.contiguous().view(torch.int32) & ~0x1FFF).view(torch.float32)


def _tf32_rne(x: torch.Tensor) -> torch.Tensor:
    """Round fp32 to 10 mantissa bits, to nearest, ties to even."""
    bits = x.contiguous().view(torch.int32)
    bits = bits + 0xFFF + ((bits >> 13) & 1)
    return (bits & ~0x1FFF).view(torch.float32)


def _bf16(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).to(torch.float32)


def _ulp(gen: torch.Generator) -> Round:
    """Each element moved to a random one of its two fp32 neighbours (1 ulp)."""
    def f(x: torch.Tensor) -> torch.Tensor:
        up = torch.rand(x.shape, generator=gen) < 0.5
        return torch.nextafter(x, torch.where(up, math.inf, -math.inf).to(x.dtype))
    return f


def _rel(gen: torch.Generator, size: float) -> Round:
    """Each element times (1 + u), u uniform in [-size, size]."""
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * (1 + (torch.rand(x.shape, generator=gen, dtype=x.dtype) * 2 - 1) * size)
    return f


class _Op(torch.autograd.Function):
    """A convolution or linear layer with its operands rounded by ``q_in`` and its results (output, input
    gradient, weight gradient) by ``q_out``, forward and backward: each product the format would form."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, pad: int, q_in: Round,
                q_out: Round) -> torch.Tensor:
        xq, wq = q_in(x), q_in(w)
        ctx.save_for_backward(xq, wq)
        ctx.pad, ctx.q_in, ctx.q_out = pad, q_in, q_out
        out = F.conv2d(xq, wq, None, padding=pad) if w.dim() == 4 else xq @ wq.t()
        return q_out(out) + (b.view(1, -1, 1, 1) if w.dim() == 4 else b)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
        (go,) = grads
        xq, wq = ctx.saved_tensors
        g = ctx.q_in(go)
        if wq.dim() == 4:
            gx = conv2d_input(xq.shape, wq, g, padding=ctx.pad)
            gw = conv2d_weight(xq, wq.shape, g, padding=ctx.pad)
            gb = go.sum((0, 2, 3))
        else:
            gx, gw, gb = g @ wq, g.t() @ xq, go.sum(0)
        return ctx.q_out(gx), ctx.q_out(gw), gb, None, None, None


class _Emulated(nn.Module):
    """Wraps a Conv2d or Linear of the kit's model (its own parameters: the optimizer updates them alike)."""

    def __init__(self, layer: nn.Conv2d | nn.Linear, q_in: Round, q_out: Round) -> None:
        super().__init__()
        self.layer, self.q_in, self.q_out = layer, q_in, q_out
        pad = layer.padding if isinstance(layer, nn.Conv2d) else 0
        self.pad = int(pad[0] if isinstance(pad, tuple) else pad)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = _Op.apply(x, self.layer.weight, self.layer.bias, self.pad, self.q_in, self.q_out)
        return out


def emulated(model: nn.Sequential, q_in: Round, q_out: Round) -> nn.Sequential:
    for i, m in enumerate(model):
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            model[i] = _Emulated(m, q_in, q_out)
    return model


def mean_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor, order: np.ndarray, steps: int, bs: int,
              momentum: float) -> float:
    """SGD (learning rate 0.01) over ``steps`` batches in ``order`` (cycled); the mean batch loss."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=momentum)
    loss_fn = nn.CrossEntropyLoss()
    per = len(order) // bs
    total = 0.0
    for s in range(steps):
        idx = torch.from_numpy(order[(s % per) * bs: (s % per + 1) * bs])
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        total += float(loss.detach())
    return total / steps


def arms(seed: int) -> dict[str, tuple[Callable[[], nn.Module], int]]:
    """Each arm: (a model factory, the seed of its batch order)."""
    gen = torch.Generator().manual_seed(seed)

    def emu(q_in: Round, q_out: Round) -> Callable[[], nn.Module]:
        return lambda: emulated(lenet_torch.build(seed), q_in, q_out)

    return {
        "kernels": (emu(_identity, _identity), seed),
        "ulp": (emu(_identity, _ulp(gen)), seed),
        "rel1e-5": (emu(_identity, _rel(gen, 1e-5)), seed),
        "tf32-trunc": (emu(_tf32_trunc, _identity), seed),
        "tf32-rne": (emu(_tf32_rne, _identity), seed),
        "bf16": (emu(_bf16, _bf16), seed),
        "batch-order": (lambda: lenet_torch.build(seed), seed + OTHER),
        "init": (lambda: lenet_torch.build(seed + OTHER), seed),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=4, help="blocks (seeds): 4 keep a run under 10 min on 2 shared cores")
    ap.add_argument("--steps", type=int, default=600, help="SGD steps of 100 images per arm (600: the paper's epoch)")
    ap.add_argument("--data", type=Path, default=ROOT / "data" / "mnist-t10k", help="directory of the MNIST t10k files")
    paper = load_spec(ROOT / "experiments" / "florencio2019_lenet" / "experiment.toml").workload
    ap.add_argument("--momentum", type=float, default=paper.momentum, help="SGD momentum (default: the paper profile's)")
    ap.add_argument("--input-norm", default=paper.params["input_norm"], choices=lenet.INPUT_NORMS,
                    help="input normalisation (default: the paper profile's)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    x_np = read_idx(args.data / "t10k-images-idx3-ubyte.gz").astype(np.float32) / np.float32(255.0)
    y_np = read_idx(args.data / "t10k-labels-idx1-ubyte.gz").astype(np.int64)
    x, y = torch.from_numpy(lenet.normalise(x_np, args.input_norm)[:, None]), torch.from_numpy(y_np)
    bs = 100
    print(f"loss tolerance emulation: LeNet-5 ({lenet.expected_param_count():,} parameters), MNIST t10k "
          f"({len(x):,} images, input_norm {args.input_norm}), {args.steps} SGD steps of {bs} (learning rate 0.01, "
          f"momentum {args.momentum:g}), {args.blocks} blocks")
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, python {platform.python_version()}, "
          "1 thread, deterministic algorithms")
    gaps: dict[str, list[float]] = {}
    t0 = time.monotonic()
    for block in range(args.blocks):
        seed = SEED_BASE + block
        ref = mean_loss(lenet_torch.build(seed), x, y, data_order(len(x), seed), args.steps, bs, args.momentum)
        line = [f"block {block} (seed {seed}): reference loss {ref:.5f}"]
        for name, (make, order_seed) in arms(seed).items():
            loss = mean_loss(make(), x, y, data_order(len(x), order_seed), args.steps, bs, args.momentum)
            gaps.setdefault(name, []).append(abs(loss - ref) / ref)
            line.append(f"{name} {gaps[name][-1]:.2e}")
        print("; ".join(line) + f"  [{time.monotonic() - t0:.0f} s]", flush=True)

    eps = {"fp32": 2.0**-23, "tf32": LOSS_EPS["tf32"], "bf16": LOSS_EPS["bf16"]}
    tol = {"fp32": LOSS_TOL_FP32, "tf32": LOSS_TOL_FACTOR_TRUNCATING * eps["tf32"],
           "fp16": LOSS_TOL_FACTOR_ROUNDING * LOSS_EPS["fp16"], "bf16": LOSS_TOL_FACTOR_ROUNDING * eps["bf16"]}
    unit = {"kernels": "fp32", "ulp": "fp32", "rel1e-5": "fp32", "tf32-trunc": "tf32", "tf32-rne": "tf32",
            "bf16": "bf16", "batch-order": "fp32", "init": "fp32"}
    print()
    print(f"relative gap of the mean training loss to the fp32 reference over {args.blocks} blocks "
          f"(the kit's tolerances: fp32 {tol['fp32']:.1e}, tf32 {tol['tf32']:.1e} = "
          f"{LOSS_TOL_FACTOR_TRUNCATING:g} eps, fp16 {tol['fp16']:.1e}, bf16 {tol['bf16']:.1e} = "
          f"{LOSS_TOL_FACTOR_ROUNDING:g} eps)")
    print(f"{'arm':<12} {'min':>9} {'median':>9} {'max':>9} {'max/eps':>9}  tolerance of its format: margin")
    for name, g in gaps.items():
        fmt = unit[name]
        e = eps[fmt]
        lo, med, hi = min(g), float(np.median(g)), max(g)
        margin = tol[fmt] / hi if hi > 0 else math.inf
        print(f"{name:<12} {lo:9.2e} {med:9.2e} {hi:9.2e} {hi / e:9.3g}  {fmt} {tol[fmt]:.1e}: "
              f"{'within, x' + format(margin, '.3g') if hi < tol[fmt] else 'OUTSIDE (x' + format(margin, '.3g') + ')'}")
    print()
    for name, what in (("batch-order", "a different batch order"), ("init", "a different initialisation")):
        g = gaps[name]
        inside = ", ".join(f"{fmt} {tol[fmt]:.1e}: {sum(x < tol[fmt] for x in g)} of {len(g)}"
                           for fmt in ("fp32", "fp16", "tf32", "bf16"))
        print(f"{what}: {min(g):.1e} to {max(g):.1e}; blocks within each tolerance (not detectable): {inside}")
    print(f"total {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
