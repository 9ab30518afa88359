"""The vocabulary of threats to validity: a finding (:class:`Threat`; the analysis record keeps it as
kit.analysis_rows.ThreatRow), what a rule sees (:class:`Ctx`), and the
registry the rule modules (kit.analysis.validity, .devices, .validity_telemetry) add to with ``@rule``.

Its own small module so that the rule modules and the telemetry code they read build on it without importing
kit.analysis.validity, which imports them all to run them (that used to close a seven-module import circle).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kit.manifest import Manifest
from kit.records import TrialRecord, counted

if TYPE_CHECKING:  # annotations only: `kit list` reaches this module and reads no samples (issue 44)
    import pandas as pd

SEVERITIES = ("high", "medium", "low", "info")


@dataclass(frozen=True)
class Threat:
    rule: str
    category: str  # conclusion | internal | construct | external
    severity: str
    title: str
    evidence: str
    mitigation: str
    status: str = "threat"  # threat | mitigated
    numbers: dict[str, Any] = field(default_factory=dict)


@dataclass
class Ctx:
    """What every rule reads: the manifest, the trial records, the long value table and the analysis so far."""

    manifest: Manifest
    trials: Sequence[TrialRecord]
    values: pd.DataFrame
    analysis: dict[str, Any]

    @property
    def use(self) -> pd.DataFrame:
        v = counted(self.values)
        return v[v["value"].notna()]


Rule = Callable[[Ctx], list[Threat]]
RULES: list[Rule] = []


def rule(fn: Rule) -> Rule:
    """Register ``fn`` as a rule (kit.analysis.validity.assess runs them, module by module)."""
    RULES.append(fn)
    return fn
