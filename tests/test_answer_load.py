"""The answer line carries its conditions (issue 39): trials that stayed disturbed are named in the sentence a
user copies, and the verdict is decided on the undisturbed trials where enough remain (whole blocks: the pairs
stay intact)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kit.analysis.analyze import analyze_run
from kit.analysis_rows import HypothesisResult
from kit.report.answer import answer, sentence
from tests.test_compare_load import load_run

PT_SLOWER = 1.3  # PyTorch 30 % slower: every hypothesis row is decided


def _train(a: dict[str, Any]) -> dict[str, Any]:
    (h,) = [h for h in a["hypotheses"] if h["phase"] == "train"]
    return h


def test_all_trials_under_load_the_sentence_says_so(tmp_path: Path) -> None:
    """Every train phase ran beside 1.5 foreign CPUs, in both arms alike: decided (a load common to both arms
    cannot make one of them slower), and the sentence itself says it was measured under load."""
    run = load_run(tmp_path, "r", train_cpus=lambda t: 1.5, slower=lambda t: PT_SLOWER if t.framework == "pytorch"
                   else 1.0)
    rec = analyze_run(run, write=False)
    a = rec.to_json()
    h = _train(a)
    assert h["rejected"] and "suspect" not in h and h["n_pairs"] == 12
    assert h["load"]["decided_on"] == "all" and h["load"]["disturbed"] == 24
    said = sentence(HypothesisResult.from_json(h), rec)
    assert said is not None and said.startswith("TensorFlow was 1.29× faster than PyTorch in training")
    assert said.endswith("measured under load: 24 of 24 trials disturbed, about 1.5 foreign CPUs; a quiet host "
                         "may differ."), said
    quiet = sentence(next(x for x in rec.hypotheses if x.phase == "infer"), rec)
    assert quiet is not None and "under load" not in quiet  # its inference phases ran quiet
    assert "measured under load: 24 of 24" in answer(rec)["headline"]  # the line kit run and kit report print


@pytest.mark.slow
def test_enough_undisturbed_blocks_decide_and_the_sentence_says_which(tmp_path: Path) -> None:
    """Blocks 2 and 7 were disturbed (one trial each): 10 whole blocks are left, the test's floor, so the verdict
    is decided on them and the sentence says so."""
    run = load_run(tmp_path, "r", train_cpus=lambda t: 1.2 if (t.block, t.framework) in ((2, "pytorch"),
                                                                                        (7, "tensorflow")) else 0.02,
                   slower=lambda t: PT_SLOWER if t.framework == "pytorch" else 1.0)
    rec = analyze_run(run, write=False)
    a = rec.to_json()
    h = _train(a)
    assert h["n_pairs"] == 10 and 2 not in h["blocks"] and 7 not in h["blocks"]
    assert h["load"] == {**h["load"], "decided_on": "undisturbed", "trials": 24, "disturbed": 2, "trials_used": 20}
    said = sentence(HypothesisResult.from_json(h), rec)
    assert said is not None and ", decided on the 20 undisturbed of 24 trials (n = 10 pairs" in said, said
    assert "suspect" not in h


@pytest.mark.slow
def test_one_arm_under_load_and_too_few_quiet_blocks_is_suspect(tmp_path: Path) -> None:
    """PyTorch's train phases all ran beside 1.5 foreign CPUs, TensorFlow's none: no undisturbed block is left
    to decide on and the arms' loads differ, so the rejected H0 is suspect."""
    run = load_run(tmp_path, "r", train_cpus=lambda t: 1.5 if t.framework == "pytorch" else 0.02,
                   slower=lambda t: PT_SLOWER if t.framework == "pytorch" else 1.0)
    rec = analyze_run(run, write=False)
    a = rec.to_json()
    h = _train(a)
    assert h["decision"].startswith("suspect: reject H0") and "pytorch: 12 of 12 trials disturbed" in h["suspect"]
    assert "0 undisturbed of 12 pairs, fewer than the 10 the test needs" in h["suspect"]
    said = sentence(HypothesisResult.from_json(h), rec)
    assert said is not None and "12 of 24 trials disturbed" in said and "SUSPECT" in said
