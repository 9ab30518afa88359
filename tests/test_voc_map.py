"""VOC mAP@0.5 (kit.workloads.voc_map) against cases computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from kit.workloads.voc_map import average_precision, iou, mean_ap


def B(*rows: tuple[float, float, float, float]) -> np.ndarray:
    return np.asarray(rows, np.float64).reshape(-1, 4)


def truth(boxes: np.ndarray, labels: list[int], difficult: list[bool] | None = None) -> tuple:
    return boxes, np.asarray(labels), np.asarray(difficult or [False] * len(labels))


def dets(boxes: np.ndarray, scores: list[float], labels: list[int]) -> tuple:
    return boxes, np.asarray(scores), np.asarray(labels)


A, C = (0, 0, 10, 10), (20, 20, 30, 30)


def test_iou_continuous_corners() -> None:
    assert iou(np.array([0, 0, 10, 10.]), B((5, 0, 15, 10)))[0] == pytest.approx(50 / 150)
    assert iou(np.array([0, 0, 10, 10.]), B((10, 10, 20, 20)))[0] == 0.0  # touching corners share no area


def test_perfect_detections_give_one() -> None:
    t = [truth(B(A, C), [1, 2]), truth(B(A), [2])]
    d = [dets(B(A, C), [0.9, 0.8], [1, 2]), dets(B(A), [0.7], [2])]
    r = mean_ap(d, t)
    assert r.map == 1.0 and r.per_class == {1: 1.0, 2: 1.0}


def test_false_positive_ranked_first() -> None:
    # class 1, two objects; detections by score: FP, TP, TP -> precision 0, 1/2, 2/3 at recall 0, 1/2, 1
    # all-point AP: envelope 2/3 over recall 0..1 -> 2/3
    t = [truth(B(A, C), [1, 1])]
    d = [dets(B((50, 50, 60, 60), A, C), [0.9, 0.8, 0.7], [1, 1, 1])]
    assert mean_ap(d, t).map == pytest.approx(2 / 3)


def test_duplicate_detection_is_a_false_positive() -> None:
    # TP (recall 1/2, prec 1), duplicate of the same box (FP: prec 1/2), TP (recall 1, prec 2/3)
    # AP = 1/2 * 1 + 1/2 * 2/3 = 5/6
    t = [truth(B(A, C), [1, 1])]
    d = [dets(B(A, (0, 0, 10, 9), C), [0.9, 0.8, 0.7], [1, 1, 1])]
    assert mean_ap(d, t).map == pytest.approx(5 / 6)


def test_difficult_objects_neither_count_nor_penalise() -> None:
    # a difficult object detected (ignored), one missed difficult (not a positive): AP of the easy one only
    t = [truth(B(A, C, (40, 40, 50, 50)), [1, 1, 1], [False, True, True])]
    d = [dets(B(C, A), [0.9, 0.8], [1, 1])]
    assert mean_ap(d, t).map == 1.0
    # a class whose only objects are difficult is not "present": it does not enter the mean
    t2 = [truth(B(A, C), [1, 2], [False, True])]
    d2 = [dets(B(A), [0.9], [1])]
    r = mean_ap(d2, t2)
    assert r.per_class == {1: 1.0} and r.map == 1.0


def test_iou_threshold_wrong_class_and_missing_class() -> None:
    # IoU exactly 0.5 counts (devkit: ovmax >= 0.5); just under does not
    t = [truth(B((0, 0, 10, 10)), [3])]
    half = (0, 0, 10, 5)  # IoU 50/100
    assert mean_ap([dets(B(half), [1.0], [3])], t).map == 1.0
    assert mean_ap([dets(B((0, 0, 10, 4.9)), [1.0], [3])], t).map == 0.0
    # a correct box of the wrong class helps nothing; a present class never detected has AP 0
    t = [truth(B(A, C), [1, 2])]
    r = mean_ap([dets(B(A), [0.9], [2])], t)
    assert r.per_class == {1: 0.0, 2: 0.0} and r.map == 0.0


def test_all_point_interpolation_not_eleven_point() -> None:
    # precision 1 at recall 0.25 then 0.5 at recall 1: all-point = 0.25 * 1 + 0.75 * 0.5 = 0.625
    # (VOC2007's 11-point rule would give (3 * 1 + 8 * 0.5) / 11 = 0.636...)
    rec = np.array([0.25, 0.25, 0.5, 0.75, 1.0])
    prec = np.array([1.0, 0.5, 0.5, 0.5, 0.5])
    assert average_precision(rec, prec) == pytest.approx(0.625)


def test_undefined_map_and_length_mismatch_raise() -> None:
    with pytest.raises(ValueError, match="undefined"):
        mean_ap([dets(B(A), [0.9], [1])], [truth(B(A), [1], [True])])
    with pytest.raises(ValueError, match="2 detection lists for 1 images"):
        mean_ap([dets(B(), [], []), dets(B(), [], [])], [truth(B(A), [1])])
