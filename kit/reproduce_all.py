"""`kit reproduce-all`: every study of a folder whose profile fits this host, one after another, resumable.

Why a plan first: a study this host cannot run as written (a paper profile on a CPU host, two GPUs for
DataParallel on a one-GPU host) or that would not fit the budget is skipped up front, with the reason, and
never started: a half-run study is worth less than a skipped one. Why the same path as `kit run`: each study
goes through :func:`kit.run_request.run_request` and :func:`kit.run_request.execute` (the runner is injected,
``run_study``, so the plan, the state and the summary are tested without running a framework). Why a state
file: ``<runs>/reproduce-all/state.json`` maps each study to its run directory as soon as the run starts, so
a killed command loses at most the trial in flight; the next call resumes that run (`kit run --resume`) and
skips the studies already complete. The summary page is kit.reproduce_summary's.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from kit.doctor import Finding, torchvision_fix
from kit.errors import KitError, StoreError, disk_error
from kit.plan import Plan, Trial
from kit.runner import Interrupted, RunEvents, sigterm_as_interrupt
from kit.safeio import kind_of
from kit.spec import Spec, load_spec
from kit.store import RunDir, atomic_write_json
from kit.studies import BUNDLED, experiment_paths, torchvision_need
from kit.trust import StudyTrust

STATE_DIR = "reproduce-all"
STATE_FILE = "state.json"
STATE_SCHEMA = 1
MAX_STATE_BYTES = 4 << 20
STATUSES = ("running", "complete", "incomplete", "failed")
STATE_FIX = "remove it to start afresh (the run directories stay; their studies then run again)"


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


def choose_profile(requested: str, host: Host) -> str:
    """``auto``: the paper's protocol where a GPU is present, the quick profile elsewhere; else as asked."""
    if requested == "auto":
        return "paper" if host.gpus else "quick"
    return requested


# -- the studies, the state, the plan ---------------------------------------------------------------------------

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


@dataclass(frozen=True)
class StudyState:
    """Where one study stands: its profile, run directory (relative to the runs directory) and status."""

    profile: str
    run_dir: str
    status: str  # running (started, or killed mid-way) | complete | incomplete | failed
    reason: str = ""
    wall_s: float = 0.0  # time `kit reproduce-all` spent on it, every call together

    def path(self, runs_dir: Path) -> Path:
        return runs_dir / self.run_dir


def state_path(runs_dir: Path) -> Path:
    return runs_dir / STATE_DIR / STATE_FILE


def load_state(runs_dir: Path) -> dict[str, StudyState]:
    """state.json, checked key by key (a StoreError naming the key; missing: no study started yet)."""
    from kit.safeio import load_json

    path = state_path(runs_dir)
    raw = load_json(path, MAX_STATE_BYTES, "reproduce-all state", missing_ok=True, fix=STATE_FIX)
    if raw is None:
        return {}
    studies = raw.get("studies")
    if raw.get("schema_version") != STATE_SCHEMA or not isinstance(studies, dict):
        raise StoreError(f"not a reproduce-all state of schema {STATE_SCHEMA}", where=str(path), fix=STATE_FIX)
    out = {}
    for sid, e in studies.items():
        ok = (isinstance(e, dict) and isinstance(e.get("profile"), str) and isinstance(e.get("run_dir"), str)
              and e.get("status") in STATUSES and isinstance(e.get("wall_s", 0.0), int | float)
              and not os.path.isabs(e["run_dir"]) and ".." not in Path(e["run_dir"]).parts)
        if not ok:
            raise StoreError(f"malformed entry for study {sid!r}", where=f"{path}: studies.{sid}", fix=STATE_FIX)
        out[sid] = StudyState(e["profile"], e["run_dir"], e["status"], str(e.get("reason") or ""),
                              float(e.get("wall_s", 0.0)))
    return out


def _inside(runs_dir: Path, rel: str, where: str) -> Path | None:
    """``runs_dir / rel`` when it is a run directory inside the runs directory reached without a link (None when
    it does not exist: the study then runs anew); StoreError naming the state's key otherwise."""
    path = runs_dir
    for part in Path(rel).parts:
        path = path / part
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"names a run directory that cannot be read ({exc.strerror or exc})", where=where,
                             fix=STATE_FIX) from None
        if not stat.S_ISDIR(st.st_mode):
            raise StoreError(f"names {kind_of(st.st_mode)} ({path}), not a run directory; the kit never follows a "
                             "link out of the runs directory", where=where, fix=STATE_FIX)
    try:
        path.resolve(strict=True).relative_to(runs_dir.resolve(strict=True))
    except (OSError, ValueError):
        raise StoreError("names a run directory outside the runs directory", where=where, fix=STATE_FIX) from None
    return path


