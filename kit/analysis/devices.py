"""The devices and precisions the trials computed with, checked across arms and against the host.

A comparison of frameworks means something only when every arm computed on
the same device at the same precision. Each trial reports from inside (its
``env``, contract of issue 13): ``device_kind`` ("cpu" | "gpu"), ``device_name``,
``gpu_uuid`` / ``gpu_uuids``, ``tf32`` ({mode, matmul, conv}) and ``precision``;
the host records in the trial file the GPUs it gave the trial and sampled
(``gpus``: index, uuid, name). Old records lack these fields: the kind is
inferred from ``env.device`` ("cuda*", "/GPU*" -> gpu), and what is unknown is
skipped, never guessed.

``device_summary`` reduces the trials to per-arm facts (stored as
``analysis["devices"]``). Its ``refusal`` is set when the arms report different
device kinds or different GPUs: the analysis then decides no hypothesis (each
gets "not decided" with the reason), and the rules below report the evidence.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict

from kit.analysis.threats import Ctx, Threat, rule
from kit.records import TrialRecord

_GPU_PREFIXES = ("cuda", "/gpu", "/device:gpu", "gpu")
_CPU_PREFIXES = ("cpu", "/cpu", "/device:cpu")


def device_kind(env: Mapping[str, Any] | None) -> str | None:
    """"cpu" | "gpu" from a trial's env: ``device_kind``, else inferred from ``device``; None if unknown."""
    if not env:
        return None
    kind = env.get("device_kind")
    if kind in ("cpu", "gpu"):
        return str(kind)
    dev = str(env.get("device") or "").strip().lower()
    if dev.startswith(_GPU_PREFIXES):
        return "gpu"
    if dev.startswith(_CPU_PREFIXES):
        return "cpu"
    return None


def norm_uuid(u: Any) -> str | None:
    """A GPU UUID for comparison: lower case, without the "GPU-" prefix NVML prints (torch omits it)."""
    if u is None:
        return None
    s = str(u).strip().lower()
    if s.startswith("gpu-"):
        s = s[4:]
    return s or None


def trial_uuids(env: Mapping[str, Any] | None) -> list[str]:
    """The GPUs a trial reports it computed on (``gpu_uuids``, else ``gpu_uuid``), as reported."""
    if not env:
        return []
    many = [str(u) for u in (env.get("gpu_uuids") or []) if u]
    if many:
        return many
    return [str(env["gpu_uuid"])] if env.get("gpu_uuid") else []


def host_uuids(gpus: Iterable[Any]) -> list[str]:
    """The UUIDs of the GPUs the host gave the trial and sampled (the trial file's ``gpus`` tables), where known."""
    return [str(g["uuid"]) for g in gpus if isinstance(g, Mapping) and g.get("uuid")]


class UuidMismatch(TypedDict):
    """A trial that computed on a GPU the host did not give it (``devices.trial_gpu_mismatch`` of analysis.json)."""

    trial_id: str | None
    arm: str | None
    trial_uuids: list[str]
    host_uuids: list[str]


def uuid_mismatch(record: Mapping[str, Any]) -> UuidMismatch | None:
    """None, or the evidence that the trial computed on a GPU other than the one(s) the host sampled (``record``: a
    trial file's JSON, as kit.analysis.telemetry reads it)."""
    return _mismatch(record.get("trial_id"), record.get("arm"), trial_uuids(record.get("env")),
                     host_uuids(record.get("gpus") or []))


def trial_uuid_mismatch(rec: TrialRecord) -> UuidMismatch | None:
    """:func:`uuid_mismatch` of a typed trial record."""
    return _mismatch(rec.trial_id, rec.arm, trial_uuids(rec.env), host_uuids(rec.gpu_tables or ()))


def _mismatch(trial_id: str | None, arm: str | None, inside: list[str], host: list[str]) -> UuidMismatch | None:
    if not inside or not host:
        return None
    hosted = {norm_uuid(u) for u in host}
    if all(norm_uuid(u) in hosted for u in inside):
        return None
    return UuidMismatch(trial_id=trial_id, arm=arm, trial_uuids=inside, host_uuids=host)


