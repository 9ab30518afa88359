"""``kit tune`` / ``kit tune --reset``: put the host's noise sources in a fixed state, and put them back.

The kit's ``pyperf system tune``: the CPU frequency governor to ``performance``
(no ramp-up in the first milliseconds of a phase), turbo/boost off (the clock
no longer depends on temperature and on how many cores are busy), and on
NVIDIA hosts the GPU clocks locked at the GPU's default application clock
where the driver allows it. Every value is read before it is changed and
written to a state file first, so ``--reset`` restores exactly what was there;
the state file lives in /run by default, which is emptied at boot just as the
settings themselves are. It needs root and says so; on a VM there is usually
nothing to change, and ``kit doctor`` says what this host lets the kit control.

A state file is data: ``--reset`` restores only knobs it finds itself under
the sysfs root, to values of the knob's own kind (a governor the CPU lists, a
0/1 flag), never a path or a value the file invents.

The state file and its directory are checked before root reads or writes them
(issue 37; :mod:`kit.private_files`): the directory must be a real directory
(a link there, "redirecting" it, is refused, never followed) owned by root or
this user and not writable by group or others, so nobody else can plant or swap
a file in it; the state file must be a regular file of root or this user, not
writable by others (a link planted at its name, a FIFO or a device is refused
with the path and the fix: nothing is read or written through it, nothing
blocks), at most ``MAX_STATE_BYTES``. The ownership check stands in for a MAC:
only root (or this user) can have written a file that passes it, in a
directory only they can write. It is written through a temporary file created
O_EXCL|O_NOFOLLOW in the checked directory and linked into place (never
clobbering a state file that is already there).
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from kit.errors import KitError
from kit.private_files import PrivateDir, UnsafeFileError, me, open_dir
from kit.records import JsonTable
from kit.safeio import kind_of

STATE_FILE = Path(os.environ.get("KIT_TUNE_STATE", "/run/kit/tune-state.json"))
MAX_STATE_BYTES = 1 << 20
_WORD = re.compile(r"^[a-z0-9_]{1,32}$")


@dataclass(frozen=True)
class Knob:
    """One setting: its sysfs file, what it holds now and what tuning wants."""

    name: str
    path: Path
    current: str
    wanted: str
    allowed: tuple[str, ...]  # the values this knob may be given (reset checks the saved value against them)

    @property
    def changes(self) -> bool:
        return self.current != self.wanted


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()[:200]
    except OSError:
        return None


def knobs(sys_root: Path = Path("/sys")) -> list[Knob]:
    """The CPU knobs this host exposes (empty on most VMs)."""
    out: list[Knob] = []
    cpufreq = sys_root / "devices" / "system" / "cpu" / "cpufreq"
    for policy in sorted(cpufreq.glob("policy*")) if cpufreq.is_dir() else []:
        gov = _read(policy / "scaling_governor")
        avail = (_read(policy / "scaling_available_governors") or "").split()
        if gov is not None and "performance" in avail:
            out.append(Knob(f"governor {policy.name}", policy / "scaling_governor", gov, "performance",
                            tuple(a for a in avail if _WORD.match(a))))
    boost = cpufreq / "boost"
    if (cur := _read(boost)) in ("0", "1"):
        out.append(Knob("boost", boost, str(cur), "0", ("0", "1")))
    no_turbo = sys_root / "devices" / "system" / "cpu" / "intel_pstate" / "no_turbo"
    if (cur := _read(no_turbo)) in ("0", "1"):
        out.append(Knob("intel_pstate no_turbo", no_turbo, str(cur), "1", ("0", "1")))
    return out


def _need_root(as_root: bool | None, what: str) -> None:
    root = os.geteuid() == 0 if as_root is None else as_root
    if not root:
        raise KitError(f"{what} changes system settings and needs root", where="kit tune",
                       fix="run it as root: sudo $(command -v kit) tune (undo with: sudo $(command -v kit) tune "
                           "--reset); or skip it: pinning ([container] cpuset = \"auto\") needs no root")


def _owners() -> tuple[int, ...]:
    return (0, me())


def _state_dir(state: Path, create: bool) -> PrivateDir | None:
    """The state file's directory, checked (made 0755 with ``create``); KitError naming it and the fix when it is
    a link, not a directory, someone else's or writable by others."""
    try:
        return open_dir(state.parent, create=create, owners=_owners(), create_mode=0o755,
                        what="the tuning state directory")
    except UnsafeFileError as err:
        raise KitError(f"{err.cause} (kit tune never writes its state through a link or into a directory others "
                       "control)", where=err.where, fix=f"{err.fix}; or set KIT_TUNE_STATE to a path in a "
                       "root-owned directory") from None
    except OSError as exc:
        raise KitError(f"the tuning state directory cannot be made ({exc.strerror or exc})", where=str(state.parent),
                       fix="run as root, or set KIT_TUNE_STATE to a writable path") from None


