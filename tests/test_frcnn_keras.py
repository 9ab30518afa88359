"""Issue 28: the Keras Faster R-CNN (kit/workloads/frcnn_keras*.py) against torchvision's fasterrcnn_resnet50_fpn.

Each framework runs in its own process (TensorFlow and torchvision in one process can crash, see test_zoo): one
torchvision process computes the reference figures, one TensorFlow process the Keras ones, both on the same
crafted inputs, started together; the tests compare the two JSON answers. The equal trainable parameter count
(in total and per part) is the check the issue asks for; the rest pins the rules that decide what is trained on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]

# Shared inputs, written into both scripts.
COMMON = r"""
import json, math
import numpy as np
QUALITY = {
    "plain": [[0.9, 0.5, 0.1, 0.0], [0.2, 0.65, 0.72, 0.31]],
    "ties": [[0.4, 0.4, 0.1, 0.0, 0.35], [0.1, 0.2, 0.25, 0.25, 0.0]],
    "no_overlap_gt": [[0.8, 0.0, 0.0], [0.0, 0.0, 0.0]],
    "threshold_edges": [[0.7, 0.3, 0.5, 0.2999, 0.6999]],
}
rs = np.random.RandomState(0)
PROPOSALS = (np.sort(rs.uniform(0, 90, (40, 2)), axis=1)[:, [0, 0, 1, 1]] + rs.uniform(0, 10, (40, 4)) * [0, 1, 0, 1]
             ).astype(np.float32)
PROPOSALS[:, 2:] += 1.0
GT = np.array([[5, 6, 40, 50], [30, 10, 70, 60], [1, 1, 2.5, 3]], np.float32)
FEAT = rs.uniform(-1, 1, (2, 4, 13, 17)).astype(np.float32)  # NCHW, as torchvision wants it
ROIS = np.array([[0, 1, 1, 30, 20], [1, -6, -3, 12, 9], [0, 40, 30, 75, 60], [1, 2.2, 3.3, 2.4, 3.5],
                 [0, -10, -10, 80, 70], [1, 60, 44, 72, 53.9], [0, 0, 0, 67.9, 51.9]], np.float32)
