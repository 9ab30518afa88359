"""The study folders' API: what a study's ``analyse()`` and ``sections()`` are handed and return (versioned).

API 3 (``STUDY_API = 3``, the kit's own studies and ``kit new study``): typed both ways.
``analysis.analyse(run: RunView) -> StudyExtras`` returns a typed record whose ``to_json()`` is what
analysis.json keeps under ``extras[workload]``; ``report.sections(run: RunView, analysis: Analysis) ->
list[Section]`` returns :class:`Section` records (paragraphs of text the kit escapes, :class:`Table` s of values,
:class:`Figure` s), given the run and the finished, typed analysis (:class:`kit.analysis_record.Analysis`). At report
time the run's trials are not re-read: ``run.trials`` is empty and ``run.values`` is the analysis' value table.

API 2 (``STUDY_API = 2``): ``analyse(run)`` and ``sections(manifest, analysis)`` returning plain data (dicts).
API 1 (no ``STUDY_API``): ``analyse(manifest, trials, values)``. Both still work through one adapter
(:func:`_legacy`), which says once per process and study that the folder should move to API 3.

:func:`invoke` is the one place that calls a study hook: in the kit's process for the bundled studies and in
the child process (kit.study_child) for every other study, so both see the same API; what it returns is plain
data either way (JSON from a child; the kit re-builds sections in kit.report.sections).

Workloads are not part of this API: they run inside the framework's container, which imports nothing of the
host side (kit.workloads and the harness), so their contract stays ``run(request, data_dir, markers)``.
"""

from __future__ import annotations

import base64
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from types import ModuleType
from typing import Any, Protocol, Self, TypedDict, runtime_checkable

from kit.analysis_record import Analysis
from kit.errors import StudyError
from kit.manifest import Manifest
from kit.records import TrialRecord, counted

STUDY_API = 3  # the newest API this kit offers
LEGACY_NOTE = ("uses STUDY_API {version}, which the kit still runs through an adapter; move it to STUDY_API = 3 "
               "(typed analyse() and sections(): docs/writing-a-study.md, or `kit new study` for an example)")

Cell = str | int | float | None  # one cell of a study's table: a number, a text, or empty


class TableJson(TypedDict):
    caption: str
    columns: list[str]
    rows: list[list[Cell]]


class FigureJson(TypedDict, total=False):
    id: str
    title: str
    svg: str | None  # a kit.report.figures.VectorFigure keeps its PDF (``.pdf``) in this process
    png_b64: str  # PNG bytes as base64: JSON has no bytes, and a child process sends its answer as JSON


class SectionJson(TypedDict):
    """A section as kit.report.sections re-builds it (and as a child process sends it back)."""

    id: str
    title: str
    paragraphs: list[str]
    tables: list[TableJson]
    figures: list[FigureJson]


class StudyApiDeprecation(FutureWarning):
    """A study folder written for an API older than :data:`STUDY_API` (shown once per process and study)."""


@runtime_checkable
class StudyExtras(Protocol):
    """What an API-3 ``analyse(run)`` returns: a typed record of the study's own results. ``to_json()`` is the
    plain data analysis.json keeps (and a child process sends back); the report reads it again from there."""

    def to_json(self) -> dict[str, Any]: ...


class ExtrasRecord:
    """A base for a study's frozen dataclass of extras: its fields, in order, are the JSON object analysis.json
    keeps (``to_json``), and ``from_json`` reads that object back for the report (keys it does not know are left
    out, fields the object lacks take their defaults)."""

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class Table:
    """A table of a study's section: a caption, column names and rows of cells (numbers, texts, empty)."""

    caption: str
    columns: Sequence[str]
    rows: Sequence[Sequence[Cell]]

    def to_json(self) -> TableJson:
        return {"caption": self.caption, "columns": list(self.columns), "rows": [list(r) for r in self.rows]}


@dataclass(frozen=True)
class Figure:
    """A figure of a study's section: SVG text (kit.report.figures.to_svg, which carries the PDF for LaTeX) or PNG
    bytes; None draws the kit's "no figure" note (a study that could not draw it says so by giving none)."""

    id: str
    title: str
    svg: str | None = None
    png: bytes | None = None

    def to_json(self) -> FigureJson:
        out: FigureJson = {"id": self.id, "title": self.title, "svg": self.svg}  # the same str (its PDF kept)
        if self.png is not None:
            out["png_b64"] = base64.b64encode(self.png).decode("ascii")
        return out


