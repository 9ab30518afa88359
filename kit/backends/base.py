"""The backend contract: how one trial's harness process is run.

A backend (local subprocess, Docker/Podman container, Apptainer) starts
``python -m kit.harness --out OUT --data DATA`` for one trial, waits for it
under a time limit and hands back a :class:`TrialOutcome`. Where the trial
runs (this host, a Slurm node) is the executor's business, not the backend's.

The work directory holds ``request.json`` before the start and
``markers.jsonl`` / ``result.json`` after; backends map it into the trial's
file system (``--out``) however they must, and the dataset directory
read-only (``--data``).

Everything in the work directory after the start is the trial's: in a
container it is written by the container's user, so a hostile or broken
trial may leave a symbolic link, a FIFO, a directory or a huge file where the
kit expects ``result.json`` / ``markers.jsonl`` / a log. The kit reads those
files only through :func:`read_trial_file` (``O_NOFOLLOW | O_NONBLOCK``, a
regular file, under a size cap) and writes into the directory only through
:func:`create_trial_file` (unlink what is there, then ``O_CREAT | O_EXCL |
O_NOFOLLOW``), so a planted link is never followed; a refused file is a trial
error with the reason (:func:`read_outputs`), never a crash or a hang.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypedDict, cast

from kit.collectors.base import Probe, TrialTarget
from kit.pinning import Pinning
from kit.records import JsonTable

STDERR_TAIL_CHARS = 4000
RESULT_MAX_BYTES = 16 * 1024**2  # result.json: a few KiB in practice
MARKERS_MAX_BYTES = 16 * 1024**2  # markers.jsonl
MARKERS_MAX_LINES = 100_000
LOG_TAIL_BYTES = 1024**2  # what the kit keeps of a trial's stdout/stderr
HARNESS_EXIT = {0: "ok", 3: "oom", 4: "error", 5: "skipped", 1: "error", 6: "error"}  # 6: device unavailable


class HarnessResultJson(TypedDict, total=False):
    """``result.json`` as the harness writes it (kit.harness): the contract across the trial's process boundary.

    The trial's process wrote it, so every key may be missing or of another type: only ``status`` is relied on
    (:func:`status_from`); ``results`` and ``env`` pass into the trial record as they are.
    """

    status: str  # ok | oom | skipped | error
    results: JsonTable
    env: JsonTable
    error: str
    error_kind: str
    reason: str
    traceback_tail: str
    started: float
    ended: float


@dataclass
class TrialOutcome:
    """What a backend reports about one finished (or failed) trial."""

    status: str  # ok | oom | skipped | error | timeout
    exit_code: int | None
    result: HarnessResultJson | None
    markers: list[JsonTable]
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
    # The run's copy of its study folder (kit.studies), set by the runner; the harness gets it as --study
    # (read-only in containers). None: the experiment uses the kit's own workloads.
    study_dir: Path | None = None
    pinning: Pinning = Pinning()  # the trial's CPUs (kit.pinning), set by the runner

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


class TrialFileError(Exception):
    """A file in the trial's work directory the kit refuses: a link, not a regular file, too big, malformed."""


def read_trial_file(path: Path, max_bytes: int) -> bytes | None:
    """The bytes of ``path`` (None: absent), never following a link the trial could have planted.

    ``O_NOFOLLOW`` refuses a symbolic link as the last component, ``O_NONBLOCK``
    keeps a FIFO from blocking the open, ``fstat`` on the opened descriptor must
    say regular file, and at most ``max_bytes`` are read (a file that is or
    grows larger is refused): :func:`kit.safeio.read_capped`, with its refusal
    as a TrialFileError saying why.
    """
    from kit.errors import StoreError
    from kit.safeio import read_capped

    try:
        return read_capped(path, max_bytes, f"{path.name} in the trial's work directory", missing_ok=True,
                           link_note="a trial's file is never followed")
    except StoreError as exc:
        raise TrialFileError(exc.cause) from None


