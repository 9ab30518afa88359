"""Slurm executor: whole interleaved blocks per job, one node per job, exclusively.

The kit does not schedule; Slurm does. A run's plan is cut into chunks of
consecutive blocks; chunk ``i`` is task ``i`` of an sbatch job array. Every
task runs ``kit run --resume RUN_DIR --chunk i`` on its node: the same run
loop, backend and host collectors as on one host, writing its trial files
atomically into the run directory on the shared file system. A block never
spans two nodes, so the frameworks of a block are always compared on the same
machine (a node is a blocking factor), and ``--exclusive`` keeps other jobs
off the node while it measures.

The job script is written into the run directory (``slurm/job.sh``) so users
see exactly what was submitted; every submission is appended to
``slurm/submissions.jsonl``. State comes from ``squeue`` (live), ``sacct``
(accounting) or ``scontrol show job`` (recently finished), in that order.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

from kit.errors import ExecutorError, PlanError, StoreError
from kit.executors.base import Executor, ExecutorProbe, Say
from kit.plan import Plan
from kit.spec import Slurm
from kit.store import RunDir

SLURM_DIR = "slurm"
SUBMISSIONS = "submissions.jsonl"
ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED", "STAGE_OUT"}
KIT_ROOT = Path(__file__).resolve().parents[2]


class SlurmOptionsJson(TypedDict):
    """:class:`SlurmOptions` as the manifest's executor record and each submission keep it."""

    partition: str
    account: str
    gpus_per_trial: int
    time_limit: str
    blocks_per_job: int
    exclusive: bool
    sbatch_options: list[str]
    python: str


class SubmissionJson(TypedDict):
    """One line of slurm/submissions.jsonl (:func:`submit`); a reader checks only the keys it uses."""

    array_job_id: str
    chunks: list[int]
    t: NotRequired[float]
    options: NotRequired[SlurmOptionsJson]
    backend: NotRequired[str]


@dataclass(frozen=True)
class SlurmOptions:
    """sbatch settings; from the spec's [slurm] table, overridden by the command line."""

    partition: str = ""
    account: str = ""
    gpus_per_trial: int = 0
    time_limit: str = "02:00:00"
    blocks_per_job: int = 1
    exclusive: bool = True
    sbatch_options: tuple[str, ...] = ()
    python: str = field(default_factory=lambda: sys.executable)

    def as_dict(self) -> SlurmOptionsJson:
        return {"partition": self.partition, "account": self.account, "gpus_per_trial": self.gpus_per_trial,
                "time_limit": self.time_limit, "blocks_per_job": self.blocks_per_job, "exclusive": self.exclusive,
                "sbatch_options": list(self.sbatch_options), "python": self.python}


def chunks_of(plan: Plan, blocks_per_job: int) -> list[list[int]]:
    """Consecutive blocks in schedule order, ``blocks_per_job`` per chunk."""
    if blocks_per_job < 1:
        raise ExecutorError("blocks_per_job must be >= 1", where="slurm.blocks_per_job", fix="set it to 1 or more")
    blocks: list[int] = []
    for t in plan.trials:
        if t.block not in blocks:
            blocks.append(t.block)
    return [blocks[i:i + blocks_per_job] for i in range(0, len(blocks), blocks_per_job)]


# What an #SBATCH line may carry: a value read from a manifest (a resumed run may be someone else's) must not be
# able to end the line and add commands to the job script.
_SBATCH_VALUE = re.compile(r"[A-Za-z0-9_.:@%+=,/|&!*\[\]-]{0,200}")  # no whitespace, quotes, $, ;, newline
_SBATCH_OPTION = re.compile(r"--[a-z][a-z-]*(=[A-Za-z0-9_.:@%+=,/|&!*\[\]-]{0,200})?")
# sbatch options a resumed run passes on from its manifest: placement and accounting only. Options that change the
# job's environment, files or user (--export, --chdir, --get-user-env, --uid, --container, ...) could make the jobs
# run code the run directory chose; the user gives those on the command line of a new run.
RESUMABLE_SBATCH = frozenset({
    "--qos", "--constraint", "--mem", "--mem-per-cpu", "--mem-per-gpu", "--cpus-per-task", "--cpus-per-gpu",
    "--nodelist", "--exclude", "--reservation", "--comment", "--mail-type", "--gres", "--gpus", "--gpus-per-node",
    "--gpus-per-task", "--nice", "--clusters", "--licenses", "--hint", "--threads-per-core", "--tmp", "--wckey"})


