"""The two LeNet-5 builds are the same model: same layers, same parameter count,
same outputs on the same weights, same training trajectory."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kit.workloads import lenet
from kit.workloads.common import WorkloadError, load_mnist, read_idx

pytestmark = pytest.mark.slow


def test_idx_reader_on_real_mnist(mnist_dir: Path) -> None:
    x = read_idx(mnist_dir / "t10k-images-idx3-ubyte.gz")
    y = read_idx(mnist_dir / "t10k-labels-idx1-ubyte.gz")
    assert x.shape == (10000, 28, 28) and y.shape == (10000,)
    assert x.dtype == np.uint8 and set(np.unique(y)) == set(range(10))
    x_tr, _y_tr, x_te, y_te = load_mnist(mnist_dir, "t10k_split", 8000, 2000)
    assert x_tr.shape == (8000, 28, 28) and x_te.shape == (2000, 28, 28) and float(x_tr.max()) <= 1.0
    assert np.array_equal(y_te, y[8000:])


def test_idx_reader_rejects_garbage(tmp_path: Path) -> None:
    p = tmp_path / "bad-idx1-ubyte.gz"
    with gzip.open(p, "wb") as fh:
        fh.write(b"\x00\x00\x08\x01\x00\x00\x00\x05abc")  # header says 5 bytes, body has 3
    with pytest.raises(WorkloadError, match="IDX body has 3 bytes"):
        read_idx(p)


def test_parameter_counts_equal() -> None:
    from kit.workloads import lenet_keras, lenet_torch

    expected = lenet.expected_param_count()
    assert expected == 61706  # LeCun et al. (1998) LeNet-5 with 10 outputs
    assert lenet_torch.param_count(lenet_torch.build(0)) == expected
    assert lenet_keras.build(0).count_params() == expected


def test_same_outputs_on_the_same_weights(mnist_dir: Path) -> None:
    import torch

    from kit.workloads import lenet_keras, lenet_torch

    x = load_mnist(mnist_dir, "t10k_split", 100, 100)[2]
    pt = lenet_torch.build(seed=3).eval()
    kr = lenet_keras.build(seed=3)
    with torch.no_grad():
        out_pt = pt(torch.from_numpy(x[:, None])).numpy()
    out_kr = np.asarray(kr(x[..., None], training=False))
    assert out_pt.shape == out_kr.shape == (100, 10)
    np.testing.assert_allclose(out_pt, out_kr, rtol=1e-4, atol=1e-5)
    # and a different seed gives different weights (the check above is not vacuous)
    pt2 = lenet_torch.build(seed=4).eval()
    with torch.no_grad():
        assert not np.allclose(pt2(torch.from_numpy(x[:, None])).numpy(), out_pt, atol=1e-3)


def _run_harness(tmp_path: Path, framework: str, mnist_dir: Path) -> dict:
    out = tmp_path / framework
    out.mkdir()
    req = {"trial_id": "t", "framework": framework, "seed": 11, "device": "cpu", "threads": None,
           "workload": {"name": "lenet5", "batch_size": 50, "epochs": 1, "steps_per_epoch": 20, "learning_rate": 0.05,
                        "momentum": 0.5, "infer_batch_size": 250, "warmup_steps": 3},
           "dataset": {"name": "mnist", "source": "t10k_split", "train_size": 1000, "test_size": 500}}
    (out / "request.json").write_text(json.dumps(req))
    proc = subprocess.run([sys.executable, "-m", "kit.harness", "--out", str(out), "--data", str(mnist_dir)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((out / "result.json").read_text())
    markers = [json.loads(x) for x in (out / "markers.jsonl").read_text().splitlines()]
    phases = [(m["event"], m["phase"]) for m in markers if m["event"].startswith("phase")]
    assert phases == [("phase_start", "warmup"), ("phase_end", "warmup"), ("phase_start", "train"),
                      ("phase_end", "train"), ("phase_start", "infer"), ("phase_end", "infer")]
    return result


def test_same_training_trajectory_through_the_harness(tmp_path: Path, mnist_dir: Path) -> None:
    pt = _run_harness(tmp_path, "pytorch", mnist_dir)
    tf = _run_harness(tmp_path, "tensorflow", mnist_dir)
    assert pt["status"] == tf["status"] == "ok"
    assert pt["results"]["param_count"] == tf["results"]["param_count"] == 61706
    # momentum and warm-up reset included: the last-epoch mean loss agrees to float precision
    assert pt["results"]["train_loss"] == pytest.approx(tf["results"]["train_loss"], rel=1e-4)
    assert abs(pt["results"]["test_accuracy"] - tf["results"]["test_accuracy"]) <= 0.004
    assert pt["results"]["test_accuracy"] > 0.3  # it learned (10 classes: chance is 0.1)
    assert pt["env"]["framework"] == "pytorch" and tf["env"]["framework"] == "tensorflow"


def test_bad_request_exit_code(tmp_path: Path, mnist_dir: Path) -> None:
    (tmp_path / "request.json").write_text('{"framework": "pytorch", "workload": {"name": "no-such-model"}}')
    proc = subprocess.run([sys.executable, "-m", "kit.harness", "--out", str(tmp_path), "--data", str(mnist_dir)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 4
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "error"
