"""Model zoo in PyTorch: torchvision models and the sequence models, timed train steps and inference.

Runs inside the framework image. One trial: build the model (random weights),
random inputs (``zoo.input_batch``), an untimed warm-up, then ``repeats``
timed training steps (phase ``train``) and ``repeats`` timed forward passes
(phase ``infer``), each step synchronised so its time is true. With
``min_phase_s`` each phase repeats its ``repeats`` steps until it lasts that
long (the trained weights of random inputs are no result, so nothing is
reset): every step's time is kept, the phase times stay per ``repeats``
steps. The factors of
Dai et al. (cuDNN autotuning, layout, compilation, mixed precision, input
pipeline) are workload parameters applied here.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from kit.workloads import zoo, zoo_pin
from kit.workloads.common import Markers, apply_memory_cap
from kit.workloads.device import min_phase_s, pass_results, repeat_inference, repeat_training
from kit.workloads.torch_env import device_sync, is_oom, setup, torch_env

__all__ = ["build", "flops_per_example", "is_oom", "param_count", "run"]


class LstmLM(nn.Module):
    """Word-level LSTM language model (Zaremba et al. 2014 medium): embedding, stacked LSTM, vocabulary softmax."""

    def __init__(self, vocab: int, embed: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, num_layers=layers, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.lstm(self.embed(x))
        return self.out(h)  # (batch, time, vocab)


class TransformerClassifier(nn.Module):
    """BERT-style encoder (post-norm, GELU, learned positions) with mean pooling and a class head."""

    def __init__(self, vocab: int, d_model: int, heads: int, ffn: int, layers: int, classes: int, max_len: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, ffn, dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(x.shape[1], device=x.device)
        return self.head(self.encoder(self.embed(x) + self.pos(pos)).mean(dim=1))


class SpeechCRNN(nn.Module):
    """DeepSpeech2-like: two strided 2-D convolutions over (time, frequency), bidirectional GRUs, class head."""

    def __init__(self, freq: int, channels: int, hidden: int, layers: int, classes: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(1, channels, (11, 41), stride=(2, 2), padding=(5, 20)), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.Conv2d(channels, channels, (11, 21), stride=(1, 2), padding=(5, 10)), nn.BatchNorm2d(channels), nn.ReLU(),
        )
        f = (freq + 1) // 2
        f = (f + 1) // 2
        self.rnn = nn.GRU(channels * f, hidden, num_layers=layers, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x.unsqueeze(1))  # (batch, channels, time', freq')
        b, c, t, f = h.shape
        h, _ = self.rnn(h.permute(0, 2, 1, 3).reshape(b, t, c * f))
        return self.head(h.mean(dim=1))


def build(model: str, num_classes: int, tiny: bool, seq_len: int) -> nn.Module:
    """The named model with random weights."""
    if model in zoo.VISION:
        import torchvision

        kwargs: dict[str, Any] = {"weights": None, "num_classes": num_classes}
        if model == "inception_v3":
            kwargs.update(aux_logits=False, init_weights=True)
        return getattr(torchvision.models, zoo.VISION[model][0])(**kwargs)
    s = zoo.seq_sizes(model, tiny)
    if model == "lstm_lm":
        return LstmLM(s["vocab"], s["embed"], s["hidden"], s["layers"])
    if model == "transformer":
        return TransformerClassifier(s["vocab"], s["d_model"], s["heads"], s["ffn"], s["layers"], num_classes, seq_len)
    return SpeechCRNN(s["freq"], s["channels"], s["hidden"], s["layers"], s["classes"])


def param_count(model: nn.Module) -> int:
    """Trainable parameters (buffers such as batch-norm running statistics are not parameters)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def flops_per_example(model: str, num_classes: int, tiny: bool, seq_len: int, image_size: int) -> float | None:
    """Forward FLOPs of one example, counted by torch.utils.flop_counter on the meta device (no compute)."""
    from torch.utils.flop_counter import FlopCounterMode

    try:
        with torch.device("meta"):
            m = build(model, num_classes, tiny, seq_len).eval()
            x, _ = zoo.input_batch(model, 1, image_size, seq_len, tiny, num_classes, 0, False)
            xt = torch.empty(x.shape, dtype=torch.float32 if x.dtype.kind == "f" else torch.int64)
            counter = FlopCounterMode(display=False)
            with counter:
                m(xt)
        return float(counter.get_total_flops())
    except Exception:  # an op without a meta kernel: FLOPs unknown, not a failed trial
        return None


