"""The trial loop: the plan's missing trials (and those to retry) in plan order, under the run's lock.

Each trial runs in its own harness process (kit.run.trial); a disturbed one is re-run in its plan position; after
each trial ``should_stop`` (sequential stopping, kit.sequential_run) may end the run. A signal leaves the run
"interrupted", a write failure "failed", both resumable: the trial file is written only when the trial is over, so
a kill loses at most the trial in flight.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import time
from collections.abc import Iterator

from kit.errors import DiskError, StoreError, disk_error
from kit.executors import job_identity
from kit.records import TrialRecord
from kit.run.context import RunContext, rerun_ledger
from kit.run.host import baseline, write_node
from kit.run.options import Interrupted
from kit.run.trial import rerun_disturbed, run_one
from kit.store import RunDir


@contextlib.contextmanager
def run_lock(rd: RunDir, name: str = ".lock") -> Iterator[None]:
    """One `kit run` per run directory (or per chunk of a cluster run) at a time.

    The lock file is opened without following a link and never truncated: a ``.lock`` planted as a link to
    another file is refused, its target untouched.
    """
    from kit.safeio import open_lock

    try:
        fd = open_lock(rd.path / name)
    except OSError as exc:
        raise disk_error(exc, rd.path / name, "take the run's lock") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreError("another `kit run` is using this run directory", where=str(rd.path),
                         fix="wait for it to finish, or stop it before resuming") from None
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM (scheduler, `kill`) like Ctrl-C so the same cleanup runs."""
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def execute(ctx: RunContext) -> None:
    lock_name = ".lock" if not ctx.shared else f".lock-chunk-{ctx.opts.chunk}"
    with run_lock(ctx.rd, lock_name):
        execute_locked(ctx)


def to_retry(ctx: RunContext) -> dict[str, TrialRecord]:
    """The finished records whose status ``ctx.opts.retry`` asks to re-run, by trial id (call under the lock)."""
    if not ctx.opts.retry:
        return {}
    wanted = set(ctx.opts.retry)
    return {r.trial_id: r for r in ctx.rd.trial_records()
            if r.status in wanted and (ctx.only is None or r.trial_id in ctx.only)}


def execute_locked(ctx: RunContext) -> None:
    """Run the plan's missing trials (and those to retry) in plan order; the caller holds the run lock.

    A retried trial runs in its original plan position, keeping its trial
    id, seed, block and position: it runs among the missing trials where
    the plan put it, not in a batch at the end. The plan interleaves the
    arms (and orders them within each block) so that drift over the run
    (warming, throttling, background load) falls on both arms alike; a
    retry moved to another position would break that balance for its block
    and the drift checks, which read the schedule by position. Its failed
    record is archived first (``RunDir.archive_trial``), so trials/ never
    holds two files of one trial.
    """
    rd, plan, events = ctx.rd, ctx.plan, ctx.events
    with sigterm_as_interrupt(), contextlib.ExitStack() as stack:
        done = rd.finished_ids() - set(ctx.retry)
        if ctx.retry:
            events.message(f"retrying {len(ctx.retry)} trial(s) with status {', '.join(ctx.opts.retry)} in their "
                           f"plan positions; each failed record is kept under attempts/: {', '.join(sorted(ctx.retry))}")
        elif ctx.opts.retry:
            events.message(f"no finished trial has status {', '.join(ctx.opts.retry)}: nothing to retry")
        todo = [t for t in plan.trials if t.trial_id not in done and (ctx.only is None or t.trial_id in ctx.only)]
        try:  # from here a signal leaves the run "interrupted", never a "running" run whose process is gone
            events.run_started(rd, plan, len(done))
            if ctx.shared:
                write_node(ctx)
            if not ctx.shared:
                rd.reserve_space()
            stack.enter_context(kit_pinned(ctx))
            ctx.reruns = rerun_ledger(ctx)
            baseline(ctx)
            for n, trial in enumerate(todo):
                if ctx.opts.max_trials is not None and n >= ctx.opts.max_trials:
                    break
                events.trial_started(trial, len(done) + n, len(plan.trials))
                record = rerun_disturbed(ctx, trial, run_one(ctx, trial))
                events.trial_finished(trial, record)
                why = ctx.opts.should_stop(rd, trial) if ctx.opts.should_stop is not None else None
                if why:
                    rd.log_event("stopped", reason=why, after=trial.trial_id)
                    events.message(f"stopping: {why}")
                    break
        except (DiskError, OSError) as exc:
            raise failed_on_disk(ctx, exc) from None
        except KeyboardInterrupt:
            n_done = len(rd.finished_ids())
            rd.log_event("interrupted", finished=n_done, chunk=ctx.opts.chunk, **job_identity())
            if not ctx.shared:
                rd.update_manifest(status="interrupted")
            raise Interrupted(f"run stopped after {n_done} of {len(plan.trials)} trials; finished trials are kept",
                              where=str(rd.path), fix=f"continue with: kit run --resume {rd.path}") from None
        finally:
            if ctx.temp_reader is not None:
                ctx.temp_reader.close()
            rd.release_space()
        remaining = {t.trial_id for t in plan.trials} - rd.finished_ids()
        if ctx.shared:
            rd.log_event("chunk_end", chunk=ctx.opts.chunk, remaining_in_run=len(remaining), **job_identity())
            if not remaining:
                rd.update_manifest(status="complete", ended=time.time())
            return
        status = "complete" if not remaining else "partial"
        rd.update_manifest(status=status, ended=time.time())
        rd.log_event("end", status=status, remaining=len(remaining))
        shutil.rmtree(rd.path / "work", ignore_errors=True)


@contextlib.contextmanager
def kit_pinned(ctx: RunContext) -> Iterator[None]:
    """The kit's thread (and the sampler threads and reapers it starts) on the kit's CPUs while trials run."""
    pin = ctx.backend.pinning
    if not pin.kit_cpus:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, set(pin.kit_cpus))
    ctx.rd.log_event("pinning", **pin.as_dict())
    ctx.events.message(f"CPU pinning: {pin.note}")
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def failed_on_disk(ctx: RunContext, exc: OSError | DiskError) -> DiskError:
    """A write failed mid-run: clean up, record status "failed" (resumable), and say where and what to do.

    The reserve file is released first so that, on a full disk, the status
    and the event can still be written; the trial in flight is lost (its
    work directory and temporary files are removed), finished trials stay.
    """
    rd = ctx.rd
    err = exc if isinstance(exc, DiskError) else disk_error(exc, rd.path, after=rd.resume_hint())
    rd.release_space()
    shutil.rmtree(rd.path / "work", ignore_errors=True)
    for sub in ("trials", "samples", "."):
        for tmp in (rd.path / sub).glob(".*.tmp"):
            with contextlib.suppress(OSError):
                tmp.unlink()
    recorded = True
    try:
        rd.log_event("failed", reason=err.cause, where=err.where, chunk=ctx.opts.chunk)
        if not ctx.shared:
            rd.update_manifest(status="failed", ended=time.time(), failure={"cause": err.cause, "where": err.where})
    except (DiskError, OSError):
        recorded = False
    n_done = len(rd.finished_ids())
    note = (f"run failed after {n_done} of {len(ctx.plan.trials)} trials (status: failed, resumable)" if recorded else
            f"run stopped after {n_done} of {len(ctx.plan.trials)} trials; the status could not be written either "
            "(the manifest still says running), the run is resumable")
    return DiskError(f"{err.cause}; {note}", where=err.where, fix=err.fix)

