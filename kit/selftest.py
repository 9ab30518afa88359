"""`kit selftest`: prove, before a long study, that this host measures what the kit says it measures.

Two layers:

- :func:`host_selftest` (fast, under about 3 s, no framework import): the clocks the harness uses agree over a
  busy-wait of known length (within 1 %); the CPU and memory collectors, and with a GPU the NVML sampler, reach
  their configured rate; with a GPU, the energy counter's update interval, the clocks (applications clocks vs
  maximum, current clock-event reasons), persistence mode, ECC, MIG mode and foreign processes. The runner stores
  its record in ``manifest["selftest"]``.
- :func:`run_selftest` (`kit selftest`, seconds to a minute): the host layer plus one child Python per framework
  (the local venv, or each image through the container engine) that reports the GPU it computes on by UUID (checked
  against NVML's UUID of the index), the CUDA it was built for (checked against the driver) and its TF32 defaults;
  PyTorch also runs a calibrated GPU busy-wait (``torch.cuda._sleep``, cycles calibrated against CUDA events) timed
  the way the harness times a phase (synchronise, then ``time.perf_counter``), within 1 %. On a host without GPU
  every framework must report no GPU, and the GPU checks are ``skip`` with the reason.

The record: ``{"schema": 1, "ok": bool, "gpu": bool, "checks": [{"name", "status", "detail", "numbers"}]}``,
status one of pass, fail, skip, info; ``ok`` is False when any check failed.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

from kit.errors import KitError, NVMLError
from kit.nvml import nvml_error, nvml_session
from kit.records import JsonTable, JsonValue

SCHEMA = 1
TOLERANCE = 0.01  # timers must agree within 1 %
RATE_FRACTION = 0.9  # a sampler must reach 90 % of its configured rate
CPU_BUSY_S = 0.2
GPU_BUSY_S = 0.5
CHILD_TIMEOUT_S = 300
PROBE = Path(__file__).resolve().parent / "images" / "probe.py"
FRAMEWORKS = ("pytorch", "tensorflow")



class Check(TypedDict):
    """One check of the self-test, as ``manifest["selftest"]["checks"]`` and `kit selftest --json` hold it."""

    name: str
    status: str  # pass | fail | skip | info
    detail: str
    numbers: JsonTable  # the figures the detail was written from


class SelftestJson(TypedDict):
    """The self-test's record: ``manifest["selftest"]`` (the host layer) and `kit selftest` (with the frameworks)."""

    schema: int
    ok: bool
    gpu: bool
    checks: list[Check]
    backend: NotRequired[str]  # kit selftest: local | docker
    gpu_index: NotRequired[int | None]  # kit selftest: the GPU checked
    error: NotRequired[str]  # a run's host self-test that could not run (kit.run.start)


class BusyWaitJson(TypedDict):
    """The probe's ``selftest.busy_wait`` (kit/images/probe.py): a calibrated ``torch.cuda._sleep`` timed twice."""

    harness_s: list[float]
    event_s: list[float]
    target_s: float
    cycles: int
    cycles_per_s: float

# nvmlDeviceGetCurrentClocksEventReasons bits (nvml.h, nvmlClocksEventReasons)
CLOCK_EVENT_REASONS = {
    0x1: "GPU idle",
    0x2: "applications clocks setting",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
    0x100: "display clock setting",
}


def check(name: str, status: str, detail: str, /, **numbers: Any) -> Check:
    assert status in ("pass", "fail", "skip", "info"), status
    return {"name": name, "status": status, "detail": detail, "numbers": numbers}


def record(checks: list[Check], gpu: bool) -> SelftestJson:
    return {"schema": SCHEMA, "ok": not any(c["status"] == "fail" for c in checks), "gpu": gpu, "checks": checks}


# -- clocks ------------------------------------------------------------------------------------------------------------

