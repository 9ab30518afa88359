"""DLBench's encoder-decoder (Fig. 3c) in PyTorch: nn.Embedding, nn.LSTM, nn.Linear; the protocol of train_torch.

One trial, as :mod:`kit.workloads.train_torch` runs the other models: untimed
warm-up (then the initial weights and a fresh optimizer), the timed ``train``
phase (every epoch one pass over the block's shuffled order, gathered on the
device; teacher forcing, cross-entropy over the target tokens with padding
ignored; the test accuracy between epochs with ``eval_each_epoch``, timed
apart), the timed ``infer`` phase (teacher-forced per-token test accuracy,
the paper's metric), then, untimed, greedy decoding of the test sources for
BLEU. The encoder reads each source up to its true length (packed), as Keras'
masked LSTM does, so both start the decoder from the same state.
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

from kit.workloads import seq2seq
from kit.workloads.common import Markers
from kit.workloads.device import EpochLog, min_phase_s, pass_results, repeat_inference, repeat_training
from kit.workloads.tasks import epoch_order, steps_per_epoch
from kit.workloads.torch_env import device_sync, is_oom, setup, torch_env
from kit.workloads.train_torch import make_optimizer, param_count

__all__ = ["Seq2Seq", "build", "is_oom", "run"]

State = tuple[torch.Tensor, torch.Tensor]


class Seq2Seq(nn.Module):
    """Embedding -> LSTM (encoder); its final (h, c) -> LSTM over the embedded decoder input -> Linear."""

    def __init__(self, net: seq2seq.S2SNet) -> None:
        super().__init__()
        self.enc_embedding = nn.Embedding(net.src_vocab, net.embed)
        self.enc_lstm = nn.LSTM(net.embed, net.units, batch_first=True)
        self.dec_embedding = nn.Embedding(net.tgt_vocab, net.embed)
        self.dec_lstm = nn.LSTM(net.embed, net.units, batch_first=True)
        self.dense = nn.Linear(net.units, net.tgt_vocab)

    def encode(self, src: torch.Tensor, lengths: torch.Tensor) -> State:
        packed = nn.utils.rnn.pack_padded_sequence(self.enc_embedding(src), lengths, batch_first=True,
                                                   enforce_sorted=False)
        _, state = self.enc_lstm(packed)
        return state

    def forward(self, src: torch.Tensor, lengths: torch.Tensor, dec_in: torch.Tensor) -> torch.Tensor:
        out, _ = self.dec_lstm(self.dec_embedding(dec_in), self.encode(src, lengths))
        return self.dense(out)

    def step(self, tok: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        out, state = self.dec_lstm(self.dec_embedding(tok[:, None]), state)
        return self.dense(out[:, 0]), state


def load_weights(model: Seq2Seq, weights: dict[str, list[np.ndarray]]) -> None:
    """Keras-layout weights in; PyTorch's second LSTM bias (bias_hh) zeroed and frozen, as Keras has one."""
    def t(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a))

    with torch.no_grad():
        model.enc_embedding.weight.copy_(t(weights["enc_embedding"][0]))
        model.dec_embedding.weight.copy_(t(weights["dec_embedding"][0]))
        for name in ("enc_lstm", "dec_lstm"):
            lstm, (kernel, rec, bias) = getattr(model, name), weights[name]
            lstm.weight_ih_l0.copy_(t(kernel).T)
            lstm.weight_hh_l0.copy_(t(rec).T)
            lstm.bias_ih_l0.copy_(t(bias))
            lstm.bias_hh_l0.zero_()
            lstm.bias_hh_l0.requires_grad_(False)
        model.dense.weight.copy_(t(weights["dense"][0]).T)
        model.dense.bias.copy_(t(weights["dense"][1]))


def build(net: seq2seq.S2SNet, shared: bool, seed: int) -> Seq2Seq:
    """The model; with ``shared`` its initial weights are the numpy-drawn ones, else PyTorch's own."""
    model = Seq2Seq(net)
    if shared:
        load_weights(model, seq2seq.initial_weights(net, seed))
    return model


def greedy(model: Seq2Seq, src: torch.Tensor, lengths: torch.Tensor, steps: int) -> torch.Tensor:
    """Greedy decoding from <start>, ``steps`` tokens (the caller cuts at <end>)."""
    state = model.encode(src, lengths)
    tok = torch.full((src.shape[0],), seq2seq.START, dtype=torch.long, device=src.device)
    out = []
    for _ in range(steps):
        logits, state = model.step(tok, state)
        tok = logits.argmax(dim=-1)
        out.append(tok)
    return torch.stack(out, dim=1)


