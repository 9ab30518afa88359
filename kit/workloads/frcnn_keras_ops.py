"""Faster R-CNN box operations in TensorFlow, rule for rule as torchvision's (runs inside the framework image).

The Keras Faster R-CNN (:mod:`kit.workloads.frcnn_keras`) stands in for torchvision's
``fasterrcnn_resnet50_fpn`` in the DLBench detection workload, so every rule that decides what is trained on
follows torchvision 0.2x (``models/detection/_utils.py``, ``anchor_utils.py``, ``ops/boxes.py``,
``ops/poolers.py``, ``ops/roi_align.py``): the box coder with its ``log(1000/16)`` clamp, the matcher with its
-1 (below the low threshold) / -2 (between thresholds) codes and its low-quality rule (ties included, also
for a ground-truth box that overlaps no anchor at all), the balanced sampler (a uniformly random subset of
positives, then of negatives), the anchor grid with its rounded cell anchors, NMS per level/class through
the coordinate-offset trick, and the FPN level mapper (``floor(4 + log2(sqrt(area)/224) + 1e-6)``).

RoIAlign (``aligned=False``) is exact, not approximated: torchvision samples ``sampling_ratio**2`` points
per bin, evenly spaced at ``(k + 0.5) * bin / sampling_ratio``, bilinearly; a point in ``[-1, 0]`` (or
``[H-1, H]``) is clamped to the edge row and a point beyond ``-1`` or ``H`` reads zero. The sample points of
a RoI form one evenly spaced grid, so ``tf.image.crop_and_resize`` on that grid, over the feature map padded
by one edge-replicated pixel on every side (which turns the clamp into ordinary interpolation and leaves
zero extrapolation exactly beyond ``-1``/``H``), followed by the mean over each ``sampling_ratio**2`` block,
is the same average of the same bilinear samples; it differs from ``torchvision.ops.roi_align`` by float
rounding only (the test bounds it). Only a fixed ``sampling_ratio > 0`` is supported (torchvision's adaptive
``ceil(roi/bin)`` needs per-RoI grids; Faster R-CNN uses 2).

Known differences that remain: ``tf.image.non_max_suppression`` breaks ties between equal scores in its own
order, and the random draws of the sampler come from TensorFlow's generator, not PyTorch's (the same rule,
other numbers).
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from kit.workloads.common import WorkloadError

BELOW_LOW_THRESHOLD = -1
BETWEEN_THRESHOLDS = -2
BBOX_XFORM_CLIP = math.log(1000.0 / 16)


def box_area(boxes: tf.Tensor) -> tf.Tensor:
    return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])


def box_iou(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """IoU of every pair, (len(a), len(b)), as ``torchvision.ops.box_iou`` (x1, y1, x2, y2)."""
    lt = tf.maximum(a[:, None, :2], b[None, :, :2])
    rb = tf.minimum(a[:, None, 2:], b[None, :, 2:])
    wh = tf.maximum(rb - lt, 0.0)
    inter = wh[..., 0] * wh[..., 1]
    union = box_area(a)[:, None] + box_area(b)[None, :] - inter
    return inter / union


def encode(reference: tf.Tensor, proposals: tf.Tensor, weights: tuple[float, float, float, float]) -> tf.Tensor:
    """Regression targets (dx, dy, dw, dh) that move ``proposals`` onto ``reference`` (BoxCoder.encode_single)."""
    wx, wy, ww, wh = weights
    pw = proposals[:, 2] - proposals[:, 0]
    ph = proposals[:, 3] - proposals[:, 1]
    px = proposals[:, 0] + 0.5 * pw
    py = proposals[:, 1] + 0.5 * ph
    gw = reference[:, 2] - reference[:, 0]
    gh = reference[:, 3] - reference[:, 1]
    gx = reference[:, 0] + 0.5 * gw
    gy = reference[:, 1] + 0.5 * gh
    return tf.stack([wx * (gx - px) / pw, wy * (gy - py) / ph, ww * tf.math.log(gw / pw), wh * tf.math.log(gh / ph)],
                    axis=1)


def decode(codes: tf.Tensor, boxes: tf.Tensor, weights: tuple[float, float, float, float]) -> tf.Tensor:
    """Boxes (N, K, 4) from codes (N, K*4) relative to ``boxes`` (N, 4) (BoxCoder.decode_single)."""
    wx, wy, ww, wh = weights
    codes = tf.reshape(codes, [tf.shape(codes)[0], -1, 4])
    widths = (boxes[:, 2] - boxes[:, 0])[:, None]
    heights = (boxes[:, 3] - boxes[:, 1])[:, None]
    ctr_x = boxes[:, 0][:, None] + 0.5 * widths
    ctr_y = boxes[:, 1][:, None] + 0.5 * heights
    dw = tf.minimum(codes[..., 2] / ww, BBOX_XFORM_CLIP)
    dh = tf.minimum(codes[..., 3] / wh, BBOX_XFORM_CLIP)
    cx = codes[..., 0] / wx * widths + ctr_x
    cy = codes[..., 1] / wy * heights + ctr_y
    half_w = 0.5 * tf.exp(dw) * widths
    half_h = 0.5 * tf.exp(dh) * heights
    return tf.stack([cx - half_w, cy - half_h, cx + half_w, cy + half_h], axis=2)


def match(quality: tf.Tensor, high: float, low: float, allow_low_quality: bool) -> tf.Tensor:
    """torchvision's Matcher on a (G, N) quality matrix: per column the best row, -1 below ``low``, -2 between.

    G may be 0 (an image without objects): every column is then -1, which is what torchvision's RPN and RoI
    heads make of such an image (they special-case it before calling the matcher).
    """
    g = tf.shape(quality)[0]
    # a sentinel row of -1 (every IoU is >= 0) keeps max/argmax defined when G == 0 and never wins otherwise
    padded = tf.concat([quality, tf.fill([1, tf.shape(quality)[1]], tf.constant(-1.0, quality.dtype))], axis=0)
    vals = tf.reduce_max(padded, axis=0)
    best = tf.cast(tf.argmax(padded, axis=0, output_type=tf.int32), tf.int32)
    matches = tf.where(vals < low, BELOW_LOW_THRESHOLD, tf.where(vals < high, BETWEEN_THRESHOLDS, best))
    if allow_low_quality:
        # each ground truth's best columns, ties included, take their best row back (set_low_quality_matches_)
        row_best = tf.reduce_max(quality, axis=1, keepdims=True)
        hit = tf.reduce_any(tf.equal(quality, row_best), axis=0)
        matches = tf.where(hit & (g > 0), best, matches)
    return matches


def sample(labels: tf.Tensor, batch_size: int, positive_fraction: float,
           rng: tf.random.Generator) -> tuple[tf.Tensor, tf.Tensor]:
    """BalancedPositiveNegativeSampler: indices of up to ``batch_size * fraction`` random positives (label >= 1)
    and of random negatives (label 0) filling the rest; -1 is ignored."""
    positive = tf.where(labels >= 1)[:, 0]
    negative = tf.where(tf.equal(labels, 0))[:, 0]
    num_pos = tf.minimum(tf.size(positive), int(batch_size * positive_fraction))
    num_neg = tf.minimum(tf.size(negative), batch_size - num_pos)

    def pick(idx: tf.Tensor, n: tf.Tensor) -> tf.Tensor:
        keys = rng.uniform(tf.shape(idx))  # a uniformly random order: the first n of it are a random subset
        return tf.gather(idx, tf.math.top_k(keys, k=n, sorted=False).indices)

    return pick(positive, num_pos), pick(negative, num_neg)


def smooth_l1_sum(pred: tf.Tensor, target: tf.Tensor, beta: float) -> tf.Tensor:
    """``F.smooth_l1_loss(..., beta, reduction='sum')``."""
    d = tf.abs(pred - target)
    return tf.reduce_sum(tf.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta))


def clip_boxes(boxes: tf.Tensor, height: tf.Tensor, width: tf.Tensor) -> tf.Tensor:
    """Clamp x to [0, width] and y to [0, height] (boxes (..., 4))."""
    h = tf.cast(height, boxes.dtype)
    w = tf.cast(width, boxes.dtype)
    x1 = tf.clip_by_value(boxes[..., 0], 0.0, w)
    y1 = tf.clip_by_value(boxes[..., 1], 0.0, h)
    x2 = tf.clip_by_value(boxes[..., 2], 0.0, w)
    y2 = tf.clip_by_value(boxes[..., 3], 0.0, h)
    return tf.stack([x1, y1, x2, y2], axis=-1)


def not_small(boxes: tf.Tensor, min_size: float) -> tf.Tensor:
    return ((boxes[:, 2] - boxes[:, 0]) >= min_size) & ((boxes[:, 3] - boxes[:, 1]) >= min_size)


def batched_nms(boxes: tf.Tensor, scores: tf.Tensor, groups: tf.Tensor, iou_threshold: float,
                max_out: int) -> tf.Tensor:
    """Indices kept by NMS within each group, best score first, at most ``max_out`` (torchvision's offset trick:
    boxes of different groups are moved apart so that they never overlap)."""
    top = tf.reduce_max(tf.concat([tf.reshape(boxes, [-1]), [0.0]], axis=0))  # defined when there are no boxes
    offset = (top + 1.0) * tf.cast(groups, boxes.dtype)
    return tf.image.non_max_suppression(boxes + offset[:, None], scores, max_out, iou_threshold=iou_threshold)


def cell_anchors(size: int, ratios: tuple[float, ...]) -> np.ndarray:
    """Zero-centred anchors (A, 4) of one size, one per aspect ratio h/w, rounded (float32 as torchvision)."""
    r = np.asarray(ratios, np.float32)
    h_ratio = np.sqrt(r)
    w_ratio = np.float32(1.0) / h_ratio
    ws = w_ratio * np.float32(size)
    hs = h_ratio * np.float32(size)
    return np.round(np.stack([-ws, -hs, ws, hs], axis=1) / np.float32(2.0)).astype(np.float32)


def grid_anchors(base: np.ndarray, grid_h: tf.Tensor, grid_w: tf.Tensor, image_h: tf.Tensor,
                 image_w: tf.Tensor) -> tf.Tensor:
    """Anchors (H*W*A, 4) of one level, position-major as torchvision's (and as NHWC flattening)."""
    stride_y = image_h // grid_h
    stride_x = image_w // grid_w
    sy = tf.cast(tf.range(grid_h) * stride_y, tf.float32)
    sx = tf.cast(tf.range(grid_w) * stride_x, tf.float32)
    yy, xx = tf.meshgrid(sy, sx, indexing="ij")
    xx = tf.reshape(xx, [-1])
    yy = tf.reshape(yy, [-1])
    shifts = tf.stack([xx, yy, xx, yy], axis=1)
    return tf.reshape(shifts[:, None, :] + tf.constant(base)[None, :, :], [-1, 4])