def check_state(states: Mapping[str, StudyState], studies: Sequence[Study], runs_dir: Path,
                trust: StudyTrust) -> None:
    """Every run directory the state names is data until shown otherwise: inside the runs directory (no link on
    the way), a run of the study it is listed under at the profile it is listed with, recording that study's
    protocol as its spec gives it now, and (for the studies this call plans) holding only study code this reader
    trusts (kit.run_code, the rule `kit run --resume` applies). A crafted state.json is refused with the key
    path before anything is resumed, run or summarised; it can neither run a stranger's code nor show one
    study's claims under another's name."""
    from kit.run_code import resume_code
    from kit.runner import protocol_differences, protocol_of

    state = state_path(runs_dir)
    by_id = {s.id: s for s in studies}
    for sid, st in states.items():
        where = f"{state}: studies.{sid}.run_dir"
        path = _inside(runs_dir, st.run_dir, where)
        if path is None:
            continue
        try:
            man = RunDir.open(path).manifest()
        except KitError as err:
            raise StoreError(f"names a run directory whose manifest cannot be read ({err.cause})", where=where,
                             fix=STATE_FIX) from None
        if man.experiment != sid:
            raise StoreError(f"names a run of experiment {man.experiment!r}, not of study {sid!r}", where=where,
                             fix=STATE_FIX)
        if (man.profile or "paper") != st.profile:
            raise StoreError(f"names a run of profile {man.profile or 'paper'!r}, listed as {st.profile!r}",
                             where=where, fix=STATE_FIX)
        study = by_id.get(sid)
        if study is None or study.error:
            continue  # not planned in this call: neither resumed nor summarised
        try:
            spec = load_spec(study.path, st.profile)
        except KitError:
            continue  # the plan skips the study with its spec's error
        diffs = protocol_differences(protocol_of(spec.to_dict()), protocol_of(man.spec))
        if diffs:
            raise StoreError(f"names a run whose recorded protocol is not study {sid}'s as {study.path.name} gives "
                             f"it ({'; '.join(diffs[:3])})", where=where, fix=STATE_FIX)
        try:
            resume_code(path, man, trust, declares_study=spec.workload_info.folder)
        except KitError as err:
            raise type(err)(err.cause, where=f"{where} -> {err.where}", fix=err.fix) from None


def save_state(runs_dir: Path, states: Mapping[str, StudyState]) -> None:
    """Written by rename (kit.store): a kill mid-write leaves the previous state, never half of one."""
    body = {sid: {"profile": s.profile, "run_dir": s.run_dir, "status": s.status, "reason": s.reason,
                  "wall_s": round(s.wall_s, 3)} for sid, s in states.items()}
    atomic_write_json(state_path(runs_dir), {"schema_version": STATE_SCHEMA, "studies": body, "updated": time.time()},
                      after="run `kit reproduce-all` again with the same --runs-dir")


@dataclass(frozen=True)
class PlanEntry:
    """What happens to one study: run it anew, resume its run, nothing (done earlier) or skip it (why)."""

    study: str
    path: str
    title: str = ""
    profile: str = ""
    action: str = "skip"  # run | resume | done | skip
    reason: str = ""
    estimate_s: float | None = None  # of what is left to run
    estimate_from: str = ""  # "spec", or the run directory whose measured wall time it is
    run_dir: str = ""  # the run to resume, or the completed one (relative to the runs directory)


def measured_walls(runs_dir: Path, ids: Sequence[str]) -> dict[tuple[str, str], tuple[float, str]]:
    """(experiment, profile) -> (wall time, run directory) of the newest complete run of these experiments in the
    runs directory (only directories named like their runs, <time>-<id>, are read).

    Wall time is the manifest's ended - started: a resumed run's figure includes its pause, so it errs long.
    """
    best: dict[tuple[str, str], tuple[float, float, str]] = {}
    if not runs_dir.is_dir():
        return {}
    for d in sorted(runs_dir.iterdir()):
        if not any(f"-{i}" in d.name for i in ids) or not (d / "manifest.json").is_file():
            continue
        try:
            man = RunDir(d).manifest_json()
        except KitError:
            continue
        started, ended = man.get("started"), man.get("ended")
        if man.get("status") != "complete" or not isinstance(started, int | float) or \
                not isinstance(ended, int | float) or ended <= started:
            continue
        key = (str(man.get("experiment")), str(man.get("profile") or "paper"))
        if key not in best or ended > best[key][0]:
            best[key] = (float(ended), float(ended - started), d.name)
    return {k: (wall, name) for k, (_, wall, name) in best.items()}