LEVEL_FEATS = [rs.uniform(-1, 1, (2, 3, 64 // s, 96 // s)).astype(np.float32) for s in (4, 8, 16, 32)]
LEVEL_BOXES = [np.array([[0, 0, 20, 20], [5, 5, 60, 40], [0, 0, 64, 96], [10, 10, 12, 11]], np.float32),
               np.array([[3, 4, 90, 60], [30, 20, 31, 22]], np.float32)]
IMAGES = [rs.uniform(0, 1, (50, 70, 3)).astype(np.float32), rs.uniform(0, 1, (81, 40, 3)).astype(np.float32)]
ANCHOR_GRID = [(16, 24), (8, 12), (4, 6), (2, 3), (1, 2)]
def out(d):
    print("JSON:" + json.dumps(d))
"""

TORCH = COMMON + r"""
import torch, torchvision
from torchvision.models.detection import _utils as U
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.image_list import ImageList
from torchvision.models.detection.transform import GeneralizedRCNNTransform
from torchvision.ops import MultiScaleRoIAlign, roi_align
m = torchvision.models.detection.fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=21)
def count(mod):
    return sum(p.numel() for p in mod.parameters() if p.requires_grad)
res = {"params": {"total": count(m), "body": count(m.backbone.body), "fpn": count(m.backbone.fpn),
                  "rpn_head": count(m.rpn.head), "box_head": count(m.roi_heads.box_head),
                  "box_predictor": count(m.roi_heads.box_predictor)}}
res["match_rpn"] = {k: U.Matcher(0.7, 0.3, True)(torch.tensor(q)).tolist() for k, q in QUALITY.items()}
res["match_roi"] = {k: U.Matcher(0.5, 0.5, False)(torch.tensor(q)).tolist() for k, q in QUALITY.items()}
ref = torch.tensor(GT[[0, 1, 2, 0, 1]])
prop = torch.tensor(PROPOSALS[:5])
for w in ((1.0, 1.0, 1.0, 1.0), (10.0, 10.0, 5.0, 5.0)):
    coder = U.BoxCoder(w)
    codes = coder.encode_single(ref, prop)
    res[f"encode_{w[0]}"] = codes.tolist()
    big = codes.clone(); big[:, 2:] = 20.0  # past the log(1000/16) clamp
    res[f"decode_big_{w[0]}"] = coder.decode_single(big, prop).tolist()
res["roi_align"] = {str(s): roi_align(torch.tensor(FEAT), torch.tensor(ROIS), (7, 7), s, 2, aligned=False).tolist()
                    for s in (0.25, 0.5)}
pool = MultiScaleRoIAlign(["0", "1", "2", "3"], 7, 2)
feats = {str(i): torch.tensor(f) for i, f in enumerate(LEVEL_FEATS)}
res["multiscale"] = pool(feats, [torch.tensor(b) for b in LEVEL_BOXES], [(64, 96), (60, 90)]).tolist()
gen = AnchorGenerator(((32,), (64,), (128,), (256,), (512,)), ((0.5, 1.0, 2.0),) * 5)
fm = [torch.zeros(1, 1, h, w) for h, w in ANCHOR_GRID]
res["anchors"] = gen(ImageList(torch.zeros(1, 3, 64, 96), [(64, 96)]), fm)[0].tolist()
tr = GeneralizedRCNNTransform(64, 96, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]).eval()
il, _ = tr([torch.tensor(i).permute(2, 0, 1) for i in IMAGES])
res["transform"] = {"batch": il.tensors.permute(0, 2, 3, 1).tolist(), "sizes": [list(s) for s in il.image_sizes]}
out(res)
"""

KERAS = COMMON + r"""
import numpy as np, tensorflow as tf
from kit.workloads import frcnn_keras as fk, frcnn_keras_ops as ops
from kit.workloads.common import WorkloadError
m = fk.build(min_size=64, max_size=96)
def count(layer):
    return int(sum(np.prod(v.shape) for v in layer.trainable_variables))
res = {"params": {"total": fk.param_count(m), "body": count(m.backbone.body), "fpn": count(m.backbone.fpn),
                  "rpn_head": count(m.rpn_head), "box_head": count(m.box_head),
                  "box_predictor": count(m.box_predictor)}}
res["match_rpn"] = {k: ops.match(tf.constant(q), 0.7, 0.3, True).numpy().tolist() for k, q in QUALITY.items()}
res["match_roi"] = {k: ops.match(tf.constant(q), 0.5, 0.5, False).numpy().tolist() for k, q in QUALITY.items()}
res["match_empty"] = ops.match(tf.zeros([0, 5]), 0.7, 0.3, True).numpy().tolist()
ref = tf.constant(GT[[0, 1, 2, 0, 1]])
prop = tf.constant(PROPOSALS[:5])
for w in ((1.0, 1.0, 1.0, 1.0), (10.0, 10.0, 5.0, 5.0)):
    codes = ops.encode(ref, prop, w)
    res[f"encode_{w[0]}"] = codes.numpy().tolist()
    res[f"roundtrip_{w[0]}"] = ops.decode(codes, prop, w)[:, 0].numpy().tolist()
    big = tf.concat([codes[:, :2], tf.fill([5, 2], 20.0)], axis=1)
    res[f"decode_big_{w[0]}"] = tf.reshape(ops.decode(big, prop, w), [5, 4]).numpy().tolist()
rng = tf.random.Generator.from_seed(1)
samples = {}
for name, (npos, nneg, nign) in {"many": (300, 1000, 50), "few_pos": (10, 1000, 5), "few_neg": (200, 20, 5)}.items():
    lab = np.concatenate([np.full(npos, 1), np.full(nneg, 0), np.full(nign, -1)]).astype(np.int32)
    lab = lab[np.random.RandomState(2).permutation(len(lab))]
    draws = []
    for _ in range(2):
        p, n = ops.sample(tf.constant(lab), 256, 0.5, rng)
        draws.append((p.numpy().tolist(), n.numpy().tolist()))
    samples[name] = {"labels": lab.tolist(), "draws": draws}
res["sample"] = samples
nhwc = tf.constant(FEAT.transpose(0, 2, 3, 1))
res["roi_align"] = {str(s): tf.transpose(ops.roi_align(nhwc, tf.constant(ROIS[:, 1:]), tf.constant(ROIS[:, 0]), s, 7, 2),
                                         [0, 3, 1, 2]).numpy().tolist() for s in (0.25, 0.5)}
lv = [tf.constant(f.transpose(0, 2, 3, 1)) for f in LEVEL_FEATS]
idx = np.concatenate([np.full(len(b), i) for i, b in enumerate(LEVEL_BOXES)])
pooled = ops.multiscale_roi_align(lv, tf.constant(np.concatenate(LEVEL_BOXES)), tf.constant(idx, tf.int32), 64)
res["multiscale"] = tf.transpose(pooled, [0, 3, 1, 2]).numpy().tolist()
res["anchors"] = tf.concat([ops.grid_anchors(c, h, w, 64, 96) for c, (h, w) in zip(m.cell, ANCHOR_GRID)], 0
                           ).numpy().tolist()
batch, sizes, _, _ = m._prepare(IMAGES)
res["transform"] = {"batch": batch.numpy().tolist(), "sizes": sizes.numpy().tolist()}
ok = [np.zeros((8, 8, 3), np.float32)]
box = [np.array([[1, 1, 5, 5]], np.float32)]
attacks = {
    "label_0": (ok, box, [np.array([0])]), "label_21": (ok, box, [np.array([21])]),
    "float_label": (ok, box, [np.array([1.5])]), "nan_box": (ok, [np.array([[1, 1, np.nan, 5]], np.float32)], [np.array([1])]),
    "flat_box": (ok, [np.array([[1, 1, 1, 5]], np.float32)], [np.array([1])]),
    "box_shape": (ok, [np.array([1, 1, 5, 5], np.float32)], [np.array([1])]),
    "count_mismatch": (ok, box, [np.array([1, 2])]), "missing_targets": (ok + ok, box, [np.array([1])]),
    "gray_image": ([np.zeros((8, 8), np.float32)], box, [np.array([1])]),
    "int_image": ([np.zeros((8, 8, 3), np.uint8)], box, [np.array([1])]),
    "nan_image": ([np.full((8, 8, 3), np.nan, np.float32)], box, [np.array([1])]),
    "huge_side": ([np.zeros((20001, 1, 3), np.float32)], box, [np.array([1])]),
    "zero_side": ([np.zeros((0, 8, 3), np.float32)], box, [np.array([1])]),
    "bool_label": (ok, box, [np.array([True])]), "inf_box": (ok, [np.array([[1, 1, np.inf, 5]], np.float32)], [np.array([1])]),
    "empty_batch": ([], [], []),
    "too_many_boxes": (ok, [np.tile(box[0], (1001, 1))], [np.ones(1001, np.int64)]),
}
refused = {}
for name, (imgs, bxs, labs) in attacks.items():
    try:
        m.train_batch(imgs, bxs, labs, None)
        refused[name] = "accepted"
    except WorkloadError as exc:
        refused[name] = str(exc)
from kit.workloads.frcnn_keras_weights import set_torchvision_weights
try:
    set_torchvision_weights(m, {"backbone.body.conv1.weight": np.zeros((64, 3, 7, 7), np.float32),
                                "../../etc/passwd": np.zeros(1, np.float32)})
    refused["weights_unknown_key"] = "accepted"
except WorkloadError as exc:
    refused["weights_unknown_key"] = str(exc)
for bad in ({"num_classes": 1}, {"min_size": 0}, {"min_size": 100, "max_size": 50}):
    try:
        fk.build(**bad)
        refused[str(bad)] = "accepted"
    except WorkloadError as exc:
        refused[str(bad)] = str(exc)
res["refused"] = refused
out(res)
"""


def _answer(proc: subprocess.Popen[str]) -> dict[str, Any]:
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    (line,) = [x for x in stdout.splitlines() if x.startswith("JSON:")]
    return json.loads(line[5:])


# Every test here starts both frameworks (the fixture below runs torchvision and the Keras build in two processes,
# about 10 s before the first test): the tests are `slow` (make test-all, CI), not part of the fast subset.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def both() -> tuple[dict[str, Any], dict[str, Any]]:
    """(torchvision's answer, the Keras build's answer), computed in two processes at once."""
    env = {"PYTHONPATH": str(ROOT), "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2",
           "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for code in (TORCH, KERAS)]
    torch_res, keras_res = (_answer(p) for p in procs)
    return torch_res, keras_res


@pytest.mark.torchvision  # `both` computes torchvision's side
def test_trainable_parameters_equal_torchvision_in_total_and_per_part(both: tuple[dict, dict]) -> None:
    pt, ks = both
    assert ks["params"] == pt["params"]
    assert pt["params"]["total"] == 41_449_656  # torchvision 0.2x, num_classes=21: a change there shows here
    assert sum(v for k, v in ks["params"].items() if k != "total") == ks["params"]["total"]


@pytest.mark.torchvision  # `both` computes torchvision's side
def test_matcher_follows_torchvision_with_and_without_low_quality_matches(both: tuple[dict, dict]) -> None:
    pt, ks = both
    assert ks["match_rpn"] == pt["match_rpn"]
    assert ks["match_roi"] == pt["match_roi"]
    # the quirk kept on purpose: a ground truth that overlaps nothing makes every zero-IoU anchor positive
    assert pt["match_rpn"]["no_overlap_gt"] == [0, 0, 0]
    assert ks["match_empty"] == [-1] * 5  # no ground truth: all background, as torchvision's RPN treats it


@pytest.mark.torchvision  # `both` computes torchvision's side
def test_box_coder_equals_torchvision_and_round_trips(both: tuple[dict, dict]) -> None:
    pt, ks = both
    for w in ("1.0", "10.0"):
        np.testing.assert_allclose(ks[f"encode_{w}"], pt[f"encode_{w}"], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(ks[f"decode_big_{w}"], pt[f"decode_big_{w}"], rtol=1e-5)
        gt_rows = [0, 1, 2, 0, 1]
        gt = np.array([[5, 6, 40, 50], [30, 10, 70, 60], [1, 1, 2.5, 3]], np.float32)[gt_rows]
        np.testing.assert_allclose(ks[f"roundtrip_{w}"], gt, atol=1e-4)


@pytest.mark.torchvision  # `both` computes torchvision's side
def test_sampler_keeps_torchvisions_proportions_and_draws_at_random(both: tuple[dict, dict]) -> None:
    _, ks = both
    expect = {"many": (128, 128), "few_pos": (10, 246), "few_neg": (128, 20)}
    for name, case in ks["sample"].items():
        lab = np.array(case["labels"])
        for pos, neg in case["draws"]:
            assert (len(pos), len(neg)) == expect[name]
            assert len(set(pos)) == len(pos) and len(set(neg)) == len(neg)
            assert (lab[pos] >= 1).all() and (lab[neg] == 0).all()
        (p1, n1), (p2, n2) = case["draws"]
        if name == "many":
            assert set(p1) != set(p2) and set(n1) != set(n2)  # a random subset, not the first ones


@pytest.mark.torchvision  # `both` computes torchvision's side
def test_roi_align_equals_torchvision_to_float_rounding(both: tuple[dict, dict]) -> None:
    """Boxes across every border, a sub-pixel box and boxes beyond the map: |diff| < 1e-5 on features in [-1, 1]."""
    pt, ks = both
    for s in ("0.25", "0.5"):
        np.testing.assert_allclose(ks["roi_align"][s], pt["roi_align"][s], atol=1e-5)
    np.testing.assert_allclose(ks["multiscale"], pt["multiscale"], atol=1e-5)


@pytest.mark.torchvision  # `both` computes torchvision's side
def test_anchors_and_transform_equal_torchvision(both: tuple[dict, dict]) -> None:
    pt, ks = both
    np.testing.assert_array_equal(ks["anchors"], pt["anchors"])
    assert ks["transform"]["sizes"] == pt["transform"]["sizes"]
    # bilinear source coordinates computed in different float orders: 1.4e-5 (of a unit std) seen
    np.testing.assert_allclose(ks["transform"]["batch"], pt["transform"]["batch"], atol=1e-4)


@pytest.mark.torchvision  # `both` computes torchvision's side
def test_hostile_targets_and_images_are_refused_with_a_workload_error(both: tuple[dict, dict]) -> None:
    _, ks = both
    refused = ks["refused"]
    assert [k for k, v in refused.items() if v == "accepted"] == []
    assert "1..20" in refused["label_0"] and "1..20" in refused["label_21"]
    assert "positive width" in refused["flat_box"] and "HxWx3" in refused["huge_side"]
    assert "1 unknown keys" in refused["weights_unknown_key"] and "missing" in refused["weights_unknown_key"]


STEP = r"""
import numpy as np, keras, tensorflow as tf
from kit.workloads import frcnn_keras as fk
m = fk.build(min_size=64, max_size=96, seed=3)
rs = np.random.RandomState(0)
imgs = [rs.uniform(0, 1, (64, 80, 3)).astype(np.float32), rs.uniform(0, 1, (70, 52, 3)).astype(np.float32)]
boxes = [np.array([[5, 6, 40, 50], [30, 10, 78, 60]], np.float32), np.array([[10, 10, 50, 40]], np.float32)]
labels = [np.array([3, 7], np.int64), np.array([20], np.int64)]
before = [v.numpy().copy() for v in m.trainable_variables]
opt = keras.optimizers.SGD(0.01, momentum=0.9)
first = m.train_batch(imgs, boxes, labels, opt)
changed = sum(not np.array_equal(a, v.numpy()) for a, v in zip(before, m.trainable_variables))
# a background-only image (no boxes), as torchvision allows
second = m.train_batch(imgs, [boxes[0], np.zeros((0, 4), np.float32)], [labels[0], np.zeros(0, np.int64)], opt)
# a predictor biased to class 5, so that every proposal yields a detection whose box can be checked
bias = m.box_predictor.cls_score.bias
bias.assign(tf.tensor_scatter_nd_update(bias, [[5]], [20.0]))
dets = [(b.tolist(), s.tolist(), l.tolist()) for b, s, l in m.detect(imgs)]
print("JSON:" + json.dumps({"first": first, "second": second, "changed": changed,
                            "variables": len(before), "dets": dets}))
"""


@pytest.mark.slow
def test_one_training_step_and_detection_on_tiny_images() -> None:
    env = {"PYTHONPATH": str(ROOT), "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2",
           "CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen([sys.executable, "-c", "import json\n" + STEP], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    res = _answer(proc)
    for losses in (res["first"], res["second"]):
        assert set(losses) == {"loss_classifier", "loss_box_reg", "loss_objectness", "loss_rpn_box_reg"}
        assert all(np.isfinite(v) and v >= 0 for v in losses.values())
    assert 2.0 < res["first"]["loss_classifier"] < 4.0  # about log(21) = 3.04 from a fresh predictor
    assert res["changed"] == res["variables"]  # every trainable tensor moved in the step
    for (boxes, scores, labels), (h, w) in zip(res["dets"], [(64, 80), (70, 52)], strict=True):
        b = np.array(boxes).reshape(-1, 4)
        assert 0 < len(b) == len(scores) == len(labels) <= 100 and set(labels) == {5}
        assert b[:, 2].max() > 0.8 * w and b[:, 3].max() > 0.8 * h  # spread over the original image, not shrunk
        assert (b[:, 0] >= 0).all() and (b[:, 1] >= 0).all() and (b[:, 2] <= w + 1e-3).all()
        assert (b[:, 3] <= h + 1e-3).all() and (b[:, 2] > b[:, 0]).all() and (b[:, 3] > b[:, 1]).all()
        assert all(s > 0.05 for s in scores) and scores == sorted(scores, reverse=True)


SAME_WEIGHTS_TORCH = r"""
import sys, numpy as np, torch, torchvision
torch.manual_seed(0)
m = torchvision.models.detection.fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=21,
                                                          min_size=64, max_size=96)
