"""The trial record is built by the code that ran the trial and written as the trial file always was; the spec is
resolved once per run (kit.run.prepare), never per trial."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kit.backends.base import TrialOutcome
from kit.plan import make_plan
from kit.records import TrialRecord
from kit.run import RunEvents, RunOptions
from kit.run.prepare import prepare, trial_request
from kit.run.trial import outcome_fields
from kit.spec import Spec, load_spec
from kit.store import RunDir
from tests._runs import bare_manifest_json

DATA = Path(__file__).parent / "data"
GOLDEN_TRIALS = DATA / "golden" / "run" / "trials"
# The trial file's keys, in the order every kit since the typed records wrote them (a cluster job's trial adds
# ``executor``, a re-run ``attempt`` and ``previous_attempts``).
TRIAL_KEYS = ["schema_version", "trial_id", "position", "block", "repetition", "warmup", "arm", "framework",
              "config_id", "config", "seed", "status", "exit_code", "started", "ended", "wall_s", "phases", "markers",
              "results", "env", "signal", "error", "traceback_tail", "stderr_tail", "backend", "pinning",
              "collectors", "cooldown", "host", "ambient", "disturbance"]


def _outcome() -> TrialOutcome:
    markers: list[dict[str, Any]] = [
        {"event": "phase_start", "phase": "train", "t": 10.0, "t_mono": 1.0},
        {"event": "phase_end", "phase": "train", "t": 12.0, "t_mono": 3.0, "duration_s": 2.0}]
    return TrialOutcome("ok", 0, {"results": {"train_time_s": 2.0}, "env": {"framework": "pytorch"}}, markers, "",
                        2.5, {"pid": 7})


def test_a_golden_trial_file_reads_and_writes_back_unchanged(tmp_path: Path) -> None:
    """Old runs still read, and what is read is what would be written (key for key, value for value)."""
    files = sorted(GOLDEN_TRIALS.glob("*.json"))
    assert files
    for path in files:
        obj = json.loads(path.read_text())
        rec = TrialRecord.from_json(obj, str(path))
        assert rec.to_json() == obj and list(rec.to_json()) == list(obj)
        assert rec.status == obj["status"] and rec.started == obj.get("started") and rec.host == obj.get("host")


def test_a_record_built_from_an_outcome_has_the_trial_files_keys_in_order(tmp_path: Path) -> None:
    plan = make_plan(load_spec(DATA / "calibrated.toml"))
    trial = plan.trials[0]
    fields = outcome_fields(_outcome(), 9.0, 13.0, [], {"waited_s": 0.0, "reached": True, "note": "n"}, "local")
    rec = TrialRecord.from_outcome(trial, fields, ambient={"sensor_c": None, "sensor": None, "stated_c": None,
                                                           "note": ""},
                                   disturbance={"schema": 1, "disturbed": False, "cause": None, "limits": {},
                                                "phases": {}}, pinning=None)
    out = rec.to_json()
    assert list(out) == TRIAL_KEYS
    assert out["phases"] == {"train": {"start": 10.0, "start_mono": 1.0, "end": 12.0, "end_mono": 3.0,
                                       "duration_s": 2.0}}
    assert out["backend"] == {"name": "local", "pid": 7} and out["results"] == {"train_time_s": 2.0}
    again = TrialRecord.from_outcome(trial, fields, ambient=rec.ambient or {"sensor_c": None, "sensor": None,
                                                                            "stated_c": None, "note": ""},
                                     disturbance=rec.disturbance or {"schema": 1, "disturbed": False, "cause": None,
                                                                     "limits": {}, "phases": {}},
                                     pinning=None, executor={"name": "slurm", "chunk": 2},
                                     previous_attempts=("attempts/x.1.json",))
    assert list(again.to_json()) == [*TRIAL_KEYS, "executor", "attempt", "previous_attempts"]
    assert again.attempt == 2 and again.counts == (not trial.warmup)
    # written by the store and read back through its one reader, the same record
    rd = RunDir.create(tmp_path, "calibrated", bare_manifest_json(experiment="calibrated", plan=plan.as_dict(),
                                                                  plan_digest=plan.digest()))
    rd.write_trial(rec, [])
    (back,) = rd.trial_records()
    assert back.to_json() == json.loads(json.dumps(out)) and back == rec


def test_prepare_resolves_each_configuration_once_and_every_trial(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_spec(DATA / "calibrated.toml")
    plan = make_plan(spec)
    calls: list[str] = []
    real_workload, real_dataset = Spec.workload_for, Spec.dataset_for
    monkeypatch.setattr(Spec, "workload_for", lambda self, c: calls.append("w") or real_workload(self, c))
    monkeypatch.setattr(Spec, "dataset_for", lambda self, c: calls.append("d") or real_dataset(self, c))
    ready = prepare(spec, RunOptions(), RunEvents(), plan)
    assert calls.count("w") == len(plan.configs) < len(plan.trials)  # once per configuration, not per trial
    assert set(ready.trials) == {t.trial_id for t in plan.trials}
    calls.clear()
    requests = {t.trial_id: ready.trials[t.trial_id].request() for t in plan.trials}
    assert calls == []  # a resolved trial asks the spec nothing
    for t in plan.trials:
        resolved = ready.trials[t.trial_id]
        assert resolved.trial == t and requests[t.trial_id] == trial_request(spec, t, resolved.device)
