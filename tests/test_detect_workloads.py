"""DLBench's Faster R-CNN end to end: one tiny trial per framework through the study's workload modules.

Each trial runs in the harness (a fresh process, as the runner starts it) on the synthetic VOC2012 stand-in:
the dispatch of experiments/elshawi_dlbench/workload_*.py, the reader, torchvision's model / frcnn_keras,
the timed phases and the mAP. Slow (a ResNet-50 FPN step is seconds on one CPU thread; Keras traces its
graphs in the warm-up).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kit import synthetic_voc
from kit.workloads import voc

ROOT = Path(__file__).resolve().parents[1]
PARAMS_TORCHVISION = 41_449_656  # fasterrcnn_resnet50_fpn(num_classes=21), from scratch: every stage trainable

WL = {"name": "dlbench", "batch_size": 2, "infer_batch_size": 2, "epochs": 2, "steps_per_epoch": None,
      "learning_rate": 1e-4, "weight_decay": 5e-4, "optimizer": "adam", "momentum": 0.0, "warmup_steps": 1,
      "device": "cpu", "threads": 1, "defaults": "framework", "eval_each_epoch": True, "detect_min_size": 64,
      "detect_max_size": 64}
DS = {"name": "voc2012", "source": "synthetic", "train_size": 4, "test_size": 2}


def _harness(tmp_path: Path, framework: str, data: Path) -> dict:
    out = tmp_path / framework
    out.mkdir()
    module = "workload_torch" if framework == "pytorch" else "workload_keras"
    req = {"trial_id": "t", "framework": framework, "seed": 17, "device": "cpu", "threads": 1, "workload": WL,
           "dataset": DS, "study": {"workload": "dlbench", "module": module}}
    (out / "request.json").write_text(json.dumps(req))
    proc = subprocess.run([sys.executable, "-m", "kit.harness", "--out", str(out), "--data", str(data),
                           "--study", str(ROOT / "experiments" / "elshawi_dlbench")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    result["markers"] = [json.loads(x) for x in (out / "markers.jsonl").read_text().splitlines()]
    return result


@pytest.fixture(scope="module")
def voc_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("voc")
    synthetic_voc.write_voc2012(d, 6, 4)
    return d


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_one_tiny_faster_rcnn_trial(tmp_path: Path, voc_dir: Path, framework: str) -> None:
    r = _harness(tmp_path, framework, voc_dir)
    res, env = r["results"], r["env"]
    assert res["param_count"] == PARAMS_TORCHVISION  # frcnn_keras mirrors torchvision parameter for parameter
    assert res["accuracy_metric"] == "mAP@0.5" and 0.0 <= res["test_accuracy"] <= 1.0
    assert len(res["epoch_test_accuracy"]) == 2 and res["epoch_test_accuracy"][-1] == res["test_accuracy"]
    assert [m["epoch"] for m in r["markers"] if m["event"] == "epoch_end"] == [1, 2]
    phases = [m["phase"] for m in r["markers"] if m["event"] == "phase_start"]
    assert phases == ["warmup", "train", "infer"]
    assert res["train_examples_per_epoch"] == 4 and res["test_images"] == 2 and res["epochs"] == 2
    assert res["train_time_s"] == pytest.approx(res["train_phase_s"] - res["eval_between_epochs_s"])
    assert sum(res["epoch_train_s"]) <= res["train_time_s"] + 1e-6
    assert all(np.isfinite(res["epoch_train_loss"])) and res["epoch_train_loss"][0] > 0
    assert set(res["test_ap_per_class"]) <= set(voc.CLASSES)
    assert env["device"] in ("cpu", "/CPU:0") and env["threads"] == 1
    assert env["framework"] == framework


# torchvision first: importing it (its ops load triton) after TensorFlow crashes the process, so the check runs in
# a fresh interpreter, never in the test session's
_DECODERS = """
import sys
from pathlib import Path
import numpy as np
from kit.workloads import detect_torch, voc
a = voc.load_voc(Path(sys.argv[1]), detect_torch.decode_jpeg)
from kit.workloads import detect_keras
b = voc.load_voc(Path(sys.argv[1]), detect_keras.decode_jpeg)
pairs = list(zip(a.train + a.test, b.train + b.test, strict=True))
print(len(pairs), max(int(np.abs(x.pixels.astype(int) - y.pixels.astype(int)).max()) for x, y in pairs))
"""


@pytest.mark.slow
def test_both_decoders_give_the_same_pixels(voc_dir: Path) -> None:
    """torchvision.io and tf.io (INTEGER_ACCURATE) decode every stand-in JPEG to identical arrays."""
    proc = subprocess.run([sys.executable, "-c", _DECODERS, str(voc_dir)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-2:] == ["10", "0"]  # 10 images, largest pixel difference 0
