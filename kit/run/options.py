"""How to run (not what: that is the spec), and what the run loop tells whoever watches it.

``RunOptions`` is everything `kit run` was told besides the spec: where the run directory goes, which backend and
executor, the retry and sequential settings, whose study code a resume may run. ``RunEvents`` is the loop's only
channel to the user (the CLI renders it with rich); the library prints nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from kit.errors import KitError
from kit.trust import StudyTrust

if TYPE_CHECKING:
    from kit.records import Plan, Trial, TrialRecord
    from kit.spec import Container
    from kit.store import RunDir

NO_DATASET = "none"  # the name of the empty stand-in the trials of a dataset-less workload are given
RANDOM_INPUTS = "random"  # its source: the workload generates its inputs (not a synthetic stand-in of a dataset)

# What `--retry-failed` re-runs: a trial that did not finish its work (an error, including a kill by a
# signal, or the time limit). "oom" is left alone unless asked (`--retry-oom`): in a batch-size sweep
# running out of memory is the result (the largest batch that fits), and re-running it only repeats it;
# "skipped" is the workload saying the configuration does not apply.
RETRY_FAILED = ("error", "timeout")
RETRYABLE = ("error", "timeout", "oom")


class RunEvents:
    """Hooks the run loop calls; the default does nothing (tests, library use)."""

    def run_started(self, rd: RunDir, plan: Plan, done: int) -> None: ...
    def message(self, text: str) -> None: ...
    def trial_started(self, trial: Trial, index: int, total: int) -> None: ...
    def trial_finished(self, trial: Trial, record: TrialRecord) -> None: ...
    def waiting(self, what: str, left_s: float, foreign_cpu: float | None) -> None:
        """A wait for a quiet host is under way (``--wait-for-quiet``): its countdown, about once a second."""


class BackendOptions(TypedDict, total=False):
    """Keyword arguments of the backend's constructor (kit.backends): the image row per framework (``--image``,
    ``--images``), the container settings with the CPUs resolved, the interpreter of the local backend (tests)."""

    images: dict[str, str]
    container: Container
    python: str


class SlurmOverrides(TypedDict, total=False):
    """The command line's values over the spec's [slurm] table (None: not given)."""

    partition: str | None
    account: str | None
    gpus_per_trial: int | None
    time_limit: str | None
    blocks_per_job: int | None
    sbatch_options: list[str] | tuple[str, ...] | None


class SequentialJson(TypedDict, total=False):
    """``sequential`` in the manifest: the looks of `kit run --until-conclusive` (kit.sequential_run)."""

    first: int
    step: int
    max_repetitions: int
    alpha: float
    margin: float
    budget_s: float | None
    stopped: dict[str, str | int]


@dataclass
class RunOptions:
    """How to run (not what: that is the spec)."""

    runs_root: Path = Path("runs")
    backend: str = "local"
    backend_options: BackendOptions = field(default_factory=lambda: BackendOptions())
    data_dir: Path | None = None
    download: bool = True
    seed: int | None = None
    collectors: tuple[str, ...] | None = None  # None: the spec's
    max_trials: int | None = None  # stop after this many new trials (debugging, tests)
    executor: str = "local"  # local | slurm
    slurm: SlurmOverrides = field(default_factory=lambda: SlurmOverrides())  # command-line overrides of [slurm]
    chunk: int | None = None  # inside a cluster job: run only this chunk of blocks
    label: str | None = None  # a version label for `kit history` (e.g. "torch 2.6")
    arms: tuple[str, ...] | None = None  # None: the spec's; `--images` gives one arm per image row
    retry: tuple[str, ...] = ()  # resume only: re-run finished trials with these statuses (see RETRY_FAILED)
    # `kit run --until-conclusive` (kit.sequential_run): the plan is drawn for sequential["max_repetitions"]
    # and recorded in the manifest; after each trial ``should_stop`` may end the run (it returns why)
    sequential: SequentialJson | None = None
    should_stop: Callable[[RunDir, Trial], str | None] | None = None
    # resume only: whose study code the resumed trials may run (kit.run_code): the user's trust for this command,
    # and the digest a cluster job was handed by the kit that checked the copy and submitted it
    study_trust: StudyTrust = field(default_factory=StudyTrust)
    study_digest: str | None = None
    # `--wait-for-quiet DURATION`: on a busy host, wait up to this long for a quiet window before the first trial
    # and before re-running disturbed trials while load persists (None: go on at once)
    wait_for_quiet_s: float | None = None


class Interrupted(KitError):
    """The run was stopped by a signal; what finished is kept."""

    exit_code = 130
