"""The spec resolved once, before anything is written: a plan of resolved trials, a usable backend, the data.

Every check that can fail runs here, before the run directory exists (arms, devices, datasets, backend, the study's
modules), so an invalid run writes nothing. Each configuration's workload and dataset are resolved against the spec
once, and each planned trial once against them (its device on this host, its data directory, its study module): the
trial loop asks the spec no question per trial, it runs :class:`ResolvedTrial` s.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit import pinning
from kit.backends import make_backend
from kit.backends.base import Backend
from kit.collectors.base import Collector, TrialTarget
from kit.dataset_fetch import with_fetch_hint
from kit.datasets import ResolvedDataset, resolve
from kit.errors import DatasetError, KitError, PlanError
from kit.gpus import DevicePlan, DevicesJson, TrialDevice
from kit.plan import Plan, Trial, arm_framework
from kit.records import JsonTable
from kit.run.options import NO_DATASET, RANDOM_INPUTS, RunEvents, RunOptions
from kit.spec import Dataset, Spec, Workload, WorkloadInfo


@dataclass(frozen=True)
class StudyModule:
    """For a study folder's own workload: which of its modules the harness imports (from --study)."""

    workload: str
    module: str

    def as_dict(self) -> dict[str, str]:
        return {"workload": self.workload, "module": self.module}


@dataclass(frozen=True)
class ResolvedTrial:
    """One planned trial resolved against the spec and this host, once: what the loop needs to run it."""

    trial: Trial
    workload: Workload
    dataset: Dataset | None
    device: TrialDevice | None  # None: the host's devices were not resolved (the spec's value is passed through)
    study: StudyModule | None
    data_dir: Path

    def request(self) -> JsonTable:
        """The harness's request.json (plain data, no host paths; see :func:`trial_request`)."""
        return request_json(self.trial, self.workload, self.dataset, self.device, self.study)


def request_json(trial: Trial, workload: Workload, dataset: Dataset | None, device: TrialDevice | None,
                 study: StudyModule | None) -> JsonTable:
    """request.json of a resolved trial: ``device`` "cpu" or "gpu" (never "auto") with the GPUs the trial is given,
    or, unresolved, the spec's value passed through."""
    wl = workload.flat()
    fields = device.request_fields() if device is not None else {
        "device": wl["device"], "device_requested": wl["device"], "gpu_indices": [], "gpu_uuids": []}
    return {
        "schema": 1,
        "trial_id": trial.trial_id,
        "position": trial.position,
        "framework": trial.framework,
        "workload": wl,
        "dataset": dataclasses.asdict(dataset) if dataset is not None else None,
        "seed": trial.seed,
        **fields,
        "threads": wl["threads"],
        **({"study": study.as_dict()} if study is not None else {}),
    }


def trial_request(spec: Spec, trial: Trial, device: TrialDevice | None = None) -> JsonTable:
    """The harness's request.json for one trial resolved on its own (tools and tests; a run resolves its whole
    plan in :func:`prepare`)."""
    return request_json(trial, spec.workload_for(trial.config), spec.dataset_for(trial.config), device,
                        _study_request(spec, trial.framework))


def _study_request(spec: Spec, framework: str, info: WorkloadInfo | None = None) -> StudyModule | None:
    """For a study folder's own workload: which of its modules the harness imports (from --study); ``info`` is the
    spec's workload_info when the caller resolved it already."""
    info = info if info is not None else spec.workload_info
    if not info.folder:
        return None
    if framework not in info.modules:
        raise PlanError(f"the study defines no {framework} module", where=f"{spec.path}: study.modules",
                        fix=f"add study.modules.{framework}, or run only the arms it defines (--arms)")
    return StudyModule(info.name, info.modules[framework])


@dataclass(frozen=True)
class CollectorSettings:
    """Which collectors sample and how often: read from the spec (or ``--collectors``) once, before the first
    trial, so the trial loop makes each trial's collectors without asking the spec again."""

    names: tuple[str, ...]
    period_s: float


def collector_settings(spec: Spec, opts: RunOptions) -> CollectorSettings:
    names = opts.collectors if opts.collectors is not None else spec.telemetry.collectors
    return CollectorSettings(tuple(names), spec.telemetry.period_s)


