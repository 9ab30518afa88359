"""The claims of a run as one family, and the not-testable ones grouped by reason (issue 38, items 5 and 7).

Why these checks: the ledger printed an unadjusted p beside a hypotheses table that said "Holm" with no label
(the claims' Holm adjustment was only applied when a duck-typed hook found it, and the procedures never handed
it a p); and a CPU run of DLBench listed each claim on its own line because every reason named its own
datasets and protocol keys. Planted data (log-normal noise around a known ratio, fixed seed) decide the first;
the reasons the kit writes for a real quick run decide the second.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd

from kit.analysis.claim_records import ConfigFacts, RunContext
from kit.analysis.claims import judge
from kit.claim_spec import Claim
from kit.report.claims_view import claim_groups, reason_group

GPU = RunContext(profile="paper", device_kinds=("gpu",), gpus_per_trial=1, hardware="NVIDIA H100",
                 versions={"tensorflow": "2.20.0", "pytorch": "2.14.1"},
                 arm_of={"tensorflow": "tensorflow", "pytorch": "pytorch"})


def _values(ratio: float, config_id: str, seed: int, n: int = 12, sd: float = 0.03) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    base = 2.0 * np.exp(rng.normal(0, sd, n))
    tf = base * ratio * np.exp(rng.normal(0, sd, n))
    return pd.DataFrame([{"arm": arm, "block": i, "config_id": config_id, "metric": "time_s", "phase": "train",
                          "value": float(v)} for arm, vals in (("tensorflow", tf), ("pytorch", base))
                         for i, v in enumerate(vals)])


def _claim(cid: str, **kw: Any) -> Claim:
    base: dict[str, Any] = {"id": cid, "source": "Fig. 1", "statement": "a finding", "kind": "direction",
                            "metric": "time_s", "phase": "train", "arms": ("tensorflow", "pytorch"),
                            "direction": "greater", "where": {"case": "a"}}
    base.update(kw)
    c = Claim(**base)
    c.check("claims[0]")
    return c


def test_the_claims_of_a_run_are_one_holm_family_with_each_claims_p() -> None:
    """Every judged claim carries its own p and the Holm-adjusted p over the family of judged claims (a per-network
    claim too: its p is the largest of its networks'); a claim the kit cannot judge is outside the family."""
    configs = {"a": {"case": "a", "model": "n1"}, "b": {"case": "b", "model": "n2"}, "c": {"case": "c", "model": "n3"}}
    facts = {k: ConfigFacts(device="gpu", network=v["model"]) for k, v in configs.items()}
    ctx = dataclasses.replace(GPU, facts=facts)
    use = pd.concat([_values(1.3, "a", 1), _values(1.02, "b", 2, sd=0.02), _values(0.7, "c", 3)])
    claims = [_claim("C1"), _claim("C2", where={"case": "b"}),
              _claim("C3", kind="difference", direction="", scope="each_network", where={"case": ["a", "c"]}),
              _claim("C4", untestable="not a ratio of two arms")]
    ledger = judge(claims, use, configs, ctx, 0.05)
    rows = {r.id: r for r in ledger.rows}
    tested = [r for r in ledger.rows if r.verdict != "not testable"]
    assert len(tested) == 3 and all(r.p is not None and r.p_adjusted is not None for r in tested), tested
    assert {r.family_size for r in tested} == {3}
    assert rows["C4"].p_adjusted is None and rows["C4"].family_size == 0
    assert rows["C1"].verdict == "replicated" and rows["C1"].p_adjusted < 0.05
    assert rows["C3"].verdict == "replicated" and rows["C3"].p is not None
    assert rows["C3"].p == max(r["p"] for r in rows["C3"].per_config)  # every network must: the largest p
    for r in tested:  # Holm never lowers a p
        assert r.p_adjusted is not None and r.p is not None and r.p_adjusted >= r.p


def test_not_testable_claims_are_grouped_by_the_kind_of_condition_not_by_their_datasets() -> None:
    """Claims that differ in the data and the protocol on different datasets and keys share one line; the full
    reason (which datasets, which keys) stays in each row; a claim that differs in another way (the device) has its
    own line, and what would test them splits the groups too."""
    would = "`kit run dlbench --profile paper` on a CPU host (Intel Xeon), 64 CPU threads for each trial, about 11 days"
    reasons = {
        "C5": "differs in the CPU threads: the paper's 64, this run's 1; the data: a synthetic stand-in for the "
              "paper's cifar10 (python), a synthetic stand-in for the paper's cifar100 (python); the protocol: the "
              "quick profile runs otherwise than the paper (batch_size, epochs, min_phase_s)",
        "C6": "differs in the CPU threads: the paper's 64, this run's 1; the data: a synthetic stand-in for the "
              "paper's imdb (aclImdb); the protocol: the quick profile runs otherwise than the paper (epochs, "
              "imdb_seq_len)",
        "C7": "differs in the CPU threads: the paper's 64, this run's 1; the data: a synthetic stand-in for the "
              "paper's ptb (text); the protocol: the quick profile runs otherwise than the paper (epochs)",
        "C8": "differs in the CPU threads: the paper's 32, this run's 1; the data: a synthetic stand-in for the "
              "paper's ptb (text); the protocol: the quick profile runs otherwise than the paper (epochs)",
        "C9": "the kit cannot judge this claim: <b>not a ratio</b>",
    }
    rows = [{"id": k, "verdict": "not testable", "reason": v, "would_test": would} for k, v in reasons.items()]
    rows.append({"id": "C10", "verdict": "replicated", "reason": "shown", "would_test": ""})
    got = claim_groups(rows)
    assert [r["id"] for r in got["judged"]] == ["C10"]
    lines = [(g["ids_text"], g["reason"]) for g in got["untested"]]
    assert lines[0] == ("C5-C7", "differs in the CPU threads: the paper's 64, this run's 1; the data: a synthetic "
                                 "stand-in for the paper's dataset; the protocol: the quick profile runs otherwise "
                                 "than the paper"), lines
    assert [i for i, _ in lines[1:]] == ["C8", "C9"], lines
    assert [r["reason"] for r in got["untested"][0]["rows"]] == [reasons[k] for k in ("C5", "C6", "C7")]
    assert got["untested"][0]["command"] == "kit run dlbench --profile paper"
    # the same claims, another host to test one of them: two lines
    rows[1] = {**rows[1], "would_test": would.replace("64 CPU threads", "8 CPU threads")}
    assert [g["ids_text"] for g in claim_groups(rows)["untested"]][:2] == ["C5, C7", "C6"]
    # a reason without per-claim details is left as it is
    assert reason_group("differs in the device: the paper measured this on a GPU, this run ran on the CPU") == \
        "differs in the device: the paper measured this on a GPU, this run ran on the CPU"
