"""Germino's and DLBench's models in PyTorch: build from the shared tables, train per epoch, time.

One trial: untimed warm-up (then back to the initial weights and a fresh
optimizer), the timed ``train`` phase (every epoch; each epoch gathers the
block's shuffled order on the device, then runs full batches; with
``eval_each_epoch`` the test accuracy after each epoch is measured between
epochs and its time is subtracted from the training time) and the timed
``infer`` phase (test accuracy). With ``min_phase_s`` each phase repeats its
unit until it lasts that long: the whole training run of every epoch (each
pass from the initial weights, random state and a fresh optimizer, so the
results are one protocol run's) and the inference pass; times stay per pass
(``train_phase_s`` too) and every pass's time is kept. Runs inside the
framework image.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from kit.workloads import nets
from kit.workloads.common import Markers, WorkloadError
from kit.workloads.device import EpochLog, min_phase_s, pass_results, repeat_inference, repeat_training
from kit.workloads.tasks import Task, epoch_order, knn_run, load_task, steps_per_epoch, trial_results
from kit.workloads.torch_env import device_sync, is_oom, setup, torch_env

__all__ = ["build", "is_oom", "run"]


class FlattenNHWC(nn.Module):
    """Flatten in Keras' (H, W, C) order so one dense kernel serves both frameworks."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 2, 3, 1).flatten(1)


class PoolSame(nn.Module):
    """Max pooling with TensorFlow's SAME padding (asymmetric, padded with -inf)."""

    def __init__(self, k: int, s: int, pad: tuple[int, int, int, int]) -> None:
        super().__init__()
        self.k, self.s, self.pad = k, s, pad

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(F.pad(x, self.pad, value=float("-inf")), self.k, self.s)


def build_cnn(table: tuple[nets.Layer, ...], input_shape: tuple[int, ...], shared: bool) -> nn.Sequential:
    """The table as nn.Sequential (NCHW); ``shared``: Keras' batch-norm constants and flatten order."""
    mods: list[nn.Module] = []
    for s in nets.shapes(table, input_shape):
        layer = s.layer
        if s.kind == "conv":
            k = int(layer[2])
            mods.append(nn.Conv2d(s.shape_in[-1], s.shape_out[-1], k, padding="same" if layer[3] == "same" else 0))
        elif s.kind == "pool":
            k, st = int(layer[1]), int(layer[2])
            mods.append(PoolSame(k, st, s.pad) if any(s.pad) else nn.MaxPool2d(k, st))
        elif s.kind == "bn":
            mods.append(nn.BatchNorm2d(s.shape_in[-1], momentum=0.01, eps=1e-3) if shared
                        else nn.BatchNorm2d(s.shape_in[-1]))
        elif s.kind == "relu":
            mods.append(nn.ReLU())
        elif s.kind == "dropout":
            mods.append(nn.Dropout(float(layer[1])))
        elif s.kind == "flatten":
            mods.append(FlattenNHWC() if shared else nn.Flatten())
        elif s.kind == "dense":
            mods.append(nn.Linear(s.shape_in[0], s.shape_out[0]))
    return nn.Sequential(*mods)


def load_cnn_weights(model: nn.Sequential, table: tuple[nets.Layer, ...], input_shape: tuple[int, ...],
                     weights: dict[str, list[np.ndarray]]) -> None:
    """Copy Keras-layout weights into the model (conv kernels to OIHW, dense kernels transposed)."""
    with torch.no_grad():
        for s, mod in zip(nets.shapes(table, input_shape), model, strict=True):
            w = weights.get(s.name)
            if w is None:
                continue
            t = [torch.from_numpy(np.ascontiguousarray(a)) for a in w]
            if s.kind == "conv":
                assert isinstance(mod, nn.Conv2d) and mod.bias is not None  # build_cnn: Conv2d, bias on
                mod.weight.copy_(t[0].permute(3, 2, 0, 1))
                mod.bias.copy_(t[1])
            elif s.kind == "dense":
                assert isinstance(mod, nn.Linear)  # build_cnn: Linear, bias on
                mod.weight.copy_(t[0].T)
                mod.bias.copy_(t[1])
            elif s.kind == "bn":
                # build_cnn: BatchNorm2d, affine with running stats
                assert isinstance(mod, nn.BatchNorm2d) and mod.running_mean is not None and mod.running_var is not None
                mod.weight.copy_(t[0])
                mod.bias.copy_(t[1])
                mod.running_mean.copy_(t[2])
                mod.running_var.copy_(t[3])


