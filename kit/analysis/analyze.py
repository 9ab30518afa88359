"""Analysis of a run directory: raw records in, ``analysis.json`` out.

``analyze_run`` reads the run directory and writes analysis.json;
``compute_analysis`` is the pure part (manifest, trial records and the metric
table in, a :class:`kit.analysis_record.Analysis` out), so a stored run is
re-analysed without any trial and golden run directories can be tested byte
for byte. The parts live beside this module: the hypothesis table
(kit.analysis.hypotheses), the claims (kit.analysis.claim_facts) and the
descriptive summaries (kit.analysis.summary).
"""

from __future__ import annotations

import dataclasses
import math
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kit import __version__
from kit.analysis_record import ANALYSIS_SCHEMA, Analysis, AnalysisSoFar
from kit.errors import AnalysisError, DiskError, KitError
from kit.freshness import raw_digest, scan_inputs, sealed_text, stored_analysis
from kit.manifest import Manifest
from kit.records import TrialRecord, counted
from kit.store import ANALYSIS, RunDir, atomic_write_bytes
from kit.studies import Hooks, resolve_hooks, study_extras
from kit.trust import StudyTrust

if TYPE_CHECKING:  # the analysis' own stack (pandas, scipy.stats: ~1.5 s of imports) loads where it computes, so
    # that a report or compare of a run whose sealed analysis holds (current_analysis) reads it without them
    import pandas as pd

    from kit.analysis.sample_arrays import SampleArrays


def load_values(rd: RunDir, trials: Sequence[TrialRecord], metrics: tuple[str, ...],
                facts: list[dict[str, Any]] | None = None,
                kept: dict[str, SampleArrays | None] | None = None) -> pd.DataFrame:
    """The per-trial metric table of a run (one row per trial, phase and metric).

    With ``facts`` (a list to fill), also each trial's telemetry facts for the
    validity rules, from the same read of its samples; with ``kept`` (trial ids
    to their samples, None until read), the samples of those trials, for the
    report's telemetry figure (kit.analysis.telemetry_series): the rows of its
    panels' series only, which is all it reads (a frame of every row took a
    quarter of a second at 10^6 samples).
    """
    import pandas as pd

    from kit.analysis.energy import load_idle_power
    from kit.analysis.metrics import VALUE_COLUMNS, trial_metric_rows
    from kit.analysis.sample_arrays import read_sample_arrays
    from kit.analysis.telemetry import TrialTelemetry
    from kit.analysis.telemetry_series import PANELS
    from kit.analysis.validity_telemetry import trial_facts

    rows: list[dict[str, Any]] = []
    idle = load_idle_power(rd)  # the idle baseline's power per host and energy domain: net-of-idle energy
    for rec in trials:
        # as arrays (kit.analysis.sample_arrays): no pandas frame of the whole file, which at 10^6 rows took seconds
        samples = read_sample_arrays(rd, rec.trial_id)
        as_json = rec.to_json()  # the readers of kit.analysis.telemetry and .metrics take the trial file's JSON
        tel = TrialTelemetry.of(as_json, samples)  # attributed to phases once, read by the metrics and the threats
        rows += trial_metric_rows(as_json, samples, metrics, tel, idle)
        if facts is not None:  # the threat facts read only NVML series: a frame of those rows alone
            facts.append(trial_facts(rec, tel.rows_of("nvml"), tel))
        if kept is not None and rec.trial_id in kept:  # the rows the figure's panels read, as read_samples has them
            kept[rec.trial_id] = samples.take(samples.having((p[0], p[2]) for p in PANELS))
    return pd.DataFrame(rows, columns=VALUE_COLUMNS)


def load_baseline(rd: RunDir, trials: Sequence[TrialRecord] | None = None) -> dict[str, Any]:
    """Idle-baseline facts (CPU load, foreign GPU processes) from samples/_baseline*, if recorded.

    With ``trials`` whose records name their GPUs, only those GPUs' rows count.
    """
    import pandas as pd

    from kit.analysis.telemetry import trial_gpu_indices
    from kit.analysis.validity_telemetry import baseline_facts
    from kit.store import BASELINE_ID, SAMPLES

    sdir = rd.path / SAMPLES
    names = sorted(p.stem for p in sdir.glob(f"{BASELINE_ID}*.parquet")) if sdir.is_dir() and not sdir.is_symlink() \
        else []
    frames = [rd.read_samples(n) for n in names]
    frames = [f for f in frames if not f.empty]
    own = [trial_gpu_indices(t.to_json()) for t in trials or []]
    indices = None if not own or any(i is None for i in own) else sorted({i for ix in own for i in ix or []})
    return baseline_facts(pd.concat(frames, ignore_index=True) if frames else None, indices)


