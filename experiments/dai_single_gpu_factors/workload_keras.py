"""The dai_factors workload in TensorFlow: the kit's model zoo (kit.workloads.zoo_torch / zoo_keras): the same networks in both frameworks, with the factor switches this study varies.

The study folder owns the workload (its [study] table in experiment.toml: name, datasets, parameters); the
model code is the kit's shared library, which other studies use too. The contract (docs/writing-a-study.md):
``run(request, data_dir, markers) -> (results, env)`` and ``is_oom(exc)``.
"""

from __future__ import annotations

from kit.workloads.zoo_keras import is_oom, run

__all__ = ["is_oom", "run"]
