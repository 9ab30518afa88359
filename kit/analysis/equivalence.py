"""Were the two arms the same model? Parameter counts and loss agreement within blocks.

The cross-framework check of issue 15: the mean training loss of the last epoch of the two arms of a
block (same initial weights, same batches) must agree within a tolerance derived from the number
format the matmuls and convolutions ran in. Pure: trial records in, plain data out.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

# Tolerance of the cross-framework loss agreement (issue 15 item 5). The check compares the mean
# training loss of the last epoch of the two arms of a block (same initial weights, same batches).
# Their arithmetic differs (other kernels, reduction orders, on a GPU atomics and autotuned
# algorithms), and SGD amplifies any difference over an epoch, so the figure depends on the format
# the matmuls and convolutions ran in. Machine epsilon (2^-explicit mantissa bits) of each format:
LOSS_EPS = {"fp32": 2.0**-23, "tf32": 2.0**-10, "fp16": 2.0**-10, "bf16": 2.0**-7}
# fp32 (CPU, or GPU with TF32 off or absent): 1e-3, the kit's figure before issue 15. Emulated on
# LeNet-5 (kit.workloads.lenet weights, 600 SGD steps of 100 MNIST images, one arm's conv/linear
# outputs and gradients perturbed by 1 ulp, i.e. another summation order): largest gap 2.0e-4 in 12
# blocks; with 1e-5 relative error per op (100 ulp: FFT/Winograd-like algorithms a GPU may pick)
# 1.8e-4. So 1e-3 covers fp32 with or without deterministic kernels, 5 times over.
LOSS_TOL_FP32 = 1e-3
# TF32 (10-bit mantissa; tensor cores read the first 10 mantissa bits, i.e. may truncate, which
# biases every product the same way): emulated with both operands of every conv/linear truncated to
# TF32 in one arm and fp32 in the other, the gap was systematic, 2.3e-3 median and 2.9e-3 = 3.0 eps
# at most (8 blocks); rounded to nearest instead, at most 0.92 eps (12 blocks). 8 eps = 7.8e-3 leaves
# a factor 2.7 above the worst case and stays 12 times below the smallest gap a different
# initialisation caused (9.4e-2; a different batch order caused only 6.7e-4 to 3.7e-3, which no
# tolerance above fp32's can tell from rounding).
LOSS_TOL_FACTOR_TRUNCATING = 8.0
# bf16/fp16 (autocast, Keras mixed policies): values are converted by round-to-nearest-even, which
# is unbiased. Emulated bf16 (operands and outputs of every conv/linear rounded to 7 bits): largest
# gap 1.7e-3 = 0.21 eps_bf16 (12 blocks). 4 eps: bf16 3.1e-2 (18 times the largest gap, 3 times below
# a different initialisation), fp16 3.9e-3 (4.3 times the largest gap of round-to-nearest TF32,
# which has fp16's 10-bit mantissa).
LOSS_TOL_FACTOR_ROUNDING = 4.0


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
        tol, rule = LOSS_TOL_FP32, "fp32: 1e-3"
    elif fmt == "tf32":
        tol = LOSS_TOL_FACTOR_TRUNCATING * LOSS_EPS[fmt]
        rule = f"tf32: {LOSS_TOL_FACTOR_TRUNCATING:g} x eps 2^-10 (TF32 may truncate: a systematic gap)"
    else:
        tol = LOSS_TOL_FACTOR_ROUNDING * LOSS_EPS[fmt]
        rule = f"{fmt}: {LOSS_TOL_FACTOR_ROUNDING:g} x eps 2^-{round(-math.log2(LOSS_EPS[fmt]))} (round to nearest)"
    tol = max(tol, LOSS_TOL_FP32)
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


def check_equivalence(trials: list[dict[str, Any]], arms: list[str]) -> dict[str, Any]:
    """Were the models the same? Parameter counts, and loss agreement within blocks at a tolerance from the formats."""
    params = {arm: sorted({t["results"].get("param_count") for t in trials if t["arm"] == arm and t["status"] == "ok"
                           and t.get("results", {}).get("param_count") is not None}) for arm in arms}
    by_block: dict[tuple[int, str], dict[str, tuple[float, dict[str, Any]]]] = {}
    acc: dict[str, list[float]] = {arm: [] for arm in arms}
    for t in trials:
        if t["status"] != "ok":
            continue
        res = t.get("results", {})
        if "train_loss" in res:
            by_block.setdefault((t["block"], t["config_id"]), {})[t["arm"]] = (float(res["train_loss"]),
                                                                               t.get("env") or {})
        if "test_accuracy" in res and not t.get("warmup"):
            acc[t["arm"]].append(float(res["test_accuracy"]))
    checks = []
    for v in by_block.values():
        if len(v) >= 2 and arms[0] in v and arms[1] in v:
            (la, ea), (lb, eb) = v[arms[0]], v[arms[1]]
            checks.append((abs(la - lb) / max(abs(la), 1e-12), loss_tolerance(ea, eb)))
    gaps = [g for g, _ in checks]
    # per configuration: one count per arm, the same in every arm (several configurations: several models)
    by_cfg: dict[str, dict[str, set[int]]] = {}
    for t in trials:
        n = t.get("results", {}).get("param_count") if t["status"] == "ok" else None
        if n is not None:
            by_cfg.setdefault(t["config_id"], {}).setdefault(t["arm"], set()).add(int(n))
    same_params = bool(by_cfg) and all(
        len(counts) == len(arms) and all(len(c) == 1 for c in counts.values())
        and len(set().union(*counts.values())) == 1 for counts in by_cfg.values())
    max_gap = max(gaps) if gaps else None
    agrees = bool(checks) and all(g < tol["tolerance"] for g, tol in checks)
    tols = sorted({(tol["tolerance"], tol["rule"], tol["determinism"]) for _, tol in checks})
    return {
        "param_counts": {arm: p for arm, p in params.items()},
        "param_counts_by_config": {cid: {a: sorted(c) for a, c in counts.items()} for cid, counts in by_cfg.items()},
        "param_counts_equal": same_params,
        "loss_pairs": len(gaps),
        "max_rel_loss_gap": max_gap,
        "loss_agrees": agrees,
        # which tolerance applied and why (one entry per distinct setting among the blocks)
        "loss_tolerance": max(t[0] for t in tols) if tols else None,
        "loss_tolerance_basis": [{"tolerance": t, "rule": r, "determinism": d} for t, r, d in tols],
        "loss_tolerance_formats": sorted({w for _, tol in checks for w in tol["formats"]}),
        "accuracy_mean": {arm: (float(np.mean(v)) if v else None) for arm, v in acc.items()},
        "accuracy_min": {arm: (float(np.min(v)) if v else None) for arm, v in acc.items()},
        "verified": same_params and agrees,
    }
