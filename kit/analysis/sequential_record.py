"""The sequential rule as the kit applies it to a run: the kit's limits on a schedule, and the record of the looks.

The statistics (alpha spending, the decision at each look, the Monte-Carlo check) are pure and live in
:mod:`kit.stats.sequential`; this module adds what belongs to the kit: the limits ``kit run --until-conclusive``
accepts (kit.manifest), the schedule recomputed from what a run recorded, and analysis.json's ``sequential``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from kit.analysis_rows import HypothesisResult
from kit.manifest import SEQUENTIAL_MARGIN, SEQUENTIAL_MAX_LOOKS, SEQUENTIAL_MAX_REPETITIONS
from kit.stats.sequential import DEFAULT_MARGIN, Schedule, run_looks, spend


def schedule(first: int, step: int, max_repetitions: int, alpha: float, margin: float = DEFAULT_MARGIN) -> Schedule:
    """Looks at ``first``, ``first + step``, ... up to ``max_repetitions`` (always the last look)."""
    lo, hi = SEQUENTIAL_MARGIN
    if not (first >= 2 and step >= 1 and first <= max_repetitions <= SEQUENTIAL_MAX_REPETITIONS and 0 < alpha < 0.5
            and lo <= margin <= hi):
        raise ValueError(f"bad sequential schedule: first {first}, step {step}, max {max_repetitions}, "
                         f"alpha {alpha}, margin {margin} (the margin must lie in [{lo}, {hi}], max at most "
                         f"{SEQUENTIAL_MAX_REPETITIONS})")
    looks = list(range(first, max_repetitions + 1, step))
    if looks[-1] != max_repetitions:
        looks.append(max_repetitions)
    if len(looks) > SEQUENTIAL_MAX_LOOKS:
        raise ValueError(f"bad sequential schedule: {len(looks)} looks (first {first}, step {step}, max "
                         f"{max_repetitions}); at most {SEQUENTIAL_MAX_LOOKS}: take a larger step")
    return spend(looks, alpha, margin)


def schedule_of(record: Mapping[str, Any], alpha: float) -> Schedule:
    """The schedule a run recorded (``manifest.sequential``), recomputed from its inputs, never read as levels:
    a crafted record cannot spend more than ``alpha``."""
    def whole(key: str, low: int) -> int:
        v = record.get(key)
        if not (isinstance(v, int) and not isinstance(v, bool) and low <= v <= 10_000):
            raise ValueError(f"sequential.{key} must be an integer in [{low}, 10000], not {v!r}")
        return v

    margin = record.get("margin", DEFAULT_MARGIN)
    lo, hi = SEQUENTIAL_MARGIN
    if not (isinstance(margin, (int, float)) and not isinstance(margin, bool) and lo <= margin <= hi):
        raise ValueError(f"sequential.margin must be a number in [{lo}, {hi}], not {margin!r}")
    return schedule(whole("first", 2), whole("step", 1), whole("max_repetitions", 2), alpha, float(margin))


def hypothesis_key(h: HypothesisResult) -> str:
    """One hypothesis row's name in the sequential record: id, phase, configuration and arm pair."""
    cfg = f" [{h.config_id}]" if h.config_id else ""
    return f"{h.id} {h.phase}{cfg}: {h.arm_b} vs {h.arm_a}"


def summary(sched: Schedule, items: Sequence[tuple[str, np.ndarray, np.ndarray]],
            untestable: Sequence[tuple[str, str]], record: Mapping[str, Any]) -> dict[str, Any]:
    """analysis.json's ``sequential``: the schedule, each look's decisions, and what stayed open and why."""
    outcome, per_look = run_looks(sched, items)
    final = {d.key: d for d in outcome.decisions}
    open_rows = [{"key": k, "why": final[k].why or f"neither a difference nor equivalence within "
                  f"{sched.margin:.0%} shown at the looks' levels"} for k, _, _ in items
                 if k in final and final[k].status == "open"]
    open_rows += [{"key": k, "why": why} for k, why in untestable]
    stopped = record.get("stopped") if isinstance(record.get("stopped"), Mapping) else {}
    return {"schedule": sched.as_dict(), "looks_taken": [
                {"repetitions": n, "alpha": a, "decisions": [d.as_dict() for d in look]}
                for n, a, look in zip(sched.looks, sched.alphas, per_look, strict=False)],
            "stopped_at": outcome.stopped_at, "decided": outcome.conclusive,  # every testable hypothesis
            "conclusive": outcome.conclusive and not untestable,
            "decisions": [d.as_dict() for d in outcome.decisions], "open": open_rows,
            "stop_reason": str(stopped.get("reason"))[:300] if stopped else None}