def tf32_of(env: Mapping[str, Any] | None) -> dict[str, Any] | None:
    t = (env or {}).get("tf32")
    if not isinstance(t, Mapping):
        return None
    return {"mode": t.get("mode"), "matmul": t.get("matmul"), "conv": t.get("conv")}


def _tf32_text(t: Mapping[str, Any] | None) -> str:
    if t is None:
        return "not recorded"

    def word(v: Any) -> str:
        return "n/a" if v is None else ("on" if v else "off")

    return f"{t.get('mode')} (matmul {word(t.get('matmul'))}, conv {word(t.get('conv'))})"


def _measured(trials: Sequence[TrialRecord]) -> list[TrialRecord]:
    return [t for t in trials if t.counts]


def _counts(values: list[Any]) -> dict[str, int]:
    return dict(sorted(Counter(str(v) for v in values if v is not None).items()))


def _arm_facts(arm: str, trials: Sequence[TrialRecord]) -> dict[str, Any]:
    envs = [t.env for t in trials]
    kinds = [device_kind(e) for e in envs]
    tf32 = [tf32_of(e) for e in envs]
    tf32_counts = Counter(_tf32_text(t) for t in tf32 if t is not None)
    uuids = [u for e in envs for u in trial_uuids(e)]
    host = [g for t in trials for g in (t.gpu_tables or ())]
    return {
        "arm": arm, "n_trials": len(trials),
        "kinds": _counts(kinds), "kind_unknown": sum(k is None for k in kinds),
        "names": _counts([e.get("device_name") for e in envs]),
        "gpu_uuids": _counts(uuids),
        "host_gpus": sorted({f"{g.get('index')}: {g.get('uuid') or '?'}" for g in host}),
        "tf32": dict(sorted(tf32_counts.items())), "tf32_unrecorded": sum(t is None for t in tf32),
        "precision": _counts([e.get("precision") for e in envs]),
    }


def _kind_of(t: TrialRecord) -> str | None:
    return device_kind(t.env)


def _uuid_key(t: TrialRecord) -> tuple[str, ...] | None:
    u = tuple(sorted({x for x in (norm_uuid(v) for v in trial_uuids(t.env)) if x}))
    return u or None


def _effective_precision(t: TrialRecord) -> tuple[Any, Any, Any]:
    """(TF32 matmul, TF32 conv, precision) as the trial used them; the mode alone may differ harmlessly."""
    env = t.env
    tf = tf32_of(env) or {}
    return tf.get("matmul"), tf.get("conv"), env.get("precision")


