"""Continuing a run from its manifest: the spec from the run's own copy, the plan re-read (never re-drawn).

The copy of the spec decides the protocol of every trial still to run; it must resolve to the protocol the run
recorded and reproduce the recorded plan exactly. Then the missing trials (and, with ``--retry-failed``, the failed
ones, in their plan positions) run through the same loop as a new run (kit.run.loop), or the run's cluster jobs are
submitted again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kit.errors import KitError, PlanError, StoreError
from kit.executors import from_record, job_identity
from kit.manifest import Manifest
from kit.plan import Plan, make_plan
from kit.run.context import RunContext
from kit.run.loop import execute_locked, run_lock, to_retry
from kit.run.options import RETRYABLE, RunEvents, RunOptions
from kit.run.prepare import prepare
from kit.run.start import spec_digest
from kit.run_code import resume_code, snapshot
from kit.spec import Spec, parse_spec
from kit.store import RunDir


def stored_spec(rd: RunDir, man: Manifest, events: RunEvents) -> tuple[Spec, str]:
    """The run's own spec from the copy in its manifest, and whether its digest was ("checked" / "absent").

    The copy decides the protocol of every trial still to run (workload,
    time limit, telemetry); an edited copy would change it half-way through
    the run without a trace, so its sha256, stored when the run started,
    must still match (a StoreError naming ``spec_source.text`` otherwise).
    Manifests written before the digest existed are resumed, with a
    message saying the copy could not be checked: refusing them would
    strand every interrupted run of an older kit on no evidence of an edit.
    """
    where = f"{rd.path / 'manifest.json'}: spec_source.text"
    src = man.spec_source
    if src is None or not src.text:
        raise StoreError("the manifest holds no copy of the spec", where=where,
                         fix="start a new run; this one cannot be resumed")
    stored = src.sha256
    if stored is None:
        events.message("the manifest predates spec digests (no spec_source.sha256): the copy of the spec it "
                       "holds is used unchecked")
        state = "absent"
    elif stored != spec_digest(src.text):
        raise StoreError("the copy of the spec was edited after the run started (its sha256 is not "
                         "spec_source.sha256); resuming would change the protocol half-way through the run",
                         where=where,
                         fix=f"restore the copy the run started with (the file {src.path}, if it is "
                             "unchanged), or start a new run with the edited spec: kit run SPEC")
    else:
        state = "checked"
    return parse_spec(src.text, f"{src.path} (copy in manifest)", man.profile), state


# Spec fields the loader fills from where the file was found, not from its text.
LOADER_FIELDS = ("path", "study_dir")
# Parts of a spec that describe the study without fixing what a trial does: what the paper claimed, the words
# describing a profile and its estimated duration. Editing them between a kill and `--resume` (or packing a run
# whose file has since gained claims) changes no measurement, so they are not compared as protocol.
NOT_PROTOCOL = ("claims", "profile_description", "profile_estimate_s")


def protocol_of(spec_dict: Any) -> Any:
    """A resolved spec as the protocol it fixes (JSON-normalised, without where it was loaded from)."""
    plain = json.loads(json.dumps(spec_dict, default=str))
    return ({k: v for k, v in plain.items() if k not in LOADER_FIELDS + NOT_PROTOCOL} if isinstance(plain, dict)
            else plain)


MISSING = object()


def protocol_differences(now: Any, recorded: Any, path: str = "spec", strict: bool = False) -> list[str]:
    """Key paths where the protocol at hand differs from the recorded one (first 5), for messages.

    Not ``strict`` (resume): a setting the recorded spec does not have at all (the run was made by an older
    kit, before the setting existed) is not a difference, since the record cannot say what it was; every
    setting it has must match. ``strict`` (kit verify of someone else's bundle): a missing setting is a
    difference too, so a record cannot be thinned to keep a setting out of the comparison.
    """
    if isinstance(now, dict) and isinstance(recorded, dict):
        out: list[str] = []
        for k in sorted(set(recorded) | (set(now) if strict else set())):
            out += protocol_differences(now.get(k, MISSING), recorded.get(k, MISSING), f"{path}.{k}", strict)
            if len(out) >= 5:
                break
        return out[:5]
    if isinstance(now, list) and isinstance(recorded, list) and len(now) == len(recorded):
        out = []
        for i, (a, b) in enumerate(zip(now, recorded, strict=True)):
            out += protocol_differences(a, b, f"{path}[{i}]", strict)
        return out[:5]
    if now == recorded:
        return []
    shown = ["(not recorded)" if v is MISSING else repr(v) for v in (recorded, now)]
    return [f"{path}: {shown[0]} recorded, {shown[1]} now"[:200]]


def recorded_plan(spec: Spec, man: Manifest, where: str, strict: bool = False) -> Plan:
    """The run's plan, once the spec at hand is shown to be the protocol the run recorded.

    The plan in the manifest is the authority: the spec must resolve to the recorded spec (every setting a
    trial gets) and reproduce the recorded plan exactly (trials, configurations, order, seeds) from the
    recorded seed and arms. A digest stored beside the copy proves nothing (whoever edits the copy can
    recompute it); this check does not depend on one.
    """
    plan = man.plan
    if plan.digest() != man.plan_digest:
        raise PlanError("the stored plan does not match its digest", where=where,
                        fix="the manifest was edited; start a new run")
    diffs = protocol_differences(protocol_of(spec.to_dict()), protocol_of(man.spec), strict=strict)
    if diffs:
        raise PlanError("the spec does not resolve to the protocol the run recorded (" + "; ".join(diffs) + ")",
                        where=where, fix="restore the run's copy of its spec (spec_source.text), or start a new run")
    try:
        again = make_plan(spec, seed=plan.seed, arms=plan.arms, repetitions=man.plan_repetitions)
    except KitError as exc:
        raise PlanError(f"the spec cannot rebuild the recorded plan ({exc.cause})", where=where,
                        fix="restore the run's copy of its spec (spec_source.text), or start a new run") from None
    if again.digest() != plan.digest():
        made_by = man.kit.get("version")
        from kit import __version__

        raise PlanError("the spec does not reproduce the recorded plan (its trials, configurations or seeds differ)",
                        where=where, fix="restore the run's copy of its spec (spec_source.text), or start a new run"
                        + (f"; the run was made by kit {made_by}, this is {__version__}: resume it with that version"
                           if made_by != __version__ else ""))
    return plan


def resume_run(path: Path, opts: RunOptions, events: RunEvents | None = None) -> RunDir:
    """Continue a run from its manifest: the plan is re-read, never re-drawn.

    The run lock is taken before anything is written in the run directory
    (event, manifest, trials), so a second ``kit run --resume`` of a run in
    progress is refused and leaves the directory as it found it. With
    ``opts.retry`` (``--retry-failed``), finished trials with those statuses
    are run again in their plan positions (see ``kit.run.loop.execute_locked``), each failed
    record kept under attempts/.
    """
    events = events or RunEvents()
    rd = RunDir.open(path)
    man = rd.manifest()
    spec, digest_state = stored_spec(rd, man, events)
    plan = recorded_plan(spec, man, str(rd.path / "manifest.json"))
    bad = [s for s in opts.retry if s not in RETRYABLE]
    if bad:
        raise PlanError(f"cannot retry trials with status {', '.join(bad)}", where="--retry-failed",
                        fix=f"retry statuses are {', '.join(RETRYABLE)}")
    if opts.backend == "auto":
        opts.backend = man.backend.get("backend", "local")
    if opts.backend == man.backend.get("backend") and man.backend.get("images"):
        opts.backend_options.setdefault("images", {fw: v["row"] for fw, v in man.backend["images"].items() if "row" in v})
    executor = from_record(man.executor, str(rd.path / "manifest.json"))
    # the run's jobs are submitted again when the run was handed off and its executor is asked for again;
    # otherwise the missing trials run here
    resubmit = opts.chunk is None and executor.hands_off and opts.executor == executor.name
    if opts.retry and (resubmit or opts.chunk is not None):
        raise KitError("retrying failed trials is done on this host, not by cluster jobs", where="--retry-failed",
                       fix=f"kit run --resume {rd.path} --retry-failed (without --executor slurm)")
    wanted = executor.chunk_blocks(opts.chunk, str(rd.path)) if opts.chunk is not None else frozenset()
    # the run directory may be someone else's: its study code runs only if this reader trusts it (kit.run_code)
    code = resume_code(rd.path, man, opts.study_trust, declares_study=spec.workload_info.folder,
                       pinned_digest=opts.study_digest)
    with run_lock(rd, ".lock" if opts.chunk is None else f".lock-chunk-{opts.chunk}"), snapshot(code) as study_dir:
        if resubmit:
            executor.resubmit(rd, plan, events.message, code.digest)  # the digest checked above, not re-read
            return rd
        ready = prepare(spec, opts, events, plan)
        ctx = RunContext(ready, rd, opts, events, executor)
        ctx.backend.study_dir = study_dir  # the checked bytes, not the run's copy as it may be now
        if code.kind != "kit":
            events.message(f"study code: {code.describe()}")
        if opts.chunk is not None:
            ctx.only = frozenset(t.trial_id for t in plan.trials if t.block in wanted)
            ctx.shared = True
            rd.log_event("chunk_start", chunk=opts.chunk, **job_identity())
        else:
            ctx.retry = to_retry(ctx)  # read under the lock, before the run is marked running again
            rd.log_event("resume", finished=len(rd.finished_ids()), backend=opts.backend,
                         devices=ready.device_summary, spec_digest=digest_state, retry=list(opts.retry),
                         to_retry=sorted(ctx.retry), study_code=code.kind, study_digest=code.digest)
            rd.update_manifest(status="running")
        execute_locked(ctx)
    return rd


