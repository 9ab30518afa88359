"""TensorFlow's profiler output (an XSpace, ``*.xplane.pb``) as per-op totals, without tensorboard-plugin-profile.

``tf.profiler.experimental.start(logdir)`` / ``stop()`` write ``logdir/plugins/profile/<run>/<host>.xplane.pb``,
an XSpace protocol buffer (``tensorflow.tsl.profiler.protobuf.xplane_pb2``, shipped with TensorFlow). Its
conversion to trace_viewer JSON or tf_stats needs the tensorboard-plugin-profile (xprof) package, which the
framework images do not carry; the XSpace itself is plain: planes (``/host:CPU``, ``/device:GPU:N``) of lines
(threads, CUDA streams) of events (offset, duration, metadata name). What an op is, as TensorFlow 2.21 writes
it (captured in tests/data/kernel_profiles/):

* graph mode (tf.function): an event ``scope/node:Type`` whose metadata ``display_name`` is the op type, on a
  ``tf_Compute`` thread line; keyed by its type, or ``<optimizer scope>/<Type>`` inside the optimizer's scope
  (``sgd/Mul``: the update, as PyTorch's ``Optimizer.step``);
* eager mode: ``EagerLocalExecute: Type`` on the Python thread's line, keyed by its type;
* XLA (jit_compile): thunk events (``convolution.1``, ``multiply_reduce_fusion.3``) nested in
  ``ThunkExecutor::Execute``, keyed by the HLO name without its numeric suffixes;
* a function call (``__inference_step_123``) is not an op: its ops are counted, not the call.

Self time: an op's duration less the durations of the ops nested in it on the same line. GPU planes: every
event of a stream line is a kernel or a copy (they do not nest), keyed by its name. Pure (no TensorFlow
import) except :func:`read_xspace`, which parses the bytes.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.workloads.kernel_profile import OpTotal

PS = 1e-12
MAX_XPLANE_BYTES = 256 * 1024**2  # one profile of a few steps; a larger one is refused (fewer profile_steps)
MAX_FILES = 16
EAGER = "EagerLocalExecute: "
THUNK_PARENT = "ThunkExecutor::Execute"
OPTIMIZER_SCOPE = re.compile(r"^(sgd|adam\w*|rmsprop|adagrad|loss_scale_optimizer)(_\d+)?$", re.IGNORECASE)
HLO_SUFFIX = re.compile(r"([._]\d+)+$")
# Lines of a GPU plane that xprof derives from the kernels (a second view of the same time), not streams.
DERIVED_LINES = ("xla modules", "xla ops", "tensorflow ops", "tensorflow name scope", "steps", "xla tracemes",
                 "source code", "framework name scope", "launch stats", "host threads")


@dataclass(frozen=True)
class Event:
    """One XEvent, resolved: its metadata's name and display name, offset and duration in picoseconds."""

    name: str
    display: str
    offset_ps: int
    duration_ps: int


def host_key(ev: Event, under_thunks: bool) -> str | None:
    """The op key of a host event, or None when it is not an op (runtime bookkeeping, a function call)."""
    if ev.display and ":" in ev.name:  # graph op "scope/node:Type"
        if ev.display.startswith("__"):
            return None
        scope = ev.name.split("/", 1)[0] if "/" in ev.name else ""
        return f"{scope.lower()}/{ev.display}" if OPTIMIZER_SCOPE.match(scope) else ev.display
    if ev.name.startswith(EAGER):
        kind = ev.name[len(EAGER):].strip()
        return None if not kind or kind.startswith("__") else kind
    if under_thunks and not ev.name.startswith("end: ") and ev.name != THUNK_PARENT and "::" not in ev.name:
        return HLO_SUFFIX.sub("", ev.name) or ev.name
    return None


def line_self_times(events: list[Event]) -> list[tuple[str, float]]:
    """(op key, self seconds) of every op on one line: nesting by time, an op's time less its nested ops'."""
    evs = sorted((e for e in events if e.duration_ps > 0), key=lambda e: (e.offset_ps, -e.duration_ps))
    stack: list[tuple[int, Event, int]] = []  # (end_ps, event, index into out or -1)
    out: list[list[Any]] = []
    for e in evs:
        while stack and stack[-1][0] <= e.offset_ps:
            stack.pop()
        under = any(s[1].name == THUNK_PARENT for s in stack)
        key = host_key(e, under)
        idx = -1
        if key is not None:
            parent = next((s[2] for s in reversed(stack) if s[2] >= 0), -1)
            if parent >= 0:
                out[parent][1] -= e.duration_ps
            out.append([key, e.duration_ps])
            idx = len(out) - 1
        stack.append((e.offset_ps + e.duration_ps, e, idx))
    return [(k, max(0, d) * PS) for k, d in out]


