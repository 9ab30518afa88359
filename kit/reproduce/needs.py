"""The studies of a folder, what the host has (its NVIDIA GPUs, torchvision) and what a study's profile needs from
it: the plan of `kit reproduce-all` skips up front, with the reason, a study this host cannot run as written (a
paper profile on a CPU host, two GPUs for DataParallel on a one-GPU host), and ``kit doctor --strict STUDY`` says
what one study lacks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from kit.doctor.checks import torchvision_fix
from kit.doctor.findings import Finding
from kit.errors import KitError
from kit.spec import Spec, load_spec
from kit.studies import BUNDLED, experiment_paths, torchvision_need

# -- what the host has, what a study needs ----------------------------------------------------------------------

@dataclass(frozen=True)
class Host:
    """The NVIDIA GPUs NVML sees here (kit.gpus: the same inventory the runner resolves devices with)."""

    gpus: int = 0
    gpu_names: tuple[str, ...] = ()
    note: str = ""  # why NVML saw none, when it saw none
    # whether the PyTorch arm can import torchvision where it runs: this interpreter's for the local backend (a
    # lean CPU install has torch alone: kit.doctor.cpu_torch_choice), the images' (which all carry it) otherwise
    torchvision: bool = True

    @classmethod
    def detect(cls, backend: str = "local") -> Host:
        from kit.gpus import nvml_inventory
        from kit.studies import torchvision_installed

        inv = nvml_inventory()
        return cls(len(inv.gpus), tuple(g.name or f"GPU {g.index}" for g in inv.gpus), inv.note,
                   torchvision=backend not in ("local", "auto") or torchvision_installed())

    def describe(self) -> str:
        if not self.gpus:
            return "no NVIDIA GPU" + (f" ({self.note})" if self.note else "")
        return f"{self.gpus} NVIDIA GPU(s): {', '.join(self.gpu_names)}"


@dataclass(frozen=True)
class Needs:
    """What a profile is written for: how many GPUs, which spec key says so, and GPUs it names by index."""

    gpus: int = 0
    why: str = ""
    gpu_indices: tuple[int, ...] = ()
    torchvision: str = ""  # why its PyTorch arm needs torchvision ("": it does not; kit.studies.torchvision_need)


def requirements(spec: Spec) -> Needs:
    """The GPUs the spec's profile asks for, from the keys the runner resolves devices with (kit.gpus).

    ``workload.device = "gpu"`` asks for one per trial; ``"auto"`` too: it means the GPU where there is one,
    so the profile is written for a GPU, and on a CPU host it would run another protocol than the one it
    states (every quick profile says ``device = "cpu"``). A data-parallel strategy (``strategy`` dp/ddp with
    ``devices`` N) asks for N unless ``dist_device = "cpu"``; ``slurm.gpus_per_trial`` states a job's GPUs;
    ``container.gpus`` may name GPUs by index, or forbid them ("none").
    """
    from kit.gpus import gpus_per_trial

    allowed = spec.container.gpus.replace(" ", "")
    if allowed == "none":
        return Needs()
    asks: list[tuple[int, str, str]] = []  # (GPUs, what asks, its case) per configuration that asks for any
    configs = spec.configurations()
    for config in configs:
        wl = spec.workload_for(config).flat()
        device = str(wl.get("device", "auto"))
        if device == "cpu" or ("strategy" in wl and wl.get("dist_device") == "cpu"):
            continue
        n = gpus_per_trial(wl)
        what = (f"workload.devices = {n} for strategy \"{wl.get('strategy')}\"" if n > 1 else
                f"workload.device = \"{device}\"" + (": written for a GPU" if device == "auto" else ""))
        asks.append((n, what, str(config.get("case", ""))))
    gpus, why = 0, ""
    if asks:
        gpus, what, case = max(asks, key=lambda a: a[0])
        why = what + (f" in case {case}" if case and len(asks) < len(configs) else "")
    if spec.slurm.gpus_per_trial > gpus:
        gpus, why = spec.slurm.gpus_per_trial, f"slurm.gpus_per_trial = {spec.slurm.gpus_per_trial}"
    indices = () if allowed == "all" else tuple(int(x) for x in allowed.split(",") if x.isdigit())
    return Needs(gpus, why, indices if gpus else (), torchvision_need(spec))


def torchvision_need_of(path: Path, profile: str) -> str:
    """:func:`kit.studies.torchvision_need` of one profile of the spec at ``path`` ("" when it cannot be loaded:
    the listing reports that spec as invalid on its own)."""
    try:
        return torchvision_need(load_spec(path, None if profile == "paper" else profile))
    except KitError:
        return ""


def fits(host: Host, needs: Needs) -> str | None:
    """None when the host has what the profile needs, else why not (the plan's skip reason)."""
    if needs.gpus > host.gpus:
        return (f"host lacks {'a GPU' if needs.gpus == 1 else 'GPUs'}: the profile needs {needs.gpus} ({needs.why}), "
                f"this host has {host.describe()}")
    missing = [i for i in needs.gpu_indices if i >= host.gpus]
    if missing:
        return f"host lacks GPU {missing[0]} (container.gpus names it), this host has {host.describe()}"
    if needs.torchvision and not host.torchvision:
        return f"needs torchvision ({needs.torchvision}), which this environment lacks. Fix: {torchvision_fix()}"
    return None


# The profile a study may carry for the paper's CPU protocol (issue 42): the part of the paper measured on a CPU,
# at the paper's settings, which a CPU host can run honestly where the paper profile is written for a GPU.
PAPER_CPU = "paper-cpu"


def choose_profile(requested: str, host: Host, profiles: Sequence[str] = ()) -> str:
    """``auto``: the paper's protocol where a GPU is present; elsewhere the paper's CPU protocol (``paper-cpu``)
    for a study that has one among ``profiles``, else the quick profile. Any other request is taken as asked.

    Why not quick everywhere on a CPU host: Germino's, DLBench's and Patel's papers measured on CPUs too, and the
    quick profile's stand-ins cannot test those findings; a ``paper-cpu`` profile runs them as the paper did.
    """
    if requested == "auto":
        if host.gpus:
            return "paper"
        return PAPER_CPU if PAPER_CPU in profiles else "quick"
    return requested


# -- the studies of a folder ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Study:
    """One experiment found in the folder; ``error``: why its spec cannot be loaded (it is skipped with it)."""

    id: str
    path: Path
    title: str = ""
    profiles: tuple[str, ...] = ()
    error: str = ""


def discover(directory: Path = BUNDLED, only: Sequence[str] = ()) -> tuple[Study, ...]:
    """The folder's experiments in name order (a deterministic order); ``only``: ids or folder names to keep."""
    if not directory.is_dir():
        raise KitError("experiments directory not found", where=str(directory),
                       fix="give a directory of study folders or experiment TOML files")
    found = []
    for path in experiment_paths(directory):
        try:
            spec = load_spec(path)
            found.append(Study(spec.experiment.id, path, spec.experiment.title, spec.profiles))
        except KitError as err:
            found.append(Study(path.stem if path.is_file() else path.name, path, error=err.one_line()))
    if only:
        names = {s.id for s in found} | {s.path.name for s in found}
        unknown = [o for o in only if o not in names]
        if unknown:
            raise KitError(f"no study {unknown[0]!r} in {directory}", where="--only",
                           fix=f"use one of: {', '.join(s.id for s in found)}")
        found = [s for s in found if s.id in only or s.path.name in only]
    return tuple(found)


# -- kit doctor --strict STUDY: what one study needs from this host ------------------------------------------

class StudyNeeds(TypedDict):
    """``kit doctor --strict STUDY --json``'s ``study`` (kit/schemas/doctor.schema.json): the shape is the contract."""

    study: str
    profile: str
    missing: list[str]
    ready: bool


def study_needs(study: Path, profile: str | None, findings: list[Finding], download: bool = True,
                data_dir: Path | None = None) -> StudyNeeds:
    """What one study's profile needs from this host and which of it is missing (``kit doctor --strict STUDY``):
    the frameworks of its arms (local backend), the GPUs its profile is written for, its datasets."""
    from kit.datasets import SYNTHETIC, resolve

    host = Host.detect()
    base = load_spec(study)
    chosen = choose_profile(profile or "auto", host, base.profiles)
    if chosen not in base.profiles and chosen != "paper":
        chosen = "paper"
    spec = load_spec(study, None if chosen == "paper" else chosen)
    missing: list[str] = []
    by = {f["check"]: f for f in findings}
    for fw in spec.experiment.frameworks:
        f = by.get(f"framework {fw} (local backend)")
        if f is not None and not f["ok"]:
            missing.append(f"{fw}: {f['detail']} (fix: {f['fix']})")
    lacks = fits(host, requirements(spec))
    if lacks:
        missing.append(lacks)
    for ds in spec.datasets():
        if ds.source == SYNTHETIC:
            continue
        try:
            resolve(ds.name, ds.source, data_dir=data_dir, download=False)
        except KitError as err:
            if download and "not found" in err.cause:
                continue  # kit run fetches it (a failed download then says why)
            missing.append(f"dataset {ds.name} ({ds.source}): {err.cause}")
    return {"study": spec.experiment.id, "profile": chosen, "missing": missing, "ready": not missing}