def run(req: dict[str, Any], data_dir: Path, markers: Markers) -> tuple[dict[str, Any], dict[str, Any]]:
    wl, seed = req["workload"], int(req["seed"])
    if req.get("threads"):
        torch.set_num_threads(int(req["threads"]))
    torch.manual_seed(seed)
    device, tf32 = setup(req)
    markers.sync = lambda: device_sync(device)
    task = seq2seq.load_task(req, data_dir)
    shared = wl["defaults"] == "shared"
    bs, ibs, epochs = int(wl["batch_size"]), int(wl["infer_batch_size"]), int(wl["epochs"])
    n = len(task.src_tr)
    steps = steps_per_epoch(wl, n)

    def dev(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(a).to(device)

    st, dit, dot = dev(task.src_tr), dev(task.dec_in_tr), dev(task.dec_out_tr)
    lt = torch.from_numpy(task.len_tr)  # lengths stay on the CPU (packing)
    se, die = dev(task.src_te), dev(task.dec_in_te)
    le = torch.from_numpy(task.len_te)
    model = build(task.net, shared, seed).to(device)

    def train_epoch(opt: torch.optim.Optimizer, order: np.ndarray, n_steps: int) -> float:
        model.train()
        idx = torch.from_numpy(order[: n_steps * bs]).to(device)
        s_e, i_e, o_e, l_e = st[idx], dit[idx], dot[idx], lt[idx.cpu()]
        total = torch.zeros((), device=device)
        for i in range(n_steps):
            sl = slice(i * bs, (i + 1) * bs)
            opt.zero_grad(set_to_none=True)
            logits = model(s_e[sl], l_e[sl], i_e[sl])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), o_e[sl].reshape(-1),
                                   ignore_index=seq2seq.PAD)
            loss.backward()
            opt.step()
            total += loss.detach()
        return float(total.cpu()) / n_steps

    def predict() -> np.ndarray:
        """Teacher-forced next-token predictions on the test set (the paper's accuracy)."""
        model.eval()
        out = []
        with torch.inference_mode():
            for i in range(0, len(se), ibs):
                out.append(model(se[i : i + ibs], le[i : i + ibs], die[i : i + ibs]).argmax(dim=-1))
        return torch.cat(out).cpu().numpy()

    def counts(pred: np.ndarray) -> seq2seq.TokenCounts:
        c = seq2seq.TokenCounts()
        c.add(pred, task.dec_out_te)
        return c

    init = copy.deepcopy(model.state_dict())
    warm = int(wl["warmup_steps"])
    if warm > 0:
        markers.start("warmup")
        train_epoch(make_optimizer(wl, model.parameters(), shared), np.arange(n), min(warm, steps))
        predict()
        markers.end("warmup")
        model.load_state_dict(init)
    rng_cpu = torch.get_rng_state()
    rng_cuda = torch.cuda.get_rng_state_all() if device.type == "cuda" else None

    def reset() -> None:
        model.load_state_dict(init)
        torch.set_rng_state(rng_cpu)
        if rng_cuda is not None:
            torch.cuda.set_rng_state_all(rng_cuda)

    each = bool(wl.get("eval_each_epoch", False))
    logs: list[EpochLog] = []

    def train_run() -> EpochLog:
        opt = make_optimizer(wl, [p for p in model.parameters() if p.requires_grad], shared)
        log = EpochLog()
        logs.append(log)
        for e in range(epochs):
            device_sync(device)
            t0 = time.perf_counter()
            log.loss.append(train_epoch(opt, epoch_order(n, seed, e), steps))
            device_sync(device)
            log.train_s.append(time.perf_counter() - t0)
            acc = None
            if each and e < epochs - 1:
                t1 = time.perf_counter()
                acc = counts(predict()).accuracy
                log.eval_s += time.perf_counter() - t1
            log.acc.append(acc)
            markers.event("epoch_end", epoch=e + 1, train_s=log.train_s[-1], train_loss=log.loss[-1],
                          test_accuracy=acc, train_pass=len(logs))
        return log

    train_tokens = sum(task.train_tokens(epoch_order(n, seed, e)[: steps * bs]) for e in range(epochs))
    min_s = min_phase_s(req)
    markers.start("train")
    trained = repeat_training(train_run, reset, min_s, lambda: device_sync(device))
    train_phase_s = markers.end("train", images=train_tokens * trained.passes, passes=trained.passes)
    markers.start("infer")
    inferred = repeat_inference(predict, min_s, lambda: device_sync(device))
    infer_s = inferred.per_pass_s(markers.end("infer", images=task.test_tokens * inferred.passes,
                                              passes=inferred.passes))
    t0 = time.perf_counter()  # BLEU: not the paper's protocol, untimed by the phases
    model.eval()
    with torch.inference_mode():
        decoded = torch.cat([greedy(model, se[i : i + ibs], le[i : i + ibs], task.dec_out_te.shape[1])
                             for i in range(0, len(se), ibs)]).cpu().numpy()
    bleu, bleu_s = seq2seq.bleu_of(decoded, task), time.perf_counter() - t0
    log = trained.result
    final = counts(inferred.result)
    if each:
        log.acc[-1] = final.accuracy
    evals = [x.eval_s for x in logs]
    results = seq2seq.trial_results(task, steps * bs, train_tokens, epochs, trained.per_pass_s(train_phase_s),
                                    sum(evals) / len(evals), infer_s, log, final, param_count(model), each,
                                    bleu, bleu_s)
    results.update(pass_results(trained, inferred, evals))
    return results, torch_env(device, tf32, "fp32", conv_dominant=False)
