"""Version-to-version comparison of two runs: did anything get faster or slower?

For every configuration × metric × phase × arm present in both runs, the
measured trials of run A (baseline) and run B (candidate) are compared: the
Hodges–Lehmann ratio B/A (exp of the pseudo-median of the paired log ratios,
or of the median of all pairwise log ratios between two runs) with its 1 − α
rank interval, the design's two-sample test (Mann–Whitney or Brunner–Munzel:
trials of two runs are not paired), Cliff's δ, Holm's correction across the
whole comparison, and a verdict that needs both significance *and* a practical
effect (|ratio − 1| ≥ threshold, 5 % by default): "regression" or
"improvement". Otherwise the verdict is "no change" only when the data show
equivalence: the 1 − 2α rank interval of that same ratio lies inside
[1/(1+t), 1+t] (TOST at α: :mod:`kit.stats.detectability`; ``eq_low``,
``eq_high`` and ``eq_conf`` of the row), and "inconclusive" when it does not,
with the repetitions that row needs. The printed ratio is the tested one
(issue 38): the ratio of medians printed before is not what the rank interval
tests, and with right-skewed noise (occasional slow trials) "no change" at
the margin of the medians' ratio came out 12.5 % instead of at most 5 %; it is
kept as ``ratio_of_medians`` for reference, and ``ratio_estimator`` names what
``ratio`` is. Metrics a
trial's seed decides (accuracy, loss) are compared trial by trial between runs
of one plan seed, so identical data give ratio 1, interval [1, 1], "no change". The direction of
"better" comes from the metric (time: lower is better; throughput: higher).
A significant change is "suspect" (with the cause, never a regression or an
improvement) only when the load its sides ran under could explain it
(:func:`kit.analysis.host_state.rule_on_load`): the row is re-judged on the
undisturbed trials alone, in the same Holm family (a paired row drops whole
pairs), and it is suspect when that verdict differs, or when too few
undisturbed trials are left and the sides' loads (foreign CPU-seconds per
trial, the share disturbed and its size) differ. Otherwise the verdict stands
with ``load_note`` naming the load.

Runs from different hosts or GPU models are refused unless asked; every
provenance difference (driver, CUDA, cuDNN, image digests, clocks, kit
version, spec) is listed either way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from kit import stats
from kit.analysis.host_state import (
    SideState,
    busy_baseline,
    disturbed_blocks,
    disturbed_trials,
    rule_on_load,
    side_state,
)
from kit.analysis.power_cache import detectability
from kit.analysis_record import Analysis
from kit.compare_records import (
    ClaimChange,
    CompareRow,
    Comparison,
    ProvenanceDiff,
    ProvValue,
    RowLoad,
)
from kit.errors import AnalysisError, ExitCode, KitError
from kit.manifest import Manifest
from kit.metric_catalog import METRICS
from kit.records import counted
from kit.stats.common import MIN_N_FOR_TESTS
from kit.stats.detectability import HL_RATIO_TEXT, hl_ratio
from kit.store import RunDir

EXIT_INCONCLUSIVE = ExitCode.INCONCLUSIVE  # --fail-on given, nothing it names found, but some comparison could not have seen it
EXIT_SUSPECT = ExitCode.SUSPECT  # --fail-on given, nothing it names found, but a significant change is suspect: re-run, do not ship


@dataclass(frozen=True)
class CompareOptions:
    threshold: float = 0.05
    alpha: float = 0.05
    allow_different_hosts: bool = False
    metrics: tuple[str, ...] = ("time_s", "throughput_ips", "step_time_s", "latency_ms", "accuracy")
    phases: tuple[str, ...] | None = None  # None: every phase
    n_boot: int = 5000
    seed: int = 0
    verify_all: bool = False  # re-hash every input file of each run to check its seal (kit.freshness)


def load_analysis(run_dir: Path, verify_all: bool = False) -> Analysis:
    """analysis.json of a run when this kit sealed it from the run's inputs as they are now, else recomputed
    (a forged or stale file never answers: kit.freshness). A comparison reads only the generic values and
    provenance, never a study's own sections, so it runs no study code it was not given. ``verify_all``: the
    seal check re-hashes every input file, not only those whose size or mtime moved."""
    from kit.analysis.analyze import current_analysis

    return current_analysis(run_dir, need_study=False, verify_all=verify_all)[0]


def check_options(opts: CompareOptions) -> None:
    """The threshold and level a verdict needs, as numbers that mean something (KitError naming the option)."""
    check_threshold(opts.threshold)
    check_alpha(opts.alpha)


def check_threshold(threshold: Any) -> None:
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold < 10:
        raise KitError(f"threshold {threshold!r} is not a relative change in (0, 10)", where="--threshold",
                       fix="give the practical threshold as a fraction, e.g. 0.05 for 5 %")


def check_alpha(alpha: Any) -> None:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise KitError(f"significance level {alpha!r} is not in (0, 1)", where="--alpha", fix="e.g. --alpha 0.05")


def _flat(d: Any, prefix: str = "") -> dict[str, ProvValue]:
    out: dict[str, ProvValue] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(d, list) and d and all(isinstance(x, dict) for x in d):
        for i, v in enumerate(d):
            out.update(_flat(v, f"{prefix}[{i}]"))
    else:
        out[prefix] = d
    return out


def provenance(manifest: Manifest, analysis: Analysis) -> dict[str, ProvValue]:
    """What must match for a fair comparison, flattened to dotted keys."""
    host = manifest.host
    prov: dict[str, ProvValue] = {
        "host.hostname": host.get("hostname"),
        "host.cpu_model": host.get("cpu_model"),
        "host.kernel": host.get("kernel"),
        "host.cpu_governors": ",".join(host.get("cpu_freq", {}).get("governors", [])),
        **{f"host.cpu.{k}": (",".join(v) if isinstance(v, list) else v) for k, v in (host.get("cpu") or {}).items()},
        **{f"host.env.{k}": v for k, v in (host.get("env") or {}).items() if k not in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID")},
        "kit.version": manifest.kit.get("version"),
        "kit.commit": manifest.kit.get("commit"),
        "backend": manifest.backend.get("backend"),
    }
    for g in host.get("gpus", []):
        i = g.get("index", "?")
        for k in ("name", "driver_version", "cuda_driver_version", "vbios", "power_limit_w", "clocks_locked",
                  "applications_clock_sm_mhz", "persistence_mode", "ecc_mode"):
            if k in g:
                prov[f"gpu{i}.{k}"] = g[k]
    for fw, img in (manifest.backend.get("images") or {}).items():
        prov[f"image.{fw}.digest"] = img.get("digest") or img.get("id")
        prov[f"image.{fw}.tag"] = img.get("tag")
    for env in analysis.trial_env:
        for k in ("framework_version", "keras_version", "cuda", "cudnn", "device_name", "threads"):
            if env.get(k) is not None:
                prov[f"inside.{env['arm']}.{k}"] = env[k]
        kernels = env.get("cpu_kernels")
        for k, v in (kernels.items() if isinstance(kernels, dict) else ()):
            if v is not None:
                prov[f"inside.{env['arm']}.cpu_kernels.{k}"] = v
    for t in analysis.validity:  # load before trials, throttling, drift...: conditions of the run
        if t.status == "threat" and t.rule:
            prov[f"threat.{t.rule}"] = t.severity
    spec = manifest.spec
    for k, v in _flat({"workload": spec.get("workload"), "dataset": spec.get("dataset"),
                       "design": spec.get("design")}).items():
        prov[f"spec.{k}"] = v
    return prov


# Which provenance differences could change a verdict between two runs, and how (most specific prefix first).
EXPLAINS: tuple[tuple[str, str], ...] = (
    ("host.cpu.", "CPU generation/ISA: decides which kernels oneDNN, MKL, Eigen and ATen run, and whether "
                  "TensorFlow enables oneDNN by default"),
    ("host.env.", "a kernel or thread setting from the environment"),
    ("inside.", "what ran inside the trials (versions, device, threads, CPU kernels)"),
    ("threat.", "a condition of the run (load before trials, throttling, drift, ...)"),
    ("host.cpu_governors", "CPU frequency policy"),
    ("gpu", "GPU model, driver, clocks or power limit"),
    ("image.", "the framework image"),
    ("spec.", "the protocol itself"),
    ("host.kernel", "the OS kernel (scheduler, mitigations)"),
)


def may_explain(key: str) -> str | None:
    """Why a difference in ``key`` could explain a changed verdict (None: bookkeeping only, e.g. the hostname)."""
    return next((why for prefix, why in EXPLAINS if key.startswith(prefix)), None)


def provenance_differences(a: Mapping[str, ProvValue], b: Mapping[str, ProvValue]) -> list[ProvenanceDiff]:
    return [ProvenanceDiff(k, a.get(k), b.get(k), may_explain(k))
            for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def claim_changes(an_a: Analysis, an_b: Analysis, diffs: Sequence[ProvenanceDiff]) -> list[ClaimChange]:
    """The paper's claims whose verdict differs between two runs of one study, each with the provenance
    differences that could explain it (the CPU's ISA, the GPU class, versions, ...: may_explain), most
    specific first. A claim only one run judged is listed as changed too."""
    from kit.analysis.claim_records import ClaimVerdict, Ledger

    def rows(an: Analysis, side: str) -> dict[str, ClaimVerdict]:
        raw = an.claims
        return {} if raw is None else {r.id: r for r in Ledger.from_json(raw, f"analysis.json of run {side}").rows}

    ra, rb = rows(an_a, "A"), rows(an_b, "B")
    causes = [d for d in diffs if d.may_explain]
    out = []
    for cid in list(ra) + [c for c in rb if c not in ra]:
        a, b = ra.get(cid), rb.get(cid)
        va, vb = (a.verdict if a else "not judged"), (b.verdict if b else "not judged")
        if va == vb:
            continue
        either = a if a is not None else b
        out.append(ClaimChange(
            id=cid, statement=either.statement if either is not None else "", verdict_a=va, verdict_b=vb,
            value_a=a.value_text if a else "", value_b=b.value_text if b else "", reason_a=a.reason if a else "",
            reason_b=b.reason if b else "",
            could_explain=tuple(f"{d.key}: {d.a} vs {d.b} ({d.may_explain})" for d in causes)))
    return out


def _groups(analysis: Analysis, metrics: tuple[str, ...],
            phases: tuple[str, ...] | None = None) -> dict[tuple[str, str, str, str], np.ndarray]:
    """(config label, metric, phase, arm) -> measured values (warm-ups and failed trials excluded)."""
    out: dict[tuple[str, str, str, str], list[float]] = {}
    for v in analysis.counted_values():
        if v.value is None or v.metric not in metrics or (phases is not None and v.phase not in phases):
            continue
        key = (analysis.config_label(v.config_id), v.metric, v.phase, v.arm)
        out.setdefault(key, []).append(float(v.value))
    return {k: np.asarray(x) for k, x in out.items()}


def _trial_values(analysis: Analysis, label: str, metric: str, phase: str, arm: str) -> list[tuple[str, int, float]]:
    """(trial id, repetition, value) of one configuration (by its label), metric, phase and arm that count."""
    return [(v.trial_id, int(v.repetition or 0), float(v.value)) for v in analysis.counted_values()
            if v.value is not None and v.metric == metric and v.phase == phase and v.arm == arm
            and analysis.config_label(v.config_id) == label]


def verdict(ratio: float | None, p_adj: float | None, lower_is_better: bool | None, threshold: float,
            alpha: float, mde: float | None = None, equivalent: bool | None = None) -> str:
    """Three-way: a significant *and* practical change; "no change" only when the change is shown to be smaller
    than ``threshold`` (``equivalent``: the 1 - 2 alpha interval of B/A inside [1/(1+t), 1+t], i.e. TOST at
    alpha); "inconclusive" otherwise (``mde`` inf: the design could not have rejected anything)."""
    if ratio is None or not np.isfinite(ratio):
        return "inconclusive" if mde == float("inf") else "not tested"  # too few trials to test: say how many
    if p_adj is not None and p_adj < alpha and abs(ratio - 1.0) >= threshold and lower_is_better is not None:
        worse = ratio > 1.0 if lower_is_better else ratio < 1.0
        return "regression" if worse else "improvement"
    if equivalent:
        return "no change"
    return "inconclusive"


# Metrics whose value a trial's seed decides (initial weights, batch order): between two runs with the same plan
# seed they are compared trial by trial, paired by configuration, arm and repetition (the block's seed).
SEED_DETERMINED = ("accuracy", "train_loss")


def _seed_paired(an_a: Analysis, an_b: Analysis, man_a: Manifest, man_b: Manifest, metrics: tuple[str, ...],
                 phases: tuple[str, ...] | None) -> dict[tuple[str, str, str, str], tuple[np.ndarray, np.ndarray]]:
    """(config, metric, phase, arm) -> values of A and B paired by repetition, for seed-determined metrics of two
    runs of one plan seed (the same configuration ids); empty when the seeds differ."""
    if man_a.plan.seed != man_b.plan.seed:
        return {}

    def table(an: Analysis) -> dict[tuple[str, str, str, str], dict[int, float]]:
        out: dict[tuple[str, str, str, str], dict[int, float]] = {}
        for v in an.counted_values():
            if v.value is not None and v.metric in SEED_DETERMINED and v.metric in metrics and (
                    phases is None or v.phase in phases):
                key = (v.config_id, v.metric, v.phase, v.arm)
                out.setdefault(key, {})[int(v.repetition or 0)] = float(v.value)
        return out

    ta, tb = table(an_a), table(an_b)
    paired: dict[tuple[str, str, str, str], tuple[np.ndarray, np.ndarray]] = {}
    for key in set(ta) & set(tb):
        reps = sorted(set(ta[key]) & set(tb[key]))
        if reps:
            cid, metric, phase, arm = key
            paired[(an_a.config_label(cid), metric, phase, arm)] = (
                np.array([ta[key][r] for r in reps]), np.array([tb[key][r] for r in reps]))
    return paired


def compare_runs(run_a: Path, run_b: Path, opts: CompareOptions | None = None) -> Comparison:
    """Compare run B (candidate) against run A (baseline): one typed record for every output format."""
    opts = opts or CompareOptions()
    check_options(opts)
    man_a, man_b = RunDir.open(run_a).manifest(), RunDir.open(run_b).manifest()
    an_a, an_b = load_analysis(run_a, opts.verify_all), load_analysis(run_b, opts.verify_all)
    prov_a, prov_b = provenance(man_a, an_a), provenance(man_b, an_b)
    diffs = provenance_differences(prov_a, prov_b)
    hard = [d for d in diffs if d.key == "host.hostname" or (d.key.startswith("gpu") and d.key.endswith(".name"))]
    if hard and not opts.allow_different_hosts:
        what = "; ".join(f"{d.key}: {d.a} vs {d.b}" for d in hard)
        raise KitError(f"the runs come from different machines ({what})", where=f"{run_a} vs {run_b}",
                       fix="compare runs of one host, or pass --allow-different-hosts to compare anyway (the report lists the differences)")
    ga, gb = _groups(an_a, opts.metrics, opts.phases), _groups(an_b, opts.metrics, opts.phases)
    by_seed = _seed_paired(an_a, an_b, man_a, man_b, opts.metrics, opts.phases)
    keys = sorted(set(ga) & set(gb))
    items = [(*key, *(by_seed[key] if key in by_seed else (ga[key], gb[key]))) for key in keys]
    rows = judge(items, paired=[key in by_seed for key in keys], opts=opts).rows
    busy_a, busy_b = busy_baseline(an_a.validity), busy_baseline(an_b.validity)
    ids_a = {an_a.config_label(c): c for c in an_a.configs}
    ids_b = {an_b.config_label(c): c for c in an_b.configs}

    def quiet_items(r: CompareRow) -> tuple[np.ndarray, np.ndarray]:
        """Row ``r``'s values without the trials still disturbed (by repetition where the row is paired)."""
        out_a = disturbed_trials(an_a.disturbance, r.arm, ids_a.get(r.config), r.phase)
        out_b = disturbed_trials(an_b.disturbance, r.arm, ids_b.get(r.config), r.phase)
        ta = _trial_values(an_a, r.config, r.metric, r.phase, r.arm)
        tb = _trial_values(an_b, r.config, r.metric, r.phase, r.arm)
        if r.paired:
            va = {rep: v for tid, rep, v in ta if tid not in out_a}
            vb = {rep: v for tid, rep, v in tb if tid not in out_b}
            reps = sorted(set(va) & set(vb))
            return np.array([va[k] for k in reps]), np.array([vb[k] for k in reps])
        return (np.array([v for tid, _, v in ta if tid not in out_a]),
                np.array([v for tid, _, v in tb if tid not in out_b]))

    rows = mark_suspects(rows, lambda r: (
        side_state(an_a.disturbance, r.arm, ids_a.get(r.config), r.phase, busy_a),
        side_state(an_b.disturbance, r.arm, ids_b.get(r.config), r.phase, busy_b)), "A", "B",
        quiet=lambda i: quiet_verdict(rows, i, *quiet_items(rows[i]), opts))
    if not rows:
        raise AnalysisError("the runs share no configuration, metric and arm to compare", where=f"{run_a} vs {run_b}",
                            fix="compare two runs of the same experiment")
    return Comparison(
        rows=rows, threshold=opts.threshold, alpha=opts.alpha, run_a=str(run_a), run_b=str(run_b),
        experiment_a=man_a.experiment, experiment_b=man_b.experiment, provenance_differences=tuple(diffs),
        different_hosts_allowed=bool(hard),
        claims_changed=tuple(claim_changes(an_a, an_b, diffs)) if man_a.experiment == man_b.experiment else ())


def _row(cfg: str, metric: str, phase: str, arm: str, a: np.ndarray, b: np.ndarray, paired: bool,
         opts: CompareOptions) -> CompareRow:
    """One comparison of B against A (paired: position i of each is one block), before its Holm family."""
    hl = hl_ratio(b, a, paired=paired, conf=1 - opts.alpha) if min(len(a), len(b)) else None
    hl_ok = hl is not None and hl.estimate is not None
    # the medians' bootstrap interval is shown only where the verdict cannot rest on the HL ratio: drawn only there
    comp = stats.compare_two(b, a, paired=paired, alpha=opts.alpha, n_boot=opts.n_boot, seed=opts.seed,
                             ratio_interval=not hl_ok)
    medians = comp.ratio
    est: float | None
    if hl_ok and hl is not None and hl.estimate is not None:  # the ratio the verdicts test (module docstring)
        est, low, high = hl.estimate, hl.low, hl.high
        estimator = (f"{HL_RATIO_TEXT} B/A: exp of the "
                     + ("pseudo-median of the paired log ratios" if paired else "median of all pairwise log ratios")
                     + f", {1 - opts.alpha:.0%} rank interval")
    else:  # a value not positive: no log ratio; the medians' ratio, which no verdict of this row rests on
        est, low, high = ((_finite(medians.estimate), _finite(medians.low), _finite(medians.high))
                          if medians is not None else (None, None, None))
        estimator = "ratio of medians B/A, BCa bootstrap interval (values not all positive)"
    return CompareRow(
        config=cfg, metric=metric, phase=phase, arm=arm, unit=METRICS[metric].unit, n_a=len(a), n_b=len(b),
        median_a=float(np.median(a)), median_b=float(np.median(b)), ratio=est, ratio_low=low, ratio_high=high,
        ratio_estimator=estimator, ratio_of_medians=_finite(medians.estimate) if medians is not None else None,
        test=comp.test.method if comp.test is not None else None,
        p=_finite(comp.test.p) if comp.test is not None else None,
        cliffs_delta=_finite(comp.cliffs_delta.value) if comp.cliffs_delta is not None else None,
        magnitude=comp.cliffs_delta.magnitude if comp.cliffs_delta is not None else None,
        reason=comp.reason, lower_is_better=METRICS[metric].lower_is_better, paired=paired)


def _finite(x: float | None) -> float | None:
    """A statistic as the JSON has it: a Python float, None where it is not finite (kit.stats.common)."""
    return None if x is None or not np.isfinite(x) else float(x)


def judge(items: list[tuple[str, str, str, str, np.ndarray, np.ndarray]], paired: bool | list[bool],
          opts: CompareOptions | None = None) -> Comparison:
    """The comparisons of B against A for (config, metric, phase, arm, a, b) items, one Holm family:
    rows with ratio, test, detectability and verdict (pure: ``kit compare``, ``kit bisect``).
    ``paired``: for every item, or per item (position i of a and b is one block, or one seed)."""
    opts = opts or CompareOptions()
    flags = paired if isinstance(paired, list) else [paired] * len(items)
    rows = [_row(cfg, metric, phase, arm, np.asarray(a, dtype=float), np.asarray(b, dtype=float), paired=p,
                 opts=opts) for (cfg, metric, phase, arm, a, b), p in zip(items, flags, strict=True)]
    judged = _holm_verdicts(rows, opts, [(np.asarray(i[4], dtype=float), np.asarray(i[5], dtype=float))
                                         for i in items]) if rows else ()
    return Comparison(rows=judged, threshold=opts.threshold, alpha=opts.alpha)


def _holm_verdicts(rows: list[CompareRow], opts: CompareOptions,
                   samples: list[tuple[np.ndarray, np.ndarray]]) -> tuple[CompareRow, ...]:
    """Holm over the rows, then each row's detectability at the family's first Holm level alpha/m."""
    level = opts.alpha / len(rows)
    out = []
    for r, p_adj, (a, b) in zip(rows, stats.holm([r.p for r in rows]), samples, strict=True):
        det = detectability(a, b, paired=r.paired, level=level, threshold=opts.threshold, alpha=opts.alpha)
        out.append(replace(r, detect=det, p_adj=p_adj, verdict=verdict(
            r.ratio, p_adj, r.lower_is_better, opts.threshold, opts.alpha, det.mde, det.equivalent)))
    return tuple(out)


def _arm_provenance(manifest: Manifest, analysis: Analysis, arm: str) -> dict[str, ProvValue]:
    img = (manifest.backend.get("images") or {}).get(arm) or {}
    prov: dict[str, ProvValue] = {"image.row": img.get("row"), "image.digest": img.get("digest") or img.get("id"),
                                  "image.tag": img.get("tag")}
    for k, v in (img.get("versions") or {}).items():
        prov[f"image.reports.{k}"] = v
    env: Mapping[str, Any] = next((e for e in analysis.trial_env if e.get("arm") == arm), {})
    for k in ("framework_version", "keras_version", "cuda", "cudnn", "device_name", "threads"):
        if env.get(k) is not None:
            prov[f"inside.{k}"] = env[k]
    return prov


def compare_arms(run: Path, arm_a: str, arm_b: str, opts: CompareOptions | None = None) -> Comparison:
    """Compare two arms of one run (e.g. two image versions of `kit run --images A,B`), arm B against A.

    The arms ran interleaved in the same blocks, so the comparison is paired
    (Wilcoxon signed-rank on per-block values) and one host is guaranteed;
    the provenance differences are those of the two arms' images.
    """
    opts = opts or CompareOptions()
    check_options(opts)
    man, an = RunDir.open(run).manifest(), load_analysis(run, opts.verify_all)
    arms = list(man.arms)
    for arm in (arm_a, arm_b):
        if arm not in arms:
            raise KitError(f"run has no arm {arm!r}", where=f"{run}: --arms", fix=f"use two of: {', '.join(arms)}")
    if arm_a == arm_b:
        raise KitError("--arms names the same arm twice", where="--arms", fix=f"use two of: {', '.join(arms)}")
    import pandas as pd  # the arms' pairing only: two runs compare without it (0.3 s of `kit compare`)

    from kit.analysis.hypotheses import paired_arrays

    vals = pd.DataFrame(an.value_rows())
    if not vals.empty:
        vals = counted(vals)
        vals = vals[vals["metric"].isin(opts.metrics) & vals["value"].notna()]
        if opts.phases is not None:
            vals = vals[vals["phase"].isin(opts.phases)]
    items: list[tuple[str, str, str, str, np.ndarray, np.ndarray]] = []
    if not vals.empty:
        for cid, metric, phase in sorted(vals.groupby(["config_id", "metric", "phase"]).groups):
            a, b, blocks = paired_arrays(vals, cid, metric, phase, arm_a, arm_b)
            if blocks:
                items.append((an.config_label(cid), metric, phase, f"{arm_b} vs {arm_a}", a, b))
    rows = judge(items, paired=True, opts=opts).rows
    ids = {an.config_label(c): c for c in an.configs}

    def quiet_items(r: CompareRow) -> tuple[np.ndarray, np.ndarray]:
        """Row ``r``'s pairs without the blocks in which either arm's trial stayed disturbed."""
        cid = ids.get(r.config)
        if cid is None or vals.empty:
            return np.array([]), np.array([])
        shaken = disturbed_blocks(an.disturbance, (arm_a, arm_b), cid, r.phase)
        a, b, _ = paired_arrays(vals[~vals["block"].isin(shaken)], cid, r.metric, r.phase, arm_a, arm_b)
        return a, b

    rows = mark_suspects(rows, lambda r: (side_state(an.disturbance, arm_a, ids.get(r.config), r.phase),
                                          side_state(an.disturbance, arm_b, ids.get(r.config), r.phase)),
                         arm_a, arm_b, quiet=lambda i: quiet_verdict(rows, i, *quiet_items(rows[i]), opts))
    if not rows:
        raise AnalysisError(f"arms {arm_a} and {arm_b} share no measured block", where=str(run),
                            fix="compare arms that both have finished trials (kit status RUN)")
    diffs = provenance_differences(_arm_provenance(man, an, arm_a), _arm_provenance(man, an, arm_b))
    return Comparison(rows=rows, threshold=opts.threshold, alpha=opts.alpha, run_a=f"{run} [{arm_a}]",
                      run_b=f"{run} [{arm_b}]", experiment_a=man.experiment, experiment_b=man.experiment,
                      provenance_differences=tuple(diffs), different_hosts_allowed=False, arms=(arm_a, arm_b))


def mark_suspects(rows: Sequence[CompareRow], sides: Callable[[CompareRow], tuple[SideState, SideState]],
                  who_a: str, who_b: str,
                  quiet: Callable[[int], tuple[str | None, str]] | None = None) -> tuple[CompareRow, ...]:
    """The rows with each regression/improvement that the load its sides ran under could explain turned into
    "suspect" (with ``suspect_cause``; ``was`` keeps the verdict the numbers alone gave); one that stands under
    load gets ``load_note``.

    ``quiet(i)``: row i's verdict re-judged on its undisturbed trials alone and how many those were (verdict None:
    too few to compute), called only for a row with a disturbed trial on either side; without it, nothing can be
    re-judged (:func:`kit.analysis.host_state.rule_on_load`)."""
    out = []
    for i, r in enumerate(rows):
        if r.verdict not in ("regression", "improvement"):
            out.append(r)
            continue
        a, b = sides(r)
        if a.quiet and b.quiet:
            out.append(r)
            continue
        qv, qn = quiet(i) if quiet is not None and (a.disturbed or b.disturbed) else (None, "")
        ruling = rule_on_load(a, b, who_a, who_b, r.phase, r.verdict, qv, qn)
        r = replace(r, load=RowLoad(a, b, qv, qn or None))
        if ruling.suspect is not None:
            r = replace(r, was=r.verdict, verdict="suspect", suspect_cause=ruling.suspect)
        elif ruling.note is not None:
            r = replace(r, load_note=ruling.note)
        out.append(r)
    return tuple(out)


def quiet_verdict(rows: Sequence[CompareRow], idx: int, a: np.ndarray, b: np.ndarray,
                  opts: CompareOptions) -> tuple[str | None, str]:
    """Row ``idx`` re-judged on the values ``a`` and ``b`` (its undisturbed trials), in its Holm family with the
    other rows as they are: (verdict, "n_a and n_b undisturbed trials"); verdict None when fewer than the test's
    floor (stats.MIN_N_FOR_TESTS per side) are left."""
    row = rows[idx]
    unit = "pairs" if row.paired else "trials"
    said = (f"{len(a)} undisturbed {unit}" if row.paired else
            f"{len(a)} of {row.n_a} A and {len(b)} of {row.n_b} B undisturbed trials")
    if min(len(a), len(b)) < MIN_N_FOR_TESTS:
        return None, said + f", fewer than the {MIN_N_FOR_TESTS} the test needs per side"
    new = _row(row.config, row.metric, row.phase, row.arm, np.asarray(a, dtype=float),
               np.asarray(b, dtype=float), paired=row.paired, opts=opts)
    ps = [r.p for r in rows]
    ps[idx] = new.p
    p_adj = stats.holm(ps)[idx]
    det = detectability(np.asarray(a, dtype=float), np.asarray(b, dtype=float), paired=row.paired,
                        level=opts.alpha / len(rows), threshold=opts.threshold, alpha=opts.alpha)
    return verdict(new.ratio, p_adj, new.lower_is_better, opts.threshold, opts.alpha, det.mde,
                   det.equivalent), said


def exit_code(counts: Mapping[str, int], fail_on: str | None, allow_inconclusive: bool = False) -> int:
    """CI gating on a comparison's verdict ``counts``: 1 when a verdict named by ``fail_on`` occurs
    ("regression", "improvement", "change"); otherwise EXIT_SUSPECT (4) when a significant change is suspect (the
    load its sides ran under could explain it: re-run on a quiet host), EXIT_INCONCLUSIVE (3) when some comparison
    could not have seen it (unless allowed), else 0."""
    if not fail_on:
        return 0
    c = counts
    bad = {"regression": c["regression"], "improvement": c["improvement"],
           "change": c["regression"] + c["improvement"]}.get(fail_on)
    if bad is None:
        raise KitError(f"unknown --fail-on value {fail_on!r}", where="--fail-on", fix="use regression, improvement or change")
    if bad:
        return ExitCode.FAILED
    if c.get("suspect"):
        return EXIT_SUSPECT
    return EXIT_INCONCLUSIVE if c.get("inconclusive") and not allow_inconclusive else 0


def conclusive_advice(result: Comparison, limit: int = 8) -> str | None:
    """What the inconclusive rows need, row by row (not a maximum over rows of different noise): the repetitions
    with which each would show "no change" if there is none, at its observed noise."""
    rows = [r for r in result.rows if r.verdict == "inconclusive"]
    if not rows:
        return None
    parts = []
    for r in rows[:limit]:
        unit = "pairs" if r.paired else "trials per run"
        what = f"{r.config}/{r.metric}/{r.phase}/{r.arm}"
        n = r.n_needed
        parts.append(f"{what}: {n} {unit}" if n else f"{what}: noise unknown or too large for any practical n "
                     "(reduce it: kit doctor, kit tune, longer phases)")
    more = f"; and {len(rows) - limit} more (see --json)" if len(rows) > limit else ""
    return (f"{len(rows)} comparison(s) inconclusive: the run could not show whether they changed by less than "
            f"{result.threshold:.0%}. Repetitions that would decide each at its observed noise: "
            + "; ".join(parts) + more)


def render_html(result: Comparison, path: Path) -> Path:
    """The comparison as a self-contained HTML page (also usable as a report section)."""
    from kit.report.answer import compare_answer, compare_sentence, human_value
    from kit.report.html import environment
    from kit.store import write_named_output

    doc = result.to_json()  # the template reads the JSON form (kit compare --json); the answer reads the rows
    thr = float(result.threshold or 0.05)
    rows = [{**x, "sentence": compare_sentence(r, thr).split(": ", 1)[-1].rsplit(": ", 1)[0],
             "median_a_text": human_value(r.median_a, r.unit or ""),
             "median_b_text": human_value(r.median_b, r.unit or "")} for r, x in zip(result.rows, doc["rows"],
                                                                                     strict=True)]
    html = environment().get_template("compare.html.j2").render(r={**doc, "rows": rows}, said=compare_answer(result))
    write_named_output(path, html.encode("utf-8"))  # the user's --html path: never replaces a device or FIFO
    return path
