"""One trial: run the harness with the collectors sampling around it, and build and commit its record.

The record is built here, once and complete (:meth:`kit.records.TrialRecord.from_outcome`), from the harness's
outcome and the host's readings around it, and written by ``RunDir.write_trial``; nothing is added to it afterwards.
"""

from __future__ import annotations

import json
import shutil
import socket
import time
from typing import cast

from kit import disturbance, disturbance_cpus, slow_phase
from kit.backends.base import TrialOutcome
from kit.collectors.base import TrialTarget
from kit.errors import disk_error
from kit.executors import job_identity
from kit.gpus import TrialDevice
from kit.harness import REQUEST_FILE
from kit.pinning import Pinning
from kit.records import (
    CollectorJson,
    CooldownJson,
    DisturbanceJson,
    ExecutorJson,
    JsonTable,
    JsonValue,
    PinningJson,
    Trial,
    TrialOutcomeFields,
    TrialRecord,
)
from kit.run.context import RunContext, quiet_times, quiet_wait, rerun_ledger
from kit.run.host import ambient, cooldown, drain, sampling
from kit.run.prepare import make_collectors


def phase_table(markers: list[JsonTable]) -> dict[str, dict[str, float | None]]:
    """Phase intervals from harness markers, in wall-clock and monotonic time (None: not in the marker)."""
    phases: dict[str, dict[str, float | None]] = {}
    for m in markers:  # the harness writes string phases and number times; whatever came is kept as it came
        if m.get("event") == "phase_start":
            phases[cast(str, m["phase"])] = {"start": _num(m["t"]), "start_mono": _num(m.get("t_mono"))}
        elif m.get("event") == "phase_end" and m.get("phase") in phases:
            phases[cast(str, m["phase"])].update(end=_num(m["t"]), end_mono=_num(m.get("t_mono")),
                                                 duration_s=_num(m.get("duration_s")))
    return {k: v for k, v in phases.items() if "end" in v}


def _num(v: JsonValue) -> float | None:
    return cast(float | None, v)


def outcome_fields(outcome: TrialOutcome, started: float, ended: float, collectors: list[CollectorJson],
                   cooldown: CooldownJson, backend: str, device: TrialDevice | None = None) -> TrialOutcomeFields:
    """What the harness's outcome says about the trial, as the record takes it. ``signal`` names the signal that
    ended the harness (None: it exited), from every backend: a negative return code locally, exit code 128+N from a
    container engine."""
    result = outcome.result or {}
    return TrialOutcomeFields(
        status=outcome.status, exit_code=outcome.exit_code, started=started, ended=ended, wall_s=outcome.wall_s,
        phases=phase_table(outcome.markers), markers=tuple(outcome.markers), results=result.get("results", {}),
        env=result.get("env", {}), signal=outcome.detail.get("signal"),
        error=result.get("error") or _failure_text(outcome), traceback_tail=result.get("traceback_tail"),
        stderr_tail=outcome.stderr_tail, backend={"name": backend, **outcome.detail}, collectors=tuple(collectors),
        cooldown=cooldown, host=socket.gethostname(), device=device.device if device is not None else None,
        gpu_tables=tuple(g.as_dict() for g in device.gpus) if device is not None else ())


def trial_record(trial: Trial, outcome: TrialOutcome, started: float, ended: float, collectors: list[CollectorJson],
                 cooldown: CooldownJson, backend: str, device: TrialDevice | None = None,
                 pinned: Pinning | None = None) -> TrialRecord:
    """The record of a trial from its outcome alone (no host readings: ambient and disturbance empty); for tools and
    tests that run a harness outside the loop."""
    return TrialRecord.from_outcome(trial, outcome_fields(outcome, started, ended, collectors, cooldown, backend,
                                                          device),
                                    ambient={"sensor_c": None, "sensor": None, "stated_c": None, "note": ""},
                                    disturbance=cast(DisturbanceJson, disturbance.TrialDisturbance().as_dict()),
                                    pinning=_pinning(pinned))


def _pinning(pinned: Pinning | None) -> PinningJson | None:
    return cast(PinningJson, pinned.as_dict()) if pinned is not None else None


def _failure_text(outcome: TrialOutcome) -> str | None:
    """Why a trial that left no error of its own ended: the time limit or a signal (None: neither)."""
    sig = outcome.detail.get("signal")
    if outcome.status == "timeout":
        return "time limit reached: the trial was killed" + (f" ({sig})" if sig else "")
    if sig:
        note = str(outcome.detail.get("note") or "")
        return note if sig in note else f"killed by signal {sig}" + (f"; {note}" if note else "")
    return None