def analyze_run(run_dir: Any, trust: StudyTrust | None = None, write: bool | str = True) -> Analysis:
    """Analyse a stored run and write analysis.json next to the raw data, sealed (:mod:`kit.freshness`).

    ``trust`` says which study code may run (:func:`kit.studies.resolve_hooks`; by default only the kit's own
    bundled studies and what the user trusted). ``write``: True writes (a failure is a DiskError),
    ``"if-possible"`` keeps the analysis in memory when the run directory is read-only, False never writes.
    """
    rd = RunDir.open(run_dir)
    digest = raw_digest(rd.path)  # before reading: a trial written meanwhile makes the analysis stale, not wrong
    inputs = scan_inputs(rd.path)  # per file (kit.freshness): later seal checks re-hash only what moved
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
    analysis = dataclasses.replace(analysis, raw_digest=digest)
    text, sealed = sealed_text(analysis.to_json(), inputs, hooks.state())  # over the bytes as written
    if sealed is not None:
        analysis = dataclasses.replace(analysis, seal=sealed)
    if write:
        try:
            atomic_write_bytes(rd.path / ANALYSIS, text)
        except DiskError:
            if write != "if-possible":
                raise
    return analysis


def _analyze(rd: RunDir, manifest: Manifest, hooks: Hooks) -> Analysis:
    from kit.analysis.sample_arrays import read_sample_arrays
    from kit.analysis.screen import retried_trials, screen_trials
    from kit.analysis.telemetry_series import figure_trials, telemetry_series

    raw = rd.trial_records()
    retried = retried_trials(rd.checked_attempts(), raw)
    trials, excluded = screen_trials(raw)
    if not trials:
        raise AnalysisError("no finished trial to analyse", where=str(rd.path),
                            fix=f"run some trials first: kit run --resume {rd.path}")
    metrics = _metrics_of(manifest)
    facts: list[dict[str, Any]] = []
    drawn, _ = figure_trials(raw, manifest.arms)  # the report's telemetry figure: from the samples read here
    kept: dict[str, SampleArrays | None] = {t.trial_id: None for t in drawn}
    values = load_values(rd, trials, metrics, facts, kept)
    nodes = rd.nodes()
    if nodes:
        manifest = manifest.with_nodes(nodes)
    analysis = compute_analysis(manifest, trials, values, trial_telemetry=facts, baseline=load_baseline(rd, trials),
                                hooks=hooks, retried=retried)

    def samples_of(trial_id: str) -> SampleArrays:
        got = kept.get(trial_id)
        return got if got is not None else read_sample_arrays(rd, trial_id)

    return dataclasses.replace(analysis, excluded_trials=tuple(excluded), retried_trials=tuple(retried),
                               telemetry=telemetry_series(raw, manifest.arms, samples_of))


def current_analysis(run_dir: Path, rd: RunDir | None = None, trust: StudyTrust | None = None,
                     need_study: bool = True, verify_all: bool = False,
                     series: tuple[str, str] | None = None) -> tuple[Analysis, bool]:
    """(analysis of the run as it is on disk, typed, whether it had to be recomputed); ``rd``: the run already
    opened.

    analysis.json is reused only when its seal holds (:func:`kit.freshness.seal_holds`: this user's kit made it
    from the run's inputs as they are now); with ``need_study`` also only when it was made with the study code
    this reader would use (``trust``). The check re-hashes only the input files whose size or mtime moved since
    the seal; ``verify_all`` re-hashes all of them (``--verify-all``; what ``kit pack`` always does). ``series``
    (metric, phase): a stored analysis is typed with only that series' values (:meth:`Analysis.from_json`). Otherwise the analysis is recomputed, and written back where the run
    directory allows it (a read-only run is analysed in memory).
    """
    rd = rd or RunDir.open(run_dir)
    stored = stored_analysis(rd.path, rd, trust, need_study, verify_all, series)
    if stored is not None:
        return stored, False
    return analyze_run(rd.path, trust=trust, write="if-possible"), True


