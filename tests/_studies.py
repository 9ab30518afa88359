"""A bundled study folder's module, imported the way the kit imports it (its own package, nothing on sys.path)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from kit.workloads.study_import import import_study_module

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def study_module(study: str, module: str) -> ModuleType:
    return import_study_module(EXPERIMENTS / study, module, package=f"tests_study_{study}")


def study_sections(report: ModuleType, extras: dict[str, Any]) -> list[dict[str, Any]]:
    """A study's ``report.sections(run, analysis)`` as the kit receives them (JSON, through kit.study_api.invoke),
    for a bare run whose analysis holds only ``extras`` (the study's records, or their JSON)."""
    from kit.study_api import invoke
    from tests._runs import bare_analysis, bare_manifest_json

    plain = {k: (v.to_json() if hasattr(v, "to_json") else v) for k, v in extras.items()}
    return invoke(report, report.sections, "sections", (bare_manifest_json(), bare_analysis(extras=plain)),
                  "report.py")
