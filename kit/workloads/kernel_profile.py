"""Kernel/op profiles of one training configuration: the common op types and the typed table a trial returns.

Why. Dai et al. explain the TensorFlow/PyTorch gap by what runs underneath (cuDNN algorithm choice, data
layout and its NCHW<->NHWC conversions, graph vs eager, the input pipeline). The factorial says how much
each factor moves the gap; this says WHICH kernels or ops differ. A profile trial (``profile_kernels``)
runs the same training step as a timed trial (``zoo_torch`` / ``zoo_keras``), with the framework's
profiler around the steps of its train phase; it is never a timed trial (profiling perturbs timing), and
its results carry no times the analysis tests (``kernel_profile_torch`` / ``kernel_profile_keras``).

Framework-neutral (standard library only): imported in both images and by the study's host-side reader,
which re-validates every table (the trial's output is untrusted) with the same caps and the same op-type
table. ``op_type`` is a pure function of a name: an ordered, data-driven list of patterns (``RULES``),
first match wins, tested on real names of both profilers (tests/data/kernel_profiles/).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

SCHEMA = 1
MAX_ROWS = 40  # rows a table keeps (largest self time first); the rest is summed into other_s
MAX_NAME_CHARS = 160  # a kernel name longer than this is cut (CUDA template names run to kilobytes)
MAX_NAMES = 100_000  # distinct names a profile may hold before the trial refuses it
DOMAINS = ("cpu", "gpu")  # cpu: ops timed on the host (self CPU time); gpu: kernels timed on the device

# op type -> its label in the report. "other" is the catch-all and always last.
OP_TYPES: dict[str, str] = {
    "conv_fwd": "convolution forward",
    "conv_bwd": "convolution backward (data and filter gradients)",
    "matmul": "matmul / GEMM (incl. fused attention)",
    "rnn": "fused RNN (LSTM / GRU)",
    "norm": "batch / layer norm",
    "pooling": "pooling",
    "reduction": "reduction (sums, means, softmax, losses)",
    "elementwise": "elementwise (activations, arithmetic, fills)",
    "layout": "memcpy / transpose / layout conversion",
    "optimizer": "optimizer update",
    "other": "other (views, gathers, framework overhead)",
}

# (op type, patterns): a name (lower case, autograd's "evaluate_function: " wrapper dropped) takes the type of
# the first rule with a pattern found in it; a type may have several rules. The order matters: framework
# bookkeeping and view ops first (their names hold "add", "select", "log"), optimizer scopes before the
# arithmetic they hold, BiasAddGrad before "dgrad", convolution backward before forward, convolutions
# before GEMM (implicit-GEMM convolution kernels name "gemm"), pooling and softmax before reductions and
# elementwise, layout conversions before the generic XLA "fusion".
RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("other", (r"aotdispatcher", r"torchdynamo", r"torch-compiled", r"compiledfunction", r"cache lookup",
               r"profilerstep", r"syncdevice", r"\[memory\]", r"broadcastgradientargs", r"expanddims",
               r"^aten::(view|reshape|as_strided|t|transpose|permute|select|squeeze|unsqueeze|expand|slice|detach|"
               r"empty\w*|_unsafe_view|resize_|alias|narrow|unbind|split|chunk|_reshape_alias|lift_fresh)\b",
               r"^(view|unsafeview|reshape|transpose|t|permute|select|squeeze|unsqueeze|expand|slice|alias|"
               r"split|unbind)backward")),
    ("optimizer", (r"^optimizer\.", r"^(sgd|adam\w*|rmsprop|adagrad|momentum|loss_scale_optimizer)(_\d+)?/",
                   r"_foreach_", r"multi_tensor_apply", r"applymomentum", r"applygradientdescent",
                   r"resourceapply", r"fused_sgd")),
    ("elementwise", (r"accumulategrad", r"unaryops")),
    ("reduction", (r"biasaddgrad",)),
    ("conv_bwd", (r"convolution_?backward", r"conv\w*backprop", r"backprop\w*conv", r"dgrad", r"wgrad",
                  r"convbackward", r"conv\w*_bwd", r"bwd\w*conv", r"conv_transpose")),
    ("conv_fwd", (r"conv", r"fprop", r"winograd", r"implicit_gemm", r"direct_group")),
    ("rnn", (r"lstm", r"gru", r"\brnn", r"_rnn", r"cudnnrnn", r"rnn_")),
    ("pooling", (r"pool", r"reduce-window", r"reduce_window")),
    ("norm", (r"batch_?norm", r"layer_?norm", r"fusedbatchnorm", r"bn_fw", r"bn_bw", r"welford", r"group_?norm",
              r"instance_?norm")),
    ("matmul", (r"aten::(mm|bmm|addmm|addbmm|baddbmm|matmul|linear)\b", r"^(add)?b?mmbackward", r"linearbackward",
                r"matmul", r"gemm", r"gemv", r"cublas", r"cutlass", r"xmma", r"\bdot\b", r"^dot", r"einsum",
                r"scaled_?dot_?product", r"flash", r"attention", r"fmha", r"^mm$", r"^bmm$")),
    ("reduction", (r"softmax", r"cross_?entropy", r"nll_?loss", r"reduce", r"\bsum\b", r"^sum", r"\bmean\b",
                   r"^mean", r"\bprod\b", r"^prod", r"^max$", r"^min$", r"argmax", r"argmin",
                   r"aten::(sum|mean|max|min|amax|amin|norm|prod|var|std)\b", r"^(all|any)$")),
    ("layout", (r"memcpy", r"memset", r"copy", r"transpose", r"permute", r"contiguous", r"nchw", r"nhwc",
                r"reorder", r"aten::to\b", r"_to_copy", r"clone", r"concat", r"\bcat\b", r"aten::cat",
                r"broadcast", r"tile", r"bitcast", r"layout", r"dtoh", r"htod", r"dtod", r"constant_pad",
                r"_eagerconst", r"eagercopy", r"iteratorgetnext", r"prefetch")),
    ("other", (r"gather", r"scatter", r"embedding", r"index_select", r"segmentsum")),
    ("elementwise", (r"elementwise", r"vectorized", r"unrolled", r"fusion", r"wrapped_", r"add", r"sub", r"mul",
                     r"div", r"relu", r"gelu", r"tanh", r"sigmoid", r"exp", r"log", r"sqrt", r"neg", r"pow",
                     r"maximum", r"minimum", r"select", r"where", r"fill", r"zero", r"clamp", r"abs", r"square",
                     r"cast", r"dropout", r"bias", r"threshold", r"erf", r"sign", r"silu", r"hardtanh",
                     r"reciprocal", r"iota", r"arange", r"ones", r"lerp", r"fma", r"^less", r"^greater",
                     r"^equal", r"^not_?equal", r"logical")),
)
AUTOGRAD_WRAPPER = "autograd::engine::evaluate_function: "
_COMPILED: tuple[tuple[str, tuple[re.Pattern[str], ...]], ...] = tuple(
    (t, tuple(re.compile(p) for p in ps)) for t, ps in RULES)


def op_type(name: str) -> str:
    """The common op type of a framework op or device kernel name (a key of OP_TYPES); "other" if no rule fits."""
    low = name.lower().strip()
    if low.startswith(AUTOGRAD_WRAPPER):
        low = low[len(AUTOGRAD_WRAPPER):]
    for kind, patterns in _COMPILED:
        if any(p.search(low) for p in patterns):
            return kind
    return "other"


def clean_name(name: str) -> str:
    """A name as a table keeps it: printable, one line, at most MAX_NAME_CHARS characters."""
    text = "".join(ch if ch.isprintable() else "?" for ch in str(name)).strip()
    return text if len(text) <= MAX_NAME_CHARS else text[: MAX_NAME_CHARS - 1] + "…"


@dataclass(frozen=True)
class OpTotal:
    """One name's totals over the profiled steps: self time (the domain's clock) and calls."""

    name: str
    self_s: float
    calls: int


@dataclass(frozen=True)
class KernelRow:
    """One row of a table: the name, its op type, self time over the profiled steps, calls, share of the total."""

    name: str
    op_type: str
    self_s: float
    calls: int
    share: float


@dataclass(frozen=True)
class KernelTable:
    """The top names of one time domain of one profile trial, and every name's time summed by op type.

    ``total_s`` is the sum of self times over all names (on a CPU with several threads it can exceed the
    steps' wall time: it is time spent, not elapsed); ``other_s`` the part of it beyond the kept rows;
    ``by_type_s`` covers every name, kept or not.
    """

    domain: str
    source: str
    steps: int
    total_s: float
    n_names: int
    rows: tuple[KernelRow, ...]
    other_s: float
    by_type_s: Mapping[str, float]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["rows"] = [asdict(r) for r in self.rows]
        d["by_type_s"] = dict(self.by_type_s)
        return d


def build_table(domain: str, source: str, steps: int, totals: Iterable[OpTotal], max_rows: int = MAX_ROWS
                ) -> KernelTable:
    """The typed table of one domain from per-name totals (names merged after cleaning, negatives refused)."""
    if domain not in DOMAINS:
        raise ValueError(f"domain {domain!r} is not one of {DOMAINS}")
    merged: dict[str, list[float]] = {}
    for t in totals:
        if not (math.isfinite(t.self_s) and t.self_s >= 0 and t.calls >= 0):
            raise ValueError(f"op {t.name!r}: self time {t.self_s!r} / calls {t.calls!r} not finite and >= 0")
        acc = merged.setdefault(clean_name(t.name), [0.0, 0])
        acc[0] += t.self_s
        acc[1] += t.calls
        if len(merged) > MAX_NAMES:
            raise ValueError(f"more than {MAX_NAMES} distinct op names in one profile")
    total = sum(v[0] for v in merged.values())
    by_type: dict[str, float] = {k: 0.0 for k in OP_TYPES}
    for name, (s, _) in merged.items():
        by_type[op_type(name)] += s
    order = sorted(merged.items(), key=lambda kv: (-kv[1][0], kv[0]))
    rows = tuple(KernelRow(name, op_type(name), s, int(c), s / total if total > 0 else 0.0)
                 for name, (s, c) in order[:max_rows])
    return KernelTable(domain, source, int(steps), total, len(merged), rows,
                       max(0.0, total - sum(r.self_s for r in rows)), by_type)


def profile_result(framework: str, tables: Iterable[KernelTable], note: str = "") -> dict[str, Any]:
    """The ``kernel_profile`` entry of a profile trial's results (what the host reader validates)."""
    return {"schema": SCHEMA, "framework": framework, "note": note, "tables": [t.to_json() for t in tables]}


class ProfileMarkers:
    """Stands in for the harness's Markers in a profile trial: the train phase starts and stops the profiler.

    The timed phases of the wrapped workload become plain events (``profile_phase_start`` / ``_end``), so the
    trial records no train or infer phase: the collectors attribute nothing to a timed phase and the
    analysis finds no time to test in it. ``on_start`` / ``on_end`` run after the device is synchronised.
    """

    def __init__(self, inner: Any, on_start: Callable[[], None], on_end: Callable[[], None],
                 phase: str = "train") -> None:
        self.inner, self.phase = inner, phase
        self._on_start, self._on_end = on_start, on_end
        self._open: dict[str, float] = {}
        self.profiled = False

    @property
    def sync(self) -> Any:
        return self.inner.sync

    @sync.setter
    def sync(self, fn: Callable[[], None]) -> None:
        self.inner.sync = fn

    def event(self, event: str, **fields: Any) -> None:
        self.inner.event(event, **fields)

    def start(self, phase: str) -> float:
        import time

        self.inner.sync()
        self.inner.event("profile_phase_start", phase=phase)
        if phase == self.phase:
            self._on_start()
            self.profiled = True
        t0 = time.perf_counter()
        self._open[phase] = t0
        return t0

    def end(self, phase: str, **fields: Any) -> float:
        import time

        self.inner.sync()
        dt = time.perf_counter() - self._open.pop(phase)
        if phase == self.phase:
            self._on_end()
        self.inner.event("profile_phase_end", phase=phase, duration_s=dt, **fields)
        return dt

    def close(self) -> None:
        self.inner.close()


def repetition_of(req: Mapping[str, Any]) -> int | None:
    """The trial's repetition from its id (``r001-c03-pytorch``, kit.plan), None when the id has no such form."""
    m = re.match(r"^r(\d{1,6})-", str(req.get("trial_id") or ""))
    return int(m.group(1)) if m else None


def profile_request(req: Mapping[str, Any]) -> dict[str, Any]:
    """The request a profile trial hands the timed workload: ``profile_steps`` training steps in one pass
    (no minimum phase time), then as many forward passes; everything else (model, factors) unchanged.

    One profile per configuration and framework is the view: a later repetition of the profile
    configuration is skipped by design (SkipTrial, before the framework is imported), so the design's
    repetitions do not multiply the profiling time.
    """
    from kit.workloads.common import SkipTrial, WorkloadError

    rep = repetition_of(req)
    if rep is not None and rep > 0:
        raise SkipTrial(f"kernel profile taken in repetition 0 only (this is repetition {rep}): one profile per "
                        "configuration and framework")
    wl = dict(req["workload"])
    if wl.get("mode") != "profile":
        raise WorkloadError(f"a profile trial needs mode = 'profile' (got {wl.get('mode')!r})")
    steps = wl.get("profile_steps", 5)
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= 1000:
        raise WorkloadError(f"profile_steps {steps} is not in [1, 1000]")
    wl.update(repeats=steps, min_phase_s=0.0, mode="train_infer")
    return {**req, "workload": wl}


# Keys of the wrapped workload's results a profile trial keeps: what it ran, never a time the analysis tests.
KEPT_RESULTS = ("model", "param_count", "batch_size", "image_size", "precision", "layout", "execution",
                "input_pipeline")
