"""``[workload]`` and ``[dataset]``: the model and its protocol (identical in every framework) and the data it uses.

Which workloads a spec may name is the kit's registry, plus a study folder's own while its spec is parsed
(:data:`PARSE_WORKLOADS`, set for one parse: never a module-global registry that parsing a spec would mutate).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, cast

from kit.records import JsonValue
from kit.spec.limits import DEVICES, MAX_WAIT_S, TF32_MODES
from kit.spec_invalid import Invalid
from kit.workloads import MOVED_TO_STUDIES, WORKLOADS, WorkloadInfo

# One configuration of the grid and cases (Spec.configurations): {"case": its id, grid key: value as written, ...};
# plan.Trial records it as is.
Config = dict[str, JsonValue]
# A workload key's value once converted: as written, or a tuple for a tuple-typed key (expected_accuracy, a
# workload's tuple Param), None for an optional key left unset (threads).
SpecValue = JsonValue | tuple[JsonValue, ...]

# The workloads a parse may name: the kit's, plus the study folder's own while its spec is parsed. Set for the
# duration of one parse_spec call (never a module-global registry that parsing a spec would mutate).
PARSE_WORKLOADS: ContextVar[Mapping[str, WorkloadInfo] | None] = ContextVar("kit_spec_workloads", default=None)


def known_workloads() -> Mapping[str, WorkloadInfo]:
    return PARSE_WORKLOADS.get() or WORKLOADS


def unknown_workload(path: str, name: object) -> Invalid:
    """An unknown [workload].name; for a workload that moved into a study folder, where it went."""
    if isinstance(name, str) and name in MOVED_TO_STUDIES:
        folder = f"experiments/{MOVED_TO_STUDIES[name]}"
        return Invalid(path, f"a workload this kit defines; {name!r} is defined by the study folder {folder} "
                       "([study] table)", name,
                       fix=f"run the folder (kit run {folder}); a run made by an earlier kit is resumed or verified "
                       "with that kit (its version: manifest.kit.version)")
    return Invalid(path, f"a known workload ({', '.join(sorted(known_workloads()))})", name)


@dataclass(frozen=True)
class Dataset:
    """Which data, from where, and how much of it."""

    name: str
    source: str = "full"
    train_size: int | None = None
    test_size: int | None = None

    def check(self, p: str) -> None:
        from kit.datasets import DATASETS

        if self.name not in DATASETS:
            raise Invalid(f"{p}.name", f"a known dataset ({', '.join(sorted(DATASETS))})", self.name)
        info = DATASETS[self.name]
        if self.source not in info.sources:
            raise Invalid(f"{p}.source", f"one of {', '.join(info.sources)}", self.source)
        for key in ("train_size", "test_size"):
            val = getattr(self, key)
            if val is not None and val < 1:
                raise Invalid(f"{p}.{key}", "a positive number of examples", val)
        avail_train, avail_test = info.sizes(self.source, self.test_size)
        if self.train_size is not None and self.train_size > avail_train:
            raise Invalid(f"{p}.train_size", f"at most {avail_train} (the {self.source} training part)", self.train_size)
        if self.test_size is not None and self.test_size > avail_test:
            raise Invalid(f"{p}.test_size", f"at most {avail_test} (the {self.source} test part)", self.test_size)

    def n_train(self) -> int:
        from kit.datasets import DATASETS

        avail, _ = DATASETS[self.name].sizes(self.source, self.test_size)
        return self.train_size if self.train_size is not None else avail


@dataclass(frozen=True)
class Workload:
    """The model and its training/inference protocol (identical in every framework)."""

    name: str
    batch_size: int
    epochs: int
    learning_rate: float
    steps_per_epoch: int | None = None  # None: every full batch of the training set, each epoch
    optimizer: str = "sgd"
    momentum: float = 0.0
    infer_batch_size: int = 1000
    warmup_steps: int = 10
    device: str = "auto"
    threads: int | None = None
    # TF32 for float32 matmuls/convolutions, applied alike in both frameworks: native = each framework's default
    # (PyTorch: matmul off, cuDNN conv on; TensorFlow: both on), off, on
    tf32: str = "native"
    # a timed inference phase shorter than this repeats its full pass until it lasts this long (0 = one pass)
    min_phase_s: float = 0.0
    # [low, high]: the test accuracy (a fraction) a run of this profile and configuration should reach, and where
    # the figures come from in a comment beside it (the paper's reported accuracy, or runs measured with the kit);
    # a run far below it draws a threat (kit.analysis.accuracy_expected). [] declares none: workloads
    # on random inputs, synthetic stand-ins and smoke profiles, whose accuracy means nothing.
    expected_accuracy: tuple[float, ...] = ()
    params: dict[str, SpecValue] = field(default_factory=dict)  # the workload's own keys (see kit.workloads.Param)

    def check(self, p: str) -> None:
        if self.name not in known_workloads():
            raise unknown_workload(f"{p}.name", self.name)
        self.check_numbers(p)
        optimizers = known_workloads()[self.name].optimizers
        if self.optimizer not in optimizers:
            raise Invalid(f"{p}.optimizer", f"one of {', '.join(map(repr, optimizers))} (the optimizers both builds "
                          f"of {self.name} implement)", self.optimizer)
        declared = known_workloads()[self.name].params
        for key, val in self.params.items():
            prm = declared[key]
            if prm.choices and val not in prm.choices:
                raise Invalid(f"{p}.{key}", f"one of {', '.join(map(str, prm.choices))}", val)
            if prm.minimum is not None and isinstance(val, (int, float)) and val < prm.minimum:
                raise Invalid(f"{p}.{key}", f"a value >= {prm.minimum}", val)

    def check_numbers(self, p: str) -> None:
        """The keys every workload has (sizes, rates, device, threads): also checked when a run's recorded spec is
        read (:func:`check_recorded`), where the workload itself may be a study's and not known here."""
        for key, top in (("batch_size", 1 << 20), ("epochs", 100_000), ("steps_per_epoch", 10**8),
                         ("infer_batch_size", 1 << 20)):
            val = getattr(self, key)
            if val is not None and not 1 <= val <= top:
                raise Invalid(f"{p}.{key}", f"an integer in [1, {top}]", val)
        if not 0 <= self.warmup_steps <= 10**6:
            raise Invalid(f"{p}.warmup_steps", "an integer in [0, 1000000]", self.warmup_steps)
        if not 0 < self.learning_rate < 10:
            raise Invalid(f"{p}.learning_rate", "a number in (0, 10)", self.learning_rate)
        if not 0 <= self.momentum < 1:
            raise Invalid(f"{p}.momentum", "a number in [0, 1)", self.momentum)
        if self.device not in DEVICES:
            raise Invalid(f"{p}.device", f"one of {', '.join(DEVICES)}", self.device)
        if self.threads is not None and not 1 <= self.threads <= 4096:
            raise Invalid(f"{p}.threads", "an integer in [1, 4096], or leave it out", self.threads)
        if self.tf32 not in TF32_MODES:
            raise Invalid(f"{p}.tf32", f"one of {', '.join(TF32_MODES)} (native: each framework's default)", self.tf32)
        if not math.isfinite(self.min_phase_s) or not 0 <= self.min_phase_s <= MAX_WAIT_S:
            raise Invalid(f"{p}.min_phase_s", "a finite number of seconds >= 0 (0: one pass per phase)",
                          self.min_phase_s)
        acc = self.expected_accuracy
        if acc and not (len(acc) == 2 and 0 <= acc[0] <= acc[1] <= 1):
            raise Invalid(f"{p}.expected_accuracy", "[low, high] with 0 <= low <= high <= 1 (test accuracy as a "
                          "fraction), or [] for none", list(acc))

    def flat(self) -> dict[str, SpecValue]:
        """Common keys and the workload's own keys in one table (the harness's view)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "params"}
        return {**out, **self.params}

    def with_config(self, config: Mapping[str, SpecValue]) -> Workload:
        """This workload with a grid configuration applied (common keys or params)."""
        common = {k: v for k, v in config.items() if k in WORKLOAD_FIELDS}
        params = {**self.params, **{k: v for k, v in config.items() if k not in WORKLOAD_FIELDS}}
        # a grid or case value is held to its field's type and range by check(), not here
        return dataclasses.replace(self, **cast(Mapping[str, Any], common), params=params)


WORKLOAD_FIELDS = {f.name for f in dataclasses.fields(Workload)}
