"""Experiment specs: frozen dataclasses loaded from TOML and validated at load.

A spec file describes one reproduced study (see ``experiments/``). Profiles
(``[profiles.quick]``) are partial specs deep-merged over the base before
validation, so a profile is checked exactly like the base. Every error names
the file, the key path and what is expected, and is raised before anything is
written (mlcube's IllegalParameterValueError is the model).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import math
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.claim_spec import Claim, check_claims
from kit.disturbance import DEFAULT_BUDGET_FRAC, DEFAULT_FOREIGN_CPU, DEFAULT_RETRIES, Limits
from kit.errors import SpecError, StoreError
from kit.metric_catalog import METRICS
from kit.spec_invalid import Invalid as _Invalid
from kit.workloads import FRAMEWORKS, MOVED_TO_STUDIES, WORKLOADS, WorkloadInfo

# The workloads a parse may name: the kit's, plus the study folder's own while its spec is parsed. Set for the
# duration of one parse_spec call (never a module-global registry that parsing a spec would mutate).
_PARSE_WORKLOADS: ContextVar[Mapping[str, WorkloadInfo] | None] = ContextVar("kit_spec_workloads", default=None)


def _workloads() -> Mapping[str, WorkloadInfo]:
    return _PARSE_WORKLOADS.get() or WORKLOADS


def _unknown_workload(path: str, name: object) -> _Invalid:
    """An unknown [workload].name; for a workload that moved into a study folder, where it went."""
    if isinstance(name, str) and name in MOVED_TO_STUDIES:
        folder = f"experiments/{MOVED_TO_STUDIES[name]}"
        return _Invalid(path, f"a workload this kit defines; {name!r} is defined by the study folder {folder} "
                        "([study] table)", name,
                        fix=f"run the folder (kit run {folder}); a run made by an earlier kit is resumed or verified "
                        "with that kit (its version: manifest.kit.version)")
    return _Invalid(path, f"a known workload ({', '.join(sorted(_workloads()))})", name)

SPEC_SCHEMA = 1
# Bounds that keep a crafted or mistyped spec from exhausting memory or waiting forever; each error names its limit.
MAX_INT = 10**9
MAX_REPETITIONS = 10_000
MAX_CONFIGS = 10_000
MAX_PLAN_TRIALS = 200_000
MAX_TIMEOUT_S = 7 * 24 * 3600.0
MAX_WAIT_S = 3600.0
MAX_SPEC_BYTES = 1 << 20  # an experiment file is a few kilobytes
PHASES: tuple[str, ...] = ("warmup", "train", "infer")
BLOCKING = ("interleaved", "sequential")
UNITS = ("trial", "configuration")  # the unit a hypothesis is tested on (kit/analysis/design.py)
DEVICES = ("auto", "cpu", "gpu")
TF32_MODES = ("native", "off", "on")  # kit.workloads.device.TF32_MODES (not imported: the host reads no workload code)
COLLECTOR_NAMES = ("cpu", "memory", "hwmon", "nvml", "rapl")




@dataclass(frozen=True)
class Experiment:
    """Identity of the study and the arms compared."""

    id: str
    title: str
    study: str
    citation: str
    reproduces: str
    frameworks: tuple[str, ...]
    seed: int = 0
    notes: str = ""
    # Where in the paper the paper profile's protocol comes from (table, figure or section), e.g. "Table 2".
    protocol_source: str = ""

    def check(self, p: str) -> None:
        if not self.id.replace("_", "").replace("-", "").isalnum():
            raise _Invalid(f"{p}.id", "letters, digits, '_' or '-'", self.id)
        if len(self.frameworks) < 2:
            raise _Invalid(f"{p}.frameworks", "at least two frameworks to compare", list(self.frameworks))
        for i, fw in enumerate(self.frameworks):
            if fw not in FRAMEWORKS:
                raise _Invalid(f"{p}.frameworks[{i}]", f"one of {', '.join(FRAMEWORKS)}", fw)
        if len(set(self.frameworks)) != len(self.frameworks):
            raise _Invalid(f"{p}.frameworks", "each framework once", list(self.frameworks))


@dataclass(frozen=True)
class Goal:
    """The GQM goal (Basili et al., 1994) and its questions."""

    analyse: str
    purpose: str
    quality_focus: str
    viewpoint: str
    context: str
    questions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Dataset:
    """Which data, from where, and how much of it."""

    name: str
    source: str = "full"
    train_size: int | None = None
    test_size: int | None = None

    def check(self, p: str) -> None:
        from kit.datasets import DATASETS

        if self.name not in DATASETS:
            raise _Invalid(f"{p}.name", f"a known dataset ({', '.join(sorted(DATASETS))})", self.name)
        info = DATASETS[self.name]
        if self.source not in info.sources:
            raise _Invalid(f"{p}.source", f"one of {', '.join(info.sources)}", self.source)
        for key in ("train_size", "test_size"):
            val = getattr(self, key)
            if val is not None and val < 1:
                raise _Invalid(f"{p}.{key}", "a positive number of examples", val)
        avail_train, avail_test = info.sizes(self.source, self.test_size)
        if self.train_size is not None and self.train_size > avail_train:
            raise _Invalid(f"{p}.train_size", f"at most {avail_train} (the {self.source} training part)", self.train_size)
        if self.test_size is not None and self.test_size > avail_test:
            raise _Invalid(f"{p}.test_size", f"at most {avail_test} (the {self.source} test part)", self.test_size)

    def n_train(self) -> int:
        from kit.datasets import DATASETS

        avail, _ = DATASETS[self.name].sizes(self.source, self.test_size)
        return self.train_size if self.train_size is not None else avail


@dataclass(frozen=True)
class Workload:
    """The model and its training/inference protocol (identical in every framework)."""

    name: str
    batch_size: int
    epochs: int
    learning_rate: float
    steps_per_epoch: int | None = None  # None: every full batch of the training set, each epoch
    optimizer: str = "sgd"
    momentum: float = 0.0
    infer_batch_size: int = 1000
    warmup_steps: int = 10
    device: str = "auto"
    threads: int | None = None
    # TF32 for float32 matmuls/convolutions, applied alike in both frameworks: native = each framework's default
    # (PyTorch: matmul off, cuDNN conv on; TensorFlow: both on), off, on
    tf32: str = "native"
    # a timed inference phase shorter than this repeats its full pass until it lasts this long (0 = one pass)
    min_phase_s: float = 0.0
    # [low, high]: the test accuracy (a fraction) a run of this profile and configuration should reach, and where
    # the figures come from in a comment beside it (the paper's reported accuracy, or runs measured with the kit);
    # a run far below it draws a threat (kit.analysis.accuracy_expected). [] declares none: workloads
    # on random inputs, synthetic stand-ins and smoke profiles, whose accuracy means nothing.
    expected_accuracy: tuple[float, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)  # the workload's own keys (see kit.workloads.Param)

    def check(self, p: str) -> None:
        if self.name not in _workloads():
            raise _unknown_workload(f"{p}.name", self.name)
        self.check_numbers(p)
        optimizers = _workloads()[self.name].optimizers
        if self.optimizer not in optimizers:
            raise _Invalid(f"{p}.optimizer", f"one of {', '.join(map(repr, optimizers))} (the optimizers both builds "
                           f"of {self.name} implement)", self.optimizer)
        declared = _workloads()[self.name].params
        for key, val in self.params.items():
            prm = declared[key]
            if prm.choices and val not in prm.choices:
                raise _Invalid(f"{p}.{key}", f"one of {', '.join(map(str, prm.choices))}", val)
            if prm.minimum is not None and isinstance(val, (int, float)) and val < prm.minimum:
                raise _Invalid(f"{p}.{key}", f"a value >= {prm.minimum}", val)

    def check_numbers(self, p: str) -> None:
        """The keys every workload has (sizes, rates, device, threads): also checked when a run's recorded spec is
        read (:func:`check_recorded`), where the workload itself may be a study's and not known here."""
        for key, top in (("batch_size", 1 << 20), ("epochs", 100_000), ("steps_per_epoch", 10**8),
                         ("infer_batch_size", 1 << 20)):
            val = getattr(self, key)
            if val is not None and not 1 <= val <= top:
                raise _Invalid(f"{p}.{key}", f"an integer in [1, {top}]", val)
        if not 0 <= self.warmup_steps <= 10**6:
            raise _Invalid(f"{p}.warmup_steps", "an integer in [0, 1000000]", self.warmup_steps)
        if not 0 < self.learning_rate < 10:
            raise _Invalid(f"{p}.learning_rate", "a number in (0, 10)", self.learning_rate)
        if not 0 <= self.momentum < 1:
            raise _Invalid(f"{p}.momentum", "a number in [0, 1)", self.momentum)
        if self.device not in DEVICES:
            raise _Invalid(f"{p}.device", f"one of {', '.join(DEVICES)}", self.device)
        if self.threads is not None and not 1 <= self.threads <= 4096:
            raise _Invalid(f"{p}.threads", "an integer in [1, 4096], or leave it out", self.threads)
        if self.tf32 not in TF32_MODES:
            raise _Invalid(f"{p}.tf32", f"one of {', '.join(TF32_MODES)} (native: each framework's default)", self.tf32)
        if not math.isfinite(self.min_phase_s) or not 0 <= self.min_phase_s <= MAX_WAIT_S:
            raise _Invalid(f"{p}.min_phase_s", "a finite number of seconds >= 0 (0: one pass per phase)",
                           self.min_phase_s)
        acc = self.expected_accuracy
        if acc and not (len(acc) == 2 and 0 <= acc[0] <= acc[1] <= 1):
            raise _Invalid(f"{p}.expected_accuracy", "[low, high] with 0 <= low <= high <= 1 (test accuracy as a "
                           "fraction), or [] for none", list(acc))

    def flat(self) -> dict[str, Any]:
        """Common keys and the workload's own keys in one table (the harness's view)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "params"}
        return {**out, **self.params}

    def with_config(self, config: dict[str, Any]) -> Workload:
        """This workload with a grid configuration applied (common keys or params)."""
        common = {k: v for k, v in config.items() if k in _WORKLOAD_FIELDS}
        params = {**self.params, **{k: v for k, v in config.items() if k not in _WORKLOAD_FIELDS}}
        return dataclasses.replace(self, **common, params=params)


@dataclass(frozen=True)
class Design:
    """Repetitions, blocking and the significance level."""

    repetitions: int
    warmup_repetitions: int = 1
    blocking: str = "interleaved"
    alpha: float = 0.05
    timeout_s: float = 1800.0
    # The hypotheses' default unit of test: "trial" (one test per configuration, paired by block) or
    # "configuration" (across the configurations, one row per device: the network is the unit, each
    # configuration's log ratio of its per-arm trial medians averaged per network; kit/analysis/across.py),
    # for grids with too few trials per configuration to decide anything (kit/analysis/design.py).
    unit: str = "trial"
    # A measured trial whose timed phase had more than this many CPUs busy outside it (mean over the phase),
    # or ran throttled or beside another GPU process, is re-run in its plan position up to
    # ``disturbance_retries`` times (kit.disturbance: the default and why). 0 turns the CPU check off.
    disturbance_cpu: float = DEFAULT_FOREIGN_CPU
    disturbance_retries: int = DEFAULT_RETRIES
    # The run-wide budget of those re-runs, as a share of the plan's measured trials (kit.disturbance.RerunBudget):
    # on a host that stays busy the per-trial cap alone would re-run every trial; 0 turns re-runs off.
    disturbance_budget_frac: float = DEFAULT_BUDGET_FRAC

    def disturbance_limits(self) -> Limits:
        return Limits(foreign_cpu=self.disturbance_cpu)

    def check(self, p: str) -> None:
        if not (isinstance(self.disturbance_cpu, (int, float)) and math.isfinite(self.disturbance_cpu)
                and 0 <= self.disturbance_cpu <= 4096):
            raise _Invalid(f"{p}.disturbance_cpu", "a number of CPUs in [0, 4096] (0 turns the check off)",
                           self.disturbance_cpu)
        if not 0 <= self.disturbance_retries <= 10:
            raise _Invalid(f"{p}.disturbance_retries", "an integer in [0, 10]", self.disturbance_retries)
        if not (isinstance(self.disturbance_budget_frac, (int, float)) and math.isfinite(self.disturbance_budget_frac)
                and 0 <= self.disturbance_budget_frac <= 1):
            raise _Invalid(f"{p}.disturbance_budget_frac", "a share of the measured trials in [0, 1], e.g. 0.25 "
                           "(0 turns re-runs off)", self.disturbance_budget_frac,
                           fix="e.g. disturbance_budget_frac = 0.25 in [design]")
        if self.unit not in UNITS:
            raise _Invalid(f"{p}.unit", f"one of {', '.join(UNITS)}", self.unit)
        if not 2 <= self.repetitions <= MAX_REPETITIONS:
            raise _Invalid(f"{p}.repetitions", f"an integer in [2, {MAX_REPETITIONS}] (a test needs at least two "
                           "samples per arm)", self.repetitions)
        if not 0 <= self.warmup_repetitions <= MAX_REPETITIONS:
            raise _Invalid(f"{p}.warmup_repetitions", f"an integer in [0, {MAX_REPETITIONS}]", self.warmup_repetitions)
        if self.blocking not in BLOCKING:
            raise _Invalid(f"{p}.blocking", f"one of {', '.join(BLOCKING)}", self.blocking)
        if not 0 < self.alpha < 0.5:
            raise _Invalid(f"{p}.alpha", "a significance level in (0, 0.5)", self.alpha)
        if not 0 < self.timeout_s <= MAX_TIMEOUT_S:
            raise _Invalid(f"{p}.timeout_s", f"a positive number of seconds, at most {MAX_TIMEOUT_S:g} (a week)",
                           self.timeout_s)


# The air around a working computer (kit.collectors.ambient): a value outside is a misread or mislabelled sensor.
AMBIENT_PLAUSIBLE_C = (-30.0, 60.0)
AMBIENT_SETTING = re.compile(r"^(auto|off|[A-Za-z0-9_.\-]{1,64}:[ -~]{1,64})$")


@dataclass(frozen=True)
class Telemetry:
    """Host-side sampling: which collectors, how often, and thermal control."""

    period_s: float = 0.1
    collectors: tuple[str, ...] = COLLECTOR_NAMES
    baseline_s: float = 5.0
    cooldown_band_c: float = 3.0
    cooldown_max_s: float = 120.0
    # The room's temperature (kit.collectors.ambient): "auto" finds a host ambient sensor, "chip:label" names
    # one, "off" reads none; ambient_c is the user's own measurement, stated once for the run.
    ambient_sensor: str = "auto"
    ambient_c: float | None = None

    def check(self, p: str) -> None:
        if not AMBIENT_SETTING.match(self.ambient_sensor):
            raise _Invalid(f"{p}.ambient_sensor", '"auto", "off" or a sensor as `kit doctor` lists it ("chip:label")',
                           self.ambient_sensor)
        lo, hi = AMBIENT_PLAUSIBLE_C
        if self.ambient_c is not None and not lo <= self.ambient_c <= hi:
            raise _Invalid(f"{p}.ambient_c", f"the room's temperature in °C, in [{lo:g}, {hi:g}]",
                           self.ambient_c)
        if not 0.005 <= self.period_s <= 10:
            raise _Invalid(f"{p}.period_s", "a sampling period in [0.005, 10] seconds", self.period_s)
        for i, name in enumerate(self.collectors):
            if name not in COLLECTOR_NAMES:
                raise _Invalid(f"{p}.collectors[{i}]", f"one of {', '.join(COLLECTOR_NAMES)}", name)
        if not 0 < self.cooldown_band_c <= 50:
            raise _Invalid(f"{p}.cooldown_band_c", "a positive temperature band in °C, at most 50", self.cooldown_band_c)
        if not 0 <= self.baseline_s <= MAX_WAIT_S:
            raise _Invalid(f"{p}.baseline_s", f"seconds in [0, {MAX_WAIT_S:g}] of idle sampling at run start "
                           "(0 disables it)", self.baseline_s)
        if not 0 <= self.cooldown_max_s <= MAX_WAIT_S:
            raise _Invalid(f"{p}.cooldown_max_s", f"seconds in [0, {MAX_WAIT_S:g}] (0 disables the wait)",
                           self.cooldown_max_s)


def cpuset_size(cpuset: str) -> int:
    """CPUs in a cpuset such as ``0-3,8`` (5); ValueError when it is not one."""
    n = 0
    for part in cpuset.replace(" ", "").split(","):
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and (not hi.isdigit() or int(hi) < int(lo))):
            raise ValueError(cpuset)
        n += int(hi) - int(lo) + 1 if dash else 1
    return n


@dataclass(frozen=True)
class Container:
    """Resource settings for container backends; ``gpus`` also selects the local backend's GPUs."""

    gpus: str = "all"  # "all", "none", or comma-separated indices such as "0,1"
    shm_size: str = "2g"
    # e.g. "0-7"; "auto": every CPU but one, the other left to the kit's collectors (kit.pinning); empty = no
    # pinning. The local backend pins the trial's process tree; container backends pass it to the engine.
    cpuset: str = ""
    mem_limit: str = ""  # e.g. "32g"; empty = no limit
    network: bool = False  # trials run without network unless this is true

    def check(self, p: str) -> None:
        g = self.gpus.replace(" ", "")
        if g not in ("all", "none") and not all(x.isdigit() for x in g.split(",")):
            raise _Invalid(f"{p}.gpus", "'all', 'none' or comma-separated GPU indices like '0,1'", self.gpus)
        if self.cpuset and self.cpuset != "auto":
            try:
                cpuset_size(self.cpuset)
            except ValueError:
                raise _Invalid(f"{p}.cpuset", "CPU numbers and ranges such as '0-7' or '0-3,8'", self.cpuset) from None
        for key in ("shm_size", "mem_limit"):
            val = getattr(self, key)
            if val and not ((val[:-1].isdigit() and val[-1].lower() in "kmg") or val.isdigit()):
                raise _Invalid(f"{p}.{key}", "a size such as '2g', '512m' or a number of bytes", val)

    def gpu_indices(self) -> list[int] | None:
        """None for all GPUs, [] for none, else the listed indices."""
        g = self.gpus.replace(" ", "")
        if g == "all":
            return None
        if g == "none":
            return []
        return [int(x) for x in g.split(",")]