def roi_align(features: tf.Tensor, boxes: tf.Tensor, batch_idx: tf.Tensor, spatial_scale: tf.Tensor,
              output_size: int, sampling_ratio: int) -> tf.Tensor:
    """``torchvision.ops.roi_align(aligned=False)`` on NHWC features: (R, out, out, C). See the module docstring."""
    if sampling_ratio <= 0:
        raise WorkloadError("roi_align: only a fixed sampling_ratio > 0 is implemented (Faster R-CNN uses 2)")
    n = output_size * sampling_ratio
    scale = tf.cast(spatial_scale, boxes.dtype)
    x0 = boxes[:, 0] * scale
    y0 = boxes[:, 1] * scale
    roi_w = tf.maximum(boxes[:, 2] * scale - x0, 1.0)
    roi_h = tf.maximum(boxes[:, 3] * scale - y0, 1.0)
    step_x = roi_w / n
    step_y = roi_h / n
    padded = tf.pad(features, [[0, 0], [1, 1], [1, 1], [0, 0]], mode="SYMMETRIC")
    hp = tf.cast(tf.shape(padded)[1] - 1, boxes.dtype)
    wp = tf.cast(tf.shape(padded)[2] - 1, boxes.dtype)
    # first and last sample point, in the padded map's pixels (+1), normalised as crop_and_resize wants
    norm = tf.stack([(y0 + 0.5 * step_y + 1.0) / hp, (x0 + 0.5 * step_x + 1.0) / wp,
                     (y0 + (n - 0.5) * step_y + 1.0) / hp, (x0 + (n - 0.5) * step_x + 1.0) / wp], axis=1)
    crops = tf.image.crop_and_resize(padded, norm, tf.cast(batch_idx, tf.int32), [n, n], method="bilinear",
                                     extrapolation_value=0.0)
    c = tf.shape(features)[3]
    crops = tf.reshape(crops, [-1, output_size, sampling_ratio, output_size, sampling_ratio, c])
    return tf.reduce_mean(crops, axis=[2, 4])


