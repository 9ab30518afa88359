"""The backend contract: how one trial's harness process is run.

A backend (local subprocess, Docker/Podman container, Apptainer) starts
``python -m kit.harness --out OUT --data DATA`` for one trial, waits for it
under a time limit and hands back a :class:`TrialOutcome`. Where the trial
runs (this host, a Slurm node) is the executor's business, not the backend's.

The work directory holds ``request.json`` before the start and
``markers.jsonl`` / ``result.json`` after; backends map it into the trial's
file system (``--out``) however they must, and the dataset directory
read-only (``--data``).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from kit.collectors.base import Probe, TrialTarget

STDERR_TAIL_CHARS = 4000
HARNESS_EXIT = {0: "ok", 3: "oom", 4: "error", 5: "skipped", 1: "error", 6: "error"}  # 6: device unavailable


@dataclass
class TrialOutcome:
    """What a backend reports about one finished (or failed) trial."""

    status: str  # ok | oom | skipped | error | timeout
    exit_code: int | None
    result: dict[str, Any] | None
    markers: list[dict[str, Any]]
    stderr_tail: str
    wall_s: float
    detail: dict[str, Any] = field(default_factory=dict)  # backend-specific: container id, oom_killed, image...


class Backend(ABC):
    """A way to run one trial's harness."""

    name: ClassVar[str] = "backend"
    # The run's resolved device ("gpu" when any trial computes on a GPU, else "cpu"), set by the runner
    # before prepare() (kit.gpus); None: not resolved (a backend used alone decides from the host).
    # Each trial's own GPUs arrive in run_trial's ``target.gpu_indices`` ([] for a CPU trial).
    device: str | None = None

    @abstractmethod
    def available(self) -> Probe:
        """Can this backend run trials here? Cheap; no side effects."""

    def describe(self) -> dict[str, Any]:
        """Provenance for the manifest (interpreter, engine, images)."""
        return {"backend": self.name}

    def prepare(self, arms: tuple[str, ...], data_dir: Path) -> dict[str, Any]:
        """Once per run before any trial, for the plan's arms (``pytorch`` or ``pytorch@2.6-cu124``):
        check images, record versions. Default: nothing."""
        return {}

    @abstractmethod
    def run_trial(
        self,
        arm: str,
        work: Path,
        data_dir: Path,
        timeout_s: float,
        target: TrialTarget,
        on_start: Callable[[], None] | None = None,
    ) -> TrialOutcome:
        """Run the harness for the request in ``work``; never raise for a failing trial."""


def read_markers(path: Path) -> list[dict[str, Any]]:
    """Parse markers.jsonl, skipping a torn last line (a killed writer)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def read_result(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def tail(text: str, n: int = STDERR_TAIL_CHARS) -> str:
    return text[-n:]


def status_from(exit_code: int | None, result: dict[str, Any] | None, timed_out: bool) -> str:
    """One rule for every backend: timeout, then the result file, then the exit code."""
    if timed_out:
        return "timeout"
    if result is not None and result.get("status") in ("ok", "oom", "skipped", "error"):
        if result["status"] == "ok" and exit_code not in (0, None):
            return "error"
        return str(result["status"])
    return HARNESS_EXIT.get(exit_code if exit_code is not None else -1, "error")
