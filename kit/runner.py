"""The run loop: spec -> plan -> (backend x collectors per trial) -> run directory.

Everything is checked before the run directory exists (spec, dataset,
backend, frameworks), so an invalid run writes nothing. Each trial then runs
in its own harness process with the host collectors sampling around it; the
trial file is written only when the trial is over, so a kill loses at most
the trial in flight and ``resume_run`` continues with the rest of the plan.
The loop talks to the user only through ``RunEvents`` (the CLI renders it
with rich); the library prints nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit import disturbance, pinning, studies
from kit.backends import make_backend
from kit.backends.base import Backend, TrialOutcome
from kit.collectors.base import Collector, Row, TrialTarget
from kit.collectors.quiet import QUIET_WINDOW_S, LoadReading, QuietWait, foreign_cpu, read_load, wait_for_quiet
from kit.datasets import ResolvedDataset, resolve
from kit.errors import DiskError, KitError, PlanError, StoreError, disk_error
from kit.executors import Executor, from_record, job_identity, make_executor
from kit.gpus import DevicePlan, TrialDevice
from kit.harness import REQUEST_FILE
from kit.manifest import Manifest
from kit.plan import Plan, Trial, arm_framework, make_plan
from kit.provenance import host_provenance, kit_provenance
from kit.run_code import resume_code, snapshot
from kit.spec import Spec, parse_spec
from kit.store import BASELINE_ID, RunDir
from kit.trust import StudyTrust

NO_DATASET = "none"  # the name of the empty stand-in the trials of a dataset-less workload are given
RANDOM_INPUTS = "random"  # its source: the workload generates its inputs (not a synthetic stand-in of a dataset)


class RunEvents:
    """Hooks the run loop calls; the default does nothing (tests, library use)."""

    def run_started(self, rd: RunDir, plan: Plan, done: int) -> None: ...
    def message(self, text: str) -> None: ...
    def trial_started(self, trial: Trial, index: int, total: int) -> None: ...
    def trial_finished(self, trial: Trial, record: dict[str, Any]) -> None: ...
    def waiting(self, what: str, left_s: float, foreign_cpu: float | None) -> None:
        """A wait for a quiet host is under way (``--wait-for-quiet``): its countdown, about once a second."""


@dataclass
class RunOptions:
    """How to run (not what: that is the spec)."""

    runs_root: Path = Path("runs")
    backend: str = "local"
    backend_options: dict[str, Any] = field(default_factory=dict)
    data_dir: Path | None = None
    download: bool = True
    seed: int | None = None
    collectors: tuple[str, ...] | None = None  # None: the spec's
    max_trials: int | None = None  # stop after this many new trials (debugging, tests)
    executor: str = "local"  # local | slurm
    slurm: dict[str, Any] = field(default_factory=dict)  # command-line overrides of the spec's [slurm]
    chunk: int | None = None  # inside a cluster job: run only this chunk of blocks
    label: str | None = None  # a version label for `kit history` (e.g. "torch 2.6")
    arms: tuple[str, ...] | None = None  # None: the spec's; `--images` gives one arm per image row
    retry: tuple[str, ...] = ()  # resume only: re-run finished trials with these statuses (see RETRY_FAILED)
    # `kit run --until-conclusive` (kit.sequential_run): the plan is drawn for sequential["max_repetitions"]
    # and recorded in the manifest; after each trial ``should_stop`` may end the run (it returns why)
    sequential: dict[str, Any] | None = None
    should_stop: Callable[[RunDir, Trial], str | None] | None = None
    # resume only: whose study code the resumed trials may run (kit.run_code): the user's trust for this command,
    # and the digest a cluster job was handed by the kit that checked the copy and submitted it
    study_trust: StudyTrust = field(default_factory=StudyTrust)
    study_digest: str | None = None
    # `--wait-for-quiet DURATION`: on a busy host, wait up to this long for a quiet window before the first trial
    # and before re-running disturbed trials while load persists (None: go on at once)
    wait_for_quiet_s: float | None = None


# What `--retry-failed` re-runs: a trial that did not finish its work (an error, including a kill by a
# signal, or the time limit). "oom" is left alone unless asked (`--retry-oom`): in a batch-size sweep
# running out of memory is the result (the largest batch that fits), and re-running it only repeats it;
# "skipped" is the workload saying the configuration does not apply.
RETRY_FAILED = ("error", "timeout")
RETRYABLE = ("error", "timeout", "oom")


class Interrupted(KitError):
    """The run was stopped by a signal; what finished is kept."""

    exit_code = 130


# -- building blocks ----------------------------------------------------------

def trial_request(spec: Spec, trial: Trial, device: TrialDevice | None = None) -> dict[str, Any]:
    """The harness's request.json for ``trial`` (plain data, no host paths).

    ``device`` is the host's resolution (:mod:`kit.gpus`): ``device`` is then
    "cpu" or "gpu", never "auto", and ``gpu_indices`` / ``gpu_uuids`` name the
    GPUs the trial is given. Without it the spec's value is passed through.
    """
    wl = spec.workload_for(trial.config).flat()
    ds = spec.dataset_for(trial.config)
    fields = device.request_fields() if device is not None else {
        "device": wl["device"], "device_requested": wl["device"], "gpu_indices": [], "gpu_uuids": []}
    return {
        "schema": 1,
        "trial_id": trial.trial_id,
        "position": trial.position,
        "framework": trial.framework,
        "workload": wl,
        "dataset": dataclasses.asdict(ds) if ds is not None else None,
        "seed": trial.seed,
        **fields,
        "threads": wl["threads"],
        **_study_request(spec, trial.framework),
    }


def _study_request(spec: Spec, framework: str) -> dict[str, Any]:
    """For a study folder's own workload: which of its modules the harness imports (from --study)."""
    info = spec.workload_info
    if not info.folder:
        return {}
    if framework not in info.modules:
        raise PlanError(f"the study defines no {framework} module", where=f"{spec.path}: study.modules",
                        fix=f"add study.modules.{framework}, or run only the arms it defines (--arms)")
    return {"study": {"workload": info.name, "module": info.modules[framework]}}