with torch.no_grad():  # BatchNorm statistics and affine away from 0/1, so that a mislaid one shows
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.2, 0.2); mod.running_var.uniform_(0.5, 1.5)
            mod.weight.uniform_(0.5, 1.5); mod.bias.uniform_(-0.2, 0.2)
    b = m.roi_heads.box_predictor.cls_score.bias
    # features this deep grow large under random weights: small predictor weights plus ten favoured classes
    # make many detections of sane boxes over several classes above the 0.05 threshold, to compare
    m.roi_heads.box_predictor.cls_score.weight.mul_(1e-3); m.roi_heads.box_predictor.bbox_pred.weight.mul_(1e-3)
    b[1:11] += torch.linspace(1.5, 2.5, 10)
m.eval()
rs = np.random.RandomState(0)
imgs = [rs.uniform(0, 1, (64, 80, 3)).astype(np.float32), rs.uniform(0, 1, (70, 52, 3)).astype(np.float32)]
with torch.no_grad():
    il, _ = m.transform([torch.tensor(i).permute(2, 0, 1) for i in imgs])
    feats = m.backbone(il.tensors)
    logits, deltas = m.rpn.head(list(feats.values()))
    props, _ = m.rpn(il, feats)
    dets = m([torch.tensor(i).permute(2, 0, 1) for i in imgs])
    state = {k: v.numpy().copy() for k, v in m.state_dict().items()}  # before train mode moves the statistics
    m.backbone.train()  # BatchNorm on batch statistics, as in a training step
    train_p2 = m.backbone(il.tensors)["0"].numpy().transpose(0, 2, 3, 1)
