"""The validated experiment (:class:`Spec`): its sections, its cases and grid, and the configurations they make."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Any

from kit.claim_spec import Claim
from kit.records import JsonValue
from kit.spec.convert import case_overrides, convert_params
from kit.spec.limits import MAX_CONFIGS, MAX_PLAN_TRIALS, SPEC_SCHEMA
from kit.spec.sections import Container, Design, Deviation, Experiment, Goal, Hypothesis, Slurm, Telemetry
from kit.spec.workload import WORKLOAD_FIELDS, Config, Dataset, SpecValue, Workload, known_workloads
from kit.spec_invalid import Invalid
from kit.workloads import WorkloadInfo


@dataclass(frozen=True)
class Case:
    """One named configuration of a study: its own dataset and workload settings.

    ``[cases.NAME]`` tables let one experiment cover several datasets (or
    models) whose settings differ, as a paper's table does; the grid (if
    any) is crossed with every enabled case. ``workload`` overrides keys of
    ``[workload]`` (checked against the workload's keys at load).
    """

    title: str = ""
    dataset: Dataset | None = None
    workload: dict[str, Any] = field(default_factory=dict)  # Any: convert_value's mark of a free table
    enabled: bool = True


# The top-level fields the loader fills beside LOADER_FIELDS (kit.spec.load): the study folder's table, the folder,
# and the workload's description.
SPEC_LOADER_FIELDS = ("study", "study_dir", "info")


@dataclass(frozen=True)
class Spec:
    """A validated experiment, with one profile applied (or none)."""

    experiment: Experiment
    goal: Goal
    workload: Workload
    design: Design
    hypotheses: tuple[Hypothesis, ...]
    dataset: Dataset | None = None
    telemetry: Telemetry = field(default_factory=Telemetry)
    container: Container = field(default_factory=Container)
    slurm: Slurm = field(default_factory=Slurm)
    grid: dict[str, tuple[JsonValue, ...]] = field(default_factory=dict)  # key -> the values it takes
    cases: dict[str, Case] = field(default_factory=dict)
    deviations: tuple[Deviation, ...] = ()
    claims: tuple[Claim, ...] = ()  # what the paper found ([[claims]], kit.claim_spec); judged by kit.analysis.claims
    schema: int = SPEC_SCHEMA
    # Filled by the loader, not by the file:
    path: str = ""
    profile: str = "paper"
    profile_description: str = ""
    # How long the chosen profile is expected to run, in seconds (``estimate_s`` in its [profiles.NAME] table; the
    # paper profile's at the top level), for `kit reproduce-all` to plan a budget; None: not stated.
    profile_estimate_s: float | None = None
    profiles: tuple[str, ...] = ()
    # A study folder's [study] table (plain, validated; None for an experiment of the kit's workloads) and
    # the folder it was loaded from ("" when parsed from a copy: resume reads the run's own copy).
    study: dict[str, JsonValue] | None = None
    study_dir: str = ""
    # The workload's description, resolved once by the loader (the kit's, or the study folder's [study] table).
    info: WorkloadInfo | None = field(default=None, compare=False, repr=False)

    @property
    def workload_info(self) -> WorkloadInfo:
        """What the spec's workload is (modules, datasets, parameters): carried by the spec, not looked up."""
        return self.info if self.info is not None else known_workloads()[self.workload.name]

    def check(self, p: str) -> None:
        if self.schema != SPEC_SCHEMA:
            raise Invalid("schema", f"{SPEC_SCHEMA} (this kit's spec format)", self.schema)
        info = self.workload_info
        if self.cases and not any(c.enabled for c in self.cases.values()):
            raise Invalid("cases", "at least one case with enabled = true")
        for cid in self.cases:
            if not cid.replace("_", "").replace("-", "").isalnum():
                raise Invalid(f"cases.{cid}", "a case name of letters, digits, '_' or '-'", cid)
        if "case" in self.grid:
            raise Invalid("grid.case", "another key: 'case' names the [cases] tables")
        self._check_size()
        for cfg in self.configurations():
            ds, where = self.dataset_for(cfg), (f"cases.{cfg['case']}.dataset" if "case" in cfg else "dataset")
            if info.datasets and ds is None:
                raise Invalid(where, f"a [dataset] table (workload {info.name} needs one of: {', '.join(info.datasets)})")
            if ds is not None and ds.name not in info.datasets:
                expected = f"one of {', '.join(info.datasets)}" if info.datasets else "no dataset (it uses random inputs)"
                raise Invalid(f"{where}.name", f"{expected} for workload {info.name}", ds.name)
        allowed = (WORKLOAD_FIELDS | set(info.params)) - {"name", "params"}
        for key, values in self.grid.items():
            if key not in allowed:
                raise Invalid(f"grid.{key}", f"a workload key to vary ({', '.join(sorted(allowed))})", key)
            if not values:
                raise Invalid(f"grid.{key}", "a non-empty list of values", list(values))
        for cfg in self.configurations():
            try:
                wl = self.workload_for(cfg)
                wl.check("workload")
            except Invalid as exc:
                if cfg:
                    exc.path = f"{exc.path} (grid configuration {cfg})"
                raise
            ds = self.dataset_for(cfg)
            if ds is None and wl.expected_accuracy:
                raise Invalid(f"cases.{cfg['case']}.workload.expected_accuracy" if "case" in cfg
                              else "workload.expected_accuracy",
                              "[] (no dataset: the accuracy of a model on random inputs means nothing)",
                              list(wl.expected_accuracy))
            if ds is not None:
                n_train = ds.n_train()
                if wl.batch_size > n_train:
                    raise Invalid("workload.batch_size", f"at most the {n_train} training examples of the dataset", wl.batch_size)
                if wl.steps_per_epoch is not None and wl.steps_per_epoch * wl.batch_size > n_train:
                    raise Invalid(
                        "workload.steps_per_epoch",
                        f"at most {n_train // wl.batch_size} (training examples {n_train} / batch size {wl.batch_size})",
                        wl.steps_per_epoch,
                    )
        seen: set[str] = set()
        for i, h in enumerate(self.hypotheses):
            if h.id in seen:
                raise Invalid(f"hypotheses[{i}].id", "a unique hypothesis id", h.id)
            seen.add(h.id)

    def _check_size(self) -> None:
        """Configurations and planned trials counted, never built, before anything iterates over them."""
        n_configs = max(1, sum(1 for c in self.cases.values() if c.enabled))
        for key, values in self.grid.items():
            n_configs *= max(1, len(values))
            if n_configs > MAX_CONFIGS:
                raise Invalid(f"grid.{key}", f"a grid of at most {MAX_CONFIGS} configurations (cases x grid values); "
                              f"this one has more than {MAX_CONFIGS}")
        per_config = len(self.experiment.frameworks) * (self.design.repetitions + self.design.warmup_repetitions)
        if n_configs * per_config > MAX_PLAN_TRIALS:
            raise Invalid("design.repetitions", f"a plan of at most {MAX_PLAN_TRIALS} trials; {n_configs} "
                          f"configuration(s) x {per_config} trials each is {n_configs * per_config}",
                          self.design.repetitions)

    def configurations(self) -> list[Config]:
        """Every enabled case crossed with the grid's cartesian product (one empty configuration without either)."""
        keys = sorted(self.grid)
        combos = [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(self.grid[k] for k in keys))]
        cases = [cid for cid, c in self.cases.items() if c.enabled]
        if not cases:
            return combos
        return [{"case": cid, **combo} for cid in cases for combo in combos]

    def workload_for(self, config: Config) -> Workload:
        """The workload of one configuration: [workload], then its case's overrides, then its grid values."""
        cfg: dict[str, SpecValue] = dict(config)
        case = cfg.pop("case", None)
        cid = None if case is None else str(case)  # a case id (a [cases] key)
        info = self.workload_info
        over = case_overrides(info, self.cases[cid].workload, f"cases.{cid}.workload") if cid is not None else {}
        merged: dict[str, SpecValue] = {**over, **cfg}
        wl = self.workload.with_config(merged)
        if any(k in info.params for k in merged):
            wl = dataclasses.replace(wl, params=convert_params(info, wl.params, "grid"))
        return wl

    def dataset_for(self, config: Config) -> Dataset | None:
        """The dataset of one configuration: its case's, else [dataset]."""
        case = config.get("case")
        if case is not None and self.cases[str(case)].dataset is not None:
            return self.cases[str(case)].dataset
        return self.dataset

    def datasets(self) -> list[Dataset]:
        """Every distinct dataset the enabled configurations use, in order."""
        out: list[Dataset] = []
        for cfg in self.configurations():
            ds = self.dataset_for(cfg)
            if ds is not None and ds not in out:
                out.append(ds)
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain data for the manifest (tuples become lists)."""
        data = dataclasses.asdict(self)
        data.pop("info", None)  # the loader's resolution, not part of the spec as written
        return _plain(data)


def _plain(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


SECTIONS = {"experiment", "goal", "dataset", "workload", "design", "telemetry", "container", "slurm", "hypotheses", "grid",
             "cases", "deviations", "claims", "schema"}