def make_collectors(settings: CollectorSettings, target: TrialTarget) -> list[Collector]:
    try:
        from kit.collectors import make_collectors as factory
    except ImportError:  # pragma: no cover - registry not installed
        return []
    return list(factory(list(settings.names), settings.period_s, target))


def dataset_key(name: str, source: str) -> str:
    return f"{name}:{source}"


@dataclass(frozen=True)
class Prepared:
    """What the checks before the run found, and the plan's trials resolved: all a run needs from the spec."""

    spec: Spec
    plan: Plan
    backend: Backend
    dataset: ResolvedDataset
    datasets: dict[str, ResolvedDataset]  # dataset_key -> resolved (when [cases] name their own)
    backend_record: dict[str, Any]  # the manifest's ``backend`` (the backend's description and what prepare found)
    devices: DevicePlan
    device_summary: DevicesJson  # the manifest's ``devices`` (kit.gpus.DevicePlan.check)
    trials: dict[str, ResolvedTrial]  # trial id -> the trial resolved
    collectors: CollectorSettings  # what samples each trial (and the idle baseline)


def prepare(spec: Spec, opts: RunOptions, events: RunEvents, plan: Plan) -> Prepared:
    """Every check that can fail before anything is written, and every trial of ``plan`` resolved once."""
    _check_arms(spec, opts, plan.arms)
    workloads = {cid: spec.workload_for(cfg) for cid, cfg in plan.configs.items()}
    data_of = {cid: spec.dataset_for(cfg) for cid, cfg in plan.configs.items()}
    flat = {cid: wl.flat() for cid, wl in workloads.items()}
    devices = DevicePlan.build(spec.container.gpus)
    summary = devices.check(flat[cid] for cid in sorted({t.config_id for t in plan.trials}))
    info = spec.workload_info
    studies = {arm_framework(a): _study_request(spec, arm_framework(a), info) for a in plan.arms}
    try:  # every dataset before the backend (an image build) starts: a host without the data stops here
        dataset = _dataset(spec, opts, events)
        datasets = _more_datasets(spec, opts, events) if spec.cases else {}
    except DatasetError as err:
        raise with_fetch_hint(err, spec, opts.data_dir) from None
    options = BackendArgs(opts, spec)
    backend = make_backend(opts.backend, **options.kwargs)
    backend.pinning = options.pin
    backend.device = "gpu" if "gpu" in summary["resolved"] else "cpu"
    probe = backend.available()
    if not probe.ok:
        raise KitError(f"backend {opts.backend} is not usable here: {probe.detail}", where="--backend",
                       fix=probe.fix or "see `kit doctor`")
    found = backend.prepare(plan.arms, dataset.directory)

    def data_dir(ds: Dataset | None) -> Path:
        return dataset.directory if ds is None or not datasets else datasets[dataset_key(ds.name, ds.source)].directory

    trials = {t.trial_id: ResolvedTrial(t, workloads[t.config_id], data_of[t.config_id],
                                        devices.resolve(flat[t.config_id]), studies[t.framework],
                                        data_dir(data_of[t.config_id])) for t in plan.trials}
    return Prepared(spec, plan, backend, dataset, datasets, {**backend.describe(), **found}, devices, summary, trials,
                    collector_settings(spec, opts))


class BackendArgs:
    """The backend's constructor arguments: the options given, with the spec's container settings and the CPUs
    this host pins the trials to (``cpuset = "auto"`` resolved)."""

    def __init__(self, opts: RunOptions, spec: Spec) -> None:
        self.pin = pinning.resolve(spec.container.cpuset)
        self.kwargs = dict(opts.backend_options)
        if opts.backend != "local":
            self.kwargs.setdefault("container", spec.container if spec.container.cpuset != "auto" else
                                   dataclasses.replace(spec.container, cpuset=self.pin.cpuset()))


def resolve_devices(spec: Spec, plan: Plan) -> tuple[DevicePlan, DevicesJson]:
    """Resolve every configuration's device on this host (KitError for "gpu" without an allowed GPU)."""
    devices = DevicePlan.build(spec.container.gpus)
    configs = {json.dumps(t.config, sort_keys=True): t.config for t in plan.trials}
    summary = devices.check(spec.workload_for(c).flat() for c in configs.values())
    return devices, summary


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
