"""A trial on N CPU cores: the process and every thread pinned, framework threads set, both checked (inside the image).

Patel et al. ran CPU inference on one CPU core (their Section IV: "one CPU core"), a Slurm allocation. The
kit reproduces it with ``cpu_cores = N`` (workload key): inside the trial, before the framework starts
its thread pools, every thread of the process is pinned (``os.sched_setaffinity`` per task of
``/proc/self/task``; threads started later inherit the mask) to N CPUs chosen from the ones the trial may
use (the container's cpuset, the kit's ``[container] cpuset``), one per physical core where the host has
SMT; the framework's intra-op threads are set to N and its inter-op threads to 1. After the timed phases
the affinity of every thread and the thread counts the framework reports are read back and compared with
what was asked: a thread that escaped the mask (a library that resets affinity), a thread count the
framework did not take, or a host with fewer CPUs than asked is an error (:class:`CpuPinError`, recorded
by the harness with cause and fix), never a trial measured on something else. What it cannot control
(an SMT sibling busy with other work, turbo clocks) is recorded (``smt_siblings``) and named in the
study's deviations.

Standard library only: the workloads import it in either framework image.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass

from kit.workloads.common import DeviceUnavailable

MAX_CORES = 4096  # the spec's bound on threads; a larger count is no CPU set this code can pin
_SYS_CPU = "/sys/devices/system/cpu"


class CpuPinError(DeviceUnavailable):
    """The trial cannot run on the CPUs and thread counts asked for (never measured on others instead)."""

    def __init__(self, cause: str, fix: str, where: str = "workload.cpu_cores") -> None:
        self.where = where
        super().__init__(f"{where}: {cause}", fix)


@dataclass(frozen=True)
class CpuPin:
    """What a pinned trial asked for and got: the CPUs it may use, the ones chosen, their SMT siblings."""

    cores_asked: int
    cpus_allowed: tuple[int, ...]  # what the kernel let the trial use before pinning (container cpuset)
    cpus_pinned: tuple[int, ...]
    smt_siblings: tuple[tuple[int, ...], ...]  # per pinned CPU: the other hardware threads of its core
    intra_op_threads: int | None = None  # what the framework reports after setting (filled by ``checked``)
    inter_op_threads: int | None = None

    def as_dict(self) -> dict[str, object]:
        d = asdict(self)
        return {k: ([list(s) for s in v] if k == "smt_siblings" else list(v) if isinstance(v, tuple) else v)
                for k, v in d.items()}


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """A kernel CPU list (``0-3,8``; sysfs and /proc/*/status spell them so) as sorted CPU numbers.

    Refuses anything else (ValueError): the input is a file a hostile host could have replaced.
    """
    out: set[int] = set()
    text = text.strip()
    if not text:
        return ()
    if len(text) > 10_000:
        raise ValueError("CPU list too long")
    for part in text.split(","):
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValueError(f"not a CPU list: {text[:80]!r}")
        a, b = int(lo), int(hi) if dash else int(lo)
        if b < a or b > 65535:
            raise ValueError(f"not a CPU list: {text[:80]!r}")
        out.update(range(a, b + 1))
    return tuple(sorted(out))


def sysfs_siblings(cpu: int) -> tuple[int, ...]:
    """The hardware threads sharing ``cpu``'s core (itself included); (cpu,) when sysfs does not say."""
    path = f"{_SYS_CPU}/cpu{int(cpu)}/topology/thread_siblings_list"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return (cpu,)
    try:
        raw = os.read(fd, 4096).decode("ascii", "replace")
    finally:
        os.close(fd)
    try:
        sib = parse_cpu_list(raw)
    except ValueError:
        return (cpu,)
    return sib if cpu in sib else (cpu,)


def choose_cpus(allowed: Iterable[int], n: int, siblings_of: Callable[[int], tuple[int, ...]]) -> tuple[int, ...]:
    """``n`` CPUs of ``allowed``: one per physical core first (lowest numbers), SMT siblings only if cores run out.

    CpuPinError when fewer than ``n`` CPUs are allowed: the trial never runs on fewer cores than asked.
    """
    cpus = sorted(set(allowed))
    if not 1 <= n <= MAX_CORES:
        raise CpuPinError(f"{n} cores asked for: give a count in [1, {MAX_CORES}] (0 leaves the trial unpinned)",
                          "set cpu_cores to the cores the paper's protocol names (Patel et al.: 1)")
    if len(cpus) < n:
        raise CpuPinError(
            f"{n} CPU core(s) asked for, but the trial may use only {len(cpus)} CPU(s) "
            f"({','.join(map(str, cpus)) or 'none'}): the host (or the container's cpuset) has fewer than asked",
            "run on a host with at least that many CPUs, widen [container] cpuset, or lower cpu_cores (and say so "
            "in the study's deviations)")
    first: list[int] = []
    rest: list[int] = []
    seen: set[tuple[int, ...]] = set()
    for c in cpus:
        core = tuple(sorted(siblings_of(c)))
        (rest if core in seen else first).append(c)
        seen.add(core)
    return tuple(sorted((first + rest)[:n]))


def thread_ids(task_dir: str = "/proc/self/task") -> list[int]:
    """The thread ids of this process (a vanished or odd entry is skipped: threads come and go)."""
    try:
        names = os.listdir(task_dir)
    except OSError:
        return [0]
    return sorted(int(n) for n in names if n.isdigit())


def pin_threads(cpus: tuple[int, ...]) -> None:
    """Pin every current thread of this process to ``cpus`` (threads started later inherit the calling one's mask)."""
    target = set(cpus)
    for tid in thread_ids():
        try:
            os.sched_setaffinity(tid, target)
        except ProcessLookupError:  # the thread ended between the listing and the call
            continue
        except OSError as exc:
            raise CpuPinError(f"cannot pin thread {tid} to CPU(s) {sorted(target)}: {exc}",
                              "run the trial where the kit may set CPU affinity (a container's seccomp profile "
                              "or a cgroup without these CPUs refuses it)") from None
    os.sched_setaffinity(0, target)


def thread_affinities() -> dict[int, tuple[int, ...]]:
    """Each live thread's CPU mask, as the kernel reports it now."""
    out = {}
    for tid in thread_ids():
        try:
            out[tid] = tuple(sorted(os.sched_getaffinity(tid)))
        except (ProcessLookupError, OSError):
            continue
    return out


def pin(cores: int, allowed: Iterable[int] | None = None,
        siblings_of: Callable[[int], tuple[int, ...]] = sysfs_siblings) -> CpuPin:
    """Choose ``cores`` CPUs of those the trial may use and pin the whole process to them (before the framework
    starts its thread pools); ``allowed`` and ``siblings_of`` stand in for the kernel's in tests."""
    may_use = tuple(sorted(os.sched_getaffinity(0) if allowed is None else set(allowed)))
    chosen = choose_cpus(may_use, cores, siblings_of)
    if allowed is None:
        pin_threads(chosen)
    sib = tuple(tuple(s for s in siblings_of(c) if s != c) for c in chosen)
    return CpuPin(cores, may_use, chosen, sib)


def threads_asked(wl: Mapping[str, object], req_threads: object) -> int:
    """The cores of a pinned trial, which are also its intra-op threads; refuses a ``threads`` that says otherwise."""
    cores = wl.get("cpu_cores") or 0
    if not isinstance(cores, int) or isinstance(cores, bool) or cores < 0:
        raise CpuPinError(f"cpu_cores = {cores!r} is not a count >= 0", "give an integer (0: not pinned)")
    threads = req_threads if req_threads is not None else wl.get("threads")
    if cores and threads is not None and threads != cores:
        raise CpuPinError(f"threads = {threads} and cpu_cores = {cores} disagree: a pinned trial runs one "
                          "intra-op thread per core it is given", "leave threads out, or set it equal to cpu_cores",
                          where="workload.threads")
    return cores


def checked(p: CpuPin, intra: int | None, inter: int | None,
            affinities: Mapping[int, tuple[int, ...]] | None = None) -> CpuPin:
    """``p`` with the thread counts the framework reports, after checking them and every thread's CPU mask.

    CpuPinError names the first difference from what was asked: intra-op threads != cores, inter-op
    threads != 1, a thread allowed on a CPU outside the pinned set (or on fewer than asked).
    """
    if intra != p.cores_asked:
        raise CpuPinError(f"the framework reports {intra} intra-op thread(s), {p.cores_asked} asked for",
                          "set the thread count before the framework starts its thread pools (a fresh trial process)")
    if inter != 1:
        raise CpuPinError(f"the framework reports {inter} inter-op thread(s), 1 asked for",
                          "set the inter-op thread count before the framework runs its first op")
    seen = thread_affinities() if affinities is None else affinities
    want = tuple(sorted(p.cpus_pinned))
    bad = {tid: cpus for tid, cpus in seen.items() if tuple(sorted(cpus)) != want}
    if bad or not seen:
        tid, cpus = next(iter(sorted(bad.items()))) if bad else (None, ())
        raise CpuPinError(
            (f"thread {tid} of the trial may run on CPU(s) {list(cpus)}, not only on the pinned {list(want)}: "
             f"{len(bad)} of {len(seen)} thread(s) escaped the pinning") if bad else "no thread affinity readable",
            "find what resets the affinity (OMP_PROC_BIND, GOMP_CPU_AFFINITY, KMP_AFFINITY in the image's "
            "environment) and unset it; the kit does not measure a trial on other CPUs than asked")
    return CpuPin(p.cores_asked, p.cpus_allowed, p.cpus_pinned, p.smt_siblings, intra, inter)
