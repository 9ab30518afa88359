"""Framework-neutral pieces shared by the workloads (runs inside the container).

Only the standard library and numpy are imported here: this module is loaded
by the harness in framework images, which carry none of the host-side
dependencies. Everything that must be identical across frameworks for a fair
comparison lives here, computed once in numpy: the data subset and its order,
and the initial weights.
"""

from __future__ import annotations

import gzip
import json
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

# IDX type codes (LeCun's format): 0x08 unsigned byte is the only one MNIST uses,
# the rest are accepted so that a malformed file fails on its shape, not its type.
_IDX_DTYPES: dict[int, npt.DTypeLike] = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


class WorkloadError(Exception):
    """A workload cannot run (bad input data, unsupported option).

    The harness reports it as the trial's error; the host side translates it.
    """


def read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (optionally gzip-compressed) into a numpy array."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as fh:
            raw = fh.read()
    except (OSError, EOFError) as exc:
        raise WorkloadError(f"{path}: cannot read IDX file ({exc})") from exc
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise WorkloadError(f"{path}: not an IDX file (bad magic number)")
    type_code, ndim = raw[2], raw[3]
    if type_code not in _IDX_DTYPES:
        raise WorkloadError(f"{path}: unknown IDX element type 0x{type_code:02x}")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise WorkloadError(f"{path}: truncated IDX header")
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = np.dtype(_IDX_DTYPES[type_code])
    expected = int(np.prod(shape)) * dtype.itemsize
    if len(raw) - header != expected:
        raise WorkloadError(
            f"{path}: IDX body has {len(raw) - header} bytes, header says {expected} for shape {shape}"
        )
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)


MNIST_FILES = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}


def load_mnist(
    data_dir: Path, source: str, train_size: int | None, test_size: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """MNIST as float32 images in [0, 1] (N, 28, 28) and int64 labels.

    ``source="full"`` uses the official 60k/10k split; ``"t10k_split"`` splits
    the 10k test set into a training part (its first images) and a test part
    (its last images), for hosts that only have the test set.
    """
    def pair(kind: str) -> tuple[np.ndarray, np.ndarray]:
        x = read_idx(data_dir / MNIST_FILES[f"{kind}_images"])
        y = read_idx(data_dir / MNIST_FILES[f"{kind}_labels"])
        if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
            raise WorkloadError(f"{data_dir}: MNIST {kind} images {x.shape} and labels {y.shape} disagree")
        return x, y

    if source == "full":
        x_tr, y_tr = pair("train")
        x_te, y_te = pair("test")
    elif source == "t10k_split":
        x, y = pair("test")
        n_test = test_size if test_size is not None else len(x) // 5
        x_tr, y_tr, x_te, y_te = x[: len(x) - n_test], y[: len(x) - n_test], x[len(x) - n_test :], y[len(x) - n_test :]
    else:
        raise WorkloadError(f"unknown MNIST source {source!r} (expected 'full' or 't10k_split')")
    if train_size is not None:
        if train_size > len(x_tr):
            raise WorkloadError(f"train_size {train_size} exceeds the {len(x_tr)} training images available")
        x_tr, y_tr = x_tr[:train_size], y_tr[:train_size]
    if test_size is not None:
        if test_size > len(x_te):
            raise WorkloadError(f"test_size {test_size} exceeds the {len(x_te)} test images available")
        x_te, y_te = x_te[:test_size], y_te[:test_size]
    scale = np.float32(1.0 / 255.0)
    return (
        x_tr.astype(np.float32) * scale,
        y_tr.astype(np.int64),
        x_te.astype(np.float32) * scale,
        y_te.astype(np.int64),
    )


def data_order(n: int, seed: int) -> np.ndarray:
    """The permutation of training examples both frameworks use in one block."""
    return np.random.default_rng([seed, 1]).permutation(n)


def glorot_uniform(shape: tuple[int, ...], fan_in: int, fan_out: int, rng: np.random.Generator) -> np.ndarray:
    """Glorot/Xavier uniform (Keras' default), drawn once in numpy for both frameworks."""
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=shape).astype(np.float32)


class DeviceUnavailable(WorkloadError):
    """The trial asked for a GPU (or was given one) and cannot compute on it as asked.

    Never a silent CPU run: the harness records status ``error`` with this
    message and exits with its own code (6), so the runner and the report say
    *why* the arm has no data. ``cause`` says what is wrong, ``fix`` what to do.
    """

    def __init__(self, cause: str, fix: str) -> None:
        self.cause, self.fix = cause, fix
        super().__init__(f"{cause} | fix: {fix}")


class SkipTrial(Exception):
    """A trial that cannot run on this host by design (e.g. DataParallel without two GPUs).

    The harness records status ``skipped`` with this reason and exit code 5;
    it is not a failure and the run goes on.
    """


