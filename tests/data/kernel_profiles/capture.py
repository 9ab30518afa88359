"""Capture the kernel-profile fixtures of tests/test_kernel_profile.py from the real profilers (CPU, .venv).

    for k in pytorch/transformer/default pytorch/transformer/compiled pytorch/resnet18/default \
             tensorflow/transformer/default tensorflow/transformer/eager tensorflow/transformer/compiled \
             tensorflow/resnet18/default; do .venv/bin/python tests/data/kernel_profiles/capture.py $k; done

Runs the study's profile trials (kit.workloads.kernel_profile_torch / _keras) on tiny models: the quick
profile's Transformer (tf.function, eager and XLA in TensorFlow; eager and torch.compile aot_eager in
PyTorch) and resnet18 at 32 px (convolutions, batch norm, pooling). Writes each trial's ``kernel_profile``
(names.json: every table as the trial returns it) and keeps the smallest real TensorFlow XSpace
(transformer_graph.xplane.pb.gz, transformer_xla.xplane.pb.gz) for the parser test. One run per process, as in a
trial (Keras numbers a second optimizer's scope "sgd_1").
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
HERE = Path(__file__).resolve().parent


class _Markers:
    def __init__(self, path: Path) -> None:
        self.path, self.sync = path, (lambda: None)

    def event(self, event: str, **fields: object) -> None:
        pass

    def close(self) -> None:
        pass


def request(framework: str, model: str, execution: str) -> dict:
    wl = {"name": "dai_factors", "model": model, "image_size": 32, "num_classes": 10, "seq_len": 16, "tiny": True,
          "repeats": 3, "mode": "profile", "memory_cap_mb": 0, "cudnn_autotune": "off", "layout": "nhwc",
          "execution": execution, "compile_backend": "aot_eager", "precision": "fp32", "input_pipeline": False,
          "batch_size": 4, "epochs": 1, "learning_rate": 0.01, "momentum": 0.9, "warmup_steps": 1, "device": "cpu",
          "threads": 1, "tf32": "off", "profile_steps": 3}
    return {"schema": 1, "framework": framework, "workload": wl, "seed": 7, "device": "cpu", "threads": 1,
            "gpu_indices": [], "gpu_uuids": []}


def main() -> None:
    which = sys.argv[1]
    out: dict[str, dict] = json.loads((HERE / "names.json").read_text()) if (HERE / "names.json").exists() else {}
    runs = [("pytorch", "transformer", "default"), ("pytorch", "transformer", "compiled"),
            ("pytorch", "resnet18", "default"), ("tensorflow", "transformer", "default"),
            ("tensorflow", "transformer", "eager"), ("tensorflow", "transformer", "compiled"),
            ("tensorflow", "resnet18", "default")]
    for fw, model, ex in runs:
        if which != f"{fw}/{model}/{ex}":
            continue
        work = Path(tempfile.mkdtemp(prefix="kp-"))
        try:
            if fw == "pytorch":
                from kit.workloads import kernel_profile_torch as mod
            else:
                from kit.workloads import kernel_profile_keras as mod  # type: ignore[no-redef]
            res, _ = mod.run(request(fw, model, ex), work, _Markers(work / "markers.jsonl"))
            out[f"{fw}/{model}/{ex}"] = res["kernel_profile"]
            xplanes = sorted((work / "kernel_profile_tf").rglob("*.xplane.pb"))
            if fw == "tensorflow" and model == "transformer" and ex == "default" and xplanes:
                (HERE / "transformer_graph.xplane.pb.gz").write_bytes(gzip.compress(xplanes[0].read_bytes(), 9, mtime=0))
            if fw == "tensorflow" and model == "transformer" and ex == "compiled" and xplanes:
                (HERE / "transformer_xla.xplane.pb.gz").write_bytes(gzip.compress(xplanes[0].read_bytes(), 9, mtime=0))
            print(fw, model, ex, [(t["domain"], t["n_names"], round(t["total_s"], 4)) for t in res["kernel_profile"]["tables"]])
        finally:
            shutil.rmtree(work, ignore_errors=True)
    (HERE / "names.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
