"""A new run: the spec resolved once (kit.run.prepare), the manifest written, then the trial loop or the jobs.

Everything is checked before the run directory exists, so an invalid run writes nothing; the manifest records the
resolved spec, the host, the backend and the plan, and ``kit run --resume`` continues from it (kit.run.resume).
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from kit import studies
from kit.collectors.base import TrialTarget
from kit.errors import DiskError, KitError, PlanError, disk_error
from kit.executors import make_executor
from kit.gpus import DevicePlan
from kit.plan import make_plan
from kit.provenance import host_provenance, kit_provenance
from kit.run.context import RunContext
from kit.run.loop import execute
from kit.run.options import NO_DATASET, RunEvents, RunOptions
from kit.run.prepare import Prepared, collector_settings, make_collectors, prepare
from kit.selftest import SelftestJson
from kit.spec import Spec
from kit.store import RunDir


def start_run(spec: Spec, opts: RunOptions, events: RunEvents | None = None) -> RunDir:
    """Check, create the run directory, and run the whole plan."""
    events = events or RunEvents()
    if opts.retry:
        raise PlanError("retrying failed trials applies to a run that exists", where="--retry-failed",
                        fix="kit run --resume RUN_DIR --retry-failed")
    plan = make_plan(spec, seed=opts.seed, arms=opts.arms,
                     repetitions=int(opts.sequential["max_repetitions"]) if opts.sequential else None)
    executor = make_executor(opts.executor, spec.slurm, dict(opts.slurm), opts.backend)
    ready = prepare(spec, opts, events, plan)
    study_files = _study_files(spec)
    manifest = _manifest(ready, opts, executor.record(plan))
    if study_files is not None:
        manifest["study"] = studies.describe(Path(spec.study_dir), study_files)
    rd = RunDir.create(opts.runs_root, spec.experiment.id, manifest)
    try:
        if study_files is not None:
            studies.write_copy(study_files, rd.path / studies.RUN_COPY)
        rd.log_event("start", plan_digest=plan.digest(), executor=opts.executor)
    except (OSError, DiskError) as exc:
        shutil.rmtree(rd.path, ignore_errors=True)  # nothing ran yet: leave nothing half-written
        if isinstance(exc, DiskError):
            raise
        raise disk_error(exc, rd.path, "copy the study folder into the run directory") from None
    if study_files is not None:
        _trust_what_runs(spec, study_files, events)
    if executor.hands_off:  # the trials run in the jobs submitted now, each a chunk of the plan
        executor.submit_all(rd, events.message, studies.digest_of(study_files) if study_files is not None else None)
        return rd
    execute(RunContext(ready, rd, opts, events, executor))
    return rd


def _manifest(ready: Prepared, opts: RunOptions, executor: dict[str, Any]) -> dict[str, Any]:
    """The new run's manifest.json (checked by RunDir.create as every reader will read it)."""
    spec, plan, dataset, datasets = ready.spec, ready.plan, ready.dataset, ready.datasets
    spec_text = Path(spec.path).read_text(encoding="utf-8") if spec.path and Path(spec.path).is_file() else ""
    return {
        "kit": kit_provenance(),
        "experiment": spec.experiment.id,
        "title": spec.experiment.title,
        "profile": spec.profile,
        "profile_description": spec.profile_description,
        "label": opts.label,
        "spec": spec.to_dict(),
        "spec_source": {"path": spec.path, "text": spec_text, "sha256": spec_digest(spec_text)},
        "host": host_provenance(),
        "backend": ready.backend_record,
        "dataset": dataset.as_dict() if dataset.name != NO_DATASET else None,
        **({"datasets": {k: d.as_dict() for k, d in datasets.items()}} if datasets else {}),
        "collectors": _probe_collectors(spec, opts),
        "devices": ready.device_summary,
        "selftest": _host_selftest(spec, ready.devices),
        "plan": plan.as_dict(),
        "plan_digest": plan.digest(),
        "executor": executor,
        "command": sys.argv,
        "started": time.time(),
        "ended": None,
        "status": "running",
        **({"sequential": opts.sequential} if opts.sequential else {}),
    }


def _probe_collectors(spec: Spec, opts: RunOptions) -> list[dict[str, str | bool | None]]:
    out: list[dict[str, str | bool | None]] = []
    for c in make_collectors(collector_settings(spec, opts), TrialTarget()):
        p = c.available()
        out.append({"name": c.name, "ok": p.ok, "detail": p.detail, "fix": p.fix})
    return out


def _host_selftest(spec: Spec, devices: DevicePlan) -> SelftestJson:
    """The host self-test (timers, sampler rates, GPU state, energy counter) on the GPUs the run may use."""
    from kit.selftest import host_selftest

    try:
        return host_selftest([g.index for g in devices.allowed], spec.telemetry.period_s)
    except KitError as err:  # recorded, not fatal: the trials still check their own device
        return {"schema": 1, "ok": False, "gpu": bool(devices.allowed), "error": str(err), "checks": []}


def _trust_what_runs(spec: Spec, files: list[tuple[str, bytes]], events: RunEvents) -> None:
    """The study code a new run is about to execute is code the user chose to run: its digest joins their
    allow-list now, before the first trial (not when the run ends), so that a run killed half-way resumes, and
    its report includes the study's own sections, without --trust-study-code. The kit's own bundled studies
    need no entry (they are always trusted); a folder without Python files holds no code."""
    from kit import trust as trustmod

    digest = studies.digest_of(files)
    bundled = studies.bundled_folder(spec.experiment.id)
    if bundled is not None and studies.digest_of(studies.study_files(bundled)) == digest:
        return
    if not any(rel.endswith(".py") for rel, _ in files):
        return
    try:
        trustmod.trust(digest, spec.study_dir, [rel for rel, _ in files])
    except (OSError, KitError) as exc:  # the run goes on; only the convenience is lost
        events.message(f"could not add the study to your trusted code ({exc}); resuming this run or reporting it "
                       "will ask for --trust-study-code")


def _study_files(spec: Spec) -> list[tuple[str, bytes]] | None:
    """A study folder's files, read (and checked) before the run directory exists; None for a kit experiment (its
    modules for the plan's arms are checked by kit.run.prepare)."""
    if not spec.study_dir:
        return None
    return studies.study_files(Path(spec.study_dir))


def spec_digest(text: str) -> str:
    """sha256 of the spec copy a manifest holds (``spec_source.sha256``), checked by every resume."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()