def cpu_timer_check(busy_s: float = CPU_BUSY_S) -> Check:
    """A busy-wait of known length on the wall clock (the markers' ``time.time``) timed by ``perf_counter``.

    The harness times phases with ``perf_counter`` and the host attributes telemetry to phases by ``time.time``; the
    two must agree. ``time.monotonic`` is compared too. The thread's CPU time says whether the wait was preempted.
    """
    cpu0 = time.thread_time()
    p0, m0, w0 = time.perf_counter(), time.monotonic(), time.time()
    while time.time() - w0 < busy_s:
        pass
    p1, m1, w1 = time.perf_counter(), time.monotonic(), time.time()
    cpu = time.thread_time() - cpu0
    wall, perf, mono = w1 - w0, p1 - p0, m1 - m0
    dev = max(abs(perf - wall), abs(mono - wall)) / wall
    numbers = {"target_s": busy_s, "time_s": wall, "perf_counter_s": perf, "monotonic_s": mono, "thread_cpu_s": cpu,
               "deviation": dev}
    detail = (f"busy-wait of {busy_s:g} s on time.time(): perf_counter {perf:.4f} s, monotonic {mono:.4f} s, "
              f"time {wall:.4f} s (deviation {dev:.3%}); this thread was on a CPU {cpu / wall:.0%} of it")
    if dev > TOLERANCE:
        return check("CPU timer", "fail", detail + f": over the {TOLERANCE:.0%} tolerance (clock adjustments? VM?)",
                     **numbers)
    return check("CPU timer", "pass", detail, **numbers)


# -- sampler rates -----------------------------------------------------------------------------------------------------

def sampling_rate(rows: list[Any]) -> tuple[int, float | None]:
    """(readings, readings per second) of a collector's rows: distinct timestamps of its busiest device."""
    by_dev: dict[str, set[float]] = {}
    for r in rows:
        by_dev.setdefault(str(r.device), set()).add(float(r.t))
    if not by_dev:
        return 0, None
    busiest: set[float] = max(by_dev.values(), key=len)
    ts = sorted(busiest)
    if len(ts) >= 4:  # the last reading is the one taken at stop, off the schedule: leave it out of the rate
        ts = ts[:-1]
    if len(ts) < 2 or ts[-1] <= ts[0]:
        return len(ts), None
    return len(ts), (len(ts) - 1) / (ts[-1] - ts[0])


def collector_rate_checks(names: list[str], period_s: float, window_s: float,
                          gpu_indices: list[int] | None = None) -> list[Check]:
    """Run the named collectors together for ``window_s`` and check each reaches ``1 / period_s`` readings a second."""
    from contextlib import ExitStack

    from kit.collectors import make_collectors

    cols = make_collectors(names, period_s, gpu_indices=gpu_indices)
    with ExitStack() as stack:
        for c in cols:
            stack.enter_context(c)
        time.sleep(window_s)
    out = []
    want = 1.0 / period_s
    for c in cols:
        name = f"sampler {c.name}"
        probe = c.available()
        if not probe.ok:
            out.append(check(name, "skip", f"not available here: {probe.detail}"))
            continue
        n, rate = sampling_rate(c.take_rows())
        numbers = {"period_s": period_s, "window_s": window_s, "readings": n, "rate_hz": rate, "target_hz": want,
                   "errors": list(c.errors)}
        if rate is None:
            out.append(check(name, "fail", f"{n} reading(s) in {window_s:g} s: no rate (errors: {c.errors or 'none'})",
                             **numbers))
        elif rate < RATE_FRACTION * want:
            out.append(check(name, "fail", f"{rate:.1f} readings/s, configured {want:g}/s (period {period_s:g} s): "
                             "the sampler falls behind (a slow sensor or a busy host)", **numbers))
        else:
            out.append(check(name, "pass", f"{rate:.1f} readings/s over {window_s:g} s (configured {want:g}/s)",
                             **numbers))
    return out


# -- NVML --------------------------------------------------------------------------------------------------------------

