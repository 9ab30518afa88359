"""Cross-machine reproducibility (issue 15): what decides CPU kernels is pinned where it can be, recorded where
it cannot, compared across hosts by `kit compare`, and flagged as a threat in the report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kit.analysis.validity import cpu_kernels
from kit.compare import provenance, provenance_differences
from kit.manifest import Manifest
from kit.provenance import cpu_identity
from tests._runs import bare_analysis, bare_manifest

# Starts the frameworks or renders whole reports: `make test-all`, not the fast `make test`.
pytestmark = pytest.mark.slow

ZEN3 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
stepping\t: 1
flags\t\t: fpu sse4_2 avx avx2 fma

processor\t: 1
vendor_id\t: AuthenticAMD
"""


def test_cpu_identity_reads_family_model_and_kernel_flags(tmp_path: Path) -> None:
    (tmp_path / "cpuinfo").write_text(ZEN3)
    ident = cpu_identity(tmp_path)
    assert ident == {"vendor": "AuthenticAMD", "family": 25, "model": 1, "stepping": 1,
                     "isa": ["sse4_2", "avx", "avx2", "fma"]}
    (tmp_path / "cpuinfo").write_text("garbage without fields")
    assert cpu_identity(tmp_path)["family"] is None and cpu_identity(tmp_path)["isa"] == []


def _run(family: int, isa: list[str], tf_onednn: bool) -> tuple[Manifest, dict]:
    man = bare_manifest(host={"hostname": "h", "cpu_model": "AMD EPYC", "cpu": {"vendor": "AuthenticAMD",
                                                                              "family": family, "model": 1, "isa": isa}})
    analysis = {"trial_env": [{"arm": "tensorflow", "device_kind": "cpu", "cpu_kernels": {"onednn": tf_onednn}},
                              {"arm": "pytorch", "device_kind": "cpu", "cpu_kernels": {"onednn": True,
                                                                                       "cpu_capability": "AVX2"}}],
                "validity": [{"rule": "cpu_load", "status": "threat", "severity": "medium"}] if not tf_onednn else []}
    return man, analysis


def test_compare_names_the_cpu_and_kernel_differences_that_could_flip_a_verdict() -> None:
    a, b = (provenance(man, bare_analysis(**an)) for man, an in (_run(26, ["avx2", "avx512f", "avx512_vnni"], True),
                                                                   _run(25, ["avx2"], False)))
    diffs = {d.key: d.to_json() for d in provenance_differences(a, b)}
    assert diffs["host.cpu.family"]["a"] == 26 and diffs["host.cpu.family"]["b"] == 25
    assert "ISA" in diffs["host.cpu.isa"]["may_explain"] and "oneDNN" in diffs["host.cpu.family"]["may_explain"]
    assert diffs["inside.tensorflow.cpu_kernels.onednn"] == {
        "key": "inside.tensorflow.cpu_kernels.onednn", "a": True, "b": False,
        "may_explain": "what ran inside the trials (versions, device, threads, CPU kernels)"}
    assert diffs["threat.cpu_load"]["may_explain"].startswith("a condition of the run")  # load before trials
    assert "inside.pytorch.cpu_kernels.cpu_capability" not in diffs


class _Ctx:
    def __init__(self, man: Manifest, analysis: dict) -> None:
        self.manifest, self.analysis = man, analysis


def test_the_threat_says_the_result_depends_on_kernel_dispatch() -> None:
    (t,) = cpu_kernels(_Ctx(*_run(26, ["avx2", "avx512f"], True)))
    assert t.severity == "medium" and "ISA avx2,avx512f" in t.evidence and "kit compare" in t.mitigation
    (t,) = cpu_kernels(_Ctx(*_run(25, ["avx2"], False)))
    assert t.severity == "high" and "different CPU kernel libraries" in t.title
    man, an = _run(25, ["avx2"], True)
    for e in an["trial_env"]:
        e["device_kind"] = "gpu"
    assert cpu_kernels(_Ctx(man, an)) == []  # GPU trials: not this rule's business