def run_one(ctx: RunContext, trial: Trial) -> TrialRecord:
    """Run one trial and commit its record; returns the record.

    A trial to retry has its failed record archived first (attempts/); the
    new record says which attempt it is and where the earlier ones are.
    """
    rd = ctx.rd
    failed = ctx.retry.pop(trial.trial_id, None)
    if failed is not None and rd.trial_path(trial.trial_id).exists():
        archived = rd.archive_trial(trial.trial_id)
        rd.log_event("retry", trial_id=trial.trial_id, archived=archived, status=failed.status,
                     signal=failed.signal, error=str(failed.error or "")[:300])
    resolved = ctx.resolved(trial.trial_id)
    work = rd.work_dir(trial.trial_id)
    rd.subdir("work")  # a real directory of the run (a planted link is refused, never written through)
    shutil.rmtree(work, ignore_errors=True)  # leftovers of a killed attempt
    device = resolved.device
    try:
        work.mkdir()
        (work / REQUEST_FILE).write_text(json.dumps(resolved.request(), indent=1), encoding="utf-8")
    except OSError as exc:
        raise disk_error(exc, work, "prepare the trial's work directory", after=rd.resume_hint()) from None

    indices = device.indices if device is not None else None
    waited = cooldown(ctx, indices)
    room = ambient(ctx)
    target = TrialTarget(gpu_indices=indices)  # the backend exposes, and the collectors sample, only these GPUs
    collectors = make_collectors(ctx.prepared.collectors, target)
    started = time.time()
    with sampling(collectors):
        outcome = ctx.backend.run_trial(trial.arm, work, resolved.data_dir, ctx.spec.design.timeout_s, target)
    ended = time.time()
    rows, reports = drain(collectors)
    pin = ctx.backend.pinning  # a pinned trial's foreign load is judged on its own CPUs (kit.disturbance_cpus)
    scope = disturbance_cpus.trial_scope(pin.trial_cpus, pin.kit_cpus, outcome.markers,
                                         (outcome.result or {}).get("env"))
    shaken = disturbance.assess(outcome.markers, [(r.t, r.source, r.device, r.metric, r.value) for r in rows],
                                ctx.spec.telemetry.period_s, ctx.limits, ctx.idle_freq_mhz, cpus=scope)
    fields = outcome_fields(outcome, started, ended, reports, waited, ctx.backend.name, device)
    if not trial.warmup and fields.status == "ok":  # a phase slow with no cause seen is disturbed too (kit.slow_phase)
        shaken = slow_phase.amend(shaken, slow_phase.judge(trial.arm, trial.config_id, slow_phase.phase_seconds(
            fields.results, fields.phases), quiet_times(ctx)))
    executor = (cast(ExecutorJson, {"name": ctx.executor.name, "chunk": ctx.opts.chunk, **job_identity()})
                if ctx.shared else None)
    pin = ctx.backend.pinning
    record = TrialRecord.from_outcome(
        trial, fields, ambient=room,
        disturbance=cast(DisturbanceJson, shaken.as_dict()), pinning=_pinning(pin if pin.active else None),
        executor=executor, previous_attempts=tuple(rd.attempt_files(trial.trial_id)))
    rd.write_trial(record, rows)
    ctx.quiet = quiet_times(ctx).with_record(record)
    shutil.rmtree(work, ignore_errors=True)
    return record


def rerun_disturbed(ctx: RunContext, trial: Trial, record: TrialRecord) -> TrialRecord:
    """Run a measured trial again, in its plan position with its seed, while its timed phases were disturbed.

    Another process on the CPUs (or the GPU), or a throttled CPU or GPU, during a timed phase makes that
    trial's value a measurement of the host, not of the framework (kit.disturbance). The attempt is set aside
    under attempts/ with its telemetry, like a ``--retry-failed`` attempt, and the trial runs again at once:
    still in its block, so the arms of the block stay paired in time. Each trial gets at most ``[design]
    disturbance_retries`` re-runs and the run at most its budget (``disturbance_budget_frac`` of its measured
    trials); a load that outlasts the re-runs stops them (``--wait-for-quiet``: after a wait for a quiet window).
    A trial still disturbed is kept and flagged. The policy is kit.disturbance.rerun_disturbed's; it sees the
    records' JSON, and the last record built is the trial's.
    """
    ledger = ctx.reruns if ctx.reruns is not None else rerun_ledger(ctx)
    ctx.reruns = ledger
    rd = ctx.rd
    latest = [record]

    def wait() -> bool:
        return quiet_wait(ctx, "rerun").quiet

    def again() -> JsonTable:
        latest.append(run_one(ctx, trial))
        return latest[-1].to_json()

    hooks = disturbance.RerunHooks(archive=lambda: rd.archive_trial(trial.trial_id), run=again,
                                   log=rd.log_event, say=ctx.events.message,
                                   wait=wait if ctx.opts.wait_for_quiet_s else None)
    disturbance.rerun_disturbed(record.to_json(), trial.trial_id, trial.warmup, ledger, hooks)
    return latest[-1]