def device_summary(trials: Sequence[TrialRecord], arms: list[str]) -> dict[str, Any]:
    """Per-arm devices and precisions of the measured trials, and whether the arms are comparable."""
    measured = _measured(trials)
    per_arm = [_arm_facts(a, [t for t in measured if t.arm == a]) for a in arms]
    all_kinds = {k for a in per_arm for k in a["kinds"]}
    # kinds: per configuration (a study may run some configurations on the CPU, in every arm)
    kinds_bad = []
    for cid in sorted({t.config_id for t in measured}, key=str):
        by_arm = {a: sorted({k for t in measured if t.config_id == cid and t.arm == a
                             for k in [_kind_of(t)] if k}) for a in arms}
        by_arm = {a: v for a, v in by_arm.items() if v}
        if len({k for v in by_arm.values() for k in v}) > 1:
            kinds_bad.append({"config_id": cid, "kinds": by_arm})
    kind_mismatch = bool(kinds_bad)

    # GPUs: within a block (one node, one schedule slot) every arm must name the same GPU(s);
    # and the sets per arm must agree (arms that never share a block).
    by_block: dict[tuple[Any, Any], dict[str, set[tuple[str, ...]]]] = {}
    uuid_sets: dict[str, set[tuple[str, ...]]] = {}
    for t in measured:
        key = _uuid_key(t)
        if key is None:
            continue
        by_block.setdefault((t.config_id, t.block), {}).setdefault(t.arm, set()).add(key)
        uuid_sets.setdefault(t.arm, set()).add(key)
    blocks_bad = [{"config_id": cid, "block": b, "gpu_uuids": {a: sorted(",".join(k) for k in v) for a, v in arms_.items()}}
                  for (cid, b), arms_ in sorted(by_block.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1])))
                  if len(arms_) >= 2 and len(set().union(*arms_.values())) > 1]
    shared = any(len(v) >= 2 for v in by_block.values())
    sets_differ = not shared and len(uuid_sets) >= 2 and len({frozenset(v) for v in uuid_sets.values()}) > 1
    uuid_mismatch_arms = bool(blocks_bad) or sets_differ

    refusal = None
    if kind_mismatch:
        refusal = "the arms ran on different kinds of device (" + "; ".join(
            f"{a['arm']}: " + ", ".join(f"{k} in {n} trial(s)" for k, n in a["kinds"].items()) for a in per_arm
            if a["kinds"]) + (f"; in {len(kinds_bad)} configuration(s)" if len(kinds_bad) > 1 else "") + ")"
    elif uuid_mismatch_arms:
        refusal = "the arms ran on different GPUs (" + "; ".join(
            f"{a['arm']}: " + ", ".join(f"{u} in {n} trial(s)" for u, n in a["gpu_uuids"].items()) for a in per_arm
            if a["gpu_uuids"]) + (f"; {len(blocks_bad)} block(s) with different GPUs per arm" if blocks_bad else "") + ")"

    # precision: per configuration (a study may vary precision as a factor, the same in every arm)
    precision_bad = []
    for cid in sorted({t.config_id for t in measured}, key=str):
        of_cfg = [t for t in measured if t.config_id == cid]
        prec_by_arm: dict[str, list[tuple[Any, Any, Any]]] = {
            a: sorted({_effective_precision(t) for t in of_cfg if t.arm == a
                       and (tf32_of(t.env) is not None or t.env.get("precision"))}, key=str)
            for a in arms}
        prec_by_arm = {a: v for a, v in prec_by_arm.items() if v}
        if len(prec_by_arm) >= 2 and len({tuple(v) for v in prec_by_arm.values()}) > 1:
            precision_bad.append({"config_id": cid, "by_arm": {
                a: [{"tf32_matmul": m, "tf32_conv": c, "precision": p} for m, c, p in v]
                for a, v in prec_by_arm.items()}})

    wrong = [w for w in (trial_uuid_mismatch(t) for t in trials if not t.warmup) if w]
    return {
        "arms": per_arm,
        "kinds": sorted(all_kinds),
        "kind_mismatch": kind_mismatch,
        "kind_mismatch_configs": kinds_bad[:20],
        "gpu_mismatch": uuid_mismatch_arms,
        "gpu_mismatch_blocks": blocks_bad[:20],
        "refusal": refusal,
        "trial_gpu_mismatch": wrong,
        "precision_mismatch": precision_bad,
    }


# -- rules ----------------------------------------------------------------------


def _per_arm_numbers(d: dict[str, Any]) -> dict[str, Any]:
    return {a["arm"]: {"trials": a["n_trials"], "kinds": a["kinds"], "gpu_uuids": a["gpu_uuids"],
                       "names": a["names"]} for a in d.get("arms", [])}


@rule
def device_consistency(c: Ctx) -> list[Threat]:
    """Every arm on the same kind of device and the same GPU(s): else no hypothesis is decided."""
    d = c.analysis.get("devices") or {}
    if not d.get("arms"):
        return []
    numbers = _per_arm_numbers(d)
    if d.get("refusal"):
        numbers["blocks_with_different_gpus"] = d.get("gpu_mismatch_blocks") or []
        return [Threat("device_mismatch", "internal", "high", "Arms ran on different devices",
                       f"{d['refusal']}: the comparison measures the devices, not the frameworks; no hypothesis "
                       "is decided on this run",
                       "make every arm use the same GPU: device = \"gpu\" (a trial that cannot reach it then fails "
                       "with the cause), a framework build that matches the driver (kit doctor), and check with "
                       "kit selftest before the study", numbers=numbers)]
    if not d.get("kinds"):
        return []
    where = ", ".join(d["kinds"])
    uuids = sorted({u for a in d["arms"] for u in a["gpu_uuids"]})
    return [Threat("device_mismatch", "internal", "info", "Same device in every arm",
                   f"every arm reported {where}" + (f" (GPU {', '.join(uuids)})" if uuids else "")
                   + " from inside its trials", "device kind and GPU UUID checked per trial", status="mitigated",
                   numbers=numbers)]


