"""The host around the trials: the idle baseline, the cool-down and the room before each trial, the samplers.

What a trial record says about the host (``cooldown``, ``ambient``, ``collectors``) is read here, typed as the
trial file's tables (kit.records); the baseline's figures go to the manifest (or, in a cluster job, to the event log).
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import time
from collections.abc import Iterator
from typing import TypedDict, cast

from kit import disturbance
from kit.collectors.base import Collector, Row, TrialTarget
from kit.collectors.quiet import HOST, LoadReading, LoadScope, foreign_cpu, read_load
from kit.provenance import host_provenance
from kit.records import AmbientJson, CollectorJson, CooldownJson
from kit.run.context import RunContext, load_scope, quiet_wait, rerun_ledger
from kit.run.prepare import make_collectors
from kit.store import BASELINE_ID, atomic_write_json


class BaselineLoad(TypedDict, total=False):
    """``baseline.load`` of the manifest: other work on the CPUs during the idle baseline, and the choice made."""

    foreign_cpu: float | None
    cpus: int  # how many CPUs the figure covers (the host's; a pinned run's trial CPUs and their siblings)
    on_cpus: list[int]  # those CPUs by number ([]: the whole host)
    limit_cpu: float
    busy: bool
    choice: str  # go_on | wait_for_quiet | quiet
    wait: dict[str, float | bool | int | None]  # the wait for a quiet window (kit.collectors.quiet.QuietWait)


@contextlib.contextmanager
def sampling(collectors: list[Collector]) -> Iterator[list[Collector]]:
    with contextlib.ExitStack() as stack:
        for c in collectors:
            stack.enter_context(c)
        yield collectors


def drain(collectors: list[Collector]) -> tuple[list[Row], list[CollectorJson]]:
    """Every collector's rows, and what each says about itself (the trial file's ``collectors``)."""
    rows: list[Row] = []
    reports: list[CollectorJson] = []
    for c in collectors:
        got = c.take_rows()
        rows.extend(got)
        reports.append(cast(CollectorJson, c.report(len(got)).as_dict()))
    return rows, reports


def write_node(ctx: RunContext) -> None:
    """Hardware provenance of this node, once per node (a cluster run spans several)."""
    host = socket.gethostname()
    path = ctx.rd.subdir("nodes") / f"{host}.json"
    if not os.path.lexists(path):
        atomic_write_json(path, {"host": host, "t": time.time(), **host_provenance()})


def baseline(ctx: RunContext) -> None:
    """Idle telemetry at run start: the reference for cool-down and idle load."""
    secs = ctx.spec.telemetry.baseline_s
    name = BASELINE_ID if not ctx.shared else f"{BASELINE_ID}-{socket.gethostname()}-chunk{ctx.opts.chunk}"
    if secs <= 0 or (not ctx.shared and ctx.rd.samples_path(name).exists()):
        recorded = ctx.rd.manifest().baseline
        ctx.baseline = recorded.get("temps_c", {})
        freq = recorded.get("freq_mhz")
        ctx.idle_freq_mhz = float(freq) if isinstance(freq, (int, float)) and not isinstance(freq, bool) else None
        if ctx.opts.wait_for_quiet_s and ctx.spec.design.disturbance_cpu > 0:  # a resume: the baseline is recorded
            quiet_wait(ctx, "resume")
        return
    ctx.events.message(f"recording {secs:g} s of idle baseline telemetry")
    # every GPU the trials may get (all NVML sees when none is allowed): the cool-down's reference per GPU
    devices = ctx.prepared.devices
    allowed = [g.index for g in devices.allowed] if devices.allowed else None
    target = TrialTarget(gpu_indices=allowed)
    collectors = make_collectors(ctx.prepared.collectors, target)
    t0 = time.time()
    scope = load_scope(ctx)
    with sampling(collectors):
        load0 = read_load(scope=scope)
        time.sleep(secs)
        load1 = read_load(scope=scope)
    rows, reports = drain(collectors)
    ctx.rd.write_samples(name, rows)
    temps = idle_temps(rows)
    ctx.baseline = temps
    freqs = [r.value for r in rows if r.source == "cpu" and r.device == "total" and r.metric == "freq_mhz"]
    ctx.idle_freq_mhz = statistics.median(freqs) if freqs else None
    load = baseline_load(ctx, load0, load1, scope)
    info = {"start": t0, "duration_s": secs, "temps_c": temps, "collectors": reports, "samples": name,
            "freq_mhz": ctx.idle_freq_mhz,
            "gpu_indices": allowed if allowed is not None else "all", "load": load}
    if ctx.shared:
        ctx.rd.log_event("baseline", host=socket.gethostname(), chunk=ctx.opts.chunk, **info)
    else:
        ctx.rd.update_manifest(baseline=info)
    if load["choice"] == "wait_for_quiet":
        load["wait"] = quiet_wait(ctx, "baseline").as_dict()
        if not ctx.shared:
            ctx.rd.update_manifest(baseline=info)


def baseline_load(ctx: RunContext, before: LoadReading, after: LoadReading, scope: LoadScope = HOST) -> BaselineLoad:
    """Other work on the CPUs during the idle baseline: the figure, and (when busy) one line with its cost and the
    choice, logged as ``baseline_load`` (foreign_cpu, cpus, on_cpus, limit_cpu, busy, choice: go_on |
    wait_for_quiet | quiet). A pinned run counts it on its trials' CPUs (``scope``), where its phases are judged."""
    limit = ctx.spec.design.disturbance_cpu
    figure = foreign_cpu(before, after)
    cpus = len(scope.cpus) or os.cpu_count() or 1
    busy = figure is not None and limit > 0 and figure > limit
    choice = ("wait_for_quiet" if ctx.opts.wait_for_quiet_s else "go_on") if busy else "quiet"
    load = BaselineLoad(foreign_cpu=None if figure is None else round(figure, 3), cpus=cpus,
                        on_cpus=list(scope.cpus), limit_cpu=limit, busy=busy, choice=choice)
    ctx.rd.log_event("baseline_load", **load, wait_for_quiet_s=ctx.opts.wait_for_quiet_s)
    if busy and figure is not None:
        budget = ctx.reruns.budget if ctx.reruns is not None else rerun_ledger(ctx).budget
        ctx.events.message(disturbance.busy_baseline_text(figure, cpus, limit, budget, ctx.opts.wait_for_quiet_s,
                                                          f"continue with: kit run --resume {ctx.rd.path}",
                                                          scope.where))
    return load