def phase_table(markers: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Phase intervals from harness markers, in wall-clock and monotonic time (None: not in the marker)."""
    phases: dict[str, dict[str, float | None]] = {}
    for m in markers:
        if m.get("event") == "phase_start":
            phases[m["phase"]] = {"start": m["t"], "start_mono": m.get("t_mono")}
        elif m.get("event") == "phase_end" and m.get("phase") in phases:
            phases[m["phase"]].update(end=m["t"], end_mono=m.get("t_mono"), duration_s=m.get("duration_s"))
    return {k: v for k, v in phases.items() if "end" in v}


def make_collectors(spec: Spec, opts: RunOptions, target: TrialTarget) -> list[Collector]:
    names = opts.collectors if opts.collectors is not None else spec.telemetry.collectors
    try:
        from kit.collectors import make_collectors as factory
    except ImportError:  # pragma: no cover - registry not installed
        return []
    return list(factory(names, spec.telemetry.period_s, target))


@contextlib.contextmanager
def sampling(collectors: list[Collector]) -> Iterator[list[Collector]]:
    with contextlib.ExitStack() as stack:
        for c in collectors:
            stack.enter_context(c)
        yield collectors


def drain(collectors: list[Collector]) -> tuple[list[Row], list[dict[str, Any]]]:
    rows: list[Row] = []
    reports = []
    for c in collectors:
        got = c.take_rows()
        rows.extend(got)
        reports.append(c.report(len(got)).as_dict())
    return rows, reports


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


# -- the run ------------------------------------------------------------------

@dataclass
class _Context:
    spec: Spec
    plan: Plan
    rd: RunDir
    backend: Backend
    dataset: ResolvedDataset
    opts: RunOptions
    events: RunEvents
    executor: Executor  # where the run's trials run (only its name and chunks matter here)
    datasets: dict[str, ResolvedDataset] = field(default_factory=dict)  # dataset_key -> resolved (cases)
    baseline: dict[str, float] = field(default_factory=dict)
    temp_reader: Any = None
    ambient_reader: Any = None  # kit.collectors.ambient.AmbientReader, made at the first trial
    only: frozenset[str] | None = None  # a chunk's trials (cluster job); None: the whole plan
    shared: bool = False  # other jobs write into the same run directory: leave the manifest alone
    devices: DevicePlan | None = None  # this host's GPUs as the spec allows them (None: not resolved)
    retry: frozenset[str] = frozenset()  # finished trials to run again (their records are archived first)
    idle_freq_mhz: float | None = None  # median CPU frequency of the idle baseline (throttling reference)
    reruns: disturbance.RerunLedger | None = None  # the run's re-run budget and what is spent of it

    def __post_init__(self) -> None:
        # A study folder's trials import the run's copy of the folder (checked against the manifest's digest).
        self.backend.study_dir = studies.checked_copy(self.rd.path, self.rd.manifest())

    def trial_device(self, trial: Trial) -> TrialDevice | None:
        return self.devices.resolve(self.spec.workload_for(trial.config).flat()) if self.devices else None


def dataset_key(name: str, source: str) -> str:
    return f"{name}:{source}"


def _more_datasets(spec: Spec, opts: RunOptions, events: RunEvents) -> dict[str, ResolvedDataset]:
    """Every dataset the configurations use (several when [cases] name their own), resolved and verified."""
    out: dict[str, ResolvedDataset] = {}
    for ds in spec.datasets():
        key = dataset_key(ds.name, ds.source)
        if key not in out and ds.source == "synthetic":
            events.message(f"{ds.name}: SYNTHETIC stand-in in the real file format (not the real data; see kit.synthetic)")
        if key not in out:
            out[key] = resolve(ds.name, ds.source, data_dir=opts.data_dir, download=opts.download,
                               progress=lambda name, done, total: events.message(
                                   f"downloading {name}: {done}/{total or '?'} bytes"))
    return out


def _trial_data_dir(ctx: _Context, trial: Trial) -> Path:
    ds = ctx.spec.dataset_for(trial.config)
    if ds is None or not ctx.datasets:
        return ctx.dataset.directory
    return ctx.datasets[dataset_key(ds.name, ds.source)].directory


@dataclass
class _Checked:
    """What the checks before the run found: the backend, the dataset, the devices."""

    backend: Backend
    dataset: ResolvedDataset
    prepared: dict[str, Any]
    devices: DevicePlan
    device_summary: dict[str, Any]


def resolve_devices(spec: Spec, plan: Plan) -> tuple[DevicePlan, dict[str, Any]]:
    """Resolve every configuration's device on this host (KitError for "gpu" without an allowed GPU)."""
    devices = DevicePlan.build(spec.container.gpus)
    configs = {json.dumps(t.config, sort_keys=True): t.config for t in plan.trials}
    summary = devices.check(spec.workload_for(c).flat() for c in configs.values())
    return devices, summary


def _check_everything(spec: Spec, opts: RunOptions, events: RunEvents, plan: Plan) -> _Checked:
    """Every check that can fail before anything is written."""
    arms = plan.arms
    _check_arms(spec, opts, arms)
    devices, summary = resolve_devices(spec, plan)
    dataset = _dataset(spec, opts, events)
    options = dict(opts.backend_options)
    pin = pinning.resolve(spec.container.cpuset)
    if opts.backend != "local":
        options.setdefault("container", spec.container if spec.container.cpuset != "auto" else
                           dataclasses.replace(spec.container, cpuset=pin.cpuset()))
    backend = make_backend(opts.backend, **options)
    backend.pinning = pin
    backend.device = "gpu" if "gpu" in summary["resolved"] else "cpu"
    probe = backend.available()
    if not probe.ok:
        raise KitError(f"backend {opts.backend} is not usable here: {probe.detail}", where="--backend",
                       fix=probe.fix or "see `kit doctor`")
    prepared = backend.prepare(arms, dataset.directory)
    return _Checked(backend, dataset, prepared, devices, summary)


def _check_arms(spec: Spec, opts: RunOptions, arms: tuple[str, ...]) -> None:
    """Arms given on the command line must be the spec's frameworks, and image versions need containers."""
    if opts.arms is None:
        return
    for arm in arms:
        fw = arm_framework(arm)
        if fw not in spec.experiment.frameworks:
            raise PlanError(f"arm {arm} runs {fw}, which experiment {spec.experiment.id} does not",
                            where="--images", fix=f"give images of {' or '.join(spec.experiment.frameworks)}")
    if opts.backend == "local" and any("@" in arm for arm in arms):
        raise KitError("image versions as arms need a container backend; the local backend has one interpreter",
                       where="--images", fix="add --backend docker (or apptainer)")


def _dataset(spec: Spec, opts: RunOptions, events: RunEvents) -> ResolvedDataset:
    """The verified dataset, or an empty directory for workloads on random inputs (no dataset).

    The stand-in is "random inputs" (source RANDOM_INPUTS), never "synthetic": that source names the synthetic
    stand-ins of real datasets (kit.synthetic), which draw a threat; random tensors are a workload's own method
    (Patel's). The manifest records it as no dataset (``dataset: null``)."""
    if spec.dataset is None and spec.datasets():  # only [cases] name datasets: the first is the primary one
        first = spec.datasets()[0]
        return resolve(first.name, first.source, data_dir=opts.data_dir, download=opts.download,
                       progress=lambda name, done, total: events.message(f"downloading {name}: {done}/{total or '?'} bytes"))
    if spec.dataset is None:
        empty = Path(tempfile.gettempdir()) / "kit-no-dataset"
        empty.mkdir(exist_ok=True)
        return ResolvedDataset(NO_DATASET, RANDOM_INPUTS, empty, "random inputs, no dataset", {})
    return resolve(spec.dataset.name, spec.dataset.source, data_dir=opts.data_dir, download=opts.download,
                   progress=lambda name, done, total: events.message(f"downloading {name}: {done}/{total or '?'} bytes"))


def start_run(spec: Spec, opts: RunOptions, events: RunEvents | None = None) -> RunDir:
    """Check, create the run directory, and run the whole plan."""
    events = events or RunEvents()
    if opts.retry:
        raise PlanError("retrying failed trials applies to a run that exists", where="--retry-failed",
                        fix="kit run --resume RUN_DIR --retry-failed")
    plan = make_plan(spec, seed=opts.seed, arms=opts.arms,
                     repetitions=int(opts.sequential["max_repetitions"]) if opts.sequential else None)
    executor = make_executor(opts.executor, spec.slurm, opts.slurm, opts.backend)
    checked = _check_everything(spec, opts, events, plan)
    backend, dataset, prepared = checked.backend, checked.dataset, checked.prepared
    datasets = _more_datasets(spec, opts, events) if spec.cases else {}
    spec_text = Path(spec.path).read_text(encoding="utf-8") if spec.path and Path(spec.path).is_file() else ""
    study_files = _study_files(spec, plan)
    manifest: dict[str, Any] = {  # the run's manifest.json (RunDir.create)
        "kit": kit_provenance(),
        "experiment": spec.experiment.id,
        "title": spec.experiment.title,
        "profile": spec.profile,
        "profile_description": spec.profile_description,
        "label": opts.label,
        "spec": spec.to_dict(),
        "spec_source": {"path": spec.path, "text": spec_text, "sha256": spec_digest(spec_text)},
        "host": host_provenance(),
        "backend": {**backend.describe(), **prepared},
        "dataset": dataset.as_dict() if dataset.name != NO_DATASET else None,
        **({"datasets": {k: d.as_dict() for k, d in datasets.items()}} if datasets else {}),
        "collectors": _probe_collectors(spec, opts),
        "devices": checked.device_summary,
        "selftest": _host_selftest(spec, checked.devices),
        "plan": plan.as_dict(),
        "plan_digest": plan.digest(),
        "executor": executor.record(plan),
        "command": sys.argv,
        "started": time.time(),
        "ended": None,
        "status": "running",
        **({"sequential": opts.sequential} if opts.sequential else {}),
    }
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
    ctx = _Context(spec, plan, rd, backend, dataset, opts, events, executor, datasets=datasets,
                   devices=checked.devices)
    _execute(ctx)
    return rd


def _host_selftest(spec: Spec, devices: DevicePlan) -> dict[str, Any]:
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


def _study_files(spec: Spec, plan: Plan) -> list[tuple[str, bytes]] | None:
    """A study folder's files, read (and checked) before the run directory exists; None for a kit experiment."""
    for arm in plan.arms:
        _study_request(spec, arm_framework(arm))
    if not spec.study_dir:
        return None
    return studies.study_files(Path(spec.study_dir))


def spec_digest(text: str) -> str:
    """sha256 of the spec copy a manifest holds (``spec_source.sha256``), checked by every resume."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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
    are run again in their plan positions (see ``_execute_locked``), each failed
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
        checked = _check_everything(spec, opts, events, plan)
        datasets = _more_datasets(spec, opts, events) if spec.cases else {}
        ctx = _Context(spec, plan, rd, checked.backend, checked.dataset, opts, events, executor, datasets=datasets,
                       devices=checked.devices)
        ctx.backend.study_dir = study_dir  # the checked bytes, not the run's copy as it may be now
        if code.kind != "kit":
            events.message(f"study code: {code.describe()}")
        if opts.chunk is not None:
            ctx.only = frozenset(t.trial_id for t in plan.trials if t.block in wanted)
            ctx.shared = True
            rd.log_event("chunk_start", chunk=opts.chunk, **job_identity())
        else:
            ctx.retry = _to_retry(ctx)  # read under the lock, before the run is marked running again
            rd.log_event("resume", finished=len(rd.finished_ids()), backend=opts.backend,
                         devices=checked.device_summary, spec_digest=digest_state, retry=list(opts.retry),
                         to_retry=sorted(ctx.retry), study_code=code.kind, study_digest=code.digest)
            rd.update_manifest(status="running")
        _execute_locked(ctx)
    return rd


def _probe_collectors(spec: Spec, opts: RunOptions) -> list[dict[str, Any]]:
    out = []
    for c in make_collectors(spec, opts, TrialTarget()):
        p = c.available()
        out.append({"name": c.name, "ok": p.ok, "detail": p.detail, "fix": p.fix})
    return out


def _execute(ctx: _Context) -> None:
    lock_name = ".lock" if not ctx.shared else f".lock-chunk-{ctx.opts.chunk}"
    with run_lock(ctx.rd, lock_name):
        _execute_locked(ctx)


def _to_retry(ctx: _Context) -> frozenset[str]:
    """Trial ids whose finished record has a status ``ctx.opts.retry`` asks to re-run (call under the lock)."""
    if not ctx.opts.retry:
        return frozenset()
    wanted = set(ctx.opts.retry)
    return frozenset(r["trial_id"] for r in ctx.rd.checked_trials()
                     if r.get("status") in wanted and (ctx.only is None or r["trial_id"] in ctx.only))


def _execute_locked(ctx: _Context) -> None:
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
        done = rd.finished_ids() - ctx.retry
        if ctx.retry:
            events.message(f"retrying {len(ctx.retry)} trial(s) with status {', '.join(ctx.opts.retry)} in their "
                           f"plan positions; each failed record is kept under attempts/: {', '.join(sorted(ctx.retry))}")
        elif ctx.opts.retry:
            events.message(f"no finished trial has status {', '.join(ctx.opts.retry)}: nothing to retry")
        todo = [t for t in plan.trials if t.trial_id not in done and (ctx.only is None or t.trial_id in ctx.only)]
        try:  # from here a signal leaves the run "interrupted", never a "running" run whose process is gone
            events.run_started(rd, plan, len(done))
            if ctx.shared:
                _write_node(ctx)
            if not ctx.shared:
                rd.reserve_space()
            stack.enter_context(_kit_pinned(ctx))
            ctx.reruns = _rerun_ledger(ctx)
            _baseline(ctx)
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
            raise _failed_on_disk(ctx, exc) from None
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
def _kit_pinned(ctx: _Context) -> Iterator[None]:
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


def _failed_on_disk(ctx: _Context, exc: OSError | DiskError) -> DiskError:
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


def _write_node(ctx: _Context) -> None:
    """Hardware provenance of this node, once per node (a cluster run spans several)."""
    from kit.store import atomic_write_json

    host = socket.gethostname()
    path = ctx.rd.subdir("nodes") / f"{host}.json"
    if not os.path.lexists(path):
        atomic_write_json(path, {"host": host, "t": time.time(), **host_provenance()})


def _baseline(ctx: _Context) -> None:
    """Idle telemetry at run start: the reference for cool-down and idle load."""
    secs = ctx.spec.telemetry.baseline_s
    name = BASELINE_ID if not ctx.shared else f"{BASELINE_ID}-{socket.gethostname()}-chunk{ctx.opts.chunk}"
    if secs <= 0 or (not ctx.shared and ctx.rd.samples_path(name).exists()):
        recorded = ctx.rd.manifest().baseline
        ctx.baseline = recorded.get("temps_c", {})
        freq = recorded.get("freq_mhz")
        ctx.idle_freq_mhz = float(freq) if isinstance(freq, (int, float)) and not isinstance(freq, bool) else None
        if ctx.opts.wait_for_quiet_s and ctx.spec.design.disturbance_cpu > 0:  # a resume: the baseline is recorded
            _quiet_wait(ctx, "resume")
        return
    ctx.events.message(f"recording {secs:g} s of idle baseline telemetry")
    # every GPU the trials may get (all NVML sees when none is allowed): the cool-down's reference per GPU
    allowed = [g.index for g in ctx.devices.allowed] if ctx.devices and ctx.devices.allowed else None
    target = TrialTarget(gpu_indices=allowed)
    collectors = make_collectors(ctx.spec, ctx.opts, target)
    t0 = time.time()
    with sampling(collectors):
        load0 = read_load()
        time.sleep(secs)
        load1 = read_load()
    rows, reports = drain(collectors)
    ctx.rd.write_samples(name, rows)
    temps = _idle_temps(rows)
    ctx.baseline = temps
    freqs = [r.value for r in rows if r.source == "cpu" and r.device == "total" and r.metric == "freq_mhz"]
    ctx.idle_freq_mhz = statistics.median(freqs) if freqs else None
    info = {"start": t0, "duration_s": secs, "temps_c": temps, "collectors": reports, "samples": name,
            "freq_mhz": ctx.idle_freq_mhz,
            "gpu_indices": allowed if allowed is not None else "all"}
    load = _baseline_load(ctx, load0, load1)
    info["load"] = load
    if ctx.shared:
        ctx.rd.log_event("baseline", host=socket.gethostname(), chunk=ctx.opts.chunk, **info)
    else:
        ctx.rd.update_manifest(baseline=info)
    if load["choice"] == "wait_for_quiet":
        load["wait"] = _quiet_wait(ctx, "baseline").as_dict()
        if not ctx.shared:
            ctx.rd.update_manifest(baseline=info)


def _baseline_load(ctx: _Context, before: LoadReading, after: LoadReading) -> dict[str, Any]:
    """Other work on the CPUs during the idle baseline: the figure, and (when busy) one line with its cost and the
    choice, logged as ``baseline_load`` (foreign_cpu, cpus, limit_cpu, busy, choice: go_on | wait_for_quiet | quiet)."""
    limit = ctx.spec.design.disturbance_cpu
    figure = foreign_cpu(before, after)
    cpus = os.cpu_count() or 1
    busy = figure is not None and limit > 0 and figure > limit
    choice = ("wait_for_quiet" if ctx.opts.wait_for_quiet_s else "go_on") if busy else "quiet"
    load = {"foreign_cpu": None if figure is None else round(figure, 3), "cpus": cpus, "limit_cpu": limit,
            "busy": busy, "choice": choice}
    ctx.rd.log_event("baseline_load", **load, wait_for_quiet_s=ctx.opts.wait_for_quiet_s)
    if busy and figure is not None:
        budget = ctx.reruns.budget if ctx.reruns is not None else _rerun_ledger(ctx).budget
        ctx.events.message(disturbance.busy_baseline_text(figure, cpus, limit, budget, ctx.opts.wait_for_quiet_s,
                                                          f"continue with: kit run --resume {ctx.rd.path}"))
    return load


def _idle_temps(rows: list[Row]) -> dict[str, float]:
    """Median idle temperature per sensor the cool-down waits on (cpu, gpuN)."""
    import statistics

    by: dict[str, list[float]] = {}
    for r in rows:
        if r.source == "hwmon" and r.metric == "cpu_temp_c":
            by.setdefault("cpu", []).append(r.value)
        elif r.source == "nvml" and r.metric == "temp_c":
            by.setdefault(f"gpu{r.device}", []).append(r.value)
    return {k: statistics.median(v) for k, v in by.items() if v}


def cooldown_sensors(gpu_indices: list[int] | None) -> list[str] | None:
    """The sensors a trial's cool-down waits on: the CPU and the trial's own GPUs (None: every sensor)."""
    if gpu_indices is None:
        return None
    return ["cpu", *(f"gpu{i}" for i in gpu_indices)]


def _cooldown(ctx: _Context, gpu_indices: list[int] | None = None) -> dict[str, Any]:
    """Wait (bounded) until the CPU and the trial's GPUs are back near their idle baseline.

    A hot GPU the trial does not use (another user's job) is not waited for.
    Also records the temperatures the trial starts at, which the validity
    rules compare between frameworks.
    """
    tel = ctx.spec.telemetry
    if not ctx.baseline:
        return {"waited_s": 0.0, "reached": True, "note": "no temperature sensor at baseline"}
    from kit.collectors.thermal import TemperatureReader, wait_for_cooldown

    if ctx.temp_reader is None:
        ctx.temp_reader = TemperatureReader()
    return wait_for_cooldown(ctx.baseline, tel.cooldown_band_c, tel.cooldown_max_s, read=ctx.temp_reader,
                             sensors=cooldown_sensors(gpu_indices)).as_dict()


def _ambient(ctx: _Context) -> dict[str, Any]:
    """The room's temperature as the trial starts (a host ambient sensor, and the spec's stated value)."""
    from kit.collectors.ambient import AmbientReader

    tel = ctx.spec.telemetry
    if ctx.ambient_reader is None:
        ctx.ambient_reader = AmbientReader(tel.ambient_sensor, tel.ambient_c)
    return dict(ctx.ambient_reader.read().as_dict())


def run_one(ctx: _Context, trial: Trial) -> dict[str, Any]:
    """Run one trial and commit its record; returns the record.

    A trial to retry has its failed record archived first (attempts/); the
    new record says which attempt it is and where the earlier ones are.
    """
    rd = ctx.rd
    if trial.trial_id in ctx.retry and rd.trial_path(trial.trial_id).exists():
        failed = rd.read_trial(trial.trial_id)
        archived = rd.archive_trial(trial.trial_id)
        rd.log_event("retry", trial_id=trial.trial_id, archived=archived, status=failed.get("status"),
                     signal=failed.get("signal"), error=str(failed.get("error") or "")[:300])
    work = rd.work_dir(trial.trial_id)
    rd.subdir("work")  # a real directory of the run (a planted link is refused, never written through)
    shutil.rmtree(work, ignore_errors=True)  # leftovers of a killed attempt
    device = ctx.trial_device(trial)
    try:
        work.mkdir()
        (work / REQUEST_FILE).write_text(json.dumps(trial_request(ctx.spec, trial, device), indent=1), encoding="utf-8")
    except OSError as exc:
        raise disk_error(exc, work, "prepare the trial's work directory", after=rd.resume_hint()) from None

    indices = device.indices if device is not None else None
    cooldown = _cooldown(ctx, indices)
    ambient = _ambient(ctx)
    target = TrialTarget(gpu_indices=indices)  # the backend exposes, and the collectors sample, only these GPUs
    collectors = make_collectors(ctx.spec, ctx.opts, target)
    started = time.time()
    with sampling(collectors):
        outcome = ctx.backend.run_trial(trial.arm, work, _trial_data_dir(ctx, trial), ctx.spec.design.timeout_s,
                                        target)
    ended = time.time()
    rows, reports = drain(collectors)
    record = trial_record(trial, outcome, started, ended, reports, cooldown, ctx.backend.name, device,
                          ctx.backend.pinning if ctx.backend.pinning.active else None)
    record["ambient"] = ambient
    record["disturbance"] = disturbance.assess(
        outcome.markers, [(r.t, r.source, r.device, r.metric, r.value) for r in rows], ctx.spec.telemetry.period_s,
        ctx.spec.design.disturbance_limits(), ctx.idle_freq_mhz).as_dict()
    if ctx.shared:
        record["executor"] = {"name": ctx.executor.name, "chunk": ctx.opts.chunk, **job_identity()}
    previous = rd.attempt_files(trial.trial_id)
    if previous:
        record["attempt"] = len(previous) + 1
        record["previous_attempts"] = previous
    rd.write_trial(record, rows)
    shutil.rmtree(work, ignore_errors=True)
    return record


def rerun_disturbed(ctx: _Context, trial: Trial, record: dict[str, Any]) -> dict[str, Any]:
    """Run a measured trial again, in its plan position with its seed, while its timed phases were disturbed.

    Another process on the CPUs (or the GPU), or a throttled CPU or GPU, during a timed phase makes that
    trial's value a measurement of the host, not of the framework (kit.disturbance). The attempt is set aside
    under attempts/ with its telemetry, like a ``--retry-failed`` attempt, and the trial runs again at once:
    still in its block, so the arms of the block stay paired in time. Each trial gets at most ``[design]
    disturbance_retries`` re-runs and the run at most its budget (``disturbance_budget_frac`` of its measured
    trials); a load that outlasts the re-runs stops them (``--wait-for-quiet``: after a wait for a quiet window).
    A trial still disturbed is kept and flagged. The policy is kit.disturbance.rerun_disturbed's.
    """
    ledger = ctx.reruns if ctx.reruns is not None else _rerun_ledger(ctx)
    ctx.reruns = ledger
    rd = ctx.rd

    def wait() -> bool:
        return _quiet_wait(ctx, "rerun").quiet

    hooks = disturbance.RerunHooks(archive=lambda: rd.archive_trial(trial.trial_id), run=lambda: run_one(ctx, trial),
                                   log=rd.log_event, say=ctx.events.message,
                                   wait=wait if ctx.opts.wait_for_quiet_s else None)
    return disturbance.rerun_disturbed(record, trial.trial_id, trial.warmup, ledger, hooks)


def _rerun_ledger(ctx: _Context) -> disturbance.RerunLedger:
    """The run's re-run budget, with the re-runs its directory shows already spent (a resume gets no new budget)."""
    design = ctx.spec.design
    scope = [t for t in ctx.plan.trials if not t.warmup and (ctx.only is None or t.trial_id in ctx.only)]
    ids = {t.trial_id for t in scope}
    budget = disturbance.RerunBudget(len(scope), design.disturbance_budget_frac, design.disturbance_retries)
    spent = disturbance.spent_reruns(a["record"] for a in ctx.rd.checked_attempts() if a["trial_id"] in ids)
    ctx.rd.log_event("rerun_budget", **budget.as_dict(), spent=spent, chunk=ctx.opts.chunk,
                     wait_for_quiet_s=ctx.opts.wait_for_quiet_s)
    return disturbance.RerunLedger(budget, spent=spent)


def _quiet_wait(ctx: _Context, when: str) -> QuietWait:
    """Wait (bounded by --wait-for-quiet) for a quiet window, with a countdown; log and say how it ended."""
    secs = ctx.opts.wait_for_quiet_s
    assert secs is not None
    limit = ctx.spec.design.disturbance_cpu
    ctx.events.message(f"waiting up to {disturbance.duration_text(secs)} for a quiet window (other work at most "
                       f"{limit:g} CPUs over {QUIET_WINDOW_S:g} s); Ctrl-C stops the run")
    try:
        res = wait_for_quiet(secs, limit, tick=lambda left, cpu: ctx.events.waiting(when, left, cpu))
    except KeyboardInterrupt:
        ctx.rd.log_event("quiet_wait", when=when, quiet=False, outcome="interrupted", duration_s=secs)
        raise
    ctx.rd.log_event("quiet_wait", when=when, outcome="quiet" if res.quiet else "timeout", **res.as_dict())
    figure = "" if res.foreign_cpu is None else f" (other work: {res.foreign_cpu:.2f} CPUs)"
    ctx.events.message(f"quiet window after {res.waited_s:.0f} s{figure}: going on" if res.quiet else
                       f"no quiet window within {disturbance.duration_text(secs)}{figure}: going on anyway, disturbed "
                       "trials are flagged")
    return res


def trial_record(trial: Trial, outcome: TrialOutcome, started: float, ended: float,
                 collectors: list[dict[str, Any]], cooldown: dict[str, Any], backend: str,
                 device: TrialDevice | None = None, pinned: pinning.Pinning | None = None) -> dict[str, Any]:
    """The trial file's content. ``signal`` names the signal that ended the harness (None: it exited),
    from every backend: a negative return code locally, exit code 128+N from a container engine."""
    result = outcome.result or {}
    return {
        **trial.as_dict(),
        **(device.record_fields() if device is not None else {}),
        "status": outcome.status,
        "exit_code": outcome.exit_code,
        "started": started,
        "ended": ended,
        "wall_s": outcome.wall_s,
        "phases": phase_table(outcome.markers),
        "markers": outcome.markers,
        "results": result.get("results", {}),
        "env": result.get("env", {}),
        "signal": outcome.detail.get("signal"),
        "error": result.get("error") or _failure_text(outcome),
        "traceback_tail": result.get("traceback_tail"),
        "stderr_tail": outcome.stderr_tail,
        "backend": {"name": backend, **outcome.detail},
        "pinning": pin.as_dict() if (pin := pinned) is not None else None,
        "collectors": collectors,
        "cooldown": cooldown,
        "host": socket.gethostname(),
    }


def _failure_text(outcome: TrialOutcome) -> str | None:
    """Why a trial that left no error of its own ended: the time limit or a signal (None: neither)."""
    sig = outcome.detail.get("signal")
    if outcome.status == "timeout":
        return "time limit reached: the trial was killed" + (f" ({sig})" if sig else "")
    if sig:
        note = str(outcome.detail.get("note") or "")
        return note if sig in note else f"killed by signal {sig}" + (f"; {note}" if note else "")
    return None
