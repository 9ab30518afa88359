"""`kit run --until-conclusive` (issue 24 item 6): alpha spending over the looks keeps the family-wise error at
alpha (a seeded Monte-Carlo of the whole procedure with the kit's own tests), and a real run stops at the first
look where every hypothesis is decided, recorded so that the analysis recomputes the looks from the data."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from kit.analysis.sequential_record import schedule, schedule_of
from kit.errors import KitError
from kit.run import RunOptions
from kit.sequential_run import UntilConclusive, parse_budget, run_until_conclusive
from kit.spec import load_spec
from kit.stats.sequential import decide, obf_spent, run_looks, simulate

CALIBRATED = Path(__file__).parent / "data" / "calibrated.toml"


def test_the_spent_levels_add_up_to_alpha_and_grow() -> None:
    s = schedule(12, 12, 48, 0.05)
    assert s.looks == (12, 24, 36, 48)
    assert sum(s.alphas) == pytest.approx(0.05, abs=1e-12) and all(a > 0 for a in s.alphas)
    assert list(s.alphas) == sorted(s.alphas)  # O'Brien-Fleming type: little at the first looks
    assert obf_spent(1.0, 0.05) == pytest.approx(0.05) and obf_spent(0.0, 0.05) == 0.0
    assert schedule(10, 7, 30, 0.05).looks == (10, 17, 24, 30)  # the maximum is always the last look
    with pytest.raises(ValueError):
        schedule(12, 12, 6, 0.05)
    # a crafted record cannot choose its own levels: they are recomputed from first/step/max and the spec's alpha
    crafted = {"first": 12, "step": 12, "max_repetitions": 48, "alphas": [0.5, 0.5, 0.5, 0.5]}
    assert schedule_of(crafted, 0.05).alphas == s.alphas
    with pytest.raises(ValueError):
        schedule_of({**crafted, "step": True}, 0.05)


def test_decide_rejects_a_clear_difference_and_shows_equivalence() -> None:
    rng = np.random.default_rng(1)
    base = rng.lognormal(0, 0.05, 30)
    slower = base * np.exp(rng.normal(0.10, 0.01, 30))
    same = base * np.exp(rng.normal(0.0, 0.01, 30))
    got = {d.key: d for d in decide([("slow", slower, base), ("same", same, base), ("few", same[:5], base[:5])],
                                    0.01, 0.05)}
    assert got["slow"].status == "rejected" and got["same"].status == "equivalent"
    assert got["few"].status == "open" and "fewer than 10" in (got["few"].why or "")
    neg = decide([("zero", np.zeros(12), np.ones(12))], 0.01, 0.05)[0]  # ratios of non-positive values
    assert neg.p_equivalence is None


def test_a_decided_hypothesis_stays_decided_and_the_procedure_stops_at_the_first_conclusive_look() -> None:
    rng = np.random.default_rng(2)
    base = rng.lognormal(0, 0.05, 48)
    data = [("a", base * np.exp(rng.normal(0.10, 0.01, 48)), base),
            ("b", base * np.exp(rng.normal(0.0, 0.01, 48)), base)]
    out, per_look = run_looks(schedule(12, 12, 48, 0.05), data)
    assert out.conclusive and out.stopped_at == 24 and len(per_look) == 2  # look 1 spends only 9e-5
    assert {d.key: d.status for d in out.decisions} == {"a": "rejected", "b": "equivalent"}
    partial, _ = run_looks(schedule(12, 12, 48, 0.05), data, available=20)
    assert partial.stopped_at == 12 and not partial.conclusive


@pytest.mark.slow
def test_the_sequential_rule_keeps_the_family_wise_error_at_alpha_by_simulation() -> None:
    """At the sizes the kit uses (the LeNet quick profile: 12 repetitions per look, up to 48; two hypotheses),
    with the kit's own tests: looking four times at the naive 0.05 inflates the error, the spent levels do not."""
    sched = schedule(12, 12, 48, 0.05)
    sims = 400
    se = math.sqrt(0.05 * 0.95 / sims)
    null = simulate(sched, [0.0, 0.0], sd=0.05, n_sims=sims, seed=11)
    assert null["fwer"] <= 0.05 + 2 * se, null
    margin = math.log1p(sched.margin)  # at the margin, "equivalent" is the error
    edge = simulate(sched, [margin, -margin], sd=0.05, n_sims=sims, seed=12)
    assert edge["fwer"] <= 0.05 + 2 * se, edge
    naive = type(sched)(sched.looks, (0.05,) * 4, 0.05)
    inflated = simulate(naive, [0.0, 0.0], sd=0.05, n_sims=sims, seed=11)
    assert inflated["fwer"] > null["fwer"]  # the reason for spending
    power = simulate(sched, [0.03, 0.03], sd=0.05, n_sims=150, seed=13)
    assert power["power"] >= 0.8, power  # a 3 % change at the LeNet quick noise is found by 48 repetitions
    print(f"\nFWER under H0 {null['fwer']:.3f} (naive looks {inflated['fwer']:.3f}), at the margin {edge['fwer']:.3f}, "
          f"power for 3 % {power['power']:.2f} at mean {power['mean_repetitions']:.1f} repetitions")