@dataclass(frozen=True)
class Slurm:
    """Cluster settings for ``--executor slurm`` (the command line overrides them)."""

    partition: str = ""
    account: str = ""
    gpus_per_trial: int = 0
    time_limit: str = "02:00:00"
    blocks_per_job: int = 1
    exclusive: bool = True
    sbatch_options: tuple[str, ...] = ()

    def check(self, p: str) -> None:
        if self.gpus_per_trial < 0:
            raise _Invalid(f"{p}.gpus_per_trial", "an integer >= 0", self.gpus_per_trial)
        if self.blocks_per_job < 1:
            raise _Invalid(f"{p}.blocks_per_job", "an integer >= 1", self.blocks_per_job)
        if not all(part.isdigit() for part in self.time_limit.replace("-", ":").split(":")):
            raise _Invalid(f"{p}.time_limit", "a Slurm time such as '02:00:00' or '1-00:00:00'", self.time_limit)
        for i, opt in enumerate(self.sbatch_options):
            if not opt.startswith("--"):
                raise _Invalid(f"{p}.sbatch_options[{i}]", "a long sbatch option such as '--qos=normal'", opt)


FAMILIES = ("primary", "secondary")


@dataclass(frozen=True)
class Hypothesis:
    """One GQM hypothesis, tested once per phase listed."""

    id: str
    question: str
    metric: str
    phases: tuple[str, ...]
    h0: str
    h1: str
    unit: str | None = None  # "trial" or "configuration"; None: the [design] unit
    # Holm family, stated before the run: the primary hypotheses answer the paper's question and share one
    # family (their level alpha/m is what decides them); secondary ones (resources, telemetry) form their own
    # family, so a long list of secondary measures does not make the primary ones undecidable.
    family: str = "primary"

    def check(self, p: str) -> None:
        if self.unit is not None and self.unit not in UNITS:
            raise _Invalid(f"{p}.unit", f"one of {', '.join(UNITS)}", self.unit)
        if self.family not in FAMILIES:
            raise _Invalid(f"{p}.family", f"one of {', '.join(FAMILIES)}", self.family)

        if self.metric not in METRICS:
            raise _Invalid(f"{p}.metric", f"a known metric ({', '.join(sorted(METRICS))})", self.metric)
        for i, ph in enumerate(self.phases):
            if ph not in ("train", "infer"):
                raise _Invalid(f"{p}.phases[{i}]", "'train' or 'infer'", ph)
        if not self.phases:
            raise _Invalid(f"{p}.phases", "at least one phase", [])