out = {"w:" + k: v for k, v in state.items()}
out["train_p2"] = train_p2
for i, im in enumerate(imgs):
    out[f"image{i}"] = im
    out[f"props{i}"] = props[i].numpy()
    for k in ("boxes", "scores", "labels"):
        out[f"det_{k}{i}"] = dets[i][k].numpy()
for i, (f, lg, dl) in enumerate(zip(feats.values(), logits, deltas)):
    out[f"feat{i}"] = f.numpy().transpose(0, 2, 3, 1)
    out[f"logits{i}"] = lg.numpy().transpose(0, 2, 3, 1)
    out[f"deltas{i}"] = dl.numpy().transpose(0, 2, 3, 1)
np.savez(sys.argv[1], **out)
"""

SAME_WEIGHTS_KERAS = r"""
import sys, json, numpy as np, tensorflow as tf
from kit.workloads import frcnn_keras as fk
from kit.workloads.frcnn_keras_weights import set_torchvision_weights
ref = np.load(sys.argv[1])
m = fk.build(min_size=64, max_size=96, seed=1)
state = {k[2:]: ref[k] for k in ref.files if k.startswith("w:")}
from kit.workloads.common import WorkloadError
before = m.backbone.body.conv1.kernel.numpy().copy()
attacks = {"shape": ("roi_heads.box_predictor.bbox_pred.weight", np.zeros((84, 1000), np.float32)),
           "nan": ("rpn.head.conv.0.0.bias", np.full(256, np.nan, np.float32)),
           "int": ("backbone.fpn.layer_blocks.0.0.bias", np.zeros(256, np.int64)),
           "fc6": ("roi_heads.box_head.fc6.weight", np.zeros((1024, 12543), np.float32))}
