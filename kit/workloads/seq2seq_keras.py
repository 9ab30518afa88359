"""DLBench's encoder-decoder (Fig. 3c) in Keras 3: Embedding, LSTM(return_state), Dense; the protocol of train_keras.

The authors' Keras model (two Inputs, ``Embedding(mask_zero=True)``, the
encoder LSTM's states as the decoder LSTM's ``initial_state``, a dense softmax)
with the softmax moved into the loss; the same protocol as
:mod:`kit.workloads.seq2seq_torch` (warm-up then restored weights and zeroed
optimizer state, epochs over the shared batch order gathered on the device,
each step a ``tf.function`` with the cross-entropy over the target tokens,
padding masked; the test accuracy between epochs timed apart; the timed
teacher-forced inference; untimed greedy decoding for BLEU). The encoder's
mask makes its final state the last true word's, as PyTorch's packed LSTM.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from kit.workloads import seq2seq
from kit.workloads.common import Markers
from kit.workloads.device import EpochLog, min_phase_s, pass_results, repeat_inference, repeat_training
from kit.workloads.tasks import epoch_order, steps_per_epoch
from kit.workloads.tf_env import device_sync, is_oom, reset_optimizer, setup, tf_env
from kit.workloads.train_keras import make_optimizer, trainable_count

__all__ = ["build", "is_oom", "run"]


def build(net: seq2seq.S2SNet, src_len: int, tgt_len: int, shared: bool, seed: int
          ) -> tuple[keras.Model, keras.Model, keras.Model]:
    """(training model, encoder, one decoder step), sharing their layers; ``shared``: the numpy-drawn weights."""
    enc_in = keras.Input((src_len,), dtype="int32", name="src")
    x = keras.layers.Embedding(net.src_vocab, net.embed, mask_zero=True, name="enc_embedding")(enc_in)
    _, h, c = keras.layers.LSTM(net.units, return_state=True, name="enc_lstm")(x)
    dec_in = keras.Input((tgt_len - 1,), dtype="int32", name="dec_in")
    dec_embedding = keras.layers.Embedding(net.tgt_vocab, net.embed, mask_zero=True, name="dec_embedding")
    dec_lstm = keras.layers.LSTM(net.units, return_sequences=True, return_state=True, name="dec_lstm")
    dense = keras.layers.Dense(net.tgt_vocab, name="dense")
    y, _, _ = dec_lstm(dec_embedding(dec_in), initial_state=[h, c])
    model = keras.Model([enc_in, dec_in], dense(y))
    encoder = keras.Model(enc_in, [h, c])
    tok = keras.Input((1,), dtype="int32")
    h_in, c_in = keras.Input((net.units,)), keras.Input((net.units,))
    y1, h1, c1 = dec_lstm(dec_embedding(tok), initial_state=[h_in, c_in])
    step = keras.Model([tok, h_in, c_in], [dense(y1), h1, c1])
    if shared:
        for name, w in seq2seq.initial_weights(net, seed).items():
            model.get_layer(name).set_weights(w)
    return model, encoder, step


def masked_loss(target: Any, logits: Any) -> Any:
    """Mean cross-entropy over the target tokens (padding, id 0, excluded): PyTorch's ignore_index."""
    ce = keras.losses.sparse_categorical_crossentropy(target, logits, from_logits=True)
    mask = tf.cast(tf.not_equal(target, seq2seq.PAD), ce.dtype)
    return tf.reduce_sum(ce * mask) / tf.reduce_sum(mask)