def _run_status(path: Path) -> tuple[str | None, float]:
    """A run directory's manifest status and the share of its plan still to run (None: no readable run)."""
    try:
        rd = RunDir.open(path)
        man = rd.manifest()
        planned = len(man.plan.trials)
        return man.status, (1 - len(rd.finished_ids()) / planned) if planned else 1.0
    except KitError:
        return None, 1.0


def make_plan(studies: Sequence[Study], host: Host, profile: str, runs_dir: Path,
              states: Mapping[str, StudyState], budget_s: float | None = None) -> tuple[PlanEntry, ...]:
    """One entry per study, in the studies' order; the budget is spent in that order on the estimates of the
    studies that run or resume (a study without an estimate cannot be planned within a budget: skipped)."""
    walls = measured_walls(runs_dir, [s.id for s in studies])
    left = budget_s
    out = []
    for s in studies:
        chosen = choose_profile(profile, host)
        entry = PlanEntry(s.id, str(s.path), s.title, chosen)
        if s.error:
            out.append(replace(entry, reason=f"invalid spec: {s.error}"))
            continue
        if chosen not in s.profiles:
            out.append(replace(entry, reason=f"no profile {chosen!r} (profiles: {', '.join(s.profiles)})"))
            continue
        try:
            spec = load_spec(s.path, chosen)
        except KitError as err:
            out.append(replace(entry, reason=f"invalid spec: {err.one_line()}"))
            continue
        estimate, source = spec.profile_estimate_s, "spec" if spec.profile_estimate_s else ""
        if (s.id, chosen) in walls:
            estimate, source = walls[(s.id, chosen)]
        entry = replace(entry, estimate_s=estimate, estimate_from=source)
        lacks = fits(host, requirements(spec))
        if lacks:
            out.append(replace(entry, reason=lacks))
            continue
        entry = replace(entry, action="run")
        prev = states.get(s.id)
        if prev is not None and prev.profile == chosen:
            status, share_left = _run_status(prev.path(runs_dir))
            if status == "complete" and prev.status == "complete":
                out.append(replace(entry, action="done", reason="complete in an earlier call", estimate_s=None,
                                   estimate_from="", run_dir=prev.run_dir))
                continue
            if status is not None:
                entry = replace(entry, action="resume", run_dir=prev.run_dir,
                                estimate_s=None if estimate is None else estimate * share_left)
        if left is not None:
            if entry.estimate_s is None:
                out.append(replace(entry, action="skip", reason=f"no estimate to plan the budget with (add "
                                   f"estimate_s to the profile {chosen!r} of {s.path.name})"))
                continue
            if entry.estimate_s > left:
                out.append(replace(entry, action="skip", reason=f"would not fit the budget: estimate "
                                   f"{entry.estimate_s:.0f} s, {left:.0f} s left"))
                continue
            left -= entry.estimate_s
        out.append(entry)
    return tuple(out)


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
        status, _ = _run_status(path)
        if status == "complete":
            return record("complete"), False
        return record("incomplete", f"run status {status}; run the command again to resume"), False
    except (KeyboardInterrupt, SystemExit, Interrupted) as exc:
        return record("incomplete", f"interrupted ({type(exc).__name__}); run the command again to resume"), True
    except KitError as err:
        return record("failed", err.one_line()), False


# -- kit doctor --strict STUDY: what one study needs from this host ------------------------------------------

def study_needs(study: Path, profile: str | None, findings: list[Finding], download: bool = True,
                data_dir: Path | None = None) -> dict[str, Any]:
    """What one study's profile needs from this host and which of it is missing (``kit doctor --strict STUDY``):
    the frameworks of its arms (local backend), the GPUs its profile is written for, its datasets."""
    from kit.datasets import SYNTHETIC, resolve

    host = Host.detect()
    chosen = choose_profile(profile or "auto", host)
    base = load_spec(study)
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
        from kit.run_request import execute, run_request

        if resume is not None and _run_status(resume)[0] == "complete":  # killed while its report was written
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

    def trial_finished(self, trial: Trial, record: dict[str, Any]) -> None:
        self.inner.trial_finished(trial, record)

    def waiting(self, what: str, left_s: float, foreign_cpu: float | None) -> None:
        self.inner.waiting(what, left_s, foreign_cpu)