def read_markers(path: Path, max_bytes: int = MARKERS_MAX_BYTES) -> list[JsonTable]:
    """Parse markers.jsonl, skipping a torn or non-object line (a killed writer); TrialFileError as above."""
    raw = read_trial_file(path, max_bytes)
    if raw is None:
        return []
    lines = raw.decode("utf-8", errors="replace").splitlines()
    if len(lines) > MARKERS_MAX_LINES:
        raise TrialFileError(f"{path.name} has {len(lines)} lines, over the {MARKERS_MAX_LINES}-marker limit; refused")
    out: list[JsonTable] = []
    for line in lines:
        try:
            item = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(item, dict):
            out.append(item)
    return out


def read_result(path: Path, max_bytes: int = RESULT_MAX_BYTES) -> HarnessResultJson | None:
    """Parse result.json (None: absent or torn, the exit code decides); TrialFileError as above."""
    raw = read_trial_file(path, max_bytes)
    if raw is None:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    except RecursionError:
        raise TrialFileError(f"{path.name} is nested too deeply to parse; refused") from None
    if not isinstance(data, dict):
        raise TrialFileError(f"{path.name} is a JSON {type(data).__name__}, not an object; refused")
    return cast(HarnessResultJson, data)


def read_outputs(work: Path) -> tuple[HarnessResultJson | None, list[JsonTable], str | None]:
    """(result, markers, problem) of the trial in ``work``.

    A refused file makes the trial an error: the result becomes
    ``{"status": "error", "error": <the reason>}`` (so the trial record carries
    it) and the markers are dropped; ``problem`` is the reason, None when
    both files were acceptable.
    """
    from kit.harness import MARKERS_FILE, RESULT_FILE

    problems = []
    result: HarnessResultJson | None = None
    markers: list[JsonTable] = []
    try:
        result = read_result(work / RESULT_FILE)
    except TrialFileError as exc:
        problems.append(str(exc))
    try:
        markers = read_markers(work / MARKERS_FILE)
    except TrialFileError as exc:
        problems.append(str(exc))
    if not problems:
        return result, markers, None
    problem = "; ".join(problems)
    return {"status": "error", "error": f"untrusted trial output: {problem}", "results": {}}, [], problem


def create_trial_file(work: Path, name: str) -> int:
    """A new file ``name`` in ``work`` for writing (a descriptor), whatever the trial left there.

    What is at ``name`` is unlinked (a link, a FIFO, a file: the name, never
    its target), then the file is created with ``O_CREAT | O_EXCL |
    O_NOFOLLOW`` relative to a descriptor of ``work`` opened with
    ``O_NOFOLLOW``: if anything reappears in between, creation fails instead
    of following it. OSError when the name cannot be freed (e.g. a directory).
    """
    dfd = os.open(work, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        try:
            os.unlink(name, dir_fd=dfd)
        except FileNotFoundError:
            pass
        return os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dfd)
    finally:
        os.close(dfd)


def fd_tail(fd: int, max_bytes: int = LOG_TAIL_BYTES) -> str:
    """The last ``max_bytes`` of the file open at ``fd`` (read by descriptor: the name may be gone or replaced)."""
    size = os.fstat(fd).st_size
    start = max(0, size - max_bytes)
    chunks, pos = [], start
    while pos < size:
        chunk = os.pread(fd, min(1 << 20, size - pos), pos)
        if not chunk:
            break
        chunks.append(chunk)
        pos += len(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def wait_group(proc: subprocess.Popen[bytes], timeout_s: float | None) -> bool:
    """Wait for a trial started with ``start_new_session``; True if it timed out (its process group killed).

    On an interrupt (Ctrl-C, SIGTERM as an exception) the group is killed too and the exception goes on:
    the trial in flight is lost, nothing else (no orphan keeps running under a resumed run).
    """
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        return True
    except BaseException:
        kill_group(proc)
        raise
    return False


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def tail(text: str, n: int = STDERR_TAIL_CHARS) -> str:
    return text[-n:]


def status_from(exit_code: int | None, result: HarnessResultJson | None, timed_out: bool) -> str:
    """One rule for every backend: timeout, then the result file, then the exit code."""
    if timed_out:
        return "timeout"
    if result is not None and result.get("status") in ("ok", "oom", "skipped", "error"):
        if result["status"] == "ok" and exit_code not in (0, None):
            return "error"
        return str(result["status"])
    return HARNESS_EXIT.get(exit_code if exit_code is not None else -1, "error")