@rule
def trial_gpu(c: Ctx) -> list[Threat]:
    """The GPU a trial computed on (reported from inside) must be the one the host sampled."""
    wrong = (c.analysis.get("devices") or {}).get("trial_gpu_mismatch") or []
    if not wrong:
        return []
    arms = dict(sorted(Counter(str(w["arm"]) for w in wrong).items()))
    return [Threat("gpu_uuid_mismatch", "internal", "high", "Trials computed on a GPU the host did not sample",
                   f"{len(wrong)} trial(s) report a GPU other than the one the host gave them and sampled (per arm "
                   f"{arms}; e.g. {wrong[0]['trial_id']}: inside {', '.join(wrong[0]['trial_uuids'])}, host "
                   f"{', '.join(wrong[0]['host_uuids'])}); their GPU telemetry is not used",
                   "set CUDA_DEVICE_ORDER=PCI_BUS_ID wherever CUDA numbering is used and give the trial its GPU "
                   "by the NVML index (Docker device_ids, CUDA_VISIBLE_DEVICES)",
                   numbers={"trials": len(wrong), "by_arm": arms, "examples": wrong[:10]})]


@rule
def precision(c: Ctx) -> list[Threat]:
    """Arms that compute at different precision (TF32 on in one framework, off in the other) compare defaults."""
    d = c.analysis.get("devices") or {}
    bad = d.get("precision_mismatch") or []
    if bad:
        first = bad[0]
        text = "; ".join(f"{a}: " + ", ".join(f"TF32 matmul {v['tf32_matmul']}, conv {v['tf32_conv']}, precision "
                                               f"{v['precision']}" for v in vs) for a, vs in first["by_arm"].items())
        return [Threat("precision_mismatch", "internal", "high", "Arms computed at different precision",
                       f"{len(bad)} configuration(s) where the arms' effective TF32 settings or compute precision "
                       f"differ (e.g. {first['config_id']}: {text}): the difference in time partly measures "
                       "the precision, not the framework",
                       "set [workload] tf32 = \"off\" (or \"on\") so both frameworks apply the same setting, and the "
                       "same precision", numbers={"configs": bad[:20]})]
    arms = d.get("arms") or []
    gpu = any(a["kinds"].get("gpu") for a in arms)
    unrecorded = {a["arm"]: a["tf32_unrecorded"] for a in arms if a["kinds"].get("gpu") and a["tf32_unrecorded"]}
    if gpu and unrecorded:
        return [Threat("precision_mismatch", "internal", "medium", "TF32 use not recorded",
                       f"GPU trials without a TF32 record per arm {unrecorded}: on Ampere and newer TensorFlow uses "
                       "TF32 for float32 matmuls and convolutions by default, PyTorch only for cuDNN convolutions, "
                       "so fp32 times may compare different precisions", "re-run with a kit that records and sets "
                       "[workload] tf32", numbers={"trials_unrecorded": unrecorded})]
    recorded = {a["arm"]: {"tf32": a["tf32"], "precision": a["precision"]} for a in arms if a["tf32"] or a["precision"]}
    if len(recorded) >= 2:
        return [Threat("precision_mismatch", "internal", "info", "Same precision in every arm",
                       "effective TF32 settings and compute precision agree between the arms in every configuration",
                       "[workload] tf32 applied in both frameworks and recorded per trial", status="mitigated",
                       numbers={"by_arm": recorded})]
    return []
