"""Faster R-CNN (ResNet-50 FPN) in Keras 3 on TensorFlow, as torchvision's ``fasterrcnn_resnet50_fpn``.

The DLBench study (Elshawi et al., Sec. 4.3) trains Faster R-CNN with ResNet-50 on VOC2012 in each framework;
PyTorch's model is ``torchvision.models.detection.fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None,
num_classes=21)`` and no maintained Keras 3 library offers one (keras_hub has RetinaNet only, keras_cv's is
tf.keras-only), so this is a transcription of torchvision's architecture and training algorithm, with the
same trainable parameters to the unit (tests/test_frcnn_keras.py checks each part against torchvision):

* GeneralizedRCNNTransform: normalise with the ImageNet mean/std, resize bilinearly (half-pixel centres, no
  antialias, as ``F.interpolate(align_corners=False)``) by ``min(min_size/short side, max_size/long side)``
  to ``floor(side * scale)``, zero-pad the batch to a multiple of 32; boxes scaled per axis, detections
  scaled back to the original pixels.
* backbone: :mod:`kit.workloads.frcnn_keras_resnet` (ResNet-50, all layers trainable, BatchNorm with PyTorch's
  constants, FPN 256 + LastLevelMaxPool).
* RPN: 3x3 conv + ReLU, 1x1 convs to 3 logits and 12 deltas (normal std 0.01, bias 0); anchors 32..512 per
  level x ratios 0.5/1/2; top 2000 (train) / 1000 (test) per level before NMS 0.7 per level, 2000/1000 after;
  targets by IoU 0.7/0.3 with low-quality matches, 256 samples half positive, BCE + smooth-L1 (beta 1/9)
  summed over positives / number sampled, BoxCoder (1,1,1,1).
* RoI heads: proposals + ground truth, IoU 0.5/0.5, 512 samples a quarter positive, MultiScaleRoIAlign 7x7
  sampling ratio 2 on P2..P5 (exact, see :mod:`kit.workloads.frcnn_keras_ops`), TwoMLPHead 12544 -> 1024 ->
  1024, predictor 21 + 84 (PyTorch Linear's default init: kaiming-uniform a=sqrt(5) and bias U(+-1/sqrt(in)));
  cross-entropy + smooth-L1 (beta 1/9) of the true class's deltas summed / number sampled, BoxCoder
  (10,10,5,5); detection: softmax, score > 0.05, boxes >= 0.01, NMS 0.5 per class, 100 per image.
* one step minimises the sum of the four losses (torchvision's reference loop sums ``loss_dict``).

Layout: NHWC, so the RoI features reach fc6 flattened as (7, 7, 256), not PyTorch's (256, 7, 7): a fixed
permutation of fc6's input rows, the same function class and parameter count
(:mod:`kit.workloads.frcnn_keras_weights` maps torchvision's weights across). Each call of
:meth:`FasterRCNN.train_batch` / :meth:`FasterRCNN.detect` runs one ``tf.function`` whose signature leaves
image height/width and the number of boxes open, so it traces once per batch size (and optimizer), never per
image size or padded shape (tracing the training step costs 8-20 s of one CPU core, once). Randomness
(sampling) comes from a ``tf.random.Generator`` seeded by ``seed``, as do the initial weights.

Measured against torchvision (tests/test_frcnn_keras.py): with torchvision's weights loaded, FPN features and
RPN outputs agree to 5e-6 (relative), proposals and detections to 0.1 px; with every labelled anchor/proposal
sampled, one step's losses and gradients agree within torchvision's own float32-vs-float64 error. What
remains different: the sampler's random draws (TensorFlow's generator), NMS order among exactly equal scores,
NMS decisions at an IoU within rounding of the threshold (one proposal in ~1100 in the test), BatchNorm's
running-variance update (biased, see :mod:`kit.workloads.frcnn_keras_resnet`), and the resize's source
coordinates (1.4e-5 of a unit std).
"""

from __future__ import annotations

