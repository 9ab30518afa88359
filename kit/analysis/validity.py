"""Threats to validity, derived from the run rather than written by hand.

Each rule looks at the manifest, the trial records and the metric table and
emits zero or more findings: category (conclusion, internal, construct,
external; Wohlin et al.), severity, the evidence in numbers, and the
mitigation that was applied or is suggested. A rule that finds its threat
mitigated says so (status ``mitigated``), so the report shows what the
design already took care of.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
import pandas as pd

from kit import stats
from kit.analysis import accuracy_expected as _accuracy_expected  # noqa: F401  (registers its rule)
from kit.analysis import ambient as _ambient  # noqa: F401  (registers its rule)
from kit.analysis import devices as _devices  # noqa: F401  (registers its rules)
from kit.analysis import nodes as _nodes  # noqa: F401  (registers its rule)
from kit.analysis import validity_telemetry as _validity_telemetry  # noqa: F401  (registers its rules)
from kit.analysis.threats import RULES, SEVERITIES, Ctx, Threat, rule
from kit.analysis_record import AnalysisSoFar
from kit.analysis_rows import HypothesisResult
from kit.fmt import fmt_counts, fmt_num
from kit.manifest import Manifest
from kit.records import TrialRecord
from kit.spec import cpuset_size

# The rules of these modules join this one's: importing them registers them (kit.analysis.threats.rule).
# The order is the one analyze_run ended up with when the modules registered on first import (the order of the
# threats within a severity in analysis.json); now it is written down instead of depending on import order.
_RULE_MODULES = ("kit.analysis.validity", "kit.analysis.validity_telemetry", "kit.analysis.devices",
                 "kit.analysis.nodes", "kit.analysis.accuracy_expected", "kit.analysis.ambient")


@rule
def small_n(c: Ctx) -> list[Threat]:
    ns = [h["n_pairs"] for h in c.analysis.get("hypotheses", [])
          if h["n_pairs"] and h.get("test_unit") != "configuration"]  # across configurations: few_networks
    if not ns:
        return []
    n = min(ns)
    if n < stats.MIN_N_FOR_TESTS:
        return [Threat("small_n", "conclusion", "high", "Too few samples for a test",
                       f"the smallest hypothesis has {n} paired samples (< {stats.MIN_N_FOR_TESTS}); only descriptives are reported",
                       "run more repetitions: the design table gives the n each hypothesis needs and its minimum detectable "
                       "effect (the paper profile is sized to decide its hypotheses)", numbers={"min_pairs": n})]
    if n < 30:
        return [Threat("small_n", "conclusion", "medium", "Small sample size",
                       f"the smallest hypothesis has {n} paired samples; small effects may go undetected (low power)",
                       "use the paper profile for conclusions (the design table gives each hypothesis's n and minimum "
                       "detectable effect)", numbers={"min_pairs": n})]
    return []


@rule
def few_networks(c: Ctx) -> list[Threat]:
    """Rows across configurations: the network is their unit (kit.analysis.across.network_threats)."""
    from kit.analysis.across import network_threats

    return network_threats([HypothesisResult.from_json(h) for h in c.analysis.get("hypotheses", [])])


@rule
def high_cv(c: Ctx) -> list[Threat]:
    out = []
    for d in c.analysis.get("descriptives", []):
        if d["metric"] != "time_s" or d.get("cv") is None or d["n"] < 3:
            continue
        if d["cv"] > 0.05:
            out.append(Threat("high_cv", "conclusion", "medium", f"Unstable timing: {d['arm']} {d['phase']}",
                              f"coefficient of variation {d['cv']:.1%} over {d['n']} trials (> 5 %)",
                              "pin CPU frequency (performance governor), lock GPU clocks, stop other load; report medians and CIs",
                              numbers={"cv": d["cv"], "n": d["n"], "arm": d["arm"], "phase": d["phase"]}))
    return out


@rule
def interleaving(c: Ctx) -> list[Threat]:
    blocking = c.manifest.plan.blocking
    if blocking == "interleaved":
        return [Threat("order", "internal", "info", "Order of frameworks",
                       "trials of the frameworks were interleaved in randomised blocks (seed "
                       f"{c.manifest.plan.seed})", "randomised complete blocks", status="mitigated")]
    return [Threat("order", "internal", "high", "Frameworks not interleaved",
                   f"plan blocking is {blocking!r}: all trials of one framework ran before the other's, so drift in "
                   "temperature, clocks or background load is confounded with the framework",
                   "use blocking = \"interleaved\" (randomised blocks)")]


@rule
def drift(c: Ctx) -> list[Threat]:
    out = []
    use = c.use
    t = use[use["metric"] == "time_s"]
    for (phase, arm), g in t.groupby(["phase", "arm"]):
        if len(g) < stats.MIN_N_FOR_TESTS:
            continue
        tr = stats.linear_trend(g["position"].to_numpy(float), g["value"].to_numpy(float)).as_dict()
        p = tr.get("p")
        if p is not None and p < 0.01:
            med = float(np.median(g["value"]))
            slope = tr.get("slope")
            span = float(g["position"].max() - g["position"].min())
            change = (slope * span / med) if (slope is not None and med) else None
            if change is not None and abs(change) < 0.02:
                continue
            out.append(Threat("drift", "internal", "high" if c.manifest.plan.blocking != "interleaved" else "medium",
                              f"Drift of {phase} time with schedule position ({arm})",
                              f"trend p={p:.2g}; Theil-Sen slope changes the median by {change:+.1%} over the run"
                              if change is not None else f"trend p={p:.2g}",
                              "interleave frameworks (done if blocking is interleaved), let the device cool between trials, "
                              "and check the metric-against-position figure",
                              numbers={"arm": arm, "phase": phase, "n": len(g),
                                       **{k: tr.get(k) for k in ("p", "slope", "tau", "p_method", "method")}}))
    return out


@rule
def warmups(c: Ctx) -> list[Threat]:
    n = c.manifest.spec["design"]["warmup_repetitions"]
    warm = c.manifest.spec["workload"].get("warmup_steps", 0)
    if n > 0:
        return [Threat("warmup", "internal", "info", "Warm-up effects",
                       f"{n} warm-up block(s) run and excluded; {warm} untimed warm-up steps inside every trial",
                       "warm-ups excluded from analysis", status="mitigated")]
    return [Threat("warmup", "internal", "medium", "Warm-ups not excluded",
                   "no warm-up repetition: first-call costs (library loading, autotuning) are in the data",
                   "set design.warmup_repetitions >= 1")]


def _accuracy_gap_per_config(c: Ctx) -> list[Threat]:
    """Several configurations (datasets, models): compare the arms' mean accuracy within each, never pooled."""
    from kit.plan import config_label

    means: dict[str, dict[str, float]] = {}
    for d in c.analysis.get("descriptives", []):
        if d["metric"] == "accuracy" and d["phase"] == "infer":
            means.setdefault(d["config_id"], {})[d["arm"]] = d["mean"]
    gaps = {config_label(c.manifest.configs[cid]): round(max(v.values()) - min(v.values()), 4)
            for cid, v in means.items() if len(v) >= 2 and max(v.values()) - min(v.values()) > 0.02}
    if not gaps:
        return []
    return [Threat("accuracy", "construct", "medium", "Accuracy differs between frameworks",
                   f"gap in mean test accuracy above 0.02 in: {gaps}", "compare time at equal accuracy", numbers=gaps)]


