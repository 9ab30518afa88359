"""Which device each trial computes on, and which GPUs it gets (host side, before the run directory exists).

The spec's ``workload.device`` is ``auto``, ``cpu`` or ``gpu``. On the host,
``auto`` means the GPU as soon as NVML sees at least one GPU that
``container.gpus`` allows ("all", "none" or indices such as "0,1"); a
framework that cannot reach that GPU then fails the trial with the cause
(never a silent CPU run). ``gpu`` on a host without an allowed GPU is a
:class:`~kit.errors.KitError` before anything is written.

A trial gets the first N allowed GPUs (in the order ``container.gpus`` lists
them, NVML order for "all"): N = the workload's ``devices`` for the
data-parallel strategies (``dp``/``ddp`` of ``zoo_distributed``), else 1.
Indices are NVML indices, which are PCI bus order: the backends set
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so CUDA numbers the GPUs the same way, and
Docker's ``device_ids`` are NVML indices too. The collectors and the
cool-down then watch only these GPUs.

The NVML inventory here never raises: a missing driver, an old driver that
does not match nvidia-ml-py (``NVMLLibraryMismatchError``, not an
``NVMLError``) or a lost GPU leave what could be read and a note why.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from kit.errors import KitError, NVMLError
from kit.nvml import NvmlSession
from kit.records import JsonTable
from kit.spec.workload import SpecValue

DIST_STRATEGIES = ("dp", "ddp")
NO_GPU_FIX = ("run on a host where `nvidia-smi -L` lists a GPU (install the NVIDIA driver), allow GPUs with "
              "[container] gpus = \"all\", or set [workload] device = \"cpu\" (or \"auto\") to measure the CPU on purpose")

Workload = Mapping[str, SpecValue]  # a workload's flat table (kit.spec.workload.Workload.flat)


class InventoryJson(TypedDict):
    gpus: list[JsonTable]
    note: str


class DeviceRecordFields(TypedDict):
    """The device fields of a trial record."""

    device: str
    gpus: list[JsonTable]


class DevicesJson(TypedDict):
    """The manifest's ``devices``: the host's GPUs, what the spec allows, and how the trials resolved."""

    host_gpus: list[JsonTable]
    nvml_note: str
    container_gpus: str
    allowed: list[int]
    requested: list[str]
    resolved: list[str]
    trial_gpus: list[tuple[int, ...]]
    notes: list[str]


@dataclass(frozen=True)
class Gpu:
    """One GPU as NVML numbers and names it."""

    index: int
    uuid: str | None = None
    name: str | None = None

    def as_dict(self) -> JsonTable:
        return {"index": self.index, "uuid": self.uuid, "name": self.name}


@dataclass(frozen=True)
class Inventory:
    """What NVML sees on this host: the GPUs it could name, and a note when it saw none or failed."""

    gpus: tuple[Gpu, ...] = ()
    note: str = ""

    def as_dict(self) -> InventoryJson:
        return {"gpus": [g.as_dict() for g in self.gpus], "note": self.note}


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def nvml_inventory() -> Inventory:
    """Index, UUID and name of every GPU NVML sees; never raises (an empty inventory says why)."""
    try:
        session = NvmlSession()
        pynvml = session.open()
    except NVMLError as exc:  # no nvidia-ml-py, no driver, a broken library, a library mismatch
        return Inventory((), f"NVML unavailable ({exc.cause})")
    notes: list[str] = []
    gpus: list[Gpu] = []
    try:
        try:
            count = int(pynvml.nvmlDeviceGetCount())
        except Exception as exc:
            return Inventory((), f"NVML cannot count GPUs ({type(exc).__name__}: {exc})")
        for i in range(count):
            try:
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
            except Exception as exc:  # a lost GPU is not given to any trial
                notes.append(f"GPU {i} left out: no handle ({type(exc).__name__}: {exc})")
                continue
            gpus.append(Gpu(i, _safe(pynvml.nvmlDeviceGetUUID, h), _safe(pynvml.nvmlDeviceGetName, h)))
        if not count:
            notes.append("NVML works but reports no GPU")
    finally:
        session.close()
    return Inventory(tuple(gpus), "; ".join(notes))


def _safe(fn: Any, h: Any) -> str | None:
    try:
        return _text(fn(h))
    except Exception:
        return None


def allowed_gpus(inventory: Inventory, container_gpus: str = "all") -> list[Gpu]:
    """The GPUs trials may use: ``container.gpus`` applied to what NVML sees.

    An index the spec lists but NVML does not see is an error when NVML sees
    GPUs at all (a typo or another node); on a host without GPUs the list is
    simply empty.
    """
    g = container_gpus.replace(" ", "")
    if g == "none":
        return []
    if g == "all":
        return list(inventory.gpus)
    wanted = [int(x) for x in g.split(",") if x]
    by_index = {gpu.index: gpu for gpu in inventory.gpus}
    missing = [i for i in wanted if i not in by_index]
    if missing and inventory.gpus:
        seen = ", ".join(str(x.index) for x in inventory.gpus)
        raise KitError(f"container.gpus lists GPU {missing[0]}, which NVML does not see (it sees {seen})",
                       where="container.gpus", fix="list NVML indices as `nvidia-smi -L` shows them, or use \"all\"")
    return [by_index[i] for i in dict.fromkeys(wanted) if i in by_index]


def _devices(workload: Workload) -> int:
    """``devices`` of a data-parallel workload (1 when unset)."""
    n = workload.get("devices")
    return int(n) if isinstance(n, (int, float, str)) and n else 1


def gpus_per_trial(workload: Workload) -> int:
    """How many GPUs one trial gets: ``devices`` for a data-parallel strategy, else one."""
    if workload.get("strategy") in DIST_STRATEGIES:
        return max(1, _devices(workload))
    return 1


@dataclass(frozen=True)
class TrialDevice:
    """The resolved device of one trial and the GPUs it is given."""

    requested: str
    device: str  # cpu | gpu
    gpus: tuple[Gpu, ...] = ()
    note: str = ""

    @property
    def indices(self) -> list[int]:
        return [g.index for g in self.gpus]

    @property
    def uuids(self) -> list[str]:
        return [g.uuid for g in self.gpus if g.uuid]

    def request_fields(self) -> dict[str, Any]:
        """The request.json fields of the contract."""
        return {"device": self.device, "device_requested": self.requested, "gpu_indices": self.indices,
                "gpu_uuids": self.uuids}

    def record_fields(self) -> DeviceRecordFields:
        """The trial record fields of the contract."""
        return {"device": self.device, "gpus": [g.as_dict() for g in self.gpus]}


@dataclass
class DevicePlan:
    """The host's GPUs as the spec allows them; resolves each trial's workload (see the module docstring)."""

    inventory: Inventory
    container_gpus: str = "all"
    allowed: list[Gpu] = field(default_factory=list)

    @classmethod
    def build(cls, container_gpus: str = "all", inventory: Inventory | None = None) -> DevicePlan:
        inv = inventory if inventory is not None else nvml_inventory()
        return cls(inv, container_gpus, allowed_gpus(inv, container_gpus))

    def resolve(self, workload: Workload) -> TrialDevice:
        """The device and GPUs of a trial of ``workload`` (its flat table); KitError for "gpu" without one."""
        requested = str(workload.get("device", "auto"))
        n = gpus_per_trial(workload)
        dist = str(workload.get("dist_device", "")) if "strategy" in workload else ""
        if requested == "cpu" or dist == "cpu":
            return TrialDevice(requested, "cpu", (), "cpu asked for")
        if not self.allowed:
            if requested == "gpu":
                raise KitError(f"the workload asks for device \"gpu\" but {self._why_none()}", where="workload.device",
                               fix=NO_GPU_FIX)
            return TrialDevice(requested, "cpu", (), f"auto: {self._why_none()}")
        if dist == "auto" and requested == "auto" and len(self.allowed) < _devices(workload):
            # zoo_distributed: every strategy (the one-device baseline too) runs on the same kind of device
            return TrialDevice(requested, "cpu", (), f"auto: {len(self.allowed)} GPU(s) allowed, "
                                                     f"{workload.get('devices')} needed by the data-parallel strategies")
        return TrialDevice(requested, "gpu", tuple(self.allowed[:n]),
                           "" if len(self.allowed) >= n else f"{n} GPUs asked for, {len(self.allowed)} allowed")

    def _why_none(self) -> str:
        if self.inventory.gpus and self.container_gpus.replace(" ", "") == "none":
            return f"container.gpus = \"none\" allows none of the {len(self.inventory.gpus)} GPU(s) NVML sees"
        return "NVML sees no GPU on this host" + (f" ({self.inventory.note})" if self.inventory.note else "")

    def check(self, workloads: Iterable[Workload]) -> DevicesJson:
        """Resolve every workload (raising before anything is written); the manifest's ``devices`` entry."""
        resolved = [self.resolve(wl) for wl in workloads]
        return {
            "host_gpus": [g.as_dict() for g in self.inventory.gpus],
            "nvml_note": self.inventory.note,
            "container_gpus": self.container_gpus,
            "allowed": [g.index for g in self.allowed],
            "requested": sorted({r.requested for r in resolved}),
            "resolved": sorted({r.device for r in resolved}),
            "trial_gpus": sorted({tuple(r.indices) for r in resolved if r.indices}),
            "notes": sorted({r.note for r in resolved if r.note}),
        }

    @property
    def any_gpu(self) -> bool:
        return bool(self.allowed)
