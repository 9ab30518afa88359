"""Experiment specs: frozen dataclasses loaded from TOML and validated at load.

A spec file describes one reproduced study (see ``experiments/``). Profiles (``[profiles.quick]``) are partial specs
deep-merged over the base before validation, so a profile is checked exactly like the base. Every error names the
file, the key path and what is expected, and is raised before anything is written (mlcube's
IllegalParameterValueError is the model).

Where things live: :mod:`~kit.spec.limits` (bounds and vocabularies), :mod:`~kit.spec.workload` (``[workload]``,
``[dataset]`` and which workloads a parse knows), :mod:`~kit.spec.sections` (the other sections),
:mod:`~kit.spec.model` (:class:`Spec`: cases, grid and configurations), :mod:`~kit.spec.convert` (TOML values to
typed fields, with key-path errors), :mod:`~kit.spec.load` (file, TOML, profiles, claims) and
:mod:`~kit.spec.recorded` (a run's recorded spec held to the same ranges). ``kit/spec_invalid.py`` and
``kit/claim_spec.py`` stay in the base layer below. This ``__init__`` re-exports the names the rest of the kit uses:
the package's API.
"""

from __future__ import annotations

from kit.spec.limits import AMBIENT_PLAUSIBLE_C, FAMILIES, PHASES, SPEC_SCHEMA, UNITS
from kit.spec.load import load_spec, parse_claims, parse_spec
from kit.spec.model import Case, Spec
from kit.spec.recorded import FIX_RECORDED, check_recorded
from kit.spec.sections import (
    Container,
    Design,
    Deviation,
    Experiment,
    Goal,
    Hypothesis,
    Slurm,
    Telemetry,
    cpuset_size,
)
from kit.spec.workload import Dataset, Workload
from kit.workloads import WorkloadInfo  # the type of Spec.info, re-exported with it

__all__ = [
    "AMBIENT_PLAUSIBLE_C", "FAMILIES", "FIX_RECORDED", "PHASES", "SPEC_SCHEMA", "UNITS", "Case", "Container", "Dataset",
    "Design", "Deviation", "Experiment", "Goal", "Hypothesis", "Slurm", "Spec", "Telemetry", "Workload", "WorkloadInfo",
    "check_recorded", "cpuset_size", "load_spec", "parse_claims", "parse_spec",
]