def _counts_by_config(eq: dict[str, Any]) -> str:
    by_cfg = eq.get("param_counts_by_config") or {}
    if len(by_cfg) > 1:
        return "; ".join(f"{cid}: {fmt_counts(counts)}" for cid, counts in by_cfg.items())
    return fmt_counts(eq.get("param_counts"))


@rule
def equivalence(c: Ctx) -> list[Threat]:
    """The cross-framework check (kit.analysis.equivalence): "consistent with the same model" where it applied and
    passed, with what it cannot detect; why it did not apply; or that the models differ."""
    eq = c.analysis.get("equivalence", {})
    if eq.get("consistent"):
        moves = eq.get("loss_moves") or {}
        moved = (f"; the loss moved ({moves['basis']}: at least {moves['min_rel_change']:.1e} relative)"
                 if moves.get("min_rel_change") is not None else "")
        return [Threat("equivalence", "internal", "info", "Consistent with the same model in both frameworks",
                       f"parameter counts {fmt_counts(eq['param_counts'])}; identical initial weights and batches; training losses "
                       f"agree within {eq['max_rel_loss_gap']:.1e} (relative) over {eq['loss_pairs']} blocks"
                       + (f"; tolerance {eq['loss_tolerance']:.1e} ("
                          + "; ".join(b.get("rule", "") for b in eq.get("loss_tolerance_basis") or []) + ")"
                          if eq.get("loss_tolerance") else "") + moved
                       + (f". What it cannot detect: {eq['cannot_detect']}" if eq.get("cannot_detect") else ""),
                       "shared initial weights and data order, checked per block", status="mitigated")]
    if (c.manifest.spec["workload"].get("params") or {}).get("defaults") == "framework":
        return [Threat("equivalence", "internal", "medium", "Each framework's own defaults, by design",
                       f"parameter counts {_counts_by_config(eq)}; loss agreement "
                       f"{fmt_num(eq.get('max_rel_loss_gap'))}: the frameworks start from their own initialisers and layer "
                       "constants (workload.defaults = \"framework\", the study's question), so their training "
                       "differs by design", "set workload.defaults = \"shared\" to compare identical models")]
    if eq.get("not_applicable") and (eq.get("param_counts_equal") or not eq.get("param_counts_by_config")):
        counts = {int(n) for c_ in (eq.get("param_counts") or {}).values() for n in c_}
        if counts == {0}:
            return [Threat("equivalence", "internal", "info", "No trained model to compare",
                           f"the same-model check does not apply: {eq['not_applicable']}",
                           "none needed: nothing is trained", numbers={"param_counts": eq.get("param_counts")})]
        return [Threat("equivalence", "internal", "medium", "Same model not checked",
                       f"parameter counts {fmt_counts(eq.get('param_counts'))}; the same-model check does not apply: "
                       f"{eq['not_applicable']}",
                       "record the training loss before and after training (train_loss_initial, or "
                       "epoch_train_loss over two or more epochs) from shared initial weights and batches")]
    return [Threat("equivalence", "internal", "high", "Models not verified equivalent",
                   f"parameter counts {fmt_counts(eq.get('param_counts'))}; loss agreement {fmt_num(eq.get('max_rel_loss_gap'))}"
                   + (f" against the tolerance {eq['loss_tolerance']:.1e} for the recorded precision"
                      if eq.get("loss_tolerance") else ""),
                   "use the same architecture, initial weights and data order in both frameworks")]


