"""The germino workload in TensorFlow: the kit's shared MNIST/CIFAR/text training code (kit.workloads.train_torch / train_keras), which builds this study's models (k-NN, the simple network, the CNN: kit.workloads.nets).

The study folder owns the workload (its [study] table in experiment.toml: name, datasets, parameters); the
model code is the kit's shared library, which other studies use too. The contract (docs/writing-a-study.md):
``run(request, data_dir, markers) -> (results, env)`` and ``is_oom(exc)``.
"""

from __future__ import annotations

from kit.workloads.train_keras import is_oom, run

__all__ = ["is_oom", "run"]