def _line_safe(value: str, what: str, rx: re.Pattern[str] = _SBATCH_VALUE) -> str:
    if not isinstance(value, str) or not rx.fullmatch(value):
        raise ExecutorError(f"{what} {value!r} is not a value an sbatch script line can hold safely",
                            where="executor slurm", fix="use letters, digits and . : @ % + = , / - only "
                            "(sbatch options as --name=value)")
    return value


def job_script(run_dir: Path, opts: SlurmOptions, backend: str, experiment: str, study_digest: str | None = None
               ) -> str:
    """The sbatch script of a run (one array task per chunk). Every value on an #SBATCH line is checked
    (:func:`_line_safe`): the options of a resumed run come from its manifest. ``study_digest``: the digest of
    the run's study copy as the submitting kit read it after checking it (kit.run_code): each job runs that
    code and nothing else, whatever the allow-list on its node says."""
    for what, value in (("experiment", experiment), ("time limit", opts.time_limit), ("partition", opts.partition),
                        ("account", opts.account)):
        _line_safe(value, what)
    for o in opts.sbatch_options:
        _line_safe(o, "sbatch option", _SBATCH_OPTION)
    if not isinstance(opts.gpus_per_trial, int) or isinstance(opts.gpus_per_trial, bool) or opts.gpus_per_trial < 0:
        raise ExecutorError(f"gpus per trial {opts.gpus_per_trial!r} is not a count", where="executor slurm",
                            fix="an integer >= 0")
    logs = run_dir / SLURM_DIR / "logs"
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name=kit-{experiment}",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks=1",
        f"#SBATCH --time={opts.time_limit}",
        f"#SBATCH --output={logs}/%A_%a.out",
        # SIGTERM to the batch step a minute before the time limit: the run loop stops the trial in
        # flight cleanly and records the interruption; finished trials are already on disk.
        "#SBATCH --signal=B:TERM@60",
    ]
    if opts.exclusive:
        lines.append("#SBATCH --exclusive")
    if opts.partition:
        lines.append(f"#SBATCH --partition={opts.partition}")
    if opts.account:
        lines.append(f"#SBATCH --account={opts.account}")
    if opts.gpus_per_trial > 0:
        lines.append(f"#SBATCH --gres=gpu:{opts.gpus_per_trial}")
    lines += [f"#SBATCH {o}" for o in opts.sbatch_options]
    cmd = [opts.python, "-m", "kit", "run", "--resume", str(run_dir), "--chunk", '"$SLURM_ARRAY_TASK_ID"',
           "--backend", backend]
    if study_digest is not None:
        if not re.fullmatch(r"[0-9a-f]{64}", study_digest):
            raise ExecutorError("the study digest is not a SHA-256 digest", where="executor slurm",
                                fix="a kit bug: report it")
        cmd += ["--study-digest", study_digest]
    lines += [
        "set -euo pipefail",
        f"cd {shlex.quote(str(KIT_ROOT))}",
        f'export PYTHONPATH={shlex.quote(str(KIT_ROOT))}"${{PYTHONPATH:+:$PYTHONPATH}}"',
        "# exec: the kit process itself receives Slurm's signals",
        "exec " + " ".join(c if c.startswith('"') else shlex.quote(c) for c in cmd),
        "",
    ]
    return "\n".join(lines)


