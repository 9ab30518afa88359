"""The experiments shipped with the kit, for `kit list` and the Makefile."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from kit.analysis.design import design_table
from kit.errors import KitError
from kit.plan import make_plan
from kit.spec import load_spec


def list_experiments(directory: Path) -> list[dict[str, Any]]:
    """Every experiment file with each profile's description, trial count and design check.

    The design check says per hypothesis whether the profile can decide it (kit/analysis/design.py).

    An invalid file is listed with its error instead of hiding the others.
    """
    if not directory.is_dir():
        raise KitError("experiments directory not found", where=str(directory),
                       fix="run from the kit's checkout or pass --experiments-dir")
    out = []
    for path in sorted(directory.glob("*.toml")):
        try:
            base = load_spec(path)
        except KitError as err:
            out.append({"file": path.name, "id": "(invalid)", "profiles": [
                {"name": "-", "trials": 0, "description": err.one_line()}]})
            continue
        profiles = []
        for name in base.profiles:
            spec = load_spec(path, name)
            plan = make_plan(spec)
            profiles.append({"name": name, "trials": len(plan.trials), "description": spec.profile_description,
                             "design": design_table(spec.to_dict(), plan.configs, list(plan.arms))})
        out.append({"file": path.name, "id": base.experiment.id, "title": base.experiment.title, "profiles": profiles,
                    "protocol_source": base.experiment.protocol_source,
                    "deviations": [dataclasses.asdict(d) for d in base.deviations]})
    return out
