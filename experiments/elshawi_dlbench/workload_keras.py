"""The dlbench workload in TensorFlow/Keras: the kit's shared training code, chosen by the trial's dataset.

The study folder owns the workload (its [study] table in experiment.toml: name, datasets, parameters); the
model code is the kit's shared library, which other studies use too. The contract (docs/writing-a-study.md):
``run(request, data_dir, markers) -> (results, env)`` and ``is_oom(exc)``.

Three families of DLBench's models, one module each (imported only when a trial needs it, so a CNN trial
never loads the detection code): the CNNs and LSTMs of Figs. 2-3a/b (kit.workloads.train_keras), the
English-Spanish encoder-decoder of Fig. 3c (kit.workloads.seq2seq_keras) and Faster R-CNN on VOC2012
(kit.workloads.detect_keras).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kit.workloads.train_keras import is_oom
from kit.workloads.train_keras import run as _run_train

__all__ = ["is_oom", "run"]


def run(req: dict[str, Any], data_dir: Path, markers: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """One trial: the model family follows the dataset (spa_eng: seq2seq, voc2012: detection, else CNN/LSTM)."""
    name = (req.get("dataset") or {}).get("name")
    if name == "spa_eng":
        from kit.workloads import seq2seq_keras

        return seq2seq_keras.run(req, data_dir, markers)
    if name == "voc2012":
        from kit.workloads import detect_keras

        return detect_keras.run(req, data_dir, markers)
    return _run_train(req, data_dir, markers)
