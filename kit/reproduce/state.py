"""The state file of `kit reproduce-all`: ``<runs>/reproduce-all/state.json`` maps each study to its run directory
as soon as the run starts, so a killed command loses at most the trial in flight; the next call resumes that run
(`kit run --resume`) and skips the studies already complete. What it names is checked before anything runs (a
run that is not the study's, or whose code this reader does not trust, stops the command).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kit.errors import KitError, StoreError
from kit.reproduce.needs import Study
from kit.safeio import kind_of
from kit.spec import load_spec
from kit.store import RunDir, atomic_write_json
from kit.trust import StudyTrust

STATE_DIR = "reproduce-all"
STATE_FILE = "state.json"
STATE_SCHEMA = 1
MAX_STATE_BYTES = 4 << 20
STATUSES = ("running", "complete", "incomplete", "failed")
STATE_FIX = "remove it to start afresh (the run directories stay; their studies then run again)"


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
    from kit.run.resume import protocol_differences, protocol_of
    from kit.run_code import resume_code

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
