"""Analysis of a run directory: raw records in, ``analysis.json`` out.

``analyze_run`` reads the run directory and writes analysis.json;
``compute_analysis`` is the pure part (manifest, trial records and the metric
table in, plain data out), so a stored run is re-analysed without any trial
and golden run directories can be tested byte for byte.
"""

from __future__ import annotations

import itertools
import math
import traceback
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kit import __version__
from kit.analysis import stats
from kit.analysis.equivalence import check_equivalence
from kit.analysis.host_state import disturbance_table
from kit.analysis.metrics import DEFAULT_METRICS, METRICS, NVML_METRICS, VALUE_COLUMNS, trial_metric_rows
from kit.errors import AnalysisError, DiskError, KitError
from kit.freshness import DIGEST_KEY, SEAL_KEY, inputs_digest, raw_digest, seal, seal_holds
from kit.manifest import Manifest
from kit.records import ANALYSIS_SCHEMA, Analysis, counted
from kit.store import ANALYSIS, RunDir, atomic_write_json
from kit.studies import Hooks, resolve_hooks, study_extras
from kit.trust import StudyTrust


def load_values(rd: RunDir, trials: list[dict[str, Any]], metrics: tuple[str, ...],
                facts: list[dict[str, Any]] | None = None) -> pd.DataFrame:
    """The per-trial metric table of a run (one row per trial, phase and metric).

    With ``facts`` (a list to fill), also each trial's telemetry facts for the
    validity rules, from the same read of its samples.
    """
    from kit.analysis.energy import load_idle_power
    from kit.analysis.telemetry import TrialTelemetry
    from kit.analysis.validity_telemetry import trial_facts

    rows: list[dict[str, Any]] = []
    idle = load_idle_power(rd)  # the idle baseline's power per host and energy domain: net-of-idle energy
    for rec in trials:
        samples = rd.read_samples(rec["trial_id"])
        tel = TrialTelemetry.of(rec, samples)  # attributed to phases once, read by the metrics and the threats
        rows += trial_metric_rows(rec, samples, metrics, tel, idle)
        if facts is not None:
            facts.append(trial_facts(rec, samples, tel))
    return pd.DataFrame(rows, columns=VALUE_COLUMNS)


