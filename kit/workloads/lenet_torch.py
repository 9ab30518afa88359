"""LeNet-5 on MNIST in PyTorch (runs inside the framework image)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from kit.workloads import lenet
from kit.workloads.common import Markers, data_order, load_mnist
from kit.workloads.device import min_phase_s, pass_results, repeat_inference, repeat_training
from kit.workloads.torch_env import device_sync, is_oom, setup, torch_env

__all__ = ["build", "is_oom", "load_weights", "param_count", "run"]


def build(seed: int) -> nn.Sequential:
    """The LeNet-5 of ``lenet.LAYERS`` with the shared initial weights."""
    layers: list[nn.Module] = []
    for name, kind, p in lenet.LAYERS:
        if kind == "conv":
            cin, cout, k, pad = p
            layers += [nn.Conv2d(cin, cout, k, padding=pad), nn.ReLU()]
            if name != "c5":
                layers.append(nn.MaxPool2d(2))
        else:
            if name == "f6":
                layers.append(nn.Flatten())
            fin, fout = p
            layers.append(nn.Linear(fin, fout))
            if name != "out":
                layers.append(nn.ReLU())
    model = nn.Sequential(*layers)
    load_weights(model, lenet.initial_weights(seed))
    return model


def load_weights(model: nn.Sequential, weights: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    """Copy Keras-layout numpy weights into the model (transposing kernels)."""
    params = [m for m in model if isinstance(m, (nn.Conv2d, nn.Linear))]
    with torch.no_grad():
        for (name, kind, _), module in zip(lenet.LAYERS, params, strict=True):
            w, b = weights[name]
            w_t = np.transpose(w, (3, 2, 0, 1)) if kind == "conv" else w.T
            module.weight.copy_(torch.from_numpy(np.ascontiguousarray(w_t)))
            assert module.bias is not None  # build() makes every layer with its bias
            module.bias.copy_(torch.from_numpy(b))


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def run(req: dict[str, Any], data_dir: Path, markers: Markers) -> tuple[dict[str, Any], dict[str, Any]]:
    """One trial: untimed warm-up, the timed training run, the timed inference pass.

    With ``min_phase_s`` each timed phase repeats its unit until it lasts that
    long: the whole training run (every step of every epoch, each pass from
    the shared initial weights with a fresh optimizer, so the loss and the
    accuracy are those of one protocol run) and the inference pass.
    ``train_time_s`` and ``infer_time_s`` stay the time of one pass (the
    phase's time per pass, see :meth:`PhasePasses.per_pass_s`); every pass's
    time is kept (``train_pass_times_s``, ``infer_pass_times_s``).
    """
    wl, ds, seed = req["workload"], req["dataset"], int(req["seed"])
    if req.get("threads"):
        torch.set_num_threads(int(req["threads"]))
    torch.manual_seed(seed)
    device, tf32 = setup(req)
    markers.sync = lambda: device_sync(device)

    x_tr, y_tr, x_te, y_te = load_mnist(data_dir, ds["source"], ds.get("train_size"), ds.get("test_size"))
    norm = str(wl.get("input_norm", "none"))
    x_tr, x_te = lenet.normalise(x_tr, norm), lenet.normalise(x_te, norm)
    bs = int(wl["batch_size"])
    steps = int(wl["steps_per_epoch"] or len(x_tr) // bs)  # None: every full batch
    order = data_order(len(x_tr), seed)[: steps * bs]
    xt = torch.from_numpy(x_tr[order][:, None]).to(device)
    yt = torch.from_numpy(y_tr[order]).to(device)
    xe = torch.from_numpy(x_te[:, None]).to(device)
    loss_fn = nn.CrossEntropyLoss()

    def train(model: nn.Module, n_steps: int, epochs: int) -> float:
        """Train; returns the mean loss of the last epoch (read back once)."""
        opt = torch.optim.SGD(model.parameters(), lr=float(wl["learning_rate"]), momentum=float(wl["momentum"]))
        model.train()
        total = torch.zeros((), device=device)
        for _ in range(epochs):
            total = torch.zeros((), device=device)
            for i in range(n_steps):
                xb, yb = xt[i * bs : (i + 1) * bs], yt[i * bs : (i + 1) * bs]
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(model(xb), yb)
                loss.backward()
                opt.step()
                total += loss.detach()
        return float(total.cpu()) / max(n_steps, 1)

    def infer(model: nn.Module) -> np.ndarray:
        model.eval()
        ibs = int(wl["infer_batch_size"])
        preds = []
        with torch.inference_mode():
            for i in range(0, len(xe), ibs):
                preds.append(model(xe[i : i + ibs]).argmax(dim=1))
            return torch.cat(preds).cpu().numpy()

    init = lenet.initial_weights(seed)
    model = build(seed).to(device)
    # Warm-up on the timed model, then back to the shared initial weights and
    # a fresh optimizer: one-time costs (kernel selection, allocator growth)
    # fall outside the timed phases in both frameworks alike.
    warm = int(wl["warmup_steps"])
    if warm > 0:
        markers.start("warmup")
        train(model, min(warm, steps), 1)
        infer(model)
        markers.end("warmup")
        load_weights(model, init)

    # the loss of the shared initial weights on the first batch (untimed): the equivalence check asks that training
    # moves the loss before it calls losses that agree the same model's (kit.analysis.equivalence)
    with torch.no_grad():
        initial_loss = float(loss_fn(model(xt[:bs]), yt[:bs]).cpu())
    epochs, min_s = int(wl["epochs"]), min_phase_s(req)
    markers.start("train")
    trained = repeat_training(lambda: train(model, steps, epochs), lambda: load_weights(model, init), min_s,
                              lambda: device_sync(device))
    train_s = trained.per_pass_s(markers.end("train", images=steps * bs * epochs * trained.passes,
                                             passes=trained.passes))
    final_loss = trained.result
    markers.start("infer")
    inferred = repeat_inference(lambda: infer(model), min_s, lambda: device_sync(device))
    infer_s = inferred.per_pass_s(markers.end("infer", images=len(xe) * inferred.passes, passes=inferred.passes))
    pred = inferred.result

    accuracy = float((pred == y_te).mean())
    results: dict[str, Any] = {
        "train_time_s": train_s,
        "infer_time_s": infer_s,
        "train_loss": final_loss,
        "train_loss_initial": initial_loss,
        "test_accuracy": accuracy,
        "train_images": steps * bs * epochs,
        "test_images": len(xe),
        "train_throughput_ips": steps * bs * epochs / train_s,
        "infer_throughput_ips": len(xe) / infer_s,
        "param_count": param_count(model),
    }
    results.update(pass_results(trained, inferred))
    return results, torch_env(device, tf32, "fp32", conv_dominant=True)