def _metrics_of(manifest: Manifest) -> tuple[str, ...]:
    from kit.analysis.metrics import DEFAULT_METRICS, METRICS, NVML_METRICS

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


def compute_analysis(manifest: Manifest, trials: Sequence[TrialRecord], values: pd.DataFrame,
                     trial_telemetry: list[dict[str, Any]] | None = None,
                     baseline: dict[str, Any] | None = None, hooks: Hooks | None = None,
                     retried: list[dict[str, Any]] | None = None) -> Analysis:
    """The analysis of a run as a record; ``trial_telemetry`` and ``baseline`` feed the telemetry validity rules.

    The hypothesis rows are typed as soon as they are computed; the validity rules and the claims read them and
    the other tables computed before them as an :class:`kit.analysis_record.AnalysisSoFar`. The whole is made
    JSON-safe once and typed as the record at the end: the record, not these tables, is what leaves the
    analysis layer.

    ``hooks``: the study code the reader trusted (:func:`kit.studies.resolve_hooks`); its analysis.py adds to
    ``extras``. None: the kit's bundled study of the experiment id, if any (kit code).
    """
    hooks = hooks if hooks is not None else resolve_hooks(None, manifest)
    spec = manifest.spec
    arms = list(manifest.arms)
    alpha = manifest.alpha
    configs = manifest.configs
    use = usable(values)

    from kit.analysis.claim_facts import claim_verdicts
    from kit.analysis.design import design_table
    from kit.analysis.devices import device_summary
    from kit.analysis.equivalence import check_equivalence
    from kit.analysis.host_state import disturbance_table
    from kit.analysis.hypotheses import hypothesis_rows, median_durations, sequential_looks
    from kit.analysis.summary import descriptives, measured, run_summary, trial_env
    from kit.analysis_rows import HypothesisResult
    from kit.plan import config_label

    labels = {cid: config_label(cfg) for cid, cfg in configs.items()} if len(configs) > 1 else None
    described = descriptives(use, arms, labels)
    devices = device_summary(trials, arms)
    shaken = disturbance_table(trials, retried or [])
    # typed once, JSON-safe (NaN -> None), as analysis.json will hold them: the later stages read these rows
    hypotheses = [HypothesisResult.from_json(_clean(r)) for r in hypothesis_rows(
        spec, use, arms, configs, alpha, values=values, refusal=devices["refusal"],
        durations=median_durations(trials), disturbance=shaken)]
    equivalence = check_equivalence(trials, arms)
    which = measured(values, manifest)
    summary = run_summary(manifest, trials)
    envs = trial_env(trials, arms)
    telemetry = trial_telemetry or []
    base = baseline or {"recorded": False}

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
        "run": summary.to_json(),
        "descriptives": [d.to_json() for d in described],
        "hypotheses": [h.to_json() for h in hypotheses],
        "design": design_table(spec, configs, arms),
        "equivalence": equivalence,
        "measured": [m.to_json() for m in which],
        "trial_env": envs,
        "devices": devices,
        "trial_telemetry": telemetry,
        "baseline": base,
        "disturbance": shaken.to_json(),
        "values": values.to_dict(orient="records"),
    }
    from kit.analysis.nodes import node_analysis
    from kit.analysis.validity import assess

    nodes = node_analysis(manifest, trials, use, arms)
    extras = study_extras(hooks, manifest, trials, values)  # the study folder's analysis.py
    analysis["nodes"] = nodes
    analysis["extras"] = extras
    analysis["study_code"] = hooks.as_dict()  # whose analysis.py/report.py ran, or why none did
    so_far = AnalysisSoFar(hypotheses=tuple(hypotheses), descriptives=tuple(described), measured=tuple(which),
                           equivalence=equivalence, trial_env=tuple(envs), devices=devices,
                           trial_telemetry=tuple(telemetry), baseline=base, disturbance=shaken, nodes=nodes,
                           extras=extras)
    analysis["validity"] = assess(manifest, trials, values, so_far)
    analysis["claims"] = claim_verdicts(manifest, trials, use, configs, alpha, so_far)
    if manifest.sequential:
        analysis["sequential"] = sequential_looks(manifest, hypotheses, use)
    return Analysis.from_json(_clean(analysis), f"the analysis of {manifest.experiment}")