def _text(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def _get(fn: Callable[..., Any], *args: Any) -> Any:
    """An NVML getter's value, None when it fails (not supported, no permission, an old driver)."""
    import pynvml

    try:
        return fn(*args)
    except (pynvml.NVMLError, AttributeError, TypeError, OSError):
        return None


def nvml_gpus(gpu_indices: list[int] | None) -> tuple[list[int], str]:
    """The NVML indices to check (all when None) and, when there are none, why. Raises NVMLError for a bad index."""
    import pynvml

    from kit.collectors.nvml import _indices

    try:
        with nvml_session():
            try:
                idx = _indices(gpu_indices)
            except pynvml.NVMLError as exc:
                return [], nvml_error(exc, "nvmlDeviceGetCount").cause
    except NVMLError as exc:  # no NVML here: no driver, a broken library, a driver/library mismatch
        if exc.where != "nvmlInit" and exc.where != "import pynvml":
            raise  # a bad index: the caller's error
        return [], exc.cause
    if not idx:
        return [], "NVML sees no GPU" if gpu_indices is None else "no GPU given to check"
    return idx, ""


def decode_reasons(mask: int | None) -> list[str]:
    if not mask:
        return []
    return [text for bit, text in CLOCK_EVENT_REASONS.items() if mask & bit] or [f"0x{mask:x}"]


def gpu_state_checks(index: int) -> list[Check]:
    """Identity, clocks, persistence, ECC, MIG and foreign processes of one GPU (NVML must be initialised)."""
    import pynvml

    h = pynvml.nvmlDeviceGetHandleByIndex(index)
    name = _get(pynvml.nvmlDeviceGetName, h)
    uuid = _get(pynvml.nvmlDeviceGetUUID, h)
    g = f"GPU {index}"
    out = [check(f"{g} identity", "info", f"{_text(name)} {_text(uuid)}", index=index, name=_text(name),
                 uuid=_text(uuid) if uuid is not None else None)]
    sm, mem = pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM
    app_sm, max_sm = _get(pynvml.nvmlDeviceGetApplicationsClock, h, sm), _get(pynvml.nvmlDeviceGetMaxClockInfo, h, sm)
    app_mem, max_mem = (_get(pynvml.nvmlDeviceGetApplicationsClock, h, mem),
                        _get(pynvml.nvmlDeviceGetMaxClockInfo, h, mem))
    cur_sm = _get(pynvml.nvmlDeviceGetClockInfo, h, sm)
    reasons = _get(pynvml.nvmlDeviceGetCurrentClocksEventReasons, h)
    if reasons is None:
        reasons = _get(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, h)
    why = decode_reasons(reasons)
    limited = bool(reasons and reasons & 0x2) or (app_sm is not None and max_sm is not None and app_sm < max_sm)
    state = ("limited by an applications-clocks or locked-clocks setting" if limited
             else "not locked (the GPU boosts as it likes: set clocks with `nvidia-smi -lgc` for stable timings)")
    out.append(check(f"{g} clocks", "info",
                     f"SM {cur_sm} MHz now, applications {app_sm} / max {max_sm} MHz; memory applications {app_mem} / "
                     f"max {max_mem} MHz; {state}; clock-event reasons: {', '.join(why) or 'none'}",
                     sm_mhz=cur_sm, app_sm_mhz=app_sm, max_sm_mhz=max_sm, app_mem_mhz=app_mem, max_mem_mhz=max_mem,
                     clock_event_reasons=reasons, locked=limited))
    pm = _get(pynvml.nvmlDeviceGetPersistenceMode, h)
    out.append(check(f"{g} persistence mode", "info",
                     "unknown" if pm is None else ("on" if pm else "off (the driver may unload between trials: "
                                                   "`sudo nvidia-smi -pm 1`)"), persistence=None if pm is None else bool(pm)))
    ecc = _get(pynvml.nvmlDeviceGetEccMode, h)
    out.append(check(f"{g} ECC", "info", "not supported" if ecc is None else
                     f"current {'on' if ecc[0] else 'off'}, pending {'on' if ecc[1] else 'off'}",
                     ecc_current=None if ecc is None else bool(ecc[0]), ecc_pending=None if ecc is None else bool(ecc[1])))
    mig = _get(pynvml.nvmlDeviceGetMigMode, h)
    mig_on = None if mig is None else bool(mig[0])
    out.append(check(f"{g} MIG", "info", "not supported" if mig is None else
                     ("ENABLED: trials would run on a MIG slice, not the whole GPU; NVML telemetry is per GPU"
                      if mig_on else "disabled"), mig_current=mig_on, mig_pending=None if mig is None else bool(mig[1])))
    pids: set[int] = set()
    for fn in (pynvml.nvmlDeviceGetComputeRunningProcesses, pynvml.nvmlDeviceGetGraphicsRunningProcesses):
        procs = _get(fn, h)
        pids |= {int(p.pid) for p in procs or []}
    pids.discard(os.getpid())
    out.append(check(f"{g} foreign processes", "info",
                     f"{len(pids)} process(es) on this GPU before any trial: {sorted(pids)} (they share the GPU with "
                     "every trial: stop them)" if pids else "none", foreign_pids=sorted(pids)))
    return out


def energy_interval_check(index: int, window_s: float, poll_s: float = 0.001) -> Check:
    """Poll the cumulative energy counter fast for ``window_s``; the median time between changes is its update interval."""
    import pynvml

    name = f"GPU {index} energy counter"
    h = pynvml.nvmlDeviceGetHandleByIndex(index)
    try:
        last = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    except pynvml.NVMLError as exc:
        return check(name, "skip", f"not supported on this GPU/driver ({exc}): phase energy falls back to power x time")
    changes: list[tuple[float, int]] = []
    t_end = time.perf_counter() + window_s
    polls = 0
    while time.perf_counter() < t_end:
        v = _get(pynvml.nvmlDeviceGetTotalEnergyConsumption, h)
        polls += 1
        now = time.perf_counter()
        if v is not None and v != last:
            changes.append((now, int(v) - int(last)))
            last = v
        time.sleep(poll_s)
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(changes)]
    numbers = {"window_s": window_s, "polls": polls, "changes": len(changes),
               "median_interval_s": statistics.median(gaps) if gaps else None,
               "median_step_mj": statistics.median(c[1] for c in changes) if changes else None}
    if not gaps:
        return check(name, "info", f"{len(changes)} change(s) in {window_s:g} s of {polls} polls: update interval not "
                     f"measurable (longer than {window_s:g} s?)", **numbers)
    med = statistics.median(gaps)  # = numbers["median_interval_s"], not None: gaps is not empty
    return check(name, "info", f"updates every {med * 1000:.1f} ms (median of {len(gaps)} intervals, {polls} polls "
                 f"in {window_s:g} s): phases much shorter than this get no energy difference", **numbers)


