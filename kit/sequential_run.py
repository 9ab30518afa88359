"""``kit run SPEC --until-conclusive``: add interleaved blocks until every hypothesis is decided or the budget ends.

The plan is drawn once, for ``max_repetitions`` (prefix-stable: the first
blocks are exactly the spec's plan), and recorded with the schedule in the
manifest (``sequential``). The runner runs it in order; after the trial that
completes a look's repetitions, this module analyses the run as it stands and
asks kit.stats.sequential whether every testable hypothesis is decided
(rejected, or equivalent within the margin) at that look's spent alpha. If so,
or if the next look would not fit in the budget, the run stops there: it is
complete at the repetitions it reached, and the analysis recomputes every look
from the data (nothing this module decided is trusted later). The runner knows
nothing of this beyond a ``should_stop`` hook.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

from kit.analysis.sequential_record import schedule
from kit.errors import KitError, PlanError
from kit.records import Trial
from kit.run.options import RunEvents, RunOptions, SequentialJson
from kit.run.start import start_run
from kit.spec import Spec
from kit.stats.sequential import DEFAULT_MARGIN
from kit.store import RunDir


@dataclass(frozen=True)
class UntilConclusive:
    """The user's limits: at most this many repetitions per arm, this much time (None: no limit)."""

    max_repetitions: int | None = None  # None: 4 x the spec's repetitions
    budget_s: float | None = None
    step: int | None = None  # repetitions between looks (None: the spec's repetitions)
    margin: float = DEFAULT_MARGIN


@dataclass
class _Looker:
    """The should_stop hook: one look per completed stage, with the budget check."""

    spec: Spec
    record: SequentialJson
    budget_s: float | None
    events: RunEvents
    started: float = field(default_factory=time.time)
    looked: set[int] = field(default_factory=set)
    stop: dict[str, str | int] | None = None

    def __call__(self, rd: RunDir, trial: Trial) -> str | None:
        from kit.analysis.analyze import analyze_run

        warm = self.spec.design.warmup_repetitions
        looks = schedule(self.record["first"], self.record["step"], self.record["max_repetitions"],
                         self.record["alpha"], self.record["margin"]).looks
        k = next((i for i, n in enumerate(looks) if trial.repetition == warm + n - 1), None)
        if k is None or k in self.looked or k == len(looks) - 1:
            return None
        plan = rd.manifest().plan
        need = {t.trial_id for t in plan.trials if t.repetition < warm + looks[k]}
        if not need <= rd.finished_ids():
            return None
        self.looked.add(k)
        seq = analyze_run(rd.path, write=False).sequential or {}
        listed = seq.get("open")
        opened = [str(o.get("key")) for o in (listed if isinstance(listed, list) else []) if isinstance(o, dict)]
        self.events.message(f"look {k + 1} of {len(looks)} at {looks[k]} repetitions: "
                            + ("every testable hypothesis decided" if seq.get("decided") else
                               f"{len(opened)} open: {', '.join(opened[:4])}{' ...' if len(opened) > 4 else ''}"))
        if seq.get("decided"):
            self.stop = {"reason": "conclusive", "at_repetitions": looks[k]}
            return f"every testable hypothesis is decided at {looks[k]} repetitions"
        elapsed = time.time() - self.started
        per_rep = elapsed / looks[k]
        if self.budget_s is not None and elapsed + per_rep * (looks[k + 1] - looks[k]) > self.budget_s:
            self.stop = {"reason": "budget", "at_repetitions": looks[k]}
            return (f"the next look ({looks[k + 1]} repetitions, about {per_rep * (looks[k + 1] - looks[k]):.0f} s "
                    f"more) would pass the budget of {self.budget_s:.0f} s")
        return None


def run_until_conclusive(spec: Spec, opts: RunOptions, until: UntilConclusive,
                         events: RunEvents | None = None) -> RunDir:
    """Run ``spec`` with looks after its repetitions and every ``step`` more, up to the maximum or the budget."""
    events = events or RunEvents()
    first = spec.design.repetitions
    top = until.max_repetitions if until.max_repetitions is not None else 4 * first
    step = until.step if until.step is not None else first
    if spec.design.blocking != "interleaved":
        raise PlanError("--until-conclusive needs interleaved blocks (each look compares complete blocks)",
                        where=f"{spec.path}: design.blocking", fix='set design.blocking = "interleaved"')
    if top < first:
        raise KitError(f"--max-repetitions {top} is below the spec's {first} repetitions (the first look)",
                       where="--max-repetitions", fix=f"give at least {first}")
    if until.budget_s is not None and until.budget_s <= 0:
        raise KitError("the budget must be a positive duration", where="--budget", fix="e.g. --budget 20m")
    if opts.executor != "local":
        raise KitError("--until-conclusive runs the looks on this host", where="--until-conclusive",
                       fix="use the local executor for a new run")
    try:
        schedule(first, step, top, spec.design.alpha, until.margin)
    except ValueError as exc:
        raise KitError(str(exc), where="--until-conclusive", fix="check --max-repetitions and --step") from None
    record = SequentialJson(first=first, step=step, max_repetitions=top, alpha=spec.design.alpha,
                            margin=until.margin, budget_s=until.budget_s)
    looker = _Looker(spec, record, until.budget_s, events)
    run_opts = dataclasses.replace(opts, sequential=record, should_stop=looker)
    rd = start_run(spec, run_opts, events)
    if looker.stop is not None:  # stopped at a look: complete at the repetitions it reached
        rd.update_manifest(status="complete", ended=time.time(), sequential={**record, "stopped": looker.stop})
        rd.log_event("end", status="complete", sequential=looker.stop)
    return rd


def parse_budget(text: str) -> float:
    """``20m``, ``1h30m``, ``90s`` or plain seconds -> seconds (KitError naming --budget otherwise)."""
    import re

    t = text.strip().lower()
    m = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?", t)
    if not t or not m or not any(m.groups()):
        raise KitError(f"cannot read the budget {text!r}", where="--budget", fix="e.g. 20m, 1h30m, 900s or 900")
    h, mi, s = (float(g) if g else 0.0 for g in m.groups())
    total = h * 3600 + mi * 60 + s
    if not 0 < total <= 30 * 24 * 3600:
        raise KitError(f"the budget {text!r} is not between 1 s and 30 days", where="--budget", fix="e.g. 20m")
    return total