def space_totals(planes: list[tuple[str, list[tuple[str, list[Event]]]]]) -> dict[str, list[OpTotal]]:
    """Per domain ("cpu": host ops, "gpu": device kernels), per key, self seconds and calls.

    ``planes``: (plane name, [(line name, events)]) as :func:`read_xspace` resolves them.
    """
    acc: dict[str, dict[str, list[float]]] = {"cpu": {}, "gpu": {}}
    for plane, lines in planes:
        if plane.startswith("/host:CPU"):
            for _, events in lines:
                for key, s in line_self_times(events):
                    a = acc["cpu"].setdefault(key, [0.0, 0])
                    a[0] += s
                    a[1] += 1
        elif plane.startswith("/device:GPU"):
            for line, events in lines:
                if line.strip().lower() in DERIVED_LINES:
                    continue
                for e in events:
                    if e.duration_ps > 0:
                        a = acc["gpu"].setdefault(e.name, [0.0, 0])
                        a[0] += e.duration_ps * PS
                        a[1] += 1
    return {d: [OpTotal(k, s, int(c)) for k, (s, c) in v.items()] for d, v in acc.items()}


def resolve(space: Any) -> list[tuple[str, list[tuple[str, list[Event]]]]]:
    """An XSpace message as (plane, [(line, events)]) with each event's metadata resolved."""
    out = []
    for pl in space.planes:
        meta = pl.event_metadata
        lines = []
        for ln in pl.lines:
            evs = []
            for ev in ln.events:
                md = meta[ev.metadata_id] if ev.metadata_id in meta else None
                evs.append(Event(md.name if md is not None else "", md.display_name if md is not None else "",
                                 int(ev.offset_ps), int(ev.duration_ps)))
            lines.append((ln.display_name or ln.name, evs))
        out.append((pl.name, lines))
    return out


def find_xplanes(logdir: Path) -> list[Path]:
    """The ``*.xplane.pb`` files under ``logdir/plugins/profile/*/`` (regular files only, no link followed)."""
    base = logdir / "plugins" / "profile"
    found: list[Path] = []
    try:
        runs = [e for e in os.scandir(base) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    for run in runs:
        for e in os.scandir(run.path):
            if e.name.endswith(".xplane.pb") and e.is_file(follow_symlinks=False):
                found.append(Path(e.path))
    return sorted(found)[:MAX_FILES]


def read_xspace(path: Path) -> list[tuple[str, list[tuple[str, list[Event]]]]]:
    """Parse one xplane.pb (a regular file under MAX_XPLANE_BYTES, never through a link)."""
    from kit.workloads.common import WorkloadError

    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_XPLANE_BYTES:
            raise WorkloadError(f"{path}: TensorFlow's profile is not a regular file of at most {MAX_XPLANE_BYTES} "
                                f"bytes ({st.st_size}); profile fewer steps (profile_steps)")
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(MAX_XPLANE_BYTES + 1)
    finally:
        os.close(fd)
    return parse_xspace(data)


def parse_xspace(data: bytes, pb2: Any = None) -> list[tuple[str, list[tuple[str, list[Event]]]]]:
    """The planes of an XSpace's bytes (a malformed file is a WorkloadError). ``pb2``: the generated module
    (default TensorFlow's own ``tensorflow.tsl.profiler.protobuf.xplane_pb2``, importing TensorFlow)."""
    if pb2 is None:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2

        pb2 = xplane_pb2
    from kit.workloads.common import WorkloadError

    space = pb2.XSpace()
    try:
        space.ParseFromString(data)
    except Exception as exc:  # google.protobuf.message.DecodeError, by name: protobuf has no stubs in the type check
        if type(exc).__name__ != "DecodeError":
            raise
        raise WorkloadError(f"TensorFlow's profile is not an XSpace ({exc})") from None
    return resolve(space)
