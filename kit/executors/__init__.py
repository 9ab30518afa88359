"""Executors: where a run's trials run (kit.executors.base). The registry and the two ways to get one."""

from __future__ import annotations

from typing import Any

from kit.errors import KitError, StoreError
from kit.executors.base import Executor, ExecutorProbe, job_identity
from kit.executors.slurm import SlurmExecutor
from kit.manifest import ExecutorRecord
from kit.spec import Slurm

EXECUTORS: dict[str, type[Executor]] = {"local": Executor, "slurm": SlurmExecutor}

__all__ = ["EXECUTORS", "Executor", "ExecutorProbe", "from_record", "job_identity", "make_executor"]


def make_executor(name: str, spec_slurm: Slurm, overrides: dict[str, Any], backend: str) -> Executor:
    """The executor ``--executor NAME`` asks for, with the spec's [slurm] table and the command line's overrides."""
    if name == "local":
        return Executor()
    if name == "slurm":
        return SlurmExecutor.configured(spec_slurm, overrides, backend)
    raise KitError(f"unknown executor {name!r}", where="--executor", fix=f"use one of: {', '.join(EXECUTORS)}")


def from_record(record: ExecutorRecord, where: str) -> Executor:
    """The executor a manifest recorded (``Manifest.executor``; a run without one ran locally)."""
    name = record.name
    if name == "local":
        return Executor()
    if name == "slurm":
        return SlurmExecutor.from_record(record.as_dict(), where)
    raise StoreError(f"executor {name!r} is not one this kit knows", where=f"{where}: executor",
                     fix=f"the manifest's executor.name must be one of: {', '.join(EXECUTORS)}")