class TextModel(nn.Module):
    """Embedding -> stacked LSTM -> dropout -> dense (IMDB: last true state; PTB: every step)."""

    def __init__(self, net: nets.TextNet) -> None:
        super().__init__()
        if len(set(net.units)) != 1:
            raise WorkloadError("stacked LSTMs of different widths are not supported")
        self.net = net
        self.embed = nn.Embedding(net.vocab, net.embed)
        self.lstm = nn.LSTM(net.embed, net.units[0], num_layers=len(net.units), batch_first=True)
        self.drop = nn.Dropout(net.dropout) if net.dropout else nn.Identity()
        self.fc = nn.Linear(net.units[-1], net.outputs)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        e = self.embed(x)
        if self.net.per_step:
            out, _ = self.lstm(e)
            return self.fc(self.drop(out))
        if lengths is None:
            raise WorkloadError("the last-state text model needs the true sequence lengths")
        packed = nn.utils.rnn.pack_padded_sequence(e, lengths, batch_first=True, enforce_sorted=False)
        _, (h, _) = self.lstm(packed)
        return self.fc(self.drop(h[-1])).squeeze(1)


def load_text_weights(model: TextModel, weights: dict[str, list[np.ndarray]]) -> None:
    """Keras-layout weights into the text model; PyTorch's second LSTM bias (bias_hh) is zeroed and frozen."""
    def t(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a))

    with torch.no_grad():
        model.embed.weight.copy_(t(weights["embedding"][0]))
        for i in range(len(model.net.units)):
            kernel, rec, bias = weights[f"lstm{i}"]
            getattr(model.lstm, f"weight_ih_l{i}").copy_(t(kernel).T)
            getattr(model.lstm, f"weight_hh_l{i}").copy_(t(rec).T)
            getattr(model.lstm, f"bias_ih_l{i}").copy_(t(bias))
            # Keras has one bias per gate; PyTorch's second (bias_hh) would double the bias's learning rate
            getattr(model.lstm, f"bias_hh_l{i}").zero_()
            getattr(model.lstm, f"bias_hh_l{i}").requires_grad_(False)
        model.fc.weight.copy_(t(weights["dense"][0]).T)
        model.fc.bias.copy_(t(weights["dense"][1]))


def build(task: Task, shared: bool, seed: int) -> nn.Module:
    """The trial's model; with ``shared`` its initial weights are the numpy-drawn ones."""
    if task.text is not None:
        model: nn.Module = TextModel(task.text)
        if shared:
            load_text_weights(model, nets.text_initial_weights(task.text, seed))  # type: ignore[arg-type]
        return model
    assert task.table is not None
    model = build_cnn(task.table, task.input_shape, shared)
    if shared:
        load_cnn_weights(model, task.table, task.input_shape, nets.initial_weights(task.table, task.input_shape, seed))
    return model


def make_optimizer(wl: dict[str, Any], params: Any, shared: bool) -> torch.optim.Optimizer:
    """The spec's optimizer and learning rate; other constants PyTorch's own, or Keras' when ``shared``."""
    name, lr = str(wl["optimizer"]), float(wl["learning_rate"])
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=float(wl["momentum"]))
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, eps=1e-7) if shared else torch.optim.Adam(params, lr=lr)
    if name == "adadelta":
        return torch.optim.Adadelta(params, lr=lr, rho=0.95, eps=1e-7) if shared else torch.optim.Adadelta(params, lr=lr)
    raise WorkloadError(f"optimizer {name!r} is not implemented in the PyTorch build")


