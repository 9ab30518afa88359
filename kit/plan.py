"""The trial plan: every trial of a run, in the order it runs.

Frameworks are interleaved in randomised complete blocks: one block holds one
trial of each arm for one configuration and repetition, in a seeded random
order, so order and drift are spread over the arms and paired tests can pair
the trials of one block. ``blocking = "sequential"`` (all trials of one arm,
then the next: the original paper's design) exists to show the confound it
invites. Warm-up repetitions are planned, run and stored like the others and
flagged ``warmup`` so analysis excludes them.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kit.records import Plan, Trial  # the plan's record format (kit.records owns it)
from kit.spec import Spec


def config_label(config: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(config.items())) or "default"


def block_seed(base: int, repetition: int, config_id: str) -> int:
    """The data-order/initialisation seed shared by every arm of one block."""
    h = hashlib.sha256(f"{base}:{repetition}:{config_id}".encode()).digest()
    return int.from_bytes(h[:4], "big")


def arm_framework(arm: str) -> str:
    """The framework of an arm: ``pytorch``, or ``pytorch@2.6-cu124`` (one image version of it)."""
    return arm.split("@", 1)[0]


def make_plan(spec: Spec, seed: int | None = None, arms: tuple[str, ...] | None = None,
              repetitions: int | None = None) -> Plan:
    """Build the plan for ``spec`` (seed defaults to the spec's).

    ``repetitions`` overrides the spec's (``kit run --until-conclusive`` draws the plan up to its maximum).
    Blocks are drawn one after the other from one generator, so the plan of more repetitions begins with the
    plan of fewer: a run that stops early ran exactly the plan of the repetitions it reached.
    """
    seed = spec.experiment.seed if seed is None else seed
    arms = arms or spec.experiment.frameworks
    rng = random.Random(seed)
    configs = {f"c{i:02d}": cfg for i, cfg in enumerate(spec.configurations())}
    n_rep = spec.design.warmup_repetitions + (spec.design.repetitions if repetitions is None else repetitions)

    blocks: list[tuple[int, str, list[str]]] = []  # (repetition, config id, arm order)
    for rep in range(n_rep):
        cfg_ids = list(configs)
        rng.shuffle(cfg_ids)
        for cid in cfg_ids:
            order = list(arms)
            rng.shuffle(order)
            blocks.append((rep, cid, order))

    cells: list[tuple[int, int, str, str]] = []  # (block, repetition, config id, arm)
    if spec.design.blocking == "interleaved":
        for b, (rep, cid, order) in enumerate(blocks):
            cells += [(b, rep, cid, arm) for arm in order]
    else:  # sequential: every trial of one arm, then the next arm
        for arm in arms:
            cells += [(b, rep, cid, arm) for b, (rep, cid, _) in enumerate(blocks)]

    trials = []
    for pos, (b, rep, cid, arm) in enumerate(cells):
        trials.append(Trial(
            trial_id=f"r{rep:03d}-{cid}-{arm}",
            position=pos,
            block=b,
            repetition=rep,
            warmup=rep < spec.design.warmup_repetitions,
            arm=arm,
            framework=arm_framework(arm),
            config_id=cid,
            config=configs[cid],
            seed=block_seed(seed, rep, cid),
        ))
    return Plan(seed, spec.design.blocking, tuple(arms), configs, tuple(trials))


# -- how long the rest of a run will take ------------------------------------------------------------------------

# The profile's estimate counts as this many measured trials when blended with the measured ones: it rules the
# first trials (a cold start, a warm-up) and yields to the host's own figure after a few; on a busy host the
# measured trials (with their re-runs) soon say the estimate is ten times too short.
ESTIMATE_WEIGHT_TRIALS = 2.0


@dataclass(frozen=True)
class Eta:
    """The time left of a run, and what it rests on."""

    left_s: float | None  # None: neither an estimate nor a measured trial yet
    basis: str  # "estimate" (the profile's estimate_s), "measured" (this host's trials), "blend", or "none"
    per_trial_s: float | None = None

    def text(self) -> str:
        """``~12 min (measured)`` for a line; ``-`` when there is nothing to go on."""
        if self.left_s is None:
            return "-"
        s = round(self.left_s)
        if s < 60:
            short = f"{s} s"
        elif s < 3600:
            short = f"{s // 60} min {s % 60:02d} s"
        else:
            short = f"{s // 3600} h {s % 3600 // 60:02d} min"
        return f"~{short} ({'estimate + measured' if self.basis == 'blend' else self.basis})"


def eta(total_trials: int, finished_trials: int, trial_times_s: Sequence[float], estimate_s: float | None,
        in_flight_s: float | None = None) -> Eta:
    """The time left: the trials still to run times a per-trial time, less what the trial in flight has run.

    Before any trial of this execution finishes the per-trial time is the profile's estimate spread over the plan
    (``estimate_s / total_trials``); then the mean of the measured trial times (each from its start to its last
    re-run: re-runs are part of what a trial costs on this host), blended with the estimate counting as
    :data:`ESTIMATE_WEIGHT_TRIALS` trials. ``finished_trials`` includes those of earlier executions (a resume);
    ``in_flight_s`` is how long the current trial has run (None: none is running). Never negative.
    """
    left_trials = max(0, total_trials - finished_trials)
    prior = estimate_s / total_trials if estimate_s and estimate_s > 0 and total_trials > 0 else None
    times = [t for t in trial_times_s if t >= 0]
    measured = sum(times) / len(times) if times else None
    if prior is None and measured is None:
        return Eta(None, "none")
    if measured is None:
        per, basis = prior, "estimate"
    elif prior is None:
        per, basis = measured, "measured"
    else:
        w = ESTIMATE_WEIGHT_TRIALS
        per, basis = (w * prior + len(times) * measured) / (w + len(times)), "blend"
    assert per is not None
    left = left_trials * per
    if in_flight_s is not None and left_trials > 0:
        left -= min(max(in_flight_s, 0.0), per)
    return Eta(max(0.0, left), basis, per)


class EtaClock:
    """The trial times of one execution, fed by the progress display (times from one monotonic clock)."""

    def __init__(self, total_trials: int, finished_trials: int, estimate_s: float | None) -> None:
        self.total, self.finished, self.estimate_s = total_trials, finished_trials, estimate_s
        self.times: list[float] = []
        self.started_at: float | None = None

    def started(self, now: float) -> None:
        self.started_at = now

    def finished_one(self, now: float) -> None:
        if self.started_at is not None:
            self.times.append(now - self.started_at)
        self.started_at = None
        self.finished += 1

    def eta(self, now: float) -> Eta:
        return eta(self.total, self.finished, self.times, self.estimate_s,
                   None if self.started_at is None else now - self.started_at)
