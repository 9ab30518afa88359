"""Were the two arms the same model? Parameter counts and loss agreement within blocks.

The cross-framework check of issue 15: the mean training loss of the last epoch of the two arms of a
block (same initial weights, same batches) must agree within a tolerance derived from the number
format the matmuls and convolutions ran in. Pure: trial records in, plain data out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from kit.records import TrialRecord

# Tolerance of the cross-framework loss agreement (issue 15 item 5). The check compares the mean
# training loss of the last epoch of the two arms of a block (same initial weights, same batches).
# Their arithmetic differs (other kernels, reduction orders, on a GPU atomics and autotuned
# algorithms), and SGD amplifies any difference over an epoch, so the figure depends on the format
# the matmuls and convolutions ran in. Machine epsilon (2^-explicit mantissa bits) of each format:
LOSS_EPS = {"fp32": 2.0**-23, "tf32": 2.0**-10, "fp16": 2.0**-10, "bf16": 2.0**-7}
#
# The figures below come from benchmarks/loss_tolerance_emulation.py, run on 2026-11-26 (output:
# docs/evidence/loss-tolerance-emulation-2026-11-26.txt): the kit's LeNet-5 (kit.workloads.lenet weights), 600 SGD
# steps of 100 images of MNIST t10k, learning rate 0.01, torch on the CPU, 4 blocks (seeds) per protocol, two
# protocols: plain SGD on [0, 1] pixels (the LeNet protocol before issue 25, which the first figures of these
# comments described) and momentum 0.5 on normalised inputs (the paper profile since issue 25). Relative gap of the
# mean training loss to the fp32 reference arm, largest over the blocks, plain / momentum:
#   another kernel route in fp32 (summation order)         1.2e-4 / 1.5e-3
#   1 ulp on every conv/linear output and gradient         1.1e-3 / 1.9e-3
#   1e-5 relative error per element (FFT/Winograd-like)    2.5e-4 / 2.1e-3
#   TF32 operands truncated (forward and backward)         2.9e-3 = 3.0 eps / 2.2e-3 = 2.2 eps (median 2.3e-3 / 1.7e-3)
#   TF32 operands rounded to nearest                       4.3e-4 = 0.44 eps / 3.8e-3 = 3.9 eps
#   bf16 operands and outputs (round to nearest even)      6.1e-4 = 0.08 eps / 2.5e-3 = 0.32 eps
#   a different batch order                                4.1e-4 to 6.8e-3 / 2.4e-3 to 2.2e-2
#   a different initialisation                             1.6e-3 to 2.5e-1 / 8.0e-2 to 1.6e-1
# The earlier figures (1 ulp: 2.0e-4 in 12 blocks; 1e-5: 1.8e-4; a different initialisation at least 9.4e-2;
# a different batch order 6.7e-4 to 3.7e-3) came from a script not kept; the measured figures replace them.
#
# fp32 (CPU, or GPU with TF32 off or absent): 1e-2 since issue 25 (1e-3 before, which covered rounding-level
# differences of plain SGD in 3 of 4 blocks only: 1 ulp reached 1.1e-3 in one). A model that learns amplifies
# rounding more: in the momentum protocol another kernel route, 1 ulp and 1e-5 each reach 1.5e-3 to 2.1e-3, and the
# two frameworks themselves, on the CPU in the LeNet quick profile (240 steps, momentum 0.5), differed by up to
# 4.3e-3 (13 blocks, 5 above 1e-3: a false "not the same model" threat on every quick run). 1e-2 covers the largest
# measured case 2.3 times over and stays 8 times below the smallest gap a different initialisation of the momentum
# protocol caused (8.0e-2); a different batch order (2.4e-3 to 2.2e-2) overlaps it and cannot be told apart, which
# the report says (CANNOT_DETECT below). It is also the floor of every other format's figure.
LOSS_TOL_FP32 = 1e-2
# TF32 (10-bit mantissa; tensor cores read the first 10 mantissa bits, i.e. may truncate, which biases every
# product the same way): truncated, at most 3.0 eps (plain) and 2.2 eps (momentum); rounded to nearest, at most
# 0.44 and 3.9 eps. 8 eps = 7.8e-3 leaves a factor 2.0 above the worst emulated case (the emulation adds TF32 to
# one arm only; a real cross-framework pair adds the fp32-level differences above to it).
LOSS_TOL_FACTOR_TRUNCATING = 8.0
# bf16/fp16 (autocast, Keras mixed policies): values are converted by round-to-nearest-even, which is unbiased.
# Emulated bf16: at most 0.32 eps_bf16 (2.5e-3). 4 eps: bf16 3.1e-2 (12 times the largest gap, but within the
# batch-order range and 2.6 times below the smallest gap of a different initialisation of the momentum protocol);
# fp16 3.9e-3 (fp16 was not emulated: round-to-nearest TF32, which has fp16's 10-bit mantissa, reached 3.8e-3
# in the momentum protocol, a factor 1.03 below it).
LOSS_TOL_FACTOR_ROUNDING = 4.0
# What agreement within these tolerances cannot detect (the same emulation, both protocols): the relative gap a
# different batch order causes, smallest and largest over the blocks, and that of a different initialisation.
BATCH_ORDER_GAP = (4.05e-4, 2.15e-2)
INIT_GAP = (1.64e-3, 2.52e-1)
NEAR_FACTOR = 4.0  # a gap within this factor of the tolerance is "near" it: a few more seeds may put it within


def _trial_format(env: dict[str, Any]) -> tuple[str, str]:
    """The coarsest format a trial's matmuls/convolutions ran in, and why (from its recorded env)."""
    prec = env.get("precision")
    if prec not in LOSS_EPS:
        return "fp32", "precision not recorded: fp32 assumed"
    where = env.get("device_kind") or "unknown device"
    if prec == "tf32":
        return "tf32", f"precision tf32 recorded (the dominant op class ran in TF32) on the {where}"
    if where != "gpu" or prec != "fp32":
        return str(prec), f"{prec} on the {where}"
    tf32 = env.get("tf32") or {}
    on = [k for k in ("matmul", "conv") if tf32.get(k)]
    cc = env.get("compute_capability")
    if on and (cc is None or tuple(cc) >= (8, 0)):
        # precision says fp32 when the dominant op class runs in fp32; the other class may still use TF32
        return "tf32", f"TF32 on for {' and '.join(on)} on a GPU of compute capability {cc or 'unknown (>= 8.0 assumed)'}"
    return "fp32", "fp32 on the GPU (TF32 off or not supported)"