def param_count(model: nn.Module) -> int:
    """Trainable parameters (as Keras' ``trainable_weights`` count them)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def run(req: dict[str, Any], data_dir: Path, markers: Markers) -> tuple[dict[str, Any], dict[str, Any]]:
    wl, seed = req["workload"], int(req["seed"])
    if req.get("threads"):
        torch.set_num_threads(int(req["threads"]))
    torch.manual_seed(seed)
    device, tf32 = setup(req)
    markers.sync = lambda: device_sync(device)
    task = load_task(req, data_dir)
    if task.kind == "knn":  # scikit-learn on the CPU, whatever the device: reported as what it is
        return knn_run(task, int(wl["knn_k"]), markers), torch_env(torch.device("cpu"), tf32, None)

    shared = wl["defaults"] == "shared"
    bs, ibs, epochs = int(wl["batch_size"]), int(wl["infer_batch_size"]), int(wl["epochs"])
    n = len(task.x_tr)
    steps = steps_per_epoch(wl, n)
    image = task.kind == "image"

    def to_dev(x: np.ndarray) -> torch.Tensor:
        arr = np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if image else x
        return torch.from_numpy(arr).to(device)

    xt, xe = to_dev(task.x_tr), to_dev(task.x_te)
    yt = torch.from_numpy(task.y_tr.astype(np.float32) if task.kind == "imdb" else task.y_tr).to(device)
    lt = torch.from_numpy(task.len_tr) if task.len_tr is not None else None  # lengths stay on the CPU (packing)
    le = torch.from_numpy(task.len_te) if task.len_te is not None else None
    model = build(task, shared, seed).to(device)
    loss_fn: nn.Module = nn.BCEWithLogitsLoss() if task.kind == "imdb" else nn.CrossEntropyLoss()

    def forward(x: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
        return model(x, lengths) if task.kind == "imdb" else model(x)

    def loss_of(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return loss_fn(out.reshape(-1, out.shape[-1]), y.reshape(-1)) if task.kind == "ptb" else loss_fn(out, y)

    def train_epoch(opt: torch.optim.Optimizer, order: np.ndarray, n_steps: int) -> float:
        model.train()
        idx = torch.from_numpy(order[: n_steps * bs]).to(device)
        x_e, y_e = xt[idx], yt[idx]
        l_e = lt[idx.cpu()] if lt is not None else None
        total = torch.zeros((), device=device)
        for i in range(n_steps):
            sl = slice(i * bs, (i + 1) * bs)
            opt.zero_grad(set_to_none=True)
            loss = loss_of(forward(x_e[sl], l_e[sl] if l_e is not None else None), y_e[sl])
            loss.backward()
            opt.step()
            total += loss.detach()
        return float(total.cpu()) / n_steps

    def predict() -> np.ndarray:
        model.eval()
        out = []
        with torch.inference_mode():
            for i in range(0, len(xe), ibs):
                logits = forward(xe[i : i + ibs], le[i : i + ibs] if le is not None else None)
                out.append((logits > 0).long() if task.kind == "imdb" else logits.argmax(dim=-1))
        return torch.cat(out).cpu().numpy()

    def accuracy(pred: np.ndarray) -> float:
        return float((pred == task.y_te).mean())

    init = copy.deepcopy(model.state_dict())
    warm = int(wl["warmup_steps"])
    if warm > 0:
        # untimed: first-call costs (allocator, kernel choice) stay out of the timed phases
        markers.start("warmup")
        train_epoch(make_optimizer(wl, model.parameters(), shared), np.arange(n), min(warm, steps))
        predict()
        markers.end("warmup")
        model.load_state_dict(init)
    # every training pass starts from here: the initial weights, this random state (dropout), a fresh optimizer
    rng_cpu = torch.get_rng_state()
    rng_cuda = torch.cuda.get_rng_state_all() if device.type == "cuda" else None

    def reset() -> None:
        model.load_state_dict(init)
        torch.set_rng_state(rng_cpu)
        if rng_cuda is not None:
            torch.cuda.set_rng_state_all(rng_cuda)

    each = bool(wl.get("eval_each_epoch", False))
    logs: list[EpochLog] = []  # every pass's

    def train_run() -> EpochLog:
        """The protocol's training run: every epoch, the accuracy between epochs with ``eval_each_epoch``."""
        opt = make_optimizer(wl, model.parameters(), shared)
        log = EpochLog()
        logs.append(log)
        for e in range(epochs):
            device_sync(device)
            t0 = time.perf_counter()
            log.loss.append(train_epoch(opt, epoch_order(n, seed, e), steps))
            device_sync(device)
            log.train_s.append(time.perf_counter() - t0)
            acc = None
            if each and e < epochs - 1:  # the last epoch's accuracy is the infer phase's
                t1 = time.perf_counter()
                acc = accuracy(predict())
                log.eval_s += time.perf_counter() - t1
            log.acc.append(acc)
            markers.event("epoch_end", epoch=e + 1, train_s=log.train_s[-1], train_loss=log.loss[-1],
                          test_accuracy=acc, train_pass=len(logs))
        return log

    min_s = min_phase_s(req)
    markers.start("train")
    trained = repeat_training(train_run, reset, min_s, lambda: device_sync(device))
    train_phase_s = markers.end("train", images=steps * bs * epochs * task.units_per_example * trained.passes,
                                passes=trained.passes)
    markers.start("infer")
    inferred = repeat_inference(predict, min_s, lambda: device_sync(device))
    infer_s = inferred.per_pass_s(markers.end("infer", images=len(task.x_te) * task.units_per_example
                                              * inferred.passes, passes=inferred.passes))
    log = trained.result
    final = accuracy(inferred.result)
    if each:
        log.acc[-1] = final
    # per pass, as one protocol run reports them: the phase's seconds less the resets, the mean accuracy checks
    evals = [x.eval_s for x in logs]
    results = trial_results(task, steps * bs, epochs, trained.per_pass_s(train_phase_s), sum(evals) / len(evals),
                            infer_s, log.train_s, log.loss, log.acc, final, param_count(model), each)
    results.update(pass_results(trained, inferred, evals))
    return results, torch_env(device, tf32, "fp32", conv_dominant=task.kind == "image")

