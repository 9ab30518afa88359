"""`kit status RUN_DIR`: where every trial of a run stands, with the cluster's word on it.

A trial is ``finished`` (its file says ok), ``skipped`` (by design, with a reason), ``failed`` (its file says oom,
error or timeout), ``running`` (its chunk's job runs and the trial's work
directory exists), ``queued`` (its job is pending, or running but not there
yet), ``lost`` (its job ended without it: Slurm's state and reason say why,
e.g. TIMEOUT, PREEMPTED, NODE_FAIL, CANCELLED) or ``missing`` (not run, no
job: resume the run).

The run's own status is the manifest's unless that says "running" and no process works on the run any more
(kit.executors.liveness): then "interrupted", ``recorded_status`` keeping the manifest's word and
``status_reason`` saying why.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from kit.executors.liveness import run_liveness
from kit.store import RunDir


def run_status(run_dir: Path) -> dict[str, Any]:
    rd = RunDir.open(run_dir)
    man = rd.manifest()
    plan = man.plan
    records = {r.trial_id: r for r in rd.trial_records()}
    attempts = Counter(a.trial_id for a in rd.checked_attempts())  # failed attempts set aside by --retry-failed
    chunk_of: dict[int, int] = {}
    jobs: list[dict[str, Any]] = []
    states: dict[str, Any] = {}
    latest: dict[int, str] = {}
    if man.executor.name == "slurm":
        from kit.executors.slurm import SlurmExecutor, job_states, latest_task_ids

        for i, blocks in enumerate(SlurmExecutor.from_record(man.executor.as_dict(), str(rd.path)).chunks or []):
            for b in blocks:
                chunk_of[b] = i
        latest = latest_task_ids(rd.path)
        states = job_states(list(latest.values())) if latest else {}
    rows = []
    for t in plan.trials:
        rec = records.get(t.trial_id)
        chunk = chunk_of.get(t.block)
        job = latest.get(chunk) if chunk is not None else None
        js = states.get(job) if job else None
        reason = ""
        node = (rec.host if rec is not None else None) or (js.node if js else "")
        if rec is not None:
            state = {"ok": "finished", "skipped": "skipped"}.get(rec.status, "failed")
            reason = "" if rec.status == "ok" else f"{rec.status}: {(rec.error or '')[:120]}"
            job = (rec.executor or {}).get("job_id") or job
        elif js is None:
            state = "missing"
        elif js.state == "PENDING":
            state, reason = "queued", js.reason
        elif js.active:
            state = "running" if (rd.work_dir(t.trial_id) / "markers.jsonl").exists() else "queued"
        else:
            state = "lost"
            reason = f"job {job} ended {js.state}" + (f" ({js.reason})" if js.reason and js.reason != "None" else "")
        rows.append({"trial_id": t.trial_id, "position": t.position, "block": t.block, "arm": t.arm, "chunk": chunk,
                     "state": state, "job": job, "node": node, "reason": reason,
                     "signal": rec.signal if rec is not None else None,
                     "earlier_attempts": attempts.get(t.trial_id, 0)})
    for i, j in sorted(latest.items()):
        js = states.get(j)
        in_chunk = [r for r in rows if r["chunk"] == i]
        jobs.append({"chunk": i, "job": j, "state": js.state if js else "UNKNOWN", "reason": js.reason if js else "",
                     "node": js.node if js else "", "finished": sum(r["state"] in ("finished", "failed", "skipped") for r in in_chunk),
                     "trials": len(in_chunk)})
    counts = Counter(r["state"] for r in rows)
    # "running" is the manifest's word; whether a process still works on the run is the lock's and the holder's
    # (kit.executors.liveness): a run whose process is gone reads "interrupted", with why
    live = run_liveness(rd, man.status, hands_off=bool(chunk_of) or man.executor.name == "slurm")
    return {"run_dir": str(rd.path), "experiment": man.experiment, "status": live.status,
            "recorded_status": man.status, "status_reason": live.reason,
            "executor": man.executor.name, "counts": dict(counts), "total": len(rows), "jobs": jobs, "trials": rows,
            "retried": sum(1 for r in rows if r["earlier_attempts"])}