refused = {}
for name, (key, value) in attacks.items():
    try:
        set_torchvision_weights(m, {**state, key: value})
        refused[name] = "accepted"
    except WorkloadError as exc:
        refused[name] = str(exc)
unchanged = bool(np.array_equal(before, m.backbone.body.conv1.kernel.numpy()))
n = set_torchvision_weights(m, state)
imgs = [ref["image0"], ref["image1"]]
batch, sizes, _, _ = m._prepare(imgs)
feats = m.backbone(batch, training=False)
logits, deltas = m.rpn_head(feats)
def rel(a, b):
    return float(np.abs(np.asarray(a) - b).max() / np.abs(b).max())
res = {"assigned": n, "refused": refused, "unchanged_after_refusal": unchanged, "feat": [rel(f, ref[f"feat{i}"]) for i, f in enumerate(feats)],
       "logits": [rel(x, ref[f"logits{i}"]) for i, x in enumerate(logits)],
       "deltas": [rel(x, ref[f"deltas{i}"]) for i, x in enumerate(deltas)]}
obj, dl, anchors, per_level = m._rpn(feats, tf.shape(batch)[1:3])
props = m._proposals(obj, dl, anchors, per_level, sizes, 2, 1000, 1000)
def matched(mine, theirs, tol):  # share of the reference rows that have a row of ours within tol
    if len(theirs) == 0:
        return 1.0 if len(mine) == 0 else 0.0
    d = np.abs(np.asarray(mine)[None, :, :] - theirs[:, None, :]).max(axis=2) if len(mine) else None
    return float((d.min(axis=1) <= tol).mean()) if d is not None else 0.0
