"""Patel et al. (issue 28): CPU inference on the paper's single core, DDP over N devices, the per-model winner table.

Fast: the pinning's choice and checks (with injected affinities, and for real in a child process without a
framework), the device-count refusals, the scaling efficiency and winner-table arithmetic on fake runs (the
kit's run builder, tests/_runs.py), and the report sections they feed. Slow: one pinned trial per framework
through the harness, and a trial asking for more cores than the host has.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats as sps

from kit.errors import KitError
from kit.spec import load_spec
from kit.workloads import zoo as zoo_models
from kit.workloads import zoo_pin
from kit.workloads.common import SkipTrial
from tests._runs import run_view
from tests._studies import study_module, study_sections

ROOT = Path(__file__).resolve().parents[1]
DIST = ROOT / "experiments" / "patel_distributed"
SWEEP = ROOT / "experiments" / "patel_models_sweep"
zoo = study_module("patel_models_sweep", "analysis")
zoo_report = study_module("patel_models_sweep", "report")
dist = study_module("patel_distributed", "analysis")
dist_report = study_module("patel_distributed", "report")

SMT = {0: (0, 2), 1: (1, 3), 2: (0, 2), 3: (1, 3)}  # two cores, two hardware threads each


# -- pinning: choice, refusal, read-back ----------------------------------------------------------------------------

def test_one_cpu_per_physical_core_first() -> None:
    assert zoo_pin.choose_cpus([0, 1, 2, 3], 2, SMT.__getitem__) == (0, 1)  # never both threads of core 0
    assert zoo_pin.choose_cpus([0, 1, 2, 3], 3, SMT.__getitem__) == (0, 1, 2)  # siblings only once cores run out
    assert zoo_pin.choose_cpus([2, 3], 1, SMT.__getitem__) == (2,)
    p = zoo_pin.pin(1, allowed=[5, 6], siblings_of=lambda c: (c, c + 10))
    assert p.cpus_pinned == (5,) and p.cpus_allowed == (5, 6) and p.smt_siblings == ((15,),)


def test_fewer_cpus_than_asked_is_refused_with_cause_and_fix() -> None:
    with pytest.raises(zoo_pin.CpuPinError) as err:
        zoo_pin.choose_cpus([0, 1], 3, SMT.__getitem__)
    assert "3 CPU core(s) asked for" in err.value.cause and "only 2" in err.value.cause and err.value.fix
    with pytest.raises(zoo_pin.CpuPinError):
        zoo_pin.choose_cpus([0, 1], 0, SMT.__getitem__)


def test_threads_that_contradict_the_cores_are_refused() -> None:
    assert zoo_pin.threads_asked({"cpu_cores": 1}, None) == 1
    assert zoo_pin.threads_asked({"cpu_cores": 1, "threads": 1}, None) == 1
    assert zoo_pin.threads_asked({"cpu_cores": 0, "threads": 4}, None) == 0  # unpinned: threads as they are
    for wl, req in (({"cpu_cores": 1}, 2), ({"cpu_cores": 2, "threads": 1}, None)):
        with pytest.raises(zoo_pin.CpuPinError, match="disagree"):
            zoo_pin.threads_asked(wl, req)
    for bad in (-1, True, "1"):
        with pytest.raises(zoo_pin.CpuPinError, match="not a count"):
            zoo_pin.threads_asked({"cpu_cores": bad}, None)


def test_recorded_affinity_or_threads_that_differ_fail_loudly() -> None:
    p = zoo_pin.CpuPin(1, (0, 1, 2, 3), (1,), ((3,),))
    ok = zoo_pin.checked(p, 1, 1, affinities={100: (1,), 101: (1,)})
    assert (ok.intra_op_threads, ok.inter_op_threads) == (1, 1)
    assert ok.as_dict()["cpus_pinned"] == [1] and ok.as_dict()["smt_siblings"] == [[3]]
    with pytest.raises(zoo_pin.CpuPinError, match="escaped"):  # one thread left on every CPU
        zoo_pin.checked(p, 1, 1, affinities={100: (1,), 101: (0, 1, 2, 3)})
    with pytest.raises(zoo_pin.CpuPinError, match="escaped"):  # a thread moved to another single CPU
        zoo_pin.checked(p, 1, 1, affinities={100: (2,)})
    with pytest.raises(zoo_pin.CpuPinError, match="4 intra-op"):
        zoo_pin.checked(p, 4, 1, affinities={100: (1,)})
    with pytest.raises(zoo_pin.CpuPinError, match="2 inter-op"):
        zoo_pin.checked(p, 1, 2, affinities={100: (1,)})
    with pytest.raises(zoo_pin.CpuPinError, match="no thread affinity"):
        zoo_pin.checked(p, 1, 1, affinities={})


@pytest.mark.parametrize("text", ["0-3,x", "5-2", "1,,2", "-1", "0-70000", "1" * 20000, "0 - 3"])
def test_hostile_cpu_lists_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        zoo_pin.parse_cpu_list(text)
    assert zoo_pin.parse_cpu_list("0-2,8\n") == (0, 1, 2, 8) and zoo_pin.parse_cpu_list("") == ()


PIN_CHILD = """
import os, sys, threading, time
from kit.workloads import zoo_pin
stop = threading.Event()
early = threading.Thread(target=stop.wait)  # started before the pinning: it must be pinned too
early.start()
p = zoo_pin.pin(1)
late = threading.Thread(target=stop.wait)  # started after: inherits the mask
late.start()
if sys.argv[1] == "escape":  # a library resetting one thread's affinity to every CPU
    os.sched_setaffinity(early.native_id, p.cpus_allowed)