def run(req: dict[str, Any], data_dir: Path, markers: Markers) -> tuple[dict[str, Any], dict[str, Any]]:
    wl, seed = req["workload"], int(req["seed"])
    zoo.check_params(wl)
    cores = zoo_pin.threads_asked(wl, req.get("threads"))
    pinned = zoo_pin.pin(cores) if cores else None  # every thread on the asked cores before any pool starts
    if pinned is not None:
        torch.set_num_threads(cores)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError as exc:  # the inter-op pool already started: this trial cannot have what was asked
            raise zoo_pin.CpuPinError(f"torch.set_num_interop_threads(1) refused: {exc}",
                                      "pin in a fresh trial process, before the first parallel op") from None
    elif req.get("threads") or wl.get("threads"):
        torch.set_num_threads(int(req.get("threads") or wl["threads"]))
    torch.manual_seed(seed)
    device, tf32 = setup(req)
    markers.sync = lambda: device_sync(device)
    name, bs, size = wl["model"], int(wl["batch_size"]), int(wl["image_size"])
    tiny, seq_len, classes = bool(wl["tiny"]), int(wl["seq_len"]), int(wl["num_classes"])
    repeats, mode = int(wl["repeats"]), wl["mode"]
    precision = wl.get("precision", "fp32")
    channels_last = wl.get("layout", "native") == "nhwc" and name in zoo.VISION
    torch.backends.cudnn.benchmark = wl.get("cudnn_autotune", "native") == "on"  # native: PyTorch's default, off

    model = build(name, classes, tiny, seq_len).to(device)
    n_params = param_count(model)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    x_np, y_np = zoo.input_batch(name, bs, size, seq_len, tiny, classes, seed, False)
    pipeline = bool(wl.get("input_pipeline", False))
    if pipeline:  # batches come from host memory through a DataLoader each step (copy in the timed step)
        ds = torch.utils.data.TensorDataset(torch.from_numpy(x_np).repeat_interleave(2, 0),
                                            torch.from_numpy(y_np).repeat_interleave(2, 0))
        loader = torch.utils.data.DataLoader(ds, batch_size=bs, shuffle=True, pin_memory=device.type == "cuda",
                                             drop_last=True)
    x = torch.from_numpy(x_np).to(device).contiguous(memory_format=fmt) if x_np.ndim == 4 else \
        torch.from_numpy(x_np).to(device)
    y = torch.from_numpy(y_np).to(device)

    def batches():
        while True:
            if not pipeline:
                yield x, y
                continue
            for xb, yb in loader:
                xb = xb.to(device, non_blocking=True)
                yield (xb.contiguous(memory_format=fmt) if xb.ndim == 4 else xb), yb.to(device, non_blocking=True)

    fwd: nn.Module | Any = (torch.compile(model, backend=wl.get("compile_backend", "inductor"))
                                if wl.get("execution") == "compiled" else model)
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=float(wl["learning_rate"]), momentum=float(wl["momentum"]))

    def loss_of(out: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        return loss_fn(out.reshape(-1, out.shape[-1]).float(), yb.reshape(-1))

    def step(xb: torch.Tensor, yb: torch.Tensor) -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=amp or torch.float32, enabled=amp is not None):
            loss = loss_of(fwd(xb), yb)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()

    def infer(xb: torch.Tensor) -> None:
        with torch.inference_mode(), torch.autocast(device.type, dtype=amp or torch.float32, enabled=amp is not None):
            fwd(xb)

    apply_memory_cap(int(wl.get("memory_cap_mb", 0)))
    it = batches()
    train = mode == "train_infer"
    markers.start("warmup")
    for _ in range(int(wl["warmup_steps"])):
        xb, yb = next(it)
        if train:
            model.train()
            step(xb, yb)
        model.eval()
        infer(xb)
    markers.end("warmup")

    results: dict[str, Any] = {"model": name, "param_count": n_params, "batch_size": bs, "image_size": size}
    items = bs * zoo.items_per_example(name, seq_len)
    min_s = min_phase_s(req)
    trained = None
    if train:
        model.train()
        train_steps: list[float] = []

        def train_pass() -> None:  # `repeats` training steps, each timed
            for _ in range(repeats):
                xb, yb = next(it)
                t0 = time.perf_counter()
                step(xb, yb)
                device_sync(device)
                train_steps.append(time.perf_counter() - t0)

        markers.start("train")
        trained = repeat_training(train_pass, lambda: None, min_s, lambda: device_sync(device))
        train_s = trained.per_pass_s(markers.end("train", images=bs * repeats * trained.passes,
                                                 passes=trained.passes))
        results.update(train_time_s=train_s, train_step_s=train_steps, train_throughput_ips=bs * repeats / train_s,
                       train_items_per_s=items * repeats / train_s)
    model.eval()
    infer_steps: list[float] = []

    def infer_pass() -> None:  # `repeats` forward passes, each timed
        for _ in range(repeats):
            xb, _ = next(it)
            t0 = time.perf_counter()
            infer(xb)
            device_sync(device)
            infer_steps.append(time.perf_counter() - t0)

    markers.start("infer")
    inferred = repeat_inference(infer_pass, min_s, lambda: device_sync(device))
    infer_s = inferred.per_pass_s(markers.end("infer", images=bs * repeats * inferred.passes, passes=inferred.passes))
    results.update(infer_time_s=infer_s, infer_step_s=infer_steps, infer_throughput_ips=bs * repeats / infer_s,
                   infer_latency_per_image_s=infer_s / (bs * repeats), **pass_results(trained, inferred))
    env = torch_env(device, tf32, precision, conv_dominant=name in zoo.VISION)
    flops = flops_per_example(name, classes, tiny, seq_len, size)
    if device.type == "cuda":
        peak, source = zoo.gpu_peak_flops(env["device_name"], env["precision"])
    else:
        peak, source = zoo.cpu_peak_flops(torch.get_num_threads())
    if pinned is not None:  # read back after the timed phases: every thread, and the counts torch reports
        env["cpu_pinning"] = zoo_pin.checked(pinned, torch.get_num_threads(), torch.get_num_interop_threads()).as_dict()
    results.update(flops_per_example_fwd=flops, peak_flops=peak, peak_source=source, precision=precision,
                   layout="NHWC (channels_last)" if channels_last else "NCHW", execution=wl.get("execution", "default"),
                   input_pipeline=pipeline)
    return results, env

