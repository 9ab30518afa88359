"""The experiments `kit list` shows: the kit's own, KIT_EXPERIMENTS and --experiments folders."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.analysis.design import design_table
from kit.errors import KitError
from kit.plan import make_plan
from kit.spec import load_spec
from kit.studies import experiment_dirs, experiment_paths, torchvision_need


def list_experiments(directories: Path | list[Path] | None = None, *, mde: bool = True) -> list[dict[str, Any]]:
    """Every experiment (TOML file or study folder) with each profile's description, trial count and design check.

    ``directories``: where to look (a directory of experiments, or one study
    folder); None: the kit's bundled experiments, then ``KIT_EXPERIMENTS``.
    The design check says per hypothesis whether the profile can decide it
    (kit/analysis/design.py); ``mde=False`` skips its simulated minimum detectable
    effects (the compact `kit list`). Each profile also carries its ``estimate_s``
    (the spec's) and the GPUs it needs (``needs_gpus``, ``needs_why``:
    kit.reproduce.requirements). An invalid experiment is listed with its
    error instead of hiding the others.
    """
    if directories is None:
        dirs = experiment_dirs()
    else:
        dirs = [directories] if isinstance(directories, Path) else list(directories)
    out = []
    for directory in dirs:
        if not directory.is_dir():
            raise KitError("experiments directory not found", where=str(directory),
                           fix="give a directory of experiments or a study folder (kit new study NAME writes one)")
        for path in experiment_paths(directory):
            out.append(_entry(path, mde))
    return out


def _entry(path: Path, mde: bool = True) -> dict[str, Any]:
    from kit.reproduce import requirements

    label = f"{path.name}/" if path.is_dir() else path.name
    try:
        base = load_spec(path)
    except KitError as err:
        return {"file": label, "path": str(path), "id": "(invalid)", "invalid": True, "profiles": [
            {"name": "-", "trials": 0, "description": err.one_line()}]}
    profiles = []
    for name in base.profiles:
        spec = load_spec(path, name)
        plan = make_plan(spec)
        needs = requirements(spec)
        profiles.append({"name": name, "trials": len(plan.trials), "description": spec.profile_description,
                         "estimate_s": spec.profile_estimate_s, "needs_gpus": needs.gpus, "needs_why": needs.why,
                         "needs_torchvision": torchvision_need(spec),
                         "design": design_table(spec.to_dict(), plan.configs, list(plan.arms), mde=mde)})
    return {"file": label, "path": str(path), "id": base.experiment.id, "title": base.experiment.title,
            "profiles": profiles, "folder": bool(base.study_dir), "protocol_source": base.experiment.protocol_source,
            "deviations": [dataclasses.asdict(d) for d in base.deviations],
            "claims": [dataclasses.asdict(c) for c in base.claims]}


def _declared_id(path: Path) -> str | None:
    """The experiment id a spec file declares, read without validating the spec (None: unreadable)."""
    import tomllib

    from kit.studies import STUDY_FILE

    file = path / STUDY_FILE if path.is_dir() else path
    try:
        with open(file, "rb") as fh:
            exp = tomllib.load(fh).get("experiment")
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None
    return exp.get("id") if isinstance(exp, dict) and isinstance(exp.get("id"), str) else None


def known_experiments(extra: list[Path] | None = None) -> dict[str, Path]:
    """Experiment id -> its spec path (study folder or TOML file): the kit's own, KIT_EXPERIMENTS, ``extra``; the
    first of a duplicated id wins (the order `kit list` shows)."""
    out: dict[str, Path] = {}
    for directory in experiment_dirs(extra or []):
        if not directory.is_dir():
            continue
        for path in experiment_paths(directory):
            for name in (_declared_id(path), path.stem if path.is_file() else path.name):
                if name:
                    out.setdefault(name, path)
    return out


def resolve_experiment(arg: str | Path, extra: list[Path] | None = None) -> Path:
    """A spec path as given, or the experiment whose id (or folder/file name) ``arg`` is; for a bare name that is
    neither, a KitError listing the ids."""
    path = Path(arg)
    if path.exists():
        return path
    text = str(arg)
    if "/" not in text and not text.endswith(".toml"):
        found = known_experiments(extra)
        if text in found:
            return found[text]
        ids = sorted({_declared_id(p) or p.name for p in found.values()})
        raise KitError(f"no experiment with the id {text!r} and no such file", where=text,
                       fix=f"give one of the ids {', '.join(ids)} (kit list), or the path of an experiment TOML "
                           "or study folder")
    return path  # a path: load_spec says what is wrong with it


# -- the estimate `kit list` shows beside a measured run -----------------------------------------------------------

MAX_EVENTS_BYTES = 8 * 1024 * 1024  # a run's events.jsonl read for the listing (one line per event)


@dataclass(frozen=True)
class Measured:
    """The newest complete run of a profile in a runs directory: its wall time and whether the host was busy."""

    wall_s: float
    run_dir: str  # the directory's name in the runs directory
    busy: bool  # the idle baseline saw other work, or trials were re-run or kept disturbed


def measured_runs(runs_dir: Path, ids: list[str]) -> dict[tuple[str, str], Measured]:
    """(experiment, profile) -> the newest complete run's :class:`Measured` (kit.reproduce.measured_walls)."""
    from kit.reproduce import measured_walls

    return {key: Measured(wall, name, ran_busy(runs_dir / name))
            for key, (wall, name) in measured_walls(runs_dir, ids).items()}


def ran_busy(run: Path) -> bool:
    """Whether a run shared its host: its idle baseline said busy, or trials were re-run or kept disturbed (its
    events.jsonl, kit.disturbance.rerun_summary). An unreadable file says nothing (False), it does not fail."""
    import json

    from kit.disturbance import rerun_summary
    from kit.errors import StoreError
    from kit.safeio import read_capped

    try:
        data = read_capped(run / "events.jsonl", MAX_EVENTS_BYTES, "events.jsonl", missing_ok=True) or b""
    except StoreError:
        return False
    events = []
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    summary = rerun_summary(events)
    baseline = summary["baseline"]
    return bool(summary["spent"] or summary["kept"] or (baseline is not None and baseline["busy"] is True))


def estimate_text(estimate_s: float | None, measured: Measured | None) -> str:
    """The profile's estimate and, where a run exists, the measured figure beside it, each labelled:
    ``~3 min 40 s est., 39 min 37 s measured (busy host)``. The estimate is the spec's, stated for a quiet host;
    a measured run says what this host took, which on a busy host can be ten times more."""
    from kit.reproduce import fmt_duration

    if measured is None:
        return "~" + fmt_duration(estimate_s) if estimate_s else "unknown"
    seen = fmt_duration(measured.wall_s) + " measured" + (" (busy host)" if measured.busy else "")
    return f"~{fmt_duration(estimate_s)} est., {seen}" if estimate_s else seen
