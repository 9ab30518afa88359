"""Workloads: one model per framework, looked up by (workload, framework).

Modules are named, not imported, so that listing workloads on the host never
imports a framework; the harness imports only the module a trial needs.
Each module provides ``run(request, data_dir, markers) -> (results, env)`` and
``is_oom(exc) -> bool``.
"""

from __future__ import annotations

FRAMEWORKS: tuple[str, ...] = ("pytorch", "tensorflow")

WORKLOADS: dict[str, dict[str, str]] = {
    "lenet5": {
        "pytorch": "kit.workloads.lenet_torch",
        "tensorflow": "kit.workloads.lenet_keras",
    },
}

# What each workload needs from the host: its dataset names.
WORKLOAD_DATASETS: dict[str, tuple[str, ...]] = {
    "lenet5": ("mnist",),
}


def module_for(workload: str, framework: str) -> str:
    """The module that runs ``workload`` in ``framework``; KeyError if none."""
    return WORKLOADS[workload][framework]
