"""Every process of a local trial ends with the trial: a child subreaper between the kit and the harness.

    python -I reaper.py REPORT_FD -- python -m kit.harness ...

The local backend starts this script (standard library only, run by path with
``-I`` so nothing beside it is importable) in a new session; it makes itself
a *child subreaper* (``PR_SET_CHILD_SUBREAPER``) and starts the harness. A
process the trial starts and abandons (a double fork, ``setsid``, a daemon)
is re-parented to the reaper instead of to PID 1, so when the harness exits
the reaper finds every descendant still alive, stops them all (SIGSTOP, so a
fork loop cannot outrun it), records who they were and kills them (SIGKILL),
reaps them, writes that record as JSON to ``REPORT_FD`` (after a first line
``harness PID`` as soon as the harness runs) and exits the way the harness did (its exit code, or the same signal). The kit stores the record in
the trial file (``backend.leftover_processes``) and the analysis flags such
trials. SIGTERM (the kit's time limit or interrupt) and the kit's death
(``PR_SET_PDEATHSIG``) make the reaper do the same at once, harness included.

The reaper runs as the trial's user, so the trial can signal it. The job
control stops (SIGTSTP, SIGTTIN, SIGTTOU) do nothing to it: it leads its own
session, so its process group is orphaned and the kernel discards them.
SIGKILL and SIGSTOP cannot be refused, and for those the kit process is the
guard behind this one (kit/backends/local.py, kit/proctree.py): it is a
subreaper too, so what this reaper's death orphans goes to the kit, which
polls this process, kills it when it is held stopped, and ends whatever of
the trial is left.

Container trials need none of this: each trial is its own PID namespace (the
harness is its PID 1), and everything in it dies with the container.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
MAX_LISTED = 50  # processes named in the report (the count is exact)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _prctl(option: int, value: int) -> bool:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _state_ppid(pid: int) -> tuple[str, int] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ')'
    try:
        fields = stat[stat.rindex(b")") + 2:].split()
        return fields[0].decode("ascii", "replace"), int(fields[1])
    except (ValueError, IndexError):
        return None


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (parents before children), from /proc; an exited process that only
    waits to be reaped (a zombie) is not alive and not listed."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            got = _state_ppid(int(name))
            if got is not None and got[0] not in ("Z", "X"):
                children.setdefault(got[1], []).append(int(name))
    out: list[int] = []
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def describe(pid: int) -> dict[str, object]:
    info: dict[str, object] = {"pid": pid}
    try:
        with open(f"/proc/{pid}/comm", "rb") as fh:
            info["name"] = fh.read(64).decode("utf-8", "replace").strip()
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            info["cmdline"] = fh.read(400).replace(b"\0", b" ").decode("utf-8", "replace").strip()[:200]
    except OSError:
        pass
    return info


def end_all(me: int, harness: int | None) -> list[dict[str, object]]:
    """Stop, record, kill and reap every descendant but the harness's own exit; the ones that outlived it."""
    seen: dict[int, dict[str, object]] = {}
    for _ in range(50):  # a process forking while it is being stopped is caught on a later pass
        pids = descendants(me)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGSTOP)
        for pid in pids:
            if pid != harness and pid not in seen:
                seen[pid] = describe(pid)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        _reap(timeout_s=0.5)
    _reap(timeout_s=2.0)
    return list(seen.values())


def _reap(timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.01)


def main(argv: list[str]) -> int:
    report_fd = int(argv[0])
    cmd = argv[argv.index("--") + 1:]
    me = os.getpid()
    kit_pid = os.environ.get("KIT_PARENT_PID")
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    if sys.platform.startswith("linux") and _prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM)) and kit_pid \
            and str(os.getppid()) != kit_pid:
        return 1  # the kit died before prctl took effect
    stop = {"signal": 0, "armed": 1}

    class Stop(Exception):
        """Raised by the signal handler: a plain handler would let waitpid() resume (PEP 475)."""

    def on_signal(signum: int, frame: object) -> None:
        if not stop["signal"]:
            stop["signal"] = signum
        if stop["armed"]:  # only while waiting for the harness; afterwards the cleanup must finish
            stop["armed"] = 0
            raise Stop

    for handled in STOP_SIGNALS:
        signal.signal(handled, on_signal)
    env = dict(os.environ)
    env["KIT_PARENT_PID"] = str(me)  # the harness dies with its parent: this process
    cpus = env.pop("KIT_TRIAL_CPUS", "")
    if cpus:  # the trial's CPU set (kit.pinning), inherited by the harness and everything it starts
        try:
            os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
        except (OSError, ValueError) as exc:
            print(f"reaper: cannot pin the trial to CPUs {cpus}: {exc}", file=sys.stderr)
            return 1  # measure what was asked or stop: never an unpinned trial recorded as pinned
    harness: subprocess.Popen[bytes] | None = None
    status: int | None = None
    try:
        harness = subprocess.Popen(cmd, env=env)
        with contextlib.suppress(OSError):  # the kit's collectors sample the harness's tree, not this process
            os.write(report_fd, f"harness {harness.pid}\n".encode())
        while True:
            pid, st = os.waitpid(-1, 0)  # the harness, or an orphan re-parented here that ended
            if pid == harness.pid:
                status = st
                break
    except (Stop, ChildProcessError):
        pass
    stop["armed"] = 0  # from here on the reaper finishes its work whatever arrives
    if harness is not None:
        harness.returncode = 0  # reaped here; keep Popen from waiting on it again
    leftover = end_all(me, harness.pid if harness is not None else None)
    if status is None:  # stopped by a signal before the harness ended: it was killed with the rest
        status = int(signal.SIGKILL)
    rec = {"leftover_processes": leftover[:MAX_LISTED], "leftover_count": len(leftover),
           "stopped_by": signal.Signals(stop["signal"]).name if stop["signal"] else None}
    with contextlib.suppress(OSError):
        os.write(report_fd, json.dumps(rec).encode()[:60000])
        os.close(report_fd)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else int(signal.SIGKILL)
    for stop_sig in STOP_SIGNALS:
        signal.signal(stop_sig, signal.SIG_DFL)
    os.kill(me, sig)  # end the way the harness ended, so the kit sees the same signal
    return 128 + sig


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