def load_baseline(rd: RunDir, trials: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Idle-baseline facts (CPU load, foreign GPU processes) from samples/_baseline*, if recorded.

    With ``trials`` whose records name their GPUs, only those GPUs' rows count.
    """
    from kit.analysis.telemetry import trial_gpu_indices
    from kit.analysis.validity_telemetry import baseline_facts
    from kit.store import BASELINE_ID, SAMPLES

    sdir = rd.path / SAMPLES
    names = sorted(p.stem for p in sdir.glob(f"{BASELINE_ID}*.parquet")) if sdir.is_dir() and not sdir.is_symlink() \
        else []
    frames = [rd.read_samples(n) for n in names]
    frames = [f for f in frames if not f.empty]
    own = [trial_gpu_indices(t) for t in trials or []]
    indices = None if not own or any(i is None for i in own) else sorted({i for ix in own for i in ix or []})
    return baseline_facts(pd.concat(frames, ignore_index=True) if frames else None, indices)


def analyze_run(run_dir: Any, trust: StudyTrust | None = None, write: bool | str = True) -> dict[str, Any]:
    """Analyse a stored run and write analysis.json next to the raw data, sealed (:mod:`kit.freshness`).

    ``trust`` says which study code may run (:func:`kit.studies.resolve_hooks`; by default only the kit's own
    bundled studies and what the user trusted). ``write``: True writes (a failure is a DiskError),
    ``"if-possible"`` keeps the analysis in memory when the run directory is read-only, False never writes.
    """
    rd = RunDir.open(run_dir)
    digest = raw_digest(rd.path)  # before reading: a trial written meanwhile makes the analysis stale, not wrong
    inputs = inputs_digest(rd.path, digest)
    manifest = rd.manifest()
    hooks = resolve_hooks(rd.path, manifest, trust)
    try:
        analysis = _analyze(rd, manifest, hooks)
    except (KitError, MemoryError):
        raise
    except Exception as exc:  # a record of a shape the checks at the edge did not foresee: never "internal error"
        raise AnalysisError(f"the run's records cannot be analysed ({type(exc).__name__}: {str(exc)[:200]})",
                            where=str(rd.path), fix="if this kit wrote the run and nobody edited it, this is a kit "
                            "bug: re-run with --debug and report it", detail=traceback.format_exc()) from None
    analysis[DIGEST_KEY] = digest
    sealed = seal(analysis, inputs, hooks.state())
    if sealed is not None:
        analysis[SEAL_KEY] = sealed
    if write:
        try:
            atomic_write_json(rd.path / ANALYSIS, analysis)
        except DiskError:
            if write != "if-possible":
                raise
    return analysis


def _analyze(rd: RunDir, manifest: Manifest, hooks: Hooks) -> dict[str, Any]:
    from kit.analysis.screen import retried_trials, screen_trials

    raw = list(rd.iter_trials())
    retried = retried_trials(rd.checked_attempts(), raw)
    trials, excluded = screen_trials(raw)
    if not trials:
        raise AnalysisError("no finished trial to analyse", where=str(rd.path),
                            fix=f"run some trials first: kit run --resume {rd.path}")
    metrics = _metrics_of(manifest)
    facts: list[dict[str, Any]] = []
    values = load_values(rd, trials, metrics, facts)
    nodes = rd.nodes()
    if nodes:
        manifest = manifest.with_nodes(nodes)
    analysis = compute_analysis(manifest, trials, values, trial_telemetry=facts, baseline=load_baseline(rd, trials),
                                hooks=hooks, retried=retried)
    analysis["excluded_trials"] = excluded
    analysis["retried_trials"] = retried
    return analysis


def current_analysis(run_dir: Path, rd: RunDir | None = None, trust: StudyTrust | None = None,
                     need_study: bool = True) -> tuple[Analysis, bool]:
    """(analysis of the run as it is on disk, typed, whether it had to be recomputed); ``rd``: the run already
    opened.

    analysis.json is reused only when its seal holds (:func:`kit.freshness.seal_holds`: this user's kit made it
    from the run's inputs as they are now); with ``need_study`` also only when it was made with the study code
    this reader would use (``trust``). Otherwise the analysis is recomputed, and written back where the run
    directory allows it (a read-only run is analysed in memory).
    """
    rd = rd or RunDir.open(run_dir)
    stored = rd.analysis_json()  # None for a planted link, a FIFO, garbage: never reused, recomputed below
    if isinstance(stored, dict):
        hooks = resolve_hooks(rd.path, rd.manifest(), trust).state() if need_study else None
        if seal_holds(stored, rd.path, hooks):
            return Analysis.from_json(stored, str(rd.path / ANALYSIS)), False
    fresh = analyze_run(rd.path, trust=trust, write="if-possible")
    return Analysis.from_json(fresh, str(rd.path / ANALYSIS)), True


def _metrics_of(manifest: Manifest) -> tuple[str, ...]:
    wanted = list(DEFAULT_METRICS)
    if "nvml" in manifest.telemetry_collectors:
        wanted += [m for m in NVML_METRICS if m not in wanted]
    for h in manifest.hypotheses:
        if h["metric"] not in wanted:
            wanted.append(h["metric"])
    return tuple(m for m in wanted if m in METRICS)


def _clean(obj: Any) -> Any:
    """JSON-safe: NaN/inf -> None, numpy scalars -> Python."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def usable(values: pd.DataFrame) -> pd.DataFrame:
    """Rows that enter statistics: measured trials (not warm-up) that finished ok, with a value."""
    v = counted(values)
    return v[v["value"].notna()]


def compute_analysis(manifest: Manifest, trials: list[dict[str, Any]], values: pd.DataFrame,
                     trial_telemetry: list[dict[str, Any]] | None = None,
                     baseline: dict[str, Any] | None = None, hooks: Hooks | None = None,
                     retried: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The analysis as plain data; ``trial_telemetry`` and ``baseline`` feed the telemetry validity rules.

    ``hooks``: the study code the reader trusted (:func:`kit.studies.resolve_hooks`); its analysis.py adds to
    ``extras``. None: the kit's bundled study of the experiment id, if any (kit code).
    """
    hooks = hooks if hooks is not None else resolve_hooks(None, manifest)
    spec = manifest.spec
    arms = list(manifest.arms)
    alpha = manifest.alpha
    configs = manifest.configs
    use = usable(values)

    from kit.analysis.design import design_table
    from kit.analysis.devices import device_summary
    from kit.plan import config_label

    labels = {cid: config_label(cfg) for cid, cfg in configs.items()} if len(configs) > 1 else None
    descriptives = _descriptives(use, arms, labels)
    devices = device_summary(trials, arms)
    shaken = disturbance_table(trials, retried or [])
    hypotheses = _hypotheses(spec, use, arms, configs, alpha, values=values, refusal=devices["refusal"],
                             durations=_median_durations(trials), disturbance=shaken)
    equivalence = check_equivalence(trials, arms)
    measured = _measured(values, manifest)
    summary = _run_summary(manifest, trials)

    analysis: dict[str, Any] = {
        "schema_version": ANALYSIS_SCHEMA,
        "kit_version": __version__,
        "experiment": manifest.experiment,
        "title": manifest.title,
        "profile": manifest.profile,
        "profile_description": manifest.profile_description,
        "alpha": alpha,
        "arms": arms,
        "configs": configs,
        "run": summary,
        "descriptives": descriptives,
        "hypotheses": hypotheses,
        "design": design_table(spec, configs, arms),
        "equivalence": equivalence,
        "measured": measured,
        "trial_env": _trial_env(trials, arms),
        "devices": devices,
        "trial_telemetry": trial_telemetry or [],
        "baseline": baseline or {"recorded": False},
        "disturbance": shaken,
        "values": values.to_dict(orient="records"),
    }
    from kit.analysis.nodes import node_analysis
    from kit.analysis.validity import assess

    analysis["nodes"] = node_analysis(manifest, trials, use, arms)
    analysis["extras"] = study_extras(hooks, manifest, trials, values)  # the study folder's analysis.py
    analysis["study_code"] = hooks.as_dict()  # whose analysis.py/report.py ran, or why none did
    analysis["validity"] = assess(manifest, trials, values, analysis)
    analysis["claims"] = _claims(manifest, trials, use, configs, alpha, analysis)
    if manifest.sequential:
        analysis["sequential"] = _sequential(manifest, hypotheses, use)
    return _clean(analysis)


def _claims(manifest: Manifest, trials: list[dict[str, Any]], use: pd.DataFrame, configs: dict[str, Any],
            alpha: float, analysis: dict[str, Any]) -> dict[str, Any]:
    """The paper's claims judged on this run (kit.analysis.claims), under the conditions the run had."""
    from kit.analysis.claims import RunContext, claims_of, judge

    claims = claims_of(manifest.spec)
    env = analysis.get("trial_env") or []
    by_fw: dict[str, list[str]] = {}
    versions: dict[str, str] = {}
    for e in env:
        fw, arm = e.get("framework"), e.get("arm")
        if isinstance(fw, str) and isinstance(arm, str):
            by_fw.setdefault(fw, []).append(arm)
            if isinstance(e.get("framework_version"), str):
                versions[fw] = e["framework_version"]
    arm_of = {fw: arms[0] for fw, arms in by_fw.items() if len(set(arms)) == 1}
    frameworks = (manifest.spec.get("experiment") or {}).get("frameworks") or []
    for arm in manifest.arms:  # arms named by their framework, even where no trial reported its environment
        if arm in frameworks and arm not in by_fw:
            arm_of[arm] = arm
    devices = analysis.get("devices") or {}
    gpus = max((len(t.get("gpus") or ()) for t in trials if t.get("status") == "ok"), default=0)
    host = manifest.host or {}
    names = [str(g["name"]) for g in host.get("gpus") or [] if isinstance(g, dict) and isinstance(g.get("name"), str)]
    kinds = tuple(str(k) for k in devices.get("kinds") or ())
    hardware = ", ".join(sorted(set(names))) if "gpu" in kinds and names else str(host.get("cpu_model") or "")
    facts, paper_estimate = _claim_facts(manifest, trials, configs)
    ctx = RunContext(profile=manifest.profile or "paper", device_kinds=kinds, gpus_per_trial=gpus, hardware=hardware,
                     versions=versions, arm_of=arm_of, refusal=devices.get("refusal"),
                     untrained=_untrained(manifest, configs), experiment=manifest.experiment,
                     cpu_model=str(host.get("cpu_model") or ""), facts=facts, paper_estimate_s=paper_estimate)
    period = (manifest.spec.get("telemetry") or {}).get("period_s")
    durations = _median_durations(trials)
    shaken = analysis.get("disturbance")

    def unresolvable(metric: str, phase: str, arms: tuple[str, ...], cid: str | None) -> str | None:
        m = METRICS.get(metric)
        if m is None or len(arms) != 2:
            return None
        return _unresolvable(m.kind, m.label, phase, (arms[0], arms[1]), cid, period, durations, shaken)

    return judge(claims, use, configs, ctx, alpha, unresolvable).as_dict()


# What a configuration's protocol is made of, beside its device and threads (claims' conditions of their own):
# every workload key and parameter except those that decide no measurement (the untimed warm-up, the accuracy
# a run is expected to reach).
_NOT_PROTOCOL = ("device", "threads", "warmup_steps", "expected_accuracy", "params")


def _device_param(key: str) -> bool:
    """A workload parameter that says where to compute (a device, the CPU cores): the claims' device and threads
    conditions judge it from what the trials ran on, not as a protocol difference."""
    return key == "cpu_cores" or key == "device" or key.endswith("_device")


def _claim_facts(manifest: Manifest, trials: list[dict[str, Any]],
                 configs: Mapping[str, Any]) -> tuple[dict[str, Any], float | None]:
    """Per configuration, how this run stands against the paper protocol's same configuration (the claims'
    conditions, kit.analysis.claims.ConfigFacts): the device its trials ran on, its CPU threads, its network,
    whether its data are a stand-in for the paper's, and what its profile runs otherwise than the paper profile
    (a configuration the paper profile does not run, a workload key, a parameter, the dataset's split); and the
    paper profile's stated run time. A run whose spec cannot be read has an unknown protocol: every
    configuration says so, and no claim is judged on it."""
    import dataclasses as dc

    from kit.analysis.across import network_of
    from kit.analysis.claims import ConfigFacts
    from kit.analysis.devices import device_kind
    from kit.spec import parse_spec

    text = manifest.spec_source.text if manifest.spec_source else None
    try:
        run = parse_spec(text, "manifest.json: spec_source", manifest.profile) if text else None
        paper = parse_spec(text, "manifest.json: spec_source", None) if text else None
    except KitError:
        run = paper = None
    host_cpus = (manifest.host or {}).get("cpu_logical")
    seen: dict[str, set[str]] = {}
    recorded_threads: dict[str, set[int]] = {}  # what the trials report they ran with (env.threads)
    for t in trials:
        kind = device_kind(t.get("env")) if t.get("status") == "ok" else None
        if kind is not None and isinstance(t.get("config_id"), str):
            seen.setdefault(t["config_id"], set()).add(kind)
            env_threads = (t.get("env") or {}).get("threads")
            if isinstance(env_threads, int) and not isinstance(env_threads, bool) and env_threads > 0:
                recorded_threads.setdefault(t["config_id"], set()).add(env_threads)
    paper_cfgs = paper.configurations() if paper is not None else []
    out: dict[str, Any] = {}
    for cid, cfg in configs.items():
        cfg = dict(cfg)
        kinds = seen.get(cid, set())
        device = next(iter(kinds)) if len(kinds) == 1 else None
        network = network_of(manifest.spec, cfg, cid)[1]
        if run is None or paper is None:
            out[cid] = ConfigFacts(device=device, network=network, protocol=(
                "the run records no spec this kit can read, so whether it runs the paper protocol is unknown",))
            continue
        try:
            mine, ds = run.workload_for(cfg), run.dataset_for(cfg)
        except (KeyError, KitError):
            out[cid] = ConfigFacts(device=device, network=network, protocol=("a configuration its spec cannot build",))
            continue
        cores = mine.params.get("cpu_cores")
        threads = cores if isinstance(cores, int) and cores > 0 else mine.threads or (
            host_cpus if isinstance(host_cpus, int) and host_cpus > 0 else None)
        reported = recorded_threads.get(cid, set())
        if len(reported) == 1:  # the trials' own report wins over the spec's request
            threads = next(iter(reported))
        if threads is not None and isinstance(host_cpus, int) and host_cpus > 0:
            threads = min(threads, host_cpus)  # 64 threads asked of a 2-CPU host compute on 2
        protocol: list[str] = []
        data, sized = "", False
        if cfg not in paper_cfgs:
            protocol.append("a configuration the paper profile does not run")
        else:
            theirs, pds = paper.workload_for(cfg), paper.dataset_for(cfg)
            a, b = dc.asdict(mine), dc.asdict(theirs)
            protocol += [k for k in a if k not in _NOT_PROTOCOL and a[k] != b.get(k)]
            protocol += [k for k in sorted(set(mine.params) | set(theirs.params))
                         if not _device_param(k) and mine.params.get(k) != theirs.params.get(k)]
            if ds is not None and pds is not None:
                sized = (ds.train_size, ds.test_size) == (pds.train_size, pds.test_size)
                if ds.source != pds.source and ds.source in ("synthetic", "random") \
                        and pds.source not in ("synthetic", "random"):
                    data = f"a {ds.source} stand-in for the paper's {ds.name} ({pds.source})"
                elif ds.source in ("synthetic", "random"):
                    # the paper profile's own data are a stand-in: a claim on the data's values is not the paper's
                    # either (a claim on shapes may still use it: ``data_sized``)
                    data = f"a {ds.source} stand-in for {ds.name}, in the paper profile too"
                if data == "" and ((ds.name, ds.source) != (pds.name, pds.source) or not sized):
                    protocol.append("dataset split")
            elif (ds is None) != (pds is None):
                protocol.append("dataset")
        out[cid] = ConfigFacts(device=device, threads=threads, network=network, data=data, data_sized=sized,
                               protocol=tuple(protocol))
    return out, (paper.profile_estimate_s if paper is not None else None)


# What decides a model's accuracy: the data and the training protocol. A profile that changes any of them measures
# another model's accuracy than the paper's.
_TRAINING_KEYS = ("batch_size", "epochs", "steps_per_epoch", "learning_rate", "optimizer", "momentum", "input_norm")


def _untrained(manifest: Manifest, configs: Mapping[str, Any]) -> dict[str, str]:
    """Configurations whose accuracy is not the paper protocol's: synthetic or random data, or a profile that
    trains otherwise than the paper profile (fewer epochs, a smaller split). Accuracy claims skip them."""
    from kit.spec import parse_spec

    text = manifest.spec_source.text if manifest.spec_source else None
    out: dict[str, str] = {}
    try:
        run = parse_spec(text, "manifest.json: spec_source", manifest.profile) if text else None
        paper = parse_spec(text, "manifest.json: spec_source", None) if text else None
    except KitError:
        run = paper = None
    for cid, cfg in configs.items():
        if run is None or paper is None:
            out[cid] = "the run records no spec this kit can read, so whether it trains as the paper did is unknown"
            continue
        ds = run.dataset_for(dict(cfg))
        if ds is None or ds.source in ("synthetic", "random"):
            out[cid] = (f"configuration {run_config_label(cfg)} trains on "
                        f"{'random inputs' if ds is None else ds.source + ' data'}: its accuracy means nothing")
            continue
        if (manifest.profile or "paper") == "paper":
            continue
        try:
            mine, theirs = run.workload_for(dict(cfg)), paper.workload_for(dict(cfg))
            pds = paper.dataset_for(dict(cfg))
        except (KeyError, KitError):
            out[cid] = f"the paper protocol has no configuration {run_config_label(cfg)}"
            continue
        changed = [k for k in _TRAINING_KEYS if getattr(mine, k, None) != getattr(theirs, k, None)
                   and not (k in mine.params or k in theirs.params)]
        changed += [k for k in _TRAINING_KEYS if k in mine.params and mine.params.get(k) != theirs.params.get(k)]
        if pds is not None and (ds.source, ds.train_size, ds.test_size) != (pds.source, pds.train_size, pds.test_size):
            changed.append("dataset split")
        if changed:
            out[cid] = (f"the {manifest.profile} profile trains configuration {run_config_label(cfg)} otherwise than "
                        f"the paper ({', '.join(changed)}): its accuracy is not the paper protocol's")
    return out


def run_config_label(cfg: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(cfg.items())) or "default"


def _sequential(manifest: Manifest, hypotheses: list[dict[str, Any]], use: pd.DataFrame) -> dict[str, Any]:
    """A run made with ``--until-conclusive``: its looks, recomputed from the data (kit.analysis.sequential)."""
    from kit.analysis.sequential import hypothesis_key, schedule_of, summary

    record = manifest.sequential or {}
    try:
        sched = schedule_of(record, manifest.alpha)
    except ValueError as exc:
        raise AnalysisError(f"the run's sequential record is not valid: {exc}", where="manifest.json: sequential",
                            fix="the manifest was edited; re-run the study") from None
    items: list[tuple[str, np.ndarray, np.ndarray]] = []
    untestable: list[tuple[str, str]] = []
    for h in hypotheses:
        key = hypothesis_key(h)
        if h.get("test_unit") != "trial" or h.get("config_id") is None:
            untestable.append((key, "tested across configurations: not part of the sequential looks"))
        elif h.get("not_testable") or h.get("not_decided"):
            untestable.append((key, str(h.get("reason") or "not testable")[:300]))
        else:
            a, b, _ = paired_arrays(use, h["config_id"], h["metric_tested"], h["phase"], h["arm_a"], h["arm_b"])
            if len(a):
                items.append((key, a, b))
            else:  # e.g. GPU telemetry on a host without one: more blocks cannot decide it
                untestable.append((key, f"no paired measurements of {h.get('metric_tested')} in the {h['phase']} "
                                        "phase"))
    return summary(sched, items, untestable, record)


def _trial_env(trials: list[dict[str, Any]], arms: list[str]) -> list[dict[str, Any]]:
    """Versions reported from inside the first finished trial of each arm."""
    seen: dict[str, dict[str, Any]] = {}
    for t in trials:
        if t["status"] == "ok" and t["arm"] not in seen and t.get("env"):
            seen[t["arm"]] = {"arm": t["arm"], "trial_id": t["trial_id"], **t["env"]}
    return [seen[a] for a in arms if a in seen]


def _run_summary(manifest: Manifest, trials: list[dict[str, Any]]) -> dict[str, Any]:
    planned = len(manifest.plan.trials)
    stop = (manifest.sequential or {}).get("stopped")
    if isinstance(stop, Mapping) and isinstance(stop.get("at_repetitions"), int):
        # --until-conclusive stopped at a look: the plan beyond it was never meant to run (kit.sequential_run)
        warm = int((manifest.spec.get("design") or {}).get("warmup_repetitions") or 0)
        planned = sum(1 for t in manifest.plan.trials if t.repetition < warm + int(stop["at_repetitions"]))
    status = Counter(t["status"] for t in trials)
    min_phase = (manifest.spec.get("workload") or {}).get("min_phase_s")
    return {
        "planned": planned,
        "finished": len(trials),
        "missing": planned - len(trials),
        "by_status": dict(status),
        "warmup_trials": sum(1 for t in trials if t.get("warmup")),
        "status": manifest.status,
        "backend": manifest.backend.get("backend"),
        "blocking": manifest.plan.blocking,
        "seed": manifest.plan.seed,
        "started": manifest.started,
        "ended": manifest.ended,
        **_timed_share(trials),
        "min_phase_s": _finite(min_phase),
    }


def _finite(v: Any) -> float | None:
    """``v`` as a float where it is a finite number (not a bool), else None."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _timed_share(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """How much of the counted trials' wall time their timed phases fill, and how often each phase repeated.

    Timed: every phase but the warm-up; wall: the trial process from start to
    exit (imports, data loading, warm-up and teardown included). The larger
    the share, the more of the machine time a run costs measures the
    frameworks rather than process start-up. ``phase_passes``: the fewest and
    most passes per phase (results ``<phase>_passes``) of a calibrated run.
    """
    from kit.records import counts

    timed_s = wall_s = 0.0
    n = 0
    passes: dict[str, list[int]] = {}
    for t in trials:
        phases, wall, results = t.get("phases"), _finite(t.get("wall_s")), t.get("results")
        if not counts(t) or wall is None or wall <= 0 or not isinstance(phases, dict):
            continue
        durations = [_finite(ph.get("duration_s")) for name, ph in phases.items()
                     if name != "warmup" and isinstance(ph, dict)]
        timed_s += sum(d for d in durations if d is not None and d > 0)
        wall_s += wall
        n += 1
        results = results if isinstance(results, dict) else {}
        for name in phases:
            k = results.get(f"{name}_passes")
            if isinstance(k, int) and not isinstance(k, bool) and k > 0:
                passes.setdefault(name, []).append(k)
    return {"timed_share": timed_s / wall_s if wall_s > 0 else None, "timed_s": timed_s, "trial_wall_s": wall_s,
            "timed_trials": n, "phase_passes": {k: [min(v), max(v)] for k, v in sorted(passes.items())}}


def _descriptives(use: pd.DataFrame, arms: list[str], labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
    out = []
    for (cid, metric, phase), g in use.groupby(["config_id", "metric", "phase"], sort=True):
        for arm in arms:
            ga = g[g["arm"] == arm].sort_values("position")
            if ga.empty:
                continue
            x = ga["value"].to_numpy(dtype=float)
            entry: dict[str, Any] = {"config_id": cid, "metric": metric, "phase": phase, "arm": arm,
                                     "unit": METRICS[metric].unit, **stats.describe(x).as_dict()}
            if labels:
                entry["config_label"] = labels.get(cid, cid)
            entry["normality"] = stats.normality(x).as_dict() if len(x) >= 3 else None
            out_ = stats.tukey_outliers(x).as_dict()
            ids = ga["trial_id"].tolist()
            out_["mild_trial_ids"] = [ids[i] for i in out_["mild_indices"]]
            out_["extreme_trial_ids"] = [ids[i] for i in out_["extreme_indices"]]
            n_m, n_e = len(out_["mild_trial_ids"]), len(out_["extreme_trial_ids"])
            out_["summary"] = "" if not (n_m or n_e) else (
                f"{n_m} mild, {n_e} extreme: " + ", ".join(out_["mild_trial_ids"] + out_["extreme_trial_ids"]))
            entry["outliers"] = out_
            out.append(entry)
    return out


def paired_arrays(use: pd.DataFrame, cid: str, metric: str, phase: str, a: str, b: str) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Values of arms a and b in the blocks where both were measured, block order."""
    g = use[(use["config_id"] == cid) & (use["metric"] == metric) & (use["phase"] == phase)]
    wide = g.pivot_table(index="block", columns="arm", values="value", aggfunc="first")
    if a not in wide or b not in wide:
        return np.array([]), np.array([]), []
    wide = wide[[a, b]].dropna().sort_index()
    return wide[a].to_numpy(float), wide[b].to_numpy(float), [int(i) for i in wide.index]


TELEMETRY_KINDS = ("telemetry", "energy", "phase_power")
NOT_DECIDED = "not decided"
NOT_TESTABLE = "not testable"


def across_configs(use: pd.DataFrame, configs: Mapping[str, Any], metric: str, phase: str, a: str, b: str,
                   spec: Mapping[str, Any]) -> list[Any]:
    """Per configuration with both arms measured: each arm's median of its trials' values (never steps), their
    log ratio, and the network and device the spec gives it (kit.analysis.across.ConfigRatio).

    The trial-level values in ``use`` already summarise each trial's steps; the network, not the
    configuration, is the unit of the test across configurations (kit.analysis.across says why).
    """
    from kit.analysis.across import config_ratio, device_of, network_of

    g = use[(use["metric"] == metric) & (use["phase"] == phase)]
    per = []
    for cid, cfg in configs.items():
        gc = g[g["config_id"] == cid]
        va = gc.loc[gc["arm"] == a, "value"].to_numpy(float)
        vb = gc.loc[gc["arm"] == b, "value"].to_numpy(float)
        if va.size == 0 or vb.size == 0:
            continue
        unit, network = network_of(spec, cfg, cid)
        per.append(config_ratio(cid, network, device_of(spec, cfg), va, vb, unit=unit, trial_ids=sorted(
            gc.loc[gc["arm"].isin([a, b]), "trial_id"].astype(str).tolist())))
    return per


def _median_durations(trials: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    from kit.analysis.validity_telemetry import phase_durations

    return {k: float(np.median(v)) for k, v in phase_durations(trials).items()}


def _unsampled(values: pd.DataFrame | None, cid: str, metric: str, phase: str, arms: tuple[str, str]) -> dict[str, list[int]]:
    """Per arm: (trials of the phase without a value, measured trials of the phase)."""
    if values is None or values.empty:
        return {}
    v = counted(values)
    v = v[(v["config_id"] == cid) & (v["metric"] == metric) & (v["phase"] == phase)]
    return {a: [int(v.loc[v["arm"] == a, "value"].isna().sum()), int((v["arm"] == a).sum())] for a in arms}


def _unresolvable(kind: str, label: str, phase: str, arms: tuple[str, str], config_id: str | None,
                  period: Any, durations: dict[tuple[str, str], float] | None,
                  disturbance: dict[str, Any] | None) -> str | None:
    """Why a telemetry or energy hypothesis cannot be tested on this phase (None: it can).

    The rule the ``short_phases`` threat states: a phase whose median lasts fewer than SHORT_PHASE_PERIODS
    sampling periods in either arm is mostly sampled outside itself (LeNet's TensorFlow inference lasted
    0.41 periods), and its energy is dominated by the counter's boundary error. And host telemetry of a
    phase that stayed disturbed (foreign load above the disturbance limit after the re-runs) measures the
    other tenants as much as the trial.
    """
    from kit.analysis.host_state import side_state
    from kit.analysis.validity_telemetry import SHORT_PHASE_PERIODS

    if kind not in TELEMETRY_KINDS:
        return None
    if isinstance(period, (int, float)) and not isinstance(period, bool) and period > 0 and durations:
        short = [(arm, durations[(arm, phase)]) for arm in arms
                 if (arm, phase) in durations and durations[(arm, phase)] < SHORT_PHASE_PERIODS * float(period)]
        if short:
            what = "; ".join(f"{arm} {phase} phase median {d:.3g} s = {d / float(period):.3g} sampling periods"
                             for arm, d in short)
            return (f"{what}, fewer than the {SHORT_PHASE_PERIODS} periods ({SHORT_PHASE_PERIODS * float(period):g} s) "
                    f"the telemetry needs to resolve a phase: its {label} is mostly other activity, so the "
                    "hypothesis is not tested (set [workload] min_phase_s to lengthen the phase)")
    states = [(arm, side_state(disturbance, arm, config_id, phase)) for arm in arms]
    shaken = [f"{st.disturbed} of {st.trials} {arm} trials" for arm, st in states if st.disturbed]
    if shaken:
        return (f"{', '.join(shaken)} stayed disturbed in the {phase} phase (foreign load above the disturbance "
                f"limit after the re-runs): their {label} measures the other tenants as much as the trial, so "
                "the hypothesis is not tested")
    return None


def _hypotheses(spec: Mapping[str, Any], use: pd.DataFrame, arms: list[str], configs: dict[str, Any],
                alpha: float, values: pd.DataFrame | None = None, refusal: str | None = None,
                durations: dict[tuple[str, str], float] | None = None,
                disturbance: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row per hypothesis, configuration, phase and arm pair; decided by Holm over the tested ones.

    Not decided at all when ``refusal`` says the arms are not comparable (different devices).
    A hypothesis on telemetry of a phase where some trials got no reading is not testable: the
    trials that got one are the slower ones, a biased subset. A hypothesis on ``gpu_power_w`` is
    tested on the energy-counter phase power where the run has it (``metric_tested``).
    """
    from kit.analysis.across import (
        across_networks,
        device_groups,
        device_text,
        hypothesis_fields,
        planned_family_sizes,
        row_devices,
    )
    from kit.analysis.design import config_phases, hypothesis_unit
    from kit.analysis.host_state import row_load
    from kit.analysis.metrics import AVERAGED_POWER_METRIC, preferred_power_metric
    from kit.plan import config_label

    power_metric = preferred_power_metric(values if values is not None else use)
    period = (spec.get("telemetry") or {}).get("period_s")
    # Two arms: one comparison. More (e.g. `kit run --images A,B,C`): each arm against the first, the
    # baseline, all in one Holm family, rather than silently testing only the first two.
    pairs = [(arms[0], other) for other in arms[1:]]
    rows: list[dict[str, Any]] = []
    samples: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for h in spec.get("hypotheses", []):
        tested_metric = power_metric if h["metric"] == AVERAGED_POWER_METRIC else h["metric"]
        m = METRICS[tested_metric]
        across = hypothesis_unit(spec, h) == "configuration"
        # across configurations: one row per device the phase runs on (kit.analysis.across), config_id None
        cells = [(None, phase, pair, dev) for phase in h["phases"]
                 for dev in row_devices(spec, configs, phase, config_phases) for pair in pairs] if across else \
            [(cid, phase, pair, None) for cid, phase, pair in itertools.product(configs, h["phases"], pairs)]
        for cid, phase, (a, b), device in cells:
            group: list[str] = []
            load: dict[str, Any] | None = None
            if across:
                group = device_groups(spec, configs, phase, config_phases).get(str(device), [])
                per_config = across_configs(use, {c: configs[c] for c in group}, tested_metric, phase, a, b, spec)
                xa, xb = np.array([r.a for r in per_config]), np.array([r.b for r in per_config])
                blocks: list[int] = []
            else:
                assert cid is not None  # not across: every cell holds one configuration's id
                xa, xb, blocks = paired_arrays(use, cid, tested_metric, phase, a, b)
                xa, xb, blocks, load = _undisturbed(xa, xb, blocks, disturbance, cid, phase, (a, b))
            row: dict[str, Any] = {
                "id": h["id"], "question": h["question"], "metric": h["metric"], "metric_tested": tested_metric,
                "label": m.label, "unit": m.unit, "phase": phase, "config_id": cid, "arm_a": a, "arm_b": b,
                "h0": h["h0"], "h1": h["h1"], "n_pairs": len(xa) if across else len(blocks), "blocks": blocks,
                "family": h.get("family") or "primary",
                "test_unit": "configuration" if across else "trial",
            }
            if load is not None:
                row["load"] = load  # the answer says what the verdict was decided on, and under what load
            if tested_metric != h["metric"]:
                row["metric_note"] = (f"requested as {h['metric']} (1-s moving average); tested on the NVML "
                                      "energy counter's difference over the phase")
            if across:
                row["device"] = device
                row["config_ids"] = list(group)  # the configurations of this device: its gaps and disturbances
                across_load = row_load(disturbance, (a, b), group, phase)
                if across_load is not None:  # networks are the unit: no trial is set aside, the load is said
                    row["load"] = across_load
                row["config_label"] = f"across configurations {device_text(device)}"
                row["per_config"] = [r.as_dict() for r in per_config]
            elif cid is not None and len(configs) > 1:  # cid is None only across configurations
                row["config_label"] = config_label(configs[cid])
            missing: dict[str, list[int]] = {}
            if m.kind in TELEMETRY_KINDS:
                for c in (group if across else [str(cid)]):  # across: this device's configurations
                    for arm, km in _unsampled(values, c, tested_metric, phase, (a, b)).items():
                        if km[1]:
                            acc = missing.setdefault(arm, [0, 0])
                            acc[0] += km[0]
                            acc[1] += km[1]
            gaps = {arm: km for arm, km in missing.items() if km[0] > 0}
            unresolved = _unresolvable(m.kind, m.label, phase, (a, b), cid, period, durations, disturbance)
            biased = None
            if gaps and any(km[0] < km[1] for km in missing.values()):
                dur = "; ".join(f"median {arm} {phase} phase {durations[(arm, phase)]:.3g} s"
                                for arm in (a, b) if durations and (arm, phase) in durations)
                biased = (f"{', '.join(f'{k} of {n} {arm} trials' for arm, (k, n) in gaps.items())} got no {m.label} "
                          f"reading in the {phase} phase ({dur}{'; ' if dur else ''}sampling period "
                          f"{period if period is not None else '?'} s): the trials with readings are a biased subset "
                          "(the slower ones), so the hypothesis is not tested on them")
            if unresolved is not None or biased is not None:
                row.update(tested=False, comparison=None, not_testable=True,
                           reason="; and ".join(r for r in (unresolved, biased) if r is not None))
            elif len(xa) == 0:
                row.update(tested=False, reason=f"no paired measurements of {m.label} in the {phase} phase",
                           comparison=None)
            elif across:  # the network as the unit, log ratios, this device's configurations only
                m_planned = planned_family_sizes(spec, configs, len(pairs), hypothesis_unit, config_phases)
                level = alpha / max(1, m_planned.get(row["family"], 1))
                row.update(hypothesis_fields(across_networks(per_config, str(device), level), a, b, alpha))
            else:
                comp = stats.compare_two(xa, xb, paired=True, alpha=alpha).as_dict()
                row["comparison"] = comp
                row["tested"] = comp.get("test") is not None
                row["reason"] = comp.get("reason")
                samples[id(row)] = (np.asarray(xa, dtype=float), np.asarray(xb, dtype=float))
            if refusal is not None:
                row.update(tested=False, not_decided=True,
                           reason=f"{refusal}: no hypothesis is decided on arms that ran on different devices"
                           + (f" (also: {row['reason']})" if row.get("reason") else ""))
            rows.append(row)
    # Holm within each family (primary, secondary: stated in the spec) over the hypotheses that were tested
    pvals = [r["comparison"]["test"]["p"] if r["tested"] else None for r in rows]
    adjusted: list[float | None] = [None] * len(rows)
    sizes: dict[str, int] = {}
    for fam in sorted({r["family"] for r in rows}):
        idx = [i for i, r in enumerate(rows) if r["family"] == fam]
        for i, p_adj in zip(idx, stats.holm([pvals[i] for i in idx]), strict=True):
            adjusted[i] = p_adj
        sizes[fam] = sum(pvals[i] is not None for i in idx)
    for r, p, p_adj in zip(rows, pvals, adjusted, strict=True):
        family = sizes[r["family"]]
        r["p"] = p
        r["p_adj"] = p_adj
        # p_adj is recomputable from the family's p
        r["p_adjust"] = {"method": "holm", "family": r["family"], "family_size": family}
        r["test_method"] = r["comparison"]["test"]["method"] if r["tested"] else None
        r.update(_decision(r, alpha))
        if r.get("rejected"):
            _mark_suspect(r, disturbance)
        if r["tested"] and id(r) in samples:
            r["detectable"] = _detectable(*samples[id(r)], level=alpha / max(family, 1), alpha=alpha)
    return rows


def _undisturbed(xa: np.ndarray, xb: np.ndarray, blocks: list[int], table: dict[str, Any] | None, cid: str,
                 phase: str, arms: tuple[str, str]) -> tuple[np.ndarray, np.ndarray, list[int], dict[str, Any] | None]:
    """A row's pairs without the blocks where a trial stayed disturbed, when at least the test's floor
    (stats.MIN_N_FOR_TESTS pairs) is left: the verdict is then decided on undisturbed trials (whole blocks: the
    pairing stays intact). Otherwise all pairs, and the load they carry (kit.analysis.host_state.row_load)."""
    from kit.analysis.host_state import disturbed_blocks, row_load

    shaken = disturbed_blocks(table, arms, cid, phase) & set(blocks)
    if not shaken:
        return xa, xb, blocks, None
    keep = [i for i, blk in enumerate(blocks) if blk not in shaken]
    if len(keep) >= stats.MIN_N_FOR_TESTS:
        kept = [blocks[i] for i in keep]
        return xa[keep], xb[keep], kept, row_load(table, arms, [cid], phase, blocks, kept)
    return xa, xb, blocks, row_load(table, arms, [cid], phase, blocks)


def _mark_suspect(r: dict[str, Any], table: dict[str, Any] | None) -> None:
    """A rejected H0 that the load its arms ran under could explain is "suspect"
    (kit.analysis.host_state.rule_on_load); one that stands under load gets ``load_note``.

    A row with enough undisturbed pairs was decided on them (:func:`_undisturbed`): its tested blocks hold no
    disturbed trial. Otherwise no verdict on undisturbed trials can be computed, and it is suspect when the
    arms' loads differ."""
    import functools

    from kit.analysis.host_state import SideState, disturbed_blocks, rule_on_load, side_state

    blocks = r.get("blocks") or None
    quiet_n = ""
    if r.get("config_ids"):  # across configurations: the row's device's configurations only
        sides = [[side_state(table, arm, c, r["phase"]) for c in r["config_ids"]] for arm in (r["arm_a"], r["arm_b"])]
        a, b = (functools.reduce(SideState.plus, ss, SideState(0, 0)) for ss in sides)
    else:
        a = side_state(table, r["arm_a"], r.get("config_id"), r["phase"], blocks=blocks)
        b = side_state(table, r["arm_b"], r.get("config_id"), r["phase"], blocks=blocks)
        if blocks:
            left = set(blocks) - disturbed_blocks(table, (r["arm_a"], r["arm_b"]), r.get("config_id"), r["phase"])
            quiet_n = (f"{len(left)} undisturbed of {len(blocks)} pairs, fewer than the {stats.MIN_N_FOR_TESTS} "
                       "the test needs")
    ruling = rule_on_load(a, b, r["arm_a"], r["arm_b"], r["phase"], "reject H0", None, quiet_n)
    if ruling.suspect is not None:
        r["suspect"] = ruling.suspect
        r["decision"] = f"suspect: {r['decision']}, but {ruling.suspect}"
    elif ruling.note is not None:
        r["load_note"] = ruling.note


def _detectable(xa: np.ndarray, xb: np.ndarray, level: float, alpha: float) -> dict[str, Any]:
    """The smallest relative difference the row's test would have found (power 0.8 at alpha/m, simulated against
    the test's rejection region at its n and ties): a "not rejected" is evidence of no difference only down to
    this size (kit.analysis.detectability)."""
    from kit.analysis.detectability import detectability

    d = detectability(xa, xb, paired=True, level=level, threshold=0.05, alpha=alpha).as_dict()
    return {k: d[k] for k in ("level", "noise", "mde", "decidable", "equivalent", "eq_low", "eq_high", "eq_conf",
                              "deterministic")}


def _decision(r: dict[str, Any], alpha: float) -> dict[str, Any]:
    if not r["tested"]:
        word = NOT_DECIDED if r.get("not_decided") else NOT_TESTABLE if r.get("not_testable") else "not tested"
        return {"decision": word, "rejected": None, "effect_text": None, "direction": None}
    comp = r["comparison"]
    delta = comp["cliffs_delta"]
    ratio = comp.get("ratio") or {}
    rejected = r["p_adj"] is not None and r["p_adj"] < alpha
    a, b = r["arm_a"], r["arm_b"]
    med_a, med_b = comp["a"]["median"], comp["b"]["median"]
    direction = None if med_a == med_b else (f"{a} > {b}" if med_a > med_b else f"{a} < {b}")
    effect = f"δ={delta['value']:+.2f} ({delta['magnitude']})"
    if ratio.get("estimate") is not None:
        effect += f", {a}/{b}={ratio['estimate']:.3g}"
    text = f"reject H0 ({direction})" if rejected else "H0 not rejected"
    return {"decision": text, "rejected": rejected, "effect_text": effect, "direction": direction}


def _measured(values: pd.DataFrame, manifest: Manifest) -> list[dict[str, Any]]:
    """Per metric: measured or not, and why not (from the collectors' probes)."""
    probes = {c["name"]: c for c in manifest.collectors}
    out = []
    for metric, g in values.groupby("metric", sort=False):
        m = METRICS[metric]
        n = int(g["value"].notna().sum())
        reason = None
        if n == 0:
            probe = probes.get(m.source) if m.source else None
            if m.kind in ("energy", "phase_power"):
                src = "nvml" if m.domain_prefix.startswith("gpu") else "rapl"
                probe = probes.get(src)
            if m.kind == "marker":
                reason = "the trials' phase markers hold no CPU times (cpu_s): recorded by an older kit"
            elif probe is not None and not probe["ok"]:
                reason = f"{probe['name']}: {probe['detail']}" + (f" (fix: {probe['fix']})" if probe.get("fix") else "")
            elif probe is None and m.kind != "result":
                reason = "collector not enabled in this run"
            elif m.net_of_idle:
                reason = ("no idle power of this counter in the run's baseline (telemetry.baseline_s = 0, or the "
                          "counter was not sampled then): see the gross energy")
            elif m.kind == "phase_power":
                reason = "no NVML energy counter on these GPUs (before Volta?): see the 1-s averaged GPU power"
            elif m.metric == "power_instant_w":
                reason = "the driver does not expose NVML_FI_DEV_POWER_INSTANT: see the 1-s averaged GPU power"
            else:
                reason = "no readings inside the phases (phases shorter than the sampling period?)"
        out.append({"metric": metric, "label": m.label, "unit": m.unit, "measured": n > 0, "n_values": n,
                    "reason": reason})
    return out
