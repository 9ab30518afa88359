"""The paper's claims judged on a run: the conditions the run had (device, threads, network, data, protocol
against the paper profile's) and the verdicts of kit.analysis.claims under them.

Apart from :mod:`kit.analysis.analyze` because deciding whether a configuration runs the paper protocol re-reads
the spec twice (the run's profile and the paper's) and is its own rule set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from kit.analysis.hypotheses import median_durations, unresolvable
from kit.analysis.metrics import METRICS
from kit.analysis_record import AnalysisSoFar
from kit.errors import KitError
from kit.manifest import Manifest
from kit.records import TrialRecord


def claim_verdicts(manifest: Manifest, trials: Sequence[TrialRecord], use: pd.DataFrame, configs: dict[str, Any],
            alpha: float, so_far: AnalysisSoFar) -> dict[str, Any]:
    """The paper's claims judged on this run (kit.analysis.claims), under the conditions the run had: the trials'
    environments, devices and disturbance of ``so_far`` (the tables computed before the claims)."""
    from kit.analysis.claim_records import RunContext
    from kit.analysis.claims import claims_of, judge

    claims = claims_of(manifest.spec)
    env = so_far.trial_env
    by_fw: dict[str, list[str]] = {}
    versions: dict[str, str] = {}
    for e in env:
        fw, arm = e.get("framework"), e.get("arm")
        if isinstance(fw, str) and isinstance(arm, str):
            by_fw.setdefault(fw, []).append(arm)
            if isinstance(version := e.get("framework_version"), str):
                versions[fw] = version
    arm_of = {fw: arms[0] for fw, arms in by_fw.items() if len(set(arms)) == 1}
    frameworks = (manifest.spec.get("experiment") or {}).get("frameworks") or []
    for arm in manifest.arms:  # arms named by their framework, even where no trial reported its environment
        if arm in frameworks and arm not in by_fw:
            arm_of[arm] = arm
    devices = so_far.devices
    gpus = max((len(t.gpus) for t in trials if t.status == "ok"), default=0)
    host = manifest.host or {}
    names = [str(g["name"]) for g in host.get("gpus") or [] if isinstance(g, dict) and isinstance(g.get("name"), str)]
    listed, refusal = devices.get("kinds"), devices.get("refusal")  # kit.analysis.devices.device_summary
    kinds = tuple(str(k) for k in listed) if isinstance(listed, list) else ()
    hardware = ", ".join(sorted(set(names))) if "gpu" in kinds and names else str(host.get("cpu_model") or "")
    facts, paper_estimate = claim_facts(manifest, trials, configs)
    ctx = RunContext(profile=manifest.profile or "paper", device_kinds=kinds, gpus_per_trial=gpus, hardware=hardware,
                     versions=versions, arm_of=arm_of, refusal=refusal if isinstance(refusal, str) else None,
                     untrained=untrained_configs(manifest, configs), experiment=manifest.experiment,
                     cpu_model=str(host.get("cpu_model") or ""), facts=facts, paper_estimate_s=paper_estimate)
    period = (manifest.spec.get("telemetry") or {}).get("period_s")
    durations = median_durations(trials)
    shaken = so_far.disturbance

    def why_not(metric: str, phase: str, arms: tuple[str, ...], cid: str | None) -> str | None:
        m = METRICS.get(metric)
        if m is None or len(arms) != 2:
            return None
        return unresolvable(m.kind, m.label, phase, (arms[0], arms[1]), cid, period, durations, shaken)

    return judge(claims, use, configs, ctx, alpha, why_not).to_json()


# What a configuration's protocol is made of, beside its device and threads (claims' conditions of their own):
# every workload key and parameter except those that decide no measurement (the untimed warm-up, the accuracy
# a run is expected to reach).
_NOT_PROTOCOL = ("device", "threads", "warmup_steps", "expected_accuracy", "params")


def _device_param(key: str) -> bool:
    """A workload parameter that says where to compute (a device, the CPU cores): the claims' device and threads
    conditions judge it from what the trials ran on, not as a protocol difference."""
    return key == "cpu_cores" or key == "device" or key.endswith("_device")


def claim_facts(manifest: Manifest, trials: Sequence[TrialRecord],
                 configs: Mapping[str, Any]) -> tuple[dict[str, Any], float | None]:
    """Per configuration, how this run stands against the paper protocol's same configuration (the claims'
    conditions, kit.analysis.claims.ConfigFacts): the device its trials ran on, its CPU threads, its network,
    whether its data are a stand-in for the paper's, and what its profile runs otherwise than the paper profile
    (a configuration the paper profile does not run, a workload key, a parameter, the dataset's split); and the
    paper profile's stated run time. A run whose spec cannot be read has an unknown protocol: every
    configuration says so, and no claim is judged on it."""
    import dataclasses as dc

    from kit.analysis.across import network_of
    from kit.analysis.claim_records import ConfigFacts
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
        kind = device_kind(t.env) if t.status == "ok" else None
        if kind is not None:
            seen.setdefault(t.config_id, set()).add(kind)
            env_threads = t.env.get("threads")
            if isinstance(env_threads, int) and not isinstance(env_threads, bool) and env_threads > 0:
                recorded_threads.setdefault(t.config_id, set()).add(env_threads)
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


def untrained_configs(manifest: Manifest, configs: Mapping[str, Any]) -> dict[str, str]:
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