@rule
def accuracy_gap(c: Ctx) -> list[Threat]:
    if len(c.manifest.configs) > 1:
        return _accuracy_gap_per_config(c)
    acc = c.analysis.get("equivalence", {}).get("accuracy_mean", {})
    vals = {k: v for k, v in acc.items() if v is not None}
    if len(vals) < 2:
        return []
    gap = max(vals.values()) - min(vals.values())
    low = [k for k, v in vals.items() if v <= 0.11]
    if low:
        return [Threat("accuracy", "construct", "high", "A framework did not learn",
                       f"mean test accuracy {vals}: {', '.join(low)} at chance level (10 classes)",
                       "check the training code of that framework before comparing times", numbers=vals)]
    if gap > 0.02:
        return [Threat("accuracy", "construct", "medium", "Accuracy differs between frameworks",
                       f"mean test accuracy {vals} (gap {gap:.3f})", "compare time at equal accuracy", numbers=vals)]
    return []


@rule
def unmeasured(c: Ctx) -> list[Threat]:
    hyp_metrics = {h["metric"] for h in c.manifest.hypotheses}
    out = []
    for m in c.analysis.get("measured", []):
        if not m["measured"] and m["metric"] in hyp_metrics:
            out.append(Threat("sensor", "construct", "medium", f"Not measured: {m['label']}",
                              f"{m['reason']}; the hypotheses on {m['label']} are not tested",
                              "run on a host that exposes the sensor (see `kit doctor`)"))
    return out