# 0.1 px: the RPN deltas of these random weights are large, exp(dw) multiplies their 4e-6 rounding up to 0.06 px
res["props"] = [[len(p), len(ref[f"props{i}"]), matched(p, ref[f"props{i}"], 0.1)] for i, p in enumerate(props)]
dets = m.detect(imgs)
res["train_p2"] = rel(m.backbone(batch, training=True)[0], ref["train_p2"])
res["dets"] = []
for i, (b, s, l) in enumerate(dets):
    mine = np.concatenate([b, s[:, None] * 100, l[:, None]], axis=1)
    theirs = np.concatenate([ref[f"det_boxes{i}"], ref[f"det_scores{i}"][:, None] * 100,
                             ref[f"det_labels{i}"][:, None]], axis=1)
    res["dets"].append([len(mine), len(theirs), matched(mine, theirs, 0.1)])
print("JSON:" + json.dumps(res))
"""


@pytest.mark.slow
@pytest.mark.torchvision  # the reference is torchvision's fasterrcnn_resnet50_fpn
def test_same_weights_give_torchvisions_features_proposals_and_detections(tmp_path: Path) -> None:
    """Layer for layer: torchvision's weights loaded into the Keras build reproduce its FPN features and RPN
    outputs to float rounding, and its proposals and detections (eval mode, original pixels)."""
    env = {"PYTHONPATH": str(ROOT), "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2",
           "CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"}
    npz = tmp_path / "ref.npz"
    for code in (SAME_WEIGHTS_TORCH, None):
        if code is not None:
            proc = subprocess.run([sys.executable, "-c", code, str(npz)], cwd=ROOT, env=env, text=True,
                                  capture_output=True, timeout=300)
            assert proc.returncode == 0, proc.stderr[-3000:]
    res = _answer(subprocess.Popen([sys.executable, "-c", SAME_WEIGHTS_KERAS, str(npz)], cwd=ROOT, env=env,
                                   text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    print(json.dumps(res))
    assert [k for k, v in res["refused"].items() if v == "accepted"] == [] and res["unchanged_after_refusal"]
    assert res["assigned"] == 41_449_656 + 53_120  # trainable + BatchNorm moving mean and var (26,560 channels)
    assert max(res["feat"] + res["logits"] + res["deltas"]) < 1e-4  # 5.4e-6 measured
    # train mode: 53 BatchNorms each divide by their batch's own std, which magnifies rounding (1.2e-4 measured)
    assert res["train_p2"] < 1e-3
    # Proposals and detections agree up to one near-tie: float rounding that differs by CPU (oneDNN and ATen pick
    # other kernels by ISA) can flip one proposal at the RPN's top-k/NMS boundary (1 of 24 on one of the CI
    # machines), and that proposal moves up to 4 of the 100 detections downstream. A wrong layer, weight layout or
    # box coding gives shares far below these.
    for mine, theirs, share in res["props"]:
        assert theirs > 0 and abs(mine - theirs) <= max(1, theirs // 100) and share * theirs >= theirs - 1 - 1e-9
    for mine, theirs, share in res["dets"]:
        assert theirs > 0 and abs(mine - theirs) <= max(1, theirs // 100) and share >= 0.95
    assert min(theirs for _, theirs, _ in res["dets"]) >= 20


GRAD_KEYS = ("roi_heads.box_predictor.cls_score.bias", "roi_heads.box_predictor.bbox_pred.weight",
             "roi_heads.box_head.fc6.weight", "rpn.head.cls_logits.weight", "rpn.head.bbox_pred.bias",
             "rpn.head.conv.0.0.weight", "backbone.fpn.layer_blocks.0.0.weight", "backbone.body.layer4.2.conv3.weight",
             "backbone.body.conv1.weight", "backbone.body.bn1.weight")

TRAIN_TORCH = r"""
import sys, copy, numpy as np, torch, torchvision
torch.manual_seed(0)
m = torchvision.models.detection.fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=21,
                                                          min_size=64, max_size=96)