@dataclass(frozen=True)
class Deviation:
    """One way the experiment deliberately differs from its paper: what each does and why.

    Listed in the spec (``[[deviations]]``) so the manifest, ``kit list`` and
    the report carry them with the results, not only a comment in the file.
    """

    aspect: str
    paper: str
    kit: str
    why: str

    def check(self, p: str) -> None:
        for name in ("aspect", "paper", "kit", "why"):
            if not getattr(self, name).strip():
                raise _Invalid(f"{p}.{name}", "a non-empty string", getattr(self, name))


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
    workload: dict[str, Any] = field(default_factory=dict)
    enabled: bool = True


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
    grid: dict[str, tuple[Any, ...]] = field(default_factory=dict)
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
    study: dict[str, Any] | None = None
    study_dir: str = ""
    # The workload's description, resolved once by the loader (the kit's, or the study folder's [study] table).
    info: WorkloadInfo | None = field(default=None, compare=False, repr=False)

    @property
    def workload_info(self) -> WorkloadInfo:
        """What the spec's workload is (modules, datasets, parameters): carried by the spec, not looked up."""
        return self.info if self.info is not None else _workloads()[self.workload.name]

    def check(self, p: str) -> None:
        if self.schema != SPEC_SCHEMA:
            raise _Invalid("schema", f"{SPEC_SCHEMA} (this kit's spec format)", self.schema)
        info = self.workload_info
        if self.cases and not any(c.enabled for c in self.cases.values()):
            raise _Invalid("cases", "at least one case with enabled = true")
        for cid in self.cases:
            if not cid.replace("_", "").replace("-", "").isalnum():
                raise _Invalid(f"cases.{cid}", "a case name of letters, digits, '_' or '-'", cid)
        if "case" in self.grid:
            raise _Invalid("grid.case", "another key: 'case' names the [cases] tables")
        self._check_size()
        for cfg in self.configurations():
            ds, where = self.dataset_for(cfg), (f"cases.{cfg['case']}.dataset" if "case" in cfg else "dataset")
            if info.datasets and ds is None:
                raise _Invalid(where, f"a [dataset] table (workload {info.name} needs one of: {', '.join(info.datasets)})")
            if ds is not None and ds.name not in info.datasets:
                expected = f"one of {', '.join(info.datasets)}" if info.datasets else "no dataset (it uses random inputs)"
                raise _Invalid(f"{where}.name", f"{expected} for workload {info.name}", ds.name)
        allowed = (_WORKLOAD_FIELDS | set(info.params)) - {"name", "params"}
        for key, values in self.grid.items():
            if key not in allowed:
                raise _Invalid(f"grid.{key}", f"a workload key to vary ({', '.join(sorted(allowed))})", key)
            if not values:
                raise _Invalid(f"grid.{key}", "a non-empty list of values", list(values))
        for cfg in self.configurations():
            try:
                wl = self.workload_for(cfg)
                wl.check("workload")
            except _Invalid as exc:
                if cfg:
                    exc.path = f"{exc.path} (grid configuration {cfg})"
                raise
            ds = self.dataset_for(cfg)
            if ds is None and wl.expected_accuracy:
                raise _Invalid(f"cases.{cfg['case']}.workload.expected_accuracy" if "case" in cfg
                               else "workload.expected_accuracy",
                               "[] (no dataset: the accuracy of a model on random inputs means nothing)",
                               list(wl.expected_accuracy))
            if ds is not None:
                n_train = ds.n_train()
                if wl.batch_size > n_train:
                    raise _Invalid("workload.batch_size", f"at most the {n_train} training examples of the dataset", wl.batch_size)
                if wl.steps_per_epoch is not None and wl.steps_per_epoch * wl.batch_size > n_train:
                    raise _Invalid(
                        "workload.steps_per_epoch",
                        f"at most {n_train // wl.batch_size} (training examples {n_train} / batch size {wl.batch_size})",
                        wl.steps_per_epoch,
                    )
        seen: set[str] = set()
        for i, h in enumerate(self.hypotheses):
            if h.id in seen:
                raise _Invalid(f"hypotheses[{i}].id", "a unique hypothesis id", h.id)
            seen.add(h.id)

    def _check_size(self) -> None:
        """Configurations and planned trials counted, never built, before anything iterates over them."""
        n_configs = max(1, sum(1 for c in self.cases.values() if c.enabled))
        for key, values in self.grid.items():
            n_configs *= max(1, len(values))
            if n_configs > MAX_CONFIGS:
                raise _Invalid(f"grid.{key}", f"a grid of at most {MAX_CONFIGS} configurations (cases x grid values); "
                               f"this one has more than {MAX_CONFIGS}")
        per_config = len(self.experiment.frameworks) * (self.design.repetitions + self.design.warmup_repetitions)
        if n_configs * per_config > MAX_PLAN_TRIALS:
            raise _Invalid("design.repetitions", f"a plan of at most {MAX_PLAN_TRIALS} trials; {n_configs} "
                           f"configuration(s) x {per_config} trials each is {n_configs * per_config}",
                           self.design.repetitions)

    def configurations(self) -> list[dict[str, Any]]:
        """Every enabled case crossed with the grid's cartesian product (one empty configuration without either)."""
        keys = sorted(self.grid)
        combos = [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(self.grid[k] for k in keys))]
        cases = [cid for cid, c in self.cases.items() if c.enabled]
        if not cases:
            return combos
        return [{"case": cid, **combo} for cid in cases for combo in combos]

    def workload_for(self, config: dict[str, Any]) -> Workload:
        """The workload of one configuration: [workload], then its case's overrides, then its grid values."""
        cfg = dict(config)
        cid = cfg.pop("case", None)
        info = self.workload_info
        over = _case_overrides(info, self.cases[cid].workload, f"cases.{cid}.workload") if cid is not None else {}
        merged = {**over, **cfg}
        wl = self.workload.with_config(merged)
        if any(k in info.params for k in merged):
            wl = dataclasses.replace(wl, params=_convert_params(info, wl.params, "grid"))
        return wl

    def dataset_for(self, config: dict[str, Any]) -> Dataset | None:
        """The dataset of one configuration: its case's, else [dataset]."""
        cid = config.get("case")
        if cid is not None and self.cases[cid].dataset is not None:
            return self.cases[cid].dataset
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


