"""kit bisect on synthetic arms: a planted step is located with the fewest comparisons, honestly.

Each "release" draws its trial values around a level; a planted 12 % slowdown from one release on.
compare_pair draws both arms of a paired run and judges them with kit.compare.judge (the same
rule `kit compare --arms` applies), so the search is tested against the real verdicts.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from kit.bisect import bisect_releases, check_releases, summarize
from kit.compare import CompareOptions, judge
from kit.errors import KitError
from kit.images.matrix import load_matrix


def releases_with(levels: list[float], n: int = 16, noise: float = 0.02, seed: int = 0):
    names = [f"r{i}" for i in range(len(levels))]
    level = dict(zip(names, levels, strict=True))
    calls: list[tuple[str, str]] = []

    def compare_pair(base: str, cand: str) -> dict:
        calls.append((base, cand))
        rng = np.random.default_rng(seed + len(calls))
        block = rng.lognormal(0, 0.1, n)
        a = level[base] * block * rng.lognormal(0, noise, n)
        b = level[cand] * block * rng.lognormal(0, noise, n)
        res = judge([("default", "time_s", "train", f"{cand} vs {base}", a, b)], paired=True,
                    opts=CompareOptions(n_boot=300))
        return dataclasses.replace(summarize(res.rows), run=f"synthetic/{cand}-vs-{base}")

    return names, compare_pair, calls


@pytest.mark.parametrize("step_at", [1, 2, 3, 4, 5, 6, 7])
def test_planted_step_is_located_in_log2_comparisons(step_at: int) -> None:
    levels = [1.0 if i < step_at else 1.12 for i in range(8)]
    names, pair, calls = releases_with(levels, seed=step_at * 10)
    res = bisect_releases(names, pair).to_json()
    assert res["status"] == "located", res["answer"]
    assert res["first_changed"] == f"r{step_at}" and res["last_unchanged"] == f"r{step_at - 1}"
    assert res["direction"] == "regression" and 1.08 < res["ratio"] < 1.16
    assert res["n_comparisons"] == len(calls) <= 1 + math.ceil(math.log2(7))
    assert all(base == "r0" for base, _ in calls)  # always against the known good release


def test_an_improvement_is_located_too() -> None:
    names, pair, _ = releases_with([1.0, 1.0, 0.85, 0.85, 0.85])
    res = bisect_releases(names, pair).to_json()
    assert res["status"] == "located" and res["first_changed"] == "r2" and res["direction"] == "improvement"


def test_no_release_changed_is_a_conclusive_answer_with_its_detectable_size() -> None:
    names, pair, calls = releases_with([1.0, 1.01, 0.995, 1.0])
    res = bisect_releases(names, pair).to_json()
    assert res["status"] == "no change" and len(calls) == 1
    assert "no release from r0 to r3 changed the metric by more than the threshold" in res["answer"]
    assert "would have seen a change of" in res["answer"]


def test_too_noisy_runs_are_inconclusive_and_say_how_many_repetitions() -> None:
    names, pair, _ = releases_with([1.0, 1.0, 1.06, 1.06], n=10, noise=0.2, seed=3)
    res = bisect_releases(names, pair).to_json()
    assert res["status"] == "inconclusive", res["answer"]
    assert "repetitions per arm would make it conclusive" in res["answer"]


def test_a_change_that_goes_back_is_reported_not_bisected_wrongly() -> None:
    # r1..r2 slower, r3 faster than r0: the end comparison sees an improvement, the middle a regression
    names, pair, _ = releases_with([1.0, 1.15, 1.15, 0.85, 0.85])
    res = bisect_releases(names, pair).to_json()
    assert res["status"] == "non-monotonic" and "moved both ways" in res["answer"]


def test_bisect_needs_ordered_releases_of_one_framework() -> None:
    m = load_matrix()
    assert check_releases(["tensorflow-2.19-cpu", "tensorflow-2.20-cpu", "tensorflow-2.21-cpu"],
                          ("tensorflow", "pytorch"), m) == ["tensorflow-2.19-cpu", "tensorflow-2.20-cpu",
                                                            "tensorflow-2.21-cpu"]
    with pytest.raises(KitError, match="increasing version order"):
        check_releases(["tensorflow-2.21-cpu", "tensorflow-2.19-cpu"], ("tensorflow",), m)
    with pytest.raises(KitError, match="one framework on one device"):
        check_releases(["tensorflow-2.21-cpu", "pytorch-2.13-cpu"], ("tensorflow", "pytorch"), m)
    with pytest.raises(KitError, match="one framework on one device"):
        check_releases(["tensorflow-2.20-cu125", "tensorflow-2.21-cpu"], ("tensorflow",), m)
    with pytest.raises(KitError, match="not tensorflow"):
        check_releases(["tensorflow-2.20-cpu", "tensorflow-2.21-cpu"], ("pytorch",), m)
    with pytest.raises(KitError, match="two or more different releases"):
        bisect_releases(["r0"], lambda a, b: summarize([]))


def test_three_consecutive_releases_of_each_framework_are_in_the_matrix() -> None:
    m = load_matrix()
    tf_cpu = [r.version for r in m.select(framework="tensorflow", device="cpu")]
    assert {"2.19.1", "2.20.0", "2.21.0"} <= set(tf_cpu)
    for fw, versions in (("pytorch", {"2.12.1", "2.13.0", "2.14.1"}), ("tensorflow", {"2.19.1", "2.20.0", "2.21.0"})):
        assert versions <= {r.version for r in m.select(framework=fw, device="cuda")}, fw
    for r in m.select():
        assert r.lock_path.is_file() and "--hash=sha256:" in r.lock_text(), r.name
