"""Running the plan of `kit reproduce-all`, one study after another, through the path `kit run` takes
(:func:`kit.run.request.run_request` and :func:`kit.run.request.execute`). The runner is injected (``run_study``),
so the plan, the state and the summary are tested without running a framework; :class:`KitRunner` is the real one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kit.errors import KitError, StoreError, disk_error
from kit.plan import Plan, Trial
from kit.records import TrialRecord
from kit.reproduce.needs import Host
from kit.reproduce.plan import PlanEntry, run_status
from kit.reproduce.state import (
    STATE_DIR,
    StudyState,
    load_state,
    save_state,
)
from kit.run.loop import sigterm_as_interrupt
from kit.run.options import Interrupted, RunEvents
from kit.store import RunDir
from kit.trust import StudyTrust

# -- running the plan ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Result:
    """How one study ended in this call (or stood, for a study done earlier or skipped)."""

    entry: PlanEntry
    status: str  # complete | incomplete | failed | skipped
    reason: str = ""
    run_dir: str = ""
    wall_s: float | None = None


# run_study(entry, resume: the run directory to continue or None, on_run_dir: call with the run directory as soon
# as it exists) -> the run directory. The real one is :func:`kit_runner`'s; tests pass a fake.
RunStudy = Callable[[PlanEntry, Path | None, Callable[[Path], None]], Path]


@dataclass(frozen=True)
class Outcome:
    """Every study's result in plan order; ``interrupted``: the call was stopped (the rest did not start)."""

    results: tuple[Result, ...]
    interrupted: bool = False
    summary: tuple[Path, ...] = ()  # the summary page's files


class ReproduceEvents(Protocol):
    """What the loop reports (the CLI prints it): the plan before anything runs, each study's start and end."""

    def planned(self, plan: Sequence[PlanEntry], host: Host, budget_s: float | None) -> None: ...
    def study_started(self, entry: PlanEntry, index: int, total: int) -> None: ...
    def study_finished(self, result: Result) -> None: ...


class QuietEvents:
    """ReproduceEvents that say nothing (library use, tests)."""

    def planned(self, plan: Sequence[PlanEntry], host: Host, budget_s: float | None) -> None: ...
    def study_started(self, entry: PlanEntry, index: int, total: int) -> None: ...
    def study_finished(self, result: Result) -> None: ...


@contextlib.contextmanager
def _one_at_a_time(runs_dir: Path) -> Iterator[None]:
    """One `kit reproduce-all` per runs directory: two would start the same study twice."""
    from kit.safeio import open_lock

    lock = runs_dir / STATE_DIR / ".lock"
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = open_lock(lock)
    except OSError as exc:
        raise disk_error(exc, lock, "take the reproduce-all lock") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreError("another `kit reproduce-all` is using this runs directory", where=str(runs_dir),
                         fix="wait for it to finish, or stop it and run the command again to resume") from None
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _relative(path: Path, runs_dir: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(runs_dir.resolve()))
    except ValueError:
        raise StoreError("the run directory is outside the runs directory", where=str(path),
                         fix="keep --runs-dir the folder the runs are created in") from None


def run_plan(plan: Sequence[PlanEntry], runs_dir: Path, run_study: RunStudy, events: ReproduceEvents | None = None,
             budget_s: float | None = None, clock: Callable[[], float] = time.monotonic) -> Outcome:
    """Run the plan's studies one after another, recording each in the state file as it starts and ends.

    A study that fails (a KitError) is recorded with the reason and the next one runs; an interrupt (Ctrl-C,
    SIGTERM, the runner's Interrupted) records the study as incomplete and ends the loop (the rest are "not
    started"). With a budget, a study whose estimate exceeds what is left by now (earlier studies ran long)
    is skipped, not started.
    """
    events = events or QuietEvents()
    start = clock()
    results: list[Result] = []
    todo = [e for e in plan if e.action in ("run", "resume")]
    interrupted = False
    with _one_at_a_time(runs_dir), sigterm_as_interrupt():
        for entry in plan:
            if interrupted:
                results.append(Result(entry, "skipped", "not started: the call was interrupted"))
                continue
            if entry.action == "skip":
                results.append(Result(entry, "skipped", entry.reason))
                continue
            if entry.action == "done":
                prev = load_state(runs_dir)[entry.study]
                results.append(Result(entry, "complete", entry.reason, prev.run_dir, prev.wall_s))
                continue
            left = None if budget_s is None else budget_s - (clock() - start)
            if left is not None and (entry.estimate_s or 0.0) > left:
                results.append(Result(entry, "skipped", f"would not fit the budget: estimate "
                                      f"{entry.estimate_s:.0f} s, {max(left, 0.0):.0f} s left"))
            else:
                events.study_started(entry, todo.index(entry) + 1, len(todo))
                result, interrupted = _run_one(entry, runs_dir, run_study, clock)
                results.append(result)
            events.study_finished(results[-1])
    return Outcome(tuple(results), interrupted)