# -- generic TOML -> dataclass conversion -----------------------------------

_WORKLOAD_FIELDS = {f.name for f in dataclasses.fields(Workload)}

_SECTIONS = {"experiment", "goal", "dataset", "workload", "design", "telemetry", "container", "slurm", "hypotheses", "grid",
             "cases", "deviations", "claims", "schema"}


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    if tp is bool:
        return "true or false"
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return " or ".join(_type_name(a) for a in args)
    if origin is tuple:
        return f"a list of {_type_name(typing.get_args(tp)[0]).removeprefix('a ').removeprefix('an ')}s"
    if dataclasses.is_dataclass(tp):
        return "a table"
    return str(tp)


def _convert(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(tp):  # a manifest's copy writes unset options as null
            return None
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:  # Optional[X]: X's own error is the useful one
            return _convert(args[0], value, path)
        for a in args:
            try:
                return _convert(a, value, path)
            except _Invalid:
                continue
        raise _Invalid(path, _type_name(tp), value)
    if tp is bool:
        if not isinstance(value, bool):
            raise _Invalid(path, "true or false", value)
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid(path, "an integer", value)
        if abs(value) > MAX_INT:
            raise _Invalid(path, f"an integer of magnitude at most {MAX_INT}", value)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _Invalid(path, "a number", value)
        if not math.isfinite(value) or abs(value) > MAX_INT:
            raise _Invalid(path, f"a finite number of magnitude at most {MAX_INT} (not nan or inf)", value)
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise _Invalid(path, "a string", value)
        return value
    if origin is tuple:
        (elem,) = typing.get_args(tp)[:1]
        if not isinstance(value, list):
            raise _Invalid(path, _type_name(tp), value)
        return tuple(_convert(elem, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is dict and path.endswith(".params"):
        return dict(value)
    if origin is dict and typing.get_args(tp)[1] is Any:  # a free table (checked by its owner)
        if not isinstance(value, dict):
            raise _Invalid(path, "a table", value)
        return dict(value)
    if origin is dict and typing.get_args(tp)[1] is str:  # a table of strings (a claim's versions)
        if not isinstance(value, dict):
            raise _Invalid(path, "a table of strings", value)
        for k, v in value.items():
            if not isinstance(v, str):
                raise _Invalid(f"{path}.{k}", "a string", v)
        return dict(value)
    if origin is dict and dataclasses.is_dataclass(typing.get_args(tp)[1]):  # a table of tables
        if not isinstance(value, dict):
            raise _Invalid(path, "a table of tables", value)
        return {k: _build(typing.get_args(tp)[1], v, f"{path}.{k}") for k, v in value.items()}
    if origin is dict:
        if not isinstance(value, dict):
            raise _Invalid(path, "a table", value)
        out = {}
        for k, v in value.items():
            if not isinstance(v, list):
                raise _Invalid(f"{path}.{k}", "a list of values", v)
            out[k] = tuple(v)
        return out
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, path)
    return value


def _case_overrides(info: Any, raw: dict[str, Any], path: str) -> dict[str, Any]:
    """A case's workload keys, type-checked like [workload] (common keys and the workload's own)."""
    hints = _hints(Workload)
    out = {}
    for key, val in raw.items():
        if key in _WORKLOAD_FIELDS - {"name", "params"}:
            out[key] = _convert(hints[key], val, f"{path}.{key}")
        elif key in info.params:
            out[key] = _convert(info.params[key].type, val, f"{path}.{key}")
        else:
            known = sorted((_WORKLOAD_FIELDS - {"params", "name"}) | set(info.params))
            raise _Invalid(f"{path}.{key}", f"one of the keys of workload {info.name} ({', '.join(known)}); unknown key")
    return out


def _convert_params(info: Any, raw: dict[str, Any], path: str) -> dict[str, Any]:
    """Check a workload's own keys against its declared ``Param``s; fill defaults."""
    out = {}
    for key, val in raw.items():
        if key not in info.params:
            known = sorted((_WORKLOAD_FIELDS - {"params"}) | set(info.params))
            raise _Invalid(f"{path}.{key}", f"one of the keys of workload {info.name} ({', '.join(known)}); unknown key")
        out[key] = _convert(info.params[key].type, val, f"{path}.{key}")
    for key, prm in info.params.items():
        out.setdefault(key, prm.default)
    return out


@functools.cache
def _hints(cls: Any) -> dict[str, Any]:
    """A dataclass' resolved field types (resolving them is most of a spec's load time: computed once per class)."""
    return typing.get_type_hints(cls)


def _build(cls: Any, data: Any, path: str) -> Any:
    if not isinstance(data, dict):
        raise _Invalid(path, "a table", data)
    hints = _hints(cls)
    loader_set = ("path", "profile", "profile_description", "profile_estimate_s", "profiles") + (
        ("study", "study_dir", "info") if cls is Spec else ())
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in loader_set}
    if cls is Workload:
        if "params" in data:
            raise _Invalid(f"{path}.params", "workload keys written directly in [workload]; unknown key")
        name = data.get("name")
        if not isinstance(name, str) or name not in _workloads():
            raise _unknown_workload(f"{path}.name", name)
        extra = {k: v for k, v in data.items() if k not in fields}
        data = {k: v for k, v in data.items() if k in fields}
        data["params"] = _convert_params(_workloads()[name], extra, path)
    for key in data:
        if key not in fields:
            where = f"{path}.{key}" if path else key
            raise _Invalid(where, f"one of the known keys ({', '.join(sorted(fields))}); unknown key")
    kwargs = {}
    for name, f in fields.items():
        where = f"{path}.{name}" if path else name
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise _Invalid(where, f"{_type_name(hints[name])} (required key is missing)")
            continue
        kwargs[name] = _convert(hints[name], data[name], where)
    obj = cls(**kwargs)
    check = getattr(obj, "check", None)
    if check is not None:
        check(path)
    return obj


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _fmt(got: object) -> str:
    if got is dataclasses.MISSING:
        return ""
    return f", got {got!r}"


def load_spec(path: str | Path, profile: str | None = None) -> Spec:
    """Load, merge the profile (if any) and validate; raise SpecError on any fault."""
    import os
    import stat

    from kit.studies import STUDY_FILE, check_modules, study_dir_of, study_files

    path = Path(path)
    folder = study_dir_of(path)
    if folder is not None:
        path = folder / STUDY_FILE
    try:
        # Opened without blocking and checked on the open descriptor: a FIFO or device named as a spec
        # must be refused, not read (a FIFO would hang the kit), and a huge file not read into memory.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise SpecError("the spec is not a regular file (a FIFO, device or directory)", where=str(path),
                                fix="give the path of an experiment TOML file (see `kit list`)")
            if st.st_size > MAX_SPEC_BYTES:
                raise SpecError(f"the spec is {st.st_size} bytes, more than the limit of {MAX_SPEC_BYTES}",
                                where=str(path), fix="give the path of an experiment TOML file (a few kilobytes)")
            with os.fdopen(os.dup(fd), "rb") as fh:
                data = fh.read(MAX_SPEC_BYTES + 1)
        finally:
            os.close(fd)
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise SpecError("spec file not found", where=str(path), fix="give the path of an experiment TOML (see `kit list`)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read the spec ({exc})", where=str(path), fix="check the file's permissions and encoding") from None
    spec = parse_spec(text, str(path), profile)
    if folder is None:
        return spec
    check_modules(folder, spec.study)
    study_files(folder)  # links, special files and sizes refused at load, before anything runs
    return dataclasses.replace(spec, study_dir=str(folder.resolve()))