def _kernels(code: str, env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_tensorflow_is_pinned_to_onednn_and_a_user_override_is_recorded() -> None:
    """Real TensorFlow: without the variable the kit turns oneDNN on (whatever the CPU); an explicit 0 is honoured
    and shows in the record, so the analysis can see it."""
    code = "import json; from kit.workloads.tf_env import cpu_kernels; print(json.dumps(cpu_kernels()))"
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    pinned = _kernels(code, env)
    assert pinned["onednn"] is True and pinned["tf_enable_onednn_opts"] == "1"
    off = _kernels(code, {**env, "TF_ENABLE_ONEDNN_OPTS": "0"})
    assert off["onednn"] is False and off["tf_enable_onednn_opts"] == "0"


def test_pytorch_records_its_cpu_dispatch() -> None:
    code = ("import json, torch; from kit.workloads.torch_env import torch_env; "
            "print(json.dumps(torch_env(torch.device('cpu'))['cpu_kernels']))")
    k = _kernels(code, {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"})
    assert k["onednn"] is True and k["cpu_capability"] and k["onednn_max_cpu_isa"] == "AVX2"


def test_the_harness_pins_onednn_before_a_workload_imports_tensorflow(tmp_path: Path, mnist_dir: Path) -> None:
    """The flip's cause on an AVX2-only host: lenet_keras imports keras (hence TensorFlow) before tf_env set the
    variable, and TensorFlow reads it once at import, so the trial recorded TF_ENABLE_ONEDNN_OPTS=1 while Eigen
    kernels ran. A real LeNet trial through the harness, the variable unset, must run (and record) oneDNN."""
    out = tmp_path / "tf"
    out.mkdir()
    req = {"trial_id": "t", "framework": "tensorflow", "seed": 1, "device": "cpu", "threads": 1,
           "workload": {"name": "lenet5", "batch_size": 50, "epochs": 1, "steps_per_epoch": 5, "learning_rate": 0.05,
                        "momentum": 0.5, "infer_batch_size": 250, "warmup_steps": 1},
           "dataset": {"name": "mnist", "source": "t10k_split", "train_size": 500, "test_size": 250}}
    (out / "request.json").write_text(json.dumps(req))
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    proc = subprocess.run([sys.executable, "-m", "kit.harness", "--out", str(out), "--data", str(mnist_dir)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr[-2000:]
    kernels = json.loads((out / "result.json").read_text())["env"]["cpu_kernels"]
    assert kernels["tf_enable_onednn_opts"] == "1" and kernels["onednn"] is True


def test_a_onednn_setting_that_did_not_take_stops_the_trial() -> None:
    """On any CPU: TensorFlow imported with the variable at 0, then set to 1 (what the old import order did on an
    AVX2 host). The record would say 1 while Eigen ran; the trial must stop with the cause instead."""
    code = ("import os, json, tensorflow\n"
            "os.environ['TF_ENABLE_ONEDNN_OPTS'] = '1'\n"
            "from kit.workloads.common import DeviceUnavailable\n"
            "from kit.workloads.tf_env import configure\n"
            "try:\n    configure('cpu', 1)\n    print(json.dumps({'raised': None}))\n"
            "except DeviceUnavailable as exc:\n    print(json.dumps({'raised': exc.cause, 'fix': exc.fix}))\n")
    got = _kernels(code, {**os.environ, "TF_ENABLE_ONEDNN_OPTS": "0"})
    assert got["raised"] and "read once, at import" in got["raised"] and "kit.harness" in got["fix"]
    # and the same code with the variable at 1 from the start runs
    ok = _kernels(code, {**os.environ, "TF_ENABLE_ONEDNN_OPTS": "1"})
    assert ok == {"raised": None}


def test_a_run_whose_onednn_pin_was_ignored_is_named_as_such() -> None:
    """Runs made before the harness pinned the variable recorded TF_ENABLE_ONEDNN_OPTS=1 with oneDNN off."""
    man, an = _run(23, ["avx2"], False)
    an["trial_env"][0]["cpu_kernels"]["tf_enable_onednn_opts"] = "1"
    (t,) = cpu_kernels(_Ctx(man, an))
    assert t.severity == "high" and "did not take effect in tensorflow" in t.evidence and "harness" in t.mitigation
