"""Study-specific analyses, plugged in by workload name.

The core analysis (descriptives, hypotheses, validity) is the same for every
study; a study that needs more (sweeps over batch size, scaling efficiency,
convergence curves) registers a function here. It receives finished data
only and returns plain data, stored under ``analysis["extras"][name]``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import pandas as pd

ExtraAnalysis = Callable[[dict[str, Any], list[dict[str, Any]], pd.DataFrame], dict[str, Any]]

# workload name -> "module:function"
EXTRA_ANALYSES: dict[str, str] = {
    "germino": "kit.analysis.germino:analyse",
    "dlbench": "kit.analysis.dlbench:analyse",
    "zoo": "kit.analysis.zoo:analyse",
    "dai_factors": "kit.analysis.dai:analyse",
    "zoo_distributed": "kit.analysis.zoo_dist:analyse",
}


def run_extras(manifest: dict[str, Any], trials: list[dict[str, Any]], values: pd.DataFrame) -> dict[str, Any]:
    name = manifest["spec"]["workload"]["name"]
    target = EXTRA_ANALYSES.get(name)
    if target is None:
        return {}
    mod, _, fn = target.partition(":")
    func: ExtraAnalysis = getattr(importlib.import_module(mod), fn)
    return {name: func(manifest, trials, values)}
