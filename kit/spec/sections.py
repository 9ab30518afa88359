"""The spec's other sections, each a frozen dataclass that checks its own ranges at load: ``[experiment]``,
``[goal]``, ``[design]``, ``[telemetry]``, ``[container]``, ``[slurm]``, ``[[hypotheses]]`` and ``[[deviations]]``.
Each error is a :class:`kit.spec_invalid.Invalid` naming the key path and what is expected."""

from __future__ import annotations

import math
from dataclasses import dataclass

from kit.disturbance import DEFAULT_BUDGET_FRAC, DEFAULT_FOREIGN_CPU, DEFAULT_RETRIES, Limits
from kit.metric_catalog import METRICS
from kit.spec.limits import (
    AMBIENT_PLAUSIBLE_C,
    AMBIENT_SETTING,
    BLOCKING,
    COLLECTOR_NAMES,
    FAMILIES,
    MAX_REPETITIONS,
    MAX_TIMEOUT_S,
    MAX_WAIT_S,
    UNITS,
)
from kit.spec_invalid import Invalid
from kit.workloads import FRAMEWORKS


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
            raise Invalid(f"{p}.id", "letters, digits, '_' or '-'", self.id)
        if len(self.frameworks) < 2:
            raise Invalid(f"{p}.frameworks", "at least two frameworks to compare", list(self.frameworks))
        for i, fw in enumerate(self.frameworks):
            if fw not in FRAMEWORKS:
                raise Invalid(f"{p}.frameworks[{i}]", f"one of {', '.join(FRAMEWORKS)}", fw)
        if len(set(self.frameworks)) != len(self.frameworks):
            raise Invalid(f"{p}.frameworks", "each framework once", list(self.frameworks))


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
            raise Invalid(f"{p}.disturbance_cpu", "a number of CPUs in [0, 4096] (0 turns the check off)",
                          self.disturbance_cpu)
        if not 0 <= self.disturbance_retries <= 10:
            raise Invalid(f"{p}.disturbance_retries", "an integer in [0, 10]", self.disturbance_retries)
        if not (isinstance(self.disturbance_budget_frac, (int, float)) and math.isfinite(self.disturbance_budget_frac)
                and 0 <= self.disturbance_budget_frac <= 1):
            raise Invalid(f"{p}.disturbance_budget_frac", "a share of the measured trials in [0, 1], e.g. 0.25 "
                          "(0 turns re-runs off)", self.disturbance_budget_frac,
                          fix="e.g. disturbance_budget_frac = 0.25 in [design]")
        if self.unit not in UNITS:
            raise Invalid(f"{p}.unit", f"one of {', '.join(UNITS)}", self.unit)
        if not 2 <= self.repetitions <= MAX_REPETITIONS:
            raise Invalid(f"{p}.repetitions", f"an integer in [2, {MAX_REPETITIONS}] (a test needs at least two "
                          "samples per arm)", self.repetitions)
        if not 0 <= self.warmup_repetitions <= MAX_REPETITIONS:
            raise Invalid(f"{p}.warmup_repetitions", f"an integer in [0, {MAX_REPETITIONS}]", self.warmup_repetitions)
        if self.blocking not in BLOCKING:
            raise Invalid(f"{p}.blocking", f"one of {', '.join(BLOCKING)}", self.blocking)
        if not 0 < self.alpha < 0.5:
            raise Invalid(f"{p}.alpha", "a significance level in (0, 0.5)", self.alpha)
        if not 0 < self.timeout_s <= MAX_TIMEOUT_S:
            raise Invalid(f"{p}.timeout_s", f"a positive number of seconds, at most {MAX_TIMEOUT_S:g} (a week)",
                          self.timeout_s)


# The air around a working computer (kit.collectors.ambient): a value outside is a misread or mislabelled sensor.

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
            raise Invalid(f"{p}.ambient_sensor", '"auto", "off" or a sensor as `kit doctor` lists it ("chip:label")',
                          self.ambient_sensor)
        lo, hi = AMBIENT_PLAUSIBLE_C
        if self.ambient_c is not None and not lo <= self.ambient_c <= hi:
            raise Invalid(f"{p}.ambient_c", f"the room's temperature in °C, in [{lo:g}, {hi:g}]",
                          self.ambient_c)
        if not 0.005 <= self.period_s <= 10:
            raise Invalid(f"{p}.period_s", "a sampling period in [0.005, 10] seconds", self.period_s)
        for i, name in enumerate(self.collectors):
            if name not in COLLECTOR_NAMES:
                raise Invalid(f"{p}.collectors[{i}]", f"one of {', '.join(COLLECTOR_NAMES)}", name)
        if not 0 < self.cooldown_band_c <= 50:
            raise Invalid(f"{p}.cooldown_band_c", "a positive temperature band in °C, at most 50", self.cooldown_band_c)
        if not 0 <= self.baseline_s <= MAX_WAIT_S:
            raise Invalid(f"{p}.baseline_s", f"seconds in [0, {MAX_WAIT_S:g}] of idle sampling at run start "
                          "(0 disables it)", self.baseline_s)
        if not 0 <= self.cooldown_max_s <= MAX_WAIT_S:
            raise Invalid(f"{p}.cooldown_max_s", f"seconds in [0, {MAX_WAIT_S:g}] (0 disables the wait)",
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
            raise Invalid(f"{p}.gpus", "'all', 'none' or comma-separated GPU indices like '0,1'", self.gpus)
        if self.cpuset and self.cpuset != "auto":
            try:
                cpuset_size(self.cpuset)
            except ValueError:
                raise Invalid(f"{p}.cpuset", "CPU numbers and ranges such as '0-7' or '0-3,8'", self.cpuset) from None
        for key in ("shm_size", "mem_limit"):
            val = getattr(self, key)
            if val and not ((val[:-1].isdigit() and val[-1].lower() in "kmg") or val.isdigit()):
                raise Invalid(f"{p}.{key}", "a size such as '2g', '512m' or a number of bytes", val)

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
            raise Invalid(f"{p}.gpus_per_trial", "an integer >= 0", self.gpus_per_trial)
        if self.blocks_per_job < 1:
            raise Invalid(f"{p}.blocks_per_job", "an integer >= 1", self.blocks_per_job)
        if not all(part.isdigit() for part in self.time_limit.replace("-", ":").split(":")):
            raise Invalid(f"{p}.time_limit", "a Slurm time such as '02:00:00' or '1-00:00:00'", self.time_limit)
        for i, opt in enumerate(self.sbatch_options):
            if not opt.startswith("--"):
                raise Invalid(f"{p}.sbatch_options[{i}]", "a long sbatch option such as '--qos=normal'", opt)


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
            raise Invalid(f"{p}.unit", f"one of {', '.join(UNITS)}", self.unit)
        if self.family not in FAMILIES:
            raise Invalid(f"{p}.family", f"one of {', '.join(FAMILIES)}", self.family)

        if self.metric not in METRICS:
            raise Invalid(f"{p}.metric", f"a known metric ({', '.join(sorted(METRICS))})", self.metric)
        for i, ph in enumerate(self.phases):
            if ph not in ("train", "infer"):
                raise Invalid(f"{p}.phases[{i}]", "'train' or 'infer'", ph)
        if not self.phases:
            raise Invalid(f"{p}.phases", "at least one phase", [])


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
                raise Invalid(f"{p}.{name}", "a non-empty string", getattr(self, name))