def _run_one(entry: PlanEntry, runs_dir: Path, run_study: RunStudy,
             clock: Callable[[], float]) -> tuple[Result, bool]:
    """One study through ``run_study`` (and whether it was interrupted); the state file names its run directory
    from the moment it exists."""
    prev = load_state(runs_dir).get(entry.study)
    before = prev.wall_s if prev is not None and entry.action == "resume" else 0.0
    run_dir = entry.run_dir if entry.action == "resume" else ""
    t0 = clock()

    def record(status: str, reason: str = "") -> Result:
        st = StudyState(entry.profile, run_dir, status, reason, before + clock() - t0)
        if st.run_dir:
            save_state(runs_dir, {**load_state(runs_dir), entry.study: st})
        return Result(entry, status, reason, run_dir, st.wall_s)

    def on_run_dir(path: Path) -> None:
        nonlocal run_dir
        run_dir = _relative(path, runs_dir)
        record("running")

    try:
        path = run_study(entry, runs_dir / entry.run_dir if entry.action == "resume" else None, on_run_dir)
        run_dir = _relative(path, runs_dir)
        status, _ = run_status(path)
        if status == "complete":
            return record("complete"), False
        return record("incomplete", f"run status {status}; run the command again to resume"), False
    except (KeyboardInterrupt, SystemExit, Interrupted) as exc:
        return record("incomplete", f"interrupted ({type(exc).__name__}); run the command again to resume"), True
    except KitError as err:
        return record("failed", err.one_line()), False


# -- the real runner: the path `kit run` takes -----------------------------------------------------------------

@dataclass(frozen=True)
class KitRunner:
    """Runs one study as `kit run SPEC --profile P` (or `kit run --resume RUN_DIR`) would, report included.

    ``events``: a context manager of the run's RunEvents (the CLI's progress bar); ``prepare``: called with
    the request before it runs (the CLI builds container images); ``on_new_run``: after a new run (the CLI
    trusts the study code that ran, as `kit run` does); ``report``: writes a complete run's report.
    """

    runs_dir: Path
    backend: str = "local"
    data_dir: Path | None = None
    download: bool = True
    events: Callable[[], AbstractContextManager[RunEvents]] | None = None
    prepare: Callable[[Any], None] | None = None
    on_new_run: Callable[[RunDir], None] | None = None
    report: Callable[[Path], None] | None = None
    trust: StudyTrust = field(default_factory=StudyTrust)  # whose study code a resumed run may execute (kit.run_code)
    wait_for_quiet_s: float | None = None  # `--wait-for-quiet`: each run waits this long for a quiet host (RunOptions)

    def __call__(self, entry: PlanEntry, resume: Path | None, on_run_dir: Callable[[Path], None]) -> Path:
        from kit.run.request import execute, run_request

        if resume is not None and run_status(resume)[0] == "complete":  # killed while its report was written
            self._report(resume)
            return resume
        req = run_request(spec=None if resume is not None else Path(entry.path),
                          profile=None if resume is not None else entry.profile, resume=resume,
                          backend=self.backend, runs_dir=self.runs_dir, data_dir=self.data_dir,
                          download=self.download,
                          trust_study_code=resume is not None and self.trust.trust_run_copy,
                          study=self.trust.study_dir if resume is not None else None)
        req.opts.wait_for_quiet_s = self.wait_for_quiet_s
        if self.prepare is not None:
            self.prepare(req)
        with (self.events() if self.events is not None else contextlib.nullcontext(RunEvents())) as inner:
            rd = execute(req, _Announcing(inner, on_run_dir))
        if resume is None and self.on_new_run is not None:
            self.on_new_run(rd)
        if rd.manifest().status == "complete":
            self._report(rd.path)
        return rd.path

    def _report(self, path: Path) -> None:
        if self.report is not None:
            self.report(path)
            return
        from kit.analysis.analyze import analyze_run
        from kit.report import default_formats, write_report

        write_report(path, analyze_run(path, trust=self.trust), default_formats()[0], self.trust)


class _Announcing(RunEvents):
    """The run's own events, plus the run directory handed on as soon as the run starts (for the state file)."""

    def __init__(self, inner: RunEvents, on_run_dir: Callable[[Path], None]) -> None:
        self.inner, self.on_run_dir = inner, on_run_dir

    def run_started(self, rd: RunDir, plan: Plan, done: int) -> None:
        self.on_run_dir(rd.path)
        self.inner.run_started(rd, plan, done)

    def message(self, text: str) -> None:
        self.inner.message(text)

    def trial_started(self, trial: Trial, index: int, total: int) -> None:
        self.inner.trial_started(trial, index, total)

    def trial_finished(self, trial: Trial, record: TrialRecord) -> None:
        self.inner.trial_finished(trial, record)

    def waiting(self, what: str, left_s: float, foreign_cpu: float | None) -> None:
        self.inner.waiting(what, left_s, foreign_cpu)