_CAP: dict[str, int] = {}  # "mb": the cap this process applied (read by memory_capped)


def memory_capped() -> bool:
    """Whether :func:`apply_memory_cap` capped this process (then an allocator's failure is the cap's doing)."""
    return _CAP.get("mb", 0) > 0


def apply_memory_cap(cap_mb: int) -> None:
    """Cap this process's data segment at its current size plus ``cap_mb`` MiB (Linux RLIMIT_DATA).

    A real allocation limit: allocations beyond it fail inside the framework's
    allocator the way device memory exhaustion does, so a CPU-only host can
    exercise the out-of-memory path deterministically. 0 leaves no cap.
    """
    if cap_mb <= 0:
        return
    _CAP["mb"] = cap_mb
    import resource

    with open("/proc/self/status", encoding="ascii") as fh:
        fields = dict(line.split(":", 1) for line in fh if ":" in line)
    used_kb = int(fields["VmData"].split()[0]) if "VmData" in fields else 0
    limit = (used_kb * 1024) + cap_mb * 2**20
    resource.setrlimit(resource.RLIMIT_DATA, (limit, resource.getrlimit(resource.RLIMIT_DATA)[1]))


def die_with_parent(parent_cmd: str | None = None) -> None:
    """Ask Linux to SIGKILL this process when its parent dies (PR_SET_PDEATHSIG); no-op elsewhere.

    For processes a trial starts in their own session (torchrun's DDP ranks):
    a tree kill by process group misses them, and a killed parent would leave
    them running, holding memory (GPU memory on a GPU host) under a resumed
    run. Called first thing in the child (or as ``preexec_fn``). If the parent
    died before the call took effect the child has been re-parented already:
    with ``parent_cmd`` the child exits unless its parent's command line holds
    that text; without it, unless the parent is the one seen before the call.
    """
    import sys

    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    now = os.getppid()
    if now != parent:
        os._exit(1)
    if parent_cmd is not None:
        try:
            with open(f"/proc/{now}/cmdline", "rb") as fh:
                cmd = fh.read(65536).replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            cmd = ""
        if parent_cmd not in cmd:
            os._exit(1)


OOM_TEXT = ("out of memory", "not enough memory", "can't allocate memory", "cannot allocate memory",
            "oom when allocating", "failed to allocate")


# oneDNN reports a failed allocation while creating a kernel ("primitive") as this, without the cause
# (PyTorch's ideep wrapper drops dnnl_out_of_memory from the message); it is an out-of-memory only when
# this process runs under apply_memory_cap's allocation limit, an error otherwise.
CAPPED_OOM_TEXT = ("could not create a primitive",)


def oom_text(exc: BaseException) -> bool:
    """Whether an exception's text is an allocation failure (any framework's wording)."""
    msg = str(exc).lower()
    if memory_capped() and any(t in msg for t in CAPPED_OOM_TEXT):
        return True
    return isinstance(exc, MemoryError) or any(t in msg for t in OOM_TEXT)


def process_cpu_s() -> float:
    """User + system CPU seconds of the trial's whole process tree (every DDP rank, every worker: see
    kit.workloads.tree_cpu), with the children its processes have waited for."""
    from kit.workloads.tree_cpu import tree_cpu_s

    return tree_cpu_s()


class Markers:
    """Writes the harness protocol's JSON lines (phase start/end, events).

    ``sync`` is called before every clock read so that queued device work is
    finished and the timestamp is true (``torch.cuda.synchronize`` and so on).
    """

    def __init__(self, path: Path, sync: Callable[[], None] | None = None) -> None:
        self.path = path
        self.sync = sync or (lambda: None)
        self._fh = path.open("a", encoding="utf-8")
        self._open: dict[str, float] = {}

    def event(self, event: str, **fields: Any) -> None:
        """One JSON line; ``cpu_s`` is the CPU time of the trial's whole process tree, which the
        host subtracts from the host's busy time over a phase to find the CPU time of everything else
        (kit.disturbance)."""
        rec = {"event": event, "t": time.time(), "t_mono": time.monotonic(), "cpu_s": process_cpu_s(), **fields}
        self._fh.write(json.dumps(rec) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def start(self, phase: str) -> float:
        """Synchronise, then mark the start of ``phase``; returns perf_counter."""
        self.sync()
        self.event("phase_start", phase=phase)
        t0 = time.perf_counter()
        self._open[phase] = t0
        return t0

    def end(self, phase: str, **fields: Any) -> float:
        """Synchronise, then mark the end of ``phase``; returns its duration in seconds."""
        self.sync()
        dt = time.perf_counter() - self._open.pop(phase)
        self.event("phase_end", phase=phase, duration_s=dt, **fields)
        return dt

    def close(self) -> None:
        self._fh.close()
