"""Energy net of idle: the idle baseline's power per domain, and a phase's energy less idle power × its duration.

A counter's difference over a phase (:func:`kit.analysis.telemetry.phase_energy`) is
gross: a GPU draws tens of watts and a CPU package several doing nothing, and a
framework that merely takes longer is charged that idle draw for the extra
seconds. The kit records idle telemetry at run start (``telemetry.baseline_s``,
``samples/_baseline*.parquet``, before any trial; one file per host and chunk
in a shared run). From it, per energy domain (``gpu<i>``, ``rapl:<zone>``, the
names ``phase_energy`` uses), the idle power: the counter's increase over the
baseline divided by its span, or, for a GPU without the energy counter, the
mean of its power readings. Net energy = gross − idle power × phase duration.

What net is not: it is net of *idle*, not of other processes. Another tenant's
load during the phase stays in it (the disturbance measurement, kit.disturbance,
says when there was any). The idle power is the host's at run start: the
cool-down before each trial brings temperatures back near it, but a GPU that
idles warmer draws a few watts more. Its own error (the baseline's boundary
sampling over ``baseline_s``) is small against the phase's boundary bound and
is not added to the value's bound (``bound`` in the value table), which is the
gross value's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from kit.stats.common import AsDict as _AsDict

if TYPE_CHECKING:
    from kit.store import RunDir

METHOD_COUNTER = "counter increase / baseline span"
METHOD_POWER = "mean of power readings"


@dataclass(frozen=True)
class IdleDomain(_AsDict):
    """Idle power of one energy domain over the baseline."""

    domain: str  # gpu<i> | rapl:<zone>
    watts: float
    span_s: float
    n: int
    method: str


IdlePower = Mapping[str, IdleDomain]  # domain -> its idle power
IdleByHost = Mapping[str | None, IdlePower]  # host name (None: the run's single baseline) -> domains


def _series(samples: pd.DataFrame, source: str, device: str, metric: str) -> tuple[np.ndarray, np.ndarray]:
    rows = samples[(samples["source"] == source) & (samples["device"].astype(str) == device)
                   & (samples["metric"] == metric)]
    rows = rows[["t", "value"]].apply(pd.to_numeric, errors="coerce").dropna().sort_values("t", kind="stable")
    return rows["t"].to_numpy(float), rows["value"].to_numpy(float)


def _counter_rate(t: np.ndarray, v: np.ndarray, domain: str) -> IdleDomain | None:
    if len(t) < 2 or t[-1] <= t[0] or np.any(np.diff(v) < 0):
        return None  # one reading, or a counter that went backwards (reset): no rate
    return IdleDomain(domain, float((v[-1] - v[0]) / (t[-1] - t[0])), float(t[-1] - t[0]), len(t),
                      METHOD_COUNTER)


def idle_power(samples: pd.DataFrame | None) -> dict[str, IdleDomain]:
    """Idle power per energy domain from one baseline's samples (empty where nothing usable was recorded)."""
    out: dict[str, IdleDomain] = {}
    if samples is None or samples.empty or not {"t", "source", "device", "metric", "value"} <= set(samples.columns):
        return out
    for dev in sorted(samples.loc[samples["source"] == "nvml", "device"].astype(str).unique()):
        domain = f"gpu{dev}"
        rate = _counter_rate(*_series(samples, "nvml", dev, "energy_j"), domain)
        if rate is None:
            t, p = _series(samples, "nvml", dev, "power_w")
            if len(t):
                rate = IdleDomain(domain, float(np.mean(p)), float(t[-1] - t[0]), len(t), METHOD_POWER)
        if rate is not None:
            out[domain] = rate
    rapl = samples[(samples["source"] == "rapl") & (samples["metric"] == "energy_j")]
    for dev in sorted(rapl["device"].astype(str).unique()):
        rate = _counter_rate(*_series(samples, "rapl", dev, "energy_j"), f"rapl:{dev}")
        if rate is not None:
            out[rate.domain] = rate
    return out


_SHARED = re.compile(r"^_baseline-(?P<host>.+)-chunk\d+$")


def baseline_host(name: str) -> str | None:
    """The host a baseline file was recorded on: ``_baseline-<host>-chunk<k>`` in a shared run, else None."""
    m = _SHARED.match(name)
    return m.group("host") if m else None


def load_idle_power(rd: RunDir) -> dict[str | None, dict[str, IdleDomain]]:
    """Idle power per host from the run's baseline files (``{}`` when none was recorded: no net energy)."""
    from kit.store import BASELINE_ID, SAMPLES

    sdir = rd.path / SAMPLES
    if not sdir.is_dir() or sdir.is_symlink():
        return {}
    out: dict[str | None, dict[str, IdleDomain]] = {}
    for path in sorted(sdir.glob(f"{BASELINE_ID}*.parquet")):
        domains = idle_power(rd.read_samples(path.stem))
        if domains:
            out.setdefault(baseline_host(path.stem), {}).update(domains)
    return out


def idle_for(record: Mapping[str, Any], idle: IdleByHost | None) -> IdlePower | None:
    """The idle power that applies to a trial: its own host's baseline, else the run's single one."""
    if not idle:
        return None
    host = record.get("host")
    if isinstance(host, str) and host in idle:
        return idle[host]
    return idle.get(None)


def net_energy(domains: Sequence[str], gross: float, duration_s: float, idle: IdlePower | None) -> float | None:
    """Gross joules of ``domains`` over a phase less their idle power × ``duration_s``; None where any lacks one.

    Never a partial subtraction: a trial on two GPUs whose baseline saw one gets no net figure rather
    than one GPU's idle taken off two GPUs' energy.
    """
    if idle is None or not domains or not math.isfinite(gross) or duration_s <= 0:
        return None
    if any(d not in idle for d in domains):
        return None
    return gross - sum(idle[d].watts for d in domains) * duration_s