@dataclass(frozen=True)
class Section:
    """One section of a study's report. Texts are plain text: the kit escapes them, re-checks ids and re-writes
    figures (kit.report.sections), so nothing a study returns reaches a page as markup."""

    id: str
    title: str
    paragraphs: Sequence[str] = ()
    tables: Sequence[Table] = ()
    figures: Sequence[Figure] = field(default=())

    def to_json(self) -> SectionJson:
        return {"id": self.id, "title": self.title, "paragraphs": list(self.paragraphs),
                "tables": [t.to_json() for t in self.tables], "figures": [f.to_json() for f in self.figures]}


@dataclass(frozen=True)
class RunView:
    """One run as a study's ``analyse(run)`` and ``sections(run, analysis)`` see it (finished data, read-only)."""

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
    def build(cls, manifest: Mapping[str, Any], trials: Sequence[TrialRecord], values: Any) -> RunView:
        """The view of a run from its manifest's JSON, its trial records (as the analysis screened them) and its
        value table."""
        man = Manifest.from_json(dict(manifest), "the run's manifest")
        return cls(
            experiment=man.experiment, profile=man.profile or "", workload=man.workload, arms=man.arms,
            configs=man.configs, trials=tuple(trials), values=values, manifest=manifest, record=man)

    @classmethod
    def of_report(cls, manifest: Mapping[str, Any], analysis: Analysis) -> RunView:
        """The view a report's ``sections()`` gets: no trials (the report is made from the finished analysis),
        the analysis' value table as ``values``."""
        import pandas as pd

        return cls.build(manifest, (), pd.DataFrame(analysis.value_rows()))

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


def warn_legacy(version: int, where: str) -> None:
    """The one deprecation line for a study on an older API: on stderr, once per process and study folder (the
    warnings registry of this module keeps which folders were named; ``-W error`` makes it an error)."""
    folder = where.rpartition("/")[0] or where
    registry = sys.modules[__name__].__dict__.setdefault("__warningregistry__", {})
    warnings.warn_explicit(f"the study folder {folder} {LEGACY_NOTE.format(version=version)}", StudyApiDeprecation,
                           folder, 0, module=__name__, registry=registry)


def _legacy(version: int, fn: Callable[..., Any], func: str, args: tuple[Any, ...], where: str) -> Any:
    """The adapter for API 1 and 2 folders: their calls as they were, plain data back, one deprecation line."""
    warn_legacy(version, where)
    if func == "analyse" and version >= 2:
        manifest, trials, values = args
        return fn(RunView.build(manifest, trials, values))
    if func == "analyse":  # API 1: analyse(manifest, trials, values) with each trial as its file's JSON
        manifest, trials, values = args
        return fn(manifest, [t.to_json() for t in trials], values)
    if func == "sections" and len(args) == 2 and isinstance(args[1], Analysis):
        return fn(args[0], args[1].to_json())
    return fn(*args)


def _refused(func: str, wanted: str, got: Any, where: str) -> StudyError:
    return StudyError(f"the study's {func}() returned {type(got).__name__}, not {wanted}", where=where,
                      fix=f"return {wanted} from {func}() (STUDY_API = 3: kit.study_api, docs/writing-a-study.md)")


def invoke(module: ModuleType, fn: Callable[..., Any], func: str, args: tuple[Any, ...], where: str) -> Any:
    """Call a study hook with the arguments its API version takes; plain data back.

    The kit passes ``analyse`` (manifest JSON, trial records, value table) and ``sections`` (manifest JSON, the
    analysis as JSON or :class:`Analysis`). Under API 3 they become a :class:`RunView` (and the typed analysis),
    and the typed answer becomes JSON here: ``StudyExtras.to_json()``, ``Section.to_json()`` each. Other hooks
    take their arguments as they are."""
    version = api_of(module, where)
    if version < STUDY_API:
        return _legacy(version, fn, func, args, where)
    if func == "analyse":
        manifest, trials, values = args
        extras = fn(RunView.build(manifest, trials, values))
        if not isinstance(extras, StudyExtras):
            raise _refused(func, "a StudyExtras record (a dataclass with to_json())", extras, where)
        return extras.to_json()
    if func == "sections":
        manifest, raw = args
        analysis = raw if isinstance(raw, Analysis) else Analysis.from_json(raw, "the run's analysis.json")
        out = fn(RunView.of_report(manifest, analysis), analysis)
        if not isinstance(out, list) or not all(isinstance(s, Section) for s in out):
            raise _refused(func, "a list of kit.study_api.Section", out, where)
        return [s.to_json() for s in out]
    return fn(*args)
