"""The typed manifest: what a run directory's manifest.json says, read once and handed to every reader.

pyperf's ``Run`` and asv's ``Results`` own their file format; so does :class:`Manifest` here. ``RunDir.manifest``
reads the file (capped, no link followed), :func:`kit.records.check_manifest` checks its shape (a malformed one
is a StoreError naming the key path), and :meth:`Manifest.from_json` turns it into typed fields:

* ``plan`` is a :class:`kit.records.Plan` (the trials in schedule order), not a dict readers index;
* ``dataset`` is a :class:`ResolvedDataset` or ``None``: "no dataset" is said by ``None``, so the stand-in entry
  older runs wrote (``{"name": "none", "source": "synthetic"}``) reads as ``None`` too and can no longer be
  mistaken for synthetic data;
* ``executor`` is one :class:`ExecutorRecord` (the name and the rest of what the executor recorded);
* ``spec`` is the resolved spec as recorded (a read-only mapping: its shape belongs to kit.spec, which parses
  the copy in ``spec_source`` when a run resumes), with the few facts every reader needs as properties.

What is not typed here (host, backend, devices, provenance tables) stays a read-only mapping, and ``raw`` keeps
the file as read for writers that update it (``RunDir.update_manifest``) and for digests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.dataset_types import ResolvedDataset
from kit.errors import StoreError
from kit.records import FIX_MANIFEST, Plan, Trial, check_manifest

MANIFEST_SCHEMA = 1  # manifest.json's schema_version this kit writes and reads

# What runs without a dataset recorded before the manifest could say "none": a stand-in entry for the empty
# directory the trials were given. It is not a dataset, and not synthetic data either.
_LEGACY_NO_DATASET = {"name": "none", "source": "synthetic"}


@dataclass(frozen=True)
class SpecSource:
    """The spec file the run was made from, copied into the manifest (``kit run --resume`` re-reads it)."""

    path: str | None
    text: str
    sha256: str | None  # absent in runs made before spec digests


@dataclass(frozen=True)
class ExecutorRecord:
    """Where the run's trials ran: ``name`` (kit.executors.EXECUTORS) and what that executor recorded."""

    name: str
    fields: Mapping[str, Any]  # the whole record (options, chunks, backend for Slurm), read-only

    def as_dict(self) -> dict[str, Any]:
        return dict(self.fields)


def _mapping(v: Any) -> Mapping[str, Any]:
    return dict(v) if isinstance(v, dict) else {}


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _dataset(d: Any, where: str, key: str) -> ResolvedDataset | None:
    """A recorded dataset, or None for "no dataset" (null, or the stand-in older runs wrote)."""
    if d is None or {k: d.get(k) for k in _LEGACY_NO_DATASET} == _LEGACY_NO_DATASET:
        return None
    files = d.get("sha256") or {}
    ok = (isinstance(d.get("name"), str) and isinstance(d.get("source"), str)
          and isinstance(d.get("directory", ""), str) and isinstance(d.get("origin", ""), str)
          and isinstance(files, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()))
    if not ok:
        raise StoreError(f"{key} must be a dataset table (name, source, directory, origin, sha256 of each file)",
                         where=where, fix=FIX_MANIFEST)
    return ResolvedDataset(name=d["name"], source=d["source"], directory=Path(d.get("directory") or "."),
                           origin=d.get("origin") or "", files=dict(files))


def _plan(p: dict[str, Any]) -> Plan:
    """The recorded plan (its shape checked by check_manifest). Keys a planned trial has beyond this kit's
    :class:`Trial` are not kept: they could only come from another writer, and no reader of this kit asks."""
    known = {f.name for f in dataclasses.fields(Trial)}
    trials = tuple(Trial(**{k: v for k, v in t.items() if k in known}) for t in p["trials"])
    return Plan(seed=p["seed"], blocking=p["blocking"], arms=tuple(p["arms"]),
                configs={k: dict(v) for k, v in p["configs"].items()}, trials=trials)


# The sequential rule's inputs (`kit run --until-conclusive`, kit.stats.sequential), held to these ranges when the
# rule is set up and again when a manifest is read: an equivalence margin of 0.99 would call arms 1.99x apart
# "equivalent", and a schedule of thousands of looks would spend the analysis on a crafted record.
SEQUENTIAL_MARGIN = (0.001, 0.25)  # equivalence: the arms' ratio within [1/(1+m), 1+m]
SEQUENTIAL_MAX_LOOKS = 100
SEQUENTIAL_MAX_REPETITIONS = 10_000
SEQUENTIAL_MAX_BUDGET_S = 30 * 24 * 3600.0


