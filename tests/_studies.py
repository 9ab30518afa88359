"""A bundled study folder's module, imported the way the kit imports it (its own package, nothing on sys.path)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from kit.workloads.study_import import import_study_module

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def study_module(study: str, module: str) -> ModuleType:
    return import_study_module(EXPERIMENTS / study, module, package=f"tests_study_{study}")