# What readers of a run take from its recorded spec (manifest.json's ``spec``) and check against the ranges the loader
# enforces: the design's numbers (alpha, repetitions, disturbance threshold), the sampling numbers, and the keys every
# workload has. Names and lists (collectors, the workload's name and own keys) are not re-checked: a run made by
# another kit version may name one this kit does not know, and no reader computes with them.
_RECORDED: tuple[tuple[str, Any, Any, tuple[str, ...] | None], ...] = (
    ("design", Design, lambda: Design(repetitions=2), None),
    ("telemetry", Telemetry, Telemetry, ("period_s", "baseline_s", "cooldown_band_c", "cooldown_max_s", "ambient_c",
                              "ambient_sensor")),
    ("workload", Workload, lambda: Workload(name="-", batch_size=1, epochs=1, learning_rate=0.1),
     ("batch_size", "epochs", "learning_rate", "steps_per_epoch", "momentum", "infer_batch_size", "warmup_steps",
      "device", "threads", "tf32", "min_phase_s", "expected_accuracy")),
)
FIX_RECORDED = "the manifest was edited or made by another tool; restore it from the run's bundle or re-run the study"


def check_recorded(spec: Any, where: str) -> None:
    """The numbers a run recorded in its spec, held to the ranges a spec file is held to when loaded (a crafted
    ``design.alpha`` of 0.9 or a sampling period of 1e-9 is a StoreError naming the key path, never used)."""
    if not isinstance(spec, Mapping):
        return  # its shape is kit.records.check_manifest's to refuse
    for key, cls, make, names in _RECORDED:
        table = spec.get(key)
        if not isinstance(table, Mapping):
            continue
        base = make()
        hints = _hints(cls)
        known = {f.name for f in dataclasses.fields(base)}
        keep = [n for n in (names or sorted(known)) if n in table and n in known]
        try:
            values = {n: _convert(hints[n], table[n], f"spec.{key}.{n}") for n in keep}
            obj = dataclasses.replace(base, **values)
            (obj.check_numbers if isinstance(obj, Workload) else obj.check)(f"spec.{key}")
        except _Invalid as exc:
            raise StoreError(f"the recorded {exc.path} is out of range: expected {exc.expected}{_fmt(exc.got)}",
                             where=f"{where}: {exc.path}", fix=FIX_RECORDED) from None
    hyps = spec.get("hypotheses")
    for i, h in enumerate(hyps if isinstance(hyps, list) else []):
        # the Holm family and the unit of test decide which p-values are adjusted together: a crafted family
        # would make a family of one (no adjustment) that the spec never stated
        if not isinstance(h, Mapping):
            continue
        for key, allowed in (("family", FAMILIES), ("unit", (*UNITS, None))):
            if key in h and h[key] not in allowed:
                raise StoreError(f"the recorded spec.hypotheses[{i}].{key} is {h[key]!r}, not one of "
                                 f"{', '.join(str(a) for a in allowed)}"[:300],
                                 where=f"{where}: spec.hypotheses[{i}].{key}", fix=FIX_RECORDED)