def _cpu_count(manifest: Manifest) -> int | None:
    """Logical CPUs a trial could use: the container's cpuset when pinned, else the host's."""
    cpuset = str((manifest.spec.get("container") or {}).get("cpuset") or "")
    if cpuset and manifest.backend.get("backend") in ("docker", "apptainer"):
        return cpuset_size(cpuset)  # validated when the spec was loaded
    return manifest.host.get("cpu_logical")


@rule
def cpu_threads(c: Ctx) -> list[Threat]:
    """A CPU trial whose framework threads take every core competes with the kit's own collectors
    (and a container engine): OpenMP barriers then stall. Seen on the 2-core CI machine: PyTorch
    LeNet training 23-34 s per trial instead of about 1 s in podman with 2 threads."""
    cores = _cpu_count(c.manifest)
    from kit.analysis.devices import device_kind

    envs = [e for e in c.analysis.get("trial_env", []) if e.get("threads") and (
        device_kind(e) == "cpu" or str(e.get("device_name") or e.get("device") or "").lower().endswith("cpu"))]
    if not cores or not envs:
        return []
    crowded = [e for e in envs if int(e["threads"]) >= cores]
    shown = ", ".join(f"{e['arm']}: {e['threads']} thread{'' if int(e['threads']) == 1 else 's'}" for e in envs)
    shown += f" on {cores} logical CPUs"
    numbers = {"cores": cores, "threads": {e["arm"]: int(e["threads"]) for e in envs}}
    if crowded:
        return [Threat("cpu_threads", "internal", "medium", "Framework threads take every CPU core",
                       f"{shown}; the host-side collectors sample on the same cores",
                       "set [workload] threads below the core count (e.g. cores - 1), so the kit's sampling "
                       "and the container engine do not stall the framework's thread pool", numbers=numbers)]
    return [Threat("cpu_threads", "internal", "info", "Framework threads take every CPU core",
                   f"{shown}", "a core is left for the kit's collectors", status="mitigated", numbers=numbers)]


