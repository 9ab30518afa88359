"""Load torchvision's fasterrcnn_resnet50_fpn weights into the Keras build (runs inside the framework image).

Two uses: the test that proves the Keras model computes what torchvision's computes, layer for layer (same
weights in, same features, proposals and detections out), and giving both frameworks the very same initial
weights when a comparison wants that rather than each framework's own draw from the same initialisers. The
input is a plain ``{state_dict key: numpy array}`` mapping (e.g. an ``.npz`` written by the PyTorch side, so
TensorFlow never imports torch); every key must be known and every shape right, else WorkloadError: a
partial or mislabelled load would silently train another model.

Layouts: convolution kernels (out, in, kh, kw) -> (kh, kw, in, out); linear (out, in) -> (in, out); fc6's
input rows are permuted from PyTorch's (C, 7, 7) flattening to the NHWC (7, 7, C) one. BatchNorm's running
mean/var become Keras's moving statistics; ``num_batches_tracked`` has no Keras counterpart (it only matters
for momentum=None) and is skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kit.workloads.common import WorkloadError
from kit.workloads.frcnn_keras_resnet import FPN_CHANNELS


def _targets(model: Any) -> dict[str, tuple[Any, str]]:
    """state_dict key -> (Keras variable, how to convert)."""
    out: dict[str, tuple[Any, str]] = {}

    def conv(prefix: str, layer: Any, bias: bool = True) -> None:
        out[f"{prefix}.weight"] = (layer.kernel, "conv")
        if bias:
            out[f"{prefix}.bias"] = (layer.bias, "copy")

    def bn(prefix: str, layer: Any) -> None:
        for name, var in (("weight", layer.gamma), ("bias", layer.beta), ("running_mean", layer.moving_mean),
                          ("running_var", layer.moving_variance)):
            out[f"{prefix}.{name}"] = (var, "copy")
        out[f"{prefix}.num_batches_tracked"] = (None, "skip")

    def linear(prefix: str, layer: Any, kind: str = "linear") -> None:
        out[f"{prefix}.weight"] = (layer.kernel, kind)
        out[f"{prefix}.bias"] = (layer.bias, "copy")

    body = model.backbone.body
    conv("backbone.body.conv1", body.conv1, bias=False)
    bn("backbone.body.bn1", body.bn1)
    for i, stage in enumerate(body.stages):
        for b, block in enumerate(stage):
            p = f"backbone.body.layer{i + 1}.{b}"
            for k in (1, 2, 3):
                conv(f"{p}.conv{k}", getattr(block, f"conv{k}"), bias=False)
                bn(f"{p}.bn{k}", getattr(block, f"bn{k}"))
            if block.down_conv is not None:
                conv(f"{p}.downsample.0", block.down_conv, bias=False)
                bn(f"{p}.downsample.1", block.down_bn)
    fpn = model.backbone.fpn
    for i in range(4):
        conv(f"backbone.fpn.inner_blocks.{i}.0", fpn.inner[i])
        conv(f"backbone.fpn.layer_blocks.{i}.0", fpn.outer[i])
    conv("rpn.head.conv.0.0", model.rpn_head.conv)
    conv("rpn.head.cls_logits", model.rpn_head.cls_logits)
    conv("rpn.head.bbox_pred", model.rpn_head.bbox_pred)
    linear("roi_heads.box_head.fc6", model.box_head.fc6, "fc6")
    linear("roi_heads.box_head.fc7", model.box_head.fc7)
    linear("roi_heads.box_predictor.cls_score", model.box_predictor.cls_score)
    linear("roi_heads.box_predictor.bbox_pred", model.box_predictor.bbox_pred)
    return out


def _convert(a: np.ndarray, kind: str) -> np.ndarray:
    if kind == "conv":
        return a.transpose(2, 3, 1, 0)
    if kind == "linear":
        return a.T
    if kind == "fc6":  # (out, C*7*7) -> rows in (7, 7, C) order
        n_out = a.shape[0]
        return a.reshape(n_out, FPN_CHANNELS, 7, 7).transpose(2, 3, 1, 0).reshape(49 * FPN_CHANNELS, n_out)
    return a


def set_torchvision_weights(model: Any, state: Mapping[str, np.ndarray]) -> int:
    """Assign every tensor of a torchvision state dict; returns the number of values assigned."""
    targets = _targets(model)
    unknown = sorted(set(state) - set(targets))
    missing = sorted(k for k, (_, how) in targets.items() if how != "skip" and k not in state)
    if unknown or missing:
        raise WorkloadError(f"Faster R-CNN weights: {len(unknown)} unknown keys (first {unknown[:3]}) and "
                            f"{len(missing)} missing (first {missing[:3]}); expected the state_dict of "
                            "torchvision's fasterrcnn_resnet50_fpn with the same num_classes")
    pending = []
    for key, (var, how) in targets.items():
        if how == "skip":
            continue
        a = np.asarray(state[key])
        if a.dtype.kind != "f":
            raise WorkloadError(f"Faster R-CNN weights: {key} is {a.dtype}, expected floating point")
        if a.ndim != (2 if how in ("linear", "fc6") else 4 if how == "conv" else 1):
            raise WorkloadError(f"Faster R-CNN weights: {key} has shape {a.shape}, not PyTorch's layout")
        if how == "fc6" and a.shape[1] != FPN_CHANNELS * 49:
            raise WorkloadError(f"Faster R-CNN weights: {key} has shape {a.shape}, expected (*, {FPN_CHANNELS * 49})")
        value = _convert(a, how).astype(np.float32)
        if tuple(value.shape) != tuple(var.shape):
            raise WorkloadError(f"Faster R-CNN weights: {key} has shape {a.shape}, the Keras variable "
                                f"{tuple(var.shape)} (after the layout change)")
        if not np.isfinite(value).all():
            raise WorkloadError(f"Faster R-CNN weights: {key} holds NaN or inf")
        pending.append((var, value))
    for var, value in pending:  # all checked first: a refused load changes nothing
        var.assign(value)
    return int(sum(v.size for _, v in pending))
