"""Which of the conditions a paper's finding depends on this run lacks, and what would test it.

A claim (kit.claim_spec) names the device, GPUs, CPU model and threads, data and framework versions its finding
was measured under; the run's are in a :class:`~kit.analysis.claim_records.RunContext`. This module compares the
two, for the run and per configuration, and says in words what differs (the reasons the ledger prints, grouped
by kind of condition so that claims alike read alike) and which command on which host would test the claim.
Pure text over records: kit.analysis.claims decides with it which configurations a claim is judged on.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from kit.analysis.claim_records import TRAINED_METRICS, RunContext
from kit.claim_spec import Claim


def _run_on(kinds: set[str]) -> str:
    return " and ".join(sorted(kinds)).replace("cpu", "the CPU").replace("gpu", "a GPU") or "an unknown device"


def _words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9]+", " ", text.lower().replace("(r)", " ").replace("(tm)", " ")).split()


def cpu_matches(wanted: str, model: str) -> bool:
    """Every word of the claim's CPU (``AMD Ryzen 5 3600X``) in the run's CPU model, case and (R)/(TM) aside."""
    have = set(_words(model))
    return bool(have) and all(w in have for w in _words(wanted))


def version_meets(version: str | None, spec: str) -> bool:
    """Does a reported framework version meet a PEP 440 specifier? An unparsable or missing version does not."""
    if not version:
        return False
    try:
        return Version(version.split("+", 1)[0]) in SpecifierSet(spec, prereleases=True)
    except InvalidVersion:
        return False


def _run_conditions(claim: Claim, ctx: RunContext) -> list[str]:
    """The run-level conditions the finding depends on that this run lacks: GPUs per trial, the CPU model, the
    framework versions the paper ties its finding to."""
    out = []
    if claim.gpus > 1 and ctx.gpus_per_trial < claim.gpus and ("gpu" in ctx.device_kinds or claim.device != "gpu"):
        # (a GPU claim on a run without a GPU is blocked by the device already: one reason, not two)
        out.append(f"the GPUs: a {claim.gpus}-GPU claim, this run's trials used {ctx.gpus_per_trial} GPU(s)")
    if claim.cpu_model and not cpu_matches(claim.cpu_model, ctx.cpu_model):
        out.append(f"the CPU: the paper's {claim.cpu_model}, this run's {ctx.cpu_model or 'unknown'}")
    for fw, spec in sorted(claim.tied_versions.items()):
        mine = ctx.versions.get(fw)
        if not version_meets(mine, spec):
            out.append(f"the {fw} version: the paper ties its finding to {fw} {spec}, this run used "
                       f"{mine or 'an unrecorded version'}")
    return out


def _config_conditions(claim: Claim, ctx: RunContext, cid: str | None) -> list[str]:
    """What keeps one configuration out of the claim: the device class its trials ran on, its CPU threads, its
    data (a stand-in where the quantity depends on the data's values, or not of the paper's sizes) and its
    protocol (the paper profile's configuration run otherwise); for a claim on trained models, a configuration
    that does not train as the paper did. A configuration without facts is taken as the run's."""
    out = []
    f = ctx.facts.get(cid) if cid is not None else None
    devices = {f.device} if f is not None and f.device else set(ctx.device_kinds)
    if claim.device in ("cpu", "gpu") and claim.device not in devices:  # unknown: not the paper's either
        where = f" ({claim.hardware})" if claim.hardware else ""
        paper = "a GPU" if claim.device == "gpu" else "a CPU"
        ran = f"ran on {_run_on(devices)}" if devices else "recorded no device"
        out.append(f"the device: the paper measured this on {paper}{where}, this run {ran}")
    if claim.threads and devices != {"gpu"}:  # the CPU threads of a configuration that computes on the CPU
        mine = f.threads if f is not None else None
        if mine != claim.threads:
            out.append(f"the CPU threads: the paper's {claim.threads}, this run's "
                       f"{mine if mine is not None else 'not recorded'}")
    if f is not None and f.data and not (claim.data == "shapes" and f.data_sized
                                         and claim.metric not in TRAINED_METRICS):
        out.append(f"the data: {f.data}")
    if f is not None and f.protocol:
        out.append(f"the protocol: the {ctx.profile} profile runs otherwise than the paper ({', '.join(f.protocol)})")
    if claim.metric in TRAINED_METRICS and cid is not None and cid in ctx.untrained and not (f and f.protocol):
        out.append(f"the training: {ctx.untrained[cid]}")
    return out


def _recorded(claim: Claim, ctx: RunContext) -> list[str]:
    """Differences the verdict lists without being blocked by them: the hardware and versions the paper names
    without tying its finding to them."""
    diffs = []
    if claim.hardware:
        diffs.append(f"the paper's hardware: {claim.hardware}; this run's: {ctx.hardware or 'unknown'}")
    for fw, ver in sorted(claim.versions.items()):
        mine = ctx.versions.get(fw)
        if mine is None or not mine.startswith(ver):
            diffs.append(f"the paper used {fw} {ver}; this run {mine or 'an unrecorded version'}")
    return diffs


def _conditions(claim: Claim, ctx: RunContext, cids: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """(what of this run's conditions differs from those the finding depends on, each item blocking a verdict:
    run-level, then those of the configurations ``cids`` (none: the run's); the recorded differences)."""
    blocks = _run_conditions(claim, ctx)
    ids: list[str | None] = list(cids) or [None]
    for cid in ids:
        blocks += [b for b in _config_conditions(claim, ctx, cid) if b not in blocks]
    return blocks, _recorded(claim, ctx)



_PROTOCOL_KEYS = re.compile(r"^(?P<head>.*?) \((?P<keys>[^()]*)\)$")


def _summarise(blocks: Sequence[str]) -> list[str]:
    """The blocks with one entry per kind of condition ("the data: a synthetic stand-in for the paper's cifar10
    (python), a synthetic stand-in for the paper's cifar100 (python)"; the protocol's keys of all configurations
    in one list). Why: a claim over several configurations would otherwise name "the data" and "the protocol"
    once per configuration, and the report (kit.report.claims_view.claim_groups) groups not-testable claims by the
    kinds of condition their reasons name."""
    heads: dict[str, list[str]] = {}
    for b in blocks:
        kind, _, what = b.partition(": ")
        if what not in heads.setdefault(kind, []):
            heads[kind].append(what)
    out = []
    for kind, whats in heads.items():
        if kind == "the protocol":
            keys: list[str] = []
            head = ""
            for w in whats:
                m = _PROTOCOL_KEYS.match(w)
                head = head or (m.group("head") if m else "")
                keys += [k for k in (m.group("keys").split(", ") if m else [w]) if k not in keys]
            out.append(f"{kind}: {head} ({', '.join(keys)})" if head else f"{kind}: {', '.join(keys)}")
        else:
            out.append(f"{kind}: {', '.join(whats)}" if whats != [""] else kind)
    return out


def _differs(blocks: Sequence[str]) -> str:
    return "differs in " + "; ".join(blocks)


def _where_text(claim: Claim) -> str:
    return ", ".join(f"{k} = {v}" for k, v in claim.where.items()) or "any settings"


# --------------------------------------------------------------------------- what would test it


def duration_text(seconds: float | None) -> str:
    """"about 70 min", "about 14 h", "about 11 days" (a profile's stated estimate)."""
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        return ""
    if seconds < 90 * 60:
        return f"about {max(1, round(seconds / 60))} min"
    if seconds < 48 * 3600:
        return f"about {round(seconds / 3600)} h"
    return f"about {round(seconds / 86400)} days"


def _host_text(claim: Claim) -> str:
    n = max(1, claim.gpus)
    if claim.device == "gpu":
        host = "a host with one NVIDIA GPU" if n == 1 else f"a host with {n} NVIDIA GPUs"
    elif claim.device == "cpu":
        host = "a CPU host" + (f" ({claim.cpu_model})" if claim.cpu_model else "")
    else:
        host = "a host" + (f" with {n} NVIDIA GPUs" if claim.gpus > 1 else "") + (
            f" ({claim.cpu_model})" if claim.cpu_model else "")
    if claim.threads:
        host += f", {claim.threads} CPU thread{'s' if claim.threads != 1 else ''} for each trial"
    return host


def would_test(claim: Claim, ctx: RunContext, both_devices: bool = False) -> str:
    """The command and host that would test a claim: the paper profile (the paper protocol's configurations)
    on a host with the claim's device, GPUs, CPU and threads, with the versions it is tied to; the profile's
    stated estimate. "`kit run florencio2019_lenet --profile paper` on a host with one NVIDIA GPU, about 70 min"."""
    exp = ctx.experiment or "EXPERIMENT"
    text = f"`kit run {exp} --profile paper` on {_host_text(claim)}"
    if both_devices:
        text += (", with the configuration run on the CPU and on the GPU in one run (the experiment runs each on one "
                 "device; a copy of it with [grid] device = [\"cpu\", \"gpu\"] would)")
    if claim.tied_versions:
        text += ", with " + ", ".join(f"{fw} {spec}" for fw, spec in sorted(claim.tied_versions.items())) + \
            " in the trials' image"
    est = duration_text(ctx.paper_estimate_s)
    return text + (f", {est}" if est else "")

