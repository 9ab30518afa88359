"""The typed records of the host side write exactly the JSON the dicts they replaced wrote (keys, order, values).

Manifests, trial files, bundles and submissions are compared byte for byte by readers and by tests of old runs, so
a record rebuilt field by field must keep the key order of the ``asdict``/comprehension it replaced.
"""

from __future__ import annotations

import dataclasses
import json

from kit.disturbance import PhaseDisturbance, TrialDisturbance, rerun_summary
from kit.executors.slurm import SlurmOptions
from kit.provenance import git_commit, kit_provenance
from kit.selftest import check, record
from kit.workloads.device import device_fields, pass_results, tf32_record


def test_slurm_options_json_is_the_asdict_it_replaced() -> None:
    opts = SlurmOptions(partition="gpu", account="a", gpus_per_trial=2, sbatch_options=("--qos=x",))
    old = dataclasses.asdict(opts)
    old["sbatch_options"] = list(opts.sbatch_options)
    assert json.dumps(opts.as_dict()) == json.dumps(old)


def test_kit_provenance_keeps_its_keys_in_order() -> None:
    got = kit_provenance()
    assert list(got) == ["version", "commit", "dirty"]
    assert {k: got[k] for k in ("commit", "dirty")} == dict(git_commit())


def test_rerun_summary_keeps_the_logged_values_of_waits_and_baseline() -> None:
    events = [{"event": "quiet_wait", "when": "rerun", "quiet": True, "waited_s": 3.0, "extra": 1},
              {"event": "baseline_load", "foreign_cpu": 0.5, "cpus": 2, "busy": True, "choice": "go on"}]
    s = rerun_summary(events)
    assert s["waits"] == [{"when": "rerun", "quiet": True, "waited_s": 3.0, "duration_s": None, "foreign_cpu": None}]
    assert s["baseline"] == {"foreign_cpu": 0.5, "cpus": 2, "limit_cpu": None, "busy": True, "choice": "go on"}
    assert list(s) == ["budget", "spent", "kept", "stopped", "stop_reasons", "waits", "baseline", "text"]


def test_disturbance_json_shape() -> None:
    phase = PhaseDisturbance("train", 2.0, True, 0.1, 0.9, None, None, (), (), None)
    d = TrialDisturbance((phase,)).as_dict()
    assert list(d) == ["schema", "disturbed", "cause", "limits", "phases", "cpus"]  # cpus: issue 43 (None: host-wide)
    assert list(d["phases"]["train"])[:3] == ["phase", "duration_s", "judged"] and d["phases"]["train"]["disturbed"] is False


def test_selftest_record_and_check_shapes() -> None:
    rec = record([check("x", "pass", "fine", a=1)], gpu=False)
    assert rec == {"schema": rec["schema"], "ok": True, "gpu": False,
                   "checks": [{"name": "x", "status": "pass", "detail": "fine", "numbers": {"a": 1}}]}


def test_container_side_env_fields_keep_their_order() -> None:
    tf32 = tf32_record("native", True, False, True)
    assert list(tf32) == ["mode", "matmul", "conv"]
    env = device_fields("cpu", None, None, None, tf32, "fp32")
    assert list(env) == ["device_kind", "device_name", "gpu_uuid", "gpu_uuids", "tf32", "precision"]

    class Passes:
        passes, pass_times_s = 2, [1.0, 2.0]

    assert list(pass_results(Passes(), Passes(), [0.5, 0.0])) == [
        "infer_passes", "infer_pass_times_s", "train_passes", "train_pass_times_s"]
    assert pass_results(Passes(), Passes(), [0.5, 0.0])["train_pass_times_s"] == [0.5, 2.0]