def _int_in(v: Any, low: int, high: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


def check_sequential(seq: Any, where: str) -> None:
    """A recorded ``sequential`` table: every number in its range (StoreError naming the key path otherwise)."""
    def bad(key: str, expected: str, got: Any) -> StoreError:
        return StoreError(f"sequential.{key} must be {expected}, not {got!r}"[:300], where=f"{where}: sequential.{key}",
                          fix=FIX_MANIFEST)

    if not isinstance(seq, dict):
        raise StoreError("sequential must be a table", where=f"{where}: sequential", fix=FIX_MANIFEST)
    top = seq.get("max_repetitions")
    if not _int_in(top, 2, SEQUENTIAL_MAX_REPETITIONS):
        raise bad("max_repetitions", f"an integer in [2, {SEQUENTIAL_MAX_REPETITIONS}]", top)
    assert isinstance(top, int)
    first, step = seq.get("first", 2), seq.get("step", 1)
    if not _int_in(first, 2, top):
        raise bad("first", f"an integer in [2, max_repetitions = {top}]", first)
    if not _int_in(step, 1, SEQUENTIAL_MAX_REPETITIONS):
        raise bad("step", f"an integer in [1, {SEQUENTIAL_MAX_REPETITIONS}]", step)
    looks = (top - first) // step + 1 + (1 if (top - first) % step else 0)
    if looks > SEQUENTIAL_MAX_LOOKS:
        raise bad("step", f"a step giving at most {SEQUENTIAL_MAX_LOOKS} looks (this one gives {looks})", step)
    lo, hi = SEQUENTIAL_MARGIN
    margin = seq.get("margin", 0.05)
    if not (_num(margin) is not None and lo <= margin <= hi):
        raise bad("margin", f"an equivalence margin in [{lo}, {hi}]", margin)
    alpha = seq.get("alpha")
    if alpha is not None and not (_num(alpha) is not None and 0 < alpha < 0.5):
        raise bad("alpha", "a significance level in (0, 0.5)", alpha)
    budget = seq.get("budget_s")
    if budget is not None and not (_num(budget) is not None and 0 < budget <= SEQUENTIAL_MAX_BUDGET_S):
        raise bad("budget_s", f"a number of seconds in (0, {SEQUENTIAL_MAX_BUDGET_S:g}], or null", budget)
    stopped = seq.get("stopped")
    if stopped is not None:
        if not isinstance(stopped, dict):
            raise bad("stopped", "a table", stopped)
        at = stopped.get("at_repetitions")
        if at is not None and not _int_in(at, first, top):
            raise bad("stopped.at_repetitions", f"an integer in [first = {first}, max_repetitions = {top}]", at)


@dataclass(frozen=True)
class Manifest:
    """manifest.json, checked and typed (see the module docstring)."""

    schema_version: int
    experiment: str
    title: str | None
    profile: str | None
    profile_description: str | None
    label: str | None
    status: str | None
    started: float | None
    ended: float | None
    spec: Mapping[str, Any]
    spec_source: SpecSource | None
    plan: Plan
    plan_digest: str | None
    dataset: ResolvedDataset | None
    datasets: Mapping[str, ResolvedDataset]  # a study of several datasets: "name:source" -> dataset
    executor: ExecutorRecord
    collectors: tuple[Mapping[str, Any], ...]
    command: tuple[str, ...]  # the command line that started the run
    host: Mapping[str, Any]
    kit: Mapping[str, Any]
    backend: Mapping[str, Any]
    devices: Mapping[str, Any]
    selftest: Mapping[str, Any] | None
    baseline: Mapping[str, Any]
    study: Mapping[str, Any] | None  # the study folder's description (files and digest), None without one
    nodes: Mapping[str, Mapping[str, Any]]  # nodes/<host>.json of a multi-host run (RunDir.nodes), by host
    sequential: Mapping[str, Any] | None  # `kit run --until-conclusive`: schedule, budget and where it stopped
    raw: Mapping[str, Any] = dataclasses.field(repr=False, compare=False)

    @classmethod
    def from_json(cls, man: Any, where: str) -> Manifest:
        """A manifest's JSON object, checked (StoreError naming the key path) and typed."""
        check_manifest(man, where)
        version = man.get("schema_version", MANIFEST_SCHEMA)
        if version != MANIFEST_SCHEMA:
            raise StoreError(f"run directory has schema version {version!r}, this kit reads {MANIFEST_SCHEMA}",
                             where=where, fix="use the kit version that wrote it (see manifest.kit.version)")
        src = man.get("spec_source")
        source = None
        if isinstance(src, dict) and isinstance(src.get("text"), str):
            source = SpecSource(path=_str(src.get("path")), text=src["text"], sha256=_str(src.get("sha256")))
        many = man.get("datasets")
        if many is not None and not isinstance(many, dict):
            raise StoreError("datasets must be a table of dataset tables", where=where, fix=FIX_MANIFEST)
        datasets = {str(k): d for k, v in (many or {}).items()
                    if (d := _dataset(v if isinstance(v, dict) else {"name": None}, where, f"datasets.{k}"))}
        ex = man.get("executor") or {"name": "local"}
        if not isinstance(ex.get("name"), str):
            raise StoreError("executor.name must be an executor's name", where=where, fix=FIX_MANIFEST)
        nodes = man.get("nodes")
        seq = man.get("sequential")
        if seq is not None:
            check_sequential(seq, where)
        return cls(
            schema_version=MANIFEST_SCHEMA, experiment=man["experiment"], title=_str(man.get("title")),
            profile=_str(man.get("profile")), profile_description=_str(man.get("profile_description")),
            label=_str(man.get("label")), status=_str(man.get("status")), started=_num(man.get("started")),
            ended=_num(man.get("ended")), spec=man["spec"], spec_source=source, plan=_plan(man["plan"]),
            plan_digest=_str(man.get("plan_digest")), dataset=_dataset(man.get("dataset"), where, "dataset"),
            datasets=datasets, executor=ExecutorRecord(name=ex["name"], fields=dict(ex)),
            collectors=tuple(man.get("collectors") or ()),
            command=tuple(str(a) for a in man["command"]) if isinstance(man.get("command"), list) else (),
            host=_mapping(man.get("host")),
            kit=_mapping(man.get("kit")), backend=_mapping(man.get("backend")),
            devices=_mapping(man.get("devices")),
            selftest=man["selftest"] if isinstance(man.get("selftest"), dict) else None,
            baseline=_mapping(man.get("baseline")),
            study=man["study"] if isinstance(man.get("study"), dict) else None,
            nodes={str(k): v for k, v in nodes.items() if isinstance(v, dict)} if isinstance(nodes, dict) else {},
            sequential=seq, raw=man)

    def to_json(self) -> dict[str, Any]:
        """The manifest's content as read (with ``nodes`` when they were added)."""
        return {**self.raw, **({"nodes": dict(self.nodes)} if self.nodes else {})}

    def with_nodes(self, nodes: Mapping[str, Mapping[str, Any]]) -> Manifest:
        """This manifest with the run's node files (a multi-host run's per-host provenance)."""
        return dataclasses.replace(self, nodes=dict(nodes))

    # -- facts every reader asks ------------------------------------------------------------------------------
    @property
    def workload(self) -> str:
        """The spec's workload name (a study's extras are kept under it)."""
        return str(self.spec["workload"]["name"])

    @property
    def alpha(self) -> float:
        return float(self.spec["design"]["alpha"])

    @property
    def arms(self) -> tuple[str, ...]:
        return self.plan.arms

    @property
    def configs(self) -> dict[str, dict[str, Any]]:
        return self.plan.configs

    @property
    def hypotheses(self) -> list[Mapping[str, Any]]:
        return list(self.spec.get("hypotheses") or [])

    @property
    def telemetry_collectors(self) -> list[str]:
        """The collectors the spec asked for (``[telemetry].collectors``)."""
        return list((self.spec.get("telemetry") or {}).get("collectors") or [])

    @property
    def plan_repetitions(self) -> int | None:
        """Repetitions the plan was drawn for when not the spec's (a sequential run's maximum), else None."""
        return int(self.sequential["max_repetitions"]) if self.sequential else None

    def used_datasets(self) -> list[ResolvedDataset]:
        """The datasets the run used ([] for a run on synthetic inputs or without a dataset)."""
        return list(self.datasets.values()) if self.datasets else [d for d in (self.dataset,) if d is not None]
