"""`kit tune` / `--reset` on a fake sysfs (refused without root, applied and recorded, reset, a crafted state file
refused), and CPU pinning of a real local trial (the harness reports the CPUs the kernel lets it use)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kit import tune
from kit.cli import app
from kit.errors import KitError
from kit.pinning import Pinning, parse_cpuset, resolve


def fake_sysfs(root: Path) -> Path:
    cpufreq = root / "devices" / "system" / "cpu" / "cpufreq"
    for i in range(2):
        p = cpufreq / f"policy{i}"
        p.mkdir(parents=True)
        (p / "scaling_governor").write_text("powersave\n")
        (p / "scaling_available_governors").write_text("performance powersave\n")
    (cpufreq / "boost").write_text("1\n")
    return root


def _gov(root: Path, i: int) -> str:
    return (root / "devices" / "system" / "cpu" / "cpufreq" / f"policy{i}" / "scaling_governor").read_text().strip()


def test_tune_is_refused_without_root_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = fake_sysfs(tmp_path / "sys")
    with pytest.raises(KitError) as err:
        tune.tune(root, tmp_path / "state.json", as_root=False, gpus=list)
    assert "needs root" in err.value.cause and "sudo" in (err.value.fix or "")
    assert _gov(root, 0) == "powersave" and not (tmp_path / "state.json").exists()
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    res = CliRunner().invoke(app, ["tune", "--sys-root", str(root), "--state", str(tmp_path / "state.json")])
    assert res.exit_code != 0 and isinstance(res.exception, KitError) and "needs root" in str(res.exception)


def test_tune_applies_records_and_resets(tmp_path: Path) -> None:
    root, state = fake_sysfs(tmp_path / "sys"), tmp_path / "run" / "state.json"
    res = tune.tune(root, state, as_root=True, gpus=list)
    assert {c["name"] for c in res["changed"]} == {"governor policy0", "governor policy1", "boost"}
    assert _gov(root, 0) == _gov(root, 1) == "performance"
    assert (root / "devices/system/cpu/cpufreq/boost").read_text().strip() == "0"
    saved = json.loads(state.read_text())
    assert {c["before"] for c in saved["changed"]} == {"powersave", "1"}
    with pytest.raises(KitError, match="already tuned"):  # a second tune would record the tuned state as "before"
        tune.tune(root, state, as_root=True, gpus=list)
    back = tune.reset(root, state, as_root=True, gpus=lambda rows: [])
    assert len(back["restored"]) == 3 and not back["refused"]
    assert _gov(root, 0) == "powersave" and (root / "devices/system/cpu/cpufreq/boost").read_text().strip() == "1"
    assert not state.exists()


def test_a_crafted_state_file_restores_nothing_it_invents(tmp_path: Path) -> None:
    root, state = fake_sysfs(tmp_path / "sys"), tmp_path / "state.json"
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    gov = root / "devices/system/cpu/cpufreq/policy0/scaling_governor"
    state.write_text(json.dumps({"changed": [{"path": str(victim), "before": "owned"},
                                             {"path": str(gov), "before": "rm -rf"},
                                             "junk"]}))
    res = tune.reset(root, state, as_root=True, gpus=lambda rows: [])
    assert len(res["refused"]) == 3 and not res["restored"]
    assert victim.read_text() == "keep\n" and _gov(root, 0) == "powersave"


def test_a_vm_has_nothing_to_tune_and_doctor_says_what_it_can_control(tmp_path: Path) -> None:
    res = tune.tune(tmp_path / "empty-sys", tmp_path / "s.json", as_root=True, gpus=list)
    assert res["nothing"] and not res["changed"]
    rows = {what: ok for what, ok, _ in tune.controls(tmp_path / "empty-sys")}
    assert rows["CPU governor"] is False and rows["turbo/boost"] is False and "CPU affinity (pinning)" in rows


def test_cpuset_auto_separates_the_trial_from_the_collectors() -> None:
    assert resolve("auto", (0, 1)) == Pinning((1,), (0,), resolve("auto", (0, 1)).note)
    assert "one CPU" in resolve("auto", (0, 1)).note  # the 2-core trade-off is stated
    assert not resolve("auto", (0,)).active and resolve("", (0, 1)) == Pinning()
    assert resolve("2-3", (0, 1, 2, 3)).kit_cpus == (0, 1)
    assert parse_cpuset("0-2,5") == (0, 1, 2, 5)
    with pytest.raises(KitError, match="may not use"):
        resolve("7", (0, 1))
    with pytest.raises(KitError, match="not a CPU list"):
        resolve("x-", (0, 1))


@pytest.mark.slow
def test_a_pinned_local_trial_runs_on_its_cpus(tmp_path: Path) -> None:
    import os

    from kit.run import RunOptions, start_run
    from kit.spec import load_spec

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.fail("this test needs 2 CPUs (the CI machines have 2)")
    src = (Path(__file__).parent / "data" / "calibrated.toml").read_text()
    spec_file = tmp_path / "pin.toml"
    spec_file.write_text(src.replace("repetitions = 12", "repetitions = 2") + '\n[container]\ncpuset = "auto"\n')
    rd = start_run(load_spec(spec_file), RunOptions(runs_root=tmp_path / "runs"))
    for t in (r.to_json() for r in rd.trial_records()):
        start = next(m for m in t["markers"] if m["event"] == "harness_start")
        assert start["cpus"] == cpus[1:], start  # what the kernel let the harness use
        assert t["pinning"]["trial_cpus"] == cpus[1:] and t["pinning"]["kit_cpus"] == cpus[:1]
    assert sorted(os.sched_getaffinity(0)) == cpus  # the kit's own affinity is restored after the run
