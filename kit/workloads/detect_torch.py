"""DLBench's Faster R-CNN (ResNet-50 FPN) on VOC2012 in PyTorch: torchvision's model, the shared protocol.

``torchvision.models.detection.fasterrcnn_resnet50_fpn`` with 21 classes (20 + background), no pretrained
weights (none can be pinned and fetched here: trained from scratch, which torchvision then builds with
ordinary BatchNorm and every backbone stage trainable), resized by its own GeneralizedRCNNTransform to
``detect_min_size`` / ``detect_max_size``. Adam with the trial's learning rate and weight decay, the decay
decoupled (``decoupled_weight_decay=True``, AdamW's rule), which is what Keras 3's Adam does with
``weight_decay``, so both arms optimise the same objective. The loop, data order and mAP are
:mod:`kit.workloads.detect`'s. JPEGs are decoded by torchvision.io (libjpeg-turbo), before any timed phase.
Runs inside the framework image, which must carry torchvision.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import torch

from kit.workloads import detect
from kit.workloads.common import Markers, WorkloadError
from kit.workloads.torch_env import device_sync, is_oom, setup, torch_env
from kit.workloads.voc_map import Detections

__all__ = ["build", "decode_jpeg", "is_oom", "run"]


def _torchvision() -> Any:
    try:
        import torchvision
    except ImportError as exc:
        raise WorkloadError("torchvision is not installed in this PyTorch environment, and Faster R-CNN is "
                            "torchvision's model | fix: add torchvision (the release matching this torch) to the "
                            "image's requirements in images/matrix.toml and re-lock it, or run with --backend "
                            "local in an environment that has it") from exc
    return torchvision


def decode_jpeg(data: bytes) -> np.ndarray:
    """JPEG bytes -> (H, W, 3) uint8 with torchvision's decoder (libjpeg-turbo, accurate integer DCT)."""
    tv = _torchvision()
    t = tv.io.decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=tv.io.ImageReadMode.RGB)
    return t.permute(1, 2, 0).contiguous().numpy()


def build(num_classes: int, min_size: int, max_size: int) -> torch.nn.Module:
    """torchvision's Faster R-CNN ResNet-50 FPN, untrained, with PyTorch's own initialisers (seed set before)."""
    tv = _torchvision()
    return tv.models.detection.fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=num_classes,
                                                       min_size=min_size, max_size=max_size)


def param_count(model: torch.nn.Module) -> int:
    """Trainable parameters (as Keras' ``trainable_weights`` count them)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def run(req: dict[str, Any], data_dir: Path, markers: Markers) -> tuple[dict[str, Any], dict[str, Any]]:
    wl, seed = req["workload"], int(req["seed"])
    s = detect.settings(wl)
    if req.get("threads"):
        torch.set_num_threads(int(req["threads"]))
    torch.manual_seed(seed)
    device, tf32 = setup(req)
    markers.sync = lambda: device_sync(device)
    data = detect.load_splits(req, data_dir, decode_jpeg)
    model = build(len(detect.voc.CLASSES) + 1, s.min_size, s.max_size).to(device)
    params = [p for p in model.parameters() if p.requires_grad]

    def make_opt() -> torch.optim.Optimizer:
        return torch.optim.Adam(params, lr=s.learning_rate, weight_decay=s.weight_decay,
                                decoupled_weight_decay=True)

    state: dict[str, torch.optim.Optimizer] = {"opt": make_opt()}

    def to_dev(images: list[np.ndarray]) -> list[torch.Tensor]:
        return [torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1))).to(device) for x in images]

    def train_step(images: list[np.ndarray], boxes: list[np.ndarray], labels: list[np.ndarray]) -> torch.Tensor:
        model.train()
        targets = [{"boxes": torch.from_numpy(b).to(device), "labels": torch.from_numpy(lab).to(device)}
                   for b, lab in zip(boxes, labels, strict=True)]
        opt = state["opt"]
        opt.zero_grad(set_to_none=True)
        losses = model(to_dev(images), targets)
        loss = sum(losses.values())
        assert isinstance(loss, torch.Tensor)
        loss.backward()
        opt.step()
        return loss.detach()

    def read_loss(total: Any) -> float:
        return float(total.cpu()) if isinstance(total, torch.Tensor) else float(total)

    def detect_batch(images: list[np.ndarray]) -> list[Detections]:
        model.eval()
        with torch.inference_mode():
            out = model(to_dev(images))
        return [(o["boxes"].cpu().numpy(), o["scores"].cpu().numpy(), o["labels"].cpu().numpy()) for o in out]

    init = copy.deepcopy(model.state_dict())
    rng_cpu = torch.get_rng_state()

    def reset() -> None:
        # every training pass starts here: the initial weights, this random state (RPN/ROI sampling) and a
        # fresh optimizer
        model.load_state_dict(init)
        torch.set_rng_state(rng_cpu)
        if device.type == "cuda":
            torch.cuda.manual_seed_all(seed)
        state["opt"] = make_opt()

    adapter = detect.Adapter(train_step, read_loss, detect_batch, reset, lambda: device_sync(device),
                             param_count(model))
    results = detect.run_protocol(req, s, data, adapter, markers)
    results["jpeg_decoder"] = f"torchvision {_torchvision().__version__} io.decode_jpeg"
    return results, torch_env(device, tf32, "fp32", conv_dominant=True)