def parse_spec(text: str, path: str, profile: str | None = None) -> Spec:
    """Validate spec ``text`` (``path`` labels errors); used on resume with the manifest's copy."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"not valid TOML ({exc})", where=path, fix="correct the TOML syntax at the line shown") from None

    study, info = None, None
    if "study" in raw:  # a study folder's own workload: known to the checks below (this parse only)
        from kit.studies import study_workload

        study, info = study_workload(raw.pop("study"), path)
    token = _PARSE_WORKLOADS.set({**WORKLOADS, info.name: info} if info is not None else None)
    try:
        return _parse(raw, path, profile, study)
    finally:
        _PARSE_WORKLOADS.reset(token)


_PROFILE_KEYS = ("description", "estimate_s")  # a profile's own keys, beside the sections it overrides
MAX_ESTIMATE_S = 30 * 24 * 3600  # the longest budget `kit reproduce-all` takes (kit.sequential_run.parse_budget)


def _estimate(value: Any, where: str) -> float | None:
    """A profile's expected run time in seconds (None: not stated); where it was measured belongs in a comment."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_ESTIMATE_S:
        raise SpecError(f"expected seconds between 1 and {MAX_ESTIMATE_S} (30 days), got {value!r}", where=where,
                        fix="write the profile's expected run time in seconds, e.g. estimate_s = 240 "
                            "(a comment beside it saying where it was measured)")
    return float(value)


