"""The dlbench workload in PyTorch: the kit's shared training code (kit.workloads.train_torch / train_keras), which builds DLBench's CNNs and LSTMs (kit.workloads.nets) and reads the datasets (kit.workloads.formats).

The study folder owns the workload (its [study] table in experiment.toml: name, datasets, parameters); the
model code is the kit's shared library, which other studies use too. The contract (docs/writing-a-study.md):
``run(request, data_dir, markers) -> (results, env)`` and ``is_oom(exc)``.
"""

from __future__ import annotations

from kit.workloads.train_torch import is_oom, run

__all__ = ["is_oom", "run"]