def loss_tolerance(env_a: dict[str, Any], env_b: dict[str, Any]) -> dict[str, Any]:
    """The relative loss gap two trials may show and still run the same model: from their formats and determinism.

    The coarser of the two formats decides: fp32 LOSS_TOL_FP32, TF32 LOSS_TOL_FACTOR_TRUNCATING x eps,
    bf16/fp16 LOSS_TOL_FACTOR_ROUNDING x eps (never below fp32's). Determinism is stated but does not
    move the figure: fp32's figure covers non-deterministic kernels. Each trial records ``deterministic``
    (torch.are_deterministic_algorithms_enabled / TensorFlow's op determinism); a trial without the
    record (older runs) is assumed non-deterministic on a GPU.
    """
    fa, why_a = _trial_format(env_a)
    fb, why_b = _trial_format(env_b)
    fmt = max((fa, fb), key=lambda f: LOSS_EPS[f])
    if fmt == "fp32":
        tol, rule = LOSS_TOL_FP32, f"fp32: {LOSS_TOL_FP32:g}"
    elif fmt == "tf32":
        tol = LOSS_TOL_FACTOR_TRUNCATING * LOSS_EPS[fmt]
        rule = f"tf32: {LOSS_TOL_FACTOR_TRUNCATING:g} x eps 2^-10 (TF32 may truncate: a systematic gap)"
    else:
        tol = LOSS_TOL_FACTOR_ROUNDING * LOSS_EPS[fmt]
        rule = f"{fmt}: {LOSS_TOL_FACTOR_ROUNDING:g} x eps 2^-{round(-math.log2(LOSS_EPS[fmt]))} (round to nearest)"
    if tol < LOSS_TOL_FP32:  # the format's own figure is below fp32's: the fp32-level differences dominate
        tol, rule = LOSS_TOL_FP32, f"{rule}, below the fp32 floor {LOSS_TOL_FP32:g}, which applies"
    gpu = "gpu" in (env_a.get("device_kind"), env_b.get("device_kind"))
    det = [e.get("deterministic") for e in (env_a, env_b)]
    if not gpu:
        determinism = "CPU kernels: deterministic for a fixed thread count"
    elif all(d is True for d in det):
        determinism = "deterministic GPU kernels recorded"
    elif any(d is not None for d in det):
        determinism = "GPU kernels not deterministic in at least one arm (covered by the figure)"
    else:
        determinism = "GPU determinism not recorded by the workload: assumed non-deterministic (covered by the figure)"
    return {"tolerance": tol, "format": fmt, "rule": rule, "formats": [why_a, why_b], "determinism": determinism}