def _parse(raw: dict[str, Any], path: str, profile: str | None, study: dict[str, Any] | None) -> Spec:
    profiles_raw = raw.pop("profiles", {})
    if not isinstance(profiles_raw, dict):
        raise SpecError("expected a table of profiles", where=f"{path}: profiles", fix="write [profiles.NAME] tables")
    descriptions: dict[str, str] = {}
    estimates = {"paper": _estimate(raw.pop("estimate_s", None), f"{path}: estimate_s")}
    for name, prof in profiles_raw.items():
        if not isinstance(prof, dict):
            raise SpecError("expected a table", where=f"{path}: profiles.{name}", fix=f"write [profiles.{name}] as a table")
        descriptions[name] = str(prof.get("description", ""))
        estimates[name] = _estimate(prof.get("estimate_s"), f"{path}: profiles.{name}.estimate_s")
    chosen = profile or "paper"
    if chosen != "paper" and chosen not in profiles_raw:
        known = ", ".join(["paper", *profiles_raw])
        raise SpecError(f"unknown profile {chosen!r}", where=f"{path}: profiles", fix=f"use one of: {known}")

    def validate(data: dict[str, Any], label: str) -> Spec:
        try:
            spec = _build(Spec, data, "")
        except _Invalid as exc:
            prefix = "" if label == "paper" else f"profiles.{label} -> "
            raise SpecError(
                f"expected {exc.expected}{_fmt(exc.got)}",
                where=f"{path}: {prefix}{exc.path}",
                fix=exc.fix or f"set {exc.path} as described, or remove it if it is unknown",
            ) from None
        return spec

    base = validate(raw, "paper")
    try:  # against the paper protocol's configurations: a profile that runs fewer leaves a claim not testable
        check_claims(base.claims, base.experiment.frameworks, base.configurations())
    except _Invalid as exc:
        raise SpecError(f"expected {exc.expected}{_fmt(exc.got)}", where=f"{path}: {exc.path}",
                        fix=exc.fix or f"set {exc.path} as described, or remove it if it is unknown") from None
    for name, prof in profiles_raw.items():  # an invalid profile fails the file, chosen or not
        over = {k: v for k, v in prof.items() if k not in _PROFILE_KEYS}
        if "deviations" in over:
            raise SpecError("a profile cannot replace the experiment's deviations from the paper",
                            where=f"{path}: profiles.{name}.deviations",
                            fix="keep [[deviations]] at the top level; say how the profile differs in its description")
        if "claims" in over:
            raise SpecError("a profile cannot replace what the paper claimed",
                            where=f"{path}: profiles.{name}.claims",
                            fix="keep [[claims]] at the top level; a profile's configurations decide which are testable")
        unknown = set(over) - _SECTIONS
        if unknown:
            key = sorted(unknown)[0]
            raise SpecError(
                f"unknown key (a profile may override {', '.join(sorted(_SECTIONS))})",
                where=f"{path}: profiles.{name}.{key}",
                fix="remove the key or put it under one of those sections",
            )
        validate(_merge(raw, over), name)
    if chosen == "paper":
        spec = base
    else:
        over = {k: v for k, v in profiles_raw[chosen].items() if k not in _PROFILE_KEYS}
        spec = validate(_merge(raw, over), chosen)
    return dataclasses.replace(
        spec,
        path=path,
        profile=chosen,
        profile_description=descriptions.get(chosen, _main_profile_text(spec)),
        profile_estimate_s=estimates.get(chosen),
        profiles=("paper", *profiles_raw),
        study=study,
        info=_workloads()[spec.workload.name],  # [workload].name, resolved in this parse (the study's, or the kit's)
    )


def _main_profile_text(spec: Spec) -> str:
    """The main (``paper``) profile's description when the file gives none: the published protocol for a study
    that reproduces a paper, the spec as written for a study of one's own (``kit new study``: no citation)."""
    return "the published protocol" if spec.experiment.citation.strip() else "the spec as written (no paper)"


def parse_claims(raw: Any, frameworks: Any, where: str) -> tuple[Claim, ...]:
    """A list of claim tables (a manifest's copy of the spec) validated as at load, except against the paper
    protocol's configurations, which a run of another profile does not record: a filter that matches none of
    the run's configurations leaves the claim not testable."""
    try:
        if not isinstance(raw, list):
            raise _Invalid("claims", "a list of claim tables", raw)
        claims = tuple(_build(Claim, c, f"claims[{i}]") for i, c in enumerate(raw))
        fws = [f for f in frameworks if isinstance(f, str)] if isinstance(frameworks, list | tuple) else []
        check_claims(claims, fws, None)
    except _Invalid as exc:
        raise SpecError(f"expected {exc.expected}{_fmt(exc.got)}", where=f"{where}: {exc.path}",
                        fix="the run's copy of the spec was edited; re-run the study from its experiment.toml") from None
    return claims