def multiscale_roi_align(features: list[tf.Tensor], boxes: tf.Tensor, batch_idx: tf.Tensor,
                         max_image_h: tf.Tensor, output_size: int = 7, sampling_ratio: int = 2) -> tf.Tensor:
    """MultiScaleRoIAlign over P2..P5: each RoI pooled from the level the FPN heuristic picks.

    The scale of a level is ``2**round(log2(feature_h / max_image_h))`` (torchvision infers it from the
    height of the unpadded images), and the level range is what those scales say.
    """
    def level_scale(f: tf.Tensor) -> tf.Tensor:
        ratio = tf.cast(tf.shape(f)[1], tf.float32) / tf.cast(max_image_h, tf.float32)
        return tf.pow(2.0, tf.round(tf.math.log(ratio) / math.log(2.0)))

    scales = [level_scale(f) for f in features]
    k_min = tf.cast(-tf.math.log(scales[0]) / math.log(2.0), tf.int32)  # int() of torchvision truncates too
    k_max = tf.cast(-tf.math.log(scales[-1]) / math.log(2.0), tf.int32)
    s = tf.sqrt(box_area(boxes))
    lvl = tf.floor(4.0 + tf.math.log(s / 224.0) / math.log(2.0) + 1e-6)
    lvl = tf.clip_by_value(tf.cast(lvl, tf.int32), k_min, k_max) - k_min
    parts, where = [], []
    for i, (f, sc) in enumerate(zip(features, scales, strict=True)):
        idx = tf.cast(tf.where(tf.equal(lvl, i))[:, 0], tf.int32)
        where.append(idx)
        parts.append(roi_align(f, tf.gather(boxes, idx), tf.gather(batch_idx, idx), sc, output_size, sampling_ratio))
    return tf.dynamic_stitch(where, parts)