@rule
def cpu_kernels(c: Ctx) -> list[Threat]:
    """CPU results depend on kernel dispatch the kit records but does not control: the CPU's ISA picks
    oneDNN/ATen/Eigen kernels, and TensorFlow enables oneDNN by default only on CPUs with VNNI/BF16/AMX.
    Two 2-core EPYC VMs of one kind gave opposite LeNet inference findings (TF/PT 0.59 vs 3.67); on one
    host PyTorch's inference time changed 1.5x with the oneDNN ISA cap, TensorFlow's 3x with oneDNN off."""
    from kit.analysis.devices import device_kind

    envs = [e for e in c.analysis.get("trial_env", []) if device_kind(e) == "cpu" and e.get("cpu_kernels")]
    if not envs:
        return []
    cpu = c.manifest.host.get("cpu") or {}
    isa = ",".join(cpu.get("isa") or []) or "unknown"
    shown = "; ".join(f"{e['arm']}: " + ", ".join(f"{k}={v}" for k, v in sorted(e["cpu_kernels"].items()) if v is not None)
                      for e in envs)
    where = (f"CPU {cpu.get('vendor', '?')} family {cpu.get('family', '?')} model {cpu.get('model', '?')} "
             f"(ISA {isa})")
    numbers = {"cpu": cpu, "kernels": {e["arm"]: e["cpu_kernels"] for e in envs}}
    onednn = {e["arm"]: e["cpu_kernels"].get("onednn") for e in envs}
    # TF_ENABLE_ONEDNN_OPTS recorded as 1 while oneDNN was off: set after TensorFlow's import (kits before the
    # harness pinned it did this on AVX2-only CPUs); today's harness stops such a trial instead
    ignored = sorted({e["arm"] for e in envs if str(e["cpu_kernels"].get("tf_enable_onednn_opts")).lower() in ("1", "true")
                      and e["cpu_kernels"].get("onednn") is False})
    if len({v for v in onednn.values() if v is not None}) > 1 or ignored:
        note = (f"; TF_ENABLE_ONEDNN_OPTS=1 did not take effect in {', '.join(ignored)} (set after TensorFlow was "
                "imported)" if ignored else "")
        return [Threat("cpu_kernels", "internal", "high", "The frameworks ran different CPU kernel libraries",
                       f"{shown}; {where}{note}", "re-run with this kit (its harness sets TF_ENABLE_ONEDNN_OPTS=1 "
                       "before any framework import, so both use oneDNN), or report the result as one of the kernel "
                       "libraries, not of the frameworks", numbers=numbers)]
    return [Threat("cpu_kernels", "external", "medium", "CPU result depends on the host's ISA and kernel dispatch",
                   f"{shown}; {where}. The kit records but does not control which kernels the CPU's ISA selects",
                   "state the CPU generation with the result; reproduce on a host with the same ISA, and use "
                   "`kit compare` across hosts (it lists host.cpu.* and cpu_kernels differences as possible causes)",
                   numbers=numbers)]


@rule
def governor(c: Ctx) -> list[Threat]:
    f = c.manifest.host.get("cpu_freq", {})
    if not f.get("readable"):
        return [Threat("governor", "internal", "low", "CPU frequency policy unknown",
                       "cpufreq is not exposed on this host (virtual machine?)", "record it on bare metal")]
    if f.get("governors") != ["performance"]:
        return [Threat("governor", "internal", "medium", "CPU governor not 'performance'",
                       f"governors: {', '.join(f.get('governors', []))}", "sudo cpupower frequency-set -g performance")]
    return []


@rule
def profile(c: Ctx) -> list[Threat]:
    if (c.manifest.profile or "paper") == "paper":
        return []
    return [Threat("profile", "construct", "high", f"Not the paper's protocol: profile {c.manifest.profile!r}",
                   c.manifest.profile_description or "a reduced profile", "run the paper profile on a GPU host")]


@rule
def external(c: Ctx) -> list[Threat]:
    host = c.manifest.host
    gpus = {g.get("name") for g in host.get("gpus", [])}
    names = sorted({d.name for d in c.manifest.datasets.values()})
    ds = (c.manifest.spec.get("dataset") or {}).get("name")
    data = (f"datasets {', '.join(names)}" if len(names) > 1 else f"one dataset ({names[0] if names else ds})"
            if names or ds else "no dataset (inputs the workload generates)")
    n_cfg = len(c.manifest.configs)
    model = "one model" if n_cfg == 1 else f"{n_cfg} configurations"
    where = f"one host ({host.get('cpu_model', '?')}" + (f", GPU {', '.join(sorted(gpus))}" if gpus else ", no GPU") + ")"
    return [Threat("external", "external", "info", "Generality",
                   f"{where}, {data}, {model}; results may not carry over to other hardware or models",
                   "repeat on other hosts and with the other studies of the kit")]