# -- the host layer ----------------------------------------------------------------------------------------------------

def host_selftest(gpu_indices: list[int] | None, period_s: float, *, window_s: float = 1.0) -> SelftestJson:
    """The fast host checks (no framework import): the record stored in ``manifest["selftest"]``.

    ``gpu_indices``: NVML indices to check (None: every GPU NVML sees; []: none). Never raises for a missing NVML or
    GPU (the GPU checks are then ``skip``); an index NVML does not have raises :class:`kit.errors.NVMLError`.
    """
    checks = [cpu_timer_check()]
    idx, why = nvml_gpus(gpu_indices)
    names = ["cpu", "memory"] + (["nvml"] if idx else [])
    checks += collector_rate_checks(names, period_s, window_s, gpu_indices=idx or None)
    if not idx:
        checks.append(check("GPU checks", "skip", f"skipped: {why}"))
        return record(checks, gpu=False)
    with nvml_session() as pynvml:
        driver = _get(pynvml.nvmlSystemGetDriverVersion)
        cuda = _get(pynvml.nvmlSystemGetCudaDriverVersion)
        cuda_text = None if cuda is None else f"{cuda // 1000}.{(cuda % 1000) // 10}"
        checks.append(check("NVIDIA driver", "info", f"{_text(driver)} (CUDA {cuda_text})",
                            driver=None if driver is None else _text(driver), cuda=cuda_text))
        for i in idx:
            try:
                checks += gpu_state_checks(i)
            except pynvml.NVMLError as exc:
                checks.append(check(f"GPU {i}", "fail", f"NVML cannot read GPU {i}: {exc}"))
        checks.append(energy_interval_check(idx[0], min(window_s, 1.0)))
    return record(checks, gpu=True)


