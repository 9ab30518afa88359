"""The spec format's bounds and vocabularies: the schema version, the limits that keep a crafted or mistyped spec
from exhausting memory or waiting forever (each error names its limit), and the words a key may take."""

from __future__ import annotations

import re

SPEC_SCHEMA = 1
# Bounds that keep a crafted or mistyped spec from exhausting memory or waiting forever; each error names its limit.
MAX_INT = 10**9
MAX_REPETITIONS = 10_000
MAX_CONFIGS = 10_000
MAX_PLAN_TRIALS = 200_000
MAX_TIMEOUT_S = 7 * 24 * 3600.0
MAX_WAIT_S = 3600.0
MAX_SPEC_BYTES = 1 << 20  # an experiment file is a few kilobytes
PHASES: tuple[str, ...] = ("warmup", "train", "infer")
BLOCKING = ("interleaved", "sequential")
UNITS = ("trial", "configuration")  # the unit a hypothesis is tested on (kit/analysis/design.py)
DEVICES = ("auto", "cpu", "gpu")
TF32_MODES = ("native", "off", "on")  # kit.workloads.device.TF32_MODES (not imported: the host reads no workload code)
COLLECTOR_NAMES = ("cpu", "memory", "hwmon", "nvml", "rapl")

# The air around a working computer (kit.collectors.ambient): a value outside is a misread or mislabelled sensor.
AMBIENT_PLAUSIBLE_C = (-30.0, 60.0)
AMBIENT_SETTING = re.compile(r"^(auto|off|[A-Za-z0-9_.\-]{1,64}:[ -~]{1,64})$")
FAMILIES = ("primary", "secondary")  # the Holm families a hypothesis may belong to

PROFILE_KEYS = ("description", "estimate_s")  # a profile's own keys, beside the sections it overrides
MAX_ESTIMATE_S = 366 * 24 * 3600  # a year: a paper's whole CPU protocol on a small host can take months
# (DLBench's ~90 days on 2 cores); an estimate is stated as it is, even where no budget (30 days at most) fits it