m.rpn.fg_bg_sampler.batch_size_per_image = 10**6  # every labelled anchor and proposal: no random draw
m.roi_heads.fg_bg_sampler.batch_size_per_image = 10**6
with torch.no_grad():  # spread the objectness: at init its scores nearly tie and NMS would follow float rounding
    m.rpn.head.cls_logits.weight.mul_(100.0)
state = {k: v.numpy().copy() for k, v in m.state_dict().items()}
m.train()
rs = np.random.RandomState(0)
imgs = [rs.uniform(0, 1, (64, 80, 3)).astype(np.float32), rs.uniform(0, 1, (70, 52, 3)).astype(np.float32)]
boxes = [np.array([[5, 6, 40, 50], [30, 10, 78, 60]], np.float32), np.array([[10, 10, 50, 40]], np.float32)]
labels = [np.array([3, 7]), np.array([20])]
out = {"w:" + k: v for k, v in state.items()}
for tag, dt in (("", torch.float32), ("64", torch.float64)):  # float64: the yardstick of float32 rounding
    mm = copy.deepcopy(m).to(dt)
    losses = mm([torch.tensor(i).permute(2, 0, 1).to(dt) for i in imgs],
                [{"boxes": torch.tensor(b).to(dt), "labels": torch.tensor(l)} for b, l in zip(boxes, labels)])
    sum(losses.values()).backward()
    params = dict(mm.named_parameters())
    out.update({f"g{tag}:" + k: params[k].grad.double().numpy() for k in GRAD_KEYS})
    out.update({f"l{tag}:" + k: v.detach().double().numpy() for k, v in losses.items()})
