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
