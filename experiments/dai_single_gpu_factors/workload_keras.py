"""The dai_factors workload in TensorFlow: the kit's model zoo (kit.workloads.zoo_torch / zoo_keras): the same networks in both frameworks, with the factor switches this study varies.

The study folder owns the workload (its [study] table in experiment.toml: name, datasets, parameters); the
model code is the kit's shared library, which other studies use too. The contract (docs/writing-a-study.md):
``run(request, data_dir, markers) -> (results, env)`` and ``is_oom(exc)``.

A configuration with ``mode = "profile"`` (the ``kernels`` case) is a profile trial, not a timed one:
kit.workloads.kernel_profile_keras runs the same training step under tf.profiler.experimental and returns
the kernel tables instead of times (profiling perturbs timing, so no timed trial is ever profiled).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kit.workloads.common import Markers

__all__ = ["is_oom", "run"]


def is_oom(exc: BaseException) -> bool:
    from kit.workloads.zoo_keras import is_oom as zoo_is_oom

    return zoo_is_oom(exc)


def run(req: dict[str, Any], data_dir: Path, markers: Markers) -> tuple[dict[str, Any], dict[str, Any]]:
    """A timed trial (zoo_keras), or a profile trial where the configuration's mode is "profile"."""
    if req["workload"].get("mode") == "profile":
        from kit.workloads import kernel_profile_keras

        return kernel_profile_keras.run(req, data_dir, markers)
    from kit.workloads import zoo_keras

    return zoo_keras.run(req, data_dir, markers)