def idle_temps(rows: list[Row]) -> dict[str, float]:
    """Median idle temperature per sensor the cool-down waits on (cpu, gpuN)."""
    by: dict[str, list[float]] = {}
    for r in rows:
        if r.source == "hwmon" and r.metric == "cpu_temp_c":
            by.setdefault("cpu", []).append(r.value)
        elif r.source == "nvml" and r.metric == "temp_c":
            by.setdefault(f"gpu{r.device}", []).append(r.value)
    return {k: statistics.median(v) for k, v in by.items() if v}


def cooldown_sensors(gpu_indices: list[int] | None) -> list[str] | None:
    """The sensors a trial's cool-down waits on: the CPU and the trial's own GPUs (None: every sensor)."""
    if gpu_indices is None:
        return None
    return ["cpu", *(f"gpu{i}" for i in gpu_indices)]


def cooldown(ctx: RunContext, gpu_indices: list[int] | None = None) -> CooldownJson:
    """Wait (bounded) until the CPU and the trial's GPUs are back near their idle baseline.

    A hot GPU the trial does not use (another user's job) is not waited for.
    Also records the temperatures the trial starts at, which the validity
    rules compare between frameworks.
    """
    tel = ctx.spec.telemetry
    if not ctx.baseline:
        return CooldownJson(waited_s=0.0, reached=True, note="no temperature sensor at baseline")
    from kit.collectors.thermal import TemperatureReader, wait_for_cooldown

    if ctx.temp_reader is None:
        ctx.temp_reader = TemperatureReader()
    return cast(CooldownJson, wait_for_cooldown(ctx.baseline, tel.cooldown_band_c, tel.cooldown_max_s,
                                                read=ctx.temp_reader, sensors=cooldown_sensors(gpu_indices)).as_dict())


def ambient(ctx: RunContext) -> AmbientJson:
    """The room's temperature as the trial starts (a host ambient sensor, and the spec's stated value)."""
    from kit.collectors.ambient import AmbientReader

    tel = ctx.spec.telemetry
    if ctx.ambient_reader is None:
        ctx.ambient_reader = AmbientReader(tel.ambient_sensor, tel.ambient_c)
    return cast(AmbientJson, dict(ctx.ambient_reader.read().as_dict()))