@rule
def synthetic_data(c: Ctx) -> list[Threat]:
    """Synthetic stand-ins (source "synthetic") of real datasets exercise the pipeline and measure nothing about the
    question. A workload without a dataset (random input tensors, Patel's own method) is not one: the runner records
    it as "random inputs" (source "random", written to the manifest as no dataset), and older runs' stand-in entry
    ("none", source "synthetic") reads as no dataset (kit.manifest)."""
    found = sorted(d.name for d in c.manifest.used_datasets() if d.source == "synthetic")
    if not found:
        return []
    return [Threat("synthetic_data", "construct", "high", f"Synthetic data: {', '.join(found)}",
                   f"the results on {', '.join(found)} come from small synthetic stand-ins in the real file formats "
                   "(the real data was not available); they say nothing about the paper's question",
                   "put the real files in the cache or pass --data-dir, and run the paper profile")]


@rule
def failed_cells(c: Ctx) -> list[Threat]:
    """A design cell whose every trial failed is an error of the run; the study analysis says what it skipped."""
    out = []
    for name, extra in sorted((c.analysis.get("extras") or {}).items()):
        failed = (extra or {}).get("failed_cells") if isinstance(extra, dict) else None
        if not failed:
            continue
        cells = "; ".join(f"{f.get('model')} {f.get('case')} {f['arm']}: {f['status']} in {f['trials']} trial(s), "
                          f"first error: {str(f.get('error') or '').strip().splitlines()[-1] if str(f.get('error') or '').strip() else '?'}"
                          for f in failed[:5])
        out.append(Threat("failed_cells", "internal", "high", f"Design cells failed ({name})",
                          f"{len(failed)} design cell(s) failed in every trial ({cells}{'; ...' if len(failed) > 5 else ''}); "
                          "the study's factor analysis is not computed on the rest of the design",
                          "fix the failing workload (see each trial's error and stderr_tail) and re-run those cells",
                          numbers={"cells": [{k: f.get(k) for k in ("config_id", "case", "model", "arm", "status",
                                                                     "trials", "trial_id")} for f in failed[:50]]}))
    return out


@rule
def trial_processes_left(c: Ctx) -> list[Threat]:
    """Processes a trial started and left running when its harness ended (the local backend's reaper ended and
    recorded them; a container's PID namespace ends them with the container)."""
    hit = [(t.trial_id, count, t.backend.get("leftover_processes")) for t in c.trials
           if isinstance(count := t.backend.get("leftover_count"), int) and count > 0]
    if not hit:
        return []
    total = sum(n for _, n, _ in hit)
    first_id, _, first = hit[0]
    shown = "; ".join(f"{p.get('name', '?')} (pid {p.get('pid')})" for p in (first if isinstance(first, list) else [])[:3]
                      if isinstance(p, dict))
    return [Threat("trial_processes_left", "internal", "medium", "Processes outlived their trial",
                   f"{len(hit)} trial(s) left {total} process(es) running when the harness ended (first: {first_id}: "
                   f"{shown or 'not listed'}); the kit ended them with the trial, so they did not overlap later "
                   "trials, but each such trial's own measurement ran beside them",
                   "make the workload wait for (join) every process it starts before it returns; the affected trials "
                   "are listed in their trial files (backend.leftover_processes)",
                   numbers={"trials": [t for t, _, _ in hit], "processes": total})]


def assess(manifest: Manifest, trials: Sequence[TrialRecord], values: pd.DataFrame,
           so_far: AnalysisSoFar) -> list[dict[str, Any]]:
    """The threats every registered rule finds, high severity first, mitigated ones last.

    ``so_far``: the typed tables computed before the rules (kit.analysis.analyze.compute_analysis); the rules'
    context still indexes them as analysis.json writes them (:meth:`AnalysisSoFar.rule_tables`)."""
    ctx = Ctx(manifest, trials, values, so_far.rule_tables())
    found: list[Threat] = []
    # this module's rules, then those of the other rule modules in _RULE_MODULES' order, each in the order written
    for r in sorted(RULES, key=lambda r: _RULE_MODULES.index(r.__module__)):
        found += r(ctx)
    order = {s: i for i, s in enumerate(SEVERITIES)}
    found.sort(key=lambda t: (t.status == "mitigated", order.get(t.severity, 9)))
    return [asdict(t) for t in found]
