"""The experiments `kit list` shows: the kit's own, KIT_EXPERIMENTS and --experiments folders."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from kit.analysis.design import design_table
from kit.errors import KitError
from kit.plan import make_plan
from kit.spec import load_spec
from kit.studies import experiment_dirs, experiment_paths


def list_experiments(directories: Path | list[Path] | None = None) -> list[dict[str, Any]]:
    """Every experiment (TOML file or study folder) with each profile's description, trial count and design check.

    ``directories``: where to look (a directory of experiments, or one study
    folder); None: the kit's bundled experiments, then ``KIT_EXPERIMENTS``.
    The design check says per hypothesis whether the profile can decide it
    (kit/analysis/design.py). An invalid experiment is listed with its error
    instead of hiding the others.
    """
    if directories is None:
        dirs = experiment_dirs()
    else:
        dirs = [directories] if isinstance(directories, Path) else list(directories)
    out = []
    for directory in dirs:
        if not directory.is_dir():
            raise KitError("experiments directory not found", where=str(directory),
                           fix="give a directory of experiments or a study folder (kit new study NAME writes one)")
        for path in experiment_paths(directory):
            out.append(_entry(path))
    return out


def _entry(path: Path) -> dict[str, Any]:
    label = f"{path.name}/" if path.is_dir() else path.name
    try:
        base = load_spec(path)
    except KitError as err:
        return {"file": label, "path": str(path), "id": "(invalid)", "invalid": True, "profiles": [
            {"name": "-", "trials": 0, "description": err.one_line()}]}
    profiles = []
    for name in base.profiles:
        spec = load_spec(path, name)
        plan = make_plan(spec)
        profiles.append({"name": name, "trials": len(plan.trials), "description": spec.profile_description,
                         "design": design_table(spec.to_dict(), plan.configs, list(plan.arms))})
    return {"file": label, "path": str(path), "id": base.experiment.id, "title": base.experiment.title,
            "profiles": profiles, "folder": bool(base.study_dir), "protocol_source": base.experiment.protocol_source,
            "deviations": [dataclasses.asdict(d) for d in base.deviations],
            "claims": [dataclasses.asdict(c) for c in base.claims]}