def _run(cmd: Sequence[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise ExecutorError(f"{cmd[0]} not found", where="executor slurm",
                            fix="run on a Slurm login node (the Slurm client tools must be on PATH)") from None
    except subprocess.TimeoutExpired:
        raise ExecutorError(f"{' '.join(cmd)} did not answer in {timeout:g} s", where="executor slurm",
                            fix="check that slurmctld is up (`sinfo`)") from None


def probe() -> tuple[bool, str]:
    """Can jobs be submitted from here? (sinfo answers)."""
    if shutil.which("sbatch") is None:
        return False, "sbatch not found"
    res = _run(["sinfo", "-h", "-o", "%P %a %D %t"], timeout=20)
    if res.returncode != 0:
        return False, (res.stderr.strip().splitlines() or ["sinfo failed"])[-1]
    return True, res.stdout.strip().replace("\n", "; ")


def submit(run_dir: Path, chunk_ids: Sequence[int], opts: SlurmOptions, backend: str, experiment: str,
           study_digest: str | None = None) -> str:
    """Submit the chunks as one job array; returns the array job id."""
    ok, detail = probe()
    if not ok:
        raise ExecutorError(f"Slurm is not reachable: {detail}", where="executor slurm",
                            fix="start Slurm or submit from a login node; `sinfo` must answer")
    from kit.safeio import open_append, real_dir
    from kit.store import atomic_write_bytes

    sdir = real_dir(run_dir / SLURM_DIR, create=True, what="slurm/ in the run directory")  # never a planted link
    real_dir(sdir / "logs", create=True, what="slurm/logs/ in the run directory")
    script = sdir / "job.sh"
    # the digest the caller checked (kit.run_code), never one re-read from the copy as it may be by now
    atomic_write_bytes(script, job_script(run_dir, opts, backend, experiment, study_digest).encode())  # no link
    array = ",".join(str(i) for i in sorted(chunk_ids))
    res = _run(["sbatch", "--parsable", f"--array={array}", str(script)])
    if res.returncode != 0:
        raise ExecutorError(f"sbatch refused the job: {res.stderr.strip()}", where=str(script),
                            fix="check partition, account, time limit and --gres against `sinfo` and your allocation")
    job_id = res.stdout.strip().split(";")[0]
    fd = open_append(sdir / SUBMISSIONS, "slurm/submissions.jsonl")
    try:
        os.write(fd, (json.dumps({"t": time.time(), "array_job_id": job_id, "chunks": sorted(chunk_ids),
                                  "options": opts.as_dict(), "backend": backend}) + "\n").encode())
    finally:
        os.close(fd)
    return job_id


MAX_SUBMISSIONS_BYTES = 16 << 20


def submissions(run_dir: Path) -> list[SubmissionJson]:
    """The run's Slurm submissions (read like any file of a run: no link, no FIFO, capped; a torn or foreign line
    is skipped)."""
    from kit.safeio import read_capped

    data = read_capped(run_dir / SLURM_DIR / SUBMISSIONS, MAX_SUBMISSIONS_BYTES, "slurm/submissions.jsonl",
                       missing_ok=True)
    out: list[SubmissionJson] = []
    for line in (data or b"").decode("utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(rec, dict) and isinstance(rec.get("array_job_id"), str) and isinstance(rec.get("chunks"), list):
            out.append(cast(SubmissionJson, rec))
    return out


def latest_task_ids(run_dir: Path) -> dict[int, str]:
    """Chunk -> the Slurm id ("<array>_<task>") of its latest submission."""
    out: dict[int, str] = {}
    for sub in submissions(run_dir):
        for c in sub["chunks"]:
            out[int(c)] = f"{sub['array_job_id']}_{c}"
    return out


@dataclass(frozen=True)
class JobState:
    state: str  # PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, PREEMPTED, NODE_FAIL, UNKNOWN...
    reason: str = ""
    node: str = ""
    exit_code: str = ""

    @property
    def active(self) -> bool:
        return self.state in ACTIVE


_SCONTROL_FIELD = re.compile(r"(\w+)=(\S*)")


def expand_tasks(spec: str) -> list[int]:
    """Slurm array task ranges ("3", "1-4", "1,3-5", "0-9%2") -> task ids."""
    out: list[int] = []
    for part in spec.split("%")[0].split(","):
        if "-" in part:
            a, b = part.split("-", 1)
            if a.isdigit() and b.isdigit():
                out += range(int(a), int(b) + 1)
        elif part.isdigit():
            out.append(int(part))
    return out


def parse_scontrol(text: str) -> dict[str, JobState]:
    """``scontrol show job -o`` lines -> {"<array>_<task>" or job id: state}.

    Pending tasks of an array are one record with a range ("1-2"): expanded.
    """
    out: dict[str, JobState] = {}
    for line in text.splitlines():
        f = dict(_SCONTROL_FIELD.findall(line))
        if "JobId" not in f:
            continue
        st = JobState(f.get("JobState", "UNKNOWN"), f.get("Reason", ""), f.get("NodeList", "") or "",
                      f.get("ExitCode", ""))
        tasks = expand_tasks(f.get("ArrayTaskId", "")) if f.get("ArrayJobId") else []
        if tasks:
            out.update({f"{f['ArrayJobId']}_{t}": st for t in tasks})
        else:
            out[f["JobId"]] = st
    return out


def parse_sacct(text: str) -> dict[str, JobState]:
    """``sacct -X -P -n -o JobID,State,NodeList,ExitCode,Reason`` -> states (``CANCELLED by 0`` -> CANCELLED)."""
    out: dict[str, JobState] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 4:
            continue
        job, state, node, code = parts[:4]
        reason = parts[4] if len(parts) > 4 else ""
        out[job] = JobState(state.split()[0] if state else "UNKNOWN", reason, node, code)
    return out


def job_states(ids: Sequence[str]) -> dict[str, JobState]:
    """States of array tasks ("<array>_<task>"), from scontrol, then sacct for older jobs."""
    arrays = sorted({i.split("_")[0] for i in ids})
    states: dict[str, JobState] = {}
    for array in arrays:
        res = _run(["scontrol", "show", "job", "-o", array], timeout=30)
        if res.returncode == 0:
            states.update(parse_scontrol(res.stdout))
    missing = [i for i in ids if i not in states]
    if missing and shutil.which("sacct"):
        res = _run(["sacct", "-X", "-P", "-n", "-o", "JobID,State,NodeList,ExitCode,Reason", "-j",
                    ",".join(sorted({i.split("_")[0] for i in missing}))], timeout=30)
        if res.returncode == 0:
            states.update({k: v for k, v in parse_sacct(res.stdout).items() if k in missing})
    return {i: states.get(i, JobState("UNKNOWN", "not known to squeue/scontrol/sacct")) for i in ids}


def cancel(ids: Sequence[str]) -> None:
    if ids:
        _run(["scancel", *ids])


def wait(run_dir: Path, ids: Sequence[str], *, poll_s: float = 2.0, timeout_s: float | None = None,
         on_poll: Callable[[dict[str, JobState]], None] | None = None) -> dict[str, JobState]:
    """Poll until no task is pending or running (or the timeout)."""
    t0 = time.monotonic()
    while True:
        states = job_states(ids)
        if on_poll:
            on_poll(states)
        settling = time.monotonic() - t0 < 15 and any(s.state == "UNKNOWN" for s in states.values())
        if not settling and not any(s.active for s in states.values()):
            return states
        if timeout_s is not None and time.monotonic() - t0 > timeout_s:
            raise ExecutorError(f"jobs still active after {timeout_s:g} s", where=str(run_dir),
                                fix=f"check `kit status {run_dir}`; the jobs keep running")
        time.sleep(poll_s)


class SlurmExecutor(Executor):
    """Chunks of whole blocks as the tasks of one sbatch array; each task runs ``kit run --resume RUN --chunk I``."""

    name = "slurm"
    hands_off = True

    def __init__(self, options: SlurmOptions, backend: str, chunks: list[list[int]] | None = None) -> None:
        self.options = options
        self.backend = backend
        self.chunks = chunks

    @classmethod
    def configured(cls, spec_slurm: Slurm, overrides: dict[str, Any], backend: str) -> SlurmExecutor:
        """The spec's [slurm] table, with the command line's values where it gave one."""
        base = asdict(spec_slurm)
        base.update({k: v for k, v in overrides.items() if v is not None})
        base["sbatch_options"] = tuple(base.get("sbatch_options") or ())
        return cls(SlurmOptions(**base), backend)

    @classmethod
    def from_record(cls, record: dict[str, Any], where: str) -> SlurmExecutor:
        try:
            raw = dict(record["options"])
            raw["sbatch_options"] = tuple(str(o) for o in raw.get("sbatch_options") or ())
            # The jobs run this kit's interpreter, never one a manifest names (provenance only: a resumed run
            # directory may be someone else's).
            raw["python"] = sys.executable
            foreign = [o for o in raw["sbatch_options"] if o.split("=", 1)[0] not in RESUMABLE_SBATCH]
            if foreign:
                raise ValueError(f"sbatch option(s) {', '.join(foreign)[:200]} are not passed on from a manifest "
                                 f"(only {', '.join(sorted(RESUMABLE_SBATCH))}); start a new run with them on its "
                                 "command line")
            chunks = [[b for b in c] for c in record["chunks"]]
            if not all(isinstance(b, int) and not isinstance(b, bool) for c in chunks for b in c):
                raise ValueError("chunks must be lists of block numbers (integers)")
            return cls(SlurmOptions(**raw), str(record.get("backend", "local")), chunks)
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise StoreError(f"the Slurm executor record cannot be read ({type(exc).__name__}: {exc})",
                             where=f"{where}: executor", fix="the manifest's executor table was edited or damaged") from None

    def available(self) -> ExecutorProbe:
        ok, detail = probe()
        return ExecutorProbe(ok, detail, "" if ok else "start Slurm or submit from a login node; `sinfo` must answer")

    def record(self, plan: Plan) -> dict[str, Any]:
        self.chunks = chunks_of(plan, self.options.blocks_per_job)
        return {"name": self.name, "options": self.options.as_dict(), "backend": self.backend, "chunks": self.chunks}

    def _submit(self, rd: RunDir, chunk_ids: list[int], say: Say, study_digest: str | None) -> str:
        job = submit(rd.path, chunk_ids, self.options, self.backend, rd.manifest().experiment, study_digest)
        rd.log_event("submitted", array_job_id=job, chunks=chunk_ids)
        rd.update_manifest(status="submitted")
        say(f"submitted Slurm job array {job} ({len(chunk_ids)} task(s)); follow with: kit status {rd.path}")
        return job

    def submit_all(self, rd: RunDir, say: Say, study_digest: str | None = None) -> str:
        return self._submit(rd, list(range(len(self.chunks or []))), say, study_digest)

    def resubmit(self, rd: RunDir, plan: Plan, say: Say, study_digest: str | None = None) -> None:
        done = rd.finished_ids()
        chunks = self.chunks or []
        missing = [i for i, c in enumerate(chunks) if any(t.trial_id not in done for t in plan.trials if t.block in set(c))]
        latest = latest_task_ids(rd.path)
        states = job_states([latest[i] for i in missing if i in latest]) if missing else {}
        busy = [i for i in missing if i in latest and states[latest[i]].active]
        todo = [i for i in missing if i not in busy]
        if busy:
            say(f"chunks {busy} still have a job pending or running; not resubmitted")
        if not todo:
            say("nothing to resubmit" if not busy else "waiting for the running jobs")
            return
        rd.log_event("resume", finished=len(done), resubmitted_chunks=todo)
        self._submit(rd, todo, say, study_digest)

    def chunk_blocks(self, chunk: int, where: str) -> frozenset[int]:
        chunks = self.chunks or []
        if not 0 <= chunk < len(chunks):
            raise PlanError(f"chunk {chunk} does not exist (the run has {len(chunks)})", where=where,
                            fix="give a chunk index from manifest.executor.chunks")
        return frozenset(chunks[chunk])

    def wait(self, rd: RunDir, on_poll: Callable[[int], None]) -> None:
        def poll(states: dict[str, JobState]) -> None:
            on_poll(sum(s.active for s in states.values()))

        wait(rd.path, list(latest_task_ids(rd.path).values()), on_poll=poll)
