"""The zoo_distributed workload in PyTorch: the kit's data-parallel zoo training (kit.workloads.zoo_dist_torch / zoo_dist_keras).

The study folder owns the workload (its [study] table in experiment.toml: name, datasets, parameters); the
model code is the kit's shared library, which other studies use too. The contract (docs/writing-a-study.md):
``run(request, data_dir, markers) -> (results, env)`` and ``is_oom(exc)``.
"""

from __future__ import annotations

from kit.workloads.zoo_dist_torch import is_oom, run

__all__ = ["is_oom", "run"]