out.update({f"image{i}": im for i, im in enumerate(imgs)})
out.update({f"boxes{i}": b for i, b in enumerate(boxes)})
out.update({f"labels{i}": l for i, l in enumerate(labels)})
np.savez(sys.argv[1], **out)
"""

TRAIN_KERAS = r"""
import sys, json, numpy as np, tensorflow as tf
from kit.workloads import frcnn_keras as fk
from kit.workloads.frcnn_keras_weights import _convert, _targets, set_torchvision_weights
ref = np.load(sys.argv[1])
m = fk.build(min_size=64, max_size=96, seed=1)
set_torchvision_weights(m, {k[2:]: ref[k] for k in ref.files if k.startswith("w:")})
m.rpn_batch_per_image = m.box_batch_per_image = 10**6
targets = _targets(m)
class Capture:  # an "optimizer" that keeps the gradients instead of applying them
    built = True
    def __init__(self):
        self.store = {k: tf.Variable(tf.zeros_like(targets[k][0])) for k in GRAD_KEYS}
        self.by_var = {id(targets[k][0]): k for k in GRAD_KEYS}
    def apply_gradients(self, pairs):
        for g, v in pairs:
            if id(v) in self.by_var:
                self.store[self.by_var[id(v)]].assign(g)
cap = Capture()
losses = m.train_batch([ref["image0"], ref["image1"]], [ref["boxes0"], ref["boxes1"]],
                       [ref["labels0"], ref["labels1"]], cap)
def rel(a, b):
    return float(np.abs(np.asarray(a) - b).max() / max(np.abs(b).max(), 1e-12))
# each figure: (Keras vs torchvision float64, torchvision float32 vs float64)
res = {"losses": {k: [abs(v / float(ref["l64:" + k]) - 1), abs(float(ref["l:" + k] / ref["l64:" + k]) - 1)]
                  for k, v in losses.items()},
       "grads": {k: [rel(cap.store[k].numpy(), _convert(ref["g64:" + k], targets[k][1])), rel(ref["g:" + k],
                                                                                           ref["g64:" + k])]
                 for k in GRAD_KEYS}}
print("JSON:" + json.dumps(res))
"""


@pytest.mark.slow
@pytest.mark.torchvision  # the reference is torchvision's fasterrcnn_resnet50_fpn
def test_same_weights_and_every_sample_give_torchvisions_losses_and_gradients(tmp_path: Path) -> None:
    """The training algorithm, not only the forward pass: with torchvision's weights and the samplers told to take
    every labelled anchor/proposal (so that no random draw differs), one step's four losses and the gradients
    of layers from the predictor down to conv1 equal torchvision's."""
    env = {"PYTHONPATH": str(ROOT), "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2",
           "CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"}
    npz = tmp_path / "train.npz"
    head = f"GRAD_KEYS = {GRAD_KEYS!r}\n"
    proc = subprocess.run([sys.executable, "-c", head + TRAIN_TORCH, str(npz)], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = _answer(subprocess.Popen([sys.executable, "-c", head + TRAIN_KERAS, str(npz)], cwd=ROOT, env=env,
                                   text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    print(json.dumps(res))
    # float64 torchvision is the yardstick: Keras may stray from it as far as torchvision's own float32 does
    # (twice, plus a floor); backbone gradients of 64-96 px images are ill-conditioned (BatchNorm over 3x3 maps
    # in layer4): torchvision's float32 is 13-34 % off its float64 there. The RoI-head figures get a wider floor:
    # one proposal in ~1100 sits at the NMS threshold (IoU 0.69994 here, above 0.7 in PyTorch's rounding), and
    # one RoI more or less moves loss_box_reg (a sum / number sampled) by 1/1100 = 9e-4. That RoI's gradient flows
    # back through RoIAlign into the FPN maps it reads, so the FPN layers get the same floor (measured on this 2-core
    # machine: fpn.layer_blocks.0 at 6.8e-4 and 7.2e-4 in two runs against torchvision float32's own 2.9e-4).
    for name, (mine, own) in {**res["losses"], **res["grads"]}.items():
        roi_head = name in ("loss_classifier", "loss_box_reg") or name.startswith(("roi_heads.", "backbone.fpn."))
        assert mine <= 2 * own + (2e-3 if roi_head else 1e-4), (name, mine, own)