try:
    got = zoo_pin.checked(p, 1, 1)
    print("OK", got.cpus_pinned, len(zoo_pin.thread_affinities()))
except zoo_pin.CpuPinError as exc:
    print("REFUSED", exc.cause)
finally:
    stop.set()
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to tell a pinned thread from an unpinned one")
@pytest.mark.parametrize("mode", ["clean", "escape"])
def test_real_pinning_covers_every_thread_and_catches_an_escape(mode: str) -> None:
    out = subprocess.run([sys.executable, "-c", PIN_CHILD, mode], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    if mode == "clean":
        # main, early, late (and numpy's BLAS threads, started at import, before the pinning): all pinned
        assert out.stdout.startswith("OK (") and int(out.stdout.split()[-1]) >= 3
    else:
        assert out.stdout.startswith("REFUSED") and "escaped" in out.stdout


def test_cpu_inference_cases_carry_the_papers_single_core() -> None:
    for profile in (None, "quick"):
        spec = load_spec(SWEEP, profile) if profile else load_spec(SWEEP)
        cpu = [spec.workload_for(c).flat() for c in spec.configurations()
               if spec.workload_for(c).flat().get("mode") == "infer"]
        assert cpu and all(w["cpu_cores"] == 1 and w["device"] == "cpu" for w in cpu), profile
        assert all(w.get("threads") in (None, 1) for w in cpu)  # never contradicts the one core
    assert any(d.aspect == "CPU cores" and "SMT" in d.kit for d in load_spec(SWEEP).deviations)


# -- devices: validation and refusal --------------------------------------------------------------------------------

def test_data_parallel_on_more_cpu_devices_than_cpus_is_skipped() -> None:
    zoo_models.check_cpu_devices("ddp", 2, {0, 1})
    with pytest.raises(SkipTrial, match="4 CPU devices"):
        zoo_models.check_cpu_devices("ddp", 4, {0, 1})


def test_a_device_count_outside_the_scaling_steps_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "patel_distributed"
    shutil.copytree(DIST, folder, ignore=shutil.ignore_patterns("__pycache__"))
    toml = folder / "experiment.toml"
    text = toml.read_text()
    assert "\ndevices = 2\n" in text
    toml.write_text(text.replace("\ndevices = 2\n", "\ndevices = 3\n", 1))
    with pytest.raises(KitError, match="devices"):
        load_spec(folder)


def test_scaling_profile_needs_eight_gpus_and_says_so() -> None:
    from kit.reproduce import Host, fits, requirements

    spec = load_spec(DIST, "scaling")
    devices = sorted({int(spec.workload_for(c).flat()["devices"]) if spec.workload_for(c).flat()["strategy"] != "single"
                      else 1 for c in spec.configurations()})
    assert devices == [1, 2, 4, 8]
    needs = requirements(spec)
    assert needs.gpus == 8 and "devices = 8" in needs.why
    assert "needs 8" in (fits(Host(gpus=2, gpu_names=("H100", "H100")), needs) or "")
    assert fits(Host(gpus=8, gpu_names=("H100",) * 8), needs) is None
    assert requirements(load_spec(DIST)).gpus == 2 and requirements(load_spec(DIST, "quick")).gpus == 0


# -- scaling efficiency ---------------------------------------------------------------------------------------------

def test_efficiency_ci_by_hand() -> None:
    single, multi = [100.0, 110.0, 90.0], [180.0, 190.0, 170.0]
    e = dist.efficiency_ci(single, multi, 2, 0.95)
    assert e["speedup"] == pytest.approx(1.8) and e["efficiency"] == pytest.approx(0.9)
    va = np.var(multi, ddof=1) / (3 * 180.0**2)
    vb = np.var(single, ddof=1) / (3 * 100.0**2)
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 2)
    q = sps.t.ppf(0.975, df)
    se = math.sqrt(va + vb)
    assert (e["low"], e["high"]) == pytest.approx((0.9 * math.exp(-q * se), 0.9 * math.exp(q * se)))
    assert e["verdict"] == "undecided"  # 0.9 sits inside its own interval
    one = dist.efficiency_ci([100.0], [190.0, 185.0], 2, 0.95)
    assert one["efficiency"] == pytest.approx(0.9375) and one["low"] is None and "no interval" in one["reason"]
    assert dist.efficiency_ci([], [1.0], 2, 0.95)["efficiency"] is None


