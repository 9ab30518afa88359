"""The numbers a run recorded in its spec (manifest.json's ``spec``), held to the ranges a spec file is held to."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from kit.errors import StoreError
from kit.spec.convert import convert_value, field_types, got_text
from kit.spec.limits import FAMILIES, UNITS
from kit.spec.sections import Design, Telemetry
from kit.spec.workload import Workload
from kit.spec_invalid import Invalid

# another kit version may name one this kit does not know, and no reader computes with them.
_RECORDED: tuple[tuple[str, Any, Any, tuple[str, ...] | None], ...] = (
    ("design", Design, lambda: Design(repetitions=2), None),
    ("telemetry", Telemetry, Telemetry, ("period_s", "baseline_s", "cooldown_band_c", "cooldown_max_s", "ambient_c",
                              "ambient_sensor")),
    ("workload", Workload, lambda: Workload(name="-", batch_size=1, epochs=1, learning_rate=0.1),
     ("batch_size", "epochs", "learning_rate", "steps_per_epoch", "momentum", "infer_batch_size", "warmup_steps",
      "device", "threads", "tf32", "min_phase_s", "expected_accuracy")),
)
FIX_RECORDED = "the manifest was edited or made by another tool; restore it from the run's bundle or re-run the study"


def check_recorded(spec: Any, where: str) -> None:
    """The numbers a run recorded in its spec, held to the ranges a spec file is held to when loaded (a crafted
    ``design.alpha`` of 0.9 or a sampling period of 1e-9 is a StoreError naming the key path, never used)."""
    if not isinstance(spec, Mapping):
        return  # its shape is kit.records.check_manifest's to refuse
    for key, cls, make, names in _RECORDED:
        table = spec.get(key)
        if not isinstance(table, Mapping):
            continue
        base = make()
        hints = field_types(cls)
        known = {f.name for f in dataclasses.fields(base)}
        keep = [n for n in (names or sorted(known)) if n in table and n in known]
        try:
            values = {n: convert_value(hints[n], table[n], f"spec.{key}.{n}") for n in keep}
            obj = dataclasses.replace(base, **values)
            (obj.check_numbers if isinstance(obj, Workload) else obj.check)(f"spec.{key}")
        except Invalid as exc:
            raise StoreError(f"the recorded {exc.path} is out of range: expected {exc.expected}{got_text(exc.got)}",
                             where=f"{where}: {exc.path}", fix=FIX_RECORDED) from None
    hyps = spec.get("hypotheses")
    for i, h in enumerate(hyps if isinstance(hyps, list) else []):
        # the Holm family and the unit of test decide which p-values are adjusted together: a crafted family
        # would make a family of one (no adjustment) that the spec never stated
        if not isinstance(h, Mapping):
            continue
        for key, allowed in (("family", FAMILIES), ("unit", (*UNITS, None))):
            if key in h and h[key] not in allowed:
                raise StoreError(f"the recorded spec.hypotheses[{i}].{key} is {h[key]!r}, not one of "
                                 f"{', '.join(str(a) for a in allowed)}"[:300],
                                 where=f"{where}: spec.hypotheses[{i}].{key}", fix=FIX_RECORDED)
