"""Trial plans: randomised complete blocks, seeded, warm-ups flagged."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from kit.plan import Plan, make_plan
from kit.spec import load_spec


def test_interleaved_blocks_hold_each_arm_once(spec_path: Path) -> None:
    spec = load_spec(spec_path, "quick")
    plan = make_plan(spec)
    assert len(plan.trials) == 2 * (12 + 1)
    blocks: dict[int, list[str]] = {}
    for t in plan.trials:
        blocks.setdefault(t.block, []).append(t.arm)
    assert all(sorted(v) == ["pytorch", "tensorflow"] for v in blocks.values())
    # the trials of a block are adjacent in the schedule
    for b in blocks:
        pos = [t.position for t in plan.trials if t.block == b]
        assert max(pos) - min(pos) == 1
    # both orders occur (randomised, not alternating by construction)
    firsts = Counter(blocks[b][0] for b in blocks)
    assert set(firsts) == {"pytorch", "tensorflow"}
    assert [t.warmup for t in plan.trials].count(True) == 2
    assert all(t.warmup == (t.repetition == 0) for t in plan.trials)


def test_seeded_and_recorded(spec_path: Path) -> None:
    spec = load_spec(spec_path, "quick")
    a, b, c = make_plan(spec), make_plan(spec), make_plan(spec, seed=7)
    assert a == b and a.digest() == b.digest()
    assert a.digest() != c.digest()
    assert Plan.from_dict(a.as_dict()) == a
    assert len({t.trial_id for t in a.trials}) == len(a.trials)


def test_block_shares_seed_across_arms(spec_path: Path) -> None:
    plan = make_plan(load_spec(spec_path, "quick"))
    by_block: dict[int, set[int]] = {}
    for t in plan.trials:
        by_block.setdefault(t.block, set()).add(t.seed)
    assert all(len(s) == 1 for s in by_block.values())
    assert len({next(iter(s)) for s in by_block.values()}) == len(by_block)


def test_sequential_runs_one_arm_then_the_other(tmp_path: Path, spec_path: Path) -> None:
    p = tmp_path / "seq.toml"
    p.write_text(spec_path.read_text().replace('blocking = "interleaved"', 'blocking = "sequential"'))
    plan = make_plan(load_spec(p, "quick"))
    arms = [t.arm for t in plan.trials]
    half = len(arms) // 2
    assert len(set(arms[:half])) == 1 and len(set(arms[half:])) == 1 and arms[0] != arms[-1]
