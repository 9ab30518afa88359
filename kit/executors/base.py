"""Where a run's trials run: this process, or jobs of a batch system that each run a chunk of the plan.

The runner (kit.run) runs the trials it is given, under the run's lock, the same way wherever it is; it
never asks which executor it has. An executor decides only whether the trials run here (``hands_off`` False)
or in jobs it submits (True), what the manifest records about that (``record``), which blocks a job's chunk
holds (``chunk_blocks``), how missing chunks are submitted again (``resubmit``) and how to wait for jobs.
Like the backends and collectors, executors are small classes with a ``name`` and an ``available()`` probe
in a registry (``EXECUTORS``); ``from_record`` rebuilds one from what a manifest recorded.

Why not submitit (removed from the dependencies): it pickles a Python callable and its arguments into a job
folder and unpickles them on the node. A run directory is data other people hand us, and unpickling is
running code; the job folder would also duplicate the state the run directory already holds. The Slurm
executor instead submits one sbatch array whose tasks run the kit's own command, ``kit run --resume RUN
--chunk I``, reading everything from the run directory.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from kit.errors import KitError, PlanError
from kit.plan import Plan
from kit.store import RunDir

Say = Callable[[str], None]


@dataclass(frozen=True)
class ExecutorProbe:
    ok: bool
    detail: str
    fix: str = ""


class Executor:
    """Base: the trials run in this process (see the module docstring)."""

    name: ClassVar[str] = "local"
    hands_off: ClassVar[bool] = False

    def available(self) -> ExecutorProbe:
        return ExecutorProbe(True, "this process")

    def record(self, plan: Plan) -> dict[str, Any]:
        """What the manifest keeps under ``executor``."""
        return {"name": self.name}

    def submit_all(self, rd: RunDir, say: Say, study_digest: str | None = None) -> str:
        """Hand every chunk of a new run to the batch system (only where ``hands_off``). ``study_digest``: the
        digest of the study code the caller checked (kit.run_code); each job runs that code or nothing."""
        raise KitError(f"the {self.name} executor runs trials in this process; it submits nothing",
                       where="executor", fix="run the trials with kit.run")

    def resubmit(self, rd: RunDir, plan: Plan, say: Say, study_digest: str | None = None) -> None:
        """Submit again the chunks that miss trials and have no job pending or running."""
        raise KitError(f"the {self.name} executor has no jobs to resubmit", where="executor",
                       fix=f"kit run --resume {rd.path} runs the missing trials here")

    def chunk_blocks(self, chunk: int, where: str) -> frozenset[int]:
        """The plan blocks of chunk ``chunk`` (a job's share of the run)."""
        raise PlanError(f"a run of the {self.name} executor has no chunks", where=where,
                        fix="--chunk is for cluster jobs of a run submitted with --executor slurm")

    def wait(self, rd: RunDir, on_poll: Callable[[int], None]) -> None:
        """Block until no job of the run is pending or running (nothing to wait for here)."""


def job_identity() -> dict[str, Any]:
    """The batch-system job this process runs in, if any (Slurm's variables), for the run's event log."""
    keys = {"SLURM_JOB_ID": "job_id", "SLURM_ARRAY_JOB_ID": "array_job_id", "SLURM_ARRAY_TASK_ID": "task_id",
            "SLURMD_NODENAME": "node", "SLURM_JOB_PARTITION": "partition"}
    return {v: os.environ[k] for k, v in keys.items() if k in os.environ}
