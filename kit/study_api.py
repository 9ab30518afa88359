"""The study folders' API: what ``analysis.py``'s ``analyse()`` is handed (versioned).

API 1 (a study module without ``STUDY_API``): ``analyse(manifest, trials, values)``, three plain objects; each
study re-wrote which trials count (``t["status"] == "ok" and not t.get("warmup")``) and read keys by name.

API 2 (the module sets ``STUDY_API = 2``): ``analyse(run)`` with one :class:`RunView`: the run's identity and
configurations, the typed manifest (:class:`kit.manifest.Manifest`, as ``record``), its trials as typed
:class:`kit.records.TrialRecord`, the long value table, and
:meth:`RunView.measured` / :meth:`RunView.measured_values`, which apply the kit's one rule of what counts
(:func:`kit.records.counts`). ``analyse`` still returns plain data (JSON: it is stored in analysis.json and,
for code that is not the kit's own, comes back from a child process).

:func:`invoke` is the one place that calls a study hook: in the kit's process for the bundled studies and in
the child process (kit.study_child) for every other study, so both see the same API.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from kit.errors import StudyError
from kit.manifest import Manifest
from kit.records import TrialRecord, counted

STUDY_API = 2  # the newest API this kit offers


@dataclass(frozen=True)
class RunView:
    """One run as a study's ``analyse(run)`` sees it (finished data only, read-only)."""

    experiment: str
    profile: str
    workload: str  # the spec's workload name (analysis.json keeps analyse()'s answer under it)
    arms: tuple[str, ...]
    configs: Mapping[str, Mapping[str, Any]]  # configuration id -> the grid/case values of that configuration
    trials: tuple[TrialRecord, ...]  # finished trials in schedule order (warm-ups and failures included)
    values: Any  # pandas DataFrame, columns kit.analysis.metrics.VALUE_COLUMNS (every trial, every metric)
    manifest: Mapping[str, Any]  # the manifest's JSON, for what neither the view nor ``record`` names
    record: Manifest  # the typed manifest (datasets, collectors, host, devices, executor, ...)

    @classmethod
    def build(cls, manifest: Mapping[str, Any], trials: list[dict[str, Any]], values: Any) -> RunView:
        man = Manifest.from_json(dict(manifest), "the run's manifest")
        return cls(
            experiment=man.experiment, profile=man.profile or "", workload=man.workload, arms=man.arms,
            configs=man.configs, trials=tuple(TrialRecord.from_json(t, f"trial {t.get('trial_id')}") for t in trials),
            values=values, manifest=manifest, record=man)

    @property
    def spec(self) -> Mapping[str, Any]:
        """The spec as the run resolved and recorded it (workload, design, hypotheses, grid, cases)."""
        return self.record.spec

    def finished(self, arm: str | None = None, config: str | None = None) -> list[TrialRecord]:
        """Finished trials (any status, warm-ups included) of one arm and/or configuration."""
        return [t for t in self.trials if (arm is None or t.arm == arm) and (config is None or t.config_id == config)]

    def measured(self, arm: str | None = None, config: str | None = None) -> list[TrialRecord]:
        """The trials that count (not warm-ups, finished ok) of one arm and/or configuration, in schedule order."""
        return [t for t in self.finished(arm, config) if t.counts]

    def measured_values(self, metric: str | None = None, phase: str | None = None, arm: str | None = None,
                        config: str | None = None) -> Any:
        """Rows of the value table that count, with a value, filtered by what is given."""
        v = counted(self.values)
        v = v[v["value"].notna()]
        for column, wanted in (("metric", metric), ("phase", phase), ("arm", arm), ("config_id", config)):
            if wanted is not None:
                v = v[v[column] == wanted]
        return v


def api_of(module: ModuleType, where: str) -> int:
    """The API version a study module asks for (``STUDY_API``; 1 when it names none)."""
    version = getattr(module, "STUDY_API", 1)
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= STUDY_API:
        raise StudyError(f"the study asks for STUDY_API = {version!r}; this kit offers 1 to {STUDY_API}",
                         where=where, fix=f"set STUDY_API = {STUDY_API} (docs/writing-a-study.md) or update the kit")
    return version


def invoke(module: ModuleType, fn: Callable[..., Any], func: str, args: tuple[Any, ...], where: str) -> Any:
    """Call a study hook with the arguments its API version takes. ``analyse`` gets (manifest, trials, values)
    from the kit; under API 2 they become one :class:`RunView`. Other hooks take their arguments as they are."""
    if func == "analyse" and api_of(module, where) >= 2:
        manifest, trials, values = args
        return fn(RunView.build(manifest, trials, values))
    return fn(*args)