import math
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from kit.workloads import frcnn_keras_ops as ops
from kit.workloads.common import WorkloadError
from kit.workloads.frcnn_keras_resnet import FPN_CHANNELS, Backbone

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
ANCHOR_SIZES = (32, 64, 128, 256, 512)
ASPECT_RATIOS = (0.5, 1.0, 2.0)
MAX_SIDE_PX = 20_000  # refuse larger inputs: a crafted image must not exhaust memory in the resize
MAX_BOXES = 1_000
RPN_W = (1.0, 1.0, 1.0, 1.0)
ROI_W = (10.0, 10.0, 5.0, 5.0)
BETA = 1.0 / 9


def _torch_linear(units: int, fan_in: int, seed: keras.random.SeedGenerator, name: str) -> keras.layers.Dense:
    bound = 1.0 / math.sqrt(fan_in)
    return keras.layers.Dense(units, name=name,
                              kernel_initializer=keras.initializers.VarianceScaling(1.0 / 3, "fan_in", "uniform",
                                                                                    seed=seed),
                              bias_initializer=keras.initializers.RandomUniform(-bound, bound, seed=seed))


class RPNHead(keras.layers.Layer):
    def __init__(self, num_anchors: int, seed: keras.random.SeedGenerator, **kw: Any) -> None:
        super().__init__(**kw)

        def conv(filters: int, k: int, name: str) -> keras.layers.Conv2D:
            return keras.layers.Conv2D(filters, k, padding="same", name=name, bias_initializer="zeros",
                                       kernel_initializer=keras.initializers.RandomNormal(0.0, 0.01, seed=seed))

        self.conv = conv(FPN_CHANNELS, 3, "conv")
        self.cls_logits = conv(num_anchors, 1, "cls_logits")
        self.bbox_pred = conv(num_anchors * 4, 1, "bbox_pred")

    def call(self, feats: list[tf.Tensor]) -> tuple[list[tf.Tensor], list[tf.Tensor]]:
        hidden = [tf.nn.relu(self.conv(f)) for f in feats]
        return [self.cls_logits(t) for t in hidden], [self.bbox_pred(t) for t in hidden]


class TwoMLPHead(keras.layers.Layer):
    def __init__(self, seed: keras.random.SeedGenerator, **kw: Any) -> None:
        super().__init__(**kw)
        self.fc6 = _torch_linear(1024, FPN_CHANNELS * 49, seed, "fc6")
        self.fc7 = _torch_linear(1024, 1024, seed, "fc7")

    def call(self, x: tf.Tensor) -> tf.Tensor:
        x = tf.reshape(x, [tf.shape(x)[0], FPN_CHANNELS * 49])
        return tf.nn.relu(self.fc7(tf.nn.relu(self.fc6(x))))


