"""DLBench's English-Spanish encoder-decoder (Fig. 3c), framework-neutral: the network, its data, BLEU (numpy).

Both builds (:mod:`kit.workloads.seq2seq_torch`, :mod:`kit.workloads.seq2seq_keras`)
read the sizes here, so they cannot drift apart: two inputs, two embeddings of
256, an encoder LSTM of 256 whose final (h, c) start the decoder LSTM of 256, a
dense layer over the target vocabulary (softmax in the loss), trained with
teacher forcing (the decoder reads the target shifted right). With
``defaults = "shared"`` the initial weights are drawn here in Keras' layout
with Keras' initialisers (the helpers of :mod:`kit.workloads.nets`).

The metric is the paper's: per-token accuracy under teacher forcing, padding
masked (the authors' Keras model: ``mask_zero=True`` carries the mask into
Keras 2.2.4's loss and metrics); the accuracy counting padding, as their
PyTorch and TensorFlow code computed it, is recorded beside it. Corpus BLEU-4
of greedy decoding is a secondary metric the paper did not report.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kit.workloads import anki
from kit.workloads.common import WorkloadError, glorot_uniform
from kit.workloads.nets import _orthogonal

PAD, START, END = anki.PAD, anki.START, anki.END


@dataclass(frozen=True)
class S2SNet:
    """Sizes of the encoder-decoder."""

    src_vocab: int
    tgt_vocab: int
    embed: int = 256
    units: int = 256


@dataclass(frozen=True)
class S2STask:
    """One trial's data: encoder input, decoder input (target without its last step), decoder target."""

    net: S2SNet
    src_tr: np.ndarray
    len_tr: np.ndarray
    dec_in_tr: np.ndarray
    dec_out_tr: np.ndarray
    src_te: np.ndarray
    len_te: np.ndarray
    dec_in_te: np.ndarray
    dec_out_te: np.ndarray

    @property
    def test_tokens(self) -> int:
        return int((self.dec_out_te != PAD).sum())

    def train_tokens(self, order: np.ndarray) -> int:
        """Target tokens (padding excluded) of the examples ``order`` names: the throughput unit."""
        return int((self.dec_out_tr[order] != PAD).sum())


def load_task(req: dict[str, Any], data_dir: Path) -> S2STask:
    """The trial's pairs (workload keys s2s_*), the network sized to their vocabularies."""
    wl, ds = req["workload"], req["dataset"] or {}
    if ds.get("name") != "spa_eng":
        raise WorkloadError(f"the encoder-decoder runs on spa_eng, not {ds.get('name')!r}")
    p = anki.load_pairs(data_dir, int(wl["s2s_pairs"]), ds.get("train_size"), ds.get("test_size"),
                        str(wl["s2s_source"]), int(wl["s2s_vocab"]), int(wl["s2s_max_len"]))
    net = S2SNet(len(p.src_vocab), len(p.tgt_vocab), int(wl.get("s2s_embed", 256)), int(wl.get("s2s_units", 256)))
    return S2STask(net, p.src_train, p.src_len_train, p.tgt_train[:, :-1], p.tgt_train[:, 1:],
                   p.src_test, p.src_len_test, p.tgt_test[:, :-1], p.tgt_test[:, 1:])


def param_count(net: S2SNet) -> int:
    """Keras' trainable count: two embeddings, two LSTMs (one bias per gate), the dense layer."""
    e, u = net.embed, net.units
    return (net.src_vocab + net.tgt_vocab) * e + 2 * 4 * u * (e + u + 1) + net.tgt_vocab * (u + 1)


def initial_weights(net: S2SNet, seed: int) -> dict[str, list[np.ndarray]]:
    """Keras-layout weights by layer name: embeddings U(-0.05, 0.05); LSTM kernel (in, 4u) Glorot, recurrent
    (u, 4u) orthogonal, bias (4u) zero with unit forget bias (gates i, f, c, o in both frameworks); dense."""
    rng = np.random.default_rng([seed, 3])
    e, u = net.embed, net.units
    out: dict[str, list[np.ndarray]] = {}
    for name, vocab in (("enc_embedding", net.src_vocab), ("dec_embedding", net.tgt_vocab)):
        out[name] = [rng.uniform(-0.05, 0.05, (vocab, e)).astype(np.float32)]
    for name in ("enc_lstm", "dec_lstm"):
        bias = np.zeros(4 * u, np.float32)
        bias[u : 2 * u] = 1.0
        out[name] = [glorot_uniform((e, 4 * u), e, 4 * u, rng), _orthogonal(u, 4 * u, rng), bias]
    out["dense"] = [glorot_uniform((u, net.tgt_vocab), u, net.tgt_vocab, rng), np.zeros(net.tgt_vocab, np.float32)]
    return out


