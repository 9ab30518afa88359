"""The Germino and DLBench networks are the same model in both frameworks: same
parameter counts as the tables, same outputs on the same weights (including SAME
pooling, batch norm, masked vs packed LSTMs), and the same training trajectory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kit.workloads import MOVED_TO_STUDIES, nets

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow

TABLES = {**{f"germino-{k}": (v, (28, 28, 1)) for k, v in nets.GERMINO_NETS.items()},
          **{f"dlbench-{k}": (v, nets.INPUT_SHAPES[k]) for k, v in nets.DLBENCH_CNNS.items()}}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_cnn_tables_same_model_in_both_frameworks(name: str) -> None:
    import torch

    from kit.workloads import train_keras, train_torch
    from kit.workloads.tasks import Task

    table, shape = TABLES[name]
    rng = np.random.default_rng(1)
    task = Task("image", rng.random((4, *shape), dtype=np.float32), np.zeros(4, np.int64),
                rng.random((3, *shape), dtype=np.float32), np.zeros(3, np.int64), table=table, input_shape=shape)
    pt = train_torch.build(task, shared=True, seed=5).eval()
    kr = train_keras.build(task, shared=True, seed=5)
    expected = nets.param_count(table, shape)
    assert train_torch.param_count(pt) == train_keras.trainable_count(kr) == expected
    assert train_torch.param_count(train_torch.build(task, shared=False, seed=5)) == expected
    with torch.no_grad():
        out_pt = pt(torch.from_numpy(np.ascontiguousarray(task.x_te.transpose(0, 3, 1, 2)))).numpy()
    out_kr = np.asarray(kr(task.x_te, training=False))
    assert out_pt.shape == out_kr.shape == (3, table[-1][1])
    np.testing.assert_allclose(out_pt, out_kr, rtol=1e-3, atol=1e-4)
    assert np.abs(out_pt).max() > 1e-3  # not a vacuous match of zeros


def test_svhn_table_pools_with_tensorflow_same_padding() -> None:
    s = nets.shapes(nets.DLBENCH_CNNS["svhn"], (32, 32, 3))
    pools = [x for x in s if x.kind == "pool"]
    assert [p.shape_out[0] for p in pools] == [16, 16, 8, 8, 4, 4, 2, 2]
    assert pools[1].pad == (0, 1, 0, 1)  # stride 1, size 2: one column/row after, as TensorFlow pads
    assert s[-4].shape_in == (2 * 2 * 192,)


@pytest.mark.parametrize("kind", ["imdb", "ptb"])
def test_lstm_nets_same_outputs_on_the_same_weights(kind: str) -> None:
    import torch

    from kit.workloads import train_keras, train_torch
    from kit.workloads.tasks import Task

    rng = np.random.default_rng(2)
    vocab, t = 60, 12
    x = rng.integers(2, vocab, size=(4, t))
    lengths = np.array([12, 7, 3, 1])
    if kind == "imdb":
        for row, n in zip(x, lengths, strict=True):
            row[n:] = 0  # padding after the true length: masked in Keras, packed in PyTorch
        net = nets.imdb_net(vocab)
    else:
        net = nets.TextNet(vocab=vocab, embed=16, units=(24, 24), outputs=vocab, dropout=0.5, per_step=True)
    task = Task(kind, x, np.zeros(4, np.int64), x, np.zeros(4, np.int64), len_tr=lengths, len_te=lengths, text=net)
    pt = train_torch.build(task, shared=True, seed=9).eval()
    kr = train_keras.build(task, shared=True, seed=9)
    assert train_torch.param_count(pt) == train_keras.trainable_count(kr) == nets.text_param_count(net)
    with torch.no_grad():
        xt = torch.from_numpy(x)
        out_pt = (pt(xt, torch.from_numpy(lengths)) if kind == "imdb" else pt(xt)).numpy()
    out_kr = np.asarray(kr(x, training=False))
    if kind == "imdb":
        out_kr = out_kr[:, 0]
    np.testing.assert_allclose(out_pt, out_kr, rtol=1e-3, atol=1e-5)
    # PyTorch's own default adds a second, trainable bias per gate: framework mode has more parameters
    assert train_torch.param_count(train_torch.build(task, shared=False, seed=9)) == \
        nets.text_param_count(net) + sum(4 * u for u in net.units)


def _harness(tmp_path: Path, framework: str, workload: dict, dataset: dict, data: Path) -> dict:
    out = tmp_path / framework
    out.mkdir()
    # germino and dlbench are defined by their study folders: the harness imports the folder's module (--study)
    folder = ROOT / "experiments" / MOVED_TO_STUDIES[workload["name"]]
    module = "workload_torch" if framework == "pytorch" else "workload_keras"
    req = {"trial_id": "t", "framework": framework, "seed": 17, "device": "cpu", "threads": 1,
           "workload": workload, "dataset": dataset, "study": {"workload": workload["name"], "module": module}}
    (out / "request.json").write_text(json.dumps(req))
    proc = subprocess.run([sys.executable, "-m", "kit.harness", "--out", str(out), "--data", str(data),
                           "--study", str(folder)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    result["markers"] = [json.loads(x) for x in (out / "markers.jsonl").read_text().splitlines()]
    return result


GERMINO_WL = {"name": "germino", "batch_size": 64, "epochs": 2, "steps_per_epoch": None, "learning_rate": 0.001,
              "optimizer": "adam", "momentum": 0.0, "infer_batch_size": 500, "warmup_steps": 3, "device": "cpu",
              "threads": 1, "model": "mlp", "defaults": "shared", "knn_k": 5, "eval_each_epoch": True}
MNIST_DS = {"name": "mnist", "source": "t10k_split", "train_size": 1500, "test_size": 500}


def test_germino_mlp_same_trajectory_and_knn_same_result(tmp_path: Path, mnist_dir: Path) -> None:
    pt = _harness(tmp_path, "pytorch", GERMINO_WL, MNIST_DS, mnist_dir)["results"]
    tf = _harness(tmp_path, "tensorflow", GERMINO_WL, MNIST_DS, mnist_dir)["results"]
    assert pt["param_count"] == tf["param_count"] == 101770
    # Adam state reset after the warm-up, same batches each epoch: every epoch's loss agrees
    np.testing.assert_allclose(pt["epoch_train_loss"], tf["epoch_train_loss"], rtol=1e-3)
    assert abs(pt["test_accuracy"] - tf["test_accuracy"]) <= 0.004 and pt["test_accuracy"] > 0.5  # it learned
    assert len(pt["epoch_test_accuracy"]) == 2 and pt["epoch_test_accuracy"][-1] == pt["test_accuracy"]
    assert pt["train_time_s"] == pytest.approx(pt["train_phase_s"] - pt["eval_between_epochs_s"])
    knn = {**GERMINO_WL, "model": "knn"}
    (tmp_path / "knn").mkdir()
    a = _harness(tmp_path / "knn", "pytorch", knn, MNIST_DS, mnist_dir)
    b = _harness(tmp_path / "knn", "tensorflow", knn, MNIST_DS, mnist_dir)
    assert a["results"]["test_accuracy"] == b["results"]["test_accuracy"] > 0.75
    assert a["results"]["knn_k"] == 5 and "sklearn_version" in a["results"]


def test_dlbench_epoch_markers_and_convergence_results(tmp_path: Path) -> None:
    from kit import synthetic

    data = tmp_path / "data"
    data.mkdir()
    synthetic.write_imdb(data, 64, 32)
    wl = {"name": "dlbench", "batch_size": 16, "epochs": 3, "steps_per_epoch": None, "learning_rate": 0.001,
          "optimizer": "adam", "momentum": 0.0, "infer_batch_size": 32, "warmup_steps": 1, "device": "cpu",
          "threads": 1, "defaults": "framework", "eval_each_epoch": True, "imdb_vocab": 300, "imdb_seq_len": 60,
          "ptb_seq_len": 30, "ptb_stride": 5}
    for fw in ("pytorch", "tensorflow"):
        r = _harness(tmp_path, fw, wl, {"name": "imdb", "source": "synthetic"}, data)
        res = r["results"]
        ends = [m for m in r["markers"] if m["event"] == "epoch_end"]
        assert [m["epoch"] for m in ends] == [1, 2, 3]
        assert len(res["epoch_test_accuracy"]) == 3 and all(0 <= a <= 1 for a in res["epoch_test_accuracy"])
        assert res["train_examples_per_epoch"] == 64 and res["throughput_unit"] == "reviews"
        assert sum(res["epoch_train_s"]) <= res["train_time_s"] + 1e-6 <= res["train_phase_s"] + 1e-6
