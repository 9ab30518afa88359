"""The hypothesis table of an analysis: one row per hypothesis, configuration, phase and arm pair, decided by Holm.

Apart from :mod:`kit.analysis.analyze` so the orchestration (read the run, build the record, seal it) stays short
and the decision rules (which pairs count, when a telemetry hypothesis is not testable, what "suspect" means)
read in one place. :func:`paired_arrays` and :func:`across_configs` are the pairings the claims, the sequential
looks and the studies reuse.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
import pandas as pd

from kit import stats
from kit.analysis.metrics import METRICS
from kit.analysis_rows import Disturbance, HypothesisLoad, HypothesisResult
from kit.errors import AnalysisError
from kit.manifest import Manifest
from kit.records import TrialRecord, counted

if TYPE_CHECKING:  # kit.analysis.across is imported where it is used (below); here its record type only
    from kit.analysis.across import ConfigRatio


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
                   spec: Mapping[str, Any]) -> list[ConfigRatio]:
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


def median_durations(trials: Sequence[TrialRecord]) -> dict[tuple[str, str], float]:
    from kit.analysis.validity_telemetry import phase_durations

    return {k: float(np.median(v)) for k, v in phase_durations(trials).items()}


def _unsampled(values: pd.DataFrame | None, cid: str, metric: str, phase: str, arms: tuple[str, str]) -> dict[str, list[int]]:
    """Per arm: (trials of the phase without a value, measured trials of the phase)."""
    if values is None or values.empty:
        return {}
    v = counted(values)
    v = v[(v["config_id"] == cid) & (v["metric"] == metric) & (v["phase"] == phase)]
    return {a: [int(v.loc[v["arm"] == a, "value"].isna().sum()), int((v["arm"] == a).sum())] for a in arms}


def unresolvable(kind: str, label: str, phase: str, arms: tuple[str, str], config_id: str | None,
                  period: Any, durations: dict[tuple[str, str], float] | None,
                  disturbance: Disturbance | None) -> str | None:
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


def hypothesis_rows(spec: Mapping[str, Any], use: pd.DataFrame, arms: list[str], configs: dict[str, Any],
                alpha: float, values: pd.DataFrame | None = None, refusal: str | None = None,
                durations: dict[tuple[str, str], float] | None = None,
                disturbance: Disturbance | None = None) -> list[dict[str, Any]]:
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
            load: HypothesisLoad | None = None
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
            unresolved = unresolvable(m.kind, m.label, phase, (a, b), cid, period, durations, disturbance)
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
            mark_suspect(r, disturbance)
        if r["tested"] and id(r) in samples:
            r["detectable"] = _detectable(*samples[id(r)], level=alpha / max(family, 1), alpha=alpha)
    return rows


def _undisturbed(xa: np.ndarray, xb: np.ndarray, blocks: list[int], table: Disturbance | None, cid: str,
                 phase: str, arms: tuple[str, str]) -> tuple[np.ndarray, np.ndarray, list[int], HypothesisLoad | None]:
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


def mark_suspect(r: dict[str, Any], table: Disturbance | None) -> None:
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
    this size (kit.stats.detectability)."""
    from kit.analysis.power_cache import detectability

    d = detectability(xa, xb, paired=True, level=level, threshold=0.05, alpha=alpha).as_dict()
    return {k: d[k] for k in ("level", "noise", "mde", "decidable", "equivalent", "eq_low", "eq_high", "eq_conf",
                              "deterministic")}


class Decision(TypedDict):
    """A row's verdict: the decision in words, whether H0 was rejected, the effect and its direction."""

    decision: str
    rejected: bool | None
    effect_text: str | None
    direction: str | None


def _decision(r: dict[str, Any], alpha: float) -> Decision:
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




def sequential_looks(manifest: Manifest, hypotheses: Sequence[HypothesisResult], use: pd.DataFrame) -> dict[str, Any]:
    """A run made with ``--until-conclusive``: its looks, recomputed from the data (kit.stats.sequential)."""
    from kit.analysis.sequential_record import hypothesis_key, schedule_of, summary

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
        if h.test_unit != "trial" or h.config_id is None:
            untestable.append((key, "tested across configurations: not part of the sequential looks"))
        elif h.not_testable or h.not_decided:
            untestable.append((key, (h.reason or "not testable")[:300]))
        else:
            a, b, _ = paired_arrays(use, h.config_id, h.tested_metric, h.phase, h.arm_a, h.arm_b)
            if len(a):
                items.append((key, a, b))
            else:  # e.g. GPU telemetry on a host without one: more blocks cannot decide it
                untestable.append((key, f"no paired measurements of {h.metric_tested} in the {h.phase} phase"))
    return summary(sched, items, untestable, record)