@pytest.mark.parametrize(("true_eff", "verdict"), [(0.97, "near-linear"), (0.6, "below near-linear")])
def test_efficiency_verdict_recovers_a_planted_efficiency(true_eff: float, verdict: str) -> None:
    rng = np.random.default_rng(4)
    single = list(1000 * np.exp(rng.normal(0, 0.01, 10)))
    multi = list(4 * 1000 * true_eff * np.exp(rng.normal(0, 0.01, 10)))
    e = dist.efficiency_ci(single, multi, 4, 0.95)
    assert e["low"] < true_eff < e["high"] and e["verdict"] == verdict


def _scaling_run(tf_factor: float = 1.0) -> tuple[dict, list[dict]]:
    """single, ddp on 1/2/4 devices and TF dp on 2, 4 (4: skipped, too few devices), 3 repetitions."""
    cases: dict[str, dict[str, Any]] = {"single": {"strategy": "single"}, "ddp_x1": {"strategy": "ddp", "devices": 1},
             "ddp": {"strategy": "ddp"}, "ddp_x4": {"strategy": "ddp", "devices": 4}, "dp": {"strategy": "dp"},
             "dp_x4": {"strategy": "dp", "devices": 4}}
    configs = {f"c{i:02d}": {"case": c} for i, c in enumerate(cases)}
    spec = {"workload": {"name": "zoo_distributed", "batch_size": 8, "model": "resnet18", "devices": 2},
            "cases": {c: {"workload": w} for c, w in cases.items()}, "design": {"alpha": 0.05}}
    manifest = {"spec": spec, "plan": {"arms": ["tensorflow", "pytorch"], "configs": configs}}
    eff = {"single": 1.0, "ddp_x1": 0.95, "ddp": 0.9, "ddp_x4": 0.8, "dp": 0.7, "dp_x4": 0.6}
    rng = np.random.default_rng(2)
    trials = []
    for rep in range(3):
        for cid, cfg in configs.items():
            case = cfg["case"]
            n = 1 if case == "single" else int(cases[case].get("devices", 2))
            for arm in ("tensorflow", "pytorch"):
                tid = f"r{rep}-{cid}-{arm}"
                if arm == "tensorflow" and (cases[case]["strategy"] == "ddp" or case.endswith("x4")):
                    trials.append({"trial_id": tid, "config_id": cid, "arm": arm, "repetition": rep,
                                   "status": "skipped", "error": "strategy on 4 CPU devices asked for, 2 CPUs"})
                    continue
                ips = 100.0 * n * eff[case] * float(np.exp(rng.normal(0, 0.005))) * (tf_factor if arm == "tensorflow"
                                                                                     else 1.0)
                trials.append({"trial_id": tid, "config_id": cid, "arm": arm, "repetition": rep, "status": "ok",
                               "results": {"devices": n, "train_throughput_ips": ips, "device_kind": "cpu"}})
    return manifest, trials