def test_budgets_are_read_or_refused() -> None:
    assert parse_budget("20m") == 1200 and parse_budget("1h30m") == 5400 and parse_budget("90") == 90
    for bad in ("", "soon", "-5m", "0"):
        with pytest.raises(KitError):
            parse_budget(bad)


@pytest.mark.slow
def test_a_real_run_stops_at_the_first_conclusive_look(tmp_path: Path) -> None:
    spec_file = tmp_path / "seq.toml"
    spec_file.write_text(CALIBRATED.read_text().replace("repetitions = 12", "repetitions = 10")
                         .replace("jitter_frac = 0.01", 'jitter_frac = 0.01\nslowdown = 1.10\n'
                                  'slowdown_framework = "tensorflow"'))
    spec = load_spec(spec_file)
    rd = run_until_conclusive(spec, RunOptions(runs_root=tmp_path / "runs"), UntilConclusive(max_repetitions=40))
    man = rd.manifest()
    assert man.status == "complete" and man.sequential is not None
    assert man.sequential["stopped"] == {"reason": "conclusive", "at_repetitions": 20}
    assert len(man.plan.trials) == 2 * 41  # the plan was drawn for the maximum (plus the warm-up block)
    done = rd.finished_ids()
    assert len(done) == 2 * 21  # ... and ran to the look that decided
    from kit.analysis.analyze import analyze_run

    seq = analyze_run(rd.path, write=False).sequential
    assert seq["stopped_at"] == 20 and seq["decided"] and seq["stop_reason"] == "conclusive"
    assert {d["status"] for d in seq["decisions"]} == {"rejected"}  # tensorflow 10 % slower in both phases
    # the first 10 repetitions are exactly the spec's own plan: the run extended it, it did not re-draw it
    from kit.plan import make_plan

    assert make_plan(spec).trials == man.plan.trials[: len(make_plan(spec).trials)]


@pytest.mark.slow
def test_the_cli_runs_until_conclusive_and_says_what_stayed_open(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from kit.cli import app

    spec_file = tmp_path / "seq.toml"
    spec_file.write_text(CALIBRATED.read_text().replace("repetitions = 12", "repetitions = 10")
                         .replace("jitter_frac = 0.01", "jitter_frac = 0.01\nslowdown = 1.10\n"
                                  'slowdown_framework = "tensorflow"'))
    res = CliRunner().invoke(app, ["run", str(spec_file), "--runs-dir", str(tmp_path / "runs"), "--no-report",
                                   "--until-conclusive", "--max-repetitions", "20", "--budget", "10m"])
    assert res.exit_code == 0, res.output
    assert "until conclusive: stopped at 20 repetitions per arm" in res.output
    assert "every testable hypothesis decided" in res.output
    assert "H1 train [c00]: pytorch vs tensorflow: rejected" in res.output
    bad = CliRunner().invoke(app, ["run", str(spec_file), "--runs-dir", str(tmp_path / "runs"), "--budget", "5m"])
    assert bad.exit_code != 0 and "--until-conclusive" in str(bad.exception)
