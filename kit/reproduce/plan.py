"""The plan of `kit reproduce-all`: the folder's studies, and what happens to each (run, resume, done, skip and
why), decided before anything runs: a study that does not fit this host or the budget is never started, since a
half-run study is worth less than a skipped one. Estimates come from the spec or a measured earlier run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from kit.errors import KitError
from kit.reproduce.needs import Host, Study, choose_profile, fits, requirements
from kit.reproduce.state import (
    StudyState,
)
from kit.spec import Spec, load_spec
from kit.store import RunDir

# -- the plan ---------------------------------------------------------------------------------------------------

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
    data: str = ""  # the dataset files the run would download first ("" when none), and the command fetching them


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


def missing_data(spec: Spec, data_dir: Path | None = None) -> str:
    """What the study's profile would download before its first trial: "N dataset files (X MB) to download
    first (or fetch ahead: kit datasets fetch ...)", or "" when every file is present.

    Presence only (by name in the directories a run searches): digests are checked by the run and by `kit
    datasets fetch`, and hashing gigabytes to draw a plan would make `--dry-run` slow. A dataset unknown to the
    registry says nothing here: the run refuses it with its own error.
    """
    from kit.dataset_fetch import fetch_command, needed_files
    from kit.datasets import DATASETS, search_dirs

    try:
        needed = needed_files(spec)
    except KitError:
        return ""
    missing = [n for n in needed
               if not any((d / n.file.name).is_file() for _, d in search_dirs(DATASETS[n.dataset], data_dir))]
    if not missing:
        return ""
    size = sum(n.file.size or 0 for n in missing)
    mb = f", {size / 1e6:,.0f} MB" if size else ""
    return (f"{len(missing)} dataset file{'s' if len(missing) != 1 else ''} to download first{mb} "
            f"(or ahead, also on another host: {fetch_command(spec)})")


def run_status(path: Path) -> tuple[str | None, float]:
    """A run directory's manifest status and the share of its plan still to run (None: no readable run)."""
    try:
        rd = RunDir.open(path)
        man = rd.manifest()
        planned = len(man.plan.trials)
        return man.status, (1 - len(rd.finished_ids()) / planned) if planned else 1.0
    except KitError:
        return None, 1.0


def make_plan(studies: Sequence[Study], host: Host, profile: str, runs_dir: Path,
              states: Mapping[str, StudyState], budget_s: float | None = None,
              data_dir: Path | None = None) -> tuple[PlanEntry, ...]:
    """One entry per study, in the studies' order; the budget is spent in that order on the estimates of the
    studies that run or resume (a study without an estimate cannot be planned within a budget: skipped)."""
    walls = measured_walls(runs_dir, [s.id for s in studies])
    left = budget_s
    out = []
    for s in studies:
        chosen = choose_profile(profile, host, s.profiles)
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
        entry = replace(entry, action="run", data=missing_data(spec, data_dir))
        prev = states.get(s.id)
        if prev is not None and prev.profile == chosen:
            status, share_left = run_status(prev.path(runs_dir))
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