def test_scaling_table_per_framework_strategy_and_device_count() -> None:
    manifest, trials = _scaling_run()
    out = dist.analyse(run_view(manifest, trials)).to_json()
    by = {(e["arm"], e["strategy"], e["devices"]): e for e in out["scaling_efficiency"]}
    assert by[("pytorch", "ddp", 1)]["efficiency"] == pytest.approx(0.95, rel=0.02)
    assert by[("pytorch", "ddp", 2)]["efficiency"] == pytest.approx(0.9, rel=0.02)
    assert by[("pytorch", "ddp", 4)]["efficiency"] == pytest.approx(0.8, rel=0.02)
    assert by[("pytorch", "ddp", 4)]["verdict"] == "below near-linear"
    assert by[("tensorflow", "dp", 2)]["efficiency"] == pytest.approx(0.7, rel=0.02)
    skipped = by[("tensorflow", "dp", 4)]
    assert skipped["efficiency"] is None and "4 CPU devices" in skipped["reason"]
    assert out["ddp_scaling"]["devices"] == 2  # Q1 is still asked on the paper's two devices
    assert out["ddp_vs_dp"]["ratio_ddp_over_dp"] == pytest.approx(0.9 / 0.7, rel=0.02)  # DDP x2 against DP x2

    secs = {s["id"]: s for s in study_sections(dist_report, {"zoo_distributed": out})}
    sc = secs["zoo-dist-scaling"]
    assert sc["figures"] and sc["figures"][0]["svg"].lstrip().startswith("<svg")
    rows = {(r[0], r[2]): r for r in sc["tables"][0]["rows"] if r[1] == "DistributedDataParallel"}
    assert rows[("pytorch", 4)][7] == "0.8" or rows[("pytorch", 4)][7].startswith("0.8")
    measured, _, missing = sc["paragraphs"][1].partition("Not measured")
    assert "pytorch DistributedDataParallel on 4" in measured and "tensorflow MirroredStrategy on 2" in measured
    assert "tensorflow MirroredStrategy on 4" in missing and "pytorch" not in missing