def _planted(d: PrivateDir, state: Path) -> None:
    """KitError when something other than a regular file of root/this user sits at the state file's name."""
    st = d.lstat(state.name)
    if st is None:
        return
    if not stat.S_ISREG(st.st_mode):
        raise KitError(f"{kind_of(st.st_mode)} sits at the tuning state file's name; refused (never followed or "
                       "written through)", where=str(state), fix=f"remove it (rm {state}) and run kit tune again")
    if st.st_uid not in _owners() or stat.S_IMODE(st.st_mode) & 0o022:
        raise KitError(f"the tuning state file is owned by uid {st.st_uid} with mode {stat.S_IMODE(st.st_mode):04o}: "
                       "not one root wrote; refused", where=str(state), fix=f"remove it (rm {state})")


class GpuClocks(TypedDict):
    """One GPU's clock lock (:func:`lock_gpu_clocks`): in the state file and in `kit tune`'s answer."""

    index: int
    locked: bool
    sm_mhz: NotRequired[int]  # locked: the clock it is locked at
    why: NotRequired[str]  # not locked: NVML's refusal


class KnobChange(TypedDict):
    name: str
    path: str
    before: str
    after: str


class TuneResult(TypedDict):
    """What :func:`tune` changed (the state file keeps ``changed`` and the locked ``gpus``)."""

    changed: list[KnobChange]
    unchanged: list[str]
    failed: list[str]
    gpus: list[GpuClocks]
    state: str
    nothing: bool  # the host exposes nothing to tune


class ResetResult(TypedDict):
    restored: list[str]
    refused: list[str]


def tune(sys_root: Path = Path("/sys"), state: Path = STATE_FILE, as_root: bool | None = None,
         gpus: Callable[[], list[GpuClocks]] | None = None) -> TuneResult:
    """Apply the settings; returns what changed (and what could not be). Refuses without root, and when the state
    file's directory or name is not one the kit can trust (a planted link, a redirected directory)."""
    _need_root(as_root, "kit tune")
    d = _state_dir(state, create=True)
    if d is None:  # cannot happen with create=True: open_dir makes it or raises
        raise KitError("the tuning state directory is missing", where=str(state.parent), fix="create it")
    with d:
        _planted(d, state)
        if d.lstat(state.name) is not None:
            raise KitError("the host is already tuned (a state file exists)", where=str(state),
                           fix="kit tune --reset first, or remove the file if the host was rebooted since")
        found = knobs(sys_root)
        todo = [k for k in found if k.changes]
        gpu_rows = (gpus or lock_gpu_clocks)()
        changed: list[KnobChange] = [{"name": k.name, "path": str(k.path), "before": k.current, "after": k.wanted}
                                     for k in todo]
        record = {"schema": 1, "t": time.time(), "sys_root": str(sys_root), "changed": changed,
                  "gpus": [g for g in gpu_rows if g.get("locked")]}
        try:  # written before anything changes: a crash half-way can still be undone
            made = d.create_new(state.name, json.dumps(record, indent=1).encode(), mode=0o644)
        except OSError as exc:
            raise KitError(f"the tuning state cannot be written ({exc.strerror or exc})", where=str(state),
                           fix="run as root, or set KIT_TUNE_STATE to a writable path") from None
        if not made:
            _planted(d, state)
            raise KitError("the host is already tuned (a state file appeared meanwhile)", where=str(state),
                           fix="kit tune --reset first")
    failed = []
    for k in todo:
        try:
            k.path.write_text(k.wanted + "\n", encoding="ascii")
        except OSError as exc:
            failed.append(f"{k.name}: {exc.strerror or exc}")
    return {"changed": changed, "unchanged": [k.name for k in found if not k.changes], "failed": failed,
            "gpus": gpu_rows, "state": str(state),
            "nothing": not found and not any(g.get("locked") for g in gpu_rows)}


def _read_state(state: Path) -> Any:
    """The state file's JSON: read without following a link or blocking, from a checked directory, root's or this
    user's, capped; KitError otherwise (``no tuning to undo`` when there is none)."""
    d = _state_dir(state, create=False)
    if d is None:
        raise KitError("no tuning to undo (no state file)", where=str(state), fix="nothing to do")
    with d:
        try:
            raw = d.read(state.name, MAX_STATE_BYTES, owners=_owners(), what="the tuning state file")
        except UnsafeFileError as err:
            raise KitError(err.cause, where=err.where, fix=err.fix) from None
        if raw is None:
            raise KitError("no tuning to undo (no state file)", where=str(state), fix="nothing to do")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise KitError(f"the tuning state file cannot be read ({exc})", where=str(state), fix="remove it") from None