# The loss must move for the agreement to say something about training: by more than this many times the tolerance
# (relative), so that the optimiser's steps, not the forward pass of the shared initial weights alone, decide
# whether the arms agree. A workload whose loss does not move (a constant, no parameters) is not checked at all.
LOSS_MOVE_FACTOR = 10.0


def _first_last(res: Mapping[str, Any], key: str) -> tuple[float | None, float | None]:
    """A trial's loss before and after training by ``key``'s record, (None, None) where it has none."""
    val = res.get(key)
    if key == "train_loss_initial" and isinstance(val, (int, float)) and not isinstance(val, bool):
        return float(val), float(res["train_loss"])
    if key == "epoch_train_loss" and isinstance(val, list) and len(val) >= 2:
        return float(val[0]), float(val[-1])
    return None, None


def _loss_moves(trials: Sequence[TrialRecord], arms: list[str], tolerance: float) -> dict[str, Any]:
    """Whether the training loss moved, from what the trials record, strongest evidence first.

    ``train_loss_initial`` (the loss of the shared initial weights on the first batch, recorded untimed by the
    LeNet builds) against the final ``train_loss``; else the first against the last epoch of
    ``epoch_train_loss``; else whether an arm's final loss differs between blocks (each block draws its own
    initial weights and batch order: a loss that depends on neither is a constant). ``moved`` is None when no
    trial records a loss.
    """
    need = LOSS_MOVE_FACTOR * tolerance
    ok = [t for t in trials if t.status == "ok" and t.arm in arms and "train_loss" in t.results]
    if not ok:
        return {"moved": None, "basis": "no trial records a training loss", "min_rel_change": None,
                "required_rel_change": need}
    for key, label in (("train_loss_initial", "initial loss (shared weights, first batch) to the final mean loss"),
                       ("epoch_train_loss", "first to last epoch's mean loss")):
        changes = [abs(last - first) / max(abs(first), 1e-12) for first, last in
                   (_first_last(t.results, key) for t in ok) if first is not None and last is not None]
        if changes:
            low = min(changes)
            return {"moved": low > need, "basis": f"{label}, every trial that records it", "min_rel_change": low,
                    "required_rel_change": need}
    spreads = []
    for arm in arms:
        losses = [float(t.results["train_loss"]) for t in ok if t.arm == arm]
        if len(losses) >= 2:
            spreads.append((max(losses) - min(losses)) / max(abs(float(np.median(losses))), 1e-12))
    if not spreads:
        return {"moved": None, "basis": "one trial per arm, and no initial or per-epoch loss recorded",
                "min_rel_change": None, "required_rel_change": need}
    low = min(spreads)
    basis = ("the final loss differs between blocks (their initial weights and batches differ); the trials record "
             "no initial or per-epoch loss, so how far training moved it is not known")
    return {"moved": low > need, "basis": basis, "min_rel_change": low, "required_rel_change": need}


def _overlap(gap: tuple[float, float], tol: float) -> str | None:
    """How an alternative's measured gaps (smallest, largest) sit against a tolerance; None: always far above it."""
    lo, hi = gap
    if hi < tol:
        return f"within the tolerance {tol:.1e}, so it cannot be told from rounding"
    if lo < tol:
        return f"partly within the tolerance {tol:.1e}, so it cannot always be told from rounding"
    if lo < NEAR_FACTOR * tol:
        return f"near the tolerance {tol:.1e} (within {NEAR_FACTOR:g} times it), so another seed may fall within it"
    return None


def cannot_detect(tolerance: float | None) -> str:
    """What agreement within ``tolerance`` cannot tell from rounding, by the emulation's figures: a different batch
    order or initialisation whose measured gaps fall within or near the tolerance, and anything the training loss
    does not show."""
    tol = tolerance if tolerance is not None else LOSS_TOL_FP32
    parts = [f"{what} (relative loss gap {gap[0]:.1e} to {gap[1]:.1e}) is {verdict}"
             for what, gap in (("a different batch order", BATCH_ORDER_GAP), ("a different initialisation", INIT_GAP))
             if (verdict := _overlap(gap, tol)) is not None]
    return "; ".join([*parts, "a difference outside the training loss (the inference pass, the accuracy) is not "
                      "compared at all"]) + " (gaps measured by benchmarks/loss_tolerance_emulation.py)"