def run(req: dict[str, Any], data_dir: Path, markers: Markers) -> tuple[dict[str, Any], dict[str, Any]]:
    wl, seed = req["workload"], int(req["seed"])
    device = setup(req)
    keras.utils.set_random_seed(seed)
    markers.sync = device_sync
    task = seq2seq.load_task(req, data_dir)
    shared = wl["defaults"] == "shared"
    bs, ibs, epochs = int(wl["batch_size"]), int(wl["infer_batch_size"]), int(wl["epochs"])
    n = len(task.src_tr)
    steps = steps_per_epoch(wl, n)
    t_len = int(task.dec_in_tr.shape[1]) + 1
    with tf.device(device):
        def i32(a: np.ndarray) -> Any:
            return tf.constant(a.astype(np.int32))

        st, dit, dot = i32(task.src_tr), i32(task.dec_in_tr), i32(task.dec_out_tr)
        se, die = i32(task.src_te), i32(task.dec_in_te)
        model, encoder, dec_step = build(task.net, int(task.src_tr.shape[1]), t_len, shared, seed)
        opt = make_optimizer(wl)
        opt.build(model.trainable_variables)

        @tf.function(reduce_retracing=True)
        def step(src: Any, d_in: Any, d_out: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = masked_loss(d_out, model([src, d_in], training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        @tf.function(reduce_retracing=True)
        def predict_step(src: Any, d_in: Any) -> Any:
            return tf.argmax(model([src, d_in], training=False), axis=-1)

        def train_epoch(order: np.ndarray, n_steps: int) -> float:
            idx = tf.constant(order[: n_steps * bs])
            s_e, i_e, o_e = tf.gather(st, idx), tf.gather(dit, idx), tf.gather(dot, idx)
            total = tf.zeros(())
            for i in range(n_steps):
                sl = slice(i * bs, (i + 1) * bs)
                total += step(s_e[sl], i_e[sl], o_e[sl])
            return float(total.numpy()) / n_steps

        def predict() -> np.ndarray:
            out = [predict_step(se[i : i + ibs], die[i : i + ibs]) for i in range(0, len(task.src_te), ibs)]
            return tf.concat(out, 0).numpy()

        def counts(pred: np.ndarray) -> seq2seq.TokenCounts:
            c = seq2seq.TokenCounts()
            c.add(pred, task.dec_out_te)
            return c

        init = model.get_weights()
        warm = int(wl["warmup_steps"])
        if warm > 0:
            markers.start("warmup")
            train_epoch(np.arange(n), min(warm, steps))
            predict()
            markers.end("warmup")
            model.set_weights(init)
            reset_optimizer(opt)
        start = [v.numpy() for v in model.variables]

        def reset() -> None:
            for v, a in zip(model.variables, start, strict=True):
                v.assign(a)
            reset_optimizer(opt)

        each = bool(wl.get("eval_each_epoch", False))
        logs: list[EpochLog] = []

        def train_run() -> EpochLog:
            log = EpochLog()
            logs.append(log)
            for e in range(epochs):
                device_sync()
                t0 = time.perf_counter()
                log.loss.append(train_epoch(epoch_order(n, seed, e), steps))
                device_sync()
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
        trained = repeat_training(train_run, reset, min_s, device_sync)
        train_phase_s = markers.end("train", images=train_tokens * trained.passes, passes=trained.passes)
        markers.start("infer")
        inferred = repeat_inference(predict, min_s, device_sync)
        infer_s = inferred.per_pass_s(markers.end("infer", images=task.test_tokens * inferred.passes,
                                                  passes=inferred.passes))
        t0 = time.perf_counter()  # BLEU: not the paper's protocol, untimed by the phases
        enc_fn = tf.function(lambda s: encoder(s, training=False), reduce_retracing=True)
        step_fn = tf.function(lambda t, h, c: dec_step([t, h, c], training=False), reduce_retracing=True)
        decoded = []
        for i in range(0, len(task.src_te), ibs):
            h, c = enc_fn(se[i : i + ibs])
            tok = tf.fill((int(h.shape[0]), 1), seq2seq.START)
            row = []
            for _ in range(t_len - 1):
                logits, h, c = step_fn(tok, h, c)
                tok = tf.cast(tf.argmax(logits, axis=-1), tf.int32)
                row.append(tok)
            decoded.append(tf.concat(row, 1).numpy())
        bleu, bleu_s = seq2seq.bleu_of(np.concatenate(decoded), task), time.perf_counter() - t0
    log = trained.result
    final = counts(inferred.result)
    if each:
        log.acc[-1] = final.accuracy
    evals = [x.eval_s for x in logs]
    results = seq2seq.trial_results(task, steps * bs, train_tokens, epochs, trained.per_pass_s(train_phase_s),
                                    sum(evals) / len(evals), infer_s, log, final, trainable_count(model), each,
                                    bleu, bleu_s)
    results.update(pass_results(trained, inferred, evals))
    return results, tf_env(device, "fp32", conv_dominant=False)
