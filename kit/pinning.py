"""Which CPUs a trial runs on, and which the kit's own collectors use: disjoint sets, recorded.

The collectors wake every telemetry period; on the trial's CPUs they would
preempt it (and a one-thread framework waiting on an OpenMP barrier stalls
for the whole slice). ``[container] cpuset = "auto"`` gives the trial every CPU
the kit may use but the first, and pins the kit process (its sampler threads)
to that one. On a 2-core host that leaves the trial one CPU: right for the
quick profiles (one framework thread), too few for a multi-threaded trial,
which then competes with itself; an explicit ``cpuset`` states any other split.
The framework's thread count is the spec's ``threads`` and is never changed
here: the kit measures what was asked or stops.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from kit.errors import KitError


@dataclass(frozen=True)
class Pinning:
    """The trial's CPUs and the kit's (empty: not pinned), with a sentence on the trade-off."""

    trial_cpus: tuple[int, ...] = ()
    kit_cpus: tuple[int, ...] = ()
    note: str = "not pinned"

    @property
    def active(self) -> bool:
        return bool(self.trial_cpus)

    def env(self) -> dict[str, str]:
        """For the local backend's reaper, which pins itself (and so the harness) before starting it."""
        return {"KIT_TRIAL_CPUS": ",".join(map(str, self.trial_cpus))} if self.trial_cpus else {}

    def cpuset(self) -> str:
        return ",".join(map(str, self.trial_cpus))

    def as_dict(self) -> dict[str, object]:
        return {"trial_cpus": list(self.trial_cpus), "kit_cpus": list(self.kit_cpus), "note": self.note}


def parse_cpuset(text: str) -> tuple[int, ...]:
    """``0-3,8`` -> (0, 1, 2, 3, 8); ValueError when it is not one."""
    out: set[int] = set()
    for part in text.replace(" ", "").split(","):
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValueError(text)
        a, b = int(lo), int(hi) if dash else int(lo)
        if b < a or b > 65535:
            raise ValueError(text)
        out.update(range(a, b + 1))
    return tuple(sorted(out))


def available_cpus() -> tuple[int, ...]:
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return tuple(range(os.cpu_count() or 1))


def resolve(cpuset: str, available: tuple[int, ...] | None = None) -> Pinning:
    """The pinning ``[container] cpuset`` asks for on this host (KitError for CPUs the kit may not use)."""
    cpus = available if available is not None else available_cpus()
    if not cpuset:
        return Pinning()
    if cpuset == "auto":
        if len(cpus) < 2:
            return Pinning(note=f"cpuset = auto: only {len(cpus)} CPU available, trial and collectors share it")
        trial, kit = cpus[1:], cpus[:1]
        note = (f"trial on CPU(s) {','.join(map(str, trial))}, the kit's collectors on CPU {kit[0]}"
                + ("; on this 2-CPU host the trial has one CPU: a multi-threaded framework would compete with "
                   "itself (the quick profiles run one thread)" if len(cpus) == 2 else ""))
        return Pinning(trial, kit, note)
    try:
        trial = parse_cpuset(cpuset)
    except ValueError:
        raise KitError(f"cpuset {cpuset!r} is not a CPU list", where="[container] cpuset",
                       fix="CPU numbers and ranges such as '1-3' or '0,2', or \"auto\"") from None
    missing = sorted(set(trial) - set(cpus))
    if missing:
        raise KitError(f"cpuset {cpuset!r} names CPU(s) {missing} this process may not use "
                       f"(allowed: {','.join(map(str, cpus))})", where="[container] cpuset",
                       fix="choose CPUs from the allowed set, or cpuset = \"auto\"")
    kit = tuple(c for c in cpus if c not in trial)
    note = (f"trial on CPU(s) {cpuset}, the kit's collectors on {','.join(map(str, kit))}" if kit else
            f"trial on CPU(s) {cpuset}; no CPU left for the collectors, which share the trial's")
    return Pinning(trial, kit, note)