def check_equivalence(trials: Sequence[TrialRecord], arms: list[str]) -> dict[str, Any]:
    """Consistent with the same model? Parameter counts, and loss agreement within blocks at a tolerance from the
    formats; applicable only to a model with parameters whose training loss moves (else the agreement is vacuous).

    ``consistent`` is what the check can say: the same parameter count and training losses that agree to within
    rounding of the recorded formats. It cannot prove the models equal: ``cannot_detect`` names what agreement
    within the tolerance leaves open. ``applicable`` False with ``not_applicable`` saying why: no parameters, or
    a loss that does not move (a constant loss agrees with any model).
    """
    params = {arm: sorted({n for t in trials if t.arm == arm and t.status == "ok"
                           and (n := t.results.get("param_count")) is not None}) for arm in arms}
    by_block: dict[tuple[int, str], dict[str, tuple[float, dict[str, Any]]]] = {}
    acc: dict[str, list[float]] = {arm: [] for arm in arms}
    for t in trials:
        if t.status != "ok":
            continue
        res = t.results
        if "train_loss" in res:
            by_block.setdefault((t.block, t.config_id), {})[t.arm] = (float(res["train_loss"]),
                                                                               dict(t.env))
        if "test_accuracy" in res and not t.warmup:
            acc[t.arm].append(float(res["test_accuracy"]))
    checks = []
    for v in by_block.values():
        if len(v) >= 2 and arms[0] in v and arms[1] in v:
            (la, ea), (lb, eb) = v[arms[0]], v[arms[1]]
            checks.append((abs(la - lb) / max(abs(la), 1e-12), loss_tolerance(ea, eb)))
    gaps = [g for g, _ in checks]
    # per configuration: one count per arm, the same in every arm (several configurations: several models)
    by_cfg: dict[str, dict[str, set[int]]] = {}
    for t in trials:
        n = t.results.get("param_count") if t.status == "ok" else None
        if n is not None:
            by_cfg.setdefault(t.config_id, {}).setdefault(t.arm, set()).add(int(n))
    same_params = bool(by_cfg) and all(
        len(counts) == len(arms) and all(len(c) == 1 for c in counts.values())
        and len(set().union(*counts.values())) == 1 for counts in by_cfg.values())
    max_gap = max(gaps) if gaps else None
    agrees = bool(checks) and all(g < tol["tolerance"] for g, tol in checks)
    tols = sorted({(tol["tolerance"], tol["rule"], tol["determinism"]) for _, tol in checks})
    tolerance = max(t[0] for t in tols) if tols else None
    moves = _loss_moves(trials, arms, tolerance if tolerance is not None else LOSS_TOL_FP32)
    counts = {int(n) for c in by_cfg.values() for a in c.values() for n in a}
    why_not = None
    if counts and max(counts) == 0:
        why_not = "the workload has no parameters (param_count 0): there is no model to compare"
    elif moves["moved"] is False:
        change = moves["min_rel_change"]
        why_not = (f"the training loss does not move ({moves['basis']}: smallest relative change {change:.1e}, at "
                   f"most {LOSS_MOVE_FACTOR:g} x the tolerance): losses that agree then say nothing about training")
    elif moves["moved"] is None:
        why_not = f"whether the training loss moves cannot be told ({moves['basis']})"
    return {
        "param_counts": {arm: p for arm, p in params.items()},
        "param_counts_by_config": {cid: {a: sorted(c) for a, c in counts.items()} for cid, counts in by_cfg.items()},
        "param_counts_equal": same_params,
        "loss_pairs": len(gaps),
        "max_rel_loss_gap": max_gap,
        "loss_agrees": agrees,
        # which tolerance applied and why (one entry per distinct setting among the blocks)
        "loss_tolerance": tolerance,
        "loss_tolerance_basis": [{"tolerance": t, "rule": r, "determinism": d} for t, r, d in tols],
        "loss_tolerance_formats": sorted({w for _, tol in checks for w in tol["formats"]}),
        "accuracy_mean": {arm: (float(np.mean(v)) if v else None) for arm, v in acc.items()},
        "accuracy_min": {arm: (float(np.min(v)) if v else None) for arm, v in acc.items()},
        "loss_moves": moves,
        "applicable": why_not is None,
        "not_applicable": why_not,
        "cannot_detect": cannot_detect(tolerance),
        # consistent with the same model: the check applied and passed (it cannot prove the models equal)
        "consistent": why_not is None and same_params and agrees,
    }