@dataclass
class TokenCounts:
    """Correct predictions over the target tokens (padding masked) and over every position (padding counted)."""

    correct: int = 0
    tokens: int = 0
    correct_all: int = 0
    positions: int = 0

    def add(self, pred: np.ndarray, target: np.ndarray) -> None:
        mask = target != PAD
        hit = pred == target
        self.correct += int((hit & mask).sum())
        self.tokens += int(mask.sum())
        self.correct_all += int(hit.sum())
        self.positions += int(hit.size)

    @property
    def accuracy(self) -> float:
        return self.correct / self.tokens if self.tokens else 0.0

    @property
    def accuracy_with_padding(self) -> float:
        return self.correct_all / self.positions if self.positions else 0.0


# -- BLEU (Papineni et al. 2002), corpus level, one reference per sentence --------------------------------

def sentence_ids(row: np.ndarray) -> list[int]:
    """The words of a decoded or reference row: up to the first <end> or padding, <start> dropped."""
    out = []
    for t in row.tolist():
        if t in (END, PAD):
            break
        if t != START:
            out.append(int(t))
    return out


def _ngrams(seq: list[int], n: int) -> Counter[tuple[int, ...]]:
    return Counter(tuple(seq[i : i + n]) for i in range(len(seq) - n + 1))


def bleu_stats(hyp: list[int], ref: list[int], max_n: int = 4) -> list[int]:
    """[c, r, matches_1, total_1, ..., matches_N, total_N]: clipped n-gram matches and hypothesis n-grams."""
    out = [len(hyp), len(ref)]
    for n in range(1, max_n + 1):
        h, r = _ngrams(hyp, n), _ngrams(ref, n)
        out += [sum(min(c, r[g]) for g, c in h.items()), max(len(hyp) - n + 1, 0)]
    return out


def corpus_bleu(hyps: list[list[int]], refs: list[list[int]], max_n: int = 4) -> float:
    """Corpus BLEU: n-gram counts summed over the corpus, geometric mean of the modified precisions with
    uniform weights, brevity penalty exp(1 - r/c) when the corpus is shorter than its references; no
    smoothing (a zero precision gives 0)."""
    if len(hyps) != len(refs):
        raise WorkloadError(f"BLEU: {len(hyps)} hypotheses for {len(refs)} references")
    tot = np.zeros(2 + 2 * max_n, dtype=np.int64)
    for hyp, ref in zip(hyps, refs, strict=True):
        tot += np.asarray(bleu_stats(hyp, ref, max_n), dtype=np.int64)
    c, r = int(tot[0]), int(tot[1])
    if c == 0:
        return 0.0
    log_p = 0.0
    for n in range(max_n):
        m, t = int(tot[2 + 2 * n]), int(tot[3 + 2 * n])
        if m == 0 or t == 0:
            return 0.0
        log_p += math.log(m / t) / max_n
    bp = 1.0 if c > r else math.exp(1.0 - r / c)
    return bp * math.exp(log_p)


def bleu_of(decoded: np.ndarray, task: S2STask) -> float:
    """BLEU-4 of greedy decodings (rows of ids) against the test targets."""
    return corpus_bleu([sentence_ids(row) for row in decoded], [sentence_ids(row) for row in task.dec_out_te])


def trial_results(task: S2STask, per_epoch: int, train_tokens: int, epochs: int, train_phase_s: float,
                  eval_s: float, infer_s: float, log: Any, final: TokenCounts, params: int, each: bool,
                  bleu: float, bleu_s: float) -> dict[str, Any]:
    """The keys of :func:`kit.workloads.tasks.trial_results`, throughput in target tokens (padding excluded).

    ``train_images``/``test_images`` keep their names (the analysis reads them) and count target tokens:
    every epoch's tokens over the epochs, the test set's tokens.
    """
    train_s = train_phase_s - eval_s
    out: dict[str, Any] = {
        "train_time_s": train_s,
        "infer_time_s": infer_s,
        "train_loss": log.loss[-1],
        "test_accuracy": final.accuracy,
        "test_accuracy_with_padding": final.accuracy_with_padding,
        "test_bleu4": bleu,
        "bleu_decode_s": bleu_s,
        "train_images": train_tokens,
        "test_images": task.test_tokens,
        "throughput_unit": "tokens",
        "train_throughput_ips": train_tokens / train_s,
        "infer_throughput_ips": task.test_tokens / infer_s,
        "param_count": params,
        "epochs": epochs,
        "train_examples_per_epoch": per_epoch,
        "train_pairs": len(task.src_tr),
        "test_pairs": len(task.src_te),
        "src_vocab": task.net.src_vocab,
        "tgt_vocab": task.net.tgt_vocab,
        "src_len": int(task.src_tr.shape[1]),
        "tgt_len": int(task.dec_in_tr.shape[1]) + 1,
        "epoch_train_s": log.train_s,
        "epoch_train_loss": log.loss,
        "train_phase_s": train_phase_s,
    }
    if each:
        out["epoch_test_accuracy"] = log.acc
        out["eval_between_epochs_s"] = eval_s
    return out