def reset(sys_root: Path = Path("/sys"), state: Path = STATE_FILE, as_root: bool | None = None,
          gpus: Callable[[list[JsonTable]], list[str]] | None = None) -> ResetResult:
    """Restore what ``tune`` changed, from its state file; then remove the file."""
    _need_root(as_root, "kit tune --reset")
    rec = _read_state(state)
    by_path = {str(k.path): k for k in knobs(sys_root)}
    restored: list[str] = []
    refused: list[str] = []
    for i, c in enumerate(rec.get("changed") or [] if isinstance(rec, dict) else []):
        k = by_path.get(str(c.get("path"))) if isinstance(c, dict) else None
        before = c.get("before") if isinstance(c, dict) else None
        if k is None or not isinstance(before, str) or before not in k.allowed:
            refused.append(f"changed[{i}]: not a knob of this host or not one of its values")
            continue
        try:
            k.path.write_text(before + "\n", encoding="ascii")
            restored.append(f"{k.name}: {k.current} -> {before}")
        except OSError as exc:
            refused.append(f"{k.name}: {exc.strerror or exc}")
    gpu_rows = [g for g in (rec.get("gpus") or []) if isinstance(g, dict)] if isinstance(rec, dict) else []
    restored += (gpus or unlock_gpu_clocks)(gpu_rows) if gpu_rows else []
    d = _state_dir(state, create=False)
    if d is not None:
        with d:
            d.unlink(state.name)
    return {"restored": restored, "refused": refused}


def lock_gpu_clocks() -> list[GpuClocks]:
    """Lock each GPU's clocks at its default application clock where the driver allows it (not exercised here:
    no GPU on the CI machines; the calls are NVML's nvmlDeviceSetGpuLockedClocks / Reset...)."""
    from kit.nvml import nvml_session

    rows: list[GpuClocks] = []
    try:
        with nvml_session() as nv:
            for i in range(nv.nvmlDeviceGetCount()):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                try:
                    clk = int(nv.nvmlDeviceGetDefaultApplicationsClock(h, nv.NVML_CLOCK_GRAPHICS))
                    nv.nvmlDeviceSetGpuLockedClocks(h, clk, clk)
                    rows.append({"index": i, "locked": True, "sm_mhz": clk})
                except Exception as exc:  # NVMLError_NoPermission, _NotSupported: recorded, not fatal
                    rows.append({"index": i, "locked": False, "why": str(exc)[:200]})
    except Exception:  # kit.errors.NVMLError (no NVML, no GPU) and the like: nothing to lock
        return rows
    return rows


def unlock_gpu_clocks(rows: list[JsonTable]) -> list[str]:
    from kit.nvml import nvml_session

    out: list[str] = []
    try:
        with nvml_session() as nv:
            for g in rows:
                i = g.get("index")
                if not isinstance(i, int) or isinstance(i, bool):
                    continue
                try:
                    nv.nvmlDeviceResetGpuLockedClocks(nv.nvmlDeviceGetHandleByIndex(i))
                    out.append(f"GPU {i}: clocks unlocked")
                except Exception as exc:
                    out.append(f"GPU {i}: {str(exc)[:200]}")
    except Exception as exc:
        out.append(f"GPU clocks: NVML unavailable, not reset ({str(exc)[:200]})")
    return out


def controls(sys_root: Path = Path("/sys")) -> list[tuple[str, bool, str]]:
    """What this host lets the kit control: (what, yes/no, detail), for ``kit doctor``."""
    from kit.pinning import available_cpus

    cpus = available_cpus()
    rows = [("CPU affinity (pinning)", len(cpus) >= 2,
             f"{len(cpus)} CPU(s) usable: " + ("[container] cpuset = \"auto\" separates trial and collectors"
                                               if len(cpus) >= 2 else "nothing to separate"))]
    found = knobs(sys_root)
    gov = [k for k in found if k.name.startswith("governor")]
    rows.append(("CPU governor", bool(gov), f"{len(gov)} policies, now {sorted({k.current for k in gov})}"
                 if gov else "no cpufreq policies exposed (usual on a VM): nothing to set"))
    boost = [k for k in found if k.name in ("boost", "intel_pstate no_turbo")]
    rows.append(("turbo/boost", bool(boost), ", ".join(f"{k.name}={k.current}" for k in boost)
                 if boost else "no boost control exposed"))
    rows.append(("root (kit tune)", os.geteuid() == 0, "running as root" if os.geteuid() == 0 else
                 "kit tune needs root (sudo)"))
    return rows