def test_framework_winner_per_strategy_and_device_count() -> None:
    manifest, trials = _scaling_run(tf_factor=1.25)
    out = dist.analyse(run_view(manifest, trials)).to_json()
    by = {(w["strategy"], w["devices"]): w for w in out["framework_winners"]}
    assert set(by) == {("single", 1), ("dp", 2)}  # DDP and DP x4 have no TensorFlow trial: no pair
    for w in by.values():
        assert w["decided"] and w["faster"] == "tensorflow" and w["factor"] == pytest.approx(1.25, rel=0.02)
        assert w["low"] > 1.0 and w["p_holm"] < 0.05  # the interval excludes a tie
    row = {"strategy": "single", "devices": 1, "model": "resnet18", "batch_size": 8}
    even = dist.framework_winners([{**row, "arm": "tensorflow", "ips": [100.0, 102.0, 98.0]},
                                   {**row, "arm": "pytorch", "ips": [98.0, 100.0, 102.0]}], 0.05)
    assert len(even) == 1 and even[0]["ratio_tf_over_pt"] == pytest.approx(1.0)
    assert not even[0]["decided"] and even[0]["faster"] is None and even[0]["low"] < 1.0 < even[0]["high"]
    (sec,) = [s for s in study_sections(dist_report, {"zoo_distributed": out}) if s["id"] == "zoo-dist-winners"]
    assert re.search(r"TensorFlow trained 1\.2\d× faster than PyTorch on one device \[95 % CI 1\.2", sec["paragraphs"][0])
    assert study_sections(dist_report, {"zoo_distributed": out})[0]["id"] == "zoo-dist-winners"
    r = dist.ratio_of_means([180.0, 190.0, 170.0], [100.0, 110.0, 90.0], 0.95)
    e = dist.efficiency_ci([100.0, 110.0, 90.0], [180.0, 190.0, 170.0], 2, 0.95)
    assert (r["low"] / 2, r["high"] / 2) == pytest.approx((e["low"], e["high"]))


# -- the per-model winner table -------------------------------------------------------------------------------------

def _sweep_run(gpu_infer_gap: float = 1.0) -> tuple[dict, list[dict]]:
    """ResNet18 on the GPU (train + infer) and on one CPU core (infer), 3 batch sizes x 2 sides, 3 trials each.

    Planted TF/PT: training 1.3 (PyTorch faster), GPU inference ``gpu_infer_gap``, CPU inference 1/1.2 (TF faster).
    """
    rng = np.random.default_rng(7)
    cases: dict[str, dict[str, Any]] = {"resnet18": {"model": "resnet18"},
             "cpu_resnet18": {"model": "resnet18", "device": "cpu", "mode": "infer", "cpu_cores": 1}}
    configs: dict[str, dict[str, Any]] = {}
    i = 0
    for case in cases:
        for b in (1, 4, 16):
            for side in (128, 224):
                configs[f"c{i:02d}"] = {"case": case, "batch_size": b, "image_size": side}
                i += 1
    claims = [{"id": "C1", "kind": "direction", "metric": "time_s", "phase": "train", "direction": "greater",
               "device": "gpu", "where": {"case": "resnet18"}},
              {"id": "C11", "kind": "direction", "metric": "time_s", "phase": "infer", "direction": "less",
               "device": "cpu", "where": {"case": ["cpu_resnet18"]}}]
    spec = {"workload": {"name": "zoo", "batch_size": 16, "device": "auto"}, "claims": claims,
            "cases": {c: {"workload": w} for c, w in cases.items()}, "design": {"alpha": 0.05}}
    manifest = {"spec": spec, "plan": {"arms": ["tensorflow", "pytorch"], "configs": configs}}
    trials = []
    for rep in range(3):
        for cid, cfg in configs.items():
            cpu = cfg["case"].startswith("cpu")
            base = 0.01 * cfg["batch_size"] * (cfg["image_size"] / 128) ** 2 * (20 if cpu else 1)
            for arm in ("tensorflow", "pytorch"):
                tf = arm == "tensorflow"
                res: dict = {"batch_size": cfg["batch_size"], "model": "resnet18"}
                noise = lambda: float(np.exp(rng.normal(0, 0.01)))  # noqa: E731
                if not cpu:
                    res["train_step_s"] = [base * 3 * (1.3 if tf else 1.0) * noise() for _ in range(3)]
                    res["infer_step_s"] = [base * (gpu_infer_gap if tf else 1.0) * noise() for _ in range(3)]
                else:
                    res["infer_step_s"] = [base * (1 / 1.2 if tf else 1.0) * noise() for _ in range(3)]
                env = {"cpu_pinning": {"cpus_pinned": [1], "smt_siblings": [[]], "intra_op_threads": 1,
                                       "inter_op_threads": 1}} if cpu else {}
                trials.append({"trial_id": f"r{rep}-{cid}-{arm}", "config_id": cid, "arm": arm, "repetition": rep,
                               "status": "ok", "device": "cpu" if cpu else "gpu", "results": res, "env": env})
    return manifest, trials


