"""`kit reproduce-all`: every study of a folder whose profile fits this host, one after another, resumable.

Why a plan first: a study this host cannot run as written (a paper profile on a CPU host, two GPUs for
DataParallel on a one-GPU host) or that would not fit the budget is skipped up front, with the reason, and
never started: a half-run study is worth less than a skipped one. Why the same path as `kit run`: each study
goes through :func:`kit.run.request.run_request` and :func:`kit.run.request.execute` (the runner is injected,
``run_study``, so the plan, the state and the summary are tested without running a framework). Why a state
file: a killed command loses at most the trial in flight; the next call resumes that run.

Where things live: :mod:`~kit.reproduce.needs` (the folder's studies, the host, what a profile needs),
:mod:`~kit.reproduce.state` (the state file), :mod:`~kit.reproduce.plan` (run, resume, done or skip, and the
budget), :mod:`~kit.reproduce.execute` (running the plan; :class:`KitRunner`, the path `kit run` takes) and
:mod:`~kit.reproduce.summary` (the page it ends with, and :func:`reproduce_all`, the whole command). This
``__init__`` re-exports the names the command line and other tools use: the package's API.
"""

from __future__ import annotations

from kit.reproduce.execute import KitRunner, Outcome, QuietEvents, ReproduceEvents, Result, RunStudy, run_plan
from kit.reproduce.needs import (
    Host,
    Needs,
    Study,
    StudyNeeds,
    choose_profile,
    discover,
    fits,
    requirements,
    study_needs,
    torchvision_need_of,
)
from kit.reproduce.plan import PlanEntry, make_plan, measured_walls
from kit.reproduce.state import STATE_DIR, StudyState, check_state, load_state, save_state, state_path
from kit.reproduce.summary import (
    ClaimRow,
    StudyRow,
    Summary,
    fmt_duration,
    headline,
    read_claims,
    reproduce_all,
    summarize,
    write_summary,
)

__all__ = [
    "STATE_DIR", "ClaimRow", "Host", "KitRunner", "Needs", "Outcome", "PlanEntry", "QuietEvents", "ReproduceEvents",
    "Result", "RunStudy", "Study", "StudyNeeds", "StudyRow", "StudyState", "Summary", "check_state", "choose_profile",
    "discover", "fits", "fmt_duration", "headline", "load_state", "make_plan", "measured_walls", "read_claims",
    "reproduce_all", "requirements", "run_plan", "save_state", "state_path", "study_needs", "summarize",
    "torchvision_need_of", "write_summary",
]
