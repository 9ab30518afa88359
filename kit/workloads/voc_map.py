"""PASCAL VOC mean average precision at IoU 0.5 (numpy only; both frameworks score their detections with it).

The VOC2010+ rule of the official devkit (VOCevaldet.m, VOCap.m): per class, every detection of that class
over the test set in order of decreasing score is a true positive when its best-overlapping ground-truth box
of the class in its image has IoU >= 0.5 and was not matched before (a second match of the same box is a
false positive: duplicates are penalised), a false positive otherwise; a detection whose best match is a
*difficult* object counts as neither; difficult objects do not count towards the positives either. AP is the
area under the precision-recall curve with precision made monotone (all-point interpolation, not VOC2007's
11 points). The mean is over the classes with at least one non-difficult object in the test set.

Boxes are continuous corners (kit.workloads.voc): IoU without the devkit's "+1" on inclusive pixel indices.
Ties in score keep the order of the images, then of the detections within an image (a stable sort), so the
result is a function of the detections alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

IOU_THRESHOLD = 0.5


@dataclass(frozen=True)
class MeanAP:
    """mAP@0.5 and the AP of each class present (label -> AP)."""

    map: float
    per_class: dict[int, float]


def average_precision(recall: np.ndarray, precision: np.ndarray) -> float:
    """All-point interpolated AP (VOC2010+): the area under the monotone precision envelope."""
    mrec = np.concatenate(([0.0], recall, [1.0]))
    mpre = np.concatenate(([0.0], precision, [0.0]))
    mpre = np.maximum.accumulate(mpre[::-1])[::-1]
    i = np.flatnonzero(mrec[1:] != mrec[:-1])
    return float(np.sum((mrec[i + 1] - mrec[i]) * mpre[i + 1]))


def iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """IoU of one box (4,) with each of ``boxes`` (M, 4), continuous x1, y1, x2, y2."""
    iw = np.clip(np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]), 0, None)
    ih = np.clip(np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]), 0, None)
    inter = iw * ih
    union = (box[2] - box[0]) * (box[3] - box[1]) + (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]) - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


Detections = tuple[np.ndarray, np.ndarray, np.ndarray]  # boxes (K, 4), scores (K,), labels (K,)
Truth = tuple[np.ndarray, np.ndarray, np.ndarray]  # boxes (N, 4), labels (N,), difficult (N,)


def _class_ap(c: int, dets: list[Detections], truths: list[Truth]) -> float | None:
    gt = [(b[lab == c], d[lab == c]) for b, lab, d in truths]
    npos = sum(int((~d).sum()) for _, d in gt)
    if npos == 0:
        return None
    img, score, box = [], [], []
    for k, (b, s, lab) in enumerate(dets):
        m = lab == c
        img.append(np.full(int(m.sum()), k))
        score.append(s[m])
        box.append(b[m])
    if not img or sum(len(x) for x in img) == 0:
        return 0.0
    img_a, score_a, box_a = np.concatenate(img), np.concatenate(score), np.concatenate(box).reshape(-1, 4)
    order = np.argsort(-score_a, kind="stable")
    used = [np.zeros(len(g[0]), bool) for g in gt]
    tp = np.zeros(len(order))
    fp = np.zeros(len(order))
    for r, j in enumerate(order):
        gb, gd = gt[img_a[j]]
        if len(gb) == 0:
            fp[r] = 1
            continue
        ov = iou(box_a[j], gb)
        best = int(np.argmax(ov))
        if ov[best] >= IOU_THRESHOLD:
            if gd[best]:
                continue  # matched a difficult object: ignored
            if not used[img_a[j]][best]:
                used[img_a[j]][best] = True
                tp[r] = 1
            else:
                fp[r] = 1  # a duplicate detection of a box already found
        else:
            fp[r] = 1
    ctp, cfp = np.cumsum(tp), np.cumsum(fp)
    recall = ctp / npos
    precision = ctp / np.maximum(ctp + cfp, np.finfo(np.float64).eps)
    return average_precision(recall, precision)


def mean_ap(dets: list[Detections], truths: list[Truth], num_classes: int = 20) -> MeanAP:
    """mAP@0.5 over the classes 1..num_classes present in ``truths`` (one entry per test image, same order).

    Raises ValueError if the lists differ in length or no class has a non-difficult object (mAP undefined).
    """
    if len(dets) != len(truths):
        raise ValueError(f"{len(dets)} detection lists for {len(truths)} images")
    per: dict[int, float] = {}
    for c in range(1, num_classes + 1):
        ap = _class_ap(c, dets, truths)
        if ap is not None:
            per[c] = ap
    if not per:
        raise ValueError("no test image has a non-difficult object: mAP is undefined")
    return MeanAP(float(np.mean(list(per.values()))), per)
