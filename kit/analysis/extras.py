"""Study-specific analyses: a study folder's analysis.py (kit.studies.study_extras).

The core analysis (descriptives, hypotheses, validity) is the same for every
study; a study that needs more (sweeps over batch size, scaling efficiency,
convergence curves) says so in its folder's ``analysis.py``, which receives
finished data only and returns plain data, stored under
``analysis["extras"][workload]``. The kit itself registers no study code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd


def run_extras(manifest: dict[str, Any], trials: list[dict[str, Any]], values: pd.DataFrame,
               run_dir: Path | None = None) -> dict[str, Any]:
    from kit.studies import study_extras

    return study_extras(run_dir, manifest, trials, values)