# -- frameworks (children) ---------------------------------------------------------------------------------------------

def child_env(gpu: int | None) -> dict[str, str]:
    """A framework child's environment: the trial's GPU numbering (PCI bus order) and only the GPU under test."""
    env = dict(os.environ)
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    return env


def run_local_child(framework: str, gpu: int | None, busy_s: float, python: str = sys.executable) -> JsonTable:
    """Run the probe with ``--selftest`` in a child Python of this venv; its JSON report."""
    cmd = [python, str(PROBE), framework, "--selftest", str(busy_s)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=child_env(gpu), timeout=CHILD_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"no answer within {CHILD_TIMEOUT_S} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        return {"error": f"exit {p.returncode}: {' | '.join(tail)[-600:]}"}
    report = json.loads(lines[-1])
    return report if isinstance(report, dict) else {"error": f"the probe reported a JSON {type(report).__name__}"}


def run_image_child(row: Any, gpu: int | None, busy_s: float) -> JsonTable:
    """Run the probe with ``--selftest`` in ``row``'s built image, with GPU ``gpu`` attached (inside it is GPU 0)."""
    from kit.engine import device_requests, find_engine, gpu_support
    from kit.images.build import find_built
    from kit.images.verify import run_probe

    engine = find_engine()
    built = find_built(engine, row)
    if built is None:
        return {"error": f"image {row.name} is not built here (kit images build {row.name})"}
    reqs = None
    if gpu is not None and row.device == "cuda":
        support = gpu_support(engine)
        if not support.ok:
            return {"error": f"the engine cannot attach GPUs: {support.detail} ({support.fix})"}
        reqs = device_requests(engine.kind, support.mechanism, [gpu])
    try:
        return run_probe(engine, built["tag"], row.framework, reqs, ("--selftest", str(busy_s)))
    except KitError as err:
        return {"error": err.one_line()}


def _same_uuid(a: str | None, b: str | None) -> bool:
    def norm(u: str | None) -> str:
        u = (u or "").strip().lower()
        for p in ("gpu-", "mig-"):
            u = u.removeprefix(p)
        return u.replace("-", "")

    return bool(a) and bool(b) and norm(a) == norm(b)


def _table(v: JsonValue) -> JsonTable:
    """A JSON object of a child's report, or an empty one where the child gave none (or something else)."""
    return v if isinstance(v, dict) else {}


def _opt_str(v: JsonValue) -> str | None:
    return v if isinstance(v, str) else None


def framework_checks(reports: dict[str, JsonTable], nvml_uuid: str | None, driver: str | None,
                     gpu: int | None) -> list[Check]:
    """Checks on the children's reports: device and UUID, driver vs built CUDA, TF32 defaults, the GPU busy-wait."""
    from kit.doctor.drivers import driver_fits

    out: list[Check] = []
    tf32: JsonTable = {}
    for label, rep in reports.items():
        name = f"framework {label}"
        if "error" in rep:
            out.append(check(name, "fail", f"the child process failed: {rep['error']}"))
            continue
        st = _table(rep.get("selftest"))
        tf32[label] = st.get("tf32")
        built = st.get("cuda_build") or rep.get("cuda")
        version = rep.get("framework_version")
        n = int(cast(int, st.get("device_count") or 0))
        numbers = {"framework_version": version, "cuda_build": built, "device_count": n, "uuid": st.get("uuid"),
                   "device_name": st.get("device_name"), "tf32": st.get("tf32")}
        if gpu is None:
            if n:
                out.append(check(name, "fail", f"{label} {version} sees {n} GPU(s) that NVML does not", **numbers))
            else:
                out.append(check(name, "pass", f"{label} {version} imports and reports no GPU (CPU host, as NVML)",
                                 **numbers))
            continue
        if n == 0:
            fix = ""
            if driver and built:
                ok, why = driver_fits(driver, str(built))
                fix = f" (built for CUDA {built}: {why})" if not ok else f" (built for CUDA {built}; the driver fits)"
            elif not built:
                fix = " (a CPU build: install the CUDA build, see `kit doctor`)"
            out.append(check(name, "fail", f"{label} {version} sees no GPU while NVML has GPU {gpu}: its trials "
                             f"would run on the CPU{fix}", **numbers))
        elif not _same_uuid(_opt_str(st.get("uuid")), nvml_uuid):
            out.append(check(name, "fail", f"{label} computes on {st.get('uuid')}, NVML's GPU {gpu} is {nvml_uuid}: "
                             "another GPU than the one sampled (set CUDA_DEVICE_ORDER=PCI_BUS_ID)", **numbers))
        else:
            out.append(check(name, "pass", f"{label} {version} (CUDA {built}) computes on GPU {gpu} "
                             f"{st.get('device_name')} {st.get('uuid')}, the GPU NVML samples", **numbers))
        if driver and built:
            ok, why = driver_fits(driver, str(built))
            out.append(check(f"{label} CUDA vs driver", "pass" if ok else "fail", f"built for CUDA {built}: {why}",
                             driver=driver, cuda_build=built))
        bw = st.get("busy_wait")
        if isinstance(bw, dict) and bw:
            out.append(busy_wait_check(label, cast(BusyWaitJson, bw)))
    if tf32:
        text = "; ".join(f"{k}: matmul {_onoff(_flag(v, 'matmul'))}, conv {_onoff(_flag(v, 'conv'))}"
                         for k, v in tf32.items())
        vals = {json.dumps(v, sort_keys=True) for v in tf32.values()}
        note = (" (they differ: a study comparing fp32 should set workload tf32 = \"off\" or \"on\")"
                if len(vals) > 1 else "")
        out.append(check("TF32 defaults", "info", text + note + ("" if gpu is not None else
                         " (TF32 applies only on Ampere and newer GPUs)"), **{k: v for k, v in tf32.items()}))
    if gpu is None:
        out.append(check("GPU busy-wait", "skip", "skipped: no GPU on this host (the CPU timer was checked instead)"))
    elif not any(c["name"].startswith("GPU busy-wait") for c in out):
        out.append(check("GPU busy-wait", "skip", "skipped: no framework child could run it on the GPU"))
    return out


def _onoff(v: JsonValue) -> str:
    return "?" if v is None else ("on" if v else "off")


def _flag(tf32: JsonValue, key: str) -> JsonValue:
    """``tf32[key]`` of a child's TF32 record; a missing or empty record stands as it is (None: "?", {}: "off")."""
    return tf32.get(key) if isinstance(tf32, dict) and tf32 else tf32


def busy_wait_check(label: str, bw: BusyWaitJson) -> Check:
    """The harness's timing (synchronise + perf_counter) of a calibrated ``torch.cuda._sleep`` against CUDA events."""
    harness = statistics.median(bw["harness_s"])
    event = statistics.median(bw["event_s"])
    target = float(bw["target_s"])
    dev_event = abs(harness - event) / event
    dev_target = abs(harness - target) / target
    numbers = {**bw, "harness_median_s": harness, "event_median_s": event, "deviation_vs_event": dev_event,
               "deviation_vs_target": dev_target}
    detail = (f"{label}: torch.cuda._sleep({bw['cycles']}) (cycles calibrated at {bw['cycles_per_s'] / 1e6:.0f} M/s "
              f"for {target:g} s): harness {harness:.4f} s, CUDA events {event:.4f} s ({dev_event:.2%}), "
              f"target {dev_target:.2%} off")
    if dev_event > TOLERANCE:
        return check("GPU busy-wait", "fail", detail + f": the harness's timing is off by more than {TOLERANCE:.0%}",
                     **numbers)
    if dev_target > TOLERANCE:
        detail += " (the SM clock changed between calibration and run: clocks not locked)"
    return check("GPU busy-wait", "pass", detail, **numbers)


# -- the whole self-test -----------------------------------------------------------------------------------------------

def run_selftest(gpu: int | None = None, backend: str = "local", images: list[str] | None = None,
                 period_s: float = 0.1, window_s: float = 2.0, busy_s: float = GPU_BUSY_S,
                 on_progress: Callable[[str], None] | None = None) -> SelftestJson:
    """`kit selftest`: the host layer, then one child per framework (local venv or image rows)."""
    if backend not in ("local", "docker"):
        raise KitError(f"backend {backend!r} is not supported by the self-test", where="kit selftest --backend",
                       fix="use local (this venv) or docker (the images, via Docker or Podman)")
    if images and backend != "docker":
        raise KitError("--images needs --backend docker", where="kit selftest", fix="add --backend docker")
    say = on_progress or (lambda s: None)
    idx, why = nvml_gpus(None)
    if gpu is not None and gpu not in idx:
        raise KitError(f"GPU {gpu} is not on this host ({why or f'NVML sees GPU(s) {idx}'})", where="--gpu",
                       fix="give an index `nvidia-smi -L` lists (NVML order = PCI bus order)")
    if gpu is None and idx:
        gpu = idx[0]
    say(f"host checks ({'GPU ' + str(gpu) if gpu is not None else 'no GPU'}, sampling every {period_s:g} s)")
    host = host_selftest([gpu] if gpu is not None else [], period_s, window_s=window_s)
    checks = list(host["checks"])
    if gpu is None:
        checks = [c for c in checks if c["name"] != "GPU checks"]
        checks.append(check("GPU checks", "skip", f"skipped: {why or 'no GPU'}; the CPU path was checked instead"))
    nvml_uuid = next((_opt_str(c["numbers"].get("uuid")) for c in checks if c["name"] == f"GPU {gpu} identity"), None)
    driver = next((_opt_str(c["numbers"].get("driver")) for c in checks if c["name"] == "NVIDIA driver"), None)
    reports: dict[str, JsonTable] = {}
    if backend == "local":
        for fw in FRAMEWORKS:
            say(f"{fw}: child process of {sys.executable}")
            reports[fw] = run_local_child(fw, gpu, busy_s)
    else:
        from kit.images.matrix import load_matrix

        matrix = load_matrix()
        rows = ([matrix.get(n.strip()) for n in images if n.strip()] if images else
                [matrix.default_for(fw, "cuda" if gpu is not None else "cpu") for fw in FRAMEWORKS])
        for row in rows:
            say(f"{row.name}: probe in its image")
            reports[row.name] = run_image_child(row, gpu, busy_s)
    checks += framework_checks(reports, nvml_uuid, driver, gpu)
    uuids = {k: _table(r.get("selftest")).get("uuid") for k, r in reports.items() if "error" not in r}
    if gpu is not None and len(uuids) > 1:
        same = all(_same_uuid(_opt_str(u), nvml_uuid) for u in uuids.values())
        checks.append(check("same GPU in every framework", "pass" if same else "fail",
                            ", ".join(f"{k}: {u or 'no GPU'}" for k, u in uuids.items()) + f"; NVML: {nvml_uuid}",
                            uuids=uuids, nvml_uuid=nvml_uuid))
    out = record(checks, gpu=gpu is not None)
    out["backend"] = backend
    out["gpu_index"] = gpu
    return out