def test_winner_table_decides_planted_gaps_and_leaves_a_tie_undecided() -> None:
    manifest, trials = _sweep_run(gpu_infer_gap=1.0)
    w = {(r["model"], r["label"]): r for r in zoo.analyse(run_view(manifest, trials)).to_json()["winners"]}
    train = w[("resnet18", "training (GPU)")]
    assert train["decided"] and train["faster"] == "pytorch" and train["factor"] == pytest.approx(1.3, rel=0.02)
    assert train["factor_low"] < 1.3 < train["factor_high"] and train["n_configs"] == 6
    assert train["paper"] == "pytorch" and train["agrees_with_paper"] is True
    cpu = w[("resnet18", "inference (CPU, 1 core)")]
    assert cpu["decided"] and cpu["faster"] == "tensorflow" and cpu["factor"] == pytest.approx(1.2, rel=0.02)
    assert cpu["factor_low"] < 1.2 < cpu["factor_high"] and cpu["agrees_with_paper"] is True
    tie = w[("resnet18", "inference (GPU)")]
    assert not tie["decided"] and tie["faster"] is None and tie["low"] < 1.0 < tie["high"]
    assert [r["label"] for r in zoo.analyse(run_view(manifest, trials)).to_json()["winners"]] == [
        "training (GPU)", "inference (GPU)", "inference (CPU, 1 core)"]  # the paper's order, Figs. 1-3
    assert set(w) == {("resnet18", "training (GPU)"), ("resnet18", "inference (GPU)"),
                      ("resnet18", "inference (CPU, 1 core)")}


def test_winner_section_comes_first_with_the_sentences_and_a_table() -> None:
    manifest, trials = _sweep_run(gpu_infer_gap=1.0)
    extras = zoo.analyse(run_view(manifest, trials)).to_json()
    secs = study_sections(zoo_report, {"zoo": extras})
    first = secs[0]
    assert first["id"] == "zoo-winners"
    text = " ".join(first["paragraphs"])
    assert "PyTorch was 1.30× faster than TensorFlow at ResNet18 training (GPU) [95 % CI 1." in text
    assert "TensorFlow was 1.20× faster than PyTorch at ResNet18 inference (CPU, 1 core)" in text
    assert "ResNet18 inference (GPU): no winner (undecided)" in text
    assert "CPU(s) 1 with 1 intra-op / 1 inter-op thread(s)" in text
    rows = {r[1]: r for r in first["tables"][0]["rows"]}
    assert rows["training (GPU)"][2] == "PyTorch" and rows["inference (GPU)"][2] == "no winner (undecided)"
    assert rows["inference (CPU, 1 core)"][8] == "TensorFlow"  # the paper's winner beside the run's
    from kit.report.latex import environment, section_table_tex  # how the LaTeX report renders section tables

    tex = section_table_tex(environment(), first["tables"][0], "zoo-winners-0")
    assert "no winner (undecided)" in tex and r"95 \% CI" in tex and "inference (CPU, 1 core)" in tex


def test_winner_table_without_both_frameworks_is_empty() -> None:
    manifest, trials = _sweep_run()
    manifest["plan"]["arms"] = ["pytorch"]
    trials = [t for t in trials if t["arm"] == "pytorch"]
    assert zoo.analyse(run_view(manifest, trials)).to_json()["winners"] == []


# -- real frameworks through the harness (slow) ---------------------------------------------------------------------