class FastRCNNPredictor(keras.layers.Layer):
    def __init__(self, num_classes: int, seed: keras.random.SeedGenerator, **kw: Any) -> None:
        super().__init__(**kw)
        self.cls_score = _torch_linear(num_classes, 1024, seed, "cls_score")
        self.bbox_pred = _torch_linear(num_classes * 4, 1024, seed, "bbox_pred")

    def call(self, x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return self.cls_score(x), self.bbox_pred(x)


class _Unsaved:
    """Holds objects Keras must not track as weights (the sampler's generator, the compiled steps)."""

    def __init__(self, seed: int) -> None:
        self.rng = tf.random.Generator.from_seed(seed)
        self.steps: dict[tuple[str, int, int], Any] = {}


class FasterRCNN(keras.Model):
    def __init__(self, num_classes: int, min_size: int, max_size: int, seed: int) -> None:
        super().__init__(name="fasterrcnn_resnet50_fpn")
        gen = keras.random.SeedGenerator(seed)
        self.num_classes, self.min_size, self.max_size = num_classes, min_size, max_size
        self.backbone = Backbone(gen, name="backbone")
        self.rpn_head = RPNHead(len(ASPECT_RATIOS), gen, name="rpn_head")
        self.box_head = TwoMLPHead(gen, name="box_head")
        self.box_predictor = FastRCNNPredictor(num_classes, gen, name="box_predictor")
        self.cell = [ops.cell_anchors(s, ASPECT_RATIOS) for s in ANCHOR_SIZES]
        self._unsaved = _Unsaved(seed)
        # torchvision's sample sizes; read when a step is traced (a test raises both so that every labelled
        # anchor/proposal is taken and the losses no longer depend on the random draw)
        self.rpn_batch_per_image, self.box_batch_per_image = 256, 512

    def call(self, images: tf.Tensor, training: bool = False) -> list[tf.Tensor]:
        """The FPN features P2..P6 of a normalised, padded NHWC batch."""
        return self.backbone(images, training=training)

    def build_all(self) -> None:
        """Create every weight (one forward pass on zeros), so that the parameters can be counted at once."""
        feats = self.backbone(tf.zeros([1, 64, 64, 3]))
        self.rpn_head(feats)
        self.box_predictor(self.box_head(tf.zeros([1, 7, 7, FPN_CHANNELS])))
        self.built = True

    # ---- inputs -------------------------------------------------------------------------------------------
    def _prepare(self, images: list[np.ndarray], boxes: list[np.ndarray] | None = None
                 ) -> tuple[tf.Tensor, tf.Tensor, list[tuple[int, int]], tf.Tensor | None]:
        """Normalise, resize and pad a batch; returns (batch, resized sizes, original sizes, scaled boxes)."""
        if not images:
            raise WorkloadError("Faster R-CNN: an empty batch of images")
        resized, sizes, originals, scaled = [], [], [], []
        for i, img in enumerate(images):
            a = np.asarray(img)
            if a.ndim != 3 or a.shape[2] != 3 or not (0 < a.shape[0] <= MAX_SIDE_PX and 0 < a.shape[1] <= MAX_SIDE_PX):
                raise WorkloadError(f"Faster R-CNN: image {i} has shape {a.shape}; expected HxWx3 with sides in "
                                    f"1..{MAX_SIDE_PX} (decode the image to float32 RGB in [0, 1])")
            if a.dtype.kind != "f" or not np.isfinite(a).all():
                raise WorkloadError(f"Faster R-CNN: image {i} is {a.dtype} or holds NaN/inf; expected finite "
                                    "float32 in [0, 1]")
            h, w = a.shape[:2]
            scale = min(self.min_size / min(h, w), self.max_size / max(h, w))
            nh, nw = math.floor(h * scale), math.floor(w * scale)
            x = (a.astype(np.float32) - MEAN) / STD
            resized.append(tf.image.resize(x, [nh, nw], method="bilinear"))
            sizes.append((nh, nw))
            originals.append((h, w))
            if boxes is not None:
                scaled.append(np.asarray(boxes[i], np.float32) * np.array([nw / w, nh / h, nw / w, nh / h], np.float32))
        ph = int(math.ceil(max(s[0] for s in sizes) / 32) * 32)
        pw = int(math.ceil(max(s[1] for s in sizes) / 32) * 32)
        batch = tf.stack([tf.pad(r, [[0, ph - s[0]], [0, pw - s[1]], [0, 0]]) for r, s in zip(resized, sizes, strict=True)])
        gt = None
        if boxes is not None:
            g = max(len(b) for b in scaled)
            gt = tf.constant(np.stack([np.pad(b.reshape(-1, 4), [[0, g - len(b)], [0, 0]]) for b in scaled]))
        return batch, tf.constant(sizes, tf.int32), originals, gt

    def _check_targets(self, n: int, boxes: list[np.ndarray], labels: list[np.ndarray]) -> None:
        if len(boxes) != n or len(labels) != n:
            raise WorkloadError(f"Faster R-CNN: {n} images but {len(boxes)} box arrays and {len(labels)} label arrays")
        for i, (b, lab) in enumerate(zip(boxes, labels, strict=True)):
            b, lab = np.asarray(b), np.asarray(lab)
            if b.ndim != 2 or b.shape[1] != 4 or lab.shape != (b.shape[0],) or b.shape[0] > MAX_BOXES:
                raise WorkloadError(f"Faster R-CNN: image {i}: boxes {b.shape} and labels {lab.shape}; expected (N, 4) "
                                    f"and (N,), N <= {MAX_BOXES}")
            if b.shape[0] and (not np.isfinite(b).all() or (b[:, 2] <= b[:, 0]).any() or (b[:, 3] <= b[:, 1]).any()):
                raise WorkloadError(f"Faster R-CNN: image {i} has a box that is not finite or has no positive "
                                    "width and height (x1 < x2, y1 < y2 in pixels); torchvision refuses these too")
            if lab.dtype.kind not in "iu" or (lab.shape[0] and (lab.min() < 1 or lab.max() >= self.num_classes)):
                raise WorkloadError(f"Faster R-CNN: image {i}: labels must be integers in 1..{self.num_classes - 1} "
                                    "(0 is the background)")

    # ---- the graph ----------------------------------------------------------------------------------------
    def _rpn(self, feats: list[tf.Tensor], image_shape: tf.Tensor
             ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, list[tf.Tensor]]:
        """Objectness (B, A), deltas (B, A, 4), anchors (A, 4), anchors per level (A_l scalars)."""
        logits, deltas = self.rpn_head(feats)
        b = tf.shape(feats[0])[0]
        anchors, counts = [], []
        for f, base in zip(feats, self.cell, strict=True):
            anchors.append(ops.grid_anchors(base, tf.shape(f)[1], tf.shape(f)[2], image_shape[0], image_shape[1]))
            counts.append(tf.shape(anchors[-1])[0])
        obj = tf.concat([tf.reshape(t, [b, -1]) for t in logits], axis=1)
        dl = tf.concat([tf.reshape(t, [b, -1, 4]) for t in deltas], axis=1)
        return obj, dl, tf.concat(anchors, axis=0), counts

    def _proposals(self, obj: tf.Tensor, deltas: tf.Tensor, anchors: tf.Tensor, counts: list[tf.Tensor],
                   sizes: tf.Tensor, n_images: int, pre_nms: int, post_nms: int) -> list[tf.Tensor]:
        """RegionProposalNetwork.filter_proposals, per image; no gradient flows through proposals."""
        obj, deltas = tf.stop_gradient(obj), tf.stop_gradient(deltas)
        top, lvl, start = [], [], 0
        for i, n in enumerate(counts):
            k = tf.minimum(pre_nms, n)
            top.append(tf.math.top_k(obj[:, start:start + n], k=k).indices + start)
            lvl.append(tf.fill([k], i))
            start = start + n
        idx, levels = tf.concat(top, axis=1), tf.concat(lvl, axis=0)
        out = []
        for j in range(n_images):
            boxes = ops.decode(tf.gather(deltas[j], idx[j]), tf.gather(anchors, idx[j]), RPN_W)[:, 0]
            scores = tf.sigmoid(tf.gather(obj[j], idx[j]))
            boxes = ops.clip_boxes(boxes, sizes[j, 0], sizes[j, 1])
            keep = tf.where(ops.not_small(boxes, 1e-3) & (scores >= 0.0))[:, 0]
            boxes, scores, lv = tf.gather(boxes, keep), tf.gather(scores, keep), tf.gather(levels, keep)
            out.append(tf.gather(boxes, ops.batched_nms(boxes, scores, lv, 0.7, post_nms)))
        return out

    def _train_graph(self, images: tf.Tensor, sizes: tf.Tensor, gt: tf.Tensor, counts: tf.Tensor,
                     gt_labels: tf.Tensor, optimizer: Any) -> dict[str, tf.Tensor]:
        n_images = images.shape[0]
        rng = self._unsaved.rng
        with tf.GradientTape() as tape:
            feats = self.backbone(images, training=True)
            obj, deltas, anchors, per_level = self._rpn(feats, tf.shape(images)[1:3])
            props = self._proposals(obj, deltas, anchors, per_level, sizes, n_images, 2000, 2000)
            o_logit, o_label, r_pred, r_tgt, n_rpn = [], [], [], [], 0
            rois, roi_img, c_label, b_pred_idx, b_tgt = [], [], [], [], []
            for j in range(n_images):
                g = gt[j, :counts[j]]
                lab = gt_labels[j, :counts[j]]
                m = ops.match(ops.box_iou(g, anchors), 0.7, 0.3, allow_low_quality=True)
                a_lab = tf.where(m >= 0, 1, tf.where(tf.equal(m, ops.BETWEEN_THRESHOLDS), -1, 0))
                pos, neg = ops.sample(a_lab, self.rpn_batch_per_image, 0.5, rng)
                both = tf.concat([pos, neg], axis=0)
                o_logit.append(tf.gather(obj[j], both))
                o_label.append(tf.cast(tf.gather(a_lab, both), tf.float32))
                r_pred.append(tf.gather(deltas[j], pos))
                r_tgt.append(ops.encode(tf.gather(g, tf.gather(m, pos)), tf.gather(anchors, pos), RPN_W))
                # RoI heads: proposals plus the ground truth, matched without low-quality matches
                p = tf.concat([props[j], g], axis=0)
                m = ops.match(ops.box_iou(g, p), 0.5, 0.5, allow_low_quality=False)
                safe = tf.where(m >= 0, m, counts[j])  # -1/-2 point at a sentinel background label
                c = tf.gather(tf.concat([lab, [0]], axis=0), safe)
                c = tf.where(tf.equal(m, ops.BETWEEN_THRESHOLDS), -1, c)
                pos, neg = ops.sample(c, self.box_batch_per_image, 0.25, rng)
                both = tf.concat([pos, neg], axis=0)
                rois.append(tf.gather(p, both))
                roi_img.append(tf.fill([tf.size(both)], j))
                c_label.append(tf.gather(c, both))
                b_pred_idx.append(tf.range(tf.size(pos)))  # positives come first within this image's samples
                b_tgt.append(ops.encode(tf.gather(g, tf.gather(m, pos)), tf.gather(p, pos), ROI_W))
            n_rpn = tf.cast(tf.add_n([tf.size(t) for t in o_logit]), tf.float32)
            o_logit_all, o_label_all = tf.concat(o_logit, 0), tf.concat(o_label, 0)
            loss_obj = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=o_label_all, logits=o_logit_all))
            loss_rpn_box = ops.smooth_l1_sum(tf.concat(r_pred, 0), tf.concat(r_tgt, 0), BETA) / n_rpn
            # positions of each image's positives in the concatenated RoI batch
            offsets = tf.math.cumsum([tf.size(t) for t in c_label], exclusive=True)
            pos_rows = tf.concat([t + offsets[k] for k, t in enumerate(b_pred_idx)], 0)
            labels_all = tf.concat(c_label, 0)
            pooled = ops.multiscale_roi_align(feats[:4], tf.concat(rois, 0), tf.concat(roi_img, 0),
                                              tf.reduce_max(sizes[:, 0]))
            cls_logits, box_reg = self.box_predictor(self.box_head(pooled))
            loss_cls = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels_all,
                                                                                     logits=cls_logits))
            box_reg = tf.reshape(box_reg, [tf.shape(box_reg)[0], -1, 4])
            pick = tf.stack([pos_rows, tf.gather(labels_all, pos_rows)], axis=1)
            loss_box = ops.smooth_l1_sum(tf.gather_nd(box_reg, pick), tf.concat(b_tgt, 0), BETA) / tf.cast(
                tf.size(labels_all), tf.float32)
            total = loss_cls + loss_box + loss_obj + loss_rpn_box
        variables = self.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(total, variables), variables, strict=True))
        return {"loss_classifier": loss_cls, "loss_box_reg": loss_box, "loss_objectness": loss_obj,
                "loss_rpn_box_reg": loss_rpn_box}

    def _detect_graph(self, images: tf.Tensor, sizes: tf.Tensor) -> list[tuple[tf.Tensor, tf.Tensor, tf.Tensor]]:
        n_images = images.shape[0]
        feats = self.backbone(images, training=False)
        obj, deltas, anchors, per_level = self._rpn(feats, tf.shape(images)[1:3])
        props = self._proposals(obj, deltas, anchors, per_level, sizes, n_images, 1000, 1000)
        img = tf.concat([tf.fill([tf.shape(p)[0]], j) for j, p in enumerate(props)], 0)
        pooled = ops.multiscale_roi_align(feats[:4], tf.concat(props, 0), img, tf.reduce_max(sizes[:, 0]))
        cls_logits, box_reg = self.box_predictor(self.box_head(pooled))
        out, start = [], 0
        for j, p in enumerate(props):
            n = tf.shape(p)[0]
            boxes = ops.decode(box_reg[start:start + n], p, ROI_W)
            scores = tf.nn.softmax(cls_logits[start:start + n], axis=-1)
            start = start + n
            boxes = tf.reshape(ops.clip_boxes(boxes, sizes[j, 0], sizes[j, 1])[:, 1:], [-1, 4])
            labels = tf.reshape(tf.tile(tf.range(1, self.num_classes)[None], [n, 1]), [-1])
            scores = tf.reshape(scores[:, 1:], [-1])
            keep = tf.where((scores > 0.05) & ops.not_small(boxes, 1e-2))[:, 0]
            boxes, scores, labels = tf.gather(boxes, keep), tf.gather(scores, keep), tf.gather(labels, keep)
            keep = ops.batched_nms(boxes, scores, labels, 0.5, 100)
            out.append((tf.gather(boxes, keep), tf.gather(scores, keep), tf.gather(labels, keep)))
        return out

    # ---- the API ------------------------------------------------------------------------------------------
    def _step(self, kind: str, n: int, optimizer: Any = None) -> Any:
        key = (kind, n, id(optimizer))
        if key not in self._unsaved.steps:
            img = tf.TensorSpec([n, None, None, 3], tf.float32)
            hw = tf.TensorSpec([n, 2], tf.int32)
            if kind == "train":
                def train(images: tf.Tensor, sizes: tf.Tensor, gt: tf.Tensor, counts: tf.Tensor,
                          labels: tf.Tensor) -> dict[str, tf.Tensor]:
                    return self._train_graph(images, sizes, gt, counts, labels, optimizer)
                self._unsaved.steps[key] = tf.function(train, autograph=False, input_signature=[
                    img, hw, tf.TensorSpec([n, None, 4], tf.float32), tf.TensorSpec([n], tf.int32),
                    tf.TensorSpec([n, None], tf.int32)])
            else:
                self._unsaved.steps[key] = tf.function(self._detect_graph, autograph=False,
                                                         input_signature=[img, hw])
        return self._unsaved.steps[key]

    def train_batch(self, images: list[np.ndarray], boxes: list[np.ndarray], labels: list[np.ndarray],
                    optimizer: Any) -> dict[str, float]:
        """One optimizer step on the sum of the four losses; returns each loss as a float."""
        self._check_targets(len(images), boxes, labels)
        batch, sizes, _, gt = self._prepare(images, boxes)
        assert gt is not None
        counts = tf.constant([len(b) for b in boxes], tf.int32)
        g = int(gt.shape[1])
        lab = tf.constant(np.stack([np.pad(np.asarray(x, np.int64).reshape(-1), [0, g - len(x)]) for x in labels])
                          .astype(np.int32).reshape(len(images), g))
        if not optimizer.built:
            optimizer.build(self.trainable_variables)
        out = self._step("train", len(images), optimizer)(batch, sizes, gt, counts, lab)
        return {k: float(v) for k, v in out.items()}

    def detect(self, images: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Boxes (K, 4) in the original image's pixels, scores (K,), labels (K,) per image."""
        batch, sizes, originals, _ = self._prepare(images)
        res = []
        for (b, s, lab), (h, w), (nh, nw) in zip(self._step("detect", len(images))(batch, sizes), originals,
                                                   sizes.numpy().tolist(), strict=True):
            ratio = np.array([w / nw, h / nh, w / nw, h / nh], np.float32)
            res.append((b.numpy() * ratio, s.numpy(), lab.numpy().astype(np.int64)))
        return res


def build(num_classes: int = 21, min_size: int = 800, max_size: int = 1333, seed: int = 0) -> FasterRCNN:
    """torchvision's fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes), built."""
    if num_classes < 2 or min_size < 1 or max_size < min_size:
        raise WorkloadError(f"Faster R-CNN: num_classes={num_classes} (>= 2), min_size={min_size} (>= 1), "
                            f"max_size={max_size} (>= min_size) do not make a detector")
    model = FasterRCNN(num_classes, min_size, max_size, seed)
    model.build_all()
    return model


def param_count(model: keras.Model) -> int:
    """Trainable parameters (BatchNorm's gamma/beta count, its moving statistics do not, as in PyTorch)."""
    return int(sum(int(np.prod(v.shape)) for v in model.trainable_variables))
