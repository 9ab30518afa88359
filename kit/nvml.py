"""The one way the kit opens NVML: ``with nvml_session() as nv:`` (or :class:`NvmlSession` held open).

NVML counts its initialisations (each ``nvmlInit`` needs one ``nvmlShutdown``), so sessions nest and
a collector's session does not disturb a cool-down reader's. Nine hand-written init/try/finally blocks
used to each decide which exceptions mean "no NVML here" (``NVMLError``; ``OSError`` from a broken
library file; ``NVMLLibraryMismatchError``, which is not an ``NVMLError``; a missing nvidia-ml-py) and
whether shutdown errors matter. Here that is decided once: opening either yields the ``pynvml`` module
or raises :class:`kit.errors.NVMLError` with cause and fix, and a session shuts down exactly once per
successful init, quietly (a shutdown error can change no measurement already taken).

A caller that must never raise wraps the ``with`` in ``except NVMLError``; the translated error's
``cause`` is the reason to report. :func:`nvml_error` translates any pynvml exception the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from kit.errors import NVMLError

DEFAULT_FIX = "check that `nvidia-smi` works on this host"
MISMATCH_FIX = (
    "nvidia-ml-py is newer than this driver's NVML library: install the nvidia-ml-py release of the driver's "
    "branch (`nvidia-smi` prints the driver version; e.g. driver 550.x: pip install 'nvidia-ml-py<12.551'), "
    "or update the NVIDIA driver"
)
MISSING_FIX = "pip install nvidia-ml-py (a dependency of the kit: reinstall it with `make setup`)"


def _pynvml() -> ModuleType:
    try:
        import pynvml
    except ImportError as exc:
        raise NVMLError(f"nvidia-ml-py (pynvml) is not installed: {exc}", where="import pynvml", fix=MISSING_FIX) from exc
    return pynvml


def _fixes(nv: ModuleType) -> dict[int, str]:
    out = {
        "NVML_ERROR_LIBRARY_NOT_FOUND": (
            "install the NVIDIA driver on this host (it provides libnvidia-ml.so.1); collectors run on the host, "
            "not in the trial's container"
        ),
        "NVML_ERROR_DRIVER_NOT_LOADED": "load the NVIDIA kernel driver; `nvidia-smi` must work on this host",
        "NVML_ERROR_NO_PERMISSION": "run as a user allowed to open /dev/nvidia* (or as root)",
        "NVML_ERROR_LIB_RM_VERSION_MISMATCH": (
            "the driver was updated but the old kernel module is still loaded: reboot (or reload the nvidia modules)"
        ),
        "NVML_ERROR_GPU_IS_LOST": "the GPU fell off the bus: check `dmesg` for Xid errors, then reset the GPU or reboot",
        "NVML_ERROR_RESET_REQUIRED": "reset the GPU (nvidia-smi -r) or reboot",
    }
    return {getattr(nv, k): v for k, v in out.items() if hasattr(nv, k)}


def nvml_error(exc: BaseException, where: str) -> NVMLError:
    """Translate a pynvml exception (an NVMLError or not) into the kit's error tree (cause, where, fix)."""
    if isinstance(exc, NVMLError):
        return exc
    nv = _pynvml()
    mismatch = getattr(nv, "NVMLLibraryMismatchError", None)
    if mismatch is not None and isinstance(exc, mismatch):
        return NVMLError(f"NVML library mismatch: {exc}", where=where, fix=MISMATCH_FIX)
    if isinstance(exc, OSError):
        return NVMLError(f"cannot load NVML: {exc}", where=where, fix=DEFAULT_FIX)
    if not isinstance(exc, nv.NVMLError):
        return NVMLError(f"NVML: {type(exc).__name__}: {exc}", where=where, fix=DEFAULT_FIX)
    code = getattr(exc, "value", None)
    fix = _fixes(nv).get(code, DEFAULT_FIX) if isinstance(code, int) else DEFAULT_FIX
    return NVMLError(f"NVML: {exc}", where=where, fix=fix)


class NvmlSession:
    """An NVML initialisation held open until :meth:`close` (idempotent), for readers that poll."""

    def __init__(self) -> None:
        self._nv: ModuleType | None = None

    @property
    def is_open(self) -> bool:
        return self._nv is not None

    def open(self) -> ModuleType:
        """Initialise NVML (once per session); the pynvml module, or NVMLError saying why not."""
        if self._nv is not None:
            return self._nv
        nv = _pynvml()
        try:
            nv.nvmlInit()
        except Exception as exc:  # NVMLError, OSError (broken library), NVMLLibraryMismatchError, ...
            raise nvml_error(exc, "nvmlInit") from exc
        self._nv = nv
        return nv

    def close(self) -> None:
        nv, self._nv = self._nv, None
        if nv is None:
            return
        try:
            nv.nvmlShutdown()
        except Exception:  # nothing measured depends on a clean shutdown
            pass

    def __enter__(self) -> ModuleType:
        return self.open()

    def __exit__(self, *exc: Any) -> None:
        self.close()


@contextmanager
def nvml_session() -> Iterator[ModuleType]:
    """``with nvml_session() as nv:``: NVML initialised for the block, shut down after it."""
    with NvmlSession() as nv:
        yield nv


def text(value: Any) -> str:
    """An NVML string (bytes in older nvidia-ml-py releases, str in newer)."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def cuda_version(v: int | None) -> str | None:
    """NVML's integer CUDA driver version (12040) as text ("12.4")."""
    return None if v is None else f"{v // 1000}.{(v % 1000) // 10}"
