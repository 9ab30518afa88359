"""A profile trial in TensorFlow: tf.profiler.experimental around the training steps of zoo_keras's train phase.

The trial runs ``kit.workloads.zoo_keras.run`` unchanged (same model, factors, warm-up and step: tf.function,
eager or XLA) with :class:`kit.workloads.kernel_profile.ProfileMarkers` in place of the harness's markers:
``tf.profiler.experimental.start(logdir)`` when the train phase starts (after the warm-up, which traced and
compiled the step), ``stop()`` when it ends, over ``profile_steps`` steps. The logdir is inside the trial's
work directory (removed with it after the trial); its XSpace is parsed here
(:mod:`kit.workloads.kernel_profile_xplane`, no tensorboard-plugin-profile needed) into the typed tables the
trial returns. The wrapped run's times are dropped (profiling perturbs them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from kit.workloads import kernel_profile as kp
from kit.workloads import kernel_profile_xplane as xp
from kit.workloads.common import Markers, WorkloadError


def tables_from_logdir(logdir: Path, steps: int) -> list[kp.KernelTable]:
    """The cpu (host ops) and, where the trace has device planes, gpu (kernels) tables of one profile."""
    files = xp.find_xplanes(logdir)
    if not files:
        raise WorkloadError(f"TensorFlow's profiler wrote no *.xplane.pb under {logdir}/plugins/profile")
    planes = [p for f in files for p in xp.read_xspace(f)]
    totals = xp.space_totals(planes)
    if not totals["cpu"]:
        raise WorkloadError(f"TensorFlow's profile in {files[0]} holds no op event on the host plane")
    tables = [kp.build_table("cpu", "tf.profiler (XSpace): self host time per op type", steps, totals["cpu"])]
    if totals["gpu"]:
        tables.append(kp.build_table("gpu", "tf.profiler (XSpace, CUPTI): device time per kernel", steps,
                                     totals["gpu"]))
    return tables


def run(req: dict[str, Any], data_dir: Path, markers: Markers) -> tuple[dict[str, Any], dict[str, Any]]:
    from kit.workloads import zoo_keras

    sub = kp.profile_request(req)
    steps = int(sub["workload"]["repeats"])
    logdir = Path(getattr(markers, "path", Path("markers.jsonl"))).parent / "kernel_profile_tf"
    logdir.mkdir(exist_ok=True)

    def start() -> None:
        from kit.workloads import tf_env

        tf_env.tf.profiler.experimental.start(str(logdir))

    def stop() -> None:
        from kit.workloads import tf_env

        tf_env.tf.profiler.experimental.stop()

    pm = kp.ProfileMarkers(markers, on_start=start, on_end=stop)
    results, env = zoo_keras.run(sub, data_dir, cast(Markers, pm))  # a stand-in with Markers' methods
    if not pm.profiled:
        raise WorkloadError("the profile trial ran no train phase to profile (mode must be train_infer)")
    tables = tables_from_logdir(logdir, steps)
    note = "" if len(tables) > 1 else "no device plane in the trace: host ops only"
    out = {k: results[k] for k in kp.KEPT_RESULTS if k in results}
    out["kernel_profile"] = kp.profile_result("tensorflow", tables, note)
    return out, env