def _harness(tmp_path: Path, framework: str, **wl: object) -> tuple[int, dict]:
    from kit.workloads import WORKLOADS

    params = {k: p.default for k, p in WORKLOADS["zoo"].params.items()}
    work = {**params, "name": "zoo", "batch_size": 2, "epochs": 1, "learning_rate": 0.01, "momentum": 0.9,
            "warmup_steps": 1, "device": "cpu", "threads": None, "image_size": 32, "num_classes": 10, "repeats": 2,
            "model": "resnet18", "mode": "infer", **wl}
    req = {"schema": 1, "trial_id": "t", "framework": framework, "seed": 3, "device": "cpu", "threads": None,
           "dataset": None, "workload": work}
    (tmp_path / "request.json").write_text(json.dumps(req))
    proc = subprocess.run([sys.executable, "-m", "kit.harness", "--out", str(tmp_path), "--data", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    return proc.returncode, json.loads((tmp_path / "result.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("framework", [pytest.param("pytorch", marks=pytest.mark.torchvision), "tensorflow"])
def test_pinned_trial_records_its_core_and_threads(tmp_path: Path, framework: str) -> None:
    rc, res = _harness(tmp_path, framework, cpu_cores=1)
    assert rc == 0 and res["status"] == "ok", res.get("error")
    pin = res["env"]["cpu_pinning"]
    assert pin["cores_asked"] == 1 and len(pin["cpus_pinned"]) == 1 and pin["cpus_pinned"][0] in pin["cpus_allowed"]
    assert pin["intra_op_threads"] == 1 and pin["inter_op_threads"] == 1 and res["env"]["threads"] == 1


@pytest.mark.slow
def test_more_cores_than_the_host_has_is_an_error_not_a_fallback(tmp_path: Path) -> None:
    n = len(os.sched_getaffinity(0))
    rc, res = _harness(tmp_path, "pytorch", cpu_cores=n + 1)
    assert rc == 6 and res["status"] == "error" and res["error_kind"] == "device"
    assert f"{n + 1} CPU core(s) asked for" in res["cause"] and res["fix"]


@pytest.mark.slow
@pytest.mark.torchvision  # the ranks train resnet18 from torchvision.models
@pytest.mark.parametrize("devices", [1, 2])
def test_ddp_on_cpu_devices_runs_one_and_two_processes(tmp_path: Path, devices: int) -> None:
    """N = 1 and 2 DDP ranks over gloo on CPU devices through the harness (N = 4, 8: GPU hosts, not here)."""
    if len(os.sched_getaffinity(0)) < devices:
        pytest.skip(f"needs {devices} CPUs")
    info = load_spec(DIST).workload_info
    params = {k: p.default for k, p in info.params.items()}
    req = {"schema": 1, "trial_id": "t", "framework": "pytorch", "seed": 3, "device": "cpu", "threads": 1,
           "study": {"workload": "zoo_distributed", "module": info.modules["pytorch"]}, "dataset": None,
           "workload": {**params, "name": "zoo_distributed", "batch_size": 2, "epochs": 1, "learning_rate": 0.01,
                        "momentum": 0.9, "warmup_steps": 1, "device": "cpu", "threads": 1, "image_size": 32,
                        "num_classes": 10, "repeats": 2, "model": "resnet18", "strategy": "ddp", "devices": devices,
                        "dist_device": "cpu"}}
    (tmp_path / "request.json").write_text(json.dumps(req))
    proc = subprocess.run([sys.executable, "-m", "kit.harness", "--out", str(tmp_path), "--data", str(tmp_path),
                           "--study", str(DIST)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    res = json.loads((tmp_path / "result.json").read_text())
    assert proc.returncode == 0 and res["status"] == "ok", res.get("error")
    assert res["results"]["devices"] == devices and res["env"]["world_size"] == devices
    assert res["env"]["dist_backend"] == "gloo" and res["results"]["global_batch"] == 2 * devices
