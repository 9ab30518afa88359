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
@pytest.mark.parametrize("framework", [pytest.param("pytorch", marks=pytest.mark.torchvision), "tensorflow"])
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
@pytest.mark.torchvision  # torchvision.io's JPEG decoder is one of the two
def test_both_decoders_give_the_same_pixels(voc_dir: Path) -> None:
    """torchvision.io and tf.io (INTEGER_ACCURATE) decode every stand-in JPEG to identical arrays."""
    proc = subprocess.run([sys.executable, "-c", _DECODERS, str(voc_dir)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-2:] == ["10", "0"]  # 10 images, largest pixel difference 0


# -- the shared protocol with a framework-free model (fast) ----------------------------------------------------------

class _Markers:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.sync = lambda: None

    def start(self, phase: str) -> float:
        self.events.append(("start", phase))
        return 0.0

    def end(self, phase: str, **_: object) -> float:
        self.events.append(("end", phase))
        return 0.5

    def event(self, event: str, **fields: object) -> None:
        self.events.append((event, str(fields.get("epoch"))))


def test_protocol_order_reset_and_perfect_detections_score_one(voc_dir: Path) -> None:
    from kit.workloads import detect
    from kit.workloads.tasks import epoch_order

    data = voc.load_voc(voc_dir, _pil)
    index = {im.pixels.tobytes(): k for k, im in enumerate(data.train)}
    seen: list[list[int]] = []
    resets: list[int] = []
    truth = {im.pixels.tobytes(): im for im in data.test}

    def train_step(images: list[np.ndarray], boxes: list[np.ndarray], labels: list[np.ndarray]) -> float:
        seen.append([index[(x * 255).round().astype(np.uint8).tobytes()] for x in images])
        assert all(len(b) == len(lab) for b, lab in zip(boxes, labels, strict=True))
        return 1.0

    def detect_batch(images: list[np.ndarray]) -> list:
        ims = [truth[(x * 255).round().astype(np.uint8).tobytes()] for x in images]
        return [(im.boxes, np.ones(len(im.boxes)), im.labels) for im in ims]  # the ground truth itself

    adapter = detect.Adapter(train_step, float, detect_batch, lambda: resets.append(len(seen)), lambda: None, 7)
    s = detect.settings({**WL, "warmup_steps": 2})
    m = _Markers()
    out = detect.run_protocol({"seed": 17, "min_phase_s": 0}, s, data, adapter, m)  # type: ignore[arg-type]
    # warm-up: 2 steps in file order, then the reset; each epoch: tasks.epoch_order's permutation, full batches
    assert seen[:2] == [[0, 1], [2, 3]] and resets == [2]
    for e in range(2):
        order = epoch_order(6, 17, e)
        assert seen[2 + 3 * e: 5 + 3 * e] == [list(order[i:i + 2]) for i in (0, 2, 4)]
    assert out["test_accuracy"] == 1.0 and out["epoch_test_accuracy"] == [1.0, 1.0]
    assert out["accuracy_metric"] == "mAP@0.5" and out["param_count"] == 7 and out["train_examples_per_epoch"] == 6
    assert out["epoch_train_loss"] == [1.0, 1.0] and out["train_images"] == 12 and out["test_images"] == 4
    assert [e for e in m.events if e[0] in ("start", "end")] == [
        ("start", "warmup"), ("end", "warmup"), ("start", "train"), ("end", "train"), ("start", "infer"),
        ("end", "infer")]


def _pil(data: bytes) -> np.ndarray:
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))


@pytest.mark.parametrize(("change", "match"), [
    ({"optimizer": "sgd"}, "trains with Adam"),
    ({"defaults": "shared"}, "not implemented for Faster R-CNN"),
    ({"detect_max_size": 32}, "out of range"),
    ({"weight_decay": -1.0}, "weight_decay"),
])
def test_settings_refuse_what_the_protocol_cannot_run(change: dict, match: str) -> None:
    from kit.workloads import detect
    from kit.workloads.common import WorkloadError

    with pytest.raises(WorkloadError, match=match):
        detect.settings({**WL, **change})
